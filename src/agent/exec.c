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
#define SPARE_RETRY_MS   1000 /* after a spare could not be made */

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

/* A spare shim ready for the next rank (shim.h), in its own cgroup. */
struct spare {
	struct shim_spare shim;
	char *cgroup; /* ROOT/spare-<agent pid>-<n>; NULL without cgroups */
};

struct exec {
	char *work_dir;
	char *cgroup_root; /* NULL without cgroups */
	int null_fd;       /* /dev/null for every shim */
	struct rank **ranks;
	size_t n, cap;
	uint64_t started, started_spare;
	struct spare spares[EXEC_SPARES_MAX]; /* oldest first */
	int nspares, want_spares;
	uint64_t spare_seq;
	int64_t spare_retry_at; /* monotonic ms */
	char **doomed;          /* spare cgroups still to empty and remove */
	size_t ndoomed;
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

/* The rank's record, rank-R.jsonl: JSON objects, one per line, each line
 * appended in one write() (a process crash cannot split a write this
 * small, so a reader sees whole lines); later keys win. The agent writes
 * the first line before the shim starts and an "error" line if it could
 * not start; the shim appends "shim"/"pgid" and then "wait_status" through
 * the same file (no file of its own to create: on ext4 creating an inode
 * is the costliest step of a start). */
static json_t *record_line(const struct rank *r)
{
	json_t *o =
	        json_pack("{s:I,s:i,s:I,s:I,s:I}", "attempt_id", (json_int_t)r->attempt_id, "rank",
	                  r->rank, "job_id", (json_int_t)r->job_id, "grace_ms",
	                  (json_int_t)r->grace_ms, "start_time_ms", (json_int_t)r->start_wall_ms);
	if (r->error)
		json_object_set_new(o, "error", json_string(r->error));
	return o;
}

/* Opens the record (O_APPEND, for the shim too) and appends the rank's
 * line; an fd or a negative errno. */
static int record_append(const struct rank *r, int flags)
{
	char *path = rank_file(r, "jsonl");
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | flags, 0644);
	free(path);
	if (fd < 0)
		return -errno;
	json_t *o = record_line(r);
	char *text = jv_dump(o);
	json_decref(o);
	size_t len = strlen(text);
	text[len] = '\n'; /* jv_dump's NUL: the line ends there */
	int rc = write(fd, text, len + 1) == (ssize_t)len + 1 ? 0 : errno ? -errno : -EIO;
	free(text);
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

#define RECORD_MAX (64 * 1024)

/* The record's lines merged into one object; NULL when it cannot be read.
 * A last line without its newline is being written: ignored. */
static json_t *record_load(const struct rank *r)
{
	char *path = rank_file(r, "jsonl");
	struct buf b;
	buf_init(&b);
	int rc = read_file(path, RECORD_MAX, &b);
	free(path);
	json_t *all = NULL;
	char *line = b.data, *nl;
	while (rc == 0 && (nl = memchr(line, '\n', b.len - (size_t)(line - b.data)))) {
		json_t *o = json_loadb(line, (size_t)(nl - line), 0, NULL);
		if (json_is_object(o)) {
			if (!all)
				all = json_object();
			json_object_update(all, o);
		}
		json_decref(o);
		line = nl + 1;
	}
	buf_cleanup(&b);
	return all;
}

static void kill_rank(struct rank *r, int sig)
{
	if (r->pgid > 0)
		killpg(r->pgid, sig);
	if (r->cgroup)
		cgroup_signal(r->cgroup, sig, r->shim > 0 ? r->shim : 0);
}

static void cgroup_tidy(struct rank *r)
{
	if (!r->cgroup_left)
		return;
	cgroup_signal(r->cgroup, SIGKILL, r->shim > 0 ? r->shim : 0);
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

/* The wait status the shim recorded; 0, or ERR_NOTFOUND while none. */
static int read_exit(const struct rank *r, int *status)
{
	json_t *rec = record_load(r);
	json_t *st = json_object_get(rec, "wait_status");
	int rc = json_is_integer(st) ? 0 : ERR_NOTFOUND;
	if (rc == 0)
		*status = (int)json_integer_value(st);
	json_decref(rec);
	return rc;
}

/* Sets r->shim and r->pgid from what the shim recorded (rec, or read now
 * when NULL); 0, or ERR_NOTFOUND while they are not there. */
static int read_pids(struct rank *r, const json_t *rec)
{
	json_t *own = rec ? NULL : record_load(r);
	const json_t *o = rec ? rec : own;
	int64_t shim = jv_int(o, "shim", 0), pgid = jv_int(o, "pgid", 0);
	json_decref(own);
	if (shim <= 0 || pgid <= 0 || shim > INT32_MAX || pgid > INT32_MAX)
		return ERR_NOTFOUND;
	r->shim = (pid_t)shim;
	r->pgid = (pid_t)pgid;
	return 0;
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
	char *msgs[3];
};

static void launch_init(struct launch *la, int null_fd)
{
	memset(la, 0, sizeof(*la));
	la->l.log_fd = la->l.cgroup_fd = la->l.record_fd = -1;
	la->l.null_fd = null_fd; /* borrowed from the executor */
}

static void launch_cleanup(struct launch *la)
{
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
	if (la->l.record_fd >= 0)
		close(la->l.record_fd);
	if (la->l.cgroup_fd >= 0)
		close(la->l.cgroup_fd);
}

static void launch_strings(struct launch *la, const struct exec_spec *spec)
{
	for (size_t i = 0; spec->argv[i]; i++)
		strv_push(&la->argv, xstrdup(spec->argv[i]));
	build_env(&la->env, spec, la->out_dir, la->log_path);
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
	        .msg_notfound = la->msgs[0],
	        .msg_exec = la->msgs[1],
	        .msg_cwd = la->msgs[2],
	};
}

/* dir and dir/output; mkdir_p only when attempts/ itself has gone. */
static int make_dirs(const char *dir, const char *out_dir)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return errno == ENOENT ? mkdir_p(out_dir, 0755) : -errno;
	if (mkdir(out_dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Everything the shim needs, prepared before the fork; the cgroup comes
 * later (a spare brings its own). */
static int launch_prepare(struct launch *la, struct rank *r, const struct exec_spec *spec,
                          char *err, size_t errlen)
{
	la->out_dir = xasprintf("%s/output", r->dir);
	la->log_path = rank_file(r, "log");
	int rc = make_dirs(r->dir, la->out_dir);
	if (rc) {
		snprintf(err, errlen, "cannot create %s: %s", la->out_dir, strerror(-rc));
		return rc;
	}
	rc = la->l.log_fd = open_high(la->log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (rc < 0) {
		snprintf(err, errlen, "cannot open %s: %s", la->log_path, strerror(-rc));
		return rc;
	}
	launch_strings(la, spec);
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

static void spare_discard(struct exec *e, struct spare *s);

/* The rank's shim from the oldest spare: its cgroup is renamed to the
 * rank's (the spare is already in it, so the command is too, by fork),
 * then the launch is sent. 0; -ECHILD when the spare took the launch and
 * died (the rank cannot be known to run); another code when no spare was
 * used and nothing started. */
static int launch_spare(struct exec *e, struct rank *r, struct launch *la)
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
	int rc = shim_spare_launch(&s.shim, &la->l, &r->pgid);
	if (rc == 0) {
		r->shim = s.shim.pid;
		e->started_spare++;
		return 0;
	}
	log_warn("spare shim failed attempt=%lld rank=%d pid=%d error=\"%s\"",
	         (long long)r->attempt_id, r->rank, (int)s.shim.pid, strerror(-rc));
	spare_discard(e, &s);
	return rc == -ECHILD ? rc : -EAGAIN;
}

/* Starts the rank's shim: from a spare when one is ready, else forked now. */
static int launch(struct exec *e, struct rank *r, struct launch *la, char *err, size_t errlen)
{
	int rc = launch_spare(e, r, la);
	if (rc == 0)
		return 0;
	if (rc == -ECHILD) {
		snprintf(err, errlen, "the spare shim ended before reporting the command");
		return rc;
	}
	launch_cgroup(la, r);
	rc = shim_spawn(&la->l, &r->shim, &r->pgid);
	if (rc)
		snprintf(err, errlen, "cannot fork: %s", strerror(-rc));
	return rc;
}

static void start_failed(struct rank *r, const char *why)
{
	r->state = EXEC_FAILED;
	r->error = xstrdup(why);
	int fd = record_append(r, O_CREAT); /* a restarted agent reports the same */
	if (fd >= 0)
		close(fd);
	if (r->cgroup) {
		r->cgroup_left = 1;
		cgroup_tidy(r);
	}
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
	launch_init(&la, e->null_fd);
	int rc = launch_prepare(&la, r, spec, err, sizeof(err));
	if (rc == 0 && (rc = la.l.record_fd = record_append(r, O_CREAT | O_TRUNC)) < 0)
		snprintf(err, sizeof(err), "cannot write the rank record in %s: %s", r->dir,
		         strerror(-rc));
	else if (rc > 0)
		rc = 0;
	if (rc == 0)
		rc = launch(e, r, &la, err, sizeof(err));
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

/* Spares. A spare-* cgroup only ever holds a spare shim: a spare's cgroup
 * is renamed to its rank's before the launch is sent. So whatever is left
 * in one (after a crash, say) can be killed and the cgroup removed. */

/* Kills what is in the cgroup and removes it, now or from exec_poll. */
static void doom_cgroup(struct exec *e, char *path)
{
	cgroup_signal(path, SIGKILL, 0);
	if (cgroup_remove(path) == 0) {
		free(path);
		return;
	}
	e->doomed = xrealloc(e->doomed, (e->ndoomed + 1) * sizeof(*e->doomed));
	e->doomed[e->ndoomed++] = path;
}

static void tidy_doomed(struct exec *e)
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
static void spare_discard(struct exec *e, struct spare *s)
{
	shim_spare_close(&s->shim);
	if (s->shim.pid > 0) {
		kill(s->shim.pid, SIGKILL);
		while (waitpid(s->shim.pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (s->cgroup)
		doom_cgroup(e, s->cgroup);
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

/* Drops spares that died, then makes up the number. */
static void spares_refill(struct exec *e, int64_t now)
{
	for (int i = e->nspares; i-- > 0;) {
		struct spare *s = &e->spares[i];
		if (waitpid(s->shim.pid, NULL, WNOHANG) != s->shim.pid)
			continue;
		log_warn("spare shim ended by itself pid=%d", (int)s->shim.pid);
		s->shim.pid = 0;
		struct spare gone = *s;
		memmove(s, s + 1, (size_t)(--e->nspares - i) * sizeof(*s));
		spare_discard(e, &gone);
	}
	while (e->nspares > e->want_spares) {
		struct spare gone = e->spares[--e->nspares];
		spare_discard(e, &gone);
	}
	if (e->nspares >= e->want_spares || now < e->spare_retry_at)
		return;
	while (e->nspares < e->want_spares) {
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

/* A restarted agent removes the spares of the one before it. */
static void spares_remove_stale(struct exec *e)
{
	DIR *d = e->cgroup_root ? opendir(e->cgroup_root) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "spare-", 6) != 0)
			continue;
		char *path = xasprintf("%s/%s", e->cgroup_root, de->d_name);
		log_info("removing a stale spare cgroup=%s", path);
		doom_cgroup(e, path);
	}
	if (d)
		closedir(d);
	/* A killed process leaves its cgroup a moment after the signal. */
	for (int tries = 0; e->ndoomed && tries < 20; tries++) {
		sleep_ms(5);
		tidy_doomed(e);
	}
}

void exec_set_spares(struct exec *e, int n)
{
	e->want_spares = n < 0 ? 0 : n > EXEC_SPARES_MAX ? EXEC_SPARES_MAX : n;
	e->spare_retry_at = 0;
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
	if (r->shim == 0 && read_pids(r, NULL) == 0 && r->stopping)
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
	tidy_doomed(e);
	spares_refill(e, now);
	return changed;
}

int64_t exec_next_poll_ms(const struct exec *e)
{
	int64_t now = now_ms(), next = -1;
	if (e->nspares != e->want_spares)
		next = e->nspares > e->want_spares || now >= e->spare_retry_at
		               ? 0
		               : e->spare_retry_at - now;
	if (e->ndoomed && (next < 0 || next > CGROUP_RETRY_MS))
		next = CGROUP_RETRY_MS;
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

/* Re-adopts the rank recorded in DIR/rank-R.jsonl. */
static void adopt(struct exec *e, int64_t attempt_id, int rank)
{
	struct rank *r = rank_add(e, attempt_id, rank);
	json_t *rec = record_load(r);
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
	} else if (read_pids(r, rec) != 0) {
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
		if (end != de->d_name + 5 && strcmp(end, ".jsonl") == 0 && rank >= 0 &&
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
	int null_fd = open_high("/dev/null", O_RDWR, 0);
	if (null_fd < 0)
		return null_fd;
	struct exec *e = xcalloc(1, sizeof(*e));
	e->work_dir = xstrdup(work_dir);
	e->null_fd = null_fd;
	e->want_spares = EXEC_SPARES_DEFAULT;
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
	spares_remove_stale(e);
	adopt_all(e);
	*out = e;
	return 0;
}

void exec_free(struct exec *e)
{
	if (!e)
		return;
	for (int i = 0; i < e->nspares; i++)
		spare_discard(e, &e->spares[i]);
	for (int tries = 0; e->ndoomed && tries < 20; tries++) {
		sleep_ms(5);
		tidy_doomed(e);
	}
	for (size_t i = 0; i < e->ndoomed; i++)
		free(e->doomed[i]);
	free(e->doomed);
	close(e->null_fd);
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
	char *path = rank_file(r, "jsonl");
	unlink(path);
	free(path);
	cgroup_tidy(r);
	rank_free(r);
	e->ranks[i] = e->ranks[--e->n];
}
