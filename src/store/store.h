/* store.h - durable cluster state in SQLite (WAL mode).
 *
 * The server's database is the single source of truth: every change the
 * server acknowledges is committed here first. Callers group their writes
 * between store_begin() and store_commit() (one transaction per request).
 * Loading rebuilds the in-memory records of model.h after a restart.
 *
 * A struct store is used by one thread at a time (the server calls it with
 * its state lock held). Durability: synchronous=NORMAL in WAL mode survives
 * any process crash (SIGKILL); store_open's `full` flag makes every commit
 * fsync, which also survives power loss. The WAL's checkpoints (and their
 * fsyncs) run on a thread of the store's own (store/checkpoint.h), not in
 * the commits.
 */
#ifndef ANVIL_STORE_H
#define ANVIL_STORE_H

#include <stdint.h>

#include "model/model.h"

struct store;

int store_open(const char *path, int full_sync, struct store **out);
void store_close(struct store *st);

int store_begin(struct store *st);
int store_commit(struct store *st);
void store_rollback(struct store *st);

/* Small key/value settings (tokens, id counters). *out is malloc'd. */
int store_meta_get(struct store *st, const char *key, char **out);
int store_meta_set(struct store *st, const char *key, const char *value);

/* extra: the queue's scheduling settings as JSON (weight, borrowing,
 * default_time_limit_ms, quotas); a team's (weight). */
int store_put_queue(struct store *st, const char *name, int priority, const json_t *extra);
int store_put_team(struct store *st, const char *name, const json_t *extra);
int store_put_node(struct store *st, const struct node *n);
/* Only a written node's generation: what changes with each change of its
 * desired set (several times a second while short jobs run there), where
 * the whole row (its facts, kilobytes of JSON) rewritten was most of the
 * write. */
int store_put_node_generation(struct store *st, const struct node *n);
int store_put_job(struct store *st, const struct job *j); /* with its attempts */
/* What changes in a written job (model.h: its state, start, end, exit code,
 * cancel request and reason), with its attempts: the rest of a job row is
 * what it was submitted with, and rewriting it (the client's exported
 * environment, kilobytes of JSON) was most of the server's work per
 * transition. A job not written yet is written whole. */
int store_put_job_state(struct store *st, const struct job *j);
int store_add_event(struct store *st, const char *kind, int64_t job_id, int64_t node_id,
                    const char *message);

/* Workflows (server/flows.c): an execution's and a run's documents
 * (flow/engine.h's stored form), and the task cache, by key. */
int store_put_flow_exec(struct store *st, int64_t id, const json_t *doc);
int store_put_flow_run(struct store *st, int64_t id, int64_t exec_id, const json_t *doc);
int store_put_cache(struct store *st, const char *key, const json_t *doc);
/* The cache entry under key, or NULL (none, or a database error). */
json_t *store_get_cache(struct store *st, const char *key);
/* The fleet (server/fleet.c): a revision's document, by its id. */
int store_put_fleet_revision(struct store *st, int64_t id, const json_t *doc);

/* A create's Idempotency-Key as the server remembers it (server/idem.h;
 * docs/api.md, "Idempotency-Key"): who sent it (scope: the SHA-256 of the
 * credential), the key, what the request was (digest: the SHA-256 of its
 * method, path and body), and the first answer: its status and body, or,
 * while the body is not written yet (NULL), what the create made (ref,
 * "job:17"), from which the answer is made again. */
#define STORE_IDEM_KEY_MAX 255 /* bytes of a key */
#define STORE_IDEM_REF_MAX 63

struct store_idem {
	char scope[65];
	char key[STORE_IDEM_KEY_MAX + 1];
	char digest[65];
	int status;
	char *body; /* malloc'd; NULL: not written yet */
	char ref[STORE_IDEM_REF_MAX + 1];
	int64_t created_ms; /* wall */
};

/* Writes r, replacing what was under its scope and key (inside the
 * caller's transaction, or as one of its own). */
int store_put_idem(struct store *st, const struct store_idem *r);
/* The record under scope and key into *out (out->body malloc'd: the
 * caller frees it): 0; ERR_NOTFOUND; -EIO. */
int store_get_idem(struct store *st, const char *scope, const char *key, struct store_idem *out);
/* Removes the records created before before_ms (wall); *removed (may be
 * NULL) gets how many. 0 or -EIO. */
int store_prune_idem(struct store *st, int64_t before_ms, int64_t *removed);

/* The newest events first, at most limit: [{id, time_ms, kind, job_id,
 * node_id, message}]. NULL on a database error. */
json_t *store_events(struct store *st, int limit, int64_t job_id);

struct store_loader {
	void *ctx;
	void (*queue)(void *ctx, const char *name, int priority, const json_t *extra);
	void (*team)(void *ctx, const char *name, const json_t *extra);
	void (*node)(void *ctx, struct node *n); /* takes ownership */
	void (*job)(void *ctx, struct job *j);   /* takes ownership, attempts attached */
	/* every workflow execution, then its runs in id order; may be NULL */
	void (*flow_exec)(void *ctx, const json_t *doc);
	void (*flow_run)(void *ctx, int64_t exec_id, const json_t *doc);
	/* every fleet revision in id order; may be NULL */
	void (*fleet_revision)(void *ctx, int64_t id, const json_t *doc);
};

int store_load(struct store *st, const struct store_loader *l);

/* Last error message from SQLite, for logs. Once the store is open its
 * calls do not log their failures (only at debug level): the caller
 * says them. A failure is -ENOSPC or -EDQUOT when the disk is full or
 * over quota, else -EIO. */
const char *store_error(struct store *st);

#endif
