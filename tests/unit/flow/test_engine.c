/* A workflow execution's progress (flow/engine.h), decided without I/O:
 * what may start, retries and their backoff, what a failure skips, cancel
 * and recover, the execution's end, what a run renders and fetches, and
 * the stored form read back. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../test_json.h"
#include "base/jv.h"
#include "flow/engine.h"

/* a -> {b, c (a sweep of 3, 2 at once)} -> d */
static const char *const diamond =
        "{\"name\": \"w\", \"inputs\": {\"msg\": \"hi\"}, \"tasks\": ["
        " {\"name\": \"a\", \"command\": [\"echo\", \"{{ inputs.msg }}\"],"
        "  \"outputs\": {\"n\": \"value\", \"model\": \"dir\"}},"
        " {\"name\": \"b\", \"command\": [\"b\", \"{{ tasks.a.outputs.n }}\"], \"needs\": [\"a\"],"
        "  \"retries\": {\"count\": 1, \"backoff_ms\": 500}},"
        " {\"name\": \"c\", \"command\": [\"c\", \"{{ params.x }}\","
        "  \"{{ tasks.a.outputs.model }}\"], \"needs\": [\"a\"],"
        "  \"map\": {\"grid\": {\"x\": [1, 2, 3]}, \"concurrency\": 2}},"
        " {\"name\": \"d\", \"command\": [\"d\"], \"needs\": [\"b\", \"c\"]}]}";

static struct flow_exec *new_exec(const char *spec)
{
	json_t *s = test_json(spec);
	struct flow_exec *x = flow_exec_new(s);
	json_decref(s);
	CHECK(x != NULL);
	return x;
}

/* The labels flow_next gives now, space-separated. */
static void next_labels(struct flow_exec *x, int64_t now, char *out, size_t len)
{
	int ready[64];
	int n = flow_next(x, now, ready, 64);
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		char label[96];
		flow_run_label(x, x->runs[ready[i]], label, sizeof(label));
		strncat(out, i ? " " : "", len - strlen(out) - 1);
		strncat(out, label, len - strlen(out) - 1);
	}
}

static struct flow_run *run_of(struct flow_exec *x, const char *label)
{
	for (int i = 0; i < x->nruns; i++) {
		char l[96];
		flow_run_label(x, x->runs[i], l, sizeof(l));
		if (strcmp(l, label) == 0)
			return x->runs[i];
	}
	FAIL_AT("no run %s", label);
	return NULL;
}

static void succeed(struct flow_exec *x, const char *label, const char *outputs, int64_t now)
{
	struct flow_run *r = run_of(x, label);
	json_t *o = outputs ? test_json(outputs) : NULL;
	flow_ended(x, r, 1, 0, o, NULL, now);
	json_decref(o);
}

TEST(a_diamond_starts_each_task_when_its_needs_succeeded_within_the_sweeps_limit)
{
	struct flow_exec *x = new_exec(diamond);
	char got[256];
	CHECK_INT(x->nruns, 6);
	next_labels(x, 0, got, sizeof(got));
	CHECK_STR(got, "a");
	flow_started(x, run_of(x, "a"), 1, 0);
	next_labels(x, 0, got, sizeof(got));
	CHECK_STR(got, "");
	succeed(x, "a",
	        "{\"n\": {\"kind\": \"value\", \"value\": \"7\"},"
	        " \"model\": {\"kind\": \"dir\", \"key\": \"sha256/m\"}}",
	        10);
	next_labels(x, 10, got, sizeof(got));
	CHECK_STR(got, "b c[0] c[1]");
	flow_started(x, run_of(x, "b"), 2, 10);
	flow_started(x, run_of(x, "c[0]"), 3, 10);
	flow_started(x, run_of(x, "c[1]"), 4, 10);
	next_labels(x, 10, got, sizeof(got));
	CHECK_STR(got, ""); /* c's concurrency is 2 */
	succeed(x, "c[0]", NULL, 20);
	next_labels(x, 20, got, sizeof(got));
	CHECK_STR(got, "c[2]");
	flow_started(x, run_of(x, "c[2]"), 5, 20);
	succeed(x, "c[1]", NULL, 30);
	succeed(x, "c[2]", NULL, 30);
	succeed(x, "b", NULL, 30);
	CHECK_INT(flow_settle(x, 30), 0);
	next_labels(x, 30, got, sizeof(got));
	CHECK_STR(got, "d");
	flow_started(x, run_of(x, "d"), 6, 30);
	succeed(x, "d", NULL, 40);
	CHECK_INT(flow_settle(x, 40), 1);
	CHECK_INT(x->state, FLOW_SUCCEEDED);
	CHECK_INT(x->end_ms, 40);
	flow_exec_free(x);
}

