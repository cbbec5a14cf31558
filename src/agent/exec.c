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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/shim.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define ADOPT_POLL_MS    250  /* adopted shims are not our children: no SIGCHLD */
#define STARTING_LOST_MS 5000 /* an adopted rank whose shim never wrote its pid file */
#define CGROUP_RETRY_MS  20

struct rank {
	int64_t attempt_id;
	int rank;
	int64_t job_id;
	int64_t grace_ms;
	int64_t start_wall_ms;
	char *dir;  /* WORK_DIR/attempts/<attempt_id> */
	pid_t shim; /* 0 when unknown */
	pid_t pgid; /* the command's process group; 0 when unknown */
	int own;    /* the shim is our child (SIGCHLD tells when it ends) */
	enum exec_state state;
	int exit_code, signal;
	char *error;
	int stopping, killed;
	int64_t kill_at; /* monotonic ms: SIGKILL due */
	int64_t lost_at; /* monotonic ms: adopted without pid file, give up */
	int acked;
	char *cgroup;    /* NULL without cgroups */
	int cgroup_left; /* the cgroup directory still has to be removed */
};

struct exec {
	char *work_dir;
	char *cgroup_root; /* NULL without cgroups */
	struct rank **ranks;
	size_t n, cap;
	uint64_t started;
};

static char *rank_file(const struct rank *r, const char *ext)
{
	return xasprintf("%s/rank-%d.%s", r->dir, r->rank, ext);
}

char *exec_log_path(const char *work_dir, int64_t attempt_id, int rank)
{
	return xasprintf("%s/attempts/%lld/rank-%d.log", work_dir, (long long)attempt_id, rank);
}

static struct rank *find(const struct exec *e, int64_t attempt_id, int rank, size_t *pos)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->ranks[i]->attempt_id == attempt_id && e->ranks[i]->rank == rank) {
			if (pos)
				*pos = i;
			return e->ranks[i];
		}
	return NULL;
}

static struct rank *rank_add(struct exec *e, int64_t attempt_id, int rank)
{
	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 16;
		e->ranks = xrealloc(e->ranks, e->cap * sizeof(*e->ranks));
	}
	struct rank *r = xcalloc(1, sizeof(*r));
	r->attempt_id = attempt_id;
	r->rank = rank;
	r->dir = xasprintf("%s/attempts/%lld", e->work_dir, (long long)attempt_id);
	if (e->cgroup_root)
		r->cgroup = xasprintf("%s/%lld-%d", e->cgroup_root, (long long)attempt_id, rank);
	e->ranks[e->n++] = r;
	return r;
}

static void rank_free(struct rank *r)
{
	free(r->dir);
	free(r->error);
	free(r->cgroup);
	free(r);
}

/* tmp + rename without fsync: a record only matters while its processes
 * live, and they do not survive the machine going down. */
static int write_small(const char *path, const char *text)
{
	char *tmp = xasprintf("%s.tmp", path);
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	size_t len = strlen(text);
	if (write(fd, text, len) != (ssize_t)len)
		rc = errno ? -errno : -EIO;
	close(fd);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
out:
	free(tmp);
	return rc;
}

static int record_write(const struct rank *r)
{
	json_t *o =
	        json_pack("{s:I,s:i,s:I,s:I,s:I}", "attempt_id", (json_int_t)r->attempt_id, "rank",
	                  r->rank, "job_id", (json_int_t)r->job_id, "grace_ms",
	                  (json_int_t)r->grace_ms, "start_time_ms", (json_int_t)r->start_wall_ms);
	if (r->error)
		json_object_set_new(o, "error", json_string(r->error));
	char *text = jv_dump(o);
	json_decref(o);
	char *path = rank_file(r, "json");
	int rc = write_small(path, text);
	free(path);
	free(text);
	return rc;
}

static void kill_rank(struct rank *r, int sig)
{
	if (r->pgid > 0)
		killpg(r->pgid, sig);
	if (r->cgroup)
		cgroup_signal(r->cgroup, sig);
}

static void cgroup_tidy(struct rank *r)
{
	if (!r->cgroup_left)
		return;
	cgroup_signal(r->cgroup, SIGKILL);
	if (cgroup_remove(r->cgroup) == 0)
		r->cgroup_left = 0;
}

/* The command ended with wait status st, or was lost (st unused). live:
 * noticed by exec_poll rather than found ended at adoption. */
