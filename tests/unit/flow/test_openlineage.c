/* An execution's lineage as OpenLineage run events (flow/openlineage.h):
 * the keys the spec requires, START then COMPLETE/FAIL/ABORT per attempt,
 * the execution as every attempt's parent, objects and URIs as datasets
 * with their hash and size, stable run ids (UUID v5, as Python's uuid5
 * gives them). */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../test_json.h"
#include "base/jv.h"
#include "flow/openlineage.h"

#define KA "sha256/aaaa"

/* Execution 1 of "w": prep (attempt 3 failed, then attempt 4 succeeded
 * writing KA), train (attempt 5, running, read KA and a URI), report
 * (cached: no attempt), and a run of execution 2 that must not show. */
static const char *const graph_text =
        "{\"execution\": {\"id\": 1, \"name\": \"w\", \"state\": \"failed\","
        "  \"submit_ms\": 1764640000123, \"end_ms\": 1764640009000, \"bundle\": \"sha256/cc\"},"
        " \"nodes\": ["
        "  {\"id\": \"run:2\", \"type\": \"run\", \"run\": 2, \"exec\": 1, \"task\": \"train\","
        "   \"label\": \"train\", \"state\": \"running\","
        "   \"objects\": [{\"ref\": \"tasks.prep.outputs.d\", \"key\": \"" KA "\","
        "    \"kind\": \"dir\", \"size\": 10, \"sha256\": \"aaaa\"},"
        "    {\"ref\": \"tasks.prep.outputs.e\", \"key\": null, \"kind\": \"file\"}],"
        "   \"attempts\": [{\"attempt\": 5, \"job\": 6, \"state\": \"running\","
        "    \"start_ms\": 1764640005000, \"end_ms\": null, \"command\": [\"t\"]}]},"
        "  {\"id\": \"run:1\", \"type\": \"run\", \"run\": 1, \"exec\": 1, \"task\": \"prep\","
        "   \"label\": \"prep\", \"state\": \"succeeded\", \"objects\": [],"
        "   \"outputs\": {\"d\": {\"kind\": \"dir\", \"key\": \"" KA "\", \"size\": 10,"
        "    \"sha256\": \"aaaa\"}, \"v\": {\"kind\": \"value\", \"value\": \"1\"}},"
        "   \"attempts\": ["
        "    {\"attempt\": 3, \"job\": 3, \"state\": \"failed\", \"start_ms\": 1764640001000,"
        "     \"end_ms\": 1764640002000, \"exit_code\": 2, \"code\": \"sha256/cc\","
        "     \"command\": [\"p\"], \"nodes\": [\"node-1\"]},"
        "    {\"attempt\": 4, \"job\": 4, \"state\": \"succeeded\", \"start_ms\": 1764640003000,"
        "     \"end_ms\": 1764640004000, \"exit_code\": 0, \"command\": [\"p\"]}]},"
        "  {\"id\": \"run:3\", \"type\": \"run\", \"run\": 3, \"exec\": 1, \"task\": \"report\","
        "   \"state\": \"cached\", \"attempts\": []},"
        "  {\"id\": \"run:9\", \"type\": \"run\", \"run\": 9, \"exec\": 2, \"task\": \"x\","
        "   \"state\": \"succeeded\", \"attempts\": [{\"attempt\": 9, \"state\": \"succeeded\","
        "    \"start_ms\": 1, \"end_ms\": 2}]},"
        "  {\"id\": \"object:" KA "\", \"type\": \"object\", \"key\": \"" KA "\"},"
        "  {\"id\": \"input:s3://c/p\", \"type\": \"input\", \"uri\": \"s3://c/p\"}],"
        " \"edges\": [{\"from\": \"input:s3://c/p\", \"to\": \"run:2\", \"kind\": \"input\"},"
        "  {\"from\": \"run:1\", \"to\": \"object:" KA "\", \"kind\": \"produced\"}]}";

static json_t *events(const char *ns)
{
	json_t *g = test_json(graph_text);
	struct openlineage_opts o = {.ns = ns, .producer = "urn:anvil:test"};
	char err[128] = "";
	json_t *ev = openlineage_events(g, &o, err, sizeof(err));
	if (!ev)
		FAIL_AT("no events: %s", err);
	json_decref(g);
	return ev;
}

static const json_t *ev_at(const json_t *ev, size_t i)
{
	return json_array_get(ev, i);
}

TEST(every_event_has_what_the_spec_requires)
{
	json_t *ev = events("anvil");
	size_t i;
	const json_t *e;
	json_array_foreach (ev, i, e) {
		CHECK_STR(jv_str(e, "schemaURL", ""),
		          "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent");
		CHECK_STR(jv_str(e, "producer", ""), "urn:anvil:test");
		CHECK_INT(strlen(jv_str(e, "eventTime", "")), 24);
		CHECK_INT(strlen(jv_str(json_object_get(e, "run"), "runId", "")), 36);
		CHECK_STR(jv_str(json_object_get(e, "job"), "namespace", ""), "anvil");
		CHECK(json_is_array(json_object_get(e, "inputs")));
		CHECK(json_is_array(json_object_get(e, "outputs")));
	}
	json_decref(ev);
}

