/* api_flows.c - the workflow routes (docs/api.md, "Workflows"):
 *
 *   POST /v1/workflows                      submit a compiled workflow
 *   GET  /v1/workflows?limit=N              the newest executions
 *   GET  /v1/workflows/ID                   one, with every run
 *   POST /v1/workflows/ID/cancel            cancel it
 *   POST /v1/workflows/ID/recover           run a failed one on from where it stopped
 *   POST /v1/workflows/runs/RUN/outputs     a run's outputs, from its task wrapper
 *
 * The last also takes the exec token of the run's running attempt, which
 * its wrapper holds (ANVIL_EXEC_TOKEN); the rest need the admin token.
 * Submit and recover take an Idempotency-Key (server/idem.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/util.h"
#include "server/flows.h"
#include "server/server.h"
#include "store/flowcache.h"

/* The execution as the API shows it: each run with the node its latest
 * job ran on (rank 0's) and that job's exit code. */
static json_t *exec_view(struct state *st, const struct flow_exec *x, int with_runs)
{
	json_t *o = flow_exec_json(x, with_runs);
	size_t i;
	json_t *r;
	json_array_foreach (json_object_get(o, "run_list"), i, r) {
		const struct job *j = state_job(st, jv_int(r, "job_id", 0));
		const struct attempt *a = j && j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
		const struct node *n = a && a->nranks ? state_node(st, a->ranks[0].node_id) : NULL;
		if (n)
			json_object_set_new(r, "node", json_string(n->name));
		if (j && j->has_exit)
			json_object_set_new(r, "exit_code", json_integer(j->exit_code));
	}
	return o;
}

/* A create's answer after a crash before it was written (api_idem_remake):
 * "wf:ID" is the execution a submit (201) or a recover (200) started. */
static json_t *remake(struct state *st, const char *ref, int *status)
{
	int64_t id = 0;
	if (strncmp(ref, "wf:", 3) != 0 || parse_i64(ref + 3, 1, INT64_MAX, &id) != 0)
		return NULL;
	struct flow_exec *x = flows_get(st, id);
	if (!x)
		return NULL;
	return json_pack("{s:o}", "workflow",
	                 *status == 201 ? exec_view(st, x, 1) : flow_exec_json(x, 0));
}

/* The execution and the request's key are written before the round's
 * first jobs are admitted, which commit on their own (jobs_admit): a crash
 * in between leaves an execution that the restarted engine carries on and
 * a key that a retry finds it by, never jobs of an execution that is not
 * there. 0, or the flush's error (answered). */
static int written_first(struct state *st, struct httpd_req *req, const struct api_idem *ik,
                         int status, const struct flow_exec *x)
{
	char ref[32];
	snprintf(ref, sizeof(ref), "wf:%lld", (long long)x->id);
	api_idem_ref(st, ik, status, ref);
	int rc = state_flush(st);
	if (rc)
		httpd_error(req, rc, "cannot persist the workflow");
	else
		flows_step(st);
	return rc;
}

static void submit(struct server *s, struct httpd_req *req)
{
	req->route = "workflows_submit";
	char err[4096];
	json_t *body = NULL;
	struct api_idem ik;
	if (api_idem_begin(req, &ik, NULL))
		return;
	int rc = jv_parse_object(req->body, req->body_len, &body, err, sizeof(err));
	if (rc) {
		httpd_error(req, rc, err);
		return;
	}
	struct state *st = &s->state;
	/* a new bundle's files are hashed here, outside the lock, for the task
	 * cache (store/flowcache.h); one that cannot be is compared whole */
	const char *bundle = jv_str(body, "bundle", NULL);
	char why[700];
	if (bundle && st->objects && flowcache_index_prepare(st->objects, bundle, why, sizeof(why)))
		log_debug("no index of the code bundle bundle=%s why=\"%s\"", bundle, why);
	state_lock(st);
	struct flow_exec *x = NULL;
	if (api_idem_seen(st, req, &ik, remake))
		; /* a repeat: answered */
	else if ((rc = flows_create(st, body, &x, err, sizeof(err))))
		httpd_error(req, rc, err);
	else if (written_first(st, req, &ik, 201, x) == 0)
		api_idem_answer(st, req, &ik, 201,
		                json_pack("{s:o}", "workflow", exec_view(st, x, 1)), 1);
	state_unlock(st);
	json_decref(body);
}

static void list(struct server *s, struct httpd_req *req)
{
	req->route = "workflows_list";
	int64_t limit = 100;
	const char *l = httpd_query(req, "limit");
	if (l && parse_i64(l, 1, 10000, &limit)) {
		httpd_error(req, ERR_INVALID, "query 'limit' must be 1 to 10000");
		return;
	}
	state_lock(&s->state);
	json_t *arr = flows_list(&s->state, (int)limit);
	state_unlock(&s->state);
	api_send_json(req, 200, json_pack("{s:o}", "workflows", arr));
}

