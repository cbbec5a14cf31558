#include "agent/bundles.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define HEX_LEN 64

int bundles_lock(const char *bundles_dir, const char *hex, int nonblock)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s.lock", bundles_dir, hex);
	for (;;) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0)) < 0) {
			int rc = -errno;
			close(fd);
			return rc;
		}
		struct stat a, b;
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev)
			return fd;
		close(fd); /* unlinked while we waited: lock the file there now */
	}
}

int bundles_touch(const char *dir)
{
	return utimensat(AT_FDCWD, dir, NULL, 0) == 0 ? 0 : -errno;
}

static int is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* The bundle hex of name when it is "<hex>" + suffix exactly. */
static int bundle_name(const char *name, const char *suffix, char hex[HEX_LEN + 1])
{
	size_t n = strlen(name), k = strlen(suffix);
	if (n != HEX_LEN + k || !is_hex(name, HEX_LEN) || strcmp(name + HEX_LEN, suffix) != 0)
		return 0;
	memcpy(hex, name, HEX_LEN);
	hex[HEX_LEN] = '\0';
	return 1;
}

/* The bundles some process has its working directory in: "<hex>\n" lines
 * in out. */
static void bundles_in_use(const char *bundles_dir, const char *proc_root, struct buf *out)
{
	DIR *d = opendir(proc_root);
	if (!d)
		return;
	size_t plen = strlen(bundles_dir);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char link[PATH_MAX], cwd[PATH_MAX];
		snprintf(link, sizeof(link), "%s/%s/cwd", proc_root, e->d_name);
		ssize_t n = readlink(link, cwd, sizeof(cwd) - 1);
		if (n <= (ssize_t)(plen + HEX_LEN))
			continue;
		cwd[n] = '\0';
		if (strncmp(cwd, bundles_dir, plen) == 0 && cwd[plen] == '/' &&
		    is_hex(cwd + plen + 1, HEX_LEN) &&
		    (cwd[plen + 1 + HEX_LEN] == '/' || cwd[plen + 1 + HEX_LEN] == '\0' ||
		     cwd[plen + 1 + HEX_LEN] == ' ')) {
			buf_add(out, cwd + plen + 1, HEX_LEN);
			buf_adds(out, "\n");
		}
	}
	closedir(d);
}

static int listed(const struct buf *in_use, const char *hex)
{
	return in_use->len && list_has(in_use->data, "\n", hex);
}

static int exists(const char *dir, const char *hex, const char *suffix)
{
	char path[PATH_MAX];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/%s%s", dir, hex, suffix);
	return lstat(path, &sb) == 0;
}

/* Judges bundle hex under its lock; 1 when it was renamed to .gone-<hex>. */
static int judge(const char *dir, const char *hex, int64_t keep_ms, int64_t now_s,
                 const struct buf *in_use, struct bundles_sweep *out)
{
	char path[PATH_MAX], gone[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, hex);
	snprintf(gone, sizeof(gone), "%s/.gone-%s", dir, hex);
	struct stat sb;
	if (keep_ms <= 0 || stat(path, &sb) != 0 ||
	    ((int64_t)now_s - (int64_t)sb.st_mtime) * 1000 < keep_ms) {
		out->kept++;
		return 0;
	}
	int fd = bundles_lock(dir, hex, 1);
	if (fd < 0) {
		out->in_use++;
		return 0;
	}
	int renamed = 0;
	/* judged again under the lock: a task may have touched it meanwhile */
	if (stat(path, &sb) != 0 || ((int64_t)now_s - (int64_t)sb.st_mtime) * 1000 < keep_ms)
		out->kept++;
	else if (listed(in_use, hex))
		out->in_use++;
	else if (rename(path, gone) == 0) {
		snprintf(path, sizeof(path), "%s/%s.lock", dir, hex);
		unlink(path);
		renamed = 1;
	} else {
		log_warn("bundles: cannot rename %s away error=\"%s\"", path, strerror(errno));
	}
	close(fd);
	return renamed;
}

/* A leftover under hex's lock: a killed unpack's scratch tree, or a lock
 * file without its bundle. 1 when removed. */
static int leftover(const char *dir, const char *hex, const char *name, int is_lock)
{
	int fd = bundles_lock(dir, hex, 1);
	if (fd < 0)
		return 0;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int done = 0;
	if (!is_lock)
		done = rm_rf(path) == 0;
	if (!exists(dir, hex, "") && !exists(dir, hex, ".partial")) {
		snprintf(path, sizeof(path), "%s/%s.lock", dir, hex);
		done |= unlink(path) == 0 && is_lock;
	}
	close(fd);
	return done;
}

/* Removes every .gone-<name> tree of dir (a bundle's hex, or a task's
 * attempt id); needs no lock: nothing looks for them. */
