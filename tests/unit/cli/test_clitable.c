#include <stdlib.h>

#include "../test.h"
#include "cli/clitable.h"

TEST(columns_align_without_trailing_spaces)
{
	struct clitable *t = clitable_new(3, "ID", "NAME", "STATE");
	clitable_right(t, 0);
	clitable_add(t, "%d", 7);
	clitable_add(t, "train");
	clitable_add(t, "running");
	clitable_add(t, "%d", 123);
	clitable_add(t, "%s", "");
	clitable_add(t, "pending");
	CHECK_INT(clitable_rows(t), 2);
	struct buf b;
	buf_init(&b);
	clitable_render(t, &b);
	CHECK_STR(b.data, " ID  NAME   STATE\n"
	                  "  7  train  running\n"
	                  "123  -      pending\n");
	clitable_free(t);
	buf_cleanup(&b);
}

TEST(utf8_width_indent_and_control_characters)
{
	struct clitable *t = clitable_new(2, "A", "B");
	clitable_indent(t, 2);
	clitable_add(t, "h\xc3\xa9llo"); /* 5 characters, 6 bytes */
	clitable_add(t, "x");
	clitable_add(t, "evil\033[31m");
	clitable_add(t, "two\nlines");
	struct buf b;
	buf_init(&b);
	clitable_render(t, &b);
	CHECK_STR(b.data, "  A          B\n"
	                  "  h\xc3\xa9llo      x\n"
	                  "  evil?[31m  two?lines\n");
	clitable_free(t);
	buf_cleanup(&b);
}

TEST(long_cells)
{
	struct clitable *t = clitable_new(1, "X");
	char big[1000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	clitable_add(t, "%s!", big);
	struct buf b;
	buf_init(&b);
	clitable_render(t, &b);
	CHECK_INT(b.len, 2 + 1000 + 1);
	clitable_free(t);
	buf_cleanup(&b);
}

TEST(durations)
{
	char s[32];
	const struct {
		long long ms;
		const char *want;
	} cases[] = {
	        {-1, "-"},          {0, "0ms"},          {999, "999ms"},       {1000, "1s"},
	        {59999, "59s"},     {60000, "1m00s"},    {183000, "3m03s"},    {3600000, "1h00m"},
	        {7500000, "2h05m"}, {86400000, "1d00h"}, {277200000, "3d05h"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		clitable_duration(s, sizeof(s), cases[i].ms);
		CHECK_STR(s, cases[i].want);
	}
}

TEST(local_time)
{
	setenv("TZ", "UTC", 1);
	char s[64];
	clitable_time(s, sizeof(s), 1790000000123LL);
	CHECK_STR(s, "2026-09-21 14:13:20");
}

TEST_MAIN()
