/* blob.h - the object store: one interface for every blob anvil keeps
 * (code bundles, task outputs, checkpoints, cached results).
 *
 * A store is opened from a URI: file://DIR (the default, a directory under
 * the server's state directory, so nothing else is needed), and later
 * s3://BUCKET/PREFIX through the cache tier (still to come), behind the
 * same calls. A library of its own (anvil_objstore, on base alone): the
 * server, the agent's task wrapper and the CLI use it, and none of them
 * needs the state database for it. Two kinds of object:
 *
 *   content-addressed  blob_put_file(): the key is "sha256/<64 hex>", the
 *                      content's SHA-256, so storing the same bytes twice
 *                      stores them once and a key says what it holds.
 *                      Its file is sha256/<2 hex>/<62 hex> (no directory
 *                      holds every object), and every call also takes
 *                      that path as the key (base/objects.h);
 *   named              blob_put_named(): a key the caller chooses
 *                      ("ckpt/<job>/<attempt>/...", letters, digits and
 *                      ._-/, no "..", no leading '/'; not under "sha256/"
 *                      or "staging/", which are the store's), replaced
 *                      whole.
 *
 * Writes are atomic: to a temporary name in the same directory, fsync,
 * then rename, so a reader sees the old object or the new one, never a
 * part. Every object has a sidecar record of its size and SHA-256
 * (<key>.meta, JSON), written after the data; a read checks both and fails
 * with ERR_UPSTREAM ("corrupt: ...") rather than return other bytes
 * (blob_read_fd, which hands out the stored file itself, checks the size
 * and leaves the hash to its reader). A store may be used by several
 * threads at once: every temporary name is unique to its call, and two
 * puts of one content key store the same bytes; two puts of one named key
 * at once must be kept apart by the caller (the data of one could end up
 * with the other's record).
 */
#ifndef ANVIL_OBJSTORE_BLOB_H
#define ANVIL_OBJSTORE_BLOB_H

#include <stddef.h>
#include <stdint.h>

struct blob_store;

struct blob_info {
	int64_t size;
	char sha256[65]; /* hex */
};

/* Opens (creating the directory) the store at uri. */
int blob_open(const char *uri, struct blob_store **out, char *err, size_t errlen);
void blob_close(struct blob_store *s);
const char *blob_uri(const struct blob_store *s);

/* Stores the file at path by its content; key gets "sha256/<hex>". */
int blob_put_file(struct blob_store *s, const char *path, char key[80], struct blob_info *info);
/* Stores len bytes under key (named), replacing what was there. */
int blob_put_named(struct blob_store *s, const char *key, const void *data, size_t len,
                   struct blob_info *info);
/* Stores the file at path under key (named), replacing what was there;
 * the file is copied, not moved. */
int blob_put_named_file(struct blob_store *s, const char *key, const char *path,
                        struct blob_info *info);
/* Opens the object for reading: *fd (close it) and its record in info,
 * after checking that the file has the recorded size; the reader checks
 * the hash. ERR_NOTFOUND when there is none, ERR_UPSTREAM when the size
 * differs. */
int blob_read_fd(struct blob_store *s, const char *key, int *fd, struct blob_info *info);
/* Copies the object to path (atomically, as a put does), checking its size
 * and hash on the way; ERR_NOTFOUND when there is none. */
int blob_get_file(struct blob_store *s, const char *key, const char *path, struct blob_info *info);
/* Its size and hash, from its record; ERR_NOTFOUND when there is none or
 * its data is missing, ERR_UPSTREAM when the data is not the size the
 * record says (the hash is checked by reads, not here). */
int blob_stat(struct blob_store *s, const char *key, struct blob_info *info);
/* Removes it; 0 also when it was not there. */
int blob_delete(struct blob_store *s, const char *key);
/* 0 when key is one a named put accepts, else ERR_INVALID with why. */
int blob_key_check(const char *key, char *err, size_t errlen);
/* 0 when a named put of key has room in the store's tree, else
 * ERR_CONFLICT with the key in its way in other: an object at a prefix of
 * key ("a" for "a/b"), or "KEY/" when objects lie under key. A key is an
 * object or a prefix of objects, never both (a file cannot also be a
 * directory). The named puts check it themselves. */
int blob_key_conflict(struct blob_store *s, const char *key, char *other, size_t len);

#endif
