/* exec_launch.c - a rank's start (exec_start): its logs, environment and
 * resolved command, its output and checkpoint directories (empty output
 * directories recycled), and its shim, from a spare (exec_spares.c) or
 * forked now.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/exec_int.h"
#include "agent/fence.h"
#include "agent/journal.h"
#include "agent/logpool.h"
#include "agent/shim.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define SPARE_DIRS_MAX 64 /* empty output directories kept for reuse */

char *exec_log_path(const char *work_dir, int64_t attempt_id, int rank, enum exec_stream stream)
{
	return xasprintf("%s/logs/%lld-%d.%s", work_dir, (long long)attempt_id, rank,
	                 stream == EXEC_STDERR ? "err" : "log");
}

void exec_strv_push(struct strv *s, char *owned)
{
	if (s->n + 2 > s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->v = xrealloc(s->v, s->cap * sizeof(char *));
	}
	s->v[s->n++] = owned;
	s->v[s->n] = NULL;
}

void exec_strv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

/* Sets "KEY=VALUE" (owned), replacing an earlier value of KEY. */
void exec_env_set(struct strv *s, char *kv)
{
	size_t klen = strcspn(kv, "=");
	for (size_t i = 0; i < s->n; i++)
		if (strncmp(s->v[i], kv, klen) == 0 && s->v[i][klen] == '=') {
			free(s->v[i]);
			s->v[i] = kv;
			return;
		}
	exec_strv_push(s, kv);
}

const char *exec_env_get(const struct strv *s, const char *key)
{
	size_t klen = strlen(key);
	for (size_t i = 0; i < s->n; i++)
		if (strncmp(s->v[i], key, klen) == 0 && s->v[i][klen] == '=')
			return s->v[i] + klen + 1;
	return NULL;
}

char *exec_heartbeat_path(const char *work_dir, int64_t attempt_id, int rank)
{
	char *dir = exec_rank_dir(work_dir, attempt_id, rank);
	char *p = xasprintf("%s/.anvil-heartbeat", dir);
	free(dir);
	return p;
}

char *exec_session_socket(const struct exec *e, int64_t attempt_id, int rank)
{
	char *dir = exec_rank_dir(e->work_dir, attempt_id, rank);
	char *sock = xasprintf("%s/.anvil-session.sock", dir);
	free(dir);
	return sock;
}

/* What a Unix socket's sun_path holds, with its NUL. */
#define SOCKET_PATH_MAX 108

static void build_env(const struct exec *e, struct strv *env, const struct exec_spec *spec,
                      const char *out_dir, const char *log_path, const char *err_path,
                      const char *ckpt_dir, const char *session_socket)
{
	static const char *const base[] = {"PATH", "HOME", "LANG", "TERM"};
	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
		const char *v = getenv(base[i]);
		if (v)
			exec_env_set(env, xasprintf("%s=%s", base[i], v));
	}
	if (!exec_env_get(env, "PATH"))
		exec_env_set(env, xstrdup("PATH=/usr/local/bin:/usr/bin:/bin"));
	for (size_t i = 0; spec->env && spec->env[i]; i++)
		if (strchr(spec->env[i], '=') && spec->env[i][0] != '=')
			exec_env_set(env, xstrdup(spec->env[i]));
	exec_env_set(env, xasprintf("ANVIL_OUTPUT_DIR=%s", out_dir));
	exec_env_set(env, xasprintf("ANVIL_LOG_FILE=%s", log_path));
	exec_env_set(env, xasprintf("ANVIL_ERR_FILE=%s", err_path));
	if (ckpt_dir)
		exec_env_set(env, xasprintf("ANVIL_CHECKPOINT_DIR=%s", ckpt_dir));
	if (session_socket)
		exec_env_set(env, xasprintf("%s=%s", EXEC_SESSION_ENV, session_socket));
	char *beat = exec_heartbeat_path(e->work_dir, spec->attempt_id, spec->rank);
	exec_env_set(env, xasprintf("ANVIL_HEARTBEAT_FILE=%s", beat)); /* agent/hang.h */
	free(beat);
	exec_fence_env(e, spec, env);
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

/* execvp's search, done before the fork, as the rank's account would do
 * it (a fenced rank skips what it may not run, as execvp skips EACCES);
 * NULL when not found. */
