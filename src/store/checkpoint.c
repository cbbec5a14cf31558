#include "store/checkpoint.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/mem.h"

struct checkpointer {
	sqlite3 *writer; /* the store's connection, whose commits wake us */
	sqlite3 *db;     /* our own */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int want, stop;
	unsigned long runs;
	int next_at; /* the writer's: the log's length that wakes the thread next */
};

/* The writer's commit hook: runs after each commit, the write lock
 * released, with pages the log's length. */
static int on_commit(void *ctx, sqlite3 *db, const char *name, int pages)
{
	struct checkpointer *c = ctx;
	if (pages >= CHECKPOINT_INLINE_PAGES) {
		int log = 0, done = 0;
		sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
		return SQLITE_OK;
	}
	/* Once per CHECKPOINT_PAGES of log: while commits keep coming, a
	 * checkpoint that runs beside them rarely catches up with the last
	 * one, so the log is not started again and stays long; waking the
	 * thread at every commit past the threshold would checkpoint (and
	 * fsync) a handful of pages each time. */
	if (pages < c->next_at - CHECKPOINT_PAGES)
		c->next_at = CHECKPOINT_PAGES; /* the log started again */
	if (pages >= c->next_at) {
		c->next_at = pages + CHECKPOINT_PAGES;
		pthread_mutex_lock(&c->mu);
		if (!c->want) {
			c->want = 1;
			pthread_cond_signal(&c->cv);
		}
		pthread_mutex_unlock(&c->mu);
	}
	return SQLITE_OK;
}

static void *run(void *arg)
{
	struct checkpointer *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->want && !c->stop)
			pthread_cond_wait(&c->cv, &c->mu);
		if (c->stop)
			break;
		c->want = 0;
		pthread_mutex_unlock(&c->mu);
		int log = 0, done = 0;
		int rc = sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE, &log,
		                                   &done);
		if (rc != SQLITE_OK && rc != SQLITE_BUSY)
			log_warn("database checkpoint failed error=\"%s\"", sqlite3_errmsg(c->db));
		pthread_mutex_lock(&c->mu);
		c->runs++;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int checkpointer_start(sqlite3 *writer, const char *path, struct checkpointer **out)
{
	struct checkpointer *c = xcalloc(1, sizeof(*c));
	c->writer = writer;
	c->next_at = CHECKPOINT_PAGES;
	/* A read opens the log: until then the connection does not know the
	 * database is in WAL mode, and a checkpoint is a no-op. */
	if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	            SQLITE_OK ||
	    sqlite3_exec(c->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) !=
	            SQLITE_OK) {
		log_warn("database checkpoints stay in the commits: cannot open path=%s "
		         "error=\"%s\"",
		         path, sqlite3_errmsg(c->db));
		sqlite3_close(c->db);
		free(c);
		return -EIO;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	if (pthread_create(&c->thread, NULL, run, c) != 0) {
		log_warn("database checkpoints stay in the commits: no thread");
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
		sqlite3_close(c->db);
		free(c);
		return -EIO;
	}
	sqlite3_wal_hook(writer, on_commit, c);
	*out = c;
	return 0;
}

void checkpointer_stop(struct checkpointer *c)
{
	if (!c)
		return;
	sqlite3_wal_autocheckpoint(c->writer, CHECKPOINT_PAGES); /* replaces our hook */
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	sqlite3_close(c->db);
	free(c);
}

unsigned long checkpointer_runs(struct checkpointer *c)
{
	pthread_mutex_lock(&c->mu);
	unsigned long n = c->runs;
	pthread_mutex_unlock(&c->mu);
	return n;
}