TEST(a_run_renders_values_and_leaves_objects_to_the_node)
{
	struct flow_exec *x = new_exec(diamond);
	char err[256] = "";
	json_t *t = flow_rendered(x, run_of(x, "a"), err, sizeof(err));
	CHECK(t != NULL);
	char *cmd = jv_dump(json_object_get(t, "command"));
	CHECK_STR(cmd, "[\"echo\",\"hi\"]");
	free(cmd);
	json_decref(t);
	flow_started(x, run_of(x, "a"), 1, 0);
	succeed(x, "a",
	        "{\"n\": {\"kind\": \"value\", \"value\": \"7\"},"
	        " \"model\": {\"kind\": \"dir\", \"key\": \"sha256/m\"}}",
	        10);
	t = flow_rendered(x, run_of(x, "c[1]"), err, sizeof(err));
	cmd = jv_dump(json_object_get(t, "command"));
	CHECK_STR(cmd, "[\"c\",\"2\",\"{{ tasks.a.outputs.model }}\"]");
	free(cmd);
	json_decref(t);
	json_t *fetch = flow_fetch(x, run_of(x, "c[1]"));
	char *f = jv_dump(fetch);
	CHECK_STR(f, "[{\"ref\":\"tasks.a.outputs.model\",\"kind\":\"dir\",\"keys\":[\"sha256/m\"],"
	             "\"list\":false}]");
	free(f);
	json_decref(fetch);
	t = flow_rendered(x, run_of(x, "b"), err, sizeof(err));
	cmd = jv_dump(json_object_get(t, "command"));
	CHECK_STR(cmd, "[\"b\",\"7\"]");
	free(cmd);
	json_decref(t);
	flow_exec_free(x);
}

TEST(a_failure_retries_after_the_backoff_then_skips_what_needs_it)
{
	struct flow_exec *x = new_exec(diamond);
	char got[256];
	flow_started(x, run_of(x, "a"), 1, 0);
	succeed(x, "a",
	        "{\"n\": {\"kind\": \"value\", \"value\": \"7\"},"
	        " \"model\": {\"kind\": \"dir\", \"key\": \"sha256/m\"}}",
	        0);
	struct flow_run *b = run_of(x, "b");
	flow_started(x, b, 2, 0);
	flow_ended(x, b, 0, 0, NULL, "job 2 failed: exit 1", 100);
	CHECK_INT(b->state, FLOW_WAITING);
	CHECK_INT(b->due_ms, 600);
	CHECK_STR(b->why, "job 2 failed: exit 1");
	next_labels(x, 599, got, sizeof(got));
	CHECK(strstr(got, "b") == NULL);
	next_labels(x, 600, got, sizeof(got));
	CHECK(strncmp(got, "b", 1) == 0);
	flow_started(x, b, 3, 600);
	CHECK_INT(b->tries, 2);
	flow_ended(x, b, 0, 0, NULL, "job 3 failed", 700);
	CHECK_INT(b->state, FLOW_FAILED); /* one retry only */
	for (int i = 0; i < 3; i++) {
		char l[8];
		snprintf(l, sizeof(l), "c[%d]", i);
		flow_started(x, run_of(x, l), 10 + i, 700);
		succeed(x, l, NULL, 700);
	}
	next_labels(x, 700, got, sizeof(got));
	CHECK_STR(got, "");
	CHECK_INT(run_of(x, "d")->state, FLOW_SKIPPED);
	CHECK_STR(run_of(x, "d")->why, "needs task 'b', which did not succeed");
	CHECK_INT(flow_settle(x, 700), 1);
	CHECK_INT(x->state, FLOW_FAILED);
	CHECK_STR(x->reason, "task b failed: job 3 failed");
	/* recover: b and d wait again, with their tries reset; a and c stay */
	CHECK_INT(flow_recover(x, 800), 0);
	CHECK_INT(x->state, FLOW_RUNNING);
	CHECK_INT(b->state, FLOW_WAITING);
	CHECK_INT(b->tries, 0);
	CHECK_INT(run_of(x, "a")->state, FLOW_SUCCEEDED);
	next_labels(x, 800, got, sizeof(got));
	CHECK_STR(got, "b");
	CHECK_INT(flow_recover(x, 800), -1); /* running: nothing to recover */
	flow_exec_free(x);
}

