/* Jobs with a head (docs/cli.md, "Head and workers") in the server's state
 * files, without HTTP: what the desired entries carry, how rank 0's end
 * ends the gang with its status, that a worker failing first still fails
 * it, and that the rule survives a restart. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "state_fixture.h"

#define HEAD_JOB                                                                                   \
	"{\"command\": [\"python3\", \"analyze.py\"], \"gpus\": 1, \"nodes\": 2,"                  \
	" \"head\": \"dask-scheduler --port $ANVIL_HEAD_PORT\","                                   \
	" \"worker\": \"dask-worker $ANVIL_HEAD_ADDR\"}"

TEST(head_jobs_desired_entries_carry_the_launchers_fields)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, HEAD_JOB);
	struct attempt *a = sfx_attempt(j);
	CHECK(a->head_port >= 10000 && a->head_port < 20000);
	CHECK(a->head_port != a->master_port);
	char addr[96];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", a->head_port);
	json_t *d0 = sfx_entry(f, a, 0), *d1 = sfx_entry(f, a, 1);
	CHECK_STR(jv_str(d0, "head_addr", ""), addr);
	CHECK_STR(jv_str(d1, "head_addr", ""), addr);
	CHECK_STR(jv_str(d0, "head", ""), "dask-scheduler --port $ANVIL_HEAD_PORT");
	CHECK(json_object_get(d1, "head") == NULL); /* the head runs on rank 0 only */
	CHECK_STR(jv_str(d0, "worker", ""), "dask-worker $ANVIL_HEAD_ADDR");
	CHECK_STR(jv_str(d1, "worker", ""), "dask-worker $ANVIL_HEAD_ADDR");
	CHECK_INT(jv_int(d1, "head_timeout_ms", 0), 300000); /* the default */
	for (int r = 0; r < 2; r++) {
		const json_t *env = json_object_get(r ? d1 : d0, "env");
		CHECK_STR(jv_str(env, "ANVIL_HEAD_ADDR", ""), addr);
		CHECK_INT(atoi(jv_str(env, "ANVIL_HEAD_PORT", "0")), a->head_port);
	}
	json_decref(d0);
	json_decref(d1);
	/* A job without a head gets none of it. */
	struct job *plain = sfx_submit(f, "{\"command\": [\"true\"], \"gpus\": 1}");
	CHECK(plain->head == NULL);
	CHECK_INT(plain->head_timeout_ms, 0);
	sfx_close(f);
}

TEST(rank_zero_exiting_zero_stops_the_workers_and_the_job_succeeds)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, HEAD_JOB);
	struct attempt *a = sfx_attempt(j);
	int n0 = sfx_node_of(a, 0), n1 = sfx_node_of(a, 1);
	sfx_exit(f, n0, a->id, 0, 0);
	sfx_sync(f, n0);
	CHECK_INT(a->stop, ATTEMPT_STOP_RANK0_ENDED);
	CHECK(attempt_ending(a));
	CHECK(!sfx_desires(f, n1, a->id, 1)); /* the worker's rank is stopped */
	sfx_one_stopped(f, n1);
	CHECK_INT(a->ranks[1].signal, 15);
	CHECK_INT(j->state, JOB_SUCCEEDED);
	CHECK_INT(j->exit_code, 0);
	CHECK_STR(j->reason, "the command exited 0 on rank 0; the head and workers were stopped");
	sfx_close(f);
}

TEST(rank_zero_failing_gives_the_job_its_status_and_its_launchers_reason)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, HEAD_JOB);
	struct attempt *a = sfx_attempt(j);
	int n0 = sfx_node_of(a, 0), n1 = sfx_node_of(a, 1);
	sfx_exit(f, n0, a->id, 0, 7);
	sfx_proc(f, n0, a->id, 0)->reason = "the command exited with status 7";
	sfx_sync(f, n0);
	sfx_one_stopped(f, n1);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 7);
	CHECK_STR(j->reason, "rank 0 on node-1: the command exited with status 7");
	CHECK_STR(a->ranks[0].reason, "the command exited with status 7");
	CHECK_STR(a->end_reason, j->reason);
	sfx_close(f);
}

