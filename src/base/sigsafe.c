#include "base/sigsafe.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

void sigsafe_put(int fd, const char *s)
{
	size_t len = strlen(s);
	while (len > 0) {
		ssize_t w = write(fd, s, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		len -= (size_t)w;
	}
}

void sigsafe_put_errno(int fd, const char *prefix, int err)
{
	const char *why = strerrordesc_np(err); /* a lookup in a constant table */
	sigsafe_put(fd, prefix);
	sigsafe_put(fd, why ? why : "unknown error");
	sigsafe_put(fd, "\n");
}

char *sigsafe_fmt_long(char *end, long v)
{
	unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
	do {
		*--end = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--end = '-';
	return end;
}
