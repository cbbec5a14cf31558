/* The server's workflow engine (server/flows.h) without HTTP: runs become
 * jobs that carry the wrapper's instructions, reported outputs make a run
 * succeed and flow downstream, the cache answers a rerun, and a restart
 * (with a run's job submitted but its record not yet written) loses and
 * repeats nothing. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../test.h"
#include "base/err.h"
#include "base/tarball.h"
#include "objstore/blob.h"
#include "server/core.h"
#include "server/flows.h"
#include "state_fixture.h"
#include "store/flowcache.h"

static const char *const two =
        "{\"workflow\": {\"name\": \"w\", \"tasks\": ["
        " {\"name\": \"a\", \"command\": [\"a\"], \"outputs\": {\"n\": \"value\"},"
        "  \"cache\": {\"enabled\": true}},"
        " {\"name\": \"b\", \"command\": [\"b\", \"{{ tasks.a.outputs.n }}\"],"
        "  \"needs\": [\"a\"], \"env\": {\"N\": \"{{ tasks.a.outputs.n }}\"},"
        "  \"checkpoint\": true, \"cache\": {\"enabled\": true}}]}}";

static struct flow_exec *submit(struct sfx *f, const char *body)
{
	json_t *b = sfx_json(body);
	struct flow_exec *x = NULL;
	char err[1024] = "";
	if (flows_submit(&f->st, b, &x, err, sizeof(err)) != 0)
		FAIL_AT("refused: %s", err);
	json_decref(b);
	sfx_flush(f);
	return x;
}

/* Runs run r's job to the end with code, its wrapper first reporting
 * outputs (JSON text, or NULL). */
static void finish(struct sfx *f, struct flow_run *r, const char *outputs, int code)
{
	struct job *j = state_job(&f->st, r->job_id);
	CHECK(j != NULL);
	sfx_start_all(f);
	struct attempt *a = sfx_attempt(j);
	CHECK(a != NULL);
	if (outputs) {
		json_t *o = sfx_json(outputs);
		char err[256] = "";
		CHECK_INT(flows_outputs(&f->st, r->id, a->id, o, NULL, err, sizeof(err)), 0);
		json_decref(o);
	}
	int node = (int)a->ranks[0].node_id - 1;
	sfx_exit(f, node, a->id, 0, code);
	sfx_report(f, node);
}

TEST(runs_become_jobs_with_the_wrappers_instructions_and_outputs_flow_on)
{
	struct sfx *f = sfx_open(1, 2);
	struct flow_exec *x = submit(f, two);
	struct flow_run *a = x->runs[0], *b = x->runs[1];
	CHECK_INT(a->state, FLOW_RUNNING);
	CHECK_INT(b->state, FLOW_WAITING);
	struct job *j = state_job(&f->st, a->job_id);
	CHECK_STR(j->name, "w/a");
	CHECK_INT(jv_int(j->task, "run", 0), a->id);
	CHECK_STR(jv_str(j->env, "ANVIL_TASK_NAME", ""), "a");
	json_t *d = sfx_desired(f, 0);
	const json_t *entry = json_array_get(json_object_get(d, "ranks"), 0);
	CHECK(json_is_true(json_object_get(entry, "task")));
	const json_t *env = json_object_get(entry, "env");
	CHECK(strstr(jv_str(env, "ANVIL_TASK", ""), "\"run\":1") != NULL);
	CHECK_INT(strlen(jv_str(env, "ANVIL_EXEC_TOKEN", "")), 64);
	json_decref(d);
	/* an output the task does not declare, or of the wrong kind: refused */
	sfx_start_all(f);
	char err[256] = "";
	json_t *bad = sfx_json("{\"zz\": {\"kind\": \"value\", \"value\": \"1\"}}");
	CHECK_INT(flows_outputs(&f->st, a->id, sfx_attempt(j)->id, bad, NULL, err, sizeof(err)),
	          ERR_INVALID);
	CHECK_STR(err, "outputs.zz: the task declares no such output");
	json_decref(bad);
	bad = sfx_json("{\"n\": {\"kind\": \"value\", \"value\": \"1\"}}");
	CHECK_INT(flows_outputs(&f->st, a->id, 999, bad, NULL, err, sizeof(err)), ERR_CONFLICT);
	json_decref(bad);
	finish(f, a, "{\"n\": {\"kind\": \"value\", \"value\": \"42\"}}", 0);
	CHECK_INT(a->state, FLOW_SUCCEEDED);
	CHECK_INT(b->state, FLOW_RUNNING);
	struct job *jb = state_job(&f->st, b->job_id);
	CHECK_STR(json_string_value(json_array_get(jb->command, 1)), "42");
	CHECK_STR(jv_str(jb->env, "N", ""), "42");
	CHECK_STR(jv_str(jb->task, "checkpoint", ""), "ckpt/1/b/0");
	CHECK(jb->checkpointing);
	finish(f, b, NULL, 0);
	CHECK_INT(b->state, FLOW_SUCCEEDED);
	CHECK_INT(x->state, FLOW_SUCCEEDED);
	/* again: both from the cache, no job */
	int64_t njobs = f->st.njobs;
	struct flow_exec *y = submit(f, two);
	CHECK_INT(y->state, FLOW_SUCCEEDED);
	CHECK_INT(y->runs[0]->state, FLOW_CACHED);
	CHECK_INT(y->runs[1]->cached_from, b->id);
	CHECK_INT(f->st.njobs, njobs);
	sfx_close(f);
}

