#include "agent/logpool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

struct ready {
	uint64_t seq;
	int fd;
};

struct logpool {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	pthread_t thread;
	int started, stop;
	char *dir;
	struct ready files[LOGPOOL_TARGET];
	int n;
	uint64_t next_seq;
	atomic_ullong taken, missed;
};

static char *spare_path(const struct logpool *p, uint64_t seq)
{
	return xasprintf("%s/%" PRIu64 ".log", p->dir, seq);
}

/* Reuses the empty files an earlier agent left. Lock not needed: the
 * thread has not started. */
static void adopt(struct logpool *p)
{
	DIR *d = opendir(p->dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		char *end = NULL;
		errno = 0;
		uint64_t seq = strtoull(de->d_name, &end, 10);
		if (errno || end == de->d_name || strcmp(end, ".log") != 0)
			continue;
		if (seq >= p->next_seq)
			p->next_seq = seq + 1;
		if (p->n == LOGPOOL_TARGET)
			continue;
		char *path = spare_path(p, seq);
		int fd = fd_above_stdio(open(path, O_WRONLY | O_APPEND | O_CLOEXEC));
		struct stat sb;
		if (fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size == 0)
			p->files[p->n++] = (struct ready){seq, fd};
		else if (fd >= 0)
			close(fd);
		free(path);
	}
	if (d)
		closedir(d);
}

static void *fill(void *arg)
{
	struct logpool *p = arg;
	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		if (p->n == LOGPOOL_TARGET) {
			pthread_cond_wait(&p->cond, &p->mu);
			continue;
		}
		uint64_t seq = p->next_seq++;
		pthread_mutex_unlock(&p->mu);
		char *path = spare_path(p, seq);
		int fd = fd_above_stdio(
		        open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644));
		int err = errno;
		free(path);
		pthread_mutex_lock(&p->mu);
		if (fd < 0) {
			if (err != EEXIST) { /* the disk refuses: starts make their own */
				log_warn("logpool: cannot make a spare log dir=%s error=\"%s\"",
				         p->dir, strerror(err));
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += 1;
				pthread_cond_timedwait(&p->cond, &p->mu, &ts);
			}
			continue;
		}
		p->files[p->n++] = (struct ready){seq, fd};
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int logpool_start(const char *dir, struct logpool **out)
{
	int rc = mkdir_p(dir, 0755);
	if (rc)
		return rc;
	struct logpool *p = xcalloc(1, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->dir = xstrdup(dir);
	p->next_seq = 1;
	adopt(p);
	rc = -pthread_create(&p->thread, NULL, fill, p);
	if (rc) {
		logpool_stop(p);
		return rc;
	}
	p->started = 1;
	*out = p;
	return 0;
}

void logpool_stop(struct logpool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mu);
	if (p->started)
		pthread_join(p->thread, NULL);
	for (int i = 0; i < p->n; i++)
		close(p->files[i].fd);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->mu);
	free(p->dir);
	free(p);
}

int logpool_take(struct logpool *p, const char *path)
{
	/* The rename runs under the lock (tens of microseconds; the filler
	 * makes files outside it), so a file that cannot be used goes back
	 * before the filler could count it missing. */
	pthread_mutex_lock(&p->mu);
	if (p->n == 0) {
		pthread_mutex_unlock(&p->mu);
		atomic_fetch_add(&p->missed, 1);
		return -EAGAIN;
	}
	struct ready r = p->files[p->n - 1];
	char *from = spare_path(p, r.seq);
	int rc = renameat2(AT_FDCWD, from, AT_FDCWD, path, RENAME_NOREPLACE) == 0 ? r.fd : -errno;
	free(from);
	if (rc != -EEXIST) {
		p->n--; /* used, or gone from the disk: the filler makes another */
		pthread_cond_signal(&p->cond);
	}
	pthread_mutex_unlock(&p->mu);
	if (rc >= 0) {
		atomic_fetch_add(&p->taken, 1);
		return rc;
	}
	if (rc != -EEXIST) {
		close(r.fd);
		atomic_fetch_add(&p->missed, 1);
		return -EAGAIN; /* the caller makes the file itself */
	}
	return rc;
}

unsigned long long logpool_taken(const struct logpool *p)
{
	return atomic_load(&((struct logpool *)p)->taken);
}

unsigned long long logpool_missed(const struct logpool *p)
{
	return atomic_load(&((struct logpool *)p)->missed);
}