TEST(each_attempt_starts_then_ends_under_the_execution)
{
	json_t *ev = events("anvil");
	/* execution START; prep 3 START FAIL; prep 4 START COMPLETE; train 5
	 * START (running); execution FAIL. Nothing for the cached run or
	 * execution 2's. */
	CHECK_INT(json_array_size(ev), 7);
	static const char *const types[] = {"START",    "START", "FAIL", "START",
	                                    "COMPLETE", "START", "FAIL"};
	static const char *const jobs[] = {"w",      "w.prep",  "w.prep", "w.prep",
	                                   "w.prep", "w.train", "w"};
	for (size_t i = 0; i < 7; i++) {
		CHECK_STR(jv_str(ev_at(ev, i), "eventType", ""), types[i]);
		CHECK_STR(jv_str(json_object_get(ev_at(ev, i), "job"), "name", ""), jobs[i]);
	}
	CHECK_STR(jv_str(ev_at(ev, 0), "eventTime", ""), "2025-12-02T01:46:40.123Z");
	CHECK_STR(jv_str(ev_at(ev, 2), "eventTime", ""), "2025-12-02T01:46:42.000Z");
	/* stable ids: uuid5(NAMESPACE_URL, "anvil://anvil/executions/1[/attempts/A]") */
	const char *exec_id = "0a214e50-4a7f-5d82-92c1-98dac3583c7e";
	CHECK_STR(jv_str(json_object_get(ev_at(ev, 0), "run"), "runId", ""), exec_id);
	CHECK_STR(jv_str(json_object_get(ev_at(ev, 6), "run"), "runId", ""), exec_id);
	CHECK_STR(jv_str(json_object_get(ev_at(ev, 1), "run"), "runId", ""),
	          "5eba65e1-136b-5395-b7c4-44bc5b9d83b2");
	CHECK_STR(jv_str(json_object_get(ev_at(ev, 2), "run"), "runId", ""),
	          "5eba65e1-136b-5395-b7c4-44bc5b9d83b2");
	CHECK_STR(jv_str(json_object_get(ev_at(ev, 3), "run"), "runId", ""),
	          "89b54006-4e66-5cb4-a53b-7b9d812e28ae");
	const json_t *facets = json_object_get(json_object_get(ev_at(ev, 1), "run"), "facets");
	const json_t *parent = json_object_get(facets, "parent");
	CHECK_STR(jv_str(json_object_get(parent, "run"), "runId", ""), exec_id);
	CHECK_STR(jv_str(json_object_get(parent, "job"), "name", ""), "w");
	CHECK_STR(jv_str(parent, "_producer", ""), "urn:anvil:test");
	CHECK_CONTAINS(jv_str(parent, "_schemaURL", ""), "ParentRunFacet.json");
	const json_t *mine = json_object_get(facets, "anvil");
	CHECK_INT(jv_int(mine, "attempt", 0), 3);
	CHECK_INT(jv_int(mine, "exitCode", -1), 2);
	CHECK_STR(jv_str(mine, "code", ""), "sha256/cc");
	const json_t *jt = json_object_get(
	        json_object_get(json_object_get(ev_at(ev, 1), "job"), "facets"), "jobType");
	CHECK_STR(jv_str(jt, "processingType", ""), "BATCH");
	CHECK_STR(jv_str(jt, "jobType", ""), "TASK");
	json_decref(ev);
	/* another namespace, other ids */
	ev = events("lab");
	CHECK_STR(jv_str(json_object_get(ev_at(ev, 0), "run"), "runId", ""),
	          "9d29a178-ce8f-5662-8d8c-4d7e105290fd");
	CHECK_STR(jv_str(json_object_get(ev_at(ev, 0), "job"), "namespace", ""), "lab");
	json_decref(ev);
}

TEST(objects_and_uris_are_datasets_and_outputs_come_with_the_attempt_that_made_them)
{
	json_t *ev = events("anvil");
	/* the failed attempt made nothing; the successful one made KA */
	CHECK_INT(json_array_size(json_object_get(ev_at(ev, 2), "outputs")), 0);
	CHECK_INT(json_array_size(json_object_get(ev_at(ev, 3), "outputs")), 0);
	const json_t *outs = json_object_get(ev_at(ev, 4), "outputs");
	CHECK_INT(json_array_size(outs), 1);
	const json_t *d = json_array_get(outs, 0);
	CHECK_STR(jv_str(d, "namespace", ""), "anvil");
	CHECK_STR(jv_str(d, "name", ""), KA);
	CHECK_STR(jv_str(json_object_get(json_object_get(d, "facets"), "version"), "datasetVersion",
	                 ""),
	          "aaaa");
	const json_t *st = json_object_get(json_object_get(d, "outputFacets"), "outputStatistics");
	CHECK_INT(jv_int(st, "size", 0), 10);
	CHECK_CONTAINS(jv_str(st, "_schemaURL", ""), "OutputStatisticsOutputDatasetFacet.json");
	/* train read KA (the missing one is left out) and was given a URI */
	const json_t *ins = json_object_get(ev_at(ev, 5), "inputs");
	CHECK_INT(json_array_size(ins), 2);
	CHECK_STR(jv_str(json_array_get(ins, 0), "name", ""), KA);
	CHECK_STR(jv_str(json_array_get(ins, 1), "name", ""), "s3://c/p");
	json_decref(ev);
}

TEST(a_graph_that_is_not_an_executions_is_refused)
{
	json_t *g = test_json("{\"nodes\": []}");
	struct openlineage_opts o = {.ns = "anvil", .producer = "urn:x"};
	char err[128] = "";
	CHECK(openlineage_events(g, &o, err, sizeof(err)) == NULL);
	CHECK_STR(err, "execution: the lineage graph is not an execution's");
	json_decref(g);
	char t[32];
	openlineage_time(0, t);
	CHECK_STR(t, "1970-01-01T00:00:00.000Z");
}

TEST_MAIN()
