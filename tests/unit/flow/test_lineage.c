/* The lineage graph (flow/lineage.h) from constructed RUN records: object
 * edges between a producer and its readers, needs edges only where no
 * object was read, cache links across executions, URIs as inputs, walks
 * both ways with a depth; and what a record may show: secrets redacted,
 * commands resolved to object keys, the URIs a task is given. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../test_json.h"
#include "base/err.h"
#include "base/jv.h"
#include "flow/lineage.h"

#define KA "sha256/aaaa"
#define KB "sha256/bbbb"

/* Execution 1: prep writes KA; train[0] and train[1] read it; report
 * reads a value of train (needs only). Execution 2: prep cached from run
 * 1, train[0] reads KA again. */
static struct lineage *graph(void)
{
	static const char *const recs[] = {
	        "{\"run\": 1, \"exec\": 1, \"label\": \"prep\", \"state\": \"succeeded\","
	        " \"outputs\": {\"data\": {\"kind\": \"dir\", \"key\": \"" KA "\", \"size\": 4096,"
	        " \"sha256\": \"aaaa\"}}, \"uris\": [\"s3://corpus/pages\"]}",
	        "{\"run\": 2, \"exec\": 1, \"label\": \"train[0]\", \"state\": \"succeeded\","
	        " \"needs\": [1], \"fetch\": [{\"ref\": \"tasks.prep.outputs.data\", \"kind\": "
	        "\"dir\","
	        " \"keys\": [\"" KA "\"], \"list\": false}],"
	        " \"outputs\": {\"model\": {\"kind\": \"file\", \"key\": \"" KB
	        "\", \"size\": 10}}}",
	        "{\"run\": 3, \"exec\": 1, \"label\": \"train[1]\", \"state\": \"failed\","
	        " \"needs\": [1], \"fetch\": [{\"ref\": \"tasks.prep.outputs.data\", \"kind\": "
	        "\"dir\","
	        " \"keys\": [\"" KA "\"], \"list\": false}]}",
	        "{\"run\": 4, \"exec\": 1, \"label\": \"report\", \"state\": \"skipped\","
	        " \"needs\": [2, 3]}",
	        "{\"run\": 5, \"exec\": 2, \"label\": \"prep\", \"state\": \"cached\","
	        " \"cached_from\": 1, \"outputs\": {\"data\": {\"kind\": \"dir\", \"key\": \"" KA
	        "\","
	        " \"size\": 4096, \"sha256\": \"aaaa\"}}}",
	        "{\"run\": 6, \"exec\": 2, \"label\": \"train[0]\", \"state\": \"running\","
	        " \"needs\": [5], \"fetch\": [{\"ref\": \"tasks.prep.outputs.data\", \"kind\": "
	        "\"dir\","
	        " \"keys\": [\"" KA "\"], \"list\": false}]}",
	};
	struct lineage *g = lineage_new();
	char err[128];
	for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
		json_t *r = test_json(recs[i]);
		CHECK_INT(lineage_add(g, r, err, sizeof(err)), 0);
		json_decref(r);
	}
	return g;
}

