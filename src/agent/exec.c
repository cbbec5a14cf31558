#include "agent/exec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/journal.h"
#include "agent/logpool.h"
#include "agent/shim.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define ADOPT_POLL_MS      250  /* adopted shims are not our children: no word from them */
#define STARTING_LOST_MS   5000 /* an adopted rank whose shim never recorded its pid */
#define CGROUP_RETRY_MS    20
#define SPARE_RETRY_MS     1000 /* after a spare could not be made */
#define EXEC_SPARE_IDLE_MS 5000 /* a reused shim above the wanted number ends after this */
#define SPARE_DIRS_MAX     64   /* empty output directories kept for reuse */

struct rank {
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
};

/* A spare shim ready for the next rank (shim.h), in its own cgroup. */
struct spare {
	struct shim shim;
	char *cgroup;  /* ROOT/spare-<agent pid>-<n>; NULL without cgroups */
	int64_t since; /* monotonic ms: in the pool since */
};

struct exec {
	char *work_dir;
	struct logpool *logs; /* rank logs made ahead; NULL: each start makes its own */
	char *cgroup_root;    /* NULL without cgroups */
	int null_fd;          /* /dev/null for every shim */
	int epoll_fd;         /* the sockets of the shims running our ranks */
	struct journal *journal;
	int loading; /* exec_new is reading the journal */
	struct rank **ranks;
	size_t n, cap;
	uint64_t started, started_spare, reused;
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
};

static const char *const limit_controllers[EXEC_LIMITS] = {"cpu", "memory", "devices"};

char *exec_log_path(const char *work_dir, int64_t attempt_id, int rank)
{
	return xasprintf("%s/logs/%lld-%d.log", work_dir, (long long)attempt_id, rank);
}

static struct rank *exec_rank_find(const struct exec *e, int64_t attempt_id, int rank, size_t *pos)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->ranks[i]->attempt_id == attempt_id && e->ranks[i]->rank == rank) {
			if (pos)
				*pos = i;
			return e->ranks[i];
		}
	return NULL;
}

static struct rank *exec_rank_add(struct exec *e, int64_t attempt_id, int rank)
{
	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 16;
		e->ranks = xrealloc(e->ranks, e->cap * sizeof(*e->ranks));
	}
	struct rank *r = xcalloc(1, sizeof(*r));
	r->attempt_id = attempt_id;
	r->rank = rank;
	r->sock = -1;
	if (e->cgroup_root)
		r->cgroup = xasprintf("%s/%lld-%d", e->cgroup_root, (long long)attempt_id, rank);
	e->ranks[e->n++] = r;
	return r;
}

static void rank_free(struct rank *r)
{
	for (int i = 0; i < EXEC_LIMITS; i++)
		free(r->limits[i]);
	free(r->error);
	free(r->cgroup);
	free(r);
}

/* Rank records live in the journal (agent/journal.h). The agent writes a
 * rank's line before its shim starts (with "error" if it could not start),
 * a snapshot of its final state when the segment its lines are in goes,
 * and "forgotten" when exec_forget drops it; the shim appends "shim" and
 * "pgid" once the command runs and "wait_status" when it ends. */

/* The rank's whole record as the agent knows it: its start line, and what
 * a snapshot carries of its end. */
static json_t *record_line(const struct rank *r, int with_end)
{
	json_t *o =
	        json_pack("{s:I,s:i,s:I,s:I,s:I}", "attempt_id", (json_int_t)r->attempt_id, "rank",
	                  r->rank, "job_id", (json_int_t)r->job_id, "grace_ms",
	                  (json_int_t)r->grace_ms, "start_time_ms", (json_int_t)r->start_wall_ms);
	if (r->error && !r->lost)
		json_object_set_new(o, "error", json_string(r->error));
	if (with_end && r->have_status)
		json_object_set_new(o, "wait_status", json_integer(r->wait_status));
	else if (with_end && r->lost)
		json_object_set_new(o, "lost", json_string(r->error ? r->error : "lost"));
	if (with_end && r->pgid > 0 && r->shim != 0)
		json_object_set_new(o, "pgid", json_integer(r->pgid));
	return o;
}

static int exec_journal_put(struct exec *e, json_t *o)
{
	char *text = jv_dump(o);
	json_decref(o);
	int rc = journal_append(e->journal, text, strlen(text));
	free(text);
	return rc;
}

/* Appends the rank's line; its shim then appends to the same segment. */
static int exec_journal_write(struct exec *e, struct rank *r, int with_end)
{
	int rc = exec_journal_put(e, record_line(r, with_end));
	r->seg = journal_seq(e->journal);
	return rc;
}

/* What the shim recorded: its pid and the command's group (once), and
 * the wait status. */
static void learn(struct rank *r, const json_t *o)
{
	int64_t shim = jv_int(o, "shim", 0), pgid = jv_int(o, "pgid", 0);
	if (r->shim == 0 && shim > 0 && pgid > 0 && shim <= INT32_MAX && pgid <= INT32_MAX) {
		r->shim = (pid_t)shim;
		r->pgid = (pid_t)pgid;
	}
	json_t *st = json_object_get(o, "wait_status");
	if (json_is_integer(st)) {
		r->wait_status = (int)json_integer_value(st);
		r->have_status = 1;
	}
}

/* Everything a line says about a rank being loaded (exec_new). */
static void load_fields(struct rank *r, const json_t *o, uint64_t seq)
{
	if (json_object_get(o, "start_time_ms")) {
		r->job_id = jv_int(o, "job_id", 0);
		r->grace_ms = jv_int(o, "grace_ms", 10000);
		r->start_wall_ms = jv_int(o, "start_time_ms", 0);
		r->seg = seq;
	}
	const char *error = jv_str(o, "error", NULL), *lost = jv_str(o, "lost", NULL);
	if (error || lost) {
		free(r->error);
		r->error = xstrdup(error ? error : lost);
		r->lost = !error;
	}
	if (json_is_integer(json_object_get(o, "pgid")) && !json_object_get(o, "shim"))
		r->pgid = (pid_t)jv_int(o, "pgid", 0); /* a snapshot's: the group is gone */
	learn(r, o);
}

static void exec_rank_drop(struct exec *e, size_t i);

/* journal_read's callback: while loading, builds the ranks; later, tells
 * running ranks what their shims recorded. */
static void on_line(void *ctx, uint64_t seq, json_t *o)
{
	struct exec *e = ctx;
	int64_t attempt_id = jv_int(o, "attempt_id", 0), rank = jv_int(o, "rank", -1);
	if (attempt_id <= 0 || rank < 0 || rank > (1 << 20))
		return;
	size_t i;
	struct rank *r = exec_rank_find(e, attempt_id, (int)rank, &i);
	if (json_object_get(o, "forgotten")) {
		if (r && e->loading)
			exec_rank_drop(e, i);
		return;
	}
	if (e->loading) {
		if (!r)
			r = exec_rank_add(e, attempt_id, (int)rank);
		load_fields(r, o, seq);
	} else if (r && r->state == EXEC_RUNNING) {
		learn(r, o);
	}
}

/* Reads what shims have appended, for ranks that have no socket to tell. */
static void exec_journal_refresh(struct exec *e)
{
	int need = 0;
	for (size_t i = 0; i < e->n && !need; i++)
		need = e->ranks[i]->state == EXEC_RUNNING && e->ranks[i]->sock < 0;
	if (need)
		journal_read(e->journal, on_line, e);
}