TEST(a_failed_job_fails_its_run_and_a_task_without_its_output_fails_too)
{
	struct sfx *f = sfx_open(1, 2);
	struct flow_exec *x = submit(f, two);
	finish(f, x->runs[0], NULL, 0); /* exit 0, but no output n */
	CHECK_INT(x->runs[0]->state, FLOW_FAILED);
	CHECK_STR(x->runs[0]->why, "output 'n' was not reported");
	CHECK_INT(x->runs[1]->state, FLOW_SKIPPED);
	CHECK_INT(x->state, FLOW_FAILED);
	sfx_close(f);
}

/* A sweep's children start in one round: each run gets a job of its own
 * (consecutive ids, its own task), all admitted together, and all of them
 * are on disk: a restart finds every job, with each run still on its own. */
TEST(a_sweeps_children_start_together_each_with_its_own_job)
{
	struct sfx *f = sfx_open(2, 4);
	int64_t before = f->st.njobs;
	struct flow_exec *x =
	        submit(f, "{\"workflow\": {\"name\": \"s\", \"tasks\": ["
	                  " {\"name\": \"each\", \"command\": [\"true\", \"{{ params.i }}\"],"
	                  "  \"map\": {\"list\": [{\"i\": 1}, {\"i\": 2}, {\"i\": 3},"
	                  "  {\"i\": 4}, {\"i\": 5}]}}]}}");
	CHECK_INT(f->st.njobs, before + 5);
	for (int i = 0; i < 5; i++) {
		const struct flow_run *r = x->runs[i];
		CHECK_INT(r->state, FLOW_RUNNING);
		CHECK_INT(r->job_id, before + 1 + i);
		const struct job *j = state_job(&f->st, r->job_id);
		CHECK(j != NULL);
		CHECK_INT(jv_int(j->task, "run", 0), r->id);
	}
	int64_t id = x->id;
	sfx_restart(f);
	struct flow_exec *y = flows_get(&f->st, id);
	CHECK(y != NULL);
	CHECK_INT(f->st.njobs, before + 5);
	for (int i = 0; i < 5; i++) {
		const struct job *j = state_job(&f->st, y->runs[i]->job_id);
		CHECK(j != NULL);
		CHECK_INT(jv_int(j->task, "run", 0), y->runs[i]->id);
	}
	sfx_close(f);
}

