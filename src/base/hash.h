/* hash.h - SHA-256 of files and bytes, as lower-case hex.
 *
 * What names content everywhere in anvil: the object store's content keys
 * ("sha256/<hex>"), the checks a download makes, code bundles. Pure apart
 * from reading the file it is given; thread-safe.
 */
#ifndef ANVIL_HASH_H
#define ANVIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_HEX_LEN 64 /* hex digits of a SHA-256, without the NUL */

/* The SHA-256 of what fd reads from its current offset to its end, and how
 * many bytes that was (size may be NULL). 0 or a negative errno. */
int hash_fd_sha256(int fd, char hex[HASH_HEX_LEN + 1], int64_t *size);
/* The SHA-256 of the len bytes at offset off of fd (pread: the offset of
 * fd is left alone); -EIO when the file ends before them. */
int hash_range_sha256(int fd, int64_t off, int64_t len, char hex[HASH_HEX_LEN + 1]);
/* The same for the file at path. */
int hash_file_sha256(const char *path, char hex[HASH_HEX_LEN + 1], int64_t *size);
/* The SHA-256 of len bytes. */
void hash_sha256(const void *data, size_t len, char hex[HASH_HEX_LEN + 1]);
/* 1 when s is exactly 64 lower-case hex digits. */
int hash_hex_ok(const char *s);

#endif
