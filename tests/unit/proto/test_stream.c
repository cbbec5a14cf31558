#include <stdint.h>
#include <stdlib.h>

#include "../test.h"
#include "base/buf.h"
#include "base/err.h"
#include "proto/stream.h"

/* Feeds bytes one at a time: frames come out whole, in order. */
TEST(frames_round_trip_byte_by_byte)
{
	struct buf out;
	buf_init(&out);
	stream_put(&out, STREAM_STDOUT, "hello", 5);
	stream_put_resize(&out, 33, 101);
	stream_put_exit(&out, 7);
	stream_put(&out, STREAM_STDIN_EOF, NULL, 0);
	stream_put_text(&out, STREAM_NOTICE, "session ends in 60 s");
	struct stream_reader r;
	stream_reader_init(&r);
	struct stream_frame f;
	char err[128];
	int got = 0;
	for (size_t i = 0; i < out.len; i++) {
		stream_reader_feed(&r, out.data + i, 1);
		int rc;
		while ((rc = stream_reader_next(&r, &f, err, sizeof(err))) == 1) {
			unsigned rows, cols;
			switch (got++) {
			case 0:
				CHECK_INT(f.type, STREAM_STDOUT);
				CHECK_INT(f.len, 5);
				CHECK(memcmp(f.data, "hello", 5) == 0);
				break;
			case 1:
				CHECK_INT(f.type, STREAM_RESIZE);
				stream_resize_of(&f, &rows, &cols);
				CHECK_INT(rows, 33);
				CHECK_INT(cols, 101);
				break;
			case 2:
				CHECK_INT(f.type, STREAM_EXIT);
				CHECK_INT(stream_exit_of(&f), 7);
				break;
			case 3:
				CHECK_INT(f.type, STREAM_STDIN_EOF);
				CHECK_INT(f.len, 0);
				break;
			case 4:
				CHECK_INT(f.type, STREAM_NOTICE);
				CHECK_INT(f.len, 20);
				break;
			}
		}
		CHECK_INT(rc, 0);
	}
	CHECK_INT(got, 5);
	stream_reader_cleanup(&r);
	buf_cleanup(&out);
}

static int first_error(const unsigned char *bytes, size_t len, char *err, size_t errlen)
{
	struct stream_reader r;
	stream_reader_init(&r);
	stream_reader_feed(&r, bytes, len);
	struct stream_frame f;
	int rc = stream_reader_next(&r, &f, err, errlen);
	/* a broken stream stays broken */
	if (rc < 0)
		CHECK_INT(stream_reader_next(&r, &f, err, errlen), rc);
	stream_reader_cleanup(&r);
	return rc;
}

/* Unknown types and lengths past a type's cap are refused from the
 * header alone, before any payload is buffered. */
TEST(bad_frames_are_refused)
{
	char err[128];
	unsigned char unknown[] = {0x7f, 0, 0, 0, 0};
	CHECK_INT(first_error(unknown, sizeof(unknown), err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "type 127");
	unsigned char zero[] = {0, 0, 0, 0, 0};
	CHECK_INT(first_error(zero, sizeof(zero), err, sizeof(err)), ERR_INVALID);
	unsigned char huge[] = {STREAM_STDIN, 0xff, 0xff, 0xff, 0xff};
	CHECK_INT(first_error(huge, sizeof(huge), err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "stdin frame of 4294967295 bytes (at most 65536)");
	unsigned char over[] = {STREAM_STDOUT, 0, 1, 0, 1};
	CHECK_INT(first_error(over, sizeof(over), err, sizeof(err)), ERR_INVALID);
	unsigned char short_resize[] = {STREAM_RESIZE, 0, 0, 0, 3, 1, 2, 3};
	CHECK_INT(first_error(short_resize, sizeof(short_resize), err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "must be 4");
	unsigned char eof_with_data[] = {STREAM_STDIN_EOF, 0, 0, 0, 1, 'x'};
	CHECK_INT(first_error(eof_with_data, sizeof(eof_with_data), err, sizeof(err)), ERR_INVALID);
	unsigned char big_exec[] = {STREAM_EXEC, 0, 0x04, 0, 1};
	CHECK_INT(first_error(big_exec, sizeof(big_exec), err, sizeof(err)), ERR_INVALID);
}

/* The largest frame of each kind passes; a payload arriving in pieces waits. */
TEST(caps_are_inclusive_and_partial_frames_wait)
{
	struct buf out;
	buf_init(&out);
	char *data = calloc(1, STREAM_DATA_MAX);
	stream_put(&out, STREAM_STDIN, data, STREAM_DATA_MAX);
	struct stream_reader r;
	stream_reader_init(&r);
	struct stream_frame f;
	char err[128];
	stream_reader_feed(&r, out.data, out.len - 1);
	CHECK_INT(stream_reader_next(&r, &f, err, sizeof(err)), 0);
	stream_reader_feed(&r, out.data + out.len - 1, 1);
	CHECK_INT(stream_reader_next(&r, &f, err, sizeof(err)), 1);
	CHECK_INT(f.len, STREAM_DATA_MAX);
	CHECK_INT(stream_reader_next(&r, &f, err, sizeof(err)), 0);
	free(data);
	stream_reader_cleanup(&r);
	buf_cleanup(&out);
}

/* Text is cut to its cap instead of making a frame the reader refuses. */
TEST(text_is_cut_to_the_cap)
{
	char *text = malloc(STREAM_TEXT_MAX * 2 + 1);
	memset(text, 'a', STREAM_TEXT_MAX * 2);
	text[STREAM_TEXT_MAX * 2] = '\0';
	struct buf out;
	buf_init(&out);
	stream_put_text(&out, STREAM_ERROR, text);
	CHECK_INT(out.len, STREAM_HEADER + STREAM_TEXT_MAX);
	CHECK_STR(stream_type_name(STREAM_ERROR), "error");
	CHECK_STR(stream_type_name(42), "?");
	CHECK_INT(stream_type_max(42), -1);
	free(text);
	buf_cleanup(&out);
}

TEST_MAIN()
