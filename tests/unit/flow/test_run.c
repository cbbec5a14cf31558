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

/* The parts of a task's key with ctx's values and code by bundle B. */
static json_t *parts_of(const json_t *t, const json_t *ctx, const json_t *objects, const char *b)
{
	json_t *code = json_pack("{s:s}", "bundle", b);
	json_t *p = flow_cache_parts(t, ctx, objects, code);
	json_decref(code);
	return p;
}

static const char *key_of(const json_t *parts)
{
	return json_string_value(json_object_get(parts, "key"));
}

TEST(cache_key_parts_and_why_a_miss)
{
	json_t *t = test_json(
	        "{\"name\": \"a\", \"command\": [\"python3\", \"t.py\", \"--lr\", \"0.1\"],"
	        " \"resources\": {\"gpus\": 8}, \"inputs\": {\"lr\": 0.1},"
	        " \"cache\": {\"version\": \"1\"}}");
	json_t *p1 = parts_of(t, NULL, NULL, "bundle-1");
	CHECK_INT(strlen(key_of(p1)), 64);
	/* what does not change a result does not change the key */
	json_t *t2 = json_deep_copy(t);
	json_object_set_new(t2, "resources", json_pack("{s:i}", "gpus", 1));
	json_object_set_new(t2, "priority", json_integer(9));
	json_t *p2 = parts_of(t2, NULL, NULL, "bundle-1");
	CHECK_STR(key_of(p1), key_of(p2));
	/* new code, and an input object's content: a miss, saying why */
	json_t *h = json_pack("{s:[s]}", "tasks.prep.outputs.d", "sha256/2");
	json_t *p3 = parts_of(t, NULL, h, "bundle-2");
	CHECK(strcmp(key_of(p1), key_of(p3)) != 0);
	char why[256];
	flow_cache_why(p1, p3, NULL, NULL, why, sizeof(why));
	CHECK_STR(why, "the objects of tasks.prep.outputs.d changed; the code bundle changed");
	flow_cache_why(p1, p2, NULL, NULL, why, sizeof(why));
	CHECK_STR(why, "nothing changed");
	json_object_set_new(json_object_get(t2, "cache"), "version", json_string("2"));
	json_t *p4 = parts_of(t2, NULL, NULL, "bundle-1");
	flow_cache_why(p1, p4, NULL, NULL, why, sizeof(why));
	CHECK_STR(why, "the cache version changed");
	/* key order in the definition does not matter */
	json_t *t3 = test_json("{\"cache\": {\"version\": \"1\"}, \"inputs\": {\"lr\": 0.1},"
	                       " \"command\": [\"python3\", \"t.py\", \"--lr\", \"0.1\"]}");
	json_t *p5 = parts_of(t3, NULL, NULL, "bundle-1");
	CHECK_STR(key_of(p1), key_of(p5));
	/* a key of an earlier form says so rather than list every part */
	json_object_del(p5, "form");
	flow_cache_why(p5, p1, NULL, NULL, why, sizeof(why));
	CHECK_STR(why, "the earlier result was keyed by an older version of anvil");
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

TEST(a_changed_input_value_is_named_with_its_old_and_new_values)
{
	json_t *t = test_json("{\"command\": [\"/bin/sh\", \"-c\","
	                      " \"echo $(( {{ inputs.mult }} * 2 )) {{ params.p }}\"],"
	                      " \"env\": {\"TAG\": \"{{ tasks.gen.outputs.tag }}\"}}");
	json_t *c3 =
	        test_json("{\"inputs\": {\"mult\": 3, \"unused\": 1}, \"params\": {\"p\": \"x\"},"
	                  " \"tasks\": {\"gen\": {\"outputs\": {\"tag\": \"v1\"}}}}");
	json_t *c5 = test_json(
	        "{\"inputs\": {\"mult\": \"5\", \"unused\": 2}, \"params\": {\"p\": \"x\"},"
	        " \"tasks\": {\"gen\": {\"outputs\": {\"tag\": \"v2\"}}}}");
	json_t *a = parts_of(t, c3, NULL, "b"), *b = parts_of(t, c5, NULL, "b");
	CHECK(strcmp(key_of(a), key_of(b)) != 0);
	char why[300];
	flow_cache_why(a, b, NULL, NULL, why, sizeof(why));
	/* the command as written did not change; what it was rendered with did,
	 * and an input it does not use is not in its key */
	CHECK_STR(why, "input mult changed: 3 -> 5; output tag of task gen changed: v1 -> v2");
	json_t *c6 = json_deep_copy(c3);
	json_object_set_new(json_object_get(c6, "inputs"), "unused", json_integer(7));
	json_t *c = parts_of(t, c6, NULL, "b");
	CHECK_STR(key_of(a), key_of(c));
	/* a long value is kept as its hash, and shown as such */
	char big[400];
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	json_object_set_new(json_object_get(c6, "inputs"), "mult", json_string(big));
	json_t *d = parts_of(t, c6, NULL, "b");
	CHECK(json_is_object(json_object_get(json_object_get(d, "values"), "inputs.mult")));
	flow_cache_why(a, d, NULL, NULL, why, sizeof(why));
	CHECK_STR(why, "input mult changed: 3 -> (a long value)");
	/* the command written anew is said so */
	json_t *t2 = json_deep_copy(t);
	json_array_set_new(json_object_get(t2, "command"), 2,
	                   json_string("echo {{ inputs.mult }}"));
	json_t *e = parts_of(t2, c3, NULL, "b");
	flow_cache_why(a, e, NULL, NULL, why, sizeof(why));
	CHECK_STR(why, "the command changed");
	json_decref(a);
	json_decref(b);
	json_decref(c);
	json_decref(d);
	json_decref(e);
	json_decref(t);
	json_decref(t2);
	json_decref(c3);
	json_decref(c5);
	json_decref(c6);
}

TEST(the_code_is_judged_by_the_files_the_task_depended_on)
{
	json_t *t = test_json("{\"command\": [\"python3\", \"gen.py\"], \"cache\": {}}");
	json_t *code = json_pack("{s:b}", "reads", 1);
	json_t *a = flow_cache_parts(t, NULL, NULL, code),
	       *b = flow_cache_parts(t, NULL, NULL, code);
	CHECK_STR(json_string_value(json_object_get(a, "code_by")), "reads");
	json_t *was =
	        test_json("{\"gen.py\": \"f:1\", \"lib/util.py\": \"f:2\", \"json.py\": null}");
	json_t *now =
	        test_json("{\"gen.py\": \"f:9\", \"lib/util.py\": \"f:2\", \"json.py\": \"f:3\"}");
	char why[300];
	flow_cache_why(a, b, was, now, why, sizeof(why));
	CHECK_STR(why, "the code changed: gen.py, json.py (new)");
	flow_cache_why(a, b, was, was, why, sizeof(why));
	CHECK_STR(why, "nothing changed");
	/* another way of keying the code is said so */
	json_t *t2 = test_json("{\"command\": [\"python3\", \"gen.py\"],"
	                       " \"cache\": {\"code\": \"bundle\"}}");
	json_t *bundle = json_pack("{s:s}", "bundle", "sha256/1");
	json_t *c = flow_cache_parts(t2, NULL, NULL, bundle);
	flow_cache_why(a, c, NULL, NULL, why, sizeof(why));
	CHECK_STR(why, "cache.code changed: reads -> bundle");
	CHECK(strcmp(key_of(a), key_of(c)) != 0);
	json_decref(a);
	json_decref(b);
	json_decref(c);
	json_decref(code);
	json_decref(bundle);
	json_decref(was);
	json_decref(now);
	json_decref(t);
	json_decref(t2);
}

TEST(cache_is_on_for_a_mapping_and_its_code_is_keyed_as_it_says)
{
	json_t *t = test_json("{\"cache\": {\"code\": [\"gen.py\", \"lib/\"]}}");
	CHECK(flow_cache_on(t));
	CHECK_INT(flow_cache_code(t), FLOW_CODE_PATHS);
	json_decref(t);
	t = test_json("{\"cache\": {\"enabled\": false, \"code\": \"bundle\"}}");
	CHECK(!flow_cache_on(t));
	CHECK_INT(flow_cache_code(t), FLOW_CODE_BUNDLE);
	json_decref(t);
	t = test_json("{\"cache\": {\"enabled\": true}}");
	CHECK(flow_cache_on(t));
	CHECK_INT(flow_cache_code(t), FLOW_CODE_READS);
	json_decref(t);
	t = test_json("{\"command\": [\"x\"]}");
	CHECK(!flow_cache_on(t));
	json_decref(t);
}

TEST_MAIN()