static void kill_rank(struct rank *r, int sig)
{
	if (r->pgid > 0)
		killpg(r->pgid, sig);
	if (r->cgroup)
		cgroup_signal(r->cgroup, sig, r->shim > 0 ? r->shim : 0);
	for (int i = 0; i < EXEC_LIMITS && !r->cgroup; i++)
		if (r->limits[i]) /* the shim is never in these */
			cgroup_signal(r->limits[i], sig, 0);
}

/* 1 while a final rank's limits' cgroups are still to be removed. */
static int exec_limits_left(const struct rank *r)
{
	for (int i = 0; i < EXEC_LIMITS && r->state != EXEC_RUNNING; i++)
		if (r->limits[i])
			return 1;
	return 0;
}

/* A final rank's limits' cgroups go, and whatever it left in them. */
static void exec_limits_tidy(struct rank *r)
{
	for (int i = 0; i < EXEC_LIMITS && r->state != EXEC_RUNNING; i++) {
		if (!r->limits[i])
			continue;
		cgroup_signal(r->limits[i], SIGKILL, 0);
		if (cgroup_remove(r->limits[i]) == 0) {
			free(r->limits[i]);
			r->limits[i] = NULL;
		}
	}
}

static void exec_cgroup_tidy(struct rank *r)
{
	if (r->cgroup_left) {
		cgroup_signal(r->cgroup, SIGKILL, r->shim > 0 ? r->shim : 0);
		if (cgroup_remove(r->cgroup) == 0)
			r->cgroup_left = 0;
	}
	exec_limits_tidy(r);
}

/* The command ended with wait status st, or was lost (st unused). */
static void exec_set_final(struct rank *r, int st, const char *lost)
{
	r->state = EXEC_EXITED;
	if (lost) {
		r->exit_code = 255;
		r->signal = 0;
		r->lost = 1;
		if (lost != r->error) {
			free(r->error);
			r->error = xstrdup(lost);
		}
	} else if (WIFSIGNALED(st)) {
		r->signal = WTERMSIG(st);
		r->exit_code = 128 + r->signal;
	} else {
		r->exit_code = WEXITSTATUS(st);
	}
	if (!lost && !r->have_status) {
		r->wait_status = st;
		r->have_status = 1;
	}
}

static void log_final(const struct rank *r)
{
	if (r->lost)
		log_warn("rank lost attempt=%lld rank=%d job=%lld reason=\"%s\"",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id, r->error);
	else
		log_info("rank exited attempt=%lld rank=%d job=%lld exit_code=%d signal=%d",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id, r->exit_code,
		         r->signal);
}

/* The command ended (found by polling, or at adoption when !live).
 * Whatever the rank left behind goes with it: everything in its cgroup,
 * else its process group, but only while we watched it end (an adopted
 * rank's group may be long gone and its id reused). */
static void finish(struct rank *r, int st, const char *lost, int live)
{
	exec_set_final(r, st, lost);
	if (r->cgroup) {
		r->cgroup_left = 1;
		exec_cgroup_tidy(r);
	} else if (live && r->pgid > 0) {
		killpg(r->pgid, SIGKILL);
	}
	log_final(r);
}

/* A NULL-terminated vector of owned strings. */
struct strv {
	char **v;
	size_t n, cap;
};

static void strv_push(struct strv *s, char *owned)
{
	if (s->n + 2 > s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->v = xrealloc(s->v, s->cap * sizeof(char *));
	}
	s->v[s->n++] = owned;
	s->v[s->n] = NULL;
}

static void strv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

/* Sets "KEY=VALUE" (owned), replacing an earlier value of KEY. */
static void env_set(struct strv *s, char *kv)
{
	size_t klen = strcspn(kv, "=");
	for (size_t i = 0; i < s->n; i++)
		if (strncmp(s->v[i], kv, klen) == 0 && s->v[i][klen] == '=') {
			free(s->v[i]);
			s->v[i] = kv;
			return;
		}
	strv_push(s, kv);
}

static const char *env_get(const struct strv *s, const char *key)
{
	size_t klen = strlen(key);
	for (size_t i = 0; i < s->n; i++)
		if (strncmp(s->v[i], key, klen) == 0 && s->v[i][klen] == '=')
			return s->v[i] + klen + 1;
	return NULL;
}

static void build_env(struct strv *env, const struct exec_spec *spec, const char *out_dir,
                      const char *log_path, const char *ckpt_dir)
{
	static const char *const base[] = {"PATH", "HOME", "LANG", "TERM"};
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
		const char *v = getenv(base[i]);
		if (v)
			env_set(env, xasprintf("%s=%s", base[i], v));
	}
	if (!env_get(env, "PATH"))
		env_set(env, xstrdup("PATH=/usr/local/bin:/usr/bin:/bin"));
	for (size_t i = 0; spec->env && spec->env[i]; i++)
		if (strchr(spec->env[i], '=') && spec->env[i][0] != '=')
			env_set(env, xstrdup(spec->env[i]));
	env_set(env, xasprintf("ANVIL_OUTPUT_DIR=%s", out_dir));
	env_set(env, xasprintf("ANVIL_LOG_FILE=%s", log_path));
	if (ckpt_dir)
		env_set(env, xasprintf("ANVIL_CHECKPOINT_DIR=%s", ckpt_dir));
}

char *exec_checkpoint_dir(const char *work_dir, int64_t job_id)
{
	return xasprintf("%s/checkpoints/%lld", work_dir, (long long)job_id);
}

int64_t exec_checkpoint_ms(const struct exec *e, int64_t job_id)
{
	char *dir = exec_checkpoint_dir(e->work_dir, job_id);
	struct stat sb;
	int64_t ms = 0;
	if (stat(dir, &sb) == 0)
		ms = (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000;
	free(dir);
	return ms;
}

/* The server sets ANVIL_CHECKPOINTING=1 for jobs that checkpoint: they get
 * a per-job directory that outlives attempts (a requeued attempt on this
 * node finds its checkpoints), whose modification time the agent reports
 * as the rank's last checkpoint. NULL for other jobs, which cost nothing. */
static char *checkpoint_dir(struct exec *e, const struct exec_spec *spec)
{
	int asked = 0;
	for (size_t i = 0; spec->env && spec->env[i]; i++)
		asked |= strcmp(spec->env[i], "ANVIL_CHECKPOINTING=1") == 0;
	if (!asked)
		return NULL;
	char *dir = exec_checkpoint_dir(e->work_dir, spec->job_id);
	if (mkdir_p(dir, 0755) != 0) {
		log_warn("cannot create checkpoint dir path=%s", dir);
		free(dir);
		return NULL;
	}
	return dir;
}

/* execvp's search, done before the fork; NULL when not found. */
static char *resolve(const char *cmd, const char *path_var)
{
	if (strchr(cmd, '/'))
		return xstrdup(cmd);
	const char *p = path_var;
	while (p) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		char *cand = xasprintf("%.*s/%s", (int)len, len ? p : ".", cmd);
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return cand;
		free(cand);
		p = colon ? colon + 1 : NULL;
	}
	return NULL;
}

/* open() that never returns 0, 1 or 2: the shim dup2s onto those. */
static int exec_open_high(const char *path, int flags, unsigned mode)
{
	int fd = open(path, flags | O_CLOEXEC, mode);
	return fd < 0 ? -errno : fd_above_stdio(fd);
}