TEST(a_restart_adopts_a_job_whose_run_was_not_written_and_settles_ended_ones)
{
	struct sfx *f = sfx_open(1, 2);
	struct flow_exec *x = submit(f, two);
	int64_t run_a = x->runs[0]->id;
	finish(f, x->runs[0], "{\"n\": {\"kind\": \"value\", \"value\": \"1\"}}", 0);
	int64_t job_b = x->runs[1]->job_id;
	/* b's record on disk still says waiting, as if the server had stopped
	 * between admitting its job and the flush that writes the run */
	struct flow_run *rb = x->runs[1];
	json_t *doc = flow_run_json(x, rb);
	json_object_set_new(doc, "state", json_string("waiting"));
	json_object_del(doc, "job_id");
	json_object_set_new(doc, "jobs", json_array());
	json_object_set_new(doc, "tries", json_integer(0));
	CHECK_INT(store_put_flow_run(f->st.core->store, rb->id, x->id, doc), 0);
	json_decref(doc);
	(void)run_a;
	sfx_restart(f);
	struct flow_exec *y = flows_get(&f->st, 1);
	CHECK(y != NULL);
	CHECK_INT(y->runs[0]->state, FLOW_SUCCEEDED);
	int64_t njobs = f->st.njobs;
	CHECK_INT(y->runs[1]->job_id, job_b);
	CHECK_INT(y->runs[1]->state, FLOW_RUNNING);
	CHECK_INT(f->st.njobs, njobs);
	finish(f, y->runs[1], NULL, 0);
	CHECK_INT(y->state, FLOW_SUCCEEDED);
	sfx_close(f);
}

TEST(a_workflow_that_is_wrong_is_refused_with_every_error)
{
	struct sfx *f = sfx_open(1, 2);
	json_t *b = sfx_json("{\"workflow\": {\"tasks\": [{\"name\": \"a\", \"command\": [],"
	                     " \"needs\": [\"zz\"]}]}, \"bundle\": \"sha256/1\"}");
	struct flow_exec *x = NULL;
	char err[1024] = "";
	CHECK_INT(flows_submit(&f->st, b, &x, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "bundle: must be a content key \"sha256/<64 hex>\"");
	json_object_del(b, "bundle");
	CHECK_INT(flows_submit(&f->st, b, &x, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "workflow.tasks[0].command");
	CHECK_CONTAINS(err, "\nworkflow.tasks[0].needs[0]");
	json_decref(b);
	CHECK(flows_get(&f->st, 1) == NULL);
	/* a task whose job can never fit fails at once with the reason */
	x = submit(f, "{\"workflow\": {\"name\": \"w\", \"tasks\": [{\"name\": \"big\", "
	              "\"command\": [\"x\"],"
	              " \"resources\": {\"gpus\": 8}}]}}");
	CHECK_INT(x->runs[0]->state, FLOW_FAILED);
	CHECK_CONTAINS(x->runs[0]->why, "its job was refused: ");
	CHECK_INT(x->state, FLOW_FAILED);
	sfx_close(f);
}

/* A code bundle of gen.py and train.py with these contents, stored in
 * the state's object store; its key into key. */
static void store_bundle(struct sfx *f, const char *gen, const char *train, char key[80])
{
	char dir[160], path[200], tar[200], err[600] = "";
	static int n;
	snprintf(dir, sizeof(dir), "%s/code-%d", f->dir, n++);
	CHECK_INT(mkdir(dir, 0755), 0);
	const char *files[][2] = {{"gen.py", gen}, {"train.py", train}};
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i][0]);
		FILE *fp = fopen(path, "w");
		CHECK(fp != NULL);
		fputs(files[i][1], fp);
		fclose(fp);
	}
	snprintf(tar, sizeof(tar), "%s.tar", dir);
	if (tarball_pack_dir(dir, tar, err, sizeof(err)))
		FAIL_AT("pack: %s", err);
	struct blob_info info;
	CHECK_INT(blob_put_file(f->st.objects, tar, key, &info), 0);
	CHECK_INT(flowcache_index_prepare(f->st.objects, key, err, sizeof(err)), 0);
}

static struct flow_exec *submit_with(struct sfx *f, const char *bundle)
{
	char body[400];
	snprintf(body, sizeof(body),
	         "{\"bundle\": \"%s\", \"workflow\": {\"name\": \"r\", \"tasks\": ["
	         " {\"name\": \"gen\", \"command\": [\"python3\", \"gen.py\"],"
	         "  \"cache\": {}}]}}",
	         bundle);
	return submit(f, body);
}

