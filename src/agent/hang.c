#include "agent/hang.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/exec.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define PIDS_MAX 256 /* processes of one rank whose stacks are recorded */

extern char **environ;

struct watch {
	int64_t attempt_id;
	int rank;
	uint64_t gpus;
	int64_t timeout_ms;
	int64_t log_size, err_size, beat_ns; /* what was seen last */
	int64_t progress_ms;                 /* monotonic: the last progress */
	int declared;                        /* hung: stacks being recorded */
	pid_t stacks;                        /* `anvil _stacks`; 0: none (ended) */
	int64_t declared_ms;
	int64_t hung_ms; /* reportable once non-zero */
};

struct hang {
	struct exec *e;
	char *self;
	hang_gpu_idle_fn idle;
	void *ctx;
	struct watch *w;
	size_t n;
	int64_t next_ms;
};

struct hang *hang_new(struct exec *e, const char *self, hang_gpu_idle_fn idle, void *ctx)
{
	struct hang *h = xcalloc(1, sizeof(*h));
	*h = (struct hang){.e = e, .self = xstrdup(self), .idle = idle, .ctx = ctx};
	return h;
}

void hang_free(struct hang *h)
{
	if (!h)
		return;
	free(h->w);
	free(h->self);
	free(h);
}

static const struct watch *find(const struct hang *h, int64_t attempt_id, int rank)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->w[i].attempt_id == attempt_id && h->w[i].rank == rank)
			return &h->w[i];
	return NULL;
}

void hang_set(struct hang *h, const struct desired_rank *ranks, size_t n)
{
	struct watch *next = xcalloc(n ? n : 1, sizeof(*next));
	size_t k = 0;
	int64_t now = now_ms();
	for (size_t i = 0; i < n; i++) {
		const struct desired_rank *d = &ranks[i];
		if (d->hang_timeout_ms <= 0)
			continue;
		const struct watch *old = find(h, d->attempt_id, d->rank);
		next[k++] = old ? *old
		                : (struct watch){.attempt_id = d->attempt_id,
		                                 .rank = d->rank,
		                                 .gpus = d->gpus.mask,
		                                 .timeout_ms = d->hang_timeout_ms,
		                                 .log_size = -1,
		                                 .err_size = -1,
		                                 .beat_ns = -1,
		                                 .progress_ms = now};
	}
	free(h->w);
	h->w = next;
	h->n = k;
}

