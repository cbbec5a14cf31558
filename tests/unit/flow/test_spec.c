/* The workflow spec (flow/spec.h, base/ydoc.h): YAML read with positions,
 * the YAML way compiled to the JSON form, and every error class found -
 * all of them, each at the line and column where it was written. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "base/ydoc.h"
#include "flow/spec.h"

static char out[16384];

static json_t *compile(const char *yaml)
{
	return flow_compile_yaml("wf.yaml", yaml, strlen(yaml), NULL, out, sizeof(out));
}

/* Compiling must fail and the errors must hold each of the NULL-ended needles. */
static void expect_errors(const char *yaml, const char *const *needles)
{
	json_t *wf = compile(yaml);
	if (wf) {
		char *s = json_dumps(wf, JSON_COMPACT);
		json_decref(wf);
		FAIL_AT("compiled, expected errors: %s", s);
	}
	for (; *needles; needles++)
		if (!strstr(out, *needles))
			FAIL_AT("errors lack \"%s\":\n%s", *needles, out);
}

TEST(ydoc_types_and_positions)
{
	const char *y = "a: 1\n"
	                "b: '1'\n"
	                "c: 3e-4\n"
	                "d: [x, true, ~, -7]\n"
	                "e:\n"
	                "  f: |\n"
	                "    text\n";
	struct ydoc d;
	char err[128];
	CHECK_INT(ydoc_parse(y, strlen(y), &d, err, sizeof(err)), 0);
	CHECK(json_is_integer(json_object_get(d.root, "a")));
	CHECK(json_is_string(json_object_get(d.root, "b")));
	CHECK(json_is_real(json_object_get(d.root, "c")));
	const json_t *arr = json_object_get(d.root, "d");
	CHECK(json_is_string(json_array_get(arr, 0)) && json_is_true(json_array_get(arr, 1)));
	CHECK(json_is_null(json_array_get(arr, 2)));
	CHECK_INT(json_integer_value(json_array_get(arr, 3)), -7);
	CHECK_STR(json_string_value(json_object_get(json_object_get(d.root, "e"), "f")), "text\n");
	const struct ydoc_pos *p = ydoc_where(&d, "d[1]");
	CHECK(p != NULL);
	CHECK_INT(p->line, 4);
	CHECK_INT(p->col, 8);
	p = ydoc_where(&d, "e.f.nothing[3]"); /* falls back to the nearest written */
	CHECK(p != NULL && p->line == 6);
	ydoc_free(&d);
}

