/* A session's notices and idle timeout (server/ranks.c) without HTTP: the
 * warning before its time limit, the warning and the stop when its GPUs
 * stay idle past its queue's idle_timeout, and what is left alone (batch
 * jobs, busy sessions), with the agents played by state_fixture.h. */
#include "state_fixture.h"

#define WARN_MS 2000 /* config.session_warning_ms in these tests */

static struct sfx *open_with_queue(const char *queue_body)
{
	struct sfx *f = sfx_open(1, 2);
	f->st.config.session_warning_ms = WARN_MS;
	if (queue_body) {
		json_t *q = sfx_json(queue_body);
		char err[256] = "";
		CHECK_INT(state_put_queue(&f->st, q, err, sizeof(err)), 0);
		json_decref(q);
		sfx_flush(f);
	}
	return f;
}

/* Submits body, starts it and returns the running job. */
static struct job *running(struct sfx *f, const char *body)
{
	struct job *j = sfx_submit(f, body);
	sfx_start_all(f);
	CHECK_INT(j->state, JOB_RUNNING);
	return j;
}

/* The notice of rank 0 of a in node 0's desired set: its id, text into
 * text (or "" and 0 when it has none). */
static int64_t notice_of(struct sfx *f, const struct attempt *a, char *text, size_t n)
{
	json_t *o = sfx_desired(f, 0);
	int64_t id = 0;
	text[0] = '\0';
	size_t i;
	json_t *d;
	json_array_foreach (json_object_get(o, "ranks"), i, d) {
		const json_t *notice = json_object_get(d, "notice");
		if (jv_int(d, "attempt_id", 0) != a->id || !notice)
			continue;
		char err[256] = "";
		if (wire_check(notice, &wire_notice, err, sizeof(err)))
			FAIL_AT("notice: %s", err);
		id = jv_int(notice, "id", 0);
		snprintf(text, n, "%s", jv_str(notice, "text", ""));
	}
	json_decref(o);
	return id;
}

static void housekeeping(struct sfx *f)
{
	state_check_nodes(&f->st, now_ms());
	sfx_flush(f);
}

TEST(a_session_is_warned_before_its_time_limit_once)
{
	struct sfx *f = open_with_queue(NULL);
	struct job *j = running(f, "{\"command\": [\"bash\"], \"gpus\": 1, \"session\": true,"
	                           " \"time_limit_ms\": 7200000}");
	struct job *batch = running(f, "{\"command\": [\"sleep\", \"1d\"], \"gpus\": 1,"
	                               " \"time_limit_ms\": 7200000}");
	struct attempt *a = sfx_attempt(j), *b = sfx_attempt(batch);
	char text[1100];
	housekeeping(f);
	CHECK_INT(notice_of(f, a, text, sizeof(text)), 0); /* two hours left */

	/* 1 s before the warning: nothing; at it: the notice, and the agent is woken */
	a->start_ms = b->start_ms = wall_ms() - 7200000 + WARN_MS + 1000;
	housekeeping(f);
	CHECK_INT(notice_of(f, a, text, sizeof(text)), 0);
	int64_t gen = sfx_node(f, 0)->generation;
	a->start_ms = b->start_ms = wall_ms() - 7200000 + WARN_MS - 100;
	housekeeping(f);
	int64_t id = notice_of(f, a, text, sizeof(text));
	CHECK(id >= wall_ms() - 10000 && id <= wall_ms());
	CHECK_CONTAINS(text, "this session ends in 2 s: its time limit (2h) is reached at ");
	CHECK_CONTAINS(text, " UTC");
	CHECK(sfx_node(f, 0)->generation > gen);
	CHECK_INT(sfx_events(f, "job.notice", j->id, "its time limit (2h)"), 1);
	CHECK_INT(notice_of(f, b, text, sizeof(text)), 0); /* a batch job has no terminal */
	CHECK_INT(sfx_events(f, "job.notice", batch->id, NULL), 0);

	/* once: the same notice at every later answer, no new one */
	gen = sfx_node(f, 0)->generation;
	housekeeping(f);
	CHECK_INT(notice_of(f, a, text, sizeof(text)), id);
	CHECK_INT(sfx_node(f, 0)->generation, gen);
	CHECK_INT(sfx_events(f, "job.notice", j->id, NULL), 1);

	/* then the limit stops it, as any job */
	a->start_ms = wall_ms() - 7200000 - 1;
	housekeeping(f);
	CHECK(attempt_ending(a));
	CHECK_CONTAINS(j->reason, "reached its time limit of 7200 s");
	sfx_close(f);
}

