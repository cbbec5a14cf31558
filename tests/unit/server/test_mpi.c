/* MPI jobs (docs/cli.md, "MPI") in the server's state files, without HTTP:
 * what the desired entries carry (mpi, rank 0's hosts in rank order, the
 * attempt's exec token in every rank's environment), that the token is new
 * for each attempt, kept across a restart and never shown, and that mpirun
 * on rank 0 ends the gang with its status, as a job with a head does. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "state_fixture.h"

#define MPI_JOB                                                                                    \
	"{\"command\": [\"python3\", \"allreduce.py\"], \"gpus\": 1, \"nodes\": 2, \"mpi\": true}"

static const char *token_of(const json_t *d)
{
	return jv_str(json_object_get(d, "env"), "ANVIL_EXEC_TOKEN", "");
}

TEST(mpi_desired_entries_carry_the_hosts_and_the_attempts_token)
{
	struct sfx *f = sfx_open(3, 2);
	struct job *j = sfx_submit(f, "{\"command\": [\"a.out\"], \"gpus\": 1, \"nodes\": 3,"
	                              " \"mpi\": true}");
	sfx_start_all(f);
	struct attempt *a = sfx_attempt(j);
	CHECK(j->mpi);
	CHECK_INT((int)strlen(a->exec_token), 64);
	CHECK_INT((int)strspn(a->exec_token, "0123456789abcdef"), 64);
	json_t *d[3];
	for (int r = 0; r < 3; r++) {
		d[r] = sfx_entry(f, a, r);
		CHECK(jv_bool(d[r], "mpi", 0));
		CHECK_STR(token_of(d[r]), a->exec_token);
		CHECK(json_object_get(d[r], "head_addr") == NULL); /* not the head's launcher */
		char err[256];
		CHECK_INT(wire_check(d[r], &wire_desired, err, sizeof(err)), 0);
	}
	/* Rank 0 runs mpirun: it gets every rank's node, in rank order. */
	const json_t *hosts = json_object_get(d[0], "mpi_hosts");
	CHECK_INT((int)json_array_size(hosts), 3);
	for (int r = 0; r < 3; r++)
		CHECK_STR(json_string_value(json_array_get(hosts, (size_t)r)),
		          sfx_node(f, sfx_node_of(a, r))->name);
	CHECK(json_object_get(d[1], "mpi_hosts") == NULL);
	CHECK(json_object_get(d[2], "mpi_hosts") == NULL);
	for (int r = 0; r < 3; r++)
		json_decref(d[r]);
	/* Another job's ranks get neither the token nor the MPI fields. */
	struct job *plain = sfx_submit_running(f, "{\"command\": [\"true\"], \"gpus\": 1}");
	struct attempt *pa = sfx_attempt(plain);
	CHECK_STR(pa->exec_token, "");
	json_t *pd = sfx_entry(f, pa, 0);
	CHECK(json_object_get(json_object_get(pd, "env"), "ANVIL_EXEC_TOKEN") == NULL);
	CHECK(json_object_get(pd, "mpi") == NULL);
	json_decref(pd);
	sfx_close(f);
}

TEST(the_token_is_never_shown_and_mpi_is)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, MPI_JOB);
	json_t *o = state_job_json(&f->st, j, 1);
	char *text = json_dumps(o, 0);
	CHECK(strstr(text, sfx_attempt(j)->exec_token) == NULL);
	CHECK(jv_bool(o, "mpi", 0));
	free(text);
	json_decref(o);
	sfx_close(f);
}

