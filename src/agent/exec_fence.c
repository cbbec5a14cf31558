/* exec_fence.c - what a rank's start adds for its fence (agent/fence.h):
 * the rank's own directory (its /tmp), the directories it writes handed to
 * its account, the plan of its mount view, the environment its account
 * needs, and the removal of its directory once it is forgotten. Without a
 * fence (an agent that is not root) only the rank's directory is made.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/exec_int.h"
#include "agent/fence.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

static int make_dir(const char *path, unsigned mode, char *err, size_t errlen);

void exec_set_fence(struct exec *e, struct fence *f)
{
	fence_free(e->fence);
	e->fence = f;
	exec_fence_load(e); /* the pool's directories get the fenced mode */
	free(e->bundles);
	e->bundles = xasprintf("%s/bundles", e->work_dir);
	char err[PATH_MAX + 64];
	if (f && make_dir(e->bundles, 0711, err, sizeof(err)) != 0) /* names: content hashes */
		log_warn("workflow tasks will not start: %s", err);
}

const struct fence *exec_fence(const struct exec *e)
{
	return e->fence;
}

char *exec_rank_dir(const char *work_dir, int64_t attempt_id, int rank)
{
	return xasprintf("%s/rank/%lld-%d", work_dir, (long long)attempt_id, rank);
}

/* ---- the environment ---- */

void exec_fence_env(const struct exec *e, const struct exec_spec *spec, struct strv *env)
{
	if (!e->fence || spec->as_root || fence_account(e->fence)->uid == 0)
		return;
	const struct fence_account *a = fence_account(e->fence);
	/* the client's HOME is not the account's, and a home shared by every
	 * job of the account would carry code from one to the next */
	exec_env_set(env, xstrdup("HOME=/tmp"));
	exec_env_set(env, xasprintf("USER=%s", a->name));
	exec_env_set(env, xasprintf("LOGNAME=%s", a->name));
	if (!spec->task)
		return;
	/* the wrapper starts with root's effective ids (agent/fence.h) */
	char **safe = fence_env_stash(env->v);
	exec_strv_free(env);
	*env = (struct strv){0};
	for (size_t i = 0; safe[i]; i++)
		exec_strv_push(env, safe[i]);
	free(safe);
}

/* ---- the working directory ---- */

int exec_fence_cwd(const struct exec *e, const struct exec_spec *spec, const char *cwd, char *err,
                   size_t errlen)
{
	if (!e->fence)
		return 0;
	const struct fence_account *a = fence_account(e->fence);
	if (path_within(cwd, e->bundles)) /* a task run directly in its code: bound in */
		return 0;
	if (path_within(cwd, "/tmp"))
		snprintf(err, errlen,
		         "working directory %s is under /tmp, which each rank has of its own: "
		         "submit from a directory the nodes share",
		         cwd);
	else if (path_within(cwd, fence_cover(e->fence)))
		snprintf(err, errlen,
		         "working directory %s is inside the agent's work directory, which "
		         "ranks do not see",
		         cwd);
	else if (!spec->as_root && !fence_can_enter(e->fence, cwd))
		snprintf(err, errlen,
		         "working directory %s is closed to the account ranks run as (%s, uid "
		         "%u): make it and the directories above it searchable by that user",
		         cwd, a->name, (unsigned)a->uid);
	else
		return 0;
	return -EACCES;
}

/* ---- the rank's directories and plan ---- */

static int make_dir(const char *path, unsigned mode, char *err, size_t errlen)
{
	int rc = mkdir(path, mode) < 0 && errno != EEXIST ? -errno : 0;
	if (rc == -ENOENT)
		rc = mkdir_p(path, mode);
	if (rc == 0 && chmod(path, mode) < 0) /* the umask took bits away */
		rc = -errno;
	if (rc)
		snprintf(err, errlen, "cannot make %s: %s", path, strerror(-rc));
	return rc;
}

static int hand_over(const struct fence_account *a, const char *path, char *err, size_t errlen)
{
	if (chown(path, a->uid, a->gid) == 0)
		return 0;
	int rc = -errno;
	snprintf(err, errlen, "cannot give %s to %s: %s", path, a->name, strerror(-rc));
	return rc;
}

/* The task wrapper's directory (agent/task.h): made here, so that the
 * fence can bind it; the wrapper fills it. */
static char *task_dir(const struct exec *e, int64_t attempt_id)
{
	return xasprintf("%s/tasks/%lld", e->work_dir, (long long)attempt_id);
}