static int64_t size_of(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

static int64_t mtime_of(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec
	                            : -1;
}

/* Whether w made progress since the last look (and remembers what it saw). */
static int progressed(struct hang *h, struct watch *w)
{
	const char *dir = exec_work_dir(h->e);
	char *log = xasprintf("%s/logs/%lld-%d.log", dir, (long long)w->attempt_id, w->rank);
	char *err = xasprintf("%s/logs/%lld-%d.err", dir, (long long)w->attempt_id, w->rank);
	char *beat = exec_heartbeat_path(dir, w->attempt_id, w->rank);
	int64_t ls = size_of(log), es = size_of(err), bt = mtime_of(beat);
	int moved = (ls != w->log_size && w->log_size >= 0) ||
	            (es != w->err_size && w->err_size >= 0) || (bt != w->beat_ns && bt >= 0);
	w->log_size = ls;
	w->err_size = es;
	w->beat_ns = bt;
	free(log);
	free(err);
	free(beat);
	if (!moved && w->gpus && h->idle)
		moved = h->idle(h->ctx, w->gpus) == 0; /* a GPU of its is busy */
	return moved;
}

/* The node's pids of the processes in process group pgid (at most max). */
static int group_pids(pid_t pgid, pid_t *out, int max)
{
	DIR *d = opendir("/proc");
	int n = 0;
	struct dirent *e;
	while (d && n < max && (e = readdir(d))) {
		int64_t pid;
		if (parse_i64(e->d_name, 1, INT32_MAX, &pid))
			continue;
		char path[64], text[512];
		snprintf(path, sizeof(path), "/proc/%lld/stat", (long long)pid);
		FILE *f = fopen(path, "r");
		size_t len = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
		if (f)
			fclose(f);
		text[len] = '\0';
		/* after "(comm)": " STATE PPID PGRP ..." */
		const char *close = strrchr(text, ')');
		char *end = NULL;
		if (!close || strlen(close) < 4)
			continue;
		strtol(close + 3, &end, 10); /* the parent */
		long pgrp = end && *end == ' ' ? strtol(end + 1, NULL, 10) : -1;
		if (pgrp == pgid)
			out[n++] = (pid_t)pid;
	}
	if (d)
		closedir(d);
	return n;
}

/* Starts `anvil _stacks` for w's processes into its stderr log. */
static void record_stacks(struct hang *h, struct watch *w, pid_t pgid, int64_t idle_ms)
{
	pid_t pids[PIDS_MAX];
	int n = pgid > 0 ? group_pids(pgid, pids, PIDS_MAX) : 0;
	char **argv = xcalloc((size_t)n + 8, sizeof(char *));
	int k = 0;
	argv[k++] = xstrdup(h->self);
	argv[k++] = xstrdup("_stacks");
	argv[k++] = xstrdup("--out");
	argv[k++] = xasprintf("%s/logs/%lld-%d.err", exec_work_dir(h->e), (long long)w->attempt_id,
	                      w->rank);
	argv[k++] = xstrdup("--why");
	argv[k++] = xasprintf("no progress for %lld s (its hang timeout is %lld s)",
	                      (long long)(idle_ms / 1000), (long long)(w->timeout_ms / 1000));
	for (int i = 0; i < n; i++)
		argv[k++] = xasprintf("%d", (int)pids[i]);
	pid_t child = 0;
	int rc = posix_spawn(&child, h->self, NULL, NULL, argv, environ);
	if (rc)
		log_warn("cannot record a hung rank's stacks attempt=%lld rank=%d error=\"%s\"",
		         (long long)w->attempt_id, w->rank, strerror(rc));
	w->stacks = rc ? 0 : child;
	for (int i = 0; i < k; i++)
		free(argv[i]);
	free(argv);
}

/* One watched rank: 1 when its hang became reportable now. */
static int check_one(struct hang *h, struct watch *w, int64_t now)
{
	struct exec_status st;
	if (exec_find(h->e, w->attempt_id, w->rank, &st) != 0 || st.state != EXEC_RUNNING ||
	    st.stopping || !st.pid) {
		w->progress_ms = now; /* not started, or being stopped: no clock yet */
		return 0;
	}
	if (!w->declared) {
		if (progressed(h, w))
			w->progress_ms = now;
		if (now - w->progress_ms < w->timeout_ms)
			return 0;
		w->declared = 1;
		w->declared_ms = now;
		log_warn("rank hung: no progress attempt=%lld rank=%d job=%lld idle_ms=%lld",
		         (long long)w->attempt_id, w->rank, (long long)st.job_id,
		         (long long)(now - w->progress_ms));
		record_stacks(h, w, st.pid, now - w->progress_ms);
	}
	if (w->hung_ms)
		return 0;
	int done = !w->stacks || waitpid(w->stacks, NULL, WNOHANG) != 0;
	if (!done && now - w->declared_ms < HANG_STACKS_MAX_MS)
		return 0;
	if (!done) { /* stuck on a process's /proc files: the report goes without */
		kill(w->stacks, SIGKILL);
		waitpid(w->stacks, NULL, 0);
	}
	w->stacks = 0;
	w->hung_ms = w->declared_ms - w->progress_ms;
	return 1;
}

int hang_check(struct hang *h, int64_t now)
{
	if (!h || !h->n || now < h->next_ms)
		return 0;
	h->next_ms = now + HANG_CHECK_MS;
	int changed = 0;
	for (size_t i = 0; i < h->n; i++)
		changed |= check_one(h, &h->w[i], now);
	return changed;
}

int64_t hang_next_ms(const struct hang *h, int64_t now)
{
	if (!h || !h->n)
		return -1;
	return h->next_ms > now ? h->next_ms - now : 0;
}

int64_t hang_ms(const struct hang *h, int64_t attempt_id, int rank)
{
	const struct watch *w = h ? find(h, attempt_id, rank) : NULL;
	return w ? w->hung_ms : 0;
}

/* ---- anvil _stacks ---- */

static void append_file(int out, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char buf[8192];
	ssize_t n;
	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			break;
	if (fd >= 0)
		close(fd);
	dprintf(out, "\n");
}

/* The first program called name on PATH, or NULL; free() it. */
static char *on_path(const char *name)
{
	const char *path = getenv("PATH");
	char *copy = xstrdup(path ? path : "/usr/local/bin:/usr/bin:/bin"), *save = NULL,
	     *found = NULL;
	for (char *dir = strtok_r(copy, ":", &save); dir && !found;
	     dir = strtok_r(NULL, ":", &save)) {
		char *p = xasprintf("%s/%s", dir, name);
		if (access(p, X_OK) == 0)
			found = p;
		else
			free(p);
	}
	free(copy);
	return found;
}

/* py-spy's dump of pid into out, at most 10 s. */
static void py_spy(const char *spy, int out, const char *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out, 1);
	posix_spawn_file_actions_adddup2(&fa, out, 2);
	char *argv[] = {(char *)spy, "dump", "--pid", (char *)pid, NULL};
	pid_t child;
	if (posix_spawn(&child, spy, &fa, NULL, argv, environ) == 0) {
		int64_t end = now_ms() + 10000;
		while (waitpid(child, NULL, WNOHANG) == 0) {
			if (now_ms() > end) {
				kill(child, SIGKILL);
				waitpid(child, NULL, 0);
				dprintf(out, "(py-spy took over 10 s: stopped)\n");
				break;
			}
			sleep_ms(50);
		}
	}
	posix_spawn_file_actions_destroy(&fa);
}