struct launch {
	struct shim_launch l;
	const struct exec_spec *spec;
	struct strv argv, env;
	char *path, *cwd, *out_dir, *log_path;
	char *msgs[3];
	char key[64]; /* the record's key: opens the shim's journal lines */
};

static void launch_init(struct launch *la, int null_fd)
{
	memset(la, 0, sizeof(*la));
	la->l.log_fd = la->l.cgroup_fd = la->l.record_fd = -1;
	la->l.null_fd = null_fd; /* borrowed from the executor */
}

static void launch_cleanup(struct launch *la)
{
	for (int i = 0; i < la->l.njoin; i++)
		close(la->l.join_fds[i]);
	strv_free(&la->argv);
	strv_free(&la->env);
	free(la->path);
	free(la->cwd);
	free(la->out_dir);
	free(la->log_path);
	for (int i = 0; i < 3; i++)
		free(la->msgs[i]);
	if (la->l.log_fd >= 0)
		close(la->l.log_fd);
	if (la->l.cgroup_fd >= 0)
		close(la->l.cgroup_fd);
}

static void launch_strings(struct launch *la, const struct exec_spec *spec, const char *ckpt)
{
	for (size_t i = 0; spec->argv[i]; i++)
		strv_push(&la->argv, xstrdup(spec->argv[i]));
	build_env(&la->env, spec, la->out_dir, la->log_path, ckpt);
	la->path = resolve(spec->argv[0], env_get(&la->env, "PATH"));
	la->cwd = xstrdup(spec->cwd ? spec->cwd : la->out_dir);
	la->msgs[0] = xasprintf("anvil: cannot run '%s': command not found (PATH=%s)\n",
	                        spec->argv[0], env_get(&la->env, "PATH"));
	la->msgs[1] = xasprintf("anvil: cannot execute '%s': ", la->path ? la->path : "");
	la->msgs[2] = xasprintf("anvil: cannot change directory to '%s': ", la->cwd);
	la->l = (struct shim_launch){
	        .path = la->path,
	        .argv = la->argv.v,
	        .envp = la->env.v,
	        .cwd = la->cwd,
	        .log_fd = la->l.log_fd,
	        .null_fd = la->l.null_fd,
	        .cgroup_fd = la->l.cgroup_fd,
	        .record_fd = la->l.record_fd,
	        .record_key = la->key,
	        .msg_notfound = la->msgs[0],
	        .msg_exec = la->msgs[1],
	        .msg_cwd = la->msgs[2],
	};
}

/* WORK_DIR/output/<attempt_id>: ANVIL_OUTPUT_DIR and the default working
 * directory, shared by the attempt's ranks on this node. */
static char *output_dir(const struct exec *e, int64_t attempt_id)
{
	return xasprintf("%s/output/%lld", e->work_dir, (long long)attempt_id);
}

/* Output directories. Making a directory is the costliest file system
 * step of a start (on ext4 a new inode and a directory block: 0.2-0.4 ms of
 * CPU under churn, five times a file's), so the output directory of an
 * attempt whose ranks are all forgotten and left it empty is not removed
 * but renamed into WORK_DIR/spare-output/, and the next attempt's is
 * renamed out of there. */

/* Makes dir: from the spare directories when there is one. */
static int make_output_dir(struct exec *e, const char *dir)
{
	while (e->nfree_dirs > 0) {
		char *from = xasprintf("%s/%llu", e->spare_dirs,
		                       (unsigned long long)e->free_dirs[--e->nfree_dirs]);
		int rc = rename(from, dir);
		free(from);
		if (rc == 0)
			return 0;
		if (errno == EEXIST || errno == ENOTEMPTY) {
			e->nfree_dirs++; /* dir is there already (another rank of its attempt) */
			return 0;
		}
	}
	if (mkdir(dir, 0755) == 0 || errno == EEXIST)
		return 0;
	return errno == ENOENT ? mkdir_p(dir, 0755) : -errno;
}

/* 1 when dir has no entries. */
static int dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int empty = d != NULL;
	while (empty && (de = readdir(d)))
		empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
	if (d)
		closedir(d);
	return empty;
}

/* The attempt's ranks here are all forgotten: keep its output directory
 * for reuse if nothing was written to it. */
static void exec_launch_output_done(struct exec *e, int64_t attempt_id)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->ranks[i]->attempt_id == attempt_id)
			return;
	if (e->nfree_dirs >= SPARE_DIRS_MAX)
		return;
	char *dir = output_dir(e, attempt_id);
	if (dir_empty(dir)) {
		uint64_t n = ++e->dir_seq;
		char *to = xasprintf("%s/%llu", e->spare_dirs, (unsigned long long)n);
		if (rename(dir, to) == 0)
			e->free_dirs[e->nfree_dirs++] = n;
		free(to);
	}
	free(dir);
}

/* The spare directories a restarted agent finds. */
static void exec_launch_dirs_load(struct exec *e)
{
	e->free_dirs = xcalloc(SPARE_DIRS_MAX, sizeof(*e->free_dirs));
	DIR *d = opendir(e->spare_dirs);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		int64_t n;
		if (parse_i64(de->d_name, 1, INT64_MAX, &n) != 0)
			continue;
		if ((uint64_t)n > e->dir_seq)
			e->dir_seq = (uint64_t)n;
		if (e->nfree_dirs < SPARE_DIRS_MAX) {
			e->free_dirs[e->nfree_dirs++] = (uint64_t)n;
		} else {
			char *path = xasprintf("%s/%s", e->spare_dirs, de->d_name);
			rmdir(path);
			free(path);
		}
	}
	if (d)
		closedir(d);
}

/* Everything the shim needs, prepared before the fork; the log is open
 * already and the cgroup comes later (a spare brings its own). */
static int launch_prepare(struct exec *e, struct launch *la, struct rank *r,
                          const struct exec_spec *spec, char *err, size_t errlen)
{
	la->out_dir = output_dir(e, r->attempt_id);
	int rc = make_output_dir(e, la->out_dir);
	if (rc) {
		snprintf(err, errlen, "cannot create %s: %s", la->out_dir, strerror(-rc));
		return rc;
	}
	snprintf(la->key, sizeof(la->key), "\"attempt_id\":%lld,\"rank\":%d",
	         (long long)r->attempt_id, r->rank);
	la->l.record_fd = journal_fd(e->journal);
	char *ckpt = checkpoint_dir(e, spec);
	launch_strings(la, spec, ckpt);
	free(ckpt);
	return 0;
}

/* The direct path's cgroup: the command joins it itself before exec. */
static void launch_cgroup(struct launch *la, struct rank *r)
{
	if (!r->cgroup)
		return;
	int rc = mkdir(r->cgroup, 0755) < 0 && errno != EEXIST ? -errno : 0;
	la->l.cgroup_fd = rc ? rc : cgroup_open_procs(r->cgroup);
	if (la->l.cgroup_fd >= 0)
		return;
	log_warn("rank runs without a cgroup attempt=%lld rank=%d cgroup=%s error=\"%s\"",
	         (long long)r->attempt_id, r->rank, r->cgroup, strerror(-la->l.cgroup_fd));
	la->l.cgroup_fd = -1;
	free(r->cgroup);
	r->cgroup = NULL;
}

/* Limits (exec.h). Each is its own hierarchy's business: one that cannot
 * be had is said once and the rank runs without it. */

