#include "cli/lines.h"

#include <stdio.h>
#include <string.h>

void lines_init(struct lines *l, int rank)
{
	l->label[0] = '\0';
	if (rank >= 0)
		snprintf(l->label, sizeof(l->label), "%d: ", rank);
	buf_init(&l->held);
}

void lines_cleanup(struct lines *l)
{
	buf_cleanup(&l->held);
}

/* Label, what is held, then data[0, n) (which ends the line, or not:
 * then end adds the newline). */
static void emit(struct lines *l, const char *data, size_t n, const char *end, struct buf *out)
{
	buf_adds(out, l->label);
	buf_add(out, l->held.data ? l->held.data : "", l->held.len);
	buf_add(out, data, n);
	buf_adds(out, end);
	buf_reset(&l->held);
}

void lines_feed(struct lines *l, const char *data, size_t len, struct buf *out)
{
	while (len > 0) {
		const char *nl = memchr(data, '\n', len);
		if (nl) {
			size_t n = (size_t)(nl - data) + 1;
			emit(l, data, n, "", out);
			data += n;
			len -= n;
			continue;
		}
		if (l->held.len + len < LINES_HELD_MAX) {
			buf_add(&l->held, data, len);
			return;
		}
		size_t n = LINES_HELD_MAX - l->held.len; /* cut: a line of its own */
		emit(l, data, n, "\n", out);
		data += n;
		len -= n;
	}
}

void lines_flush(struct lines *l, struct buf *out)
{
	if (l->held.len)
		emit(l, "", 0, "\n", out);
}

int lines_pending(const struct lines *l)
{
	return l->held.len > 0;
}
