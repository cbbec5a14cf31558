#include "proto/stream.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"

static const struct {
	const char *name;
	long max;
} types[] = {
        [STREAM_STDIN] = {"stdin", STREAM_DATA_MAX},
        [STREAM_STDIN_EOF] = {"stdin_eof", 0},
        [STREAM_STDOUT] = {"stdout", STREAM_DATA_MAX},
        [STREAM_STDERR] = {"stderr", STREAM_DATA_MAX},
        [STREAM_RESIZE] = {"resize", 4},
        [STREAM_EXIT] = {"exit", 4},
        [STREAM_NOTICE] = {"notice", STREAM_TEXT_MAX},
        [STREAM_EXEC] = {"exec", STREAM_EXEC_MAX},
        [STREAM_ERROR] = {"error", STREAM_TEXT_MAX},
};
#define NTYPES ((int)(sizeof(types) / sizeof(types[0])))

long stream_type_max(int t)
{
	return t > 0 && t < NTYPES && types[t].name ? types[t].max : -1;
}

const char *stream_type_name(int t)
{
	return stream_type_max(t) >= 0 ? types[t].name : "?";
}

/* The fixed-size payloads must have exactly their size. */
static int exact(int t)
{
	return t == STREAM_RESIZE || t == STREAM_EXIT;
}

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static uint32_t get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void stream_put(struct buf *out, enum stream_type t, const void *data, size_t len)
{
	assert(stream_type_max((int)t) >= 0 && len <= (size_t)stream_type_max((int)t));
	unsigned char h[STREAM_HEADER];
	h[0] = (unsigned char)t;
	put_be32(h + 1, (uint32_t)len);
	buf_add(out, h, sizeof(h));
	if (len)
		buf_add(out, data, len);
}

void stream_put_resize(struct buf *out, unsigned rows, unsigned cols)
{
	unsigned char p[4] = {(unsigned char)(rows >> 8), (unsigned char)rows,
	                      (unsigned char)(cols >> 8), (unsigned char)cols};
	stream_put(out, STREAM_RESIZE, p, sizeof(p));
}

void stream_put_exit(struct buf *out, int status)
{
	unsigned char p[4];
	put_be32(p, (uint32_t)status);
	stream_put(out, STREAM_EXIT, p, sizeof(p));
}

void stream_put_text(struct buf *out, enum stream_type t, const char *text)
{
	size_t n = strlen(text);
	stream_put(out, t, text, n > STREAM_TEXT_MAX ? STREAM_TEXT_MAX : n);
}

void stream_reader_init(struct stream_reader *r)
{
	buf_init(&r->in);
	r->off = 0;
}

void stream_reader_cleanup(struct stream_reader *r)
{
	buf_cleanup(&r->in);
}

void stream_reader_feed(struct stream_reader *r, const void *data, size_t len)
{
	/* Drop what was consumed before growing: a reader holds at most one
	 * frame and what arrived behind it. */
	if (r->off && r->off == r->in.len) {
		buf_reset(&r->in);
		r->off = 0;
	} else if (r->off > 64 * 1024) {
		memmove(r->in.data, r->in.data + r->off, r->in.len - r->off);
		r->in.len -= r->off;
		r->off = 0;
	}
	buf_add(&r->in, data, len);
}

int stream_reader_next(struct stream_reader *r, struct stream_frame *f, char *err, size_t errlen)
{
	size_t have = r->in.len - r->off;
	if (have < STREAM_HEADER)
		return 0;
	const unsigned char *p = (const unsigned char *)r->in.data + r->off;
	int t = p[0];
	uint32_t len = get_be32(p + 1);
	long max = stream_type_max(t);
	if (max < 0) {
		snprintf(err, errlen, "frame type %d is not one of the stream's", t);
		return ERR_INVALID;
	}
	if (len > (uint32_t)max || (exact(t) && len != (uint32_t)max)) {
		snprintf(err, errlen, "%s frame of %lu bytes (%s %ld)", types[t].name,
		         (unsigned long)len, exact(t) ? "must be" : "at most", max);
		return ERR_INVALID;
	}
	if (have < STREAM_HEADER + (size_t)len)
		return 0;
	f->type = t;
	f->len = len;
	f->data = p + STREAM_HEADER;
	r->off += STREAM_HEADER + (size_t)len;
	return 1;
}

void stream_resize_of(const struct stream_frame *f, unsigned *rows, unsigned *cols)
{
	*rows = (unsigned)f->data[0] << 8 | f->data[1];
	*cols = (unsigned)f->data[2] << 8 | f->data[3];
}

int stream_exit_of(const struct stream_frame *f)
{
	return (int)get_be32(f->data);
}