TEST(a_declared_output_that_was_not_reported_fails_the_run)
{
	struct flow_exec *x = new_exec(diamond);
	struct flow_run *a = run_of(x, "a");
	flow_started(x, a, 1, 0);
	json_t *o = test_json("{\"n\": {\"kind\": \"value\", \"value\": \"7\"}}");
	flow_ended(x, a, 1, 0, o, NULL, 5);
	json_decref(o);
	CHECK_INT(a->state, FLOW_FAILED);
	CHECK_STR(a->why, "output 'model' was not reported");
	flow_exec_free(x);
}

TEST(cancel_cancels_waiting_runs_and_running_ones_as_their_jobs_end)
{
	struct flow_exec *x = new_exec(diamond);
	char got[64];
	struct flow_run *a = run_of(x, "a");
	flow_started(x, a, 1, 0);
	flow_cancel(x, 5);
	CHECK_INT(run_of(x, "d")->state, FLOW_CANCELLED);
	CHECK_INT(a->state, FLOW_RUNNING);
	CHECK_INT(flow_settle(x, 5), 0);
	flow_ended(x, a, 0, 1, NULL, "job 1 cancelled", 9);
	CHECK_INT(a->state, FLOW_CANCELLED);
	next_labels(x, 9, got, sizeof(got));
	CHECK_STR(got, "");
	CHECK_INT(flow_settle(x, 9), 1);
	CHECK_INT(x->state, FLOW_CANCELLED);
	flow_exec_free(x);
}

TEST(the_stored_form_reads_back)
{
	struct flow_exec *x = new_exec(diamond);
	x->id = 4;
	struct flow_run *a = run_of(x, "a");
	for (int i = 0; i < x->nruns; i++)
		x->runs[i]->id = 10 + i;
	flow_started(x, a, 7, 3);
	snprintf(a->cache_key, sizeof(a->cache_key), "k");
	snprintf(a->cache_note, sizeof(a->cache_note), "miss: no earlier result");
	json_t *doc = flow_exec_json(x, 0);
	json_object_set(doc, "workflow", x->spec);
	struct flow_exec *y = flow_exec_load(doc);
	CHECK(y != NULL);
	CHECK_INT(y->id, 4);
	CHECK_STR(y->name, "w");
	for (int i = 0; i < x->nruns; i++) {
		json_t *rd = flow_run_json(x, x->runs[i]);
		struct flow_run *r = flow_run_load(rd);
		CHECK(r != NULL);
		y->runs = realloc(y->runs, (size_t)(y->nruns + 1) * sizeof(*y->runs));
		y->runs[y->nruns++] = r;
		json_decref(rd);
	}
	CHECK_INT(flow_exec_index(y), 0);
	struct flow_run *b = run_of(y, "a");
	CHECK_INT(b->state, FLOW_RUNNING);
	CHECK_INT(b->job_id, 7);
	CHECK_INT(b->tries, 1);
	CHECK_STR(b->cache_note, "miss: no earlier result");
	CHECK_INT(run_of(y, "c[2]")->id, 14);
	CHECK_INT(jv_int(run_of(y, "c[2]")->params, "x", 0), 3);
	json_decref(doc);
	flow_exec_free(x);
	flow_exec_free(y);
	doc = test_json("{\"state\": \"bogus\", \"workflow\": {}}");
	CHECK(flow_exec_load(doc) == NULL);
	json_decref(doc);
}

TEST_MAIN()