/* POST /v1/workflows/ID/{cancel,recover}, GET /v1/workflows/ID. */
static void one(struct server *s, struct httpd_req *req, int64_t id, const char *verb)
{
	int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
	struct state *st = &s->state;
	char err[256];
	state_lock(st);
	struct flow_exec *x = flows_get(st, id);
	int rc = 0;
	if (!x) {
		httpd_error(req, ERR_NOTFOUND, "no such workflow execution");
	} else if (get && !*verb) {
		req->route = "workflows_get";
		api_send_json(req, 200, json_pack("{s:o}", "workflow", exec_view(st, x, 1)));
	} else if (post && strcmp(verb, "/cancel") == 0) {
		req->route = "workflows_cancel";
		flows_cancel(st, x);
		if (api_flush_or_fail(st, req) == 0)
			api_send_json(req, 200,
			              json_pack("{s:o}", "workflow", flow_exec_json(x, 0)));
	} else if (post && strcmp(verb, "/recover") == 0) {
		req->route = "workflows_recover";
		/* a recover starts runs again: its repeat must not (a key) */
		struct api_idem ik;
		if (api_idem_begin(req, &ik, NULL) || api_idem_seen(st, req, &ik, remake))
			; /* answered */
		else if ((rc = flows_recover(st, x, err, sizeof(err))))
			httpd_error(req, rc, err);
		else if (written_first(st, req, &ik, 200, x) == 0)
			api_idem_answer(st, req, &ik, 200,
			                json_pack("{s:o}", "workflow", flow_exec_json(x, 0)), 1);
	} else {
		httpd_error(req, ERR_NOTFOUND, "no such route");
	}
	state_unlock(st);
}

/* The run id of "/runs/RUN/outputs", else 0. */
static int64_t outputs_run(const char *rest)
{
	static const char prefix[] = "/runs/", suffix[] = "/outputs";
	if (strncmp(rest, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	const char *seg = rest + sizeof(prefix) - 1, *slash = strchr(seg, '/');
	if (!slash || strcmp(slash, suffix) != 0)
		return 0;
	return api_path_id(seg, (size_t)(slash - seg));
}

/* The run's outputs; by_token: the caller must hold the exec token of the
 * run's running attempt. */
static void outputs(struct server *s, struct httpd_req *req, int64_t run_id, int by_token)
{
	req->route = "workflows_outputs";
	char err[512];
	json_t *body = NULL;
	int rc = jv_parse_object(req->body, req->body_len, &body, err, sizeof(err));
	if (rc) {
		httpd_error(req, rc, err);
		return;
	}
	struct state *st = &s->state;
	state_lock(st);
	struct flow_run *r = flows_run(st, run_id, NULL);
	struct job *j = r ? state_job(st, r->job_id) : NULL;
	const struct attempt *a = j && j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
	if (by_token && (!a || !a->exec_token[0] || !api_token_ok(req, a->exec_token) ||
	                 job_state_final(a->state))) {
		httpd_error(req, ERR_AUTH,
		            "this call needs the exec token of the run's running attempt");
	} else {
		rc = flows_outputs(st, run_id, jv_int(body, "attempt_id", 0),
		                   json_object_get(body, "outputs"), json_object_get(body, "reads"),
		                   err, sizeof(err));
		if (rc)
			httpd_error(req, rc, err);
		else if (api_flush_or_fail(st, req) == 0)
			api_send_json(req, 200, json_object());
	}
	state_unlock(st);
	json_decref(body);
}

void api_flows(struct server *s, struct httpd_req *req, const char *rest)
{
	int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
	int64_t run = outputs_run(rest);
	if (!*rest && post) {
		submit(s, req);
	} else if (!*rest && get) {
		list(s, req);
	} else if (run && post) {
		outputs(s, req, run, 0);
	} else if (rest[0] == '/') {
		const char *seg = rest + 1, *slash = strchr(seg, '/');
		size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
		int64_t id = api_path_id(seg, len);
		if (id)
			one(s, req, id, seg + len);
		else
			httpd_error(req, ERR_NOTFOUND, "no such workflow execution");
	} else {
		httpd_error(req, ERR_NOTFOUND, "no such route");
	}
}

int api_flows_by_exec_token(struct server *s, struct httpd_req *req)
{
	static const char prefix[] = "/v1/workflows";
	if (strcmp(req->method, "POST") != 0 || strncmp(req->path, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	int64_t run = outputs_run(req->path + sizeof(prefix) - 1);
	if (!run)
		return 0;
	outputs(s, req, run, 1);
	return 1;
}