static const char *limit_why(int err, int err2)
{
	if (err == -ENOTSUP && err2 == -ENOTSUP)
		return "the agent's cgroup v2 was not given that controller (cgroup.controllers), "
		       "and no v1 hierarchy of it is mounted";
	if (err == -ENOTSUP && err2)
		return strerror(-err2);
	if (err == -ENOTSUP)
		return "no v1 hierarchy of that controller is mounted";
	if (err == -EXDEV)
		return "the hierarchy is shared with the ranks' pids or freezer one";
	return strerror(-err);
}

static void exec_limits_setup(struct exec *e, const char *group, int i)
{
	if (e->v2) {
		/* In the rank's own cgroup: devices by an eBPF program, which
		 * needs no controller; cpu and memory where delegated. */
		int rc2 = i == EXEC_LIMIT_DEVICES
		                  ? 0
		                  : cgroup_v2_delegate(e->cgroup_root, limit_controllers[i]);
		if (rc2 == 0) {
			e->limit_inline[i] = 1;
			return;
		}
		e->limit_err2[i] = rc2; /* a hybrid host: try its v1 hierarchy */
	}
	int rc = cgroup_setup_controller(limit_controllers[i], group, &e->limit_root[i]);
	if (rc == 0 && e->cgroup_root && strcmp(e->limit_root[i], e->cgroup_root) == 0) {
		/* Its rank cgroups would be the spares' renamed ones: not here. */
		free(e->limit_root[i]);
		e->limit_root[i] = NULL;
		rc = -EXDEV;
	}
	e->limit_err[i] = rc;
}

static unsigned limits_wanted(const struct exec *e, const struct exec_spec *spec)
{
	unsigned want = 0;
	if (spec->cpu_millis > 0)
		want |= 1u << EXEC_LIMIT_CPU;
	if (spec->memory_bytes > 0)
		want |= 1u << EXEC_LIMIT_MEMORY;
	if (e->isolate && spec->ngpu_minors >= 0)
		want |= 1u << EXEC_LIMIT_DEVICES;
	return want;
}

static int limit_write(int i, const char *path, const struct exec_spec *spec)
{
	switch (i) {
	case EXEC_LIMIT_CPU: return cgroup_limit_cpu(path, spec->cpu_millis);
	case EXEC_LIMIT_MEMORY: return cgroup_limit_memory(path, spec->memory_bytes);
	default: return cgroup_limit_gpus(path, spec->gpu_minors, spec->ngpu_minors);
	}
}

/* v2: the limits written into the rank's own cgroup, once it exists and
 * before the command runs (exec_spares_launch, launch). Such a cgroup is never
 * a spare's again: its limits would stay with it. */
static void exec_limits_inline(struct exec *e, struct rank *r, const struct exec_spec *spec)
{
	unsigned want = spec ? limits_wanted(e, spec) : 0;
	for (int i = 0; r->cgroup && i < EXEC_LIMITS; i++) {
		if (!(want & (1u << i)) || !e->limit_inline[i])
			continue;
		r->inline_limits = 1;
		int rc = limit_write(i, r->cgroup, spec);
		if (rc)
			log_warn("rank runs without its %s limit attempt=%lld rank=%d error=\"%s\"",
			         limit_controllers[i], (long long)r->attempt_id, r->rank,
			         strerror(-rc));
	}
}

/* ROOT_i/<attempt>-<rank>, made and written; the command joins it through
 * la's join_fds. Hierarchies mounted together share one directory: made
 * and joined once, written for each. */
static int limit_one(struct exec *e, struct rank *r, int i, const struct exec_spec *spec,
                     struct launch *la)
{
	char *path = xasprintf("%s/%lld-%d", e->limit_root[i], (long long)r->attempt_id, r->rank);
	for (int k = 0; k < i; k++)
		if (r->limits[k] && strcmp(r->limits[k], path) == 0) {
			free(path);
			return limit_write(i, r->limits[k], spec);
		}
	int rc = mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
	int fd = rc ? rc : cgroup_open_procs(path);
	if (fd >= 0 && (rc = limit_write(i, path, spec)) == 0) {
		la->l.join_fds[la->l.njoin++] = fd;
		r->limits[i] = path;
		return 0;
	}
	if (fd >= 0)
		close(fd);
	rc = rc ? rc : fd;
	cgroup_remove(path);
	free(path);
	return rc;
}

/* The rank's limits' cgroups, before the launch (after launch_prepare,
 * which sets la->l anew). */
static void exec_limits_prepare(struct exec *e, struct rank *r, const struct exec_spec *spec,
                                struct launch *la)
{
	unsigned want = limits_wanted(e, spec);
	if (e->isolate && spec->ngpu_minors < 0)
		log_warn("rank not isolated from other GPUs: its GPUs' device minors are unknown "
		         "attempt=%lld rank=%d",
		         (long long)r->attempt_id, r->rank);
	for (int i = 0; want && i < EXEC_LIMITS; i++) {
		if (!(want & (1u << i)) || e->limit_inline[i])
			continue;
		if (!e->limit_root[i]) {
			if (!e->limit_logged[i])
				log_warn("ranks run without their %s limits reason=\"%s\"",
				         limit_controllers[i],
				         limit_why(e->limit_err[i], e->limit_err2[i]));
			e->limit_logged[i] = 1;
			continue;
		}
		int rc = limit_one(e, r, i, spec, la);
		if (rc)
			log_warn("rank runs without its %s limit attempt=%lld rank=%d error=\"%s\"",
			         limit_controllers[i], (long long)r->attempt_id, r->rank,
			         strerror(-rc));
	}
}

static void exec_spares_discard(struct exec *e, struct spare *s);

/* The rank's shim runs it: its socket tells exec_poll when it ends. */
static void exec_rank_watch(struct exec *e, struct rank *r, struct shim sh)
{
	r->shim = sh.pid;
	r->sock = sh.sock;
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = sh.sock};
	if (epoll_ctl(e->epoll_fd, EPOLL_CTL_ADD, sh.sock, &ev) < 0)
		log_warn("cannot watch a shim error=\"%s\"", strerror(errno));
}

static void rank_unwatch(struct exec *e, struct rank *r)
{
	if (r->sock < 0)
		return;
	epoll_ctl(e->epoll_fd, EPOLL_CTL_DEL, r->sock, NULL);
	close(r->sock);
	r->sock = -1;
}

/* The rank's shim from the oldest spare: its cgroup is renamed to the
 * rank's (the spare is already in it, so the command is too, by fork),
 * then the launch is sent. 0; -ECHILD when the spare took the launch and
 * died (the rank cannot be known to run); another code when no spare was
 * used and nothing started. */
static int exec_spares_launch(struct exec *e, struct rank *r, struct launch *la)
{
	if (e->nspares == 0 || !shim_spare_fits(&la->l))
		return -EAGAIN;
	struct spare s = e->spares[0];
	if (s.cgroup && rename(s.cgroup, r->cgroup) < 0) {
		int rc = -errno; /* e.g. a stale cgroup of that name: keep the spare */
		log_debug("spare not used attempt=%lld rank=%d error=\"%s\"",
		          (long long)r->attempt_id, r->rank, strerror(-rc));
		return rc;
	}
	memmove(&e->spares[0], &e->spares[1], (size_t)--e->nspares * sizeof(e->spares[0]));
	free(s.cgroup);
	s.cgroup = NULL; /* it is the rank's now */
	exec_limits_inline(e, r, la->spec);
	int rc = shim_spare_launch(&s.shim, &la->l, &r->pgid);
	if (rc == 0) {
		exec_rank_watch(e, r, s.shim);
		r->spare = 1;
		e->started_spare++;
		return 0;
	}
	log_warn("spare shim failed attempt=%lld rank=%d pid=%d error=\"%s\"",
	         (long long)r->attempt_id, r->rank, (int)s.shim.pid, strerror(-rc));
	exec_spares_discard(e, &s);
	return rc == -ECHILD ? rc : -EAGAIN;
}

