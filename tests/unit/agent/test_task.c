/* agent/task.h: the task document (every field, unknown keys ignored, a
 * bad one named), where fetched inputs go, rendering of the command and
 * render_env (only fetched refs; lists joined; other templates and an
 * unclosed one as written), and the argv the agent runs. The process
 * itself is tested end to end in tests/integration/test_task.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "agent/task.h"
#include "base/err.h"
#include "base/jv.h"
#include "desired_fixture.h"

#define REST_A "00000000000000000000000000000000000000000000000000000000000001"
#define HEX_A  "aa" REST_A
#define HEX_B  "bb00000000000000000000000000000000000000000000000000000000000002"
#define REST_C "00000000000000000000000000000000000000000000000000000000000003"

static const char full_doc[] =
        "{\"exec\": 12, \"run\": 345, \"task\": \"train\", \"index\": 3, \"rank_outputs\": 0,"
        " \"bundle\": \"sha256/" HEX_A "\","
        " \"fetch\": [{\"ref\": \"tasks.prep.outputs.shards\", \"kind\": \"dir\","
        "              \"keys\": [\"sha256/" HEX_B "\"], \"list\": false},"
        "            {\"ref\": \"tasks.sweep.outputs.score\", \"kind\": \"file\","
        "              \"keys\": [\"sha256/" HEX_B "\", \"sha256/cc/" REST_C
        "\"], \"list\": true}],"
        " \"render_env\": [\"DATA\"],"
        " \"outputs\": {\"model\": \"dir\", \"score\": \"value\", \"report\": \"file\"},"
        " \"checkpoint\": \"ckpt/12/train/3\", \"someday\": {\"new\": 1}}";

/* A desired entry of a task whose document is doc (JSON text). */
static json_t *entry_of(const char *doc)
{
	json_t *d = json_pack("{s:b,s:[s],s:{s:s}}", "task", 1, "command", "true", "env",
	                      "ANVIL_TASK", doc);
	return d;
}

TEST(a_task_that_needs_only_its_unpacked_bundle_starts_without_the_wrapper)
{
	char dir[] = "/tmp/anvil-test-direct-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	const char *hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char tree[256], cmd[512];
	snprintf(tree, sizeof(tree), "%s/bundles/%s", dir, hex);
	char only[400], more[500];
	snprintf(only, sizeof(only), "{\"exec\": 1, \"run\": 2, \"bundle\": \"sha256/%s\"}", hex);
	snprintf(more, sizeof(more),
	         "{\"exec\": 1, \"run\": 2, \"bundle\": \"sha256/%s\","
	         " \"outputs\": {\"m\": \"dir\"}}",
	         hex);
	json_t *a = entry_of(only), *b = entry_of(more);
	CHECK(task_direct_cwd(desired_fx(a), dir) ==
	      NULL); /* not unpacked here yet: the wrapper does it */
	snprintf(cmd, sizeof(cmd), "mkdir -p %s", tree);
	CHECK_INT(system(cmd), 0);
	char *got = task_direct_cwd(desired_fx(a), dir);
	CHECK(got != NULL);
	CHECK_STR(got, tree);
	free(got);
	CHECK(task_direct_cwd(desired_fx(b), dir) == NULL); /* outputs to publish: the wrapper */
	json_object_del(a, "task");
	CHECK(task_direct_cwd(desired_fx(a), dir) == NULL); /* not a task's entry */
	json_decref(a);
	json_decref(b);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
}

