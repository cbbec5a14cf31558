/* stream.h - the frames of an interactive stream (anvil shell, attach, exec).
 *
 * After an HTTP Upgrade (docs/api.md, "Streams") the CLI and the process on
 * the node - the session holder (agent/holder.h) or the exec helper
 * (agent/rankexec.h) - talk in frames; the server and the agent only splice
 * bytes and never parse them. A frame is
 *
 *   1 byte type | 4 bytes payload length, big-endian | payload
 *
 * and each type has its own cap on the payload (stream_type_max): a frame
 * that breaks one, or has a type this table lacks, is a protocol error that
 * closes the stream (the reader never allocates past the cap).
 *
 *   type        from    payload
 *   STDIN       client  bytes for the command's stdin (or terminal)
 *   STDIN_EOF   client  none: no more stdin
 *   STDOUT      node    bytes of the command's stdout (or terminal)
 *   STDERR      node    bytes of its stderr (exec without a terminal)
 *   RESIZE      client  rows, cols: 2 bytes each, big-endian
 *   EXIT        node    the exit status: 4 bytes, big-endian (128+N: signal N)
 *   NOTICE      node    UTF-8 text for the user ("session ends in 60 s")
 *   EXEC        client  the exec request, JSON (proto/wire.h wire_exec);
 *                       the first frame of an exec stream
 *   ERROR       node    UTF-8 text: the stream failed before an exit
 *
 * Pure: no I/O, no globals. A reader belongs to one thread.
 */
#ifndef ANVIL_STREAM_H
#define ANVIL_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

enum stream_type {
	STREAM_STDIN = 1,
	STREAM_STDIN_EOF = 2,
	STREAM_STDOUT = 3,
	STREAM_STDERR = 4,
	STREAM_RESIZE = 5,
	STREAM_EXIT = 6,
	STREAM_NOTICE = 7,
	STREAM_EXEC = 8,
	STREAM_ERROR = 9,
};

#define STREAM_HEADER   5
#define STREAM_DATA_MAX (64 * 1024)    /* STDIN, STDOUT, STDERR */
#define STREAM_TEXT_MAX 4096           /* NOTICE, ERROR */
#define STREAM_EXEC_MAX (256 * 1024)   /* the exec request */
#define STREAM_UPGRADE  "anvil-stream" /* the Upgrade: header's token */

/* The largest payload a frame of type t may carry; -1 for a type that
 * does not exist. */
long stream_type_max(int t);
/* "stdin", "stdout", ...; "?" for an unknown type. */
const char *stream_type_name(int t);

/* Appends one frame; len must be within the type's cap (asserted). */
void stream_put(struct buf *out, enum stream_type t, const void *data, size_t len);
void stream_put_resize(struct buf *out, unsigned rows, unsigned cols);
void stream_put_exit(struct buf *out, int status);
/* NOTICE or ERROR: text cut to STREAM_TEXT_MAX. */
void stream_put_text(struct buf *out, enum stream_type t, const char *text);

struct stream_frame {
	int type;
	size_t len;
	const unsigned char *data; /* borrowed from the reader until its next call */
};

/* Frames arriving in pieces. */
struct stream_reader {
	struct buf in;
	size_t off; /* where the next frame starts in in */
};

void stream_reader_init(struct stream_reader *r);
void stream_reader_cleanup(struct stream_reader *r);
/* Adds bytes as they were read. */
void stream_reader_feed(struct stream_reader *r, const void *data, size_t len);
/* The next whole frame: 1 with *f, 0 when more bytes are needed, or
 * ERR_INVALID with the reason in err (an unknown type, a length past the
 * type's cap, a RESIZE or EXIT of the wrong length): the stream is broken
 * and every later call says so again. */
int stream_reader_next(struct stream_reader *r, struct stream_frame *f, char *err, size_t errlen);

/* A RESIZE frame's rows and cols; an EXIT frame's status. */
void stream_resize_of(const struct stream_frame *f, unsigned *rows, unsigned *cols);
int stream_exit_of(const struct stream_frame *f);

#endif
