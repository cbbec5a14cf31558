/* idem.h - the Idempotency-Keys of creates (docs/api.md,
 * "Idempotency-Key"): what a key may be, what names a request and its
 * sender, and the records the server keeps of them.
 *
 * A client that must not create a thing twice (a job, a workflow
 * execution, an upload, a fleet revision) sends one random key with the
 * create and the same key with every repeat of it. The server writes the
 * key, together with the request's digest and its first answer, in the
 * same SQLite transaction as what the create made (state_flush(), or
 * jobs_admit()'s commit for new jobs, whose answer is written by the flush
 * that follows: until then the record names what was made, its ref, and
 * the answer is made again from it). So whatever a create committed
 * before a crash is found by its key afterwards, and a repeat is answered
 * the first answer instead of creating again; the same key with another
 * request is refused. Records are scoped by the credential that sent
 * them (its SHA-256), kept for state_config.idem_keep_ms (24 h by
 * default, `anvil server --idempotency-keep`), and pruned by the
 * housekeeping.
 *
 * Only a create that succeeded is remembered: one refused changed nothing,
 * and its repeat is judged again.
 *
 * Layer -1 of the server's state files (core.h): below the core, it knows
 * only the store. Every call but the pure ones runs with the state lock
 * held.
 */
#ifndef ANVIL_IDEM_H
#define ANVIL_IDEM_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define IDEM_HEADER          "Idempotency-Key"
#define IDEM_REPLAYED_HEADER "Idempotent-Replayed"
#define IDEM_KEY_MAX         STORE_IDEM_KEY_MAX /* 255 bytes */
#define IDEM_KEEP_DEFAULT_MS (24 * 3600 * 1000LL)
#define IDEM_KEEP_MIN_MS     1000LL
#define IDEM_KEEP_MAX_MS     (30 * 24 * 3600 * 1000LL)

/* ---- pure ---- */

/* Whether value is a key: 1 to IDEM_KEY_MAX bytes of visible ASCII (0x21
 * to 0x7e). 0, or ERR_INVALID with why in err, naming the header and the
 * value (cut, with anything unprintable shown as '?'). */
int idem_key_check(const char *value, char *err, size_t errlen);
/* The scope of a credential: the SHA-256 of it, so that neither the table
 * nor a log line holds a token. */
void idem_scope(const char *credential, char out[65]);
/* The digest of a request: the SHA-256 of its method, path and the
 * SHA-256 (hex) of its body, each on a line. */
void idem_digest(const char *method, const char *path, const char *body_sha256, char out[65]);

/* ---- the records ---- */

/* The records the next flush writes. Owned by the state core. */
struct idem_table {
	struct store_idem *pending;
	int npending, cap;
	int64_t pruned_ms; /* wall: when the expired were last removed */
};

/* The record of scope and key as of now (wall ms), kept for keep_ms: a
 * pending one first, else the stored one. 0 with *out (out->body is the
 * caller's to free); ERR_NOTFOUND when there is none or it expired; -EIO. */
int idem_find(struct idem_table *t, struct store *store, const char *scope, const char *key,
              int64_t now, int64_t keep_ms, struct store_idem *out);
/* Makes r pending (copied, its body too), in place of a pending record of
 * the same scope and key. */
void idem_add(struct idem_table *t, const struct store_idem *r);
/* Writes the pending records: inside the flush's transaction. */
int idem_write(struct idem_table *t, struct store *store);
/* After that transaction committed: the pending records are on disk. */
void idem_written(struct idem_table *t);
/* Removes the records older than keep_ms, at most once every
 * keep_ms / 10 (1 s to 1 min): from the housekeeping. 0 or -EIO. */
int idem_prune(struct idem_table *t, struct store *store, int64_t now, int64_t keep_ms);
void idem_cleanup(struct idem_table *t);

#endif
