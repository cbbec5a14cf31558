/* The pure parts of running tasks (flow/run.h): sweeps expanded, templates
 * rendered, cache keys made of parts that say what changed. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../test_json.h"
#include "base/jv.h"
#include "flow/run.h"

TEST(a_grid_is_every_combination_first_parameter_slowest)
{
	json_t *t =
	        test_json("{\"map\": {\"grid\": {\"lr\": [1, 2], \"bs\": [\"a\", \"b\", \"c\"]}}}");
	json_t *sets = flow_expand(t);
	char *s = jv_dump(sets);
	CHECK_STR(s, "[{\"lr\":1,\"bs\":\"a\"},{\"lr\":1,\"bs\":\"b\"},{\"lr\":1,\"bs\":\"c\"},"
	             "{\"lr\":2,\"bs\":\"a\"},{\"lr\":2,\"bs\":\"b\"},{\"lr\":2,\"bs\":\"c\"}]");
	free(s);
	json_decref(sets);
	json_decref(t);
	t = test_json("{\"map\": {\"list\": [{\"p\": 1}, {\"p\": 5}]}}");
	sets = flow_expand(t);
	CHECK_INT(json_array_size(sets), 2);
	json_decref(sets);
	json_decref(t);
	t = test_json("{\"command\": [\"x\"]}");
	sets = flow_expand(t);
	s = jv_dump(sets);
	CHECK_STR(s, "[{}]");
	free(s);
	json_decref(sets);
	json_decref(t);
}

TEST(templates_render_values_as_text)
{
	json_t *ctx =
	        test_json("{\"inputs\": {\"lr\": 0.0003, \"n\": 7, \"on\": true, \"s\": \"x y\"},"
	                  " \"params\": {\"bs\": 512},"
	                  " \"tasks\": {\"train\": {\"outputs\": {\"models\": [\"a\", \"b\"]}}}}");
	char err[128] = "";
	char *r =
	        flow_render("--lr {{inputs.lr}} -n {{ inputs.n }} {{ inputs.on }} '{{ inputs.s }}'"
	                    " --bs {{ params.bs }} {{ tasks.train.outputs.models }}",
	                    ctx, err, sizeof(err));
	CHECK(r != NULL);
	CHECK_STR(r, "--lr 0.0003 -n 7 true 'x y' --bs 512 a b");
	free(r);
	r = flow_render("plain", ctx, err, sizeof(err));
	CHECK_STR(r, "plain");
	free(r);
	CHECK(flow_render("{{ tasks.eval.outputs.report }}", ctx, err, sizeof(err)) == NULL);
	CHECK_STR(err, "{{ tasks.eval.outputs.report }}: no value yet");
	CHECK(flow_render("{{ inputs.lr", ctx, err, sizeof(err)) == NULL);
	json_decref(ctx);
}

TEST(cache_key_parts_and_why_a_miss)
{
	json_t *t = test_json(
	        "{\"name\": \"a\", \"command\": [\"python3\", \"t.py\", \"--lr\", \"0.1\"],"
	        " \"resources\": {\"gpus\": 8}, \"inputs\": {\"lr\": 0.1},"
	        " \"cache\": {\"version\": \"1\"}}");
	json_t *p1 = flow_cache_parts(t, NULL, "bundle-1");
	CHECK_INT(strlen(json_string_value(json_object_get(p1, "key"))), 64);
	/* what does not change a result does not change the key */
	json_t *t2 = json_deep_copy(t);
	json_object_set_new(t2, "resources", json_pack("{s:i}", "gpus", 1));
	json_object_set_new(t2, "priority", json_integer(9));
	json_t *p2 = flow_cache_parts(t2, NULL, "bundle-1");
	CHECK(json_equal(json_object_get(p1, "key"), json_object_get(p2, "key")));
	/* new code, and an input object's content: a miss, saying why */
	json_t *h = json_pack("{s:s}", "s3://d/x", "etag-2");
	json_t *p3 = flow_cache_parts(t, h, "bundle-2");
	CHECK(!json_equal(json_object_get(p1, "key"), json_object_get(p3, "key")));
	char why[256];
	flow_cache_why(p1, p3, why, sizeof(why));
	CHECK_STR(why, "an input changed; the code bundle changed");
	flow_cache_why(p1, p2, why, sizeof(why));
	CHECK_STR(why, "nothing changed");
	json_object_set_new(json_object_get(t2, "cache"), "version", json_string("2"));
	json_t *p4 = flow_cache_parts(t2, NULL, "bundle-1");
	flow_cache_why(p1, p4, why, sizeof(why));
	CHECK_STR(why, "the cache version changed");
	/* key order in the definition does not matter */
	json_t *t3 = test_json("{\"cache\": {\"version\": \"1\"}, \"inputs\": {\"lr\": 0.1},"
	                       " \"command\": [\"python3\", \"t.py\", \"--lr\", \"0.1\"]}");
	json_t *p5 = flow_cache_parts(t3, NULL, "bundle-1");
	CHECK(json_equal(json_object_get(p1, "key"), json_object_get(p5, "key")));
	json_decref(p1);
	json_decref(p2);
	json_decref(p3);
	json_decref(p4);
	json_decref(p5);
	json_decref(h);
	json_decref(t);
	json_decref(t2);
	json_decref(t3);
}

TEST_MAIN()