/* Starts the rank's shim: from a spare when one is ready, else forked now. */
static int launch(struct exec *e, struct rank *r, struct launch *la, char *err, size_t errlen)
{
	int rc = exec_spares_launch(e, r, la);
	if (rc == 0)
		return 0;
	if (rc == -ECHILD) {
		snprintf(err, errlen, "the spare shim ended before reporting the command");
		return rc;
	}
	launch_cgroup(la, r);
	exec_limits_inline(e, r, la->spec);
	struct shim sh;
	rc = shim_spawn(&la->l, &sh, &r->pgid);
	if (rc)
		snprintf(err, errlen, "cannot fork: %s", strerror(-rc));
	else
		exec_rank_watch(e, r, sh);
	return rc;
}

static void start_failed(struct exec *e, struct rank *r, const char *why)
{
	r->state = EXEC_FAILED;
	r->error = xstrdup(why);
	exec_journal_write(e, r, 0); /* a restarted agent reports the same */
	if (r->cgroup)
		r->cgroup_left = 1;
	exec_cgroup_tidy(r);
	log_warn("rank failed to start attempt=%lld rank=%d job=%lld error=\"%s\"",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id, why);
}

int exec_start(struct exec *e, const struct exec_spec *spec)
{
	if (exec_rank_find(e, spec->attempt_id, spec->rank, NULL))
		return -EEXIST;
	/* Its log outlives a forgotten rank: a rank that has run here once is
	 * never run again, whatever a stale desired set may still list. The
	 * log is made here, so it is also the check. */
	char *log = exec_log_path(e->work_dir, spec->attempt_id, spec->rank);
	int log_fd = e->logs ? logpool_take(e->logs, log) : -EAGAIN;
	if (log_fd == -EAGAIN)
		log_fd = exec_open_high(log, O_WRONLY | O_CREAT | O_EXCL | O_APPEND, 0644);
	if (log_fd == -EEXIST) {
		free(log);
		return -EALREADY;
	}
	struct rank *r = exec_rank_add(e, spec->attempt_id, spec->rank);
	r->job_id = spec->job_id;
	r->grace_ms = spec->grace_ms;
	r->start_wall_ms = wall_ms();
	e->started++;
	char err[512] = "";
	struct launch la;
	launch_init(&la, e->null_fd);
	la.log_path = log;
	la.l.log_fd = log_fd;
	la.spec = spec;
	int rc = log_fd;
	if (rc < 0)
		snprintf(err, sizeof(err), "cannot open %s: %s", log, strerror(-rc));
	else
		rc = launch_prepare(e, &la, r, spec, err, sizeof(err));
	if (rc == 0 && (rc = exec_journal_write(e, r, 0)) != 0)
		snprintf(err, sizeof(err), "cannot write the rank record in %s: %s", e->work_dir,
		         strerror(-rc));
	if (rc == 0) {
		exec_limits_prepare(e, r, spec, &la);
		rc = launch(e, r, &la, err, sizeof(err));
	}
	int nlimits = la.l.njoin;
	launch_cleanup(&la);
	if (rc) {
		start_failed(e, r, err);
		return 0;
	}
	r->own = 1;
	r->state = EXEC_RUNNING;
	log_debug("rank started attempt=%lld rank=%d job=%lld pid=%d cgroup=%s spare=%d "
	          "limits=%d",
	          (long long)r->attempt_id, r->rank, (long long)r->job_id, (int)r->pgid,
	          r->cgroup ? "yes" : "no", r->spare, nlimits);
	return 0;
}

/* Spares. A spare-* cgroup only ever holds a spare shim: a spare's cgroup
 * is renamed to its rank's before the launch is sent. So whatever is left
 * in one (after a crash, say) can be killed and the cgroup removed. */

/* Kills what is in the cgroup and removes it, now or from exec_poll. */
static void exec_doom_cgroup(struct exec *e, char *path)
{
	cgroup_signal(path, SIGKILL, 0);
	if (cgroup_remove(path) == 0) {
		free(path);
		return;
	}
	e->doomed = xrealloc(e->doomed, (e->ndoomed + 1) * sizeof(*e->doomed));
	e->doomed[e->ndoomed++] = path;
}

static void exec_tidy_doomed(struct exec *e)
{
	for (size_t i = e->ndoomed; i-- > 0;) {
		cgroup_signal(e->doomed[i], SIGKILL, 0);
		if (cgroup_remove(e->doomed[i]) == 0) {
			free(e->doomed[i]);
			e->doomed[i] = e->doomed[--e->ndoomed];
		}
	}
}

