/* exec.h - the executor: runs a node's ranks as process trees.
 *
 * Each rank runs under a small shim process: the agent forks the shim, the
 * shim calls setsid() (so it outlives an agent killed with SIGKILL), forks
 * the rank's command into a new process group (and, where the machine has
 * a writable v1 cgroup hierarchy, a per-rank cgroup: agent/cgroup.h),
 * waits for it and writes its wait status to a file. Files per rank, under
 * WORK_DIR/attempts/<attempt_id>/:
 *
 *   rank-R.json   the record (attempt, rank, job, grace, start time), written
 *                 by the agent before the fork; removed by exec_forget()
 *   rank-R.pid    "SHIM_PID COMMAND_PGID\n", written by the shim
 *   rank-R.exit   "WAIT_STATUS\n", written by the shim when the command ends
 *   rank-R.log    the command's stdout and stderr (appended)
 *   output/       ANVIL_OUTPUT_DIR, the default working directory
 *
 * so a new executor over the same work dir (exec_new) re-adopts the ranks
 * that still run and reads the real exit status of those that ended.
 *
 *   exec_start ──► RUNNING ──(command ends, exec_poll)──────────► EXITED
 *       │             └─exec_stop: TERM to group and cgroup,     ▲
 *       │               KILL at grace (exec_poll)────────────────┘
 *       └─(cannot prepare or fork)──► FAILED          (failed_to_start)
 *   EXITED|FAILED ──exec_ack──► acked ──exec_forget──► gone
 *
 * When a rank ends, whatever it left behind in its group or cgroup is
 * killed. The executor is not thread-safe: one thread owns it. It never
 * installs signal handlers; the owner calls exec_poll() on SIGCHLD and when
 * exec_next_poll_ms() says so.
 */
#ifndef ANVIL_AGENT_EXEC_H
#define ANVIL_AGENT_EXEC_H

#include <stddef.h>
#include <stdint.h>

struct exec;

enum exec_state { EXEC_RUNNING, EXEC_EXITED, EXEC_FAILED };

struct exec_spec {
	int64_t attempt_id;
	int rank;
	int64_t job_id;
	const char *const *argv; /* NULL-terminated, argv[0] not empty */
	const char *cwd;         /* NULL: the attempt's output directory */
	const char *const *env;  /* "KEY=VALUE", NULL-terminated; may be NULL */
	int64_t grace_ms;        /* SIGTERM-to-SIGKILL grace when stopping */
};

struct exec_status {
	int64_t attempt_id;
	int rank;
	int64_t job_id;
	enum exec_state state;
	int stopping;      /* exec_stop was called */
	int pid;           /* the command's process group id; 0 when unknown */
	int exit_code;     /* EXITED: the exit code, or 128 + signal */
	int signal;        /* EXITED: the signal that ended it, or 0 */
	const char *error; /* FAILED: why; borrowed until the next exec_ call */
	int acked;         /* the final state was acknowledged (exec_ack) */
};

/* Opens the executor over work_dir (created if needed) and re-adopts the
 * ranks recorded there. node_name names the cgroup folder. */
int exec_new(const char *work_dir, const char *node_name, struct exec **out);
/* Frees the executor without touching running ranks (they keep running);
 * removes the cgroups of finished ones (waits up to 100 ms for them). */
void exec_free(struct exec *e);
int exec_uses_cgroups(const struct exec *e);

/* Starts a rank: 0 when it runs, or when it could not start (then it is
 * FAILED with the reason); -EEXIST when the executor knows it already;
 * -EALREADY when it ran here before (its log exists): ranks never rerun. */
int exec_start(struct exec *e, const struct exec_spec *spec);
/* SIGTERM now, SIGKILL after the rank's grace (at most cap_ms if cap_ms is
 * >= 0). 0, or ERR_NOTFOUND. A rank that is not RUNNING is left alone. */
int exec_stop(struct exec *e, int64_t attempt_id, int rank, int64_t cap_ms);
void exec_stop_all(struct exec *e, int64_t cap_ms);

/* Reaps shims, reads exit files, sends due SIGKILLs and cleans cgroups;
 * returns how many ranks reached a final state. */
int exec_poll(struct exec *e);
/* Milliseconds until exec_poll is next due (besides SIGCHLD); -1: never. */
int64_t exec_next_poll_ms(const struct exec *e);

size_t exec_count(const struct exec *e);
int exec_running(const struct exec *e);
uint64_t exec_started_total(const struct exec *e);
/* The i-th rank (0 <= i < exec_count). */
void exec_get(const struct exec *e, size_t i, struct exec_status *out);
/* 0, or ERR_NOTFOUND. */
int exec_find(const struct exec *e, int64_t attempt_id, int rank, struct exec_status *out);

/* The server has recorded the rank's final state: stop reporting it. */
void exec_ack(struct exec *e, int64_t attempt_id, int rank);
/* Drops a final rank and its record (its log, exit file and output stay). */
void exec_forget(struct exec *e, int64_t attempt_id, int rank);

/* WORK_DIR/attempts/<attempt_id>/rank-<rank>.log; free() it. */
char *exec_log_path(const char *work_dir, int64_t attempt_id, int rank);

#endif
