#include "cli/clitable.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"

#define CLITABLE_MAX_COLS 16

struct clitable {
	int ncols;
	int indent;
	int right[CLITABLE_MAX_COLS];
	char **cells; /* row-major; the header is row 0 */
	size_t ncells;
	size_t cap;
};

static void push(struct clitable *t, const char *s)
{
	if (t->ncells == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->cells = xrealloc(t->cells, t->cap * sizeof(*t->cells));
	}
	char *c = xstrdup(*s ? s : "-");
	for (char *p = c; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	t->cells[t->ncells++] = c;
}

struct clitable *clitable_new(int ncols, ...)
{
	if (ncols < 1 || ncols > CLITABLE_MAX_COLS)
		abort();
	struct clitable *t = xcalloc(1, sizeof(*t));
	t->ncols = ncols;
	va_list ap;
	va_start(ap, ncols);
	for (int i = 0; i < ncols; i++)
		push(t, va_arg(ap, const char *));
	va_end(ap);
	return t;
}

void clitable_free(struct clitable *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->ncells; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

void clitable_right(struct clitable *t, int col)
{
	if (col >= 0 && col < t->ncols)
		t->right[col] = 1;
}

void clitable_indent(struct clitable *t, int n)
{
	t->indent = n;
}

void clitable_add(struct clitable *t, const char *fmt, ...)
{
	struct buf b;
	buf_init(&b);
	va_list ap;
	va_start(ap, fmt);
	char small[256];
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n < sizeof(small)) {
		push(t, n < 0 ? "?" : small);
		return;
	}
	buf_reserve(&b, n > 0 ? (size_t)n : 0);
	va_start(ap, fmt);
	vsnprintf(b.data, b.cap, fmt, ap);
	va_end(ap);
	push(t, b.data);
	buf_cleanup(&b);
}

int clitable_rows(const struct clitable *t)
{
	return (int)(t->ncells / (size_t)t->ncols) - 1;
}

/* Characters on screen: bytes that do not continue a UTF-8 sequence. */
static size_t width(const char *s)
{
	size_t w = 0;
	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

static void pad(struct buf *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf_add(out, " ", 1);
}

void clitable_render(const struct clitable *t, struct buf *out)
{
	size_t w[CLITABLE_MAX_COLS] = {0};
	size_t cols = (size_t)t->ncols;
	for (size_t i = 0; i < t->ncells; i++) {
		size_t cw = width(t->cells[i]);
		if (cw > w[i % cols])
			w[i % cols] = cw;
	}
	for (size_t i = 0; i < t->ncells; i++) {
		size_t col = i % cols;
		int last = col == cols - 1 || i == t->ncells - 1;
		size_t gap = w[col] - width(t->cells[i]);
		if (col == 0)
			pad(out, (size_t)t->indent);
		if (t->right[col])
			pad(out, gap);
		buf_adds(out, t->cells[i]);
		if (!t->right[col] && !last)
			pad(out, gap);
		buf_adds(out, last ? "\n" : "  ");
	}
}

void clitable_duration(char *out, size_t n, int64_t ms)
{
	if (ms < 0)
		snprintf(out, n, "-");
	else if (ms < 1000)
		snprintf(out, n, "%lldms", (long long)ms);
	else if (ms < 60000)
		snprintf(out, n, "%llds", (long long)(ms / 1000));
	else if (ms < 3600000)
		snprintf(out, n, "%lldm%02llds", (long long)(ms / 60000),
		         (long long)(ms / 1000 % 60));
	else if (ms < 86400000)
		snprintf(out, n, "%lldh%02lldm", (long long)(ms / 3600000),
		         (long long)(ms / 60000 % 60));
	else
		snprintf(out, n, "%lldd%02lldh", (long long)(ms / 86400000),
		         (long long)(ms / 3600000 % 24));
}

void clitable_time(char *out, size_t n, int64_t epoch_ms)
{
	time_t secs = (time_t)(epoch_ms / 1000);
	struct tm tm;
	if (!localtime_r(&secs, &tm) || strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(out, n, "-");
}