static void finish(struct rank *r, int st, const char *lost, int live)
{
	r->state = EXEC_EXITED;
	if (lost) {
		r->exit_code = 255;
		r->signal = 0;
		r->error = xstrdup(lost);
	} else if (WIFSIGNALED(st)) {
		r->signal = WTERMSIG(st);
		r->exit_code = 128 + r->signal;
	} else {
		r->exit_code = WEXITSTATUS(st);
	}
	/* Whatever the rank left behind goes with it: everything in its cgroup,
	 * else its process group, but only while we watched it end (an adopted
	 * rank's group may be long gone and its id reused). */
	if (r->cgroup) {
		r->cgroup_left = 1;
		cgroup_tidy(r);
	} else if (live && r->pgid > 0) {
		killpg(r->pgid, SIGKILL);
	}
	if (lost)
		log_warn("rank lost attempt=%lld rank=%d job=%lld reason=\"%s\"",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id, lost);
	else
		log_info("rank exited attempt=%lld rank=%d job=%lld exit_code=%d signal=%d",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id, r->exit_code,
		         r->signal);
}

/* Reads rank-R.exit; 0 with the wait status, or a negative errno. */
static int read_exit(const struct rank *r, int *status)
{
	char *path = rank_file(r, "exit");
	struct buf b;
	buf_init(&b);
	int rc = read_file(path, 64, &b);
	int64_t st = 0;
	if (rc == 0) {
		b.data[strcspn(b.data, "\n")] = '\0';
		rc = parse_i64(b.data, INT32_MIN, INT32_MAX, &st);
	}
	if (rc == 0)
		*status = (int)st;
	buf_cleanup(&b);
	free(path);
	return rc;
}

/* Reads rank-R.pid into r->shim and r->pgid; 0 or a negative errno. */
static int read_pids(struct rank *r)
{
	char *path = rank_file(r, "pid");
	struct buf b;
	buf_init(&b);
	int rc = read_file(path, 64, &b);
	long shim = 0, pgid = 0;
	if (rc == 0) {
		char *end, *end2;
		shim = strtol(b.data, &end, 10);
		pgid = strtol(end, &end2, 10);
		if (end == b.data || end2 == end)
			rc = ERR_INVALID;
	}
	if (rc == 0 && shim > 0 && pgid > 0) {
		r->shim = (pid_t)shim;
		r->pgid = (pid_t)pgid;
	}
	buf_cleanup(&b);
	free(path);
	return rc;
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
                      const char *log_path)
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
static int open_high(const char *path, int flags, unsigned mode)
{
	int fd = open(path, flags | O_CLOEXEC, mode);
	if (fd < 0 || fd > 2)
		return fd < 0 ? -errno : fd;
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	int rc = hi < 0 ? -errno : hi;
	close(fd);
	return rc;
}

struct launch {
	struct shim_launch l;
	struct strv argv, env;
	char *path, *cwd, *out_dir, *log_path;
	char *files[4]; /* pid, pid tmp, exit, exit tmp */
	char *msgs[3];
};

static void launch_init(struct launch *la)
{
	memset(la, 0, sizeof(*la));
	la->l.log_fd = la->l.null_fd = la->l.cgroup_fd = -1;
}

static void launch_cleanup(struct launch *la)
{
	strv_free(&la->argv);
	strv_free(&la->env);
	free(la->path);
	free(la->cwd);
	free(la->out_dir);
	free(la->log_path);
	for (int i = 0; i < 4; i++)
		free(la->files[i]);
	for (int i = 0; i < 3; i++)
		free(la->msgs[i]);
	if (la->l.log_fd >= 0)
		close(la->l.log_fd);
	if (la->l.null_fd >= 0)
		close(la->l.null_fd);
	if (la->l.cgroup_fd >= 0)
		close(la->l.cgroup_fd);
}

static void launch_strings(struct launch *la, struct rank *r, const struct exec_spec *spec)
{
	for (size_t i = 0; spec->argv[i]; i++)
		strv_push(&la->argv, xstrdup(spec->argv[i]));
	build_env(&la->env, spec, la->out_dir, la->log_path);
	la->path = resolve(spec->argv[0], env_get(&la->env, "PATH"));
	la->cwd = xstrdup(spec->cwd ? spec->cwd : la->out_dir);
	la->files[0] = rank_file(r, "pid");
	la->files[1] = rank_file(r, "pid.tmp");
	la->files[2] = rank_file(r, "exit");
	la->files[3] = rank_file(r, "exit.tmp");
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
	        .pid_file = la->files[0],
	        .pid_tmp = la->files[1],
	        .exit_file = la->files[2],
	        .exit_tmp = la->files[3],
	        .msg_notfound = la->msgs[0],
	        .msg_exec = la->msgs[1],
	        .msg_cwd = la->msgs[2],
	};
}

