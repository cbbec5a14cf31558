/* The transition functions (server/transition.c): an illegal move is
 * refused and changes nothing; the times that belong to a move are set by
 * it, so a gang that fails before every rank ran keeps its start time. */
#include <stdlib.h>
#include <unistd.h>

#include "../test.h"
#include "../test_json.h"
#include "base/err.h"
#include "base/jv.h"
#include "register_fixture.h"
#include "server/core.h"
#include "server/records.h"

struct fx {
	char dir[64];
	struct state st;
	struct node *n[2];
};

/* A fresh state with two 1-GPU nodes, lock held. */
static void fx_open(struct fx *f)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/anvil-test-trans-XXXXXX");
	CHECK(mkdtemp(f->dir) != NULL);
	char db[96];
	snprintf(db, sizeof(db), "%s/state.db", f->dir);
	CHECK_INT(state_open(&f->st, db, 0, 30000), 0);
	state_lock(&f->st);
	json_t *facts = test_json("{\"address\": \"127.0.0.1\", \"gpus\": ["
	                          "{\"index\": 0, \"uuid\": \"GPU-0\", \"memory_bytes\": 1000}]}");
	f->n[0] = test_join(&f->st, facts, "node-1");
	f->n[1] = test_join(&f->st, facts, "node-2");
	json_decref(facts);
}

static void fx_close(struct fx *f)
{
	CHECK_INT(state_flush(&f->st), 0);
	state_unlock(&f->st);
	state_close(&f->st);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	CHECK_INT(system(cmd), 0);
}

static struct job *submit(struct fx *f, const char *body)
{
	json_t *b = test_json(body);
	struct job *j = NULL;
	char err[256];
	if (state_submit(&f->st, b, &j, err, sizeof(err)))
		FAIL_AT("submit: %s", err);
	json_decref(b);
	return j;
}

/* One rank report from node n, as its agent sends it. */
static void report(struct fx *f, struct node *n, const char *rep)
{
	char text[512];
	snprintf(text, sizeof(text), "{\"ranks\": [%s]}", rep);
	json_t *o = test_json(text);
	state_reports(&f->st, n, json_object_get(o, "ranks"), n->generation);
	json_decref(o);
}

TEST(illegal_moves_are_refused_and_change_nothing)
{
	struct fx f;
	fx_open(&f);
	struct job *j = submit(&f, "{\"command\": [\"true\"], \"gpus\": 1}");
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_INT(job_to(&f.st, j, JOB_SUCCEEDED, "test"), 0);
	int64_t end = j->end_ms;
	CHECK(end > 0);
	CHECK_INT(job_to(&f.st, j, JOB_PENDING, "back from the dead"), ERR_CONFLICT);
	CHECK_INT(j->state, JOB_SUCCEEDED);
	CHECK(j->end_ms == end);
	struct attempt *a = j->attempts[0];
	CHECK_INT(attempt_to(&f.st, a, JOB_PENDING), ERR_CONFLICT);
	CHECK_INT(a->state, JOB_SCHEDULED);
	CHECK_INT(rank_to(&f.st, a, &a->ranks[0], RANK_ASSIGNED), ERR_CONFLICT);
	CHECK_INT(node_to(&f.st, f.n[0], NODE_READY, "already"), ERR_CONFLICT);
	CHECK_INT(node_admin_to(&f.st, f.n[0], NODE_DRAINED, NULL, 0, NULL), ERR_CONFLICT);
	CHECK_INT(f.n[0]->admin, NODE_READY);
	fx_close(&f);
}

/* Rank 1 ends before rank 0 is reported running: the job never got to
 * running, yet it started, and anvil show must say when. */
TEST(quickly_failing_gang_keeps_its_start_time)
{
	struct fx f;
	fx_open(&f);
	struct job *j = submit(&f, "{\"command\": [\"sh\", \"-c\", \"exit 3\"], \"gpus\": 1, "
	                           "\"nodes\": 2}");
	CHECK_INT(j->state, JOB_SCHEDULED);
	struct attempt *a = j->attempts[0];
	struct node *n1 = f.n[0]->id == a->ranks[1].node_id ? f.n[0] : f.n[1];
	struct node *n0 = n1 == f.n[0] ? f.n[1] : f.n[0];
	char rep[256];
	snprintf(rep, sizeof(rep),
	         "{\"attempt_id\": %lld, \"rank\": 1, \"state\": \"exited\", \"pid\": 4242, "
	         "\"exit_code\": 3, \"signal\": 0}",
	         (long long)a->id);
	report(&f, n1, rep);
	CHECK(a->start_ms > 0);
	CHECK(attempt_ending(a));
	/* rank 0 was stopped before its agent reported it: it never ran */
	report(&f, n0, "");
	CHECK_INT(a->ranks[0].state, RANK_EXITED);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 3);
	CHECK(j->start_ms == a->start_ms);
	CHECK(j->end_ms >= j->start_ms);
	CHECK_INT(f.n[0]->gpus_used | f.n[1]->gpus_used, 0);
	fx_close(&f);
}

