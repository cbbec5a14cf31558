/* buf.h - a growable byte buffer, always NUL-terminated.
 *
 * Embedded by value: buf_init/buf_cleanup. buf_detach hands the bytes to the
 * caller (free() them). Not thread-safe; one owner at a time.
 */
#ifndef ANVIL_BUF_H
#define ANVIL_BUF_H

#include <stddef.h>

struct buf {
	char *data;
	size_t len;
	size_t cap;
};

void buf_init(struct buf *b);
void buf_cleanup(struct buf *b);
void buf_reset(struct buf *b);
void buf_reserve(struct buf *b, size_t extra);
void buf_add(struct buf *b, const void *data, size_t len);
void buf_adds(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *buf_detach(struct buf *b);

#endif