static void one_process(int out, const char *pid, const char *spy)
{
	char path[64], comm[256] = "?", wchan[128] = "?";
	snprintf(path, sizeof(path), "/proc/%s/comm", pid);
	FILE *f = fopen(path, "r");
	if (f && fgets(comm, sizeof(comm), f))
		comm[strcspn(comm, "\n")] = '\0';
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%s/wchan", pid);
	f = fopen(path, "r");
	if (f && !fgets(wchan, sizeof(wchan), f))
		snprintf(wchan, sizeof(wchan), "?");
	if (f)
		fclose(f);
	dprintf(out, "--- pid %s (%s), waiting in %s ---\n", pid, comm, wchan);
	if (spy && strstr(comm, "python")) {
		py_spy(spy, out, pid);
		return;
	}
	snprintf(path, sizeof(path), "/proc/%s/stack", pid);
	append_file(out, path);
}

int hang_stacks_main(int argc, char **argv)
{
	if (argc < 5 || strcmp(argv[1], "--out") != 0 || strcmp(argv[3], "--why") != 0) {
		fprintf(stderr, "usage: anvil _stacks --out FILE --why TEXT PID...\n");
		return 2;
	}
	int out = open(argv[2], O_WRONLY | O_APPEND | O_CLOEXEC);
	if (out < 0) {
		fprintf(stderr, "anvil _stacks: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	char *spy = on_path("py-spy");
	dprintf(out,
	        "\nanvil: the rank made %s: declared hung; the stacks of its %d process(es)%s:\n",
	        argv[4], argc - 5, spy ? " (py-spy for Python)" : "");
	for (int i = 5; i < argc; i++)
		one_process(out, argv[i], spy);
	dprintf(out, "anvil: end of the stacks\n");
	free(spy);
	close(out);
	return 0;
}
