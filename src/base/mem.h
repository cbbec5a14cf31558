/* mem.h - allocation that never returns NULL.
 *
 * xmalloc and friends abort the process on out-of-memory: a daemon that
 * cannot allocate a few bytes cannot keep its promises anyway. Sizes that
 * come from the network or a file must be capped by the caller first.
 */
#ifndef ANVIL_MEM_H
#define ANVIL_MEM_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Grows the array arr (n used, cap allocated) so one more element fits. */
#define XGROW(arr, n, cap)                                                                         \
	do {                                                                                       \
		if ((size_t)(n) >= (size_t)(cap)) {                                                \
			(cap) = (cap) ? (cap)*2 : 64;                                              \
			(arr) = xrealloc((arr), sizeof(*(arr)) * (size_t)(cap));                   \
		}                                                                                  \
	} while (0)

#endif
