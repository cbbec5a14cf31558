/* The server's desired entries (ranks.c), built through its real code path -
 * register, submit, schedule, state_desired - and validated with the table
 * the agent validates them with (proto/wire.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../test_json.h"
#include "base/jv.h"
#include "proto/wire.h"
#include "register_fixture.h"
#include "server/state.h"

/* The answer as text (state_desired_text, what a sync gets) is the
 * answer as JSON, twice (the second from the ranks' cached text). */
static void check_text(struct state *st, struct node *n, const json_t *answer)
{
	for (int i = 0; i < 2; i++) {
		char *text = state_desired_text(st, n);
		json_t *parsed = test_json(text);
		if (!json_equal(parsed, answer))
			FAIL_AT("text %s differs from the answer", text);
		json_decref(parsed);
		free(text);
	}
}

/* The answer to node-1's sync after submitting job (JSON) to a fresh server
 * with one 2-GPU node whose agent speaks protocol (0: an agent from before
 * the facts said); then, with reprotocol, the answer after the node's agent
 * says that one instead (0: none). The caller decrefs it. */
static json_t *desired_after(const char *job, int protocol, int reprotocol)
{
	char dir[] = "/tmp/anvil-test-ranks-XXXXXX", db[64], err[256];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(db, sizeof(db), "%s/state.db", dir);
	struct state st;
	CHECK_INT(state_open(&st, db, 0, 30000), 0);
	state_lock(&st);
	json_t *facts = test_json("{\"address\": \"127.0.0.1\", \"gpus\": ["
	                          "{\"index\": 0, \"uuid\": \"GPU-0\", \"memory_bytes\": 1000},"
	                          "{\"index\": 1, \"uuid\": \"GPU-1\", \"memory_bytes\": 1000}]}");
	if (protocol)
		json_object_set_new(facts, "protocol", json_integer(protocol));
	struct node *n = test_join(&st, facts, "node-1");
	json_t *body = test_json(job);
	struct job *j = NULL;
	int rc = state_submit(&st, body, &j, err, sizeof(err));
	if (rc)
		FAIL_AT("submit: %s", err);
	json_decref(body);
	state_schedule(&st);
	json_t *answer = state_desired(&st, n);
	check_text(&st, n, answer);
	if (reprotocol) {
		json_decref(answer);
		json_object_set_new(facts, "protocol", json_integer(reprotocol));
		state_node_facts(&st, n, facts);
		answer = state_desired(&st, n);
		check_text(&st, n, answer);
	}
	json_decref(facts);
	CHECK_INT(state_flush(&st), 0);
	state_unlock(&st);
	state_close(&st);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
	return answer;
}

/* The answer to an agent from before shared environments. */
static json_t *desired_for(const char *job)
{
	return desired_after(job, 0, 0);
}

static void check_answer(const json_t *answer, const char *want_field)
{
	char err[256] = "";
	if (wire_check(answer, &wire_sync_answer, err, sizeof(err)))
		FAIL_AT("answer: %s", err);
	const json_t *ranks = json_object_get(answer, "ranks");
	CHECK_INT(json_array_size(ranks), 1);
	if (wire_check_each(answer, "ranks", &wire_desired, err, sizeof(err)))
		FAIL_AT("desired entry: %s", err);
	/* every field the server sends is one the agent knows */
	const json_t *d = json_array_get(ranks, 0);
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)d, k, v)
		CHECK(wire_field(&wire_desired, k) != NULL);
	if (want_field)
		CHECK(json_object_get(d, want_field) != NULL);
}

TEST(desired_entry_passes_the_agents_table)
{
	json_t *a = desired_for("{\"command\": [\"python3\", \"train.py\"], \"gpus\": 2}");
	check_answer(a, "env");
	const json_t *d = json_array_get(json_object_get(a, "ranks"), 0);
	CHECK(json_is_null(json_object_get(d, "cwd")));
	CHECK(json_object_get(d, "cpu_millis") == NULL);
	CHECK_INT(json_array_size(json_object_get(d, "gpus")), 2);
	json_decref(a);
}