TEST(ydoc_refuses_aliases_duplicates_and_a_second_document)
{
	static const char *const bad[][2] = {
	        {"a: &x 1\nb: *x\n", "1:4: anchors (&x) are not supported"},
	        {"a: 1\na: 2\n", "2:1: 'a' is given twice"},
	        {"a: 1\n---\nb: 2\n", "2:1: only one document"},
	        {"a: [1, 2\n", "2:1:"},
	        {"? [a]\n: 1\n", "1:3: a key must be plain text"},
	        {"a: !!str 1\n", "tags (tag:yaml.org,2002:str) are not supported"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ydoc d;
		char err[256] = "";
		CHECK_INT(ydoc_parse(bad[i][0], strlen(bad[i][0]), &d, err, sizeof(err)),
		          ERR_INVALID);
		if (!strstr(err, bad[i][1]))
			FAIL_AT("case %zu: \"%s\" lacks \"%s\"", i, err, bad[i][1]);
		CHECK(d.root == NULL && d.npos == 0);
	}
}

TEST(compiles_the_yaml_way_to_the_json_form)
{
	json_t *wf = compile("inputs:\n"
	                     "  lr: 3e-4\n"
	                     "tasks:\n"
	                     "  prep:\n"
	                     "    command: python3 prep.py --out $ANVIL_OUTPUT_DIR\n"
	                     "    outputs: {data: dir}\n"
	                     "    resources: {gpus: 0, memory: 8Gi}\n"
	                     "    timeout: 2h\n"
	                     "    retries: 2\n"
	                     "    cache: false\n"
	                     "  train:\n"
	                     "    command: [python3, train.py, '{{ tasks.prep.outputs.data }}',\n"
	                     "              '--lr={{ params.lr }}']\n"
	                     "    map: {grid: {lr: [0.1, 0.01]}, concurrency: 2}\n"
	                     "    retries: {count: 1, backoff: 30s}\n");
	if (!wf)
		FAIL_AT("errors:\n%s", out);
	CHECK_STR(json_string_value(json_object_get(wf, "name")), "wf");
	const json_t *tasks = json_object_get(wf, "tasks");
	CHECK_INT(json_array_size(tasks), 2);
	const json_t *prep = json_array_get(tasks, 0), *train = json_array_get(tasks, 1);
	CHECK_STR(json_string_value(json_object_get(prep, "name")), "prep");
	const json_t *cmd = json_object_get(prep, "command");
	CHECK_STR(json_string_value(json_array_get(cmd, 0)), "/bin/sh");
	CHECK_STR(json_string_value(json_array_get(cmd, 1)), "-c");
	CHECK_INT(json_integer_value(
	                  json_object_get(json_object_get(prep, "resources"), "memory_bytes")),
	          8LL << 30);
	CHECK_INT(json_integer_value(json_object_get(prep, "timeout_ms")), 7200000);
	CHECK_INT(json_integer_value(json_object_get(json_object_get(prep, "retries"), "count")),
	          2);
	CHECK(json_is_false(json_object_get(json_object_get(prep, "cache"), "enabled")));
	/* the template made train need prep */
	CHECK_STR(json_string_value(json_array_get(json_object_get(train, "needs"), 0)), "prep");
	CHECK_INT(json_integer_value(
	                  json_object_get(json_object_get(train, "retries"), "backoff_ms")),
	          30000);
	/* the compiled form passes the API's check as it is */
	struct schema_errors e = {0};
	CHECK_INT(flow_check(wf, &e), 0);
	json_decref(wf);
}

TEST(overrides_replace_inputs_and_unknown_ones_are_refused)
{
	const char *y = "inputs: {lr: 0.1}\ntasks:\n  a: {command: 'echo {{ inputs.lr }}'}\n";
	json_t *o = json_pack("{s:s}", "lr", "0.5");
	json_t *wf = flow_compile_yaml("wf.yaml", y, strlen(y), o, out, sizeof(out));
	CHECK(wf != NULL);
	CHECK_STR(json_string_value(json_object_get(json_object_get(wf, "inputs"), "lr")), "0.5");
	json_decref(wf);
	json_decref(o);
	o = json_pack("{s:s}", "batch", "4");
	CHECK(flow_compile_yaml("wf.yaml", y, strlen(y), o, out, sizeof(out)) == NULL);
	CHECK(strstr(out, "-i batch: the workflow has no such input") != NULL);
	json_decref(o);
}

/* Every class of error at once, each at its line and column. */
TEST(every_error_is_found_with_its_position)
{
	static const char *const needles[] = {
	        "wf.yaml:2:1: bogus: unknown key 'bogus'",
	        "wf.yaml:5:14: tasks.a.command: should be a list, not an integer",
	        "wf.yaml:6:13: tasks.a.needs[0]: there is no task 'nope'",
	        "wf.yaml:7:23: tasks.a.resources.gpus: 99 is out of range: 0 to 64",
	        "wf.yaml:8:14: tasks.a.timeout: timeout is a duration",
	        "wf.yaml:10:14: tasks.b.env.X: {{ inputs.missing }}: the workflow has no input "
	        "'missing'",
	        "wf.yaml:11:15: tasks.b.command[0]: {{ tasks.a.outputs.zz }}: task 'a' has no "
	        "output 'zz'",
	        "wf.yaml:12:10: tasks.b.map: a map has either 'grid' or 'list'",
	        "wf.yaml:14:28: tasks.d.needs[0]: a cycle: c -> d -> c",
	        "tasks.e.command[2]: {{ params.p }}: only a task with a map has params",
	        "tasks.e.outputs.o: an output is \"file\", \"dir\" or \"value\"",
	        NULL,
	};
	expect_errors("name: wf\n"
	              "bogus: 1\n"
	              "tasks:\n"
	              "  a:\n"
	              "    command: 5\n"
	              "    needs: [nope]\n"
	              "    resources: {gpus: 99}\n"
	              "    timeout: soon\n"
	              "  b:\n"
	              "    env: {X: '{{ inputs.missing }}'}\n"
	              "    command: ['{{ tasks.a.outputs.zz }}']\n"
	              "    map: {}\n"
	              "  c: {command: [x], needs: [d]}\n"
	              "  d: {command: [x], needs: c}\n"
	              "  e: {command: 'x {{ params.p }}', outputs: {o: blob}}\n",
	              needles);
}

TEST(a_bad_shorthand_is_one_error)
{
	CHECK(compile("tasks:\n  a: {command: [x], timeout: soon, resources: {memory: lots}}\n") ==
	      NULL);
	CHECK(strstr(out, "timeout is a duration") != NULL);
	CHECK(strstr(out, "memory is bytes") != NULL);
	CHECK(strstr(out, "unknown key") == NULL);
}

TEST(structure_errors)
{
	static const char *const n1[] = {"wf.yaml:1:1: 'tasks' is missing", NULL};
	expect_errors("name: wf\n", n1);
	static const char *const n2[] = {"a workflow is a mapping", NULL};
	expect_errors("- 1\n- 2\n", n2);
	static const char *const n3[] = {"tasks.a.name: a task's name is its key", NULL};
	expect_errors("tasks:\n  a: {name: b, command: [x]}\n", n3);
	static const char *const n4[] = {"tasks[1].name: a task named 'a' is already defined",
	                                 NULL};
	expect_errors("tasks:\n  - {name: a, command: [x]}\n  - {name: a, command: [y]}\n", n4);
	static const char *const n5[] = {"tasks.a.needs[0]: a task cannot need itself", NULL};
	expect_errors("tasks:\n  a: {command: [x], needs: [a]}\n", n5);
	static const char *const n6[] = {"add 'a' to this task's needs", NULL};
	/* the compiled form must list what templates use; only the YAML adds it */
	json_t *wf = json_pack("{s:s,s:[{s:s,s:[s],s:{s:s}},{s:s,s:[s]}]}", "name", "w", "tasks",
	                       "name", "a", "command", "x", "outputs", "o", "file", "name", "b",
	                       "command", "{{ tasks.a.outputs.o }}");
	struct schema_errors e = {0};
	CHECK_INT(flow_check(wf, &e), 1);
	CHECK(strstr(e.v[0].msg, n6[0]) != NULL);
	CHECK_STR(e.v[0].path, "tasks[1].command[0]");
	json_decref(wf);
}

TEST(the_code_a_cached_task_uses_is_declared_as_paths_of_the_bundle)
{
	json_t *wf = compile("tasks:\n  a: {command: [x], cache: {code: [gen.py, lib/]}}\n"
	                     "  b: {command: [x], cache: {code: bundle, version: '2'}}\n");
	if (!wf)
		FAIL_AT("errors: %s", out);
	const json_t *tasks = json_object_get(wf, "tasks");
	char *s = json_dumps(json_object_get(json_array_get(tasks, 0), "cache"), JSON_COMPACT);
	CHECK_STR(s, "{\"code\":[\"gen.py\",\"lib/\"]}");
	free(s);
	json_decref(wf);
	static const char *const n[] = {
	        "wf.yaml:2:43: tasks.a.cache.code[1]: '/etc/passwd' is not a path of the bundle: "
	        "it is absolute: give it relative to the bundle's top",
	        "wf.yaml:2:56: tasks.a.cache.code[2]: '../x' is not a path of the bundle: it has "
	        "a '.' or '..' part",
	        "wf.yaml:3:35: tasks.b.cache.code: 'everything' is not a way to key the code: "
	        "'reads' (the files the task read, the default), 'bundle' (all of it) or a list "
	        "of paths",
	        "wf.yaml:4:35: tasks.c.cache.code: should list 1 to 100 paths of the bundle",
	        "wf.yaml:5:36: tasks.d.cache.code[0]: should be a path (text), not an integer",
	        NULL,
	};
	expect_errors("tasks:\n"
	              "  a: {command: [x], cache: {code: [ok.py, /etc/passwd, ../x]}}\n"
	              "  b: {command: [x], cache: {code: everything}}\n"
	              "  c: {command: [x], cache: {code: []}}\n"
	              "  d: {command: [x], cache: {code: [1]}}\n",
	              n);
}

TEST(a_sweep_too_large_and_a_template_left_open)
{
	static const char *const n[] = {
	        "tasks.a.map: expands to 20000 tasks; at most 10000",
	        "tasks.b.command[2]: a template '{{' is not closed",
	        NULL,
	};
	char y[4096];
	char vals[2048] = "";
	for (int i = 0; i < 200; i++)
		snprintf(vals + strlen(vals), sizeof(vals) - strlen(vals), "%s%d", i ? "," : "", i);
	snprintf(y, sizeof(y),
	         "tasks:\n  a: {command: [x], map: {grid: {p: [%s], q: [%s]}}}\n"
	         "  b: {command: 'echo {{ inputs.x'}\n",
	         vals,
	         "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,"
	         "28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,"
	         "52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,"
	         "76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100");
	expect_errors(y, n);
}

TEST_MAIN()
