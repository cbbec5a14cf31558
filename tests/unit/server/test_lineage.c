/* GET /v1/lineage's answers without HTTP (api_lineage_query): runs whose
 * wrappers report objects are linked through them, a value or the order
 * through needs, a cached run to its origin in another execution; each
 * attempt records its resolved command, its environment without secrets,
 * its node and GPUs and its exit; and every bad query names its field. */
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "server/flows.h"
#include "server/server.h"
#include "state_fixture.h"

#define HEX  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define KEY  "sha256/" HEX
#define HEX2 "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

static const char *const wf =
        "{\"workflow\": {\"name\": \"w\", \"inputs\": {\"src\": \"s3://corpus/pages\","
        " \"db_password\": \"pw\"}, \"tasks\": ["
        " {\"name\": \"prep\", \"command\": [\"prep\", \"{{ inputs.src }}\"],"
        "  \"env\": {\"HF_TOKEN\": \"hf_x\", \"LR\": \"0.1\"},"
        "  \"outputs\": {\"data\": \"dir\"}, \"cache\": {\"enabled\": true}},"
        " {\"name\": \"train\", \"command\": [\"train\", \"--data\","
        "  \"{{ tasks.prep.outputs.data }}\"], \"needs\": [\"prep\"],"
        "  \"outputs\": {\"m\": \"value\"}},"
        " {\"name\": \"report\", \"command\": [\"r\", \"{{ tasks.train.outputs.m }}\"],"
        "  \"needs\": [\"train\"]}]}}";

static struct flow_exec *submit(struct sfx *f)
{
	json_t *b = sfx_json(wf);
	struct flow_exec *x = NULL;
	char err[1024] = "";
	if (flows_submit(&f->st, b, &x, err, sizeof(err)) != 0)
		FAIL_AT("refused: %s", err);
	json_decref(b);
	sfx_flush(f);
	return x;
}

static void finish(struct sfx *f, struct flow_run *r, const char *outputs)
{
	struct job *j = state_job(&f->st, r->job_id);
	sfx_start_all(f);
	struct attempt *a = sfx_attempt(j);
	if (outputs) {
		json_t *o = sfx_json(outputs);
		char err[256] = "";
		if (flows_outputs(&f->st, r->id, a->id, o, NULL, err, sizeof(err)) != 0)
			FAIL_AT("outputs refused: %s", err);
		json_decref(o);
	}
	int node = (int)a->ranks[0].node_id - 1;
	sfx_exit(f, node, a->id, 0, 0);
	sfx_report(f, node);
}

/* Executions 1 (every run done) and 2 (prep cached from 1). */
static struct sfx *two_executions(void)
{
	struct sfx *f = sfx_open(1, 2);
	struct flow_exec *x = submit(f);
	finish(f, x->runs[0],
	       "{\"data\": {\"kind\": \"dir\", \"key\": \"" KEY "\", \"size\": 4096,"
	       " \"sha256\": \"" HEX "\"}}");
	finish(f, x->runs[1], "{\"m\": {\"kind\": \"value\", \"value\": \"0.93\"}}");
	finish(f, x->runs[2], NULL);
	CHECK_INT(x->state, FLOW_SUCCEEDED);
	struct flow_exec *y = submit(f);
	CHECK_INT(y->runs[0]->state, FLOW_CACHED);
	return f;
}

static json_t *query(struct sfx *f, const char *q)
{
	json_t *qo = sfx_json(q), *out = NULL;
	char err[512] = "";
	if (api_lineage_query(&f->st, qo, &out, err, sizeof(err)) != 0)
		FAIL_AT("%s refused: %s", q, err);
	json_decref(qo);
	return out;
}

static void refused(struct sfx *f, const char *q, int code, const char *msg)
{
	json_t *qo = sfx_json(q), *out = NULL;
	char err[512] = "";
	CHECK_INT(api_lineage_query(&f->st, qo, &out, err, sizeof(err)), code);
	CHECK_STR(err, msg);
	CHECK(out == NULL);
	json_decref(qo);
}

static const json_t *node(const json_t *g, const char *id)
{
	size_t i;
	const json_t *n;
	json_array_foreach (json_object_get(g, "nodes"), i, n)
		if (strcmp(jv_str(n, "id", ""), id) == 0)
			return n;
	FAIL_AT("no node %s", id);
}

