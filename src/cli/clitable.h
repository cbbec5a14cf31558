/* clitable.h - aligned text tables for the client's human output.
 *
 * Build a table with a header row, add cells left to right (rows wrap after
 * the last column), render it into a buf: columns padded to their widest
 * cell (counted in UTF-8 characters), two spaces apart, no trailing spaces,
 * right-aligned where asked (numbers). Control characters in cells are shown
 * as '?', so a job name or a server message cannot drive the terminal.
 * Empty cells render as "-". The table owns copies of its cells.
 */
#ifndef ANVIL_CLITABLE_H
#define ANVIL_CLITABLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct clitable;

/* ncols header strings follow ncols. */
struct clitable *clitable_new(int ncols, ...);
void clitable_free(struct clitable *t);

/* Right-aligns column col (0-based). */
void clitable_right(struct clitable *t, int col);
/* Indents every rendered line by n spaces. */
void clitable_indent(struct clitable *t, int n);

/* Adds one cell; printf-style. */
void clitable_add(struct clitable *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int clitable_rows(const struct clitable *t);

/* Appends the rendered table (header first) to out. */
void clitable_render(const struct clitable *t, struct buf *out);

/* Display helpers shared by the verbs, all into a caller's buffer. */
/* "850ms", "12s", "5m03s", "2h05m", "3d04h"; negative is "-". */
void clitable_duration(char *out, size_t n, int64_t ms);
/* Local time "2026-11-29 22:40:01" of epoch milliseconds. */
void clitable_time(char *out, size_t n, int64_t epoch_ms);

#endif
