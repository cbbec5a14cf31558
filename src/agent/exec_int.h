/* exec_int.h - the executor's internals, shared by its files; nothing
 * outside src/agent/exec*.c includes it. The public API is exec.h.
 *
 *   exec.c          the ranks (find, add, drop), stopping and polling them,
 *                   their end, exec_new and exec_free
 *   exec_journal.c  the ranks' records in the journal: written, read back
 *                   for running ranks, compacted, replayed on a restart
 *   exec_launch.c   a rank's start: log, environment, output directory
 *                   (empty ones recycled), the shim launched
 *   exec_limits.c   CPU, memory and GPU device limits in cgroups
 *   exec_spares.c   the spare-shim pool
 *
 * Ownership: struct exec owns its ranks (exec_rank_add makes one,
 * exec_rank_drop frees it), the spares in its pool, and every path and fd
 * kept in these structs. A struct launch lives on exec_start's stack for
 * one start; its fds and strings are freed by launch_cleanup. Like the
 * executor, all of it belongs to the one thread that owns the executor:
 * nothing here takes a lock.
 */
#ifndef ANVIL_AGENT_EXEC_INT_H
#define ANVIL_AGENT_EXEC_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/exec.h"
#include "agent/shim.h"

#define EXEC_SPARE_IDLE_MS 5000 /* a reused shim above the wanted number ends after this */

/* The executor's running rank: one rank of an attempt on this node, in
 * e->ranks from its start (or its record, read back) until exec_forget.
 * (The server's view of a rank is model/model.h's struct rank; this is the
 * node's.) Its state changes only through exec_rank_move. */
struct exec_rank {
	int64_t attempt_id;
	int rank;
	int64_t job_id;
	int64_t grace_ms;
	int64_t start_wall_ms;
	uint64_t seg; /* the journal segment its shim appends to */
	pid_t shim;   /* 0 when unknown; negative once reaped */
	int sock;     /* our end of the shim's socket while it runs our rank; -1 */
	pid_t pgid;   /* the command's process group; 0 when unknown */
	int own;      /* the shim is our child */
	int spare;    /* the shim came from a spare: it is in the rank's cgroup */
	enum exec_state state;
	int exit_code, signal;
	int oom_kills;                /* EXITED: the kernel's OOM kills in its memory cgroup */
	int wait_status, have_status; /* what the shim recorded */
	int lost;                     /* EXITED without a status: error says why */
	char *error;
	int stopping, killed;
	int64_t kill_at; /* monotonic ms: SIGKILL due */
	int64_t lost_at; /* monotonic ms: adopted without a pid, give up */
	int acked;
	char *cgroup;    /* NULL without cgroups */
	int cgroup_left; /* the cgroup directory still has to be removed */
	/* its limits' cgroups (exec.h, "Limits"), removed once it is final;
	 * NULL: none (or the same directory as an earlier one's) */
	char *limits[EXEC_LIMITS];
	int inline_limits; /* v2: its own cgroup carries limits (never a spare's again) */
	int session;       /* runs under a session holder: remove its socket at the end */
	int task;          /* runs the task wrapper: its task directory goes at the end */
	char **env;        /* as launched (exec.h, exec_context); NULL: not known */
	char *cwd;
	/* Started in a batch (exec_batch): its spare has the launch, and its
	 * SHIM_STARTED (the pid) is read by exec_settle; nlimits for its log. */
	int launching, nlimits;
};

/* A spare shim ready for the next rank (shim.h), in its own cgroup. */
struct spare {
	struct shim shim;
	char *cgroup;  /* ROOT/spare-<agent pid>-<n>; NULL without cgroups */
	int64_t since; /* monotonic ms: in the pool since */
};

/* The executor (exec.h). */
struct exec {
	char *work_dir;
	struct logpool *logs; /* rank logs made ahead; NULL: each start makes its own */
	char *cgroup_root;    /* NULL without cgroups */
	int null_fd;          /* /dev/null for every shim */
	int lease_fd;         /* WORK_DIR/lease (agent/lease.h), in every launch; -1: none */
	int64_t lease_end_ms; /* the lease written last (CLOCK_BOOTTIME); 0: none */
	int epoll_fd;         /* the sockets of the shims running our ranks */
	struct journal *journal;
	int loading; /* exec_new is reading the journal */
	struct exec_rank **ranks;
	size_t n, cap;
	uint64_t started, started_spare, reused;
	int batch;         /* exec_batch: spare launches do not wait for the pid */
	size_t nlaunching; /* ranks with launching set */
	struct spare spares[EXEC_SPARES_MAX]; /* oldest first */
	int nspares, want_spares;
	int trim; /* exec_set_spares lowered the number: end extras now */
	uint64_t spare_seq;
	pid_t *exiting; /* shims of forgotten ranks, still to reap */
	size_t nexiting;
	char *spare_dirs;    /* WORK_DIR/spare-output: empty directories to reuse */
	uint64_t *free_dirs; /* their names */
	size_t nfree_dirs;
	uint64_t dir_seq;
	int64_t spare_retry_at; /* monotonic ms */
	char **doomed;          /* spare cgroups still to empty and remove */
	size_t ndoomed;
	char *limit_root[EXEC_LIMITS]; /* ROOT in each limit's hierarchy; NULL: none */
	int limit_inline[EXEC_LIMITS]; /* v2: written into the rank's own cgroup instead */
	int limit_err[EXEC_LIMITS];    /* why not: a negative errno, or -EXDEV */
	int limit_err2[EXEC_LIMITS];   /* why not in v2 (0: not tried) */
	int v2;                        /* cgroup_root is in a cgroup v2 hierarchy */
	int limit_logged[EXEC_LIMITS]; /* a rank has been told it runs without */
	int isolate;                   /* GPU device isolation */
	char *self;                    /* this binary: the session holder's */
	struct fence *fence;           /* the ranks' fence (agent/fence.h); NULL: none */
	char *bundles;                 /* WORK_DIR/bundles, made 0711 when fenced */
	uint64_t *free_ranks;          /* WORK_DIR/rank/.spare/<n>: rank dirs to reuse */
	size_t nfree_ranks;
	uint64_t rank_seq;
	uint64_t ctx_version; /* exec_context_version */
};

