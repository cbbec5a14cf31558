/* fleet/hostlist.h: ranges of names and addresses, expanded. */
#include <string.h>

#include "../test.h"
#include "fleet/hostlist.h"

/* The names pattern spells, joined with spaces; "ERR: why" when none. */
static const char *spell(const char *pattern, int64_t max)
{
	static char out[4096];
	char err[160];
	json_t *a = json_array();
	if (hostlist_expand(pattern, max, a, err, sizeof(err))) {
		CHECK_INT(json_array_size(a), 0); /* out unchanged on an error */
		CHECK_INT(hostlist_count(pattern, max, err, sizeof(err)), -1);
		snprintf(out, sizeof(out), "ERR: %s", err);
		json_decref(a);
		return out;
	}
	CHECK_INT(hostlist_count(pattern, max, err, sizeof(err)), (long long)json_array_size(a));
	size_t used = 0, i;
	json_t *v;
	out[0] = '\0';
	json_array_foreach (a, i, v)
		used += (size_t)snprintf(out + used, sizeof(out) - used, "%s%s", i ? " " : "",
		                         json_string_value(v));
	json_decref(a);
	return out;
}

TEST(ranges_expand_with_their_width)
{
	CHECK_STR(spell("h200-[01-03]", 100), "h200-01 h200-02 h200-03");
	CHECK_STR(spell("10.0.1.[9-11]", 100), "10.0.1.9 10.0.1.10 10.0.1.11");
	CHECK_STR(spell("n[08-10]x", 100), "n08x n09x n10x");
	CHECK_STR(spell("gpu-[1-2,7,010-011]", 100), "gpu-1 gpu-2 gpu-7 gpu-010 gpu-011");
	CHECK_STR(spell("r[1-2]-n[1-2]", 100), "r1-n1 r1-n2 r2-n1 r2-n2");
	CHECK_STR(spell("plain-host", 100), "plain-host");
	CHECK_STR(spell("[5]", 100), "5");
}

TEST(bad_patterns_say_why)
{
	CHECK_STR(spell("", 100), "ERR: names nothing");
	CHECK_STR(spell("h[1-3", 100), "ERR: a '[' is not closed with ']'");
	CHECK_STR(spell("h1-3]", 100), "ERR: a ']' has no '['");
	CHECK_STR(spell("h[3-1]", 100), "ERR: 3-1 runs backwards");
	CHECK_STR(spell("h[a-b]", 100),
	          "ERR: a range holds numbers of 1 to 9 digits: [1-8], [01-18] or [1,3,5-7]");
	CHECK_STR(spell("h[1-]", 100), "ERR: '1-' needs a number after the '-'");
	CHECK_STR(spell("h[1;2]", 100), "ERR: a range holds numbers, '-' and ','");
	CHECK_STR(spell("h[1-[2]]", 100), "ERR: '1-' needs a number after the '-'");
	CHECK_STR(spell("h[1234567890]", 100),
	          "ERR: a range holds numbers of 1 to 9 digits: [1-8], [01-18] or [1,3,5-7]");
	CHECK_STR(spell("a[1][2][3][4][5][6][7][8][9]", 100), "ERR: more than 8 ranges");
}

TEST(the_cap_is_checked_before_anything_is_made)
{
	char err[160];
	CHECK_STR(spell("h[1-101]", 100), "ERR: more than 100 names");
	/* 10^9 x 10^9 names: refused by counting, not by running out of memory */
	CHECK_INT(hostlist_count("[0-999999999]-[0-999999999]", 10000, err, sizeof(err)), -1);
	CHECK_STR(err, "more than 10000 names");
	CHECK_INT(hostlist_count("h[1-100]", 100, err, sizeof(err)), 100);
}

TEST_MAIN()