/* A rank stopped before it ever ran does not start its attempt's clock. */
TEST(a_rank_that_never_ran_starts_no_clock)
{
	struct fx f;
	fx_open(&f);
	struct job *j = submit(&f, "{\"command\": [\"sleep\", \"60\"], \"gpus\": 1}");
	struct attempt *a = j->attempts[0];
	struct node *n = state_node(&f.st, a->ranks[0].node_id);
	CHECK_INT(state_cancel(&f.st, j), 0);
	report(&f, n, "");
	CHECK_INT(j->state, JOB_CANCELLED);
	CHECK(a->start_ms == 0);
	CHECK(j->start_ms == 0);
	CHECK(j->end_ms > 0);
	fx_close(&f);
}

/* An attempt's stop cause is set once: a second is refused (and counted),
 * as is a second cancel request; a job's cancel request is written only by
 * its transition. */
TEST(a_stop_cause_is_set_once)
{
	struct fx f;
	fx_open(&f);
	struct job *j = submit(&f, "{\"command\": [\"sleep\", \"60\"], \"gpus\": 1}");
	struct attempt *a = j->attempts[0];
	CHECK_INT(a->stop, ATTEMPT_STOP_NONE);
	CHECK_INT(attempt_stop_to(&f.st, a, ATTEMPT_STOP_TIME_LIMIT, 0, "test"), 0);
	CHECK(attempt_ending(a));
	uint64_t refused = f.st.stats.refused_moves;
	CHECK_INT(attempt_stop_to(&f.st, a, ATTEMPT_STOP_PREEMPTED, 0, "test"), ERR_CONFLICT);
	CHECK_INT(a->stop, ATTEMPT_STOP_TIME_LIMIT);
	CHECK_INT(attempt_stop_to(&f.st, a, ATTEMPT_STOP_NONE, 0, "test"), ERR_CONFLICT);
	CHECK_INT(a->stop, ATTEMPT_STOP_TIME_LIMIT);
	CHECK(f.st.stats.refused_moves == refused + 2);
	CHECK_INT(job_cancel_to(&f.st, j, JOB_CANCEL_REQUESTED, "test"), 0);
	CHECK_INT(job_cancel_to(&f.st, j, JOB_CANCEL_REQUESTED, "again"), ERR_CONFLICT);
	CHECK_INT(j->cancel_requested, JOB_CANCEL_REQUESTED);
	fx_close(&f);
}

/* A cancel that comes while a requeue's stop is under way keeps the
 * attempt's cause but decides its outcome: cancelled, not requeued. */
TEST(a_cancel_during_a_requeue_decides_the_outcome)
{
	struct fx f;
	fx_open(&f);
	struct job *j = submit(&f, "{\"command\": [\"sleep\", \"60\"], \"gpus\": 1}");
	struct attempt *a = j->attempts[0];
	struct node *n = state_node(&f.st, a->ranks[0].node_id);
	char rep[256];
	snprintf(rep, sizeof(rep),
	         "{\"attempt_id\": %lld, \"rank\": 0, \"state\": \"running\", \"pid\": 7}",
	         (long long)a->id);
	report(&f, n, rep);
	CHECK_INT(j->state, JOB_RUNNING);
	state_attempt_requeue(&f.st, a, "node node-1 draining: test");
	CHECK_INT(a->stop, ATTEMPT_STOP_REQUEUED);
	CHECK_INT(state_cancel(&f.st, j), 0);
	CHECK_INT(a->stop, ATTEMPT_STOP_REQUEUED);
	CHECK_INT(j->cancel_requested, JOB_CANCEL_REQUESTED);
	snprintf(rep, sizeof(rep),
	         "{\"attempt_id\": %lld, \"rank\": 0, \"state\": \"exited\", \"pid\": 7, "
	         "\"exit_code\": 0, \"signal\": 15}",
	         (long long)a->id);
	report(&f, n, rep);
	CHECK_INT(a->state, JOB_CANCELLED);
	CHECK_INT(j->state, JOB_CANCELLED);
	CHECK_INT(j->nattempts, 1);
	CHECK_INT(j->exit_code, 143);
	CHECK_STR(j->reason, "cancelled by request");
	fx_close(&f);
}

TEST_MAIN()
