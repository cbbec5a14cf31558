/* objects.h - the object client: stat, download and upload objects through
 * the server's /v1/objects API (docs/api.md, "Objects"), with the admin
 * token (the CLI) or an attempt's exec token (`anvil _task` on a node).
 *
 * Keys. A content key names its bytes: "sha256/<64 hex>", the form every
 * call here returns; "sha256/<2 hex>/<62 hex>" (the store's file layout)
 * names the same object, and objects_key_canon turns it into the first.
 * Any other key is a named key ("ckpt/12/train/3"), which the server
 * checks.
 *
 * Nothing is held in memory whole: downloads go to a temporary file beside
 * the destination and are renamed into place once their size and SHA-256
 * are checked (against the key for a content key, against what the server
 * says it stored for a named one), so a destination holds the object or
 * nothing. Uploads of a content key ask first whether the server has it
 * (stored once). Blocking; one thread per struct objects (it borrows an
 * httpc, which is single-threaded).
 *
 * Retries. With retry_ms set, a call whose answer is lost (the server
 * restarts, a proxy answers 502/503/504) is sent again until retry_ms has
 * passed (httpc_set_retry); every upload carries an Idempotency-Key of
 * its own, the same in each of its tries, so that a repeat of one the
 * server stored is answered as the first was and never puts an older
 * named object back over a newer one (docs/api.md, "Idempotency-Key").
 */
#ifndef ANVIL_OBJECTS_H
#define ANVIL_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

#define OBJECTS_KEY_MAX 80    /* bytes of a content key, with its NUL */
#define OBJECTS_IDLE_MS 60000 /* a transfer that moves nothing this long fails */

struct httpc;

/* A connection to the object API. Every pointer is borrowed. */
struct objects {
	const char *server; /* base URL, no trailing slash */
	const char *token;  /* bearer token */
	int64_t attempt_id; /* > 0: the exec token's attempt, sent as X-Anvil-Attempt */
	struct httpc *http; /* the connection to use */
	long retry_ms;      /* a call whose answer is lost is tried this long; 0: once */
	char error[600];    /* the last failure, for the caller to print */
};

struct objects_info {
	int64_t size;
	char sha256[HASH_HEX_LEN + 1];
	int uploaded; /* objects_put*: the bytes were sent (0: the server had them) */
};

/* A content key in its one form ("sha256/<64 hex>"), or a named key as it
 * is, in out (of outlen bytes): 0; ERR_INVALID with why in err when key
 * starts "sha256/" but is neither content form, or does not fit. */
int objects_key_canon(const char *key, char *out, size_t outlen, char *err, size_t errlen);
/* The hash a content key (either form) names, into hex: 1; 0 for another key. */
int objects_key_hash(const char *key, char hex[HASH_HEX_LEN + 1]);

/* Size and hash of the object: 0; ERR_NOTFOUND when the server has none;
 * else the failure with its message in o->error. */
int objects_stat(struct objects *o, const char *key, struct objects_info *info);
/* Downloads the object to path (see above). */
int objects_get(struct objects *o, const char *key, const char *path, struct objects_info *info);
/* Stores the file at path by its content; key gets its content key. */
int objects_put(struct objects *o, const char *path, char key[OBJECTS_KEY_MAX],
                struct objects_info *info);
/* Stores the file at path under the named key, replacing what was there. */
int objects_put_named(struct objects *o, const char *key, const char *path,
                      struct objects_info *info);

#endif