/* A NULL-terminated vector of owned strings. */
struct strv {
	char **v;
	size_t n, cap;
};

/* One start's shim launch and the strings and fds it points to, made
 * before the fork (exec_launch.c); on exec_start's stack. */
struct launch {
	struct shim_launch l;
	const struct exec_spec *spec;
	struct strv argv, env;
	char *path, *cwd, *out_dir, *log_path, *err_path;
	char *rank_dir, *task_dir; /* exec_fence.c; task_dir: NULL but for a task */
	char **fence;              /* the fence's plan; NULL: none */
	char *msgs[3];
	char key[64]; /* the record's key: opens the shim's journal lines */
};

/* exec.c */
/* The one way r's state changes: the move must be in the agent rank table
 * (model/machine.h, MACHINE_AGENT_RANK; docs/states.md, "A rank on its
 * node"). 0, or ERR_CONFLICT, logged, with r's state kept. */
int exec_rank_move(struct exec_rank *r, enum exec_state to);
struct exec_rank *exec_rank_find(const struct exec *e, int64_t attempt_id, int rank, size_t *pos);
struct exec_rank *exec_rank_add(struct exec *e, int64_t attempt_id, int rank);
void exec_rank_drop(struct exec *e, size_t i);
void exec_rank_watch(struct exec *e, struct exec_rank *r, struct shim sh);
void exec_cgroup_tidy(struct exec_rank *r);
void exec_set_final(struct exec_rank *r, int st, const char *lost);
int exec_poll_running(struct exec *e, struct exec_rank *r, int64_t now, int live);
int exec_open_high(const char *path, int flags, unsigned mode);
void exec_doom_cgroup(struct exec *e, char *path);
void exec_tidy_doomed(struct exec *e);

/* exec_journal.c */
int exec_journal_put(struct exec *e, json_t *o);
int exec_journal_write(struct exec *e, struct exec_rank *r, int with_end);
void exec_journal_refresh(struct exec *e);
void exec_journal_compact(struct exec *e);
void exec_journal_load(struct exec *e);

/* exec_launch.c: vectors and environments */
void exec_strv_push(struct strv *s, char *owned);
void exec_strv_free(struct strv *s);
/* Sets "KEY=VALUE" (owned), replacing an earlier value of KEY. */
void exec_env_set(struct strv *s, char *kv);
const char *exec_env_get(const struct strv *s, const char *key);

/* exec_launch.c: output directories */
void exec_launch_output_done(struct exec *e, int64_t attempt_id);
void exec_launch_dirs_load(struct exec *e);

/* exec_fence.c: a rank's directory, and its fence where the executor has one */
void exec_fence_env(const struct exec *e, const struct exec_spec *spec, struct strv *env);
/* 0, or -EACCES with err set: the rank cannot work in cwd. */
int exec_fence_cwd(const struct exec *e, const struct exec_spec *spec, const char *cwd, char *err,
                   size_t errlen);
/* Makes the rank's directory and, fenced, hands its directories to its
 * account and plans its view into la (la->out_dir, log_path and err_path
 * set). 0, or a negative errno with err set. */
int exec_fence_prepare(struct exec *e, struct launch *la, const struct exec_spec *spec,
                       const char *ckpt, char *err, size_t errlen);
void exec_fence_forget(struct exec *e, int64_t attempt_id, int rank, int task);
/* The reusable rank directories a restarted agent finds (exec_new, and
 * exec_set_fence, which changes their mode). */
void exec_fence_load(struct exec *e);

/* exec_limits.c */
int exec_limits_left(const struct exec_rank *r);
int exec_limits_oom(const struct exec_rank *r);
void exec_limits_tidy(struct exec_rank *r);
void exec_limits_setup(struct exec *e, const char *group, int i);
void exec_limits_inline(struct exec *e, struct exec_rank *r, const struct exec_spec *spec);
void exec_limits_prepare(struct exec *e, struct exec_rank *r, const struct exec_spec *spec,
                         struct launch *la);

/* exec_spares.c */
void exec_spares_discard(struct exec *e, struct spare *s);
int exec_spares_out(const struct exec *e);
void exec_spares_refill(struct exec *e, int64_t now);
int exec_spares_reuse(struct exec *e, struct exec_rank *r);
int exec_spares_launch(struct exec *e, struct exec_rank *r, struct launch *la);

#endif