/* Ends a spare that is out of the pool: it exits on EOF, SIGKILL makes sure. */
static void exec_spares_discard(struct exec *e, struct spare *s)
{
	shim_close(&s->shim);
	if (s->shim.pid > 0) {
		kill(s->shim.pid, SIGKILL);
		while (waitpid(s->shim.pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (s->cgroup)
		exec_doom_cgroup(e, s->cgroup);
	s->cgroup = NULL;
	s->shim.pid = 0;
}

/* Forks one spare into a fresh cgroup of its own. */
static int spare_add(struct exec *e)
{
	struct spare s = {.shim = {.pid = 0, .sock = -1}};
	int fd = -1, rc = 0;
	if (e->cgroup_root) {
		s.cgroup = xasprintf("%s/spare-%d-%llu", e->cgroup_root, (int)getpid(),
		                     (unsigned long long)++e->spare_seq);
		if (mkdir(s.cgroup, 0755) < 0) {
			rc = -errno;
			free(s.cgroup);
			return rc;
		}
		if ((fd = rc = cgroup_open_procs(s.cgroup)) < 0)
			goto out;
	}
	rc = shim_spare_fork(fd, e->null_fd, &s.shim);
	s.since = now_ms();
	if (rc == 0) {
		e->spares[e->nspares++] = s;
		s.cgroup = NULL;
	}
out:
	if (fd >= 0)
		close(fd);
	if (s.cgroup) {
		cgroup_remove(s.cgroup);
		free(s.cgroup);
	}
	return rc;
}

/* Pool shims running a rank now: each goes back to the pool when its rank
 * ends (exec_spares_reuse), so it counts toward the number. Making up for them
 * at once would fork and attach a new shim at every start and end an
 * extra one later: cgroup v1 attaches that cost ~10 ms of kernel time
 * each, in the way of the next start. */
static int exec_spares_out(const struct exec *e)
{
	int n = 0;
	for (size_t i = 0; i < e->n; i++)
		n += e->ranks[i]->spare && e->ranks[i]->shim > 0 &&
		     e->ranks[i]->state == EXEC_RUNNING;
	return n;
}

/* Drops spares that died, then makes up the number. */
static void exec_spares_refill(struct exec *e, int64_t now)
{
	for (int i = e->nspares; i-- > 0;) {
		struct spare *s = &e->spares[i];
		if (waitpid(s->shim.pid, NULL, WNOHANG) != s->shim.pid)
			continue;
		log_warn("spare shim ended by itself pid=%d", (int)s->shim.pid);
		s->shim.pid = 0;
		struct spare gone = *s;
		memmove(s, s + 1, (size_t)(--e->nspares - i) * sizeof(*s));
		exec_spares_discard(e, &gone);
	}
	/* Extras: at once when the number was lowered, else the oldest once
	 * it has idled long enough (it would be the next one used). */
	while (e->nspares > e->want_spares &&
	       (e->trim || now >= e->spares[0].since + EXEC_SPARE_IDLE_MS)) {
		struct spare gone = e->spares[0];
		memmove(&e->spares[0], &e->spares[1], (size_t)--e->nspares * sizeof(e->spares[0]));
		exec_spares_discard(e, &gone);
	}
	e->trim = 0;
	int out = exec_spares_out(e);
	if (e->nspares + out >= e->want_spares || now < e->spare_retry_at)
		return;
	while (e->nspares + out < e->want_spares) {
		int rc = spare_add(e);
		if (rc) {
			log_warn("cannot make a spare shim, ranks start without one "
			         "retry_ms=%d error=\"%s\"",
			         SPARE_RETRY_MS, strerror(-rc));
			e->spare_retry_at = now + SPARE_RETRY_MS;
			return;
		}
	}
}

void exec_set_spares(struct exec *e, int n)
{
	e->want_spares = n < 0 ? 0 : n > EXEC_SPARES_MAX ? EXEC_SPARES_MAX : n;
	e->spare_retry_at = 0;
	e->trim = 1;
}

int exec_spares(const struct exec *e, int *pids, int max)
{
	for (int i = 0; i < e->nspares && i < max; i++)
		pids[i] = (int)e->spares[i].shim.pid;
	return e->nspares;
}

uint64_t exec_started_spare_total(const struct exec *e)
{
	return e->started_spare;
}

const char *exec_cgroup_root(const struct exec *e)
{
	return e->cgroup_root;
}

static void stop_rank(struct rank *r, int64_t cap_ms)
{
	if (r->state != EXEC_RUNNING || r->stopping)
		return;
	int64_t grace = r->grace_ms;
	if (cap_ms >= 0 && grace > cap_ms)
		grace = cap_ms;
	r->stopping = 1;
	r->kill_at = now_ms() + grace;
	log_info("rank stopping attempt=%lld rank=%d job=%lld grace_ms=%lld",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id, (long long)grace);
	if (grace <= 0) {
		kill_rank(r, SIGKILL);
		r->killed = 1;
	} else {
		kill_rank(r, SIGTERM);
	}
}

int exec_stop(struct exec *e, int64_t attempt_id, int rank, int64_t cap_ms)
{
	struct rank *r = exec_rank_find(e, attempt_id, rank, NULL);
	if (!r)
		return ERR_NOTFOUND;
	stop_rank(r, cap_ms);
	return 0;
}

void exec_stop_all(struct exec *e, int64_t cap_ms)
{
	for (size_t i = 0; i < e->n; i++)
		stop_rank(e->ranks[i], cap_ms);
}

/* 1 when the shim is gone: reaped now, or (not our child) no longer exists. */
static int shim_gone(struct rank *r)
{
	if (r->shim <= 0)
		return 0;
	int st;
	pid_t w = waitpid(r->shim, &st, WNOHANG);
	if (w == r->shim) {
		r->own = 0;
		r->shim = -r->shim; /* reaped: the pid may be reused from now on */
		return 1;
	}
	return w < 0 && errno == ECHILD && kill(r->shim, 0) < 0 && errno == ESRCH;
}

/* A finished rank's shim, waiting for a launch in the rank's cgroup with
 * nothing else left in it, becomes a spare again: the cgroup is renamed
 * back to a spare's. 1 when it did. */
static int exec_spares_reuse(struct exec *e, struct rank *r)
{
	/* Up to the maximum: a burst ends ranks as fast as it starts them; the
	 * extras end once idle for EXEC_SPARE_IDLE_MS. */
	if (!r->spare || e->want_spares == 0 || e->nspares >= EXEC_SPARES_MAX || r->shim <= 0 ||
	    r->inline_limits)
		return 0;
	struct spare s = {.shim = {.pid = r->shim, .sock = r->sock}, .since = now_ms()};
	if (r->cgroup) {
		if (cgroup_signal(r->cgroup, SIGKILL, r->shim) != 0)
			return 0; /* leftovers: they die, the shim goes with its cgroup */
		s.cgroup = xasprintf("%s/spare-%d-%llu", e->cgroup_root, (int)getpid(),
		                     (unsigned long long)++e->spare_seq);
		if (rename(r->cgroup, s.cgroup) < 0) {
			free(s.cgroup);
			return 0;
		}
		free(r->cgroup);
		r->cgroup = NULL;
	}
	epoll_ctl(e->epoll_fd, EPOLL_CTL_DEL, r->sock, NULL);
	e->spares[e->nspares++] = s;
	r->sock = -1;
	r->shim = 0;
	r->own = 0;
	e->reused++;
	return 1;
}

/* Our shim said the command ended with wait status st. */
static void ended(struct exec *e, struct rank *r, int st)
{
	r->wait_status = st;
	r->have_status = 1;
	if (exec_spares_reuse(e, r)) {
		exec_set_final(r, st, NULL);
		log_final(r);
		return;
	}
	rank_unwatch(e, r); /* the shim exits: SIGCHLD, reaped below */
	finish(r, st, NULL, 1);
}

/* Reaps the shim of a final rank (it exits after its rank). */
static void reap(struct rank *r)
{
	if (r->own && r->shim > 0 && r->sock < 0 && waitpid(r->shim, NULL, WNOHANG) == r->shim) {
		r->own = 0;
		r->shim = -r->shim;
	}
}

static int exec_poll_running(struct exec *e, struct rank *r, int64_t now, int live)
{
	if (r->sock >= 0) {
		struct shim sh = {.pid = r->shim, .sock = r->sock};
		int st, rc = shim_ended(&sh, &st);
		if (rc == 1) {
			ended(e, r, st);
			return 1;
		}
		if (rc < 0)
			rank_unwatch(e, r); /* gone without a word: see below */
	}
	if (r->shim == 0 && r->pgid > 0 && r->stopping)
		kill_rank(r, r->killed ? SIGKILL : SIGTERM); /* stopped before we knew it */
	int gone = r->sock < 0 && (r->shim < 0 || shim_gone(r));
	/* Our own shims tell on their socket; adopted ones are polled. */
	if ((gone || !r->own) && r->have_status) {
		finish(r, r->wait_status, NULL, live);
		return 1;
	}
	if (gone) {
		finish(r, 0, "the rank's shim ended without recording an exit status", live);
		return 1;
	}
	if (r->shim == 0 && !r->own && now >= r->lost_at) {
		finish(r, 0, "the agent stopped while the rank was starting", live);
		return 1;
	}
	if (r->stopping && !r->killed && now >= r->kill_at) {
		log_info("rank killed after grace attempt=%lld rank=%d job=%lld",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id);
		kill_rank(r, SIGKILL);
		r->killed = 1;
	}
	return 0;
}

/* Old journal segments go once no running rank's shim writes to them;
 * what they say of ranks not yet forgotten moves to the current one. */
static void exec_journal_compact(struct exec *e)
{
	uint64_t old[4];
	size_t n = journal_old(e->journal, old, 4);
	for (size_t k = 0; k < n && k < 4; k++) {
		int busy = 0;
		for (size_t i = 0; i < e->n && !busy; i++)
			busy = e->ranks[i]->seg == old[k] && e->ranks[i]->state == EXEC_RUNNING;
		if (busy)
			continue;
		int rc = 0;
		for (size_t i = 0; i < e->n && rc == 0; i++)
			if (e->ranks[i]->seg == old[k])
				rc = exec_journal_write(e, e->ranks[i], 1);
		if (rc == 0)
			journal_drop(e->journal, old[k]);
	}
}

int exec_poll(struct exec *e)
{
	int changed = 0;
	int64_t now = now_ms();
	exec_journal_refresh(e);
	for (size_t i = 0; i < e->n; i++) {
		struct rank *r = e->ranks[i];
		if (r->state == EXEC_RUNNING)
			changed += exec_poll_running(e, r, now, 1);
		else
			reap(r);
		exec_cgroup_tidy(r);
	}
	for (size_t i = e->nexiting; i-- > 0;)
		if (waitpid(e->exiting[i], NULL, WNOHANG) != 0)
			e->exiting[i] = e->exiting[--e->nexiting];
	exec_tidy_doomed(e);
	exec_spares_refill(e, now);
	exec_journal_compact(e);
	return changed;
}

int64_t exec_next_poll_ms(const struct exec *e)
{
	int64_t now = now_ms(), next = -1;
	if (e->nspares + exec_spares_out(e) < e->want_spares)
		next = now >= e->spare_retry_at ? 0 : e->spare_retry_at - now;
	else if (e->nspares > e->want_spares)
		next = e->trim ? 0 : e->spares[0].since + EXEC_SPARE_IDLE_MS - now;
	if (next < -1)
		next = 0;
	if (e->ndoomed && (next < 0 || next > CGROUP_RETRY_MS))
		next = CGROUP_RETRY_MS;
	for (size_t i = 0; i < e->n; i++) {
		const struct rank *r = e->ranks[i];
		int64_t in = -1;
		if (r->cgroup_left || exec_limits_left(r))
			in = CGROUP_RETRY_MS;
		if (r->state == EXEC_RUNNING && r->sock < 0)
			in = ADOPT_POLL_MS;
		if (r->state == EXEC_RUNNING && r->stopping && !r->killed) {
			int64_t k = r->kill_at > now ? r->kill_at - now : 0;
			in = in < 0 || k < in ? k : in;
		}
		if (in >= 0 && (next < 0 || in < next))
			next = in;
	}
	return next;
}

int exec_fd(const struct exec *e)
{
	return e->epoll_fd;
}

uint64_t exec_reused_total(const struct exec *e)
{
	return e->reused;
}

void exec_set_journal_roll(struct exec *e, int64_t bytes)
{
	journal_set_roll(e->journal, bytes);
}

/* A rank loaded from the journal: final, or
 * running under a shim that is not our child, polled from now on. */
static void adopt(struct exec *e, struct rank *r)
{
	if (r->cgroup && access(r->cgroup, F_OK) != 0) {
		free(r->cgroup);
		r->cgroup = NULL;
	}
	for (int i = 0; i < EXEC_LIMITS; i++) {
		char *path = e->limit_root[i] ? xasprintf("%s/%lld-%d", e->limit_root[i],
		                                          (long long)r->attempt_id, r->rank)
		                              : NULL;
		for (int k = 0; path && k < i; k++)
			if (r->limits[k] && strcmp(r->limits[k], path) == 0)
				path[0] = '\0'; /* the same directory as an earlier one */
		if (path && path[0] && access(path, F_OK) == 0)
			r->limits[i] = path;
		else
			free(path);
	}
	if (r->error && !r->lost) {
		r->state = EXEC_FAILED;
	} else if (r->lost) {
		exec_set_final(r, 0, r->error);
	} else {
		r->state = EXEC_RUNNING;
		if (r->shim == 0)
			r->lost_at = now_ms() + STARTING_LOST_MS; /* the shim may still write it */
		exec_poll_running(e, r, now_ms(), 0);
	}
	log_info("rank adopted attempt=%lld rank=%d job=%lld state=%s pid=%d",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id,
	         r->state == EXEC_RUNNING ? "running" : "final", (int)r->pgid);
}

/* What a restarted agent finds in its cgroup root: the spares of the one
 * before it, removed; and a rank's group (<attempt>-<rank>) that no record
 * tells of, because the journal lost its lines (damaged, or removed).
 * Nothing could report that rank's end or stop it when asked, so its
 * processes are stopped now and the rank is reported lost, which the
 * server acts on as for any lost rank. One pass, after the journal. */
static void stale_cgroups_remove(struct exec *e)
{
	DIR *d = e->cgroup_root ? opendir(e->cgroup_root) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "spare-", 6) == 0) {
			char *path = xasprintf("%s/%s", e->cgroup_root, de->d_name);
			log_info("removing a stale spare cgroup=%s", path);
			exec_doom_cgroup(e, path);
			continue;
		}
		char head[32];
		const char *dash = strchr(de->d_name, '-');
		size_t len = dash ? (size_t)(dash - de->d_name) : 0;
		int64_t attempt, rank;
		if (len == 0 || len >= sizeof(head))
			continue;
		memcpy(head, de->d_name, len);
		head[len] = '\0';
		if (parse_i64(head, 1, INT64_MAX, &attempt) != 0 ||
		    parse_i64(dash + 1, 0, 1 << 20, &rank) != 0 ||
		    exec_rank_find(e, attempt, (int)rank, NULL))
			continue;
		struct rank *r = exec_rank_add(e, attempt, (int)rank);
		log_warn("a rank that no journal record tells of: stopping it attempt=%lld rank=%d "
		         "cgroup=%s",
		         (long long)attempt, (int)rank, r->cgroup);
		exec_set_final(r, 0,
		               "the agent lost its record of this rank (its journal was damaged or "
		               "removed) and stopped its processes");
		exec_doom_cgroup(e, r->cgroup);
		r->cgroup = NULL;
		exec_journal_write(e, r, 1);
	}
	if (d)
		closedir(d);
	/* A killed process leaves its cgroup a moment after the signal. */
	for (int tries = 0; e->ndoomed && tries < 20; tries++) {
		sleep_ms(5);
		exec_tidy_doomed(e);
	}
}