TEST(a_worker_failing_first_fails_the_gang_naming_it)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, HEAD_JOB);
	struct attempt *a = sfx_attempt(j);
	int n0 = sfx_node_of(a, 0), n1 = sfx_node_of(a, 1);
	sfx_exit(f, n1, a->id, 1, 4);
	sfx_proc(f, n1, a->id, 1)->reason =
	        "the worker exited with status 4 before the command ended";
	sfx_sync(f, n1);
	CHECK(a->stop != ATTEMPT_STOP_RANK0_ENDED);
	CHECK(!sfx_desires(f, n0, a->id, 0)); /* the gang ends */
	sfx_apply(f, n0);
	CHECK_INT(sfx_end_stopped(f, n0), 1);
	sfx_sync(f, n0);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 4);
	CHECK_STR(j->reason,
	          "rank 1 on node-2: the worker exited with status 4 before the command ended");
	sfx_close(f);
}

/* A rank 0 that ends because it was stopped (a cancel) does not decide
 * the outcome: the job is cancelled as any other. */
TEST(a_cancelled_head_job_is_cancelled)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, HEAD_JOB);
	struct attempt *a = sfx_attempt(j);
	CHECK_INT(state_cancel(&f->st, j), 0);
	for (int n = 0; n < 2; n++) {
		sfx_apply(f, n);
		CHECK_INT(sfx_end_stopped(f, n), 1);
		sfx_sync(f, n);
	}
	CHECK(a->stop != ATTEMPT_STOP_RANK0_ENDED);
	CHECK_INT(j->state, JOB_CANCELLED);
	sfx_close(f);
}

TEST(the_head_and_rank_zeros_end_survive_a_restart)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, HEAD_JOB);
	struct attempt *a = sfx_attempt(j);
	int64_t jid = j->id, aid = a->id;
	int port = a->head_port, n0 = sfx_node_of(a, 0), n1 = sfx_node_of(a, 1);
	sfx_exit(f, n0, aid, 0, 0);
	sfx_sync(f, n0);
	sfx_restart(f);
	j = state_job(&f->st, jid);
	a = sfx_attempt(j);
	CHECK_STR(j->head, "dask-scheduler --port $ANVIL_HEAD_PORT");
	CHECK_STR(j->worker, "dask-worker $ANVIL_HEAD_ADDR");
	CHECK_INT(j->head_timeout_ms, 300000);
	CHECK_INT(a->head_port, port);
	CHECK_INT(a->stop,
	          ATTEMPT_STOP_RANK0_ENDED); /* so the worker's SIGTERM still does not count */
	sfx_one_stopped(f, n1);
	CHECK_INT(j->state, JOB_SUCCEEDED);
	CHECK_INT(j->exit_code, 0);
	json_t *o = state_job_json(&f->st, j, 1);
	char addr[96];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	CHECK_STR(jv_str(json_array_get(json_object_get(o, "attempts"), 0), "head_addr", ""), addr);
	CHECK_STR(jv_str(o, "worker", ""), "dask-worker $ANVIL_HEAD_ADDR");
	CHECK_INT(jv_int(o, "head_timeout_ms", 0), 300000);
	json_decref(o);
	sfx_close(f);
}

TEST(worker_and_head_timeout_need_a_head)
{
	struct sfx *f = sfx_open(1, 1);
	char err[256];
	CHECK_INT(sfx_submit_refused(f, "{\"command\": [\"true\"], \"worker\": \"w\"}", err,
	                             sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "field 'worker': only with field 'head'");
	CHECK_INT(sfx_submit_refused(f, "{\"command\": [\"true\"], \"head_timeout_ms\": 5000}", err,
	                             sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "field 'head_timeout_ms': only with field 'head'");
	CHECK_INT(sfx_submit_refused(f, "{\"command\": [\"true\"], \"head\": \"\"}", err,
	                             sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "field 'head'");
	struct job *j = sfx_submit(f, "{\"command\": [\"true\"], \"head\": \"h\","
	                              " \"head_timeout_ms\": 5000}");
	CHECK_INT(j->head_timeout_ms, 5000);
	CHECK(j->worker == NULL);
	sfx_close(f);
}

TEST_MAIN()
