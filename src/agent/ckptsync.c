#include "agent/ckptsync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/ckpt.h"
#include "base/httpc.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define IOPRIO_WHO_PROCESS 1
#define IOPRIO_CLASS_IDLE  3
#define IOPRIO_CLASS_SHIFT 13

/* One watched rank; done: the checkpoint last uploaded (or skipped). */
struct watched {
	int64_t attempt_id, job_id;
	char *dir, *token, *restored;
	int64_t since_wall_ms; /* when it was first watched: older entries are not its own */
	char done_name[CKPT_NAME_MAX + 1];
	int64_t done_mtime_ns;
	json_t *newest; /* the last upload's record; NULL: none yet */
};

struct ckptsync {
	char *server;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	int stopping;
	struct watched *w;
	size_t n;
};

static void watched_free(struct watched *w)
{
	free(w->dir);
	free(w->token);
	free(w->restored);
	json_decref(w->newest);
}

static struct watched *find(struct ckptsync *c, int64_t attempt_id)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->w[i].attempt_id == attempt_id)
			return &c->w[i];
	return NULL;
}

void ckptsync_set(struct ckptsync *c, const struct ckptsync_watch *w, size_t n)
{
	if (!c)
		return;
	struct watched *next = xcalloc(n ? n : 1, sizeof(*next));
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < n; i++) {
		struct watched *old = find(c, w[i].attempt_id);
		if (old) { /* keeps what it sent */
			next[i] = *old;
			*old = (struct watched){0};
			continue;
		}
		next[i] =
		        (struct watched){.attempt_id = w[i].attempt_id,
		                         .job_id = w[i].job_id,
		                         .dir = xstrdup(w[i].dir),
		                         .token = xstrdup(w[i].token),
		                         .restored = w[i].restored ? xstrdup(w[i].restored) : NULL,
		                         .since_wall_ms = wall_ms()};
	}
	for (size_t i = 0; i < c->n; i++)
		watched_free(&c->w[i]);
	free(c->w);
	c->w = next;
	c->n = n;
	pthread_mutex_unlock(&c->lock);
}

json_t *ckptsync_newest(struct ckptsync *c, int64_t attempt_id)
{
	if (!c)
		return NULL;
	pthread_mutex_lock(&c->lock);
	struct watched *w = find(c, attempt_id);
	json_t *v = w && w->newest ? json_deep_copy(w->newest) : NULL;
	pthread_mutex_unlock(&c->lock);
	return v;
}

/* ---- the thread ---- */

/* What one scan of a watched rank's directory found to send. */
struct pick {
	int64_t attempt_id, job_id;
	char dir[4096], token[128];
	char name[CKPT_NAME_MAX + 1];
	int64_t mtime_ns;
};

