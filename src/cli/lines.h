/* lines.h - whole, labeled lines out of output that arrives in chunks.
 *
 * `anvil logs` and `anvil run --wait` read each rank's stdout and stderr in
 * chunks that end anywhere, and print the chunks of several ranks as they
 * arrive, so each (rank, stream) has a struct lines: it hands on whole
 * lines only, each led by the rank's label ("1: ", as `srun -l` prints; none
 * when one rank is shown), and holds the partial line at a chunk's end until
 * its newline comes or the stream ends (lines_flush, which ends it with a
 * newline). A partial line that reaches LINES_HELD_MAX bytes goes out as a
 * line of its own, so a stream without newlines cannot grow the client
 * without bound.
 *
 * Pure: bytes in, bytes out (the caller writes them). The caller owns the
 * struct; lines_init/lines_cleanup. One thread.
 */
#ifndef ANVIL_LINES_H
#define ANVIL_LINES_H

#include <stddef.h>

#include "base/buf.h"

#define LINES_HELD_MAX (64 * 1024)

struct lines {
	char label[24];  /* "R: ", or "" */
	struct buf held; /* the partial line since the last newline */
};

/* rank < 0: no label. */
void lines_init(struct lines *l, int rank);
void lines_cleanup(struct lines *l);

/* Appends to out every line that data completes, each led by the label;
 * keeps the rest for the next chunk. */
void lines_feed(struct lines *l, const char *data, size_t len, struct buf *out);
/* The stream has ended (or its attempt has): the held partial line, if
 * any, goes to out with the label and a newline. */
void lines_flush(struct lines *l, struct buf *out);
/* 1 while a partial line is held. */
int lines_pending(const struct lines *l);

#endif