static int has_edge(const json_t *g, const char *from, const char *to, const char *kind)
{
	size_t i;
	const json_t *e;
	json_array_foreach (json_object_get(g, "edges"), i, e)
		if (!strcmp(jv_str(e, "from", ""), from) && !strcmp(jv_str(e, "to", ""), to) &&
		    !strcmp(jv_str(e, "kind", ""), kind))
			return 1;
	return 0;
}

TEST(upstream_of_a_run_goes_through_objects_values_and_inputs_with_each_attempt)
{
	struct sfx *f = two_executions();
	json_t *g = query(f, "{\"exec\": \"1\", \"task\": \"report\"}");
	CHECK_STR(jv_str(g, "direction", ""), "upstream");
	CHECK_STR(json_string_value(json_array_get(json_object_get(g, "starts"), 0)), "run:3");
	CHECK_INT(json_array_size(json_object_get(g, "nodes")), 5);
	CHECK_INT(json_array_size(json_object_get(g, "edges")), 4);
	CHECK(has_edge(g, "run:2", "run:3", "needs"));
	CHECK(has_edge(g, "object:" KEY, "run:2", "consumed"));
	CHECK(has_edge(g, "run:1", "object:" KEY, "produced"));
	CHECK(has_edge(g, "input:s3://corpus/pages", "run:1", "input"));
	const json_t *obj = node(g, "object:" KEY);
	CHECK_STR(jv_str(obj, "kind", ""), "dir");
	CHECK_INT(jv_int(obj, "size", 0), 4096);
	/* train's attempt: its command with the object's key, where it ran */
	const json_t *train = node(g, "run:2");
	CHECK_STR(jv_str(train, "label", ""), "train");
	CHECK_STR(jv_str(train, "state", ""), "succeeded");
	const json_t *a = json_array_get(json_object_get(train, "attempts"), 0);
	char *cmd = jv_dump(json_object_get(a, "command"));
	CHECK_STR(cmd, "[\"train\",\"--data\",\"" KEY "\"]");
	free(cmd);
	CHECK_STR(jv_str(a, "state", ""), "succeeded");
	CHECK_INT(jv_int(a, "exit_code", -1), 0);
	CHECK(jv_int(a, "start_ms", 0) > 0 && jv_int(a, "end_ms", 0) >= jv_int(a, "start_ms", 0));
	CHECK_STR(json_string_value(json_array_get(json_object_get(a, "nodes"), 0)), "node-1");
	const json_t *rank = json_array_get(json_object_get(a, "ranks"), 0);
	const json_t *gpu = json_array_get(json_object_get(rank, "gpus"), 0);
	CHECK_STR(jv_str(gpu, "uuid", ""), "GPU-0");
	CHECK_STR(jv_str(json_array_get(json_object_get(train, "objects"), 0), "key", ""), KEY);
	CHECK_STR(jv_str(json_object_get(json_object_get(train, "outputs"), "m"), "value", ""),
	          "0.93");
	/* prep's: its secret gone from the environment and the inputs */
	const json_t *prep = node(g, "run:1");
	a = json_array_get(json_object_get(prep, "attempts"), 0);
	CHECK_STR(jv_str(json_object_get(a, "env"), "HF_TOKEN", ""), "<redacted>");
	CHECK_STR(jv_str(json_object_get(a, "env"), "LR", ""), "0.1");
	CHECK_STR(jv_str(json_object_get(a, "env"), "ANVIL_TASK_NAME", ""), "prep");
	const json_t *in = json_object_get(json_object_get(prep, "inputs"), "workflow");
	CHECK_STR(jv_str(in, "db_password", ""), "<redacted>");
	CHECK_STR(jv_str(in, "src", ""), "s3://corpus/pages");
	json_decref(g);
	sfx_close(f);
}

