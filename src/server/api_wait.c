/* api_wait.c - GET /v1/jobs/ID?wait_ms=N&while=STATE: a job's long poll.
 *
 * While the job is in STATE the request is suspended (it holds no HTTP
 * thread) until the job leaves it or N ms pass (at most 60 s), then
 * answered as a plain GET /v1/jobs/ID is. `anvil shell` waits this way for
 * its placed job to run instead of asking every few milliseconds.
 * api_wait_check() answers the waiters that are due; the agent protocol
 * calls it after every sync (where ranks start and end), the housekeeping
 * loop every tick (deadlines, and any other change). Layer 7 of the
 * server's files (tests/lint/layers.py): below agentproto.c and api.c,
 * which call it. Every function runs with the state lock held.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "server/server.h"

#define WAIT_MAX_MS 60000

struct job_waiter {
	struct httpd_req *req;
	int64_t job_id;
	enum job_state while_state;
	int64_t deadline_ms;
};

static void answer(struct state *st, struct httpd_req *req, const struct job *j)
{
	json_t *o = json_pack("{s:o}", "job", state_job_json(st, j, 1));
	char *text = jv_dump(o);
	httpd_json(req, 200, text);
	free(text);
	json_decref(o);
}

int api_job_wait(struct server *s, struct httpd_req *req, int64_t id)
{
	req->route = "jobs_get";
	const char *w = httpd_query(req, "wait_ms"), *ws = httpd_query(req, "while");
	int64_t wait = 0;
	enum job_state while_state;
	if (parse_i64(w, 0, WAIT_MAX_MS, &wait) != 0 || !ws ||
	    job_state_parse(ws, &while_state) != 0) {
		httpd_error(req, ERR_INVALID,
		            "query 'wait_ms' must be 0 to 60000 and 'while' a job state (pending, "
		            "scheduled, running, ...)");
		return HTTPD_DONE;
	}
	struct state *st = &s->state;
	state_lock(st);
	const struct job *j = state_job(st, id);
	int rc = HTTPD_DONE;
	if (!j) {
		httpd_error(req, ERR_NOTFOUND, "no such job");
	} else if (j->state != while_state || wait == 0 || s->stopping) {
		answer(st, req, j);
	} else {
		XGROW(s->waiters, s->nwaiters, s->capwaiters);
		s->waiters[s->nwaiters++] =
		        (struct job_waiter){req, id, while_state, now_ms() + wait};
		httpd_suspend(req);
		rc = HTTPD_SUSPENDED;
	}
	state_unlock(st);
	return rc;
}

void api_wait_check(struct server *s, int64_t now)
{
	struct state *st = &s->state;
	for (int i = s->nwaiters; i-- > 0;) {
		struct job_waiter *w = &s->waiters[i];
		const struct job *j = state_job(st, w->job_id);
		if (j && j->state == w->while_state && now < w->deadline_ms && !s->stopping)
			continue;
		if (j)
			answer(st, w->req, j);
		else
			httpd_error(w->req, ERR_NOTFOUND, "no such job");
		httpd_resume(w->req);
		s->waiters[i] = s->waiters[--s->nwaiters];
	}
}