TEST(a_short_limit_is_warned_at_half_of_it)
{
	struct sfx *f = open_with_queue(NULL);
	struct job *j = running(f, "{\"command\": [\"bash\"], \"gpus\": 1, \"session\": true,"
	                           " \"time_limit_ms\": 3000}");
	struct attempt *a = sfx_attempt(j);
	char text[1100];
	a->start_ms = wall_ms() - 1400;
	housekeeping(f);
	CHECK_INT(notice_of(f, a, text, sizeof(text)), 0);
	a->start_ms = wall_ms() - 1600;
	housekeeping(f);
	CHECK(notice_of(f, a, text, sizeof(text)) > 0);
	CHECK_CONTAINS(text, "this session ends in 2 s: its time limit (3s)");
	sfx_close(f);
}

TEST(an_idle_session_is_warned_then_stopped_with_the_reason)
{
	struct sfx *f =
	        open_with_queue("{\"name\": \"interactive\", \"idle_timeout_ms\": 1800000}");
	struct job *j = running(f, "{\"command\": [\"bash\"], \"gpus\": 1, \"session\": true,"
	                           " \"queue\": \"interactive\"}");
	struct attempt *a = sfx_attempt(j);
	a->start_ms = wall_ms() - 3600000; /* it has run longer than it has idled */
	char text[1100];

	/* the agent has not said: nothing */
	housekeeping(f);
	CHECK(!attempt_ending(a));
	CHECK_INT(a->ranks[0].has_gpu_idle, 0);

	/* idle, but not yet for the warning */
	sfx_set_idle(f, 0, a->id, 0, 1800000 - WARN_MS - 1000);
	sfx_report(f, 0);
	housekeeping(f);
	CHECK_INT(notice_of(f, a, text, sizeof(text)), 0);

	/* the server counts on between reports: a second later, the warning */
	a->ranks[0].gpu_idle_at -= 1000;
	housekeeping(f);
	int64_t first = notice_of(f, a, text, sizeof(text));
	CHECK(first > 0);
	CHECK_CONTAINS(text, "this session ends in 2 s unless its GPUs are used: they have been "
	                     "idle for 29m58s, and queue interactive ends sessions idle for 30m");
	CHECK(!attempt_ending(a));

	/* busy again: no stop; a new idle spell is warned anew */
	sfx_set_idle(f, 0, a->id, 0, 0);
	sfx_report(f, 0);
	a->ranks[0].gpu_idle_at -= 3600000; /* 0 means busy: nothing is counted on */
	housekeeping(f);
	CHECK(!attempt_ending(a));
	CHECK_INT(notice_of(f, a, text, sizeof(text)), first);
	sfx_set_idle(f, 0, a->id, 0, 1800000 - 500);
	sfx_report(f, 0);
	housekeeping(f);
	int64_t second = notice_of(f, a, text, sizeof(text));
	CHECK(second > first);
	CHECK_CONTAINS(text, "this session ends in 1 s unless");
	CHECK_INT(sfx_events(f, "job.notice", j->id, "unless its GPUs are used"), 2);

	/* past the timeout: stopped, saying why */
	sfx_set_idle(f, 0, a->id, 0, 1800000);
	sfx_report(f, 0);
	housekeeping(f);
	CHECK(attempt_ending(a));
	CHECK_STR(a->end_reason, "its GPUs were idle for 30m (queue interactive's idle_timeout)");
	CHECK_STR(j->reason,
	          "its GPUs were idle for 30m (queue interactive's idle_timeout); stopping");
	CHECK_INT(sfx_events(f, "job.idle_timeout", j->id, NULL), 1);
	sfx_apply(f, 0);
	CHECK_INT(sfx_end_stopped(f, 0), 1); /* SIGHUP's end: no failure of its own */
	sfx_report(f, 0);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_STR(j->reason,
	          "stopped: its GPUs were idle for 30m (queue interactive's idle_timeout)");
	CHECK_STR(a->end_reason, j->reason);
	sfx_close(f);
}