TEST(desired_entry_with_limits_cwd_and_env_passes_the_agents_table)
{
	json_t *a = desired_for("{\"command\": [\"sleep\", \"1\"], \"gpus\": 1, \"cpus\": 0.5,"
	                        " \"memory_bytes\": 8388608, \"cwd\": \"/tmp\","
	                        " \"env\": {\"A\": \"b\"}, \"checkpointing\": true}");
	check_answer(a, "memory_bytes");
	const json_t *d = json_array_get(json_object_get(a, "ranks"), 0);
	CHECK_INT(jv_int(d, "cpu_millis", 0), 500);
	CHECK_STR(jv_str(d, "cwd", ""), "/tmp");
	CHECK_STR(jv_str(json_object_get(d, "env"), "A", ""), "b");
	json_decref(a);
}

/* The variables the server sets per rank are the ones proto/wire.h lists
 * (the client never exports those), and they win over the job's own env,
 * exported from a client's environment or not. The job checkpoints and has
 * a head, and an MPI job comes with it (a head and MPI do not go together),
 * so that every listed variable is set by one or the other. */
TEST(rank_variables_are_the_listed_ones_and_win_over_the_jobs)
{
	json_t *a = desired_for("{\"command\": [\"true\"], \"gpus\": 1, \"checkpointing\": true,"
	                        " \"head\": \"sleep 9\", \"array\": {\"indices\": [4]},"
	                        " \"env\": {\"LR\": \"3e-4\", \"CUDA_VISIBLE_DEVICES\": \"7\","
	                        " \"MASTER_ADDR\": \"laptop\"},"
	                        " \"exported\": [\"LR\", \"MASTER_ADDR\"]}");
	check_answer(a, "env");
	const json_t *env = json_object_get(json_array_get(json_object_get(a, "ranks"), 0), "env");
	CHECK_STR(jv_str(env, "LR", ""), "3e-4");
	CHECK(strcmp(jv_str(env, "CUDA_VISIBLE_DEVICES", ""), "7") != 0);
	CHECK_STR(jv_str(env, "MASTER_ADDR", ""), "127.0.0.1");
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)env, k, v) {
		int listed = strcmp(k, "LR") == 0;
		for (size_t i = 0; !listed && wire_rank_env[i]; i++)
			listed = strcmp(k, wire_rank_env[i]) == 0;
		if (!listed)
			FAIL_AT("the server sets %s for each rank; wire_rank_env lacks it", k);
	}
	json_t *m = desired_for("{\"command\": [\"true\"], \"gpus\": 1, \"mpi\": true}");
	check_answer(m, "env");
	const json_t *menv = json_object_get(json_array_get(json_object_get(m, "ranks"), 0), "env");
	json_object_foreach ((json_t *)menv, k, v) {
		int listed = 0;
		for (size_t i = 0; !listed && wire_rank_env[i]; i++)
			listed = strcmp(k, wire_rank_env[i]) == 0;
		if (!listed)
			FAIL_AT("the server sets %s for an MPI job's ranks; wire_rank_env lacks it",
			        k);
	}
	for (size_t i = 0; wire_rank_env[i]; i++)
		if (strcmp(wire_rank_env[i], "ANVIL_TASK") !=
		            0 && /* a workflow run's: test_flows */
		    !json_object_get(env, wire_rank_env[i]) &&
		    !json_object_get(menv, wire_rank_env[i]))
			FAIL_AT("wire_rank_env lists %s, which the server does not set",
			        wire_rank_env[i]);
	json_decref(m);
	json_decref(a);
}

/* Two ranks on the node (an array of two 1-GPU members): the answer's text
 * lists both, as the JSON answer does (check_text, in desired_for). */
TEST(answer_text_lists_every_rank)
{
	json_t *a = desired_for("{\"command\": [\"true\"], \"gpus\": 1,"
	                        " \"array\": {\"indices\": [1, 2]}}");
	CHECK_INT(json_array_size(json_object_get(a, "ranks")), 2);
	json_decref(a);
}

/* Every entry passes the agent's table, and the answer's shared
 * environments are what its entries name and nothing else. */