static char *resolve(const struct fence *f, const char *cmd, const char *path_var)
{
	if (strchr(cmd, '/'))
		return xstrdup(cmd);
	const char *p = path_var;
	while (p) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		char *cand = xasprintf("%.*s/%s", (int)len, len ? p : ".", cmd);
		struct stat st;
		if (f ? fence_can_exec(f, cand)
		      : stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return cand;
		free(cand);
		p = colon ? colon + 1 : NULL;
	}
	return NULL;
}

static void launch_init(struct launch *la, int null_fd)
{
	memset(la, 0, sizeof(*la));
	la->l.log_fd = la->l.err_fd = la->l.cgroup_fd = la->l.record_fd = -1;
	la->l.null_fd = null_fd; /* borrowed from the executor */
}

static void launch_cleanup(struct launch *la)
{
	for (int i = 0; i < la->l.njoin; i++)
		close(la->l.join_fds[i]);
	exec_strv_free(&la->argv);
	exec_strv_free(&la->env);
	free(la->path);
	free(la->cwd);
	free(la->out_dir);
	free(la->log_path);
	free(la->err_path);
	free(la->rank_dir);
	free(la->task_dir);
	fence_plan_free(la->fence);
	for (int i = 0; i < 3; i++)
		free(la->msgs[i]);
	if (la->l.log_fd >= 0)
		close(la->l.log_fd);
	if (la->l.err_fd >= 0)
		close(la->l.err_fd);
	if (la->l.cgroup_fd >= 0)
		close(la->l.cgroup_fd);
}