/* Runs r's job to a success whose wrapper reported reads (JSON text). */
static void finish_reading(struct sfx *f, struct flow_run *r, const char *reads)
{
	struct job *j = state_job(&f->st, r->job_id);
	CHECK(j != NULL);
	CHECK(json_is_true(json_object_get(j->task, "trace")));
	sfx_start_all(f);
	struct attempt *a = sfx_attempt(j);
	json_t *o = json_object(), *rd = sfx_json(reads);
	char err[256] = "";
	CHECK_INT(flows_outputs(&f->st, r->id, a->id, o, json_object_get(rd, "reads"), err,
	                        sizeof(err)),
	          0);
	json_decref(o);
	json_decref(rd);
	int node = (int)a->ranks[0].node_id - 1;
	sfx_exit(f, node, a->id, 0, 0);
	sfx_report(f, node);
	CHECK_INT(r->state, FLOW_SUCCEEDED);
}

TEST(a_run_is_a_hit_while_the_files_it_read_are_the_same_in_its_bundle)
{
	struct sfx *f = sfx_open(1, 2);
	char path[160], err[600] = "";
	snprintf(path, sizeof(path), "file://%s/objects", f->dir);
	CHECK_INT(blob_open(path, &f->st.objects, err, sizeof(err)), 0);
	char b1[80], b2[80], b3[80];
	store_bundle(f, "print(1)\n", "t1\n", b1);
	store_bundle(f, "print(1)\n", "t2\n", b2); /* train.py edited */
	store_bundle(f, "print(2)\n", "t2\n", b3); /* gen.py edited */
	struct flow_exec *x = submit_with(f, b1);
	/* a read set that is not the bundle's paths is refused, naming it */
	struct job *j = state_job(&f->st, x->runs[0]->job_id);
	sfx_start_all(f);
	json_t *o = json_object(), *bad = sfx_json("{\"r\": [\"gen.py\", \"../etc/passwd\"]}");
	CHECK_INT(flows_outputs(&f->st, x->runs[0]->id, sfx_attempt(j)->id, o,
	                        json_object_get(bad, "r"), err, sizeof(err)),
	          ERR_INVALID);
	CHECK_STR(err, "reads[1]: '../etc/passwd' is not a path of the bundle: it has a '.' or "
	               "'..' part: write the path as the bundle holds it");
	json_decref(o);
	json_decref(bad);
	finish_reading(f, x->runs[0], "{\"reads\": [\"gen.py\", \"json.py\", \"/\"]}");
	/* train.py changed: not read, so a hit */
	struct flow_exec *y = submit_with(f, b2);
	CHECK_INT(y->runs[0]->state, FLOW_CACHED);
	CHECK_STR(y->runs[0]->cache_note, "hit");
	/* gen.py changed: a miss that names it */
	struct flow_exec *z = submit_with(f, b3);
	CHECK_INT(z->runs[0]->state, FLOW_RUNNING);
	CHECK_STR(z->runs[0]->cache_note, "miss: the code changed: gen.py");
	/* a success reported without a read set depends on its whole bundle */
	struct job *jz = state_job(&f->st, z->runs[0]->job_id);
	sfx_start_all(f);
	o = json_object();
	CHECK_INT(flows_outputs(&f->st, z->runs[0]->id, sfx_attempt(jz)->id, o, NULL, err,
	                        sizeof(err)),
	          0);
	json_decref(o);
	sfx_exit(f, (int)sfx_attempt(jz)->ranks[0].node_id - 1, sfx_attempt(jz)->id, 0, 0);
	sfx_report(f, 0);
	CHECK_INT(z->runs[0]->state, FLOW_SUCCEEDED);
	struct flow_exec *again = submit_with(f, b3);
	CHECK_INT(again->runs[0]->state, FLOW_CACHED);
	CHECK_INT(again->runs[0]->cached_exec, z->id);
	/* b1 is still known by what the first run read: going back is a hit */
	struct flow_exec *back = submit_with(f, b1);
	CHECK_INT(back->runs[0]->state, FLOW_CACHED);
	CHECK_INT(back->runs[0]->cached_exec, x->id);
	blob_close(f->st.objects);
	f->st.objects = NULL;
	sfx_close(f);
}

TEST_MAIN()