TEST(downstream_crosses_into_the_execution_that_reused_a_result)
{
	struct sfx *f = two_executions();
	json_t *g =
	        query(f, "{\"exec\": \"1\", \"task\": \"prep\", \"direction\": \"downstream\"}");
	CHECK(has_edge(g, "run:1", "run:4", "cached"));
	CHECK(has_edge(g, "run:1", "object:" KEY, "produced"));
	CHECK(has_edge(g, "object:" KEY, "run:2", "consumed"));
	const json_t *cached = node(g, "run:4");
	CHECK_STR(jv_str(cached, "state", ""), "cached");
	CHECK_INT(jv_int(cached, "exec", 0), 2);
	CHECK_INT(jv_int(cached, "cached_from", 0), 1);
	CHECK_INT(json_array_size(json_object_get(cached, "attempts")), 0);
	json_decref(g);
	/* from the object, one edge away: its writer only */
	g = query(f, "{\"object\": \"" KEY "\", \"depth\": \"1\"}");
	CHECK_INT(json_array_size(json_object_get(g, "nodes")), 2);
	CHECK(has_edge(g, "run:1", "object:" KEY, "produced"));
	CHECK_INT(jv_int(g, "depth", -1), 1);
	json_decref(g);
	g = query(f, "{\"uri\": \"s3://corpus/pages\", \"direction\": \"downstream\"}");
	CHECK(has_edge(g, "input:s3://corpus/pages", "run:1", "input"));
	CHECK(has_edge(g, "input:s3://corpus/pages", "run:4", "input"));
	json_decref(g);
	sfx_close(f);
}

TEST(a_whole_execution_is_its_runs_and_their_neighbours)
{
	struct sfx *f = two_executions();
	json_t *g = query(f, "{\"exec\": \"2\"}");
	CHECK_STR(jv_str(g, "direction", ""), "both");
	CHECK_INT(jv_int(g, "depth", 0), 1);
	CHECK_STR(jv_str(json_object_get(g, "execution"), "name", ""), "w");
	CHECK_INT(jv_int(json_object_get(g, "execution"), "id", 0), 2);
	node(g, "run:4");
	node(g, "run:5");
	node(g, "run:6");
	node(g, "run:1"); /* the cached run's origin */
	CHECK(has_edge(g, "run:1", "run:4", "cached"));
	json_decref(g);
	sfx_close(f);
}

TEST(a_bad_query_names_its_field_value_and_reason)
{
	struct sfx *f = two_executions();
	refused(f, "{}", ERR_INVALID,
	        "query: give one of 'exec' (with 'task' and 'index' for one run), 'object' or "
	        "'uri'");
	refused(f, "{\"exec\": \"1\", \"object\": \"" KEY "\"}", ERR_INVALID,
	        "query: give one of 'exec' (with 'task' and 'index' for one run), 'object' or "
	        "'uri'");
	refused(f, "{\"task\": \"prep\", \"uri\": \"s3://x\"}", ERR_INVALID,
	        "query 'task': goes with 'exec'");
	refused(f, "{\"exec\": \"1\", \"index\": \"0\"}", ERR_INVALID,
	        "query 'index': goes with 'task'");
	refused(f, "{\"exec\": \"x1\"}", ERR_INVALID, "query 'exec': 'x1' is not an execution id");
	refused(f, "{\"exec\": \"9\"}", ERR_NOTFOUND, "query 'exec': no workflow execution 9");
	refused(f, "{\"exec\": \"1\", \"task\": \"zz\"}", ERR_NOTFOUND,
	        "query 'task': workflow 1 (w) has no task 'zz'");
	refused(f, "{\"exec\": \"1\", \"task\": \"prep\", \"index\": \"1\"}", ERR_INVALID,
	        "query 'index': '1' is not an index of task 'prep', which has 1 run(s): 0 "
	        "to 0");
	refused(f, "{\"object\": \"sha256/xyz\"}", ERR_INVALID,
	        "query 'object': 'sha256/xyz' is not an object key (sha256/<64 hex digits>)");
	refused(f, "{\"object\": \"sha256/" HEX2 "\"}", ERR_NOTFOUND,
	        "query 'object': no workflow run wrote, read or was given sha256/" HEX2);
	refused(f, "{\"object\": \"sha256/ffff" HEX "\"}", ERR_INVALID,
	        "query 'object': 'sha256/ffff" HEX "' is not an object key (sha256/<64 hex "
	        "digits>)");
	refused(f, "{\"uri\": \"corpus\"}", ERR_INVALID,
	        "query 'uri': 'corpus' is not a URI "
	        "(scheme://...)");
	refused(f, "{\"uri\": \"s3://elsewhere\"}", ERR_NOTFOUND,
	        "query 'uri': no workflow run wrote, read or was given s3://elsewhere");
	refused(f, "{\"exec\": \"1\", \"direction\": \"sideways\"}", ERR_INVALID,
	        "query 'direction': 'sideways' is not upstream, downstream or both");
	refused(f, "{\"exec\": \"1\", \"depth\": \"-1\"}", ERR_INVALID,
	        "query 'depth': '-1' is not a number of edges, 0 to 1000000");
	sfx_close(f);
}

TEST_MAIN()