static int64_t mtime_ns(const struct stat *sb)
{
	return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

/* The newest complete checkpoint in p->dir that is the attempt's own
 * (written since it was watched, not the one its start restored): 1 with
 * p->name and p->mtime_ns set when that one was not sent yet. */
static int newest_unsent(struct pick *p, const char *done, int64_t done_ns, const char *restored,
                         int64_t since_wall_ms)
{
	DIR *d = opendir(p->dir);
	if (!d)
		return 0;
	const char *rname = restored ? strrchr(restored, '/') : NULL;
	rname = rname ? rname + 1 : NULL;
	struct dirent *e;
	int found = 0;
	while ((e = readdir(d))) {
		struct stat sb;
		if (!ckpt_complete(e->d_name) || (rname && strcmp(e->d_name, rname) == 0) ||
		    fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		int64_t ns = mtime_ns(&sb);
		if (ns / 1000000 < since_wall_ms - 2000 || (found && ns <= p->mtime_ns))
			continue;
		memcpy(p->name, e->d_name, strlen(e->d_name) + 1); /* ckpt_complete: it fits */
		p->mtime_ns = ns;
		found = 1;
	}
	closedir(d);
	return found && !(strcmp(p->name, done) == 0 && p->mtime_ns == done_ns);
}

static void record(struct ckptsync *c, const struct pick *p, const struct ckpt_upload *up, int ok)
{
	char key[CKPT_NAME_MAX + 48];
	ckpt_key(p->job_id, p->name, key, sizeof(key));
	pthread_mutex_lock(&c->lock);
	struct watched *w = find(c, p->attempt_id);
	if (w) {
		snprintf(w->done_name, sizeof(w->done_name), "%s", p->name);
		w->done_mtime_ns = p->mtime_ns;
		if (ok) {
			json_decref(w->newest);
			w->newest = json_pack("{s:s,s:s,s:I,s:I,s:i,s:I}", "name", p->name, "key",
			                      key, "bytes", (json_int_t)up->bytes, "sent_bytes",
			                      (json_int_t)up->sent_bytes, "files", up->files,
			                      "time_ms", (json_int_t)(p->mtime_ns / 1000000));
		}
	}
	pthread_mutex_unlock(&c->lock);
}

static void upload(struct ckptsync *c, struct httpc *h, const struct pick *p)
{
	struct objects o = {.server = c->server,
	                    .token = p->token,
	                    .attempt_id = p->attempt_id,
	                    .http = h,
	                    .retry_ms = 10000};
	struct ckpt_upload up = {0};
	char err[1024];
	int64_t t0 = now_ms();
	int rc = ckpt_upload(&o, p->dir, p->name, p->job_id, &up, err, sizeof(err));
	if (rc)
		log_warn("checkpoint upload failed job=%lld attempt=%lld name=%s error=\"%s\"",
		         (long long)p->job_id, (long long)p->attempt_id, p->name, err);
	else
		log_info("checkpoint uploaded job=%lld attempt=%lld name=%s files=%d bytes=%lld "
		         "sent_bytes=%lld ms=%lld",
		         (long long)p->job_id, (long long)p->attempt_id, p->name, up.files,
		         (long long)up.bytes, (long long)up.sent_bytes, (long long)(now_ms() - t0));
	record(c, p, &up, rc == 0); /* a failed one is not tried again: the next one is */
}

/* One pass: the watched ranks' newest unsent checkpoints, uploaded in turn. */
static void scan(struct ckptsync *c, struct httpc *h)
{
	pthread_mutex_lock(&c->lock);
	size_t n = c->n;
	struct pick *picks = xcalloc(n ? n : 1, sizeof(*picks));
	size_t np = 0;
	for (size_t i = 0; i < n; i++) {
		struct watched *w = &c->w[i];
		struct pick *p = &picks[np];
		*p = (struct pick){.attempt_id = w->attempt_id, .job_id = w->job_id};
		snprintf(p->dir, sizeof(p->dir), "%s", w->dir);
		snprintf(p->token, sizeof(p->token), "%s", w->token);
		/* the directory is read under the lock: a readdir, no upload */
		if (newest_unsent(p, w->done_name, w->done_mtime_ns, w->restored, w->since_wall_ms))
			np++;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < np && !c->stopping; i++)
		upload(c, h, &picks[i]);
	free(picks);
}

static void *run(void *arg)
{
	struct ckptsync *c = arg;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	setpriority(PRIO_PROCESS, (id_t)tid, 19);
	syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT);
	struct httpc *h = httpc_new();
	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		pthread_mutex_unlock(&c->lock);
		scan(c, h);
		pthread_mutex_lock(&c->lock);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += CKPTSYNC_SCAN_MS / 1000;
		if (!c->stopping)
			pthread_cond_timedwait(&c->wake, &c->lock, &ts);
	}
	pthread_mutex_unlock(&c->lock);
	httpc_free(h);
	return NULL;
}

struct ckptsync *ckptsync_start(const char *server)
{
	struct ckptsync *c = xcalloc(1, sizeof(*c));
	c->server = xstrdup(server);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->wake, NULL);
	int rc = pthread_create(&c->thread, NULL, run, c);
	if (rc) {
		log_warn("no checkpoint uploader: checkpoints stay on this node error=\"%s\"",
		         strerror(rc));
		pthread_mutex_destroy(&c->lock);
		pthread_cond_destroy(&c->wake);
		free(c->server);
		free(c);
		return NULL;
	}
	return c;
}

void ckptsync_stop(struct ckptsync *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	for (size_t i = 0; i < c->n; i++)
		watched_free(&c->w[i]);
	free(c->w);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->wake);
	free(c->server);
	free(c);
}