static void launch_strings(struct exec *e, struct launch *la, const struct exec_spec *spec,
                           const char *ckpt, const char *session_socket)
{
	if (spec->session) { /* SELF _session -- ARGV... (agent/holder.h) */
		exec_strv_push(&la->argv, xstrdup(e->self));
		exec_strv_push(&la->argv, xstrdup("_session"));
		exec_strv_push(&la->argv, xstrdup("--"));
	}
	for (size_t i = 0; spec->argv[i]; i++)
		exec_strv_push(&la->argv, xstrdup(spec->argv[i]));
	build_env(e, &la->env, spec, la->out_dir, la->log_path, la->err_path, ckpt, session_socket);
	la->path = spec->session ? xstrdup(e->self)
	                         : resolve(spec->as_root ? NULL : e->fence, spec->argv[0],
	                                   exec_env_get(&la->env, "PATH"));
	la->cwd = xstrdup(spec->cwd ? spec->cwd : la->out_dir);
	la->msgs[0] = xasprintf("anvil: cannot run '%s': command not found (PATH=%s)\n",
	                        spec->argv[0], exec_env_get(&la->env, "PATH"));
	la->msgs[1] = xasprintf("anvil: cannot execute '%s': ", la->path ? la->path : "");
	la->msgs[2] = xasprintf("anvil: cannot change directory to '%s': ", la->cwd);
	la->l = (struct shim_launch){
	        .path = la->path,
	        .argv = la->argv.v,
	        .envp = la->env.v,
	        .cwd = la->cwd,
	        .log_fd = la->l.log_fd,
	        .err_fd = la->l.err_fd,
	        .null_fd = la->l.null_fd,
	        .cgroup_fd = la->l.cgroup_fd,
	        .record_fd = la->l.record_fd,
	        .record_key = la->key,
	        .msg_notfound = la->msgs[0],
	        .msg_exec = la->msgs[1],
	        .msg_cwd = la->msgs[2],
	        .fence = la->fence,
	        .lease_fd = e->lease_fd,
	        .grace_ms = spec->grace_ms,
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
void exec_launch_output_done(struct exec *e, int64_t attempt_id)
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
void exec_launch_dirs_load(struct exec *e)
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

/* The job's working directory must be there: a directory that exists
 * where the job was submitted need not exist on every node. Checked here,
 * the rank fails to start and says why (the job's reason, its stderr log);
 * otherwise the command's chdir would fail, exit 127 and say it only in
 * the log. (One that vanishes between here and the chdir still does.) */
static int check_cwd(const char *cwd, int err_fd, char *err, size_t errlen)
{
	struct stat sb;
	int rc = stat(cwd, &sb) < 0 ? -errno : 0;
	if (rc == 0 && S_ISDIR(sb.st_mode))
		return 0;
	if (rc == 0 || rc == -ENOENT || rc == -ENOTDIR)
		snprintf(err, errlen, "working directory %s %s on this node", cwd,
		         rc == 0 ? "is not a directory" : "does not exist");
	else
		snprintf(err, errlen, "working directory %s: %s", cwd, strerror(-rc));
	dprintf(err_fd, "anvil: failed to start: %s\n", err);
	return rc ? rc : -ENOTDIR;
}

/* The stderr log, from the pool when it has one. Not O_EXCL: the stdout
 * log, made first, is the sign that the rank ran here, and a .err without
 * it was left by a start that failed in between. */
static int open_err_log(struct exec *e, const char *path)
{
	int fd = e->logs ? logpool_take(e->logs, path) : -EAGAIN;
	if (fd == -EAGAIN || fd == -EEXIST)
		fd = exec_open_high(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	return fd;
}

/* Everything the shim needs, prepared before the fork; the stdout log is
 * open already and the cgroup comes later (a spare brings its own). */
static int launch_prepare(struct exec *e, struct launch *la, struct exec_rank *r,
                          const struct exec_spec *spec, char *err, size_t errlen)
{
	la->err_path = exec_log_path(e->work_dir, r->attempt_id, r->rank, EXEC_STDERR);
	int rc = la->l.err_fd = open_err_log(e, la->err_path);
	if (rc < 0) {
		snprintf(err, errlen, "cannot open %s: %s", la->err_path, strerror(-rc));
		return rc;
	}
	if (spec->cwd) {
		rc = check_cwd(spec->cwd, la->l.err_fd, err, errlen);
		if (rc == 0 && (rc = exec_fence_cwd(e, spec, spec->cwd, err, errlen)) != 0)
			dprintf(la->l.err_fd, "anvil: failed to start: %s\n", err);
		if (rc)
			return rc;
	}
	la->out_dir = output_dir(e, r->attempt_id);
	rc = make_output_dir(e, la->out_dir);
	if (rc) {
		snprintf(err, errlen, "cannot create %s: %s", la->out_dir, strerror(-rc));
		return rc;
	}
	snprintf(la->key, sizeof(la->key), "\"attempt_id\":%lld,\"rank\":%d",
	         (long long)r->attempt_id, r->rank);
	la->l.record_fd = journal_fd(e->journal);
	char *sock = spec->session ? exec_session_socket(e, r->attempt_id, r->rank) : NULL;
	if (sock && strlen(sock) >= SOCKET_PATH_MAX) {
		snprintf(err, errlen,
		         "the session's socket path %s is longer than a Unix socket's %d bytes: "
		         "give the agent a shorter --work-dir",
		         sock, SOCKET_PATH_MAX - 1);
		free(sock);
		return -ENAMETOOLONG;
	}
	char *ckpt = checkpoint_dir(e, spec);
	rc = exec_fence_prepare(e, la, spec, ckpt, err, errlen);
	if (rc == 0)
		launch_strings(e, la, spec, ckpt, sock);
	free(ckpt);
	free(sock);
	return rc;
}

/* The direct path's cgroup: the command joins it itself before exec. */
static void launch_cgroup(struct launch *la, struct exec_rank *r)
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

/* Starts the rank's shim: from a spare when one is ready, else forked now. */
static int launch(struct exec *e, struct exec_rank *r, struct launch *la, char *err, size_t errlen)
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

static void start_failed(struct exec *e, struct exec_rank *r, const char *why)
{
	exec_rank_move(r, EXEC_FAILED);
	r->error = xstrdup(why);
	exec_journal_write(e, r, 0); /* a restarted agent reports the same */
	if (r->cgroup)
		r->cgroup_left = 1;
	exec_cgroup_tidy(r);
	log_warn("rank failed to start attempt=%lld rank=%d job=%lld error=\"%s\"",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id, why);
}

static void log_started(const struct exec_rank *r)
{
	log_debug("rank started attempt=%lld rank=%d job=%lld pid=%d cgroup=%s spare=%d "
	          "limits=%d",
	          (long long)r->attempt_id, r->rank, (long long)r->job_id, (int)r->pgid,
	          r->cgroup ? "yes" : "no", r->spare, r->nlimits);
}

void exec_batch(struct exec *e)
{
	e->batch = 1;
}

/* A batched start's spare took the launch and ended without a word: what
 * exec_start does when that happens unbatched. */
static void launch_lost(struct exec *e, struct exec_rank *r)
{
	log_warn("spare shim failed attempt=%lld rank=%d pid=%d error=\"%s\"",
	         (long long)r->attempt_id, r->rank, (int)r->shim, strerror(ECHILD));
	epoll_ctl(e->epoll_fd, EPOLL_CTL_DEL, r->sock, NULL);
	struct spare s = {.shim = {.pid = r->shim, .sock = r->sock}};
	exec_spares_discard(e, &s); /* closes, kills and reaps it */
	r->sock = -1;
	r->shim = -r->shim;
	r->own = 0;
	e->ctx_version++;
	start_failed(e, r, "the spare shim ended before reporting the command");
}

void exec_settle(struct exec *e)
{
	e->batch = 0;
	for (size_t i = 0; e->nlaunching > 0 && i < e->n; i++) {
		struct exec_rank *r = e->ranks[i];
		if (!r->launching)
			continue;
		r->launching = 0;
		e->nlaunching--;
		struct shim sh = {.pid = r->shim, .sock = r->sock};
		if (shim_spare_started(&sh, &r->pgid) == 0)
			log_started(r);
		else
			launch_lost(e, r);
	}
}

int exec_start(struct exec *e, const struct exec_spec *spec)
{
	if (exec_rank_find(e, spec->attempt_id, spec->rank, NULL))
		return -EEXIST;
	/* Its log outlives a forgotten rank: a rank that has run here once is
	 * never run again, whatever a stale desired set may still list. The
	 * log is made here, so it is also the check. */
	char *log = exec_log_path(e->work_dir, spec->attempt_id, spec->rank, EXEC_STDOUT);
	int log_fd = e->logs ? logpool_take(e->logs, log) : -EAGAIN;
	if (log_fd == -EAGAIN)
		log_fd = exec_open_high(log, O_WRONLY | O_CREAT | O_EXCL | O_APPEND, 0644);
	if (log_fd == -EEXIST) {
		free(log);
		return -EALREADY;
	}
	struct exec_rank *r = exec_rank_add(e, spec->attempt_id, spec->rank);
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
	r->nlimits = la.l.njoin;
	char **la_env = NULL, *la_cwd = NULL;
	if (rc == 0) {
		la_env = la.env.v;
		la.env = (struct strv){0};
		la_cwd = la.cwd;
		la.cwd = NULL;
	}
	launch_cleanup(&la);
	if (rc) {
		start_failed(e, r, err);
		return 0;
	}
	r->own = 1; /* running since exec_rank_add */
	/* kept for exec into the rank (exec_context): taken, not copied */
	r->session = spec->session;
	r->task = spec->task;
	r->env = la_env;
	r->cwd = la_cwd;
	e->ctx_version++;
	if (!r->launching)
		log_started(r);
	return 0;
}

void exec_describe(struct exec *e, const struct exec_spec *spec)
{
	struct exec_rank *r = exec_rank_find(e, spec->attempt_id, spec->rank, NULL);
	if (!r || r->state != EXEC_RUNNING || r->env)
		return;
	char *out = output_dir(e, r->attempt_id);
	char *log = exec_log_path(e->work_dir, r->attempt_id, r->rank, EXEC_STDOUT);
	char *errp = exec_log_path(e->work_dir, r->attempt_id, r->rank, EXEC_STDERR);
	char *ckpt = checkpoint_dir(e, spec);
	char *sock = spec->session ? exec_session_socket(e, r->attempt_id, r->rank) : NULL;
	struct strv env = {0};
	build_env(e, &env, spec, out, log, errp, ckpt, sock);
	r->env = env.v;
	r->cwd = spec->cwd ? xstrdup(spec->cwd) : out;
	r->session = spec->session;
	if (spec->cwd)
		free(out);
	free(log);
	free(errp);
	free(ckpt);
	free(sock);
	e->ctx_version++;
}