TEST(a_full_document_is_read_and_unknown_keys_are_ignored)
{
	struct task_doc d;
	char err[256] = "";
	CHECK_INT(task_doc_parse(full_doc, &d, err, sizeof(err)), 0);
	CHECK_INT(d.exec, 12);
	CHECK_INT(d.run, 345);
	CHECK_INT(d.index, 3);
	CHECK_STR(d.task, "train");
	CHECK_STR(d.bundle, "sha256/" HEX_A);
	CHECK_INT(d.nfetch, 2);
	CHECK_STR(d.fetch[0].task, "prep");
	CHECK_STR(d.fetch[0].output, "shards");
	CHECK_INT(d.fetch[0].kind, TASK_DIR);
	CHECK_INT(d.fetch[0].list, 0);
	CHECK_INT(d.fetch[1].nkeys, 2);
	CHECK_STR(d.fetch[1].keys[1], "sha256/cc" REST_C); /* either form in, one out */
	CHECK_INT(d.fetch[1].list, 1);
	CHECK_INT(d.nrender, 1);
	CHECK_STR(d.render_env[0], "DATA");
	CHECK_INT(d.noutputs, 3);
	CHECK_STR(d.outputs[0].name, "model");
	CHECK_INT(d.outputs[0].kind, TASK_DIR);
	CHECK_INT(d.outputs[1].kind, TASK_VALUE);
	CHECK_INT(d.outputs[2].kind, TASK_FILE);
	CHECK_STR(d.checkpoint, "ckpt/12/train/3");
	task_doc_cleanup(&d);
}

TEST(optional_keys_may_be_absent)
{
	struct task_doc d;
	char err[256] = "";
	CHECK_INT(task_doc_parse("{}", &d, err, sizeof(err)), 0);
	CHECK(d.bundle == NULL && d.checkpoint == NULL && d.nfetch == 0 && d.noutputs == 0);
	CHECK_INT(d.rank_outputs, 0);
	task_doc_cleanup(&d);
}

static void refused(const char *doc, const char *want)
{
	struct task_doc d;
	char err[256] = "";
	if (task_doc_parse(doc, &d, err, sizeof(err)) != ERR_INVALID)
		FAIL_AT("accepted %s", doc);
	if (!strstr(err, want))
		FAIL_AT("\"%s\" does not say \"%s\" (document %s)", err, want, doc);
	task_doc_cleanup(&d);
}

TEST(a_bad_field_is_named_with_its_value)
{
	refused("[1]", "ANVIL_TASK: not a JSON object");
	refused("{\"run\": \"x\"", "ANVIL_TASK: not a JSON object");
	refused("{\"run\": -1}", "field 'run'");
	refused("{\"bundle\": \"sha256/xyz\"}",
	        "field 'bundle': 'sha256/xyz' is not a content key");
	refused("{\"fetch\": [{\"ref\": \"inputs.x\", \"kind\": \"file\", \"keys\": []}]}",
	        "fetch[0].ref: 'inputs.x' is not tasks.TASK.outputs.NAME");
	refused("{\"fetch\": [{\"ref\": \"tasks.a.outputs.b\", \"kind\": \"value\", "
	        "\"keys\": [\"sha256/" HEX_A "\"]}]}",
	        "fetch[0].kind");
	refused("{\"fetch\": [{\"ref\": \"tasks.a.outputs.b\", \"kind\": \"file\", "
	        "\"keys\": [\"sha256/" HEX_A "\", \"sha256/" HEX_B "\"]}]}",
	        "fetch[0].keys: must be an array of exactly one");
	refused("{\"fetch\": [{\"ref\": \"tasks.a.outputs.b\", \"kind\": \"file\", \"list\": true, "
	        "\"keys\": [\"ckpt/1\"]}]}",
	        "fetch[0].keys[0]: 'ckpt/1' is not a content key");
	refused("{\"fetch\": [{\"ref\": \"tasks.a.outputs.b\", \"kind\": \"file\", \"keys\": "
	        "[\"sha256/" HEX_A "\"]}, {\"ref\": \"tasks.a.outputs.b\", \"kind\": \"dir\", "
	        "\"keys\": [\"sha256/" HEX_A "\"]}]}",
	        "fetch[1].ref: 'tasks.a.outputs.b' is fetched twice");
	refused("{\"outputs\": {\"../x\": \"file\"}}", "outputs: '../x' is not an output's name");
	refused("{\"outputs\": {\"m\": \"blob\"}}", "outputs.m: must be");
	refused("{\"render_env\": [\"A=B\"]}", "render_env[0]");
	refused("{\"checkpoint\": \"sha256/" HEX_A "\"}", "field 'checkpoint'");
	refused("{\"trace\": 1}", "field 'trace': must be true or false");
	refused("{\"code_dir\": \"here\"}", "field 'code_dir': 'here' is not an absolute path");
}

