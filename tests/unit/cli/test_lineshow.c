/* What `anvil lineage` prints (cli/lineshow.h): the tree upstream and
 * downstream with runs, objects, inputs and cache links, a node met twice
 * written once more and not followed, Graphviz text with what the server
 * sent escaped, and the query each kind of target makes. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../test_json.h"
#include "base/err.h"
#include "cli/lineshow.h"

#define KA "sha256/5be1c0ffee12aa0123456789"

/* prep -> object -> train[0], train[1] -> report (needs); report of
 * execution 2 cached from 1's. */
static const char *const graph_text =
        "{\"direction\": \"%s\", \"starts\": [\"%s\"], \"truncated\": %s, \"nodes\": ["
        " {\"id\": \"run:4\", \"type\": \"run\", \"run\": 4, \"exec\": 1, \"label\": \"report\","
        "  \"workflow\": \"w\", \"state\": \"succeeded\", \"code\": \"sha256/9f2c1a2b3c4d5e6f\","
        "  \"attempts\": [{\"job\": 7, \"nodes\": [\"node-1\", \"node-2\"], \"exit_code\": 0}]},"
        " {\"id\": \"run:2\", \"type\": \"run\", \"run\": 2, \"exec\": 1, \"label\": \"train[0]\","
        "  \"workflow\": \"w\", \"state\": \"failed\", \"attempts\": [{\"job\": 3, \"nodes\":"
        "  [\"node-1\"], \"exit_code\": 2, \"code\": \"sha256/abcdefabcdef99\"}]},"
        " {\"id\": \"run:3\", \"type\": \"run\", \"run\": 3, \"exec\": 1, \"label\": \"train[1]\","
        "  \"workflow\": \"w\", \"state\": \"running\", \"attempts\": [{\"job\": 5, \"nodes\": [],"
        "  \"exit_code\": null}]},"
        " {\"id\": \"object:" KA "\", \"type\": \"object\", \"key\": \"" KA "\", \"kind\": \"dir\","
        "  \"size\": 1536},"
        " {\"id\": \"run:1\", \"type\": \"run\", \"run\": 1, \"exec\": 1, \"label\": \"prep\","
        "  \"workflow\": \"w\", \"state\": \"succeeded\", \"attempts\": []},"
        " {\"id\": \"input:s3://c/p\", \"type\": \"input\", \"uri\": \"s3://c/p\"},"
        " {\"id\": \"run:9\", \"type\": \"run\", \"run\": 9, \"exec\": 2, \"label\": \"report\","
        "  \"workflow\": \"w\\\"\\u001b\", \"state\": \"cached\", \"attempts\": []}],"
        " \"edges\": ["
        "  {\"from\": \"input:s3://c/p\", \"to\": \"run:1\", \"kind\": \"input\"},"
        "  {\"from\": \"run:1\", \"to\": \"object:" KA "\", \"kind\": \"produced\"},"
        "  {\"from\": \"object:" KA "\", \"to\": \"run:2\", \"kind\": \"consumed\"},"
        "  {\"from\": \"object:" KA "\", \"to\": \"run:3\", \"kind\": \"consumed\"},"
        "  {\"from\": \"run:2\", \"to\": \"run:4\", \"kind\": \"needs\"},"
        "  {\"from\": \"run:3\", \"to\": \"run:4\", \"kind\": \"needs\"},"
        "  {\"from\": \"run:4\", \"to\": \"run:9\", \"kind\": \"cached\"}]}";

static json_t *graph(const char *dir, const char *start, const char *truncated)
{
	char text[8192];
	snprintf(text, sizeof(text), graph_text, dir, start, truncated);
	return test_json(text);
}

static char *render(json_t *g, int dot)
{
	struct buf out;
	buf_init(&out);
	if (dot)
		lineshow_dot(g, &out);
	else
		lineshow_tree(g, &out);
	json_decref(g);
	return buf_detach(&out);
}

TEST(upstream_is_a_tree_of_where_each_node_came_from)
{
	char *s = render(graph("upstream", "run:9", "false"), 0);
	CHECK_STR(s, "2/report (w\"?): cached\n"
	             "`-- cached from 1/report (w): succeeded, job 7 on node-1,node-2, exit 0, "
	             "code 9f2c1a2b3c4d\n"
	             "    |-- 1/train[0] (w): failed, job 3 on node-1, exit 2, code abcdefabcdef\n"
	             "    |   `-- object sha256/5be1c0ffee12 (dir, 1.5 KiB)\n"
	             "    |       `-- 1/prep (w): succeeded\n"
	             "    |           `-- input s3://c/p\n"
	             "    `-- 1/train[1] (w): running, job 5\n"
	             "        `-- object sha256/5be1c0ffee12 (dir, 1.5 KiB) (above)\n");
	free(s);
}