static int fence_dirs(struct exec *e, struct launch *la, const struct exec_spec *spec,
                      const char *ckpt, char *err, size_t errlen)
{
	const struct fence_account *a = fence_account(e->fence);
	int rc = 0;
	if (!spec->as_root)
		rc = hand_over(a, la->out_dir, err, errlen);
	if (rc == 0 && ckpt && !spec->as_root)
		rc = hand_over(a, ckpt, err, errlen);
	if (rc == 0 && spec->task) {
		la->task_dir = task_dir(e, spec->attempt_id);
		rc = make_dir(la->task_dir, 0700, err, errlen);
		if (rc == 0 && !spec->as_root)
			rc = hand_over(a, la->task_dir, err, errlen);
	}
	return rc;
}

static void fence_binds(struct exec *e, struct launch *la, const struct exec_spec *spec,
                        const char *ckpt)
{
	struct fence_bind b[8];
	int n = 0;
	b[n++] = (struct fence_bind){la->out_dir, 0, 0};
	b[n++] = (struct fence_bind){la->rank_dir, 0, 0};
	if (ckpt)
		b[n++] = (struct fence_bind){ckpt, 0, 0};
	b[n++] = (struct fence_bind){la->log_path, 1, 1};
	b[n++] = (struct fence_bind){la->err_path, 1, 1};
	if (spec->task) {
		b[n++] = (struct fence_bind){la->task_dir, 0, 0};
		b[n++] = (struct fence_bind){e->bundles, 0, 0};
	} else if (spec->cwd && path_within(spec->cwd, e->bundles)) { /* a task run directly */
		b[n++] = (struct fence_bind){spec->cwd, 1, 0};
	}
	enum fence_run_as as = spec->as_root ? FENCE_AS_ROOT
	                       : spec->task  ? FENCE_AS_ACCOUNT_REAL
	                                     : FENCE_AS_ACCOUNT;
	la->fence = fence_plan(e->fence, la->rank_dir, b, n, as);
	la->l.fence = la->fence;
}

/* ---- rank directories, reused ----
 *
 * Making a directory is the costliest file system step of a start (see
 * exec_launch.c's output directories), and every rank has one: a
 * forgotten rank's directory that holds nothing of the rank's is renamed
 * into WORK_DIR/rank/.spare/<n> and the next start renames it out. Under
 * /tmp it keeps the empty mount point of the view's cover (fence.h), which
 * the next rank then need not make either: nothing the rank wrote can be
 * in it, the cover was mounted over it in the rank's view. */

#define SPARE_RANK_DIRS_MAX 64

static char *spare_rank_dir(const struct exec *e, uint64_t n)
{
	return xasprintf("%s/rank/.spare/%llu", e->work_dir, (unsigned long long)n);
}

/* The cover's mount point in a rank directory under /tmp, or NULL. */
static const char *cover_point(const struct exec *e)
{
	const char *cover = e->fence ? fence_cover(e->fence) : "";
	return strncmp(cover, "/tmp/", 5) == 0 ? cover + 5 : NULL;
}

/* Whether dir holds nothing but the cover's mount point. */
static int holds_nothing(const struct exec *e, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	const char *point = cover_point(e);
	int empty = d != NULL;
	while (empty && (de = readdir(d)))
		empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		        (point && strcmp(de->d_name, point) == 0);
	if (d)
		closedir(d);
	return empty;
}

static int make_rank_dir(struct exec *e, const char *dir, unsigned mode, char *err, size_t errlen)
{
	while (e->nfree_ranks > 0) {
		char *from = spare_rank_dir(e, e->free_ranks[--e->nfree_ranks]);
		int moved = rename(from, dir) == 0;
		free(from);
		if (moved)
			return 0;
	}
	return make_dir(dir, mode, err, errlen);
}

/* 1 when dir went into the pool. */
static int keep_rank_dir(struct exec *e, const char *dir)
{
	if (!e->free_ranks)
		e->free_ranks = xcalloc(SPARE_RANK_DIRS_MAX, sizeof(*e->free_ranks));
	if (e->nfree_ranks >= SPARE_RANK_DIRS_MAX || !holds_nothing(e, dir))
		return 0;
	char *pool = xasprintf("%s/rank/.spare", e->work_dir);
	char *to = spare_rank_dir(e, ++e->rank_seq);
	int moved = rename(dir, to) == 0;
	if (!moved && errno == ENOENT && mkdir(pool, 0700) == 0)
		moved = rename(dir, to) == 0;
	if (moved)
		e->free_ranks[e->nfree_ranks++] = e->rank_seq;
	free(to);
	free(pool);
	return moved;
}