TEST(each_attempt_gets_a_token_of_its_own_kept_across_a_restart)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, MPI_JOB);
	struct attempt *a = sfx_attempt(j);
	char first[65];
	snprintf(first, sizeof(first), "%s", a->exec_token);
	state_attempt_requeue(&f->st, a, "a test requeues it");
	for (int n = 0; n < 2; n++) {
		sfx_apply(f, n);
		sfx_end_stopped(f, n);
		sfx_sync(f, n);
	}
	CHECK_INT(j->nattempts, 2);
	struct attempt *b = sfx_attempt(j);
	CHECK_INT((int)strlen(b->exec_token), 64);
	CHECK(strcmp(b->exec_token, first) != 0);
	int64_t jid = j->id;
	char second[65];
	snprintf(second, sizeof(second), "%s", b->exec_token);
	sfx_restart(f);
	j = state_job(&f->st, jid);
	CHECK(j->mpi);
	CHECK_STR(j->attempts[0]->exec_token, first);
	CHECK_STR(sfx_attempt(j)->exec_token, second);
	sfx_close(f);
}

TEST(mpirun_exiting_zero_stops_the_other_ranks_and_the_job_succeeds)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, MPI_JOB);
	struct attempt *a = sfx_attempt(j);
	int n0 = sfx_node_of(a, 0), n1 = sfx_node_of(a, 1);
	sfx_exit(f, n0, a->id, 0, 0);
	sfx_sync(f, n0);
	CHECK_INT(a->stop, ATTEMPT_STOP_RANK0_ENDED);
	CHECK(!sfx_desires(f, n1, a->id, 1)); /* the placeholder is stopped */
	sfx_one_stopped(f, n1);
	CHECK_INT(j->state, JOB_SUCCEEDED);
	CHECK_INT(j->exit_code, 0);
	CHECK_STR(j->reason, "mpirun exited 0 on rank 0; the other ranks were stopped");
	sfx_close(f);
}

TEST(mpirun_failing_gives_the_job_its_status)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, MPI_JOB);
	struct attempt *a = sfx_attempt(j);
	int n0 = sfx_node_of(a, 0), n1 = sfx_node_of(a, 1);
	sfx_exit(f, n0, a->id, 0, 3);
	sfx_sync(f, n0);
	sfx_one_stopped(f, n1);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 3);
	char want[128];
	snprintf(want, sizeof(want), "rank 0 on %s: mpirun exited with status 3",
	         sfx_node(f, n0)->name);
	CHECK_STR(j->reason, want);
	sfx_close(f);
}

/* A placeholder that dies first (its node's OOM killer, a kill by hand)
 * fails the gang as any rank does: mpirun's daemon there went with it. */
TEST(another_rank_ending_first_fails_the_gang)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit_running(f, MPI_JOB);
	struct attempt *a = sfx_attempt(j);
	int n0 = sfx_node_of(a, 0), n1 = sfx_node_of(a, 1);
	sfx_exit(f, n1, a->id, 1, 137);
	sfx_sync(f, n1);
	CHECK(a->stop != ATTEMPT_STOP_RANK0_ENDED);
	CHECK(!sfx_desires(f, n0, a->id, 0));
	sfx_apply(f, n0);
	CHECK_INT(sfx_end_stopped(f, n0), 1);
	sfx_sync(f, n0);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 137);
	CHECK_CONTAINS(j->reason, "rank 1 on ");
	sfx_close(f);
}

TEST(mpi_is_refused_with_a_head_or_a_session)
{
	struct sfx *f = sfx_open(1, 1);
	char err[256];
	CHECK_INT(sfx_submit_refused(f, "{\"command\": [\"a\"], \"mpi\": true, \"head\": \"h\"}",
	                             err, sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "field 'mpi': not with field 'head'");
	CHECK_INT(sfx_submit_refused(f, "{\"command\": [\"a\"], \"mpi\": true, \"session\": true}",
	                             err, sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "field 'mpi': not with field 'session'");
	CHECK_INT(sfx_submit_refused(f, "{\"command\": [\"a\"], \"mpi\": 1}", err, sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "mpi");
	struct job *j = sfx_submit(f, "{\"command\": [\"a\"], \"mpi\": false, \"session\": true}");
	CHECK(!j->mpi);
	sfx_close(f);
}

TEST_MAIN()