TEST(downstream_is_where_each_node_went_and_a_cut_graph_says_so)
{
	char *s = render(graph("downstream", "input:s3://c/p", "true"), 0);
	CHECK_STR(s,
	          "input s3://c/p\n"
	          "`-- 1/prep (w): succeeded\n"
	          "    `-- object sha256/5be1c0ffee12 (dir, 1.5 KiB)\n"
	          "        |-- 1/train[0] (w): failed, job 3 on node-1, exit 2, code abcdefabcdef\n"
	          "        |   `-- 1/report (w): succeeded, job 7 on node-1,node-2, exit 0, code "
	          "9f2c1a2b3c4d\n"
	          "        |       `-- cached as 2/report (w\"?): cached\n"
	          "        `-- 1/train[1] (w): running, job 5\n"
	          "            `-- 1/report (w): succeeded, job 7 on node-1,node-2, exit 0, code "
	          "9f2c1a2b3c4d (above)\n"
	          "(cut short: the graph is larger than the server answers with; ask for less "
	          "with --depth)\n");
	free(s);
	s = render(graph("both", "run:1", "false"), 0);
	CHECK(strncmp(s,
	              "upstream:\n1/prep (w): succeeded\n`-- input s3://c/p\ndownstream:\n"
	              "1/prep (w): succeeded\n`-- object",
	              strlen("upstream:\n1/prep (w): succeeded\n`-- input s3://c/p\ndownstream:\n"
	                     "1/prep (w): succeeded\n`-- object")) == 0);
	free(s);
}

TEST(dot_is_a_digraph_with_every_node_and_edge_escaped)
{
	char *s = render(graph("upstream", "run:9", "false"), 1);
	CHECK(strncmp(s, "digraph lineage {\n  rankdir=LR;\n", 31) == 0);
	CHECK_CONTAINS(s, "  \"run:4\" [shape=box, label=\"1/report (w)\\nsucceeded\"];\n");
	CHECK_CONTAINS(s, "  \"object:" KA "\" [shape=note, label=\"object sha256/5be1c0ffee12 "
	                  "(dir, 1.5 KiB)\"];\n");
	CHECK_CONTAINS(s, "  \"input:s3://c/p\" [shape=ellipse, label=\"input s3://c/p\"];\n");
	CHECK_CONTAINS(s, "label=\"2/report (w\\\"?)\\ncached\"");
	CHECK_CONTAINS(s, "  \"run:4\" -> \"run:9\" [label=\"cached\"];\n");
	CHECK_CONTAINS(s, "  \"object:" KA "\" -> \"run:2\" [label=\"consumed\"];\n");
	size_t len = strlen(s);
	CHECK(len > 2 && strcmp(s + len - 2, "}\n") == 0);
	free(s);
}

static void query_is(const char *target, const char *want, int whole)
{
	struct buf q;
	buf_init(&q);
	char err[256] = "";
	int w = -1;
	if (lineshow_query(target, &q, &w, err, sizeof(err)) != 0)
		FAIL_AT("%s refused: %s", target, err);
	CHECK_STR(q.data, want);
	CHECK_INT(w, whole);
	buf_cleanup(&q);
}

TEST(each_kind_of_target_makes_its_query)
{
	query_is("3/train", "exec=3&task=train", 0);
	query_is("3/train[12]", "exec=3&task=train&index=12", 0);
	query_is("3", "exec=3", 1);
	query_is("sha256/ab", "object=sha256%2Fab", 0);
	static const char *const bad[] = {"train",   "0/a",     "3/",   "3/a[",      "3/a[x]",
	                                  "3/a[-1]", "3/a[1]x", "-3/a", "s3://b/x y"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct buf q;
		buf_init(&q);
		char err[256] = "";
		int w;
		if (lineshow_query(bad[i], &q, &w, err, sizeof(err)) != ERR_INVALID)
			FAIL_AT("%s accepted", bad[i]);
		CHECK_CONTAINS(err, "is not EXEC/TASK, EXEC/TASK[INDEX], EXEC, an object key");
		buf_cleanup(&q);
	}
}

TEST(sizes_read_as_people_write_them)
{
	char s[32];
	lineshow_size(512, s, sizeof(s));
	CHECK_STR(s, "512 B");
	lineshow_size(1536, s, sizeof(s));
	CHECK_STR(s, "1.5 KiB");
	lineshow_size(3LL << 30, s, sizeof(s));
	CHECK_STR(s, "3.0 GiB");
}

TEST_MAIN()