void exec_fence_load(struct exec *e)
{
	char *pool = xasprintf("%s/rank/.spare", e->work_dir);
	DIR *d = opendir(pool);
	struct dirent *de;
	free(e->free_ranks);
	e->nfree_ranks = 0;
	e->free_ranks = xcalloc(SPARE_RANK_DIRS_MAX, sizeof(*e->free_ranks));
	while (d && (de = readdir(d))) {
		int64_t n;
		if (parse_i64(de->d_name, 1, INT64_MAX, &n) != 0)
			continue;
		char *path = xasprintf("%s/%s", pool, de->d_name);
		if ((uint64_t)n > e->rank_seq)
			e->rank_seq = (uint64_t)n;
		/* made under another setting, or too many: gone */
		if (e->nfree_ranks < SPARE_RANK_DIRS_MAX &&
		    chmod(path, e->fence ? 01777 : 0700) == 0)
			e->free_ranks[e->nfree_ranks++] = (uint64_t)n;
		else
			rm_rf(path);
		free(path);
	}
	if (d)
		closedir(d);
	free(pool);
}

int exec_fence_prepare(struct exec *e, struct launch *la, const struct exec_spec *spec,
                       const char *ckpt, char *err, size_t errlen)
{
	la->rank_dir = exec_rank_dir(e->work_dir, spec->attempt_id, spec->rank);
	/* fenced, root's and the rank's /tmp: sticky and open to all, as /tmp */
	int rc = make_rank_dir(e, la->rank_dir, e->fence ? 01777 : 0700, err, errlen);
	if (rc == 0 && e->fence)
		rc = fence_dirs(e, la, spec, ckpt, err, errlen);
	if (rc == 0 && e->fence)
		fence_binds(e, la, spec, ckpt);
	return rc;
}

/* ---- removal ---- */

/* Forgotten ranks' directories are renamed into WORK_DIR/rank/.trash at
 * once and removed there by a thread: a rank's /tmp may hold gigabytes,
 * and the executor's thread does not wait for that. */
static pthread_mutex_t trash_mu = PTHREAD_MUTEX_INITIALIZER;
static int trash_running;

static void *empty_trash(void *arg)
{
	char *trash = arg;
	for (;;) {
		DIR *d = opendir(trash);
		struct dirent *de;
		int n = 0;
		while (d && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			char *p = xasprintf("%s/%s", trash, de->d_name);
			rm_rf(p);
			free(p);
			n++;
		}
		if (d)
			closedir(d);
		pthread_mutex_lock(&trash_mu);
		if (n == 0)
			trash_running = 0;
		pthread_mutex_unlock(&trash_mu);
		if (n == 0)
			break;
	}
	free(trash);
	return NULL;
}

static void throw_away(const struct exec *e, const char *path, const char *name)
{
	char *trash = xasprintf("%s/rank/.trash", e->work_dir);
	char *to = xasprintf("%s/%s", trash, name);
	mkdir(trash, 0700);
	int moved = rename(path, to) == 0;
	if (!moved && errno != ENOENT)
		log_warn("cannot remove a rank's directory path=%s error=\"%s\"", path,
		         strerror(errno));
	free(to);
	if (!moved) {
		free(trash);
		return;
	}
	pthread_mutex_lock(&trash_mu);
	int start = !trash_running;
	trash_running = 1;
	pthread_mutex_unlock(&trash_mu);
	pthread_t t;
	if (start && pthread_create(&t, NULL, empty_trash, trash) == 0) {
		pthread_detach(t);
		return;
	}
	if (start) {
		pthread_mutex_lock(&trash_mu);
		trash_running = 0;
		pthread_mutex_unlock(&trash_mu);
	}
	free(trash);
}

void exec_fence_forget(struct exec *e, int64_t attempt_id, int rank, int task)
{
	char *dir = exec_rank_dir(e->work_dir, attempt_id, rank);
	char *name = xasprintf("r%lld-%d", (long long)attempt_id, rank);
	if (!keep_rank_dir(e, dir))
		throw_away(e, dir, name);
	free(name);
	free(dir);
	if (!task || !e->fence)
		return;
	dir = task_dir(e, attempt_id);
	name = xasprintf("t%lld-%d", (long long)attempt_id, rank);
	throw_away(e, dir, name);
	free(name);
	free(dir);
}