static int by_text(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "from>to:kind" for each edge, sorted, joined by spaces. */
static char *edges_text(const json_t *w)
{
	size_t n = json_array_size(json_object_get(w, "edges")), i;
	char **v = calloc(n + 1, sizeof(char *));
	const json_t *e;
	json_array_foreach (json_object_get(w, "edges"), i, e) {
		v[i] = malloc(256);
		snprintf(v[i], 256, "%s>%s:%s", jv_str(e, "from", ""), jv_str(e, "to", ""),
		         jv_str(e, "kind", ""));
	}
	qsort(v, n, sizeof(char *), by_text);
	char *out = calloc(1, 4096);
	for (i = 0; i < n; i++) {
		if (i)
			strcat(out, " ");
		strcat(out, v[i]);
		free(v[i]);
	}
	free(v);
	return out;
}

/* The node ids of a walk, in order, joined by spaces. */
static char *nodes_text(const json_t *w)
{
	char *out = calloc(1, 4096);
	size_t i;
	const json_t *n;
	json_array_foreach (json_object_get(w, "nodes"), i, n) {
		if (i)
			strcat(out, " ");
		strcat(out, jv_str(n, "id", ""));
	}
	return out;
}

static json_t *walk(struct lineage *g, const char *start, enum lineage_dir dir, int64_t depth)
{
	json_t *starts = json_pack("[s]", start);
	CHECK(lineage_has(g, start));
	json_t *w = lineage_walk(g, starts, dir, depth);
	json_decref(starts);
	return w;
}

TEST(upstream_of_a_reader_goes_through_the_object_to_its_producer_and_its_uris)
{
	struct lineage *g = graph();
	json_t *w = walk(g, "run:4", LINEAGE_UPSTREAM, -1);
	char *n = nodes_text(w), *e = edges_text(w);
	CHECK_STR(n, "run:4 run:2 run:3 object:" KA " run:1 input:s3://corpus/pages");
	/* report read no object of train: needs edges; train read prep's
	 * object: object edges and no needs edge */
	CHECK_STR(e, "input:s3://corpus/pages>run:1:input object:" KA ">run:2:consumed "
	             "object:" KA ">run:3:consumed run:1>object:" KA ":produced "
	             "run:2>run:4:needs run:3>run:4:needs");
	CHECK(!json_is_true(json_object_get(w, "truncated")));
	/* a run node: the record less its links, with what it read */
	const json_t *train = json_array_get(json_object_get(w, "nodes"), 1);
	CHECK_STR(jv_str(train, "type", ""), "run");
	CHECK_STR(jv_str(train, "label", ""), "train[0]");
	CHECK(json_object_get(train, "fetch") == NULL && json_object_get(train, "needs") == NULL);
	const json_t *obj = json_array_get(json_object_get(train, "objects"), 0);
	CHECK_STR(jv_str(obj, "key", ""), KA);
	CHECK_INT(jv_int(obj, "size", 0), 4096);
	CHECK_STR(jv_str(obj, "sha256", ""), "aaaa");
	/* an object node: kind, size and hash from its producer's output */
	const json_t *o = json_array_get(json_object_get(w, "nodes"), 3);
	CHECK_STR(jv_str(o, "type", ""), "object");
	CHECK_STR(jv_str(o, "kind", ""), "dir");
	CHECK_INT(jv_int(o, "size", 0), 4096);
	free(n);
	free(e);
	json_decref(w);
	lineage_free(g);
}

TEST(downstream_of_an_object_crosses_into_the_execution_that_reused_it)
{
	struct lineage *g = graph();
	json_t *w = walk(g, "object:" KA, LINEAGE_DOWNSTREAM, -1);
	char *n = nodes_text(w), *e = edges_text(w);
	CHECK_STR(n, "object:" KA " run:2 run:3 run:6 object:" KB " run:4");
	CHECK_STR(e, "object:" KA ">run:2:consumed object:" KA ">run:3:consumed object:" KA
	             ">run:6:consumed run:2>object:" KB ":produced run:2>run:4:needs "
	             "run:3>run:4:needs");
	free(n);
	free(e);
	json_decref(w);
	/* upstream of the cached run: its origin, and what the origin read */
	w = walk(g, "run:5", LINEAGE_UPSTREAM, -1);
	n = nodes_text(w);
	e = edges_text(w);
	CHECK_STR(n, "run:5 run:1 input:s3://corpus/pages");
	CHECK_STR(e, "input:s3://corpus/pages>run:1:input run:1>run:5:cached");
	free(n);
	free(e);
	json_decref(w);
	/* the cached run is no writer of its origin's object: its reader
	 * needs it, and reaches the writer both ways */
	w = walk(g, "run:6", LINEAGE_UPSTREAM, -1);
	n = nodes_text(w);
	e = edges_text(w);
	CHECK_STR(n, "run:6 object:" KA " run:5 run:1 input:s3://corpus/pages");
	CHECK_STR(e, "input:s3://corpus/pages>run:1:input object:" KA ">run:6:consumed "
	             "run:1>object:" KA ":produced run:1>run:5:cached run:5>run:6:needs");
	free(n);
	free(e);
	json_decref(w);
	lineage_free(g);
}

TEST(depth_counts_edges_and_both_is_the_two_walks_together)
{
	struct lineage *g = graph();
	json_t *w = walk(g, "run:2", LINEAGE_UPSTREAM, 1);
	char *n = nodes_text(w);
	CHECK_STR(n, "run:2 object:" KA);
	free(n);
	json_decref(w);
	w = walk(g, "run:2", LINEAGE_BOTH, 1);
	n = nodes_text(w);
	CHECK_STR(n, "run:2 object:" KA " object:" KB " run:4");
	free(n);
	json_decref(w);
	w = walk(g, "run:2", LINEAGE_DOWNSTREAM, 0);
	n = nodes_text(w);
	CHECK_STR(n, "run:2");
	CHECK_INT(json_array_size(json_object_get(w, "edges")), 0);
	free(n);
	json_decref(w);
	CHECK(!lineage_has(g, "run:99"));
	CHECK(!lineage_has(g, "object:sha256/none"));
	CHECK(lineage_has(g, "input:s3://corpus/pages"));
	lineage_free(g);
}

TEST(a_record_without_a_run_id_or_a_repeated_one_or_after_a_walk_is_refused)
{
	struct lineage *g = lineage_new();
	char err[128] = "";
	json_t *r = test_json("{\"label\": \"a\"}");
	CHECK_INT(lineage_add(g, r, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "run: must be a positive run id");
	json_decref(r);
	r = test_json("{\"run\": 7}");
	CHECK_INT(lineage_add(g, r, err, sizeof(err)), 0);
	CHECK_INT(lineage_add(g, r, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "run: 7 was added before");
	CHECK(lineage_has(g, "run:7"));
	json_decref(r);
	r = test_json("{\"run\": 8}");
	CHECK_INT(lineage_add(g, r, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "run 8: the graph was walked already");
	json_decref(r);
	lineage_free(g);
	/* malformed links are ignored, not fatal */
	g = lineage_new();
	r = test_json("{\"run\": 1, \"needs\": [\"x\", 99, 1], \"fetch\": [7, {\"keys\": [3]}],"
	              " \"outputs\": {\"a\": 5, \"b\": {\"key\": \"\"}}, \"uris\": [1, \"\"],"
	              " \"cached_from\": 1}");
	CHECK_INT(lineage_add(g, r, err, sizeof(err)), 0);
	json_t *w = walk(g, "run:1", LINEAGE_BOTH, -1);
	CHECK_INT(json_array_size(json_object_get(w, "nodes")), 1);
	CHECK_INT(json_array_size(json_object_get(w, "edges")), 0);
	json_decref(w);
	json_decref(r);
	lineage_free(g);
}

TEST(a_walk_stops_at_the_node_cap_and_says_so)
{
	struct lineage *g = lineage_new();
	char err[128];
	json_t *needs = json_array();
	for (int i = 1; i <= LINEAGE_MAX_NODES + 5; i++) {
		json_t *r = json_pack("{s:i}", "run", i);
		CHECK_INT(lineage_add(g, r, err, sizeof(err)), 0);
		json_decref(r);
		json_array_append_new(needs, json_integer(i));
	}
	json_t *last = json_pack("{s:i,s:o}", "run", LINEAGE_MAX_NODES + 6, "needs", needs);
	CHECK_INT(lineage_add(g, last, err, sizeof(err)), 0);
	char id[32];
	snprintf(id, sizeof(id), "run:%d", LINEAGE_MAX_NODES + 6);
	json_t *w = walk(g, id, LINEAGE_UPSTREAM, -1);
	CHECK_INT(json_array_size(json_object_get(w, "nodes")), LINEAGE_MAX_NODES);
	CHECK_INT(json_array_size(json_object_get(w, "edges")), LINEAGE_MAX_NODES - 1);
	CHECK(json_is_true(json_object_get(w, "truncated")));
	json_decref(w);
	json_decref(last);
	lineage_free(g);
}

/* A 10,000-way sweep reading one object, and a reduce needing every
 * child: linked without looking through the object's 10,000 readers for
 * each of them. */
TEST(a_wide_sweep_links_in_a_moment)
{
	enum { N = 10000 };
	struct lineage *g = lineage_new();
	char err[128];
	json_t *prep = test_json(
	        "{\"run\": 1, \"outputs\": {\"d\": {\"kind\": \"dir\", \"key\": \"" KA "\"}}}");
	CHECK_INT(lineage_add(g, prep, err, sizeof(err)), 0);
	json_decref(prep);
	json_t *needs = json_array();
	for (int i = 2; i < N + 2; i++) {
		json_t *r = json_pack("{s:i,s:[i],s:[{s:s,s:[s]}]}", "run", i, "needs", 1, "fetch",
		                      "ref", "tasks.prep.outputs.d", "keys", KA);
		CHECK_INT(lineage_add(g, r, err, sizeof(err)), 0);
		json_decref(r);
		json_array_append_new(needs, json_integer(i));
	}
	json_t *reduce = json_pack("{s:i,s:o}", "run", N + 2, "needs", needs);
	CHECK_INT(lineage_add(g, reduce, err, sizeof(err)), 0);
	json_decref(reduce);
	char id[32];
	snprintf(id, sizeof(id), "run:%d", N + 2);
	json_t *w = walk(g, id, LINEAGE_UPSTREAM, -1);
	CHECK_INT(json_array_size(json_object_get(w, "nodes")), N + 3);
	/* produced, N consumed, N needs; no needs edge from prep to a reader */
	CHECK_INT(json_array_size(json_object_get(w, "edges")), 2 * N + 1);
	json_decref(w);
	lineage_free(g);
}

TEST(secret_names_are_redacted_and_url_passwords_too)
{
	static const char *const secret[] = {"HF_TOKEN",        "ANVIL_EXEC_TOKEN", "ANVIL_TASK",
	                                     "WANDB_API_KEY",   "db_password",      "AWS_REGION",
	                                     "MY_SECRET_THING", "GITHUB_APIKEY",    "SSH_PRIVATE",
	                                     "GCP_CREDENTIALS"};
	for (size_t i = 0; i < sizeof(secret) / sizeof(secret[0]); i++)
		if (!lineage_secret_name(secret[i]))
			FAIL_AT("%s is not taken for a secret", secret[i]);
	static const char *const plain[] = {"PATH", "KEYBOARD", "ANVIL_TASK_NAME", "LR", "MONKEY"};
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		if (lineage_secret_name(plain[i]))
			FAIL_AT("%s is taken for a secret", plain[i]);
	json_t *env = test_json(
	        "{\"HF_TOKEN\": \"hf_abc\", \"LR\": \"0.1\", \"N\": 3,"
	        " \"DB\": \"postgres://app:s3cr3t@db:5432/x?a=b and redis://:pw@cache/0\","
	        " \"SITE\": \"https://user@example.com/x\", \"ODD\": \"a://b:c\"}");
	json_t *r = lineage_redact(env);
	char *s = jv_dump(r);
	CHECK_STR(s, "{\"HF_TOKEN\":\"<redacted>\",\"LR\":\"0.1\",\"N\":3,"
	             "\"DB\":\"postgres://app:<redacted>@db:5432/x?a=b and "
	             "redis://:<redacted>@cache/0\",\"SITE\":\"https://user@example.com/x\","
	             "\"ODD\":\"a://b:c\"}");
	free(s);
	json_decref(r);
	json_decref(env);
	r = lineage_redact(NULL);
	CHECK_INT(json_object_size(r), 0);
	json_decref(r);
}

TEST(a_command_shows_the_keys_of_the_objects_it_fetched)
{
	json_t *cmd = json_pack("[s,s,s,s]", "train",
	                        "--data={{ tasks.prep.outputs.data }}/x {{tasks.sw.outputs.m}}",
	                        "{{ inputs.unrendered }}", "{{ tasks.gone.outputs.f }}");
	json_t *fetch = json_pack("[{s:s,s:[s],s:b},{s:s,s:[s,s,n],s:b},{s:s,s:[n],s:b}]", "ref",
	                          "tasks.prep.outputs.data", "keys", KA, "list", 0, "ref",
	                          "tasks.sw.outputs.m", "keys", KA, KB, "list", 1, "ref",
	                          "tasks.gone.outputs.f", "keys", "list", 0);
	json_t *r = lineage_resolve_command(cmd, fetch);
	char *s = jv_dump(r);
	CHECK_STR(s, "[\"train\",\"--data=" KA "/x " KA " " KB " <missing>\","
	             "\"{{ inputs.unrendered }}\",\"<missing>\"]");
	free(s);
	json_decref(r);
	json_decref(fetch);
	json_decref(cmd);
}

TEST(a_task_is_given_the_uris_its_templates_and_inputs_name)
{
	json_t *task = test_json(
	        "{\"command\": [\"prep\", \"--src\", \"{{ inputs.dataset }}\", \"{{ inputs.n }}\","
	        " \"{{ params.shard }}\"],"
	        " \"env\": {\"OUT\": \"{{ inputs.dest }}\", \"TXT\": \"{{ inputs.note }}\"},"
	        " \"inputs\": {\"model\": \"hf://org/m\", \"part\": \"s3://b/{{ params.p }}\","
	        "  \"again\": \"{{ inputs.dataset }}\", \"text\": \"not a uri\"}}");
	json_t *wf = test_json("{\"dataset\": \"s3://corpus/pages\", \"n\": 3,"
	                       " \"dest\": \"gs://out/x\", \"note\": \"s3:// no\"}");
	json_t *params = test_json("{\"shard\": \"file:///data/7\", \"p\": 4}");
	json_t *u = lineage_input_uris(task, wf, params);
	char *s = jv_dump(u);
	CHECK_STR(s, "[\"s3://corpus/pages\",\"file:///data/7\",\"gs://out/x\",\"hf://org/m\","
	             "\"s3://b/4\"]");
	free(s);
	json_decref(u);
	json_decref(params);
	json_decref(wf);
	json_decref(task);
	CHECK(lineage_is_uri("s3://a"));
	CHECK(!lineage_is_uri("s3://"));
	CHECK(!lineage_is_uri("3s://a"));
	CHECK(!lineage_is_uri("sha256/abc"));
	CHECK(!lineage_is_uri("s3://a b"));
}

TEST(directions_have_names)
{
	enum lineage_dir d;
	CHECK_INT(lineage_dir_parse("downstream", &d), 0);
	CHECK_INT(d, LINEAGE_DOWNSTREAM);
	CHECK_STR(lineage_dir_name(LINEAGE_BOTH), "both");
	CHECK_INT(lineage_dir_parse("sideways", &d), ERR_INVALID);
	CHECK_INT(lineage_dir_parse(NULL, &d), ERR_INVALID);
}

TEST_MAIN()