/* Everything the shim needs, prepared before the fork. */
static int launch_prepare(struct launch *la, struct rank *r, const struct exec_spec *spec,
                          char *err, size_t errlen)
{
	la->out_dir = xasprintf("%s/output", r->dir);
	la->log_path = rank_file(r, "log");
	int rc = mkdir_p(la->out_dir, 0755);
	if (rc) {
		snprintf(err, errlen, "cannot create %s: %s", la->out_dir, strerror(-rc));
		return rc;
	}
	rc = la->l.log_fd = open_high(la->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (rc < 0) {
		snprintf(err, errlen, "cannot open %s: %s", la->log_path, strerror(-rc));
		return rc;
	}
	rc = la->l.null_fd = open_high("/dev/null", O_RDWR, 0);
	if (rc < 0) {
		snprintf(err, errlen, "cannot open /dev/null: %s", strerror(-rc));
		return rc;
	}
	if (r->cgroup) {
		rc = mkdir(r->cgroup, 0755) < 0 && errno != EEXIST ? -errno : 0;
		la->l.cgroup_fd = rc ? rc : cgroup_open_procs(r->cgroup);
		if (la->l.cgroup_fd < 0) {
			log_warn("rank runs without a cgroup attempt=%lld rank=%d cgroup=%s "
			         "error=\"%s\"",
			         (long long)r->attempt_id, r->rank, r->cgroup,
			         strerror(-la->l.cgroup_fd));
			la->l.cgroup_fd = -1;
			free(r->cgroup);
			r->cgroup = NULL;
		}
	}
	launch_strings(la, r, spec);
	return 0;
}

static void start_failed(struct rank *r, const char *why)
{
	r->state = EXEC_FAILED;
	r->error = xstrdup(why);
	record_write(r); /* with the error: a restarted agent reports the same */
	if (r->cgroup)
		cgroup_remove(r->cgroup);
	log_warn("rank failed to start attempt=%lld rank=%d job=%lld error=\"%s\"",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id, why);
}

int exec_start(struct exec *e, const struct exec_spec *spec)
{
	if (find(e, spec->attempt_id, spec->rank, NULL))
		return -EEXIST;
	/* Its log outlives a forgotten rank: a rank that has run here once is
	 * never run again, whatever a stale desired set may still list. */
	char *log = exec_log_path(e->work_dir, spec->attempt_id, spec->rank);
	int ran = access(log, F_OK) == 0;
	free(log);
	if (ran)
		return -EALREADY;
	struct rank *r = rank_add(e, spec->attempt_id, spec->rank);
	r->job_id = spec->job_id;
	r->grace_ms = spec->grace_ms;
	r->start_wall_ms = wall_ms();
	e->started++;
	char err[512] = "";
	struct launch la;
	launch_init(&la);
	int rc = launch_prepare(&la, r, spec, err, sizeof(err));
	if (rc == 0 && (rc = record_write(r)) != 0)
		snprintf(err, sizeof(err), "cannot write the rank record in %s: %s", r->dir,
		         strerror(-rc));
	if (rc == 0 && (rc = shim_spawn(&la.l, &r->shim, &r->pgid)) != 0)
		snprintf(err, sizeof(err), "cannot fork: %s", strerror(-rc));
	launch_cleanup(&la);
	if (rc) {
		start_failed(r, err);
		return 0;
	}
	r->own = 1;
	r->state = EXEC_RUNNING;
	log_info("rank started attempt=%lld rank=%d job=%lld pid=%d cgroup=%s",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id, (int)r->pgid,
	         r->cgroup ? "yes" : "no");
	return 0;
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
	struct rank *r = find(e, attempt_id, rank, NULL);
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

static int poll_running(struct rank *r, int64_t now, int live)
{
	if (r->shim == 0 && read_pids(r) == 0 && r->stopping)
		kill_rank(r, r->killed ? SIGKILL : SIGTERM); /* stopped before we knew it */
	int gone = r->shim < 0 || shim_gone(r);
	int st;
	/* Our own shims announce their end with SIGCHLD; others are polled. */
	if ((gone || !r->own) && read_exit(r, &st) == 0) {
		finish(r, st, NULL, live);
		return 1;
	}
	if (gone) {
		finish(r, 0, "the rank's shim ended without recording an exit status", live);
		return 1;
	}
	if (r->shim == 0 && now >= r->lost_at) {
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

int exec_poll(struct exec *e)
{
	int changed = 0;
	int64_t now = now_ms();
	for (size_t i = 0; i < e->n; i++) {
		struct rank *r = e->ranks[i];
		if (r->state == EXEC_RUNNING)
			changed += poll_running(r, now, 1);
		cgroup_tidy(r);
	}
	return changed;
}

int64_t exec_next_poll_ms(const struct exec *e)
{
	int64_t now = now_ms(), next = -1;
	for (size_t i = 0; i < e->n; i++) {
		const struct rank *r = e->ranks[i];
		int64_t in = -1;
		if (r->cgroup_left)
			in = CGROUP_RETRY_MS;
		if (r->state == EXEC_RUNNING && !r->own)
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

/* Re-adopts the rank recorded in DIR/rank-R.json. */
static void adopt(struct exec *e, int64_t attempt_id, int rank)
{
	struct rank *r = rank_add(e, attempt_id, rank);
	char *path = rank_file(r, "json");
	json_t *rec = json_load_file(path, 0, NULL);
	free(path);
	r->job_id = jv_int(rec, "job_id", 0);
	r->grace_ms = jv_int(rec, "grace_ms", 10000);
	r->start_wall_ms = jv_int(rec, "start_time_ms", 0);
	const char *error = jv_str(rec, "error", NULL);
	r->state = EXEC_RUNNING;
	if (r->cgroup && access(r->cgroup, F_OK) != 0) {
		free(r->cgroup);
		r->cgroup = NULL;
	}
	if (error) {
		r->state = EXEC_FAILED;
		r->error = xstrdup(error);
	} else if (read_pids(r) != 0) {
		r->lost_at = now_ms() + STARTING_LOST_MS; /* the shim may still write it */
	}
	json_decref(rec);
	if (r->state == EXEC_RUNNING)
		poll_running(r, now_ms(), 0);
	log_info("rank adopted attempt=%lld rank=%d job=%lld state=%s pid=%d",
	         (long long)attempt_id, rank, (long long)r->job_id,
	         r->state == EXEC_RUNNING ? "running" : "final", (int)r->pgid);
}

static void adopt_attempt(struct exec *e, const char *dir, int64_t attempt_id)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "rank-", 5) != 0)
			continue;
		char *end;
		long rank = strtol(de->d_name + 5, &end, 10);
		if (end != de->d_name + 5 && strcmp(end, ".json") == 0 && rank >= 0 &&
		    rank < 100000 && !find(e, attempt_id, (int)rank, NULL))
			adopt(e, attempt_id, (int)rank);
	}
	closedir(d);
}

static void adopt_all(struct exec *e)
{
	char *top = xasprintf("%s/attempts", e->work_dir);
	DIR *d = opendir(top);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		int64_t id;
		if (parse_i64(de->d_name, 1, INT64_MAX, &id) != 0)
			continue;
		char *dir = xasprintf("%s/%s", top, de->d_name);
		adopt_attempt(e, dir, id);
		free(dir);
	}
	if (d)
		closedir(d);
	free(top);
}

int exec_new(const char *work_dir, const char *node_name, struct exec **out)
{
	char *top = xasprintf("%s/attempts", work_dir);
	int rc = mkdir_p(top, 0755);
	free(top);
	if (rc)
		return rc;
	struct exec *e = xcalloc(1, sizeof(*e));
	e->work_dir = xstrdup(work_dir);
	/* The group is named by node and work dir, so that agents of different
	 * clusters on one machine (tests, several `anvil up`s) never share one,
	 * while a restarted agent finds its ranks' groups again. */
	uint32_t h = 2166136261u;
	for (const char *p = work_dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	char *group = xasprintf("%s-%08x", node_name, h);
	rc = cgroup_setup(group, &e->cgroup_root);
	free(group);
	if (rc)
		log_info("running ranks without cgroups reason=\"%s\"",
		         rc == -ENOTSUP ? "no v1 pids or freezer hierarchy" : strerror(-rc));
	adopt_all(e);
	*out = e;
	return 0;
}

void exec_free(struct exec *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->n; i++) {
		struct rank *r = e->ranks[i];
		/* A killed process leaves its cgroup a moment after the signal. */
		for (int tries = 0; r->cgroup_left && tries < 20; tries++) {
			cgroup_tidy(r);
			if (r->cgroup_left)
				sleep_ms(5);
		}
		rank_free(r);
	}
	if (e->cgroup_root)
		rmdir(e->cgroup_root); /* only when no rank of ours is left in it */
	free(e->cgroup_root);
	free(e->ranks);
	free(e->work_dir);
	free(e);
}

int exec_uses_cgroups(const struct exec *e)
{
	return e->cgroup_root != NULL;
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
	if (!find(e, attempt_id, rank, &i))
		return ERR_NOTFOUND;
	exec_get(e, i, out);
	return 0;
}

void exec_ack(struct exec *e, int64_t attempt_id, int rank)
{
	struct rank *r = find(e, attempt_id, rank, NULL);
	if (r && r->state != EXEC_RUNNING)
		r->acked = 1;
}

void exec_forget(struct exec *e, int64_t attempt_id, int rank)
{
	size_t i;
	struct rank *r = find(e, attempt_id, rank, &i);
	if (!r || r->state == EXEC_RUNNING)
		return;
	const char *exts[] = {"json", "pid"};
	for (int k = 0; k < 2; k++) {
		char *path = rank_file(r, exts[k]);
		unlink(path);
		free(path);
	}
	cgroup_tidy(r);
	rank_free(r);
	e->ranks[i] = e->ranks[--e->n];
}