TEST(a_task_whose_reads_are_recorded_runs_under_the_wrapper)
{
	struct task_doc d;
	char err[256] = "";
	CHECK_INT(task_doc_parse("{\"trace\": true, \"code_dir\": \"/src\"}", &d, err, sizeof(err)),
	          0);
	CHECK_INT(d.trace, 1);
	CHECK_STR(d.code_dir, "/src");
	task_doc_cleanup(&d);
	char dir[] = "/tmp/anvil-test-trace-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	const char *hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char cmd[512], doc[400];
	snprintf(cmd, sizeof(cmd), "mkdir -p %s/bundles/%s", dir, hex);
	CHECK_INT(system(cmd), 0);
	snprintf(doc, sizeof(doc), "{\"run\": 2, \"bundle\": \"sha256/%s\", \"trace\": true}", hex);
	json_t *e = entry_of(doc);
	CHECK(task_direct_cwd(desired_fx(e), dir) == NULL); /* unpacked, but the wrapper records */
	json_decref(e);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
}

TEST(inputs_go_under_the_attempt_by_task_and_output)
{
	struct task_doc d;
	char err[256];
	CHECK_INT(task_doc_parse(full_doc, &d, err, sizeof(err)), 0);
	task_fetch_paths(&d, "/w/tasks/9/in");
	CHECK_STR(d.fetch[0].paths[0], "/w/tasks/9/in/prep/shards");
	CHECK_STR(d.fetch[0].joined, "/w/tasks/9/in/prep/shards");
	CHECK_STR(d.fetch[1].paths[1], "/w/tasks/9/in/sweep/score/1");
	CHECK_STR(d.fetch[1].joined, "/w/tasks/9/in/sweep/score/0 /w/tasks/9/in/sweep/score/1");
	task_doc_cleanup(&d);
}

TEST(only_fetched_refs_are_rendered)
{
	struct task_doc d;
	char err[256];
	CHECK_INT(task_doc_parse(full_doc, &d, err, sizeof(err)), 0);
	task_fetch_paths(&d, "/in");
	struct {
		const char *in, *out;
	} cases[] = {
	        {"--data={{ tasks.prep.outputs.shards }}", "--data=/in/prep/shards"},
	        {"{{tasks.prep.outputs.shards}}/x", "/in/prep/shards/x"},
	        {"{{ tasks.sweep.outputs.score }}", "/in/sweep/score/0 /in/sweep/score/1"},
	        {"a {{ params.lr }} b {{ tasks.prep.outputs.shards }} c",
	         "a {{ params.lr }} b /in/prep/shards c"},
	        {"{{ tasks.other.outputs.x }}", "{{ tasks.other.outputs.x }}"},
	        {"no templates", "no templates"},
	        {"", ""},
	        {"{{ tasks.prep.outputs.shards }} {{ open", "/in/prep/shards {{ open"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = task_render(cases[i].in, d.fetch, d.nfetch);
		CHECK_STR(got, cases[i].out);
		free(got);
	}
	task_doc_cleanup(&d);
}

TEST(a_task_rank_runs_under_the_wrapper)
{
	json_t *d = json_pack("{s:I,s:i,s:[s,s],s:b,s:I}", "attempt_id", (json_int_t)7, "rank", 0,
	                      "command", "python3", "{{ tasks.a.outputs.b }}", "task", 1,
	                      "grace_ms", (json_int_t)30000);
	char **v = task_argv(desired_fx(d), "/usr/bin/anvil", "/var/lib/agent");
	const char *want[] = {
	        "/usr/bin/anvil", "_task", "--work-dir", "/var/lib/agent",          "--grace-ms",
	        "30000",          "--",    "python3",    "{{ tasks.a.outputs.b }}", NULL};
	for (size_t i = 0; want[i]; i++)
		CHECK_STR(v[i], want[i]);
	CHECK(v[9] == NULL);
	task_argv_free(v);
	json_object_set_new(d, "task", json_false());
	CHECK(task_argv(desired_fx(d), "/usr/bin/anvil", "/w") == NULL);
	json_decref(d);
}

TEST_MAIN()
