/* test_lines.c - whole, labeled lines out of chunks (cli/lines.h). */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/buf.h"
#include "cli/lines.h"

/* Feeds each chunk and returns what came out after each, '|' between. */
static char *feed_all(int rank, const char *const *chunks, int flush)
{
	struct lines l;
	lines_init(&l, rank);
	struct buf all;
	buf_init(&all);
	for (size_t i = 0; chunks[i]; i++) {
		struct buf out;
		buf_init(&out);
		lines_feed(&l, chunks[i], strlen(chunks[i]), &out);
		if (i)
			buf_adds(&all, "|");
		buf_add(&all, out.data ? out.data : "", out.len);
		buf_cleanup(&out);
	}
	if (flush) {
		struct buf out;
		buf_init(&out);
		lines_flush(&l, &out);
		buf_adds(&all, "|");
		buf_add(&all, out.data ? out.data : "", out.len);
		buf_cleanup(&out);
	}
	lines_cleanup(&l);
	buf_adds(&all, "");
	return buf_detach(&all);
}

TEST(a_line_split_across_chunks_comes_out_whole)
{
	char *got = feed_all(1, (const char *const[]){"a\nbo", "", "o", "m\nc", NULL}, 0);
	CHECK_STR(got, "1: a\n|||1: boom\n");
	free(got);
	/* the last partial line waits for the end of the stream */
	got = feed_all(1, (const char *const[]){"a\nbo", "om\nc", NULL}, 1);
	CHECK_STR(got, "1: a\n|1: boom\n|1: c\n");
	free(got);
}

TEST(every_line_of_a_chunk_is_labeled)
{
	char *got = feed_all(12, (const char *const[]){"x\n\ny\nz", NULL}, 1);
	CHECK_STR(got, "12: x\n12: \n12: y\n|12: z\n");
	free(got);
}

TEST(no_label_for_one_rank)
{
	char *got = feed_all(-1, (const char *const[]){"he", "llo\nwor", "ld\n", NULL}, 1);
	CHECK_STR(got, "|hello\n|world\n|");
	free(got);
}

TEST(flush_without_a_partial_line_adds_nothing)
{
	struct lines l;
	lines_init(&l, 0);
	struct buf out;
	buf_init(&out);
	lines_feed(&l, "done\n", 5, &out);
	CHECK(!lines_pending(&l));
	lines_flush(&l, &out);
	CHECK_INT(out.len, 8);
	lines_feed(&l, "more", 4, &out);
	CHECK(lines_pending(&l));
	CHECK_INT(out.len, 8);
	lines_flush(&l, &out);
	CHECK(!lines_pending(&l));
	buf_adds(&out, "");
	CHECK_STR(out.data, "0: done\n0: more\n");
	buf_cleanup(&out);
	lines_cleanup(&l);
}

/* A stream without newlines is cut into lines of LINES_HELD_MAX bytes. */
TEST(a_line_without_end_is_cut_at_the_cap)
{
	struct lines l;
	lines_init(&l, 3);
	struct buf out;
	buf_init(&out);
	size_t big = LINES_HELD_MAX + 100;
	char *data = malloc(big);
	memset(data, 'x', big);
	lines_feed(&l, data, 10, &out);
	CHECK_INT(out.len, 0);
	lines_feed(&l, data, big - 10, &out);
	/* "3: " + the cap + "\n"; the other 100 bytes held */
	CHECK_INT(out.len, 3 + LINES_HELD_MAX + 1);
	CHECK(memcmp(out.data, "3: xxx", 6) == 0);
	CHECK(out.data[out.len - 1] == '\n');
	CHECK_INT(l.held.len, 100);
	lines_flush(&l, &out);
	CHECK_INT(out.len, 3 + LINES_HELD_MAX + 1 + 3 + 100 + 1);
	/* a whole line longer than the cap, in one chunk, passes in one piece */
	buf_reset(&out);
	data[big - 1] = '\n';
	lines_feed(&l, data, big, &out);
	CHECK_INT(out.len, 3 + big);
	free(data);
	buf_cleanup(&out);
	lines_cleanup(&l);
}

TEST_MAIN()