static void check_shared(const json_t *answer)
{
	char err[256] = "";
	if (wire_check(answer, &wire_sync_answer, err, sizeof(err)) ||
	    wire_check_each(answer, "ranks", &wire_desired, err, sizeof(err)))
		FAIL_AT("answer: %s", err);
	const json_t *envs = json_object_get(answer, "envs");
	size_t i, named = 0;
	json_t *d;
	json_array_foreach (json_object_get(answer, "ranks"), i, d) {
		const char *key = jv_str(d, "env_base", NULL);
		if (key && !json_object_get(envs, key))
			FAIL_AT("entry %zu names env %s, which the answer lacks", i, key);
		named += key != NULL;
	}
	CHECK(named > 0 || envs == NULL);
}

/* An agent of protocol 2 gets an array's environment once: both members'
 * entries name it and carry only their own variables, which still win. */
TEST(shared_env_is_sent_once_for_an_arrays_members)
{
	json_t *a = desired_after("{\"command\": [\"true\"], \"gpus\": 1,"
	                          " \"array\": {\"indices\": [1, 2]},"
	                          " \"env\": {\"LR\": \"3e-4\", \"CUDA_VISIBLE_DEVICES\": \"7\"},"
	                          " \"exported\": [\"LR\"]}",
	                          WIRE_PROTOCOL_SHARED_ENV, 0);
	check_shared(a);
	const json_t *ranks = json_object_get(a, "ranks"), *envs = json_object_get(a, "envs");
	CHECK_INT(json_array_size(ranks), 2);
	CHECK_INT(json_object_size(envs), 1);
	const char *key = jv_str(json_array_get(ranks, 0), "env_base", "");
	CHECK_STR(jv_str(json_array_get(ranks, 1), "env_base", ""), key);
	CHECK_STR(jv_str(json_object_get(envs, key), "LR", ""), "3e-4");
	for (size_t i = 0; i < 2; i++) {
		const json_t *env = json_object_get(json_array_get(ranks, i), "env");
		CHECK(json_object_get(env, "LR") == NULL);
		CHECK_STR(jv_str(env, "ANVIL_ARRAY_INDEX", ""), i ? "2" : "1");
		CHECK(strcmp(jv_str(env, "CUDA_VISIBLE_DEVICES", ""), "7") != 0);
	}
	json_decref(a);
}

/* A job with no environment of its own names none. */
TEST(a_job_without_env_names_no_shared_env)
{
	json_t *a = desired_after("{\"command\": [\"true\"], \"gpus\": 1}",
	                          WIRE_PROTOCOL_SHARED_ENV, 0);
	check_shared(a);
	CHECK(json_object_get(a, "envs") == NULL);
	CHECK(json_object_get(json_array_get(json_object_get(a, "ranks"), 0), "env_base") == NULL);
	json_decref(a);
}

/* The node's agent replaced by an older one (and back): the running ranks'
 * entries are built again in the form the new agent reads. */
TEST(entries_follow_the_agents_protocol)
{
	const char *job = "{\"command\": [\"true\"], \"gpus\": 1, \"env\": {\"LR\": \"1\"}}";
	json_t *a = desired_after(job, WIRE_PROTOCOL_SHARED_ENV, 1);
	check_answer(a, "env");
	CHECK(json_object_get(a, "envs") == NULL);
	CHECK_STR(jv_str(json_object_get(json_array_get(json_object_get(a, "ranks"), 0), "env"),
	                 "LR", ""),
	          "1");
	json_decref(a);
	a = desired_after(job, 1, WIRE_PROTOCOL_SHARED_ENV);
	check_shared(a);
	CHECK_INT(json_object_size(json_object_get(a, "envs")), 1);
	json_decref(a);
}

#ifdef ANVIL_FIELD_PROBE
/* A field described by its entry in model/fields.h alone (the test build's
 * probe): taken in the body and carried in each rank's desired entry. */
TEST(a_table_only_field_reaches_the_desired_entry)
{
	json_t *a = desired_for("{\"command\": [\"true\"], \"gpus\": 1, \"probe\": \"p-1\"}");
	const json_t *d = json_array_get(json_object_get(a, "ranks"), 0);
	CHECK_STR(jv_str(d, "probe", ""), "p-1");
	json_decref(a);
}
#endif

TEST_MAIN()