static void exec_journal_load(struct exec *e)
{
	e->loading = 1;
	journal_read(e->journal, on_line, e);
	e->loading = 0;
	stale_cgroups_remove(e);
	for (size_t i = 0; i < e->n; i++)
		adopt(e, e->ranks[i]);
}

int exec_new(const char *work_dir, const char *node_name, struct exec **out)
{
	char *logs = xasprintf("%s/logs", work_dir), *outd = xasprintf("%s/output", work_dir);
	char *spare_dirs = xasprintf("%s/spare-output", work_dir);
	int rc = mkdir_p(logs, 0755);
	if (rc == 0)
		rc = mkdir_p(outd, 0755);
	if (rc == 0)
		rc = mkdir_p(spare_dirs, 0755);
	free(logs);
	free(outd);
	if (rc) {
		free(spare_dirs);
		return rc;
	}
	struct journal *j = NULL;
	if ((rc = journal_open(work_dir, &j)) != 0)
		return rc;
	int null_fd = exec_open_high("/dev/null", O_RDWR, 0);
	int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (null_fd < 0 || epoll_fd < 0) {
		rc = null_fd < 0 ? null_fd : -errno;
		if (null_fd >= 0)
			close(null_fd);
		journal_free(j);
		free(spare_dirs);
		return rc;
	}
	struct exec *e = xcalloc(1, sizeof(*e));
	e->work_dir = xstrdup(work_dir);
	e->null_fd = null_fd;
	e->epoll_fd = epoll_fd;
	e->journal = j;
	e->spare_dirs = spare_dirs;
	exec_launch_dirs_load(e);
	e->want_spares = EXEC_SPARES_DEFAULT;
	char *pool = xasprintf("%s/spare-logs", work_dir);
	int prc = logpool_start(pool, &e->logs);
	if (prc)
		log_warn("no log pool: every start makes its log dir=%s error=\"%s\"", pool,
		         strerror(-prc));
	free(pool);
	/* The group is named by node and work dir, so that agents of different
	 * clusters on one machine (tests, several `anvil up`s) never share one,
	 * while a restarted agent finds its ranks' groups again. */
	uint32_t h = 2166136261u;
	for (const char *p = work_dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	char *group = xasprintf("%s-%08x", node_name, h);
	const char *mode = getenv("ANVIL_CGROUP");
	enum cgroup_mode m = CGROUP_AUTO;
	if (mode && strcmp(mode, "v1") == 0)
		m = CGROUP_V1;
	else if (mode && strcmp(mode, "v2") == 0)
		m = CGROUP_V2;
	rc = mode && strcmp(mode, "off") == 0 ? -ECANCELED
	                                      : cgroup_setup(group, m, &e->cgroup_root);
	if (rc)
		log_info("running ranks without cgroups reason=\"%s\"",
		         rc == -ENOTSUP     ? "no v1 pids or freezer hierarchy, no cgroup v2"
		         : rc == -ECANCELED ? "ANVIL_CGROUP=off"
		                            : strerror(-rc));
	e->v2 = e->cgroup_root && cgroup_is_v2(e->cgroup_root);
	if (e->v2)
		log_info("cgroup v2 root=%s", e->cgroup_root);
	for (int i = 0; i < EXEC_LIMITS; i++)
		exec_limits_setup(e, group, i);
	free(group);
	const char *iso = getenv("ANVIL_DEVICE_ISOLATION");
	e->isolate = iso && *iso ? strcmp(iso, "0") != 0 : access("/dev/nvidiactl", F_OK) == 0;
	if (e->isolate)
		log_info("GPU device isolation on: ranks open only their own GPUs");
	exec_journal_load(e);
	*out = e;
	return 0;
}

void exec_free(struct exec *e)
{
	if (!e)
		return;
	logpool_stop(e->logs);
	for (int i = 0; i < e->nspares; i++)
		exec_spares_discard(e, &e->spares[i]);
	for (int tries = 0; e->ndoomed && tries < 20; tries++) {
		sleep_ms(5);
		exec_tidy_doomed(e);
	}
	for (size_t i = 0; i < e->ndoomed; i++)
		free(e->doomed[i]);
	free(e->doomed);
	close(e->null_fd);
	close(e->epoll_fd);
	journal_free(e->journal);
	free(e->exiting);
	free(e->spare_dirs);
	free(e->free_dirs);
	for (size_t i = 0; i < e->n; i++) {
		struct rank *r = e->ranks[i];
		if (r->sock >= 0)
			close(r->sock); /* a shim still running a rank exits after it */
		/* A killed process leaves its cgroup a moment after the signal. */
		for (int tries = 0; (r->cgroup_left || exec_limits_left(r)) && tries < 20;
		     tries++) {
			exec_cgroup_tidy(r);
			if (r->cgroup_left || exec_limits_left(r))
				sleep_ms(5);
		}
		rank_free(r);
	}
	if (e->cgroup_root)
		rmdir(e->cgroup_root); /* only when no rank of ours is left in it */
	free(e->cgroup_root);
	for (int i = 0; i < EXEC_LIMITS; i++) {
		if (e->limit_root[i])
			rmdir(e->limit_root[i]);
		free(e->limit_root[i]);
	}
	free(e->ranks);
	free(e->work_dir);
	free(e);
}

int exec_uses_cgroups(const struct exec *e)
{
	return e->cgroup_root != NULL;
}

const char *exec_limit_root(const struct exec *e, enum exec_limit which)
{
	return which >= 0 && which < EXEC_LIMITS ? e->limit_root[which] : NULL;
}

void exec_set_device_isolation(struct exec *e, int on)
{
	e->isolate = on != 0;
}

int exec_device_isolation(const struct exec *e)
{
	return e->isolate;
}

size_t exec_count(const struct exec *e)
{
	return e->n;
}

int exec_running(const struct exec *e)
{
	int n = 0;
	for (size_t i = 0; i < e->n; i++)
		n += e->ranks[i]->state == EXEC_RUNNING;
	return n;
}

uint64_t exec_started_total(const struct exec *e)
{
	return e->started;
}

void exec_get(const struct exec *e, size_t i, struct exec_status *out)
{
	const struct rank *r = e->ranks[i];
	*out = (struct exec_status){
	        .attempt_id = r->attempt_id,
	        .rank = r->rank,
	        .job_id = r->job_id,
	        .state = r->state,
	        .stopping = r->stopping,
	        .pid = (int)r->pgid,
	        .exit_code = r->exit_code,
	        .signal = r->signal,
	        .error = r->error,
	        .acked = r->acked,
	};
}

int exec_find(const struct exec *e, int64_t attempt_id, int rank, struct exec_status *out)
{
	size_t i;
	if (!exec_rank_find(e, attempt_id, rank, &i))
		return ERR_NOTFOUND;
	exec_get(e, i, out);
	return 0;
}

void exec_ack(struct exec *e, int64_t attempt_id, int rank)
{
	struct rank *r = exec_rank_find(e, attempt_id, rank, NULL);
	if (r && r->state != EXEC_RUNNING)
		r->acked = 1;
}

static void exec_rank_drop(struct exec *e, size_t i)
{
	rank_free(e->ranks[i]);
	e->ranks[i] = e->ranks[--e->n];
}

void exec_forget(struct exec *e, int64_t attempt_id, int rank)
{
	size_t i;
	struct rank *r = exec_rank_find(e, attempt_id, rank, &i);
	if (!r || r->state == EXEC_RUNNING)
		return;
	exec_journal_put(e, json_pack("{s:I,s:i,s:b}", "attempt_id", (json_int_t)r->attempt_id,
	                              "rank", r->rank, "forgotten", 1));
	exec_cgroup_tidy(r);
	for (int k = 0; k < EXEC_LIMITS; k++)
		if (r->limits[k]) { /* still busy: exec_poll finishes the job */
			exec_doom_cgroup(e, r->limits[k]);
			r->limits[k] = NULL;
		}
	reap(r);
	if (r->own && r->shim > 0) {
		e->exiting = xrealloc(e->exiting, (e->nexiting + 1) * sizeof(*e->exiting));
		e->exiting[e->nexiting++] = r->shim;
	}
	exec_rank_drop(e, i);
	exec_launch_output_done(e, attempt_id);
}