TEST(idle_time_before_the_attempt_started_does_not_count)
{
	struct sfx *f = open_with_queue("{\"name\": \"interactive\", \"idle_timeout_ms\": 60000}");
	struct job *j = running(f, "{\"command\": [\"bash\"], \"gpus\": 1, \"session\": true,"
	                           " \"queue\": \"interactive\"}");
	struct attempt *a = sfx_attempt(j);
	a->start_ms = wall_ms() - 10000;
	sfx_set_idle(f, 0, a->id, 0, 3600000); /* the GPU sat idle before the session */
	sfx_report(f, 0);
	housekeeping(f);
	CHECK(!attempt_ending(a));
	int64_t idle = state_gpu_idle_ms(a, &a->ranks[0], now_ms(), wall_ms());
	CHECK(idle >= 10000 && idle < 20000);
	json_t *o = state_job_json(&f->st, j, 1);
	json_t *rank = json_array_get(
	        json_object_get(json_array_get(json_object_get(o, "attempts"), 0), "ranks"), 0);
	CHECK(jv_int(rank, "gpu_idle_ms", -1) >= 10000);
	json_decref(o);
	sfx_close(f);
}

TEST(batch_jobs_and_queues_without_a_timeout_are_left_alone)
{
	struct sfx *f = open_with_queue("{\"name\": \"interactive\", \"idle_timeout_ms\": 60000}");
	struct job *batch = running(f, "{\"command\": [\"sleep\", \"1d\"], \"gpus\": 1,"
	                               " \"queue\": \"interactive\"}");
	struct job *other = running(f, "{\"command\": [\"bash\"], \"gpus\": 1, \"session\": true}");
	struct attempt *b = sfx_attempt(batch), *o = sfx_attempt(other);
	b->start_ms = o->start_ms = wall_ms() - 3600000;
	sfx_set_idle(f, 0, b->id, 0, 3600000);
	sfx_set_idle(f, 0, o->id, 0, 3600000);
	sfx_report(f, 0);
	housekeeping(f);
	CHECK(!attempt_ending(b) && !attempt_ending(o));
	CHECK_INT(sfx_events(f, "job.notice", 0, NULL), 0);
	sfx_close(f);
}

TEST(a_queues_idle_timeout_is_kept_and_shown)
{
	struct sfx *f =
	        open_with_queue("{\"name\": \"interactive\", \"idle_timeout_ms\": 1800000}");
	sfx_restart(f);
	struct queue *q = state_queue(&f->st, "interactive");
	CHECK(q != NULL);
	CHECK_INT(q->idle_timeout_ms, 1800000);
	json_t *o = state_queue_json(&f->st, q);
	CHECK_INT(jv_int(o, "idle_timeout_ms", -1), 1800000);
	json_decref(o);
	/* 0 turns it off; a change of another field keeps it */
	json_t *body = sfx_json("{\"name\": \"interactive\", \"weight\": 3}");
	char err[256] = "";
	CHECK_INT(state_put_queue(&f->st, body, err, sizeof(err)), 0);
	json_decref(body);
	CHECK_INT(state_queue(&f->st, "interactive")->idle_timeout_ms, 1800000);
	body = sfx_json("{\"name\": \"interactive\", \"idle_timeout_ms\": 0}");
	CHECK_INT(state_put_queue(&f->st, body, err, sizeof(err)), 0);
	json_decref(body);
	CHECK_INT(state_queue(&f->st, "interactive")->idle_timeout_ms, 0);
	CHECK_INT(state_queue(&f->st, "default")->idle_timeout_ms, 0);
	sfx_close(f);
}

TEST_MAIN()