static void remove_gone(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct buf gone = {0};
	struct dirent *e;
	while ((e = readdir(d)))
		if (strncmp(e->d_name, ".gone-", 6) == 0 && e->d_name[6])
			buf_printf(&gone, "%s/%s\n", dir, e->d_name);
	closedir(d);
	for (char *line = gone.data, *nl; line && *line; line = nl + 1) {
		nl = strchr(line, '\n');
		*nl = '\0';
		int rc = rm_rf(line);
		if (rc && rc != -ENOENT)
			log_warn("bundles: cannot remove %s error=\"%s\"", line, strerror(-rc));
	}
	buf_cleanup(&gone);
}

/* Renames the stale task directories of WORK_DIR/tasks away (see
 * bundles.h); how many. */
static int stale_tasks(const char *tasks, int64_t now_s, int (*running)(void *, int64_t), void *ctx)
{
	DIR *d = opendir(tasks);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		long long id = strtoll(e->d_name, &end, 10);
		if (e->d_name[0] < '1' || e->d_name[0] > '9' || *end || running(ctx, id))
			continue;
		char path[PATH_MAX], gone[PATH_MAX];
		struct stat sb;
		snprintf(path, sizeof(path), "%s/%s", tasks, e->d_name);
		snprintf(gone, sizeof(gone), "%s/.gone-%s", tasks, e->d_name);
		if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode) &&
		    now_s - (int64_t)sb.st_mtime >= BUNDLES_TASK_MIN_AGE_S &&
		    rename(path, gone) == 0)
			n++;
	}
	closedir(d);
	return n;
}

int bundles_sweep(const char *work_dir, int64_t keep_ms, int64_t now_s, const char *proc_root,
                  int remove, struct bundles_sweep *out)
{
	struct bundles_sweep tally = {0};
	char *dir = xasprintf("%s/bundles", work_dir);
	DIR *d = opendir(dir);
	if (!d) {
		int rc = errno == ENOENT ? 0 : -errno;
		free(dir);
		if (out)
			*out = tally;
		return rc;
	}
	struct buf in_use = {0};
	if (keep_ms > 0)
		bundles_in_use(dir, proc_root, &in_use);
	/* the names first: the sweep renames and unlinks as it goes */
	struct buf names = {0}; /* "\n"-separated */
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' || strncmp(e->d_name, ".gone-", 6) == 0)
			buf_printf(&names, "%s\n", e->d_name);
	closedir(d);
	char hex[HEX_LEN + 1];
	for (char *name = names.data, *nl; name && *name; name = nl + 1) {
		nl = strchr(name, '\n');
		*nl = '\0';
		if (bundle_name(name, "", hex))
			tally.removed += judge(dir, hex, keep_ms, now_s, &in_use, &tally);
		else if (strncmp(name, ".gone-", 6) == 0 && bundle_name(name + 6, "", hex))
			tally.leftovers++; /* a sweep before was stopped */
		else if (bundle_name(name, ".partial", hex))
			tally.leftovers += leftover(dir, hex, name, 0);
		else if (bundle_name(name, ".lock", hex))
			tally.leftovers += leftover(dir, hex, name, 1);
	}
	if (remove)
		remove_gone(dir);
	buf_cleanup(&names);
	buf_cleanup(&in_use);
	free(dir);
	if (out)
		*out = tally;
	return 0;
}

static atomic_int removing;

static void *remove_thread(void *arg)
{
	char *work_dir = arg;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/bundles", work_dir);
	remove_gone(path);
	snprintf(path, sizeof(path), "%s/tasks", work_dir);
	remove_gone(path);
	free(work_dir);
	atomic_store(&removing, 0);
	return NULL;
}

void bundles_sweep_start(const char *work_dir, int64_t keep_ms,
                         int (*running)(void *ctx, int64_t attempt_id), void *ctx)
{
	if (atomic_load(&removing))
		return; /* the last sweep's trees are still going */
	struct bundles_sweep t = {0};
	int64_t now = (int64_t)time(NULL);
	int rc = bundles_sweep(work_dir, keep_ms, now, "/proc", 0, &t); /* 0: leftovers only */
	if (rc)
		log_warn("bundles: cannot sweep %s/bundles error=\"%s\"", work_dir, strerror(-rc));
	char *tasks = xasprintf("%s/tasks", work_dir);
	int stale = stale_tasks(tasks, now, running, ctx);
	free(tasks);
	if (t.removed || t.leftovers)
		log_info("bundles: removed %d unused for %llds, %d leftovers; kept %d, %d in use",
		         t.removed, (long long)(keep_ms / 1000), t.leftovers, t.kept, t.in_use);
	if (stale)
		log_info("tasks: removing %d attempt directories their wrappers left", stale);
	if (!(t.removed || t.leftovers || stale))
		return;
	atomic_store(&removing, 1);
	char *dir = xstrdup(work_dir);
	pthread_t th;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&th, &attr, remove_thread, dir);
	pthread_attr_destroy(&attr);
	if (rc) {
		log_warn("bundles: cannot start removing error=\"%s\"", strerror(rc));
		free(dir);
		atomic_store(&removing, 0);
	}
}
