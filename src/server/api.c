/* api.c - the HTTP front door of the server: routing, auth, and the job,
 * queue, team, event and log handlers. Agent routes go to agentproto.c,
 * node routes to api_nodes.c, workflow routes to api_flows.c, fleet routes
 * to api_fleet.c, objects to
 * api_objects.c, lineage to api_lineage.c, /metrics to metrics.c; api_util.c has
 * what they share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/httpc.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "server/server.h"

#define LOG_LIMIT_MAX (1 << 20)
#define LOG_TAIL_MAX  100000 /* lines */

static int admin_ok(struct server *s, struct httpd_req *req)
{
	if (api_token_ok(req, s->admin_token))
		return 1;
	httpd_error(req, ERR_AUTH,
	            "this call needs the admin token (Authorization: Bearer ...; see "
	            "STATE_DIR/admin.token)");
	return 0;
}

/* A submission's answer: the job, and an array's members' ids. */
static json_t *submitted(struct state *st, struct job *j)
{
	json_t *o = json_pack("{s:o}", "job", state_job_json(st, j, 1));
	if (j->array_id) { /* its members' ids follow the first's */
		json_t *ids = json_array();
		for (int64_t id = j->id; state_job(st, id) && state_job(st, id)->array_id == j->id;
		     id++)
			json_array_append_new(ids, json_integer(id));
		json_object_set_new(o, "array_job_ids", ids);
	}
	return o;
}

/* The answer of a submission whose key names its first job, "job:ID"
 * (api_idem_remake): its answer was not written before a crash. */
static json_t *resubmitted(struct state *st, const char *ref, int *status)
{
	int64_t id = 0;
	struct job *j = strncmp(ref, "job:", 4) == 0 && parse_i64(ref + 4, 1, INT64_MAX, &id) == 0
	                        ? state_job(st, id)
	                        : NULL;
	*status = 201;
	return j ? submitted(st, j) : NULL;
}

static void jobs_submit(struct server *s, struct httpd_req *req)
{
	req->route = "jobs_submit";
	char err[256];
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
	state_lock(st);
	struct job *j = NULL;
	if (api_idem_seen(st, req, &ik, resubmitted))
		; /* a repeat: answered */
	else if ((rc = state_submit_keyed(st, body, ik.has ? &ik.rec : NULL, &j, err, sizeof(err))))
		httpd_error(req, rc, err);
	else /* the jobs are on disk already (state_submit); what their first
	      * cycle changed is written now, or with the next flush that can */
		api_idem_answer(st, req, &ik, 201, submitted(st, j), 0);
	state_unlock(st);
	json_decref(body);
}

/* GET /v1/jobs?state=S&limit=N&array=ID&index=I&group=arrays: the query
 * read into q, or a 400 naming the parameter, its value and the reason. */
static int jobs_query(struct httpd_req *req, struct state_jobs_query *q)
{
	const char *f = httpd_query(req, "state"), *l = httpd_query(req, "limit"),
	           *a = httpd_query(req, "array"), *x = httpd_query(req, "index"),
	           *g = httpd_query(req, "group");
	enum job_state dummy;
	*q = (struct state_jobs_query){.state = f, .limit = 100, .index = -1};
	/* the first bad parameter: its name, then why */
	const char *name = NULL, *why = NULL;
	if (f && *f && strcmp(f, "all") != 0 && strcmp(f, "active") != 0 &&
	    strcmp(f, "done") != 0 && job_state_parse(f, &dummy) != 0) {
		name = "state";
		why = "is not a job state (pending, scheduled, running, succeeded, failed, "
		      "cancelled, lost, active, done, all)";
	} else if (l && parse_i64(l, 1, 100000, &q->limit)) {
		name = "limit";
		why = "must be an integer from 1 to 100000";
	} else if (a && parse_i64(a, 1, INT64_MAX, &q->array)) {
		name = "array";
		why = "must be an array's job id";
	} else if (x && (!a || parse_i64(x, 0, INT64_MAX, &q->index))) {
		name = "index";
		why = "must be an array index (0 or more), with 'array'";
	} else if (g && strcmp(g, "arrays") != 0 && strcmp(g, "none") != 0) {
		name = "group";
		why = "must be 'arrays' (each array as one entry) or 'none'";
	}
	if (name) {
		char msg[256];
		snprintf(msg, sizeof(msg), "query '%s': '%.40s' %s", name, httpd_query(req, name),
		         why);
		httpd_error(req, ERR_INVALID, msg);
		return -1;
	}
	q->group = g && strcmp(g, "arrays") == 0;
	return 0;
}

static void jobs_list(struct server *s, struct httpd_req *req)
{
	req->route = "jobs_list";
	struct state_jobs_query q;
	if (jobs_query(req, &q))
		return;
	struct state *st = &s->state;
	state_lock(st);
	json_t *answer = state_jobs_json(st, &q);
	state_unlock(st);
	api_send_json(req, 200, answer);
}

enum job_verb { JOB_GET, JOB_CANCEL, JOB_WHY };

/* POST /v1/jobs/ID/cancel?array=1 where ID is an array's: every member,
 * in one transaction; the answer counts them. */
static void cancel_array(struct state *st, struct httpd_req *req, struct job *first)
{
	struct state_array_cancel c;
	int rc = state_cancel_array(st, first, &c);
	if (rc) {
		httpd_error(req, rc, "cannot cancel the array's members");
		return;
	}
	if (api_flush_or_fail(st, req))
		return;
	json_t *counts =
	        json_pack("{s:I,s:I,s:I,s:I,s:I}", "id", (json_int_t)first->id, "members",
	                  (json_int_t)c.members, "cancelled", (json_int_t)c.cancelled, "stopping",
	                  (json_int_t)c.stopping, "ended", (json_int_t)c.ended);
	api_send_json(req, 200,
	              json_pack("{s:o,s:o}", "job", state_job_json(st, first, 1), "array", counts));
}

static void job_get(struct server *s, struct httpd_req *req, int64_t id, enum job_verb verb)
{
	static const char *const routes[] = {"jobs_get", "jobs_cancel", "jobs_why"};
	req->route = routes[verb];
	/* ?array=1: ID names its whole array when it is one's (as anvil cancel
	 * takes it); else the job alone */
	const char *a = httpd_query(req, "array");
	int whole = a && strcmp(a, "1") == 0;
	struct state *st = &s->state;
	state_lock(st);
	struct job *j = state_job(st, id);
	if (!j) {
		char msg[64];
		snprintf(msg, sizeof(msg), "no job %lld", (long long)id);
		httpd_error(req, ERR_NOTFOUND, msg);
	} else if (verb == JOB_CANCEL && whole && j->array_id == j->id) {
		cancel_array(st, req, j);
	} else if (verb != JOB_CANCEL ||
	           (state_cancel(st, j) == 0 && api_flush_or_fail(st, req) == 0)) {
		if (verb == JOB_WHY)
			state_schedule_estimate(st, j);
		api_send_json(req, 200, json_pack("{s:o}", "job", state_job_json(st, j, 1)));
	}
	state_unlock(st);
}

/* What GET /v1/jobs/ID/logs asks for. */
struct log_query {
	int64_t rank, offset, limit;
	int64_t tail;       /* > 0: the last tail lines instead of from offset */
	int64_t attempt;    /* number; 0: the latest */
	const char *stream; /* "stdout" or "stderr" */
};

struct log_source {
	char url[600];
	char secret[65];
	char job_state[16];
	int64_t attempt; /* the number served; 0: none yet */
	int has_rank;
};

static int find_log_source(struct state *st, int64_t id, const struct log_query *q,
                           struct log_source *src, char *err, size_t errlen)
{
	struct job *j = state_job(st, id);
	if (!j) {
		snprintf(err, errlen, "no job %lld", (long long)id);
		return ERR_NOTFOUND;
	}
	snprintf(src->job_state, sizeof(src->job_state), "%s", job_state_name(j->state));
	if (q->rank >= j->nodes) {
		snprintf(err, errlen, "query 'rank': job %lld has ranks 0 to %d", (long long)id,
		         j->nodes - 1);
		return ERR_INVALID;
	}
	if (q->attempt > j->nattempts) {
		snprintf(err, errlen, "query 'attempt': job %lld has %d attempt(s)", (long long)id,
		         j->nattempts);
		return ERR_NOTFOUND;
	}
	if (!j->nattempts)
		return 0; /* nothing ran yet: empty log */
	const struct attempt *a = j->attempts[q->attempt ? q->attempt - 1 : j->nattempts - 1];
	src->attempt = a->number;
	const struct rank *k = &a->ranks[q->rank];
	struct node *n = state_node(st, k->node_id);
	if (!n || !n->agent_url[0] || k->state == RANK_ASSIGNED)
		return 0;
	int len = snprintf(src->url, sizeof(src->url),
	                   "%s/v1/logs?attempt=%lld&rank=%lld&stream=%s&limit=%lld", n->agent_url,
	                   (long long)a->id, (long long)q->rank, q->stream, (long long)q->limit);
	if (len > 0 && (size_t)len < sizeof(src->url))
		snprintf(src->url + len, sizeof(src->url) - (size_t)len, "&%s=%lld",
		         q->tail ? "tail" : "offset", (long long)(q->tail ? q->tail : q->offset));
	snprintf(src->secret, sizeof(src->secret), "%s", n->secret);
	src->has_rank = 1;
	return 0;
}

static int log_params(struct httpd_req *req, struct log_query *q)
{
	const char *r = httpd_query(req, "rank"), *o = httpd_query(req, "offset");
	const char *l = httpd_query(req, "limit"), *t = httpd_query(req, "tail");
	const char *a = httpd_query(req, "attempt"), *s = httpd_query(req, "stream");
	const char *msg = NULL;
	if (r && parse_i64(r, 0, 1023, &q->rank))
		msg = "query 'rank': must be an integer from 0 to 1023";
	else if (o && parse_i64(o, 0, INT64_MAX / 2, &q->offset))
		msg = "query 'offset': must be a non-negative integer";
	else if (l && parse_i64(l, 1, LOG_LIMIT_MAX, &q->limit))
		msg = "query 'limit': must be an integer from 1 to 1048576";
	else if (t && parse_i64(t, 1, LOG_TAIL_MAX, &q->tail))
		msg = "query 'tail': must be an integer from 1 to 100000 (lines)";
	else if (t && o)
		msg = "query 'tail': not with 'offset' (the last lines, or from an offset)";
	else if (a && parse_i64(a, 1, INT32_MAX, &q->attempt))
		msg = "query 'attempt': must be an attempt number from 1";
	else if (s && strcmp(s, "stdout") != 0 && strcmp(s, "stderr") != 0)
		msg = "query 'stream': must be stdout or stderr";
	if (s && !msg)
		q->stream = s;
	if (msg)
		httpd_error(req, ERR_INVALID, msg);
	return msg ? ERR_INVALID : 0;
}

/* Proxies to the agent of the rank's node, outside the state lock. */
static void job_logs(struct server *s, struct httpd_req *req, int64_t id)
{
	req->route = "jobs_logs";
	struct log_query q = {.limit = LOG_LIMIT_MAX, .stream = "stdout"};
	if (log_params(req, &q))
		return;
	struct log_source src = {0};
	char err[160];
	state_lock(&s->state);
	int rc = find_log_source(&s->state, id, &q, &src, err, sizeof(err));
	state_unlock(&s->state);
	if (rc) {
		httpd_error(req, rc, err);
		return;
	}
	char next[32], num[24];
	httpd_add_header(req, "X-Anvil-Job-State", src.job_state);
	snprintf(num, sizeof(num), "%lld", (long long)src.attempt);
	httpd_add_header(req, "X-Anvil-Attempt", num);
	req->content_type = "text/plain; charset=utf-8";
	if (!src.has_rank) {
		snprintf(next, sizeof(next), "%lld", (long long)q.offset);
		httpd_add_header(req, "X-Anvil-Next-Offset", next);
		return;
	}
	struct httpc *c = httpc_new();
	int status = 0;
	rc = httpc_do(c, "GET", src.url, src.secret, NULL, 0, 10000, &status, &req->out);
	if (rc || status != 200) {
		char msg[300];
		snprintf(msg, sizeof(msg), "the node's agent did not serve the log: %s",
		         rc ? httpc_error(c) : (req->out.data ? req->out.data : "?"));
		httpd_error(req, status == 404 ? ERR_NOTFOUND : ERR_UPSTREAM, msg);
	} else {
		/* The agent says where a tail ended; an offset read ends len on. */
		if (!httpc_header(c, "X-Anvil-Next-Offset", next, sizeof(next)))
			snprintf(next, sizeof(next), "%lld",
			         (long long)q.offset + (long long)req->out.len);
		httpd_add_header(req, "X-Anvil-Next-Offset", next);
	}
	httpc_free(c);
}

static const struct jv_field queue_fields[] = {
        {"name", JV_STRING, 1, 1, 63},
        {"priority", JV_INT, 0, -1000, 1000},
        {"weight", JV_INT, 0, 1, 1000},
        {"borrowing", JV_BOOL, 0, 0, 0},
        {"default_time_limit_ms", JV_INT, 0, 1000, 366LL * 24 * 3600 * 1000},
        {"idle_timeout_ms", JV_INT, 0, 0, 366LL * 24 * 3600 * 1000},
        {"run_as_root", JV_BOOL, 0, 0, 0},
        {"quotas", JV_OBJECT, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static int check_quotas(const json_t *quotas, char *err, size_t errlen)
{
	const char *team;
	json_t *v;
	json_object_foreach ((json_t *)quotas, team, v) {
		if (!*team || strlen(team) > 63) {
			snprintf(err, errlen, "field 'quotas': team names are 1 to 63 characters");
			return ERR_INVALID;
		}
		if (!json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		                         json_integer_value(v) > 1000000)) {
			snprintf(err, errlen,
			         "field 'quotas.%s': must be a GPU count from 0 to 1000000 (or "
			         "null to "
			         "remove it)",
			         team);
			return ERR_INVALID;
		}
	}
	return 0;
}

static void queues(struct server *s, struct httpd_req *req)
{
	req->route = "queues";
	struct state *st = &s->state;
	json_t *body = NULL;
	char err[256];
	if (strcmp(req->method, "POST") == 0 && !(body = api_body(req, queue_fields)))
		return;
	if (body && check_quotas(json_object_get(body, "quotas"), err, sizeof(err))) {
		httpd_error(req, ERR_INVALID, err);
		json_decref(body);
		return;
	}
	state_lock(st);
	int rc = body ? state_put_queue(st, body, err, sizeof(err)) : 0;
	if (rc) {
		httpd_error(req, rc, rc == ERR_INVALID ? err : "cannot persist the queue");
	} else if (!body || api_flush_or_fail(st, req) == 0) {
		if (body)
			state_schedule(st); /* new quotas may let jobs start */
		json_t *arr = json_array();
		for (int i = 0; i < st->nqueues; i++)
			json_array_append_new(arr, state_queue_json(st, &st->queues[i]));
		json_t *teams = json_array();
		for (int i = 0; i < st->nteams; i++)
			json_array_append_new(teams, state_team_json(st, &st->teams[i]));
		state_flush(st);
		api_send_json(req, 200, json_pack("{s:o,s:o}", "queues", arr, "teams", teams));
	}
	state_unlock(st);
	json_decref(body);
}

static const struct jv_field team_fields[] = {
        {"name", JV_STRING, 1, 1, 63},
        {"weight", JV_INT, 1, 1, 1000},
        {NULL, 0, 0, 0, 0},
};

static void teams(struct server *s, struct httpd_req *req)
{
	req->route = "teams";
	struct state *st = &s->state;
	json_t *body = NULL;
	if (strcmp(req->method, "POST") == 0 && !(body = api_body(req, team_fields)))
		return;
	state_lock(st);
	if (body && state_put_team(st, jv_str(body, "name", ""), (int)jv_int(body, "weight", 1))) {
		httpd_error(req, -EIO, "cannot persist the team");
	} else {
		json_t *arr = json_array();
		for (int i = 0; i < st->nteams; i++)
			json_array_append_new(arr, state_team_json(st, &st->teams[i]));
		api_send_json(req, 200, json_pack("{s:o}", "teams", arr));
	}
	state_unlock(st);
	json_decref(body);
}

static void events(struct server *s, struct httpd_req *req)
{
	req->route = "events";
	int64_t limit = 100, job = 0;
	const char *l = httpd_query(req, "limit"), *j = httpd_query(req, "job");
	if ((l && parse_i64(l, 1, 10000, &limit)) || (j && parse_i64(j, 1, INT64_MAX, &job))) {
		httpd_error(req, ERR_INVALID,
		            "query 'limit' must be 1 to 10000 and 'job' a positive job id");
		return;
	}
	state_lock(&s->state);
	state_flush(&s->state);
	json_t *arr = state_events(&s->state, (int)limit, job);
	state_unlock(&s->state);
	if (!arr)
		httpd_error(req, -EIO, "cannot read the event log");
	else
		api_send_json(req, 200, json_pack("{s:o}", "events", arr));
}

/* Routes under /v1/jobs. */
static void route_jobs(struct server *s, struct httpd_req *req, const char *rest)
{
	int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
	if (!*rest) {
		if (post)
			jobs_submit(s, req);
		else if (get)
			jobs_list(s, req);
		else
			httpd_error(req, ERR_NOTFOUND, "use GET or POST on /v1/jobs");
		return;
	}
	const char *slash = strchr(rest + 1, '/');
	size_t idlen = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
	int64_t id = api_path_id(rest + 1, idlen);
	const char *tail = slash ? slash : "";
	if (!id) {
		httpd_error(req, ERR_INVALID, "job id: must be a positive integer");
	} else if (!*tail && get) {
		job_get(s, req, id, JOB_GET);
	} else if (strcmp(tail, "/cancel") == 0 && post) {
		job_get(s, req, id, JOB_CANCEL);
	} else if (strcmp(tail, "/why") == 0 && get) {
		job_get(s, req, id, JOB_WHY);
	} else if (strcmp(tail, "/logs") == 0 && get) {
		job_logs(s, req, id);
	} else if ((strcmp(tail, "/attach") == 0 || strcmp(tail, "/exec") == 0) && post) {
		api_stream(s, req, id, strcmp(tail, "/exec") == 0);
	} else {
		httpd_error(req, ERR_NOTFOUND, "no such route");
	}
}

int server_handle(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	const char *p = req->path;
	int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
	if (get && strcmp(p, "/healthz") == 0) {
		req->route = "healthz";
		httpd_json(req, 200, "{\"status\":\"ok\"}");
		return HTTPD_DONE;
	}
	if (get && strcmp(p, "/metrics") == 0) {
		req->route = "metrics";
		req->content_type = "text/plain; version=0.0.4";
		server_metrics(s, &req->out);
		return HTTPD_DONE;
	}
	if (post && strcmp(p, "/v1/agent/register") == 0)
		return agentproto_register(s, req);
	if (post && strcmp(p, "/v1/agent/sync") == 0)
		return agentproto_sync(s, req);
	if (strncmp(p, "/v1/", 4) != 0) {
		httpd_error(req, ERR_NOTFOUND, "no such route");
		return HTTPD_DONE;
	}
	/* Objects check their own credentials: an attempt's exec token may
	 * touch some of them (api_objects.c). */
	if (strncmp(p, "/v1/objects/", 12) == 0) {
		api_objects(s, req, p + 12);
		return HTTPD_DONE;
	}
	/* The one call that also takes a narrower credential: exec into the
	 * ranks of an MPI job's own attempt, with that attempt's token. */
	if (!api_token_ok(req, s->admin_token) &&
	    (api_stream_by_exec_token(s, req) || api_flows_by_exec_token(s, req)))
		return HTTPD_DONE;
	if (!admin_ok(s, req))
		return HTTPD_DONE;
	int64_t wait_id = strncmp(p, "/v1/jobs/", 9) == 0 && strcmp(req->method, "GET") == 0 &&
	                                  httpd_query(req, "wait_ms")
	                          ? api_path_id(p + 9, strlen(p + 9))
	                          : 0;
	if (wait_id) /* a job's long poll: GET /v1/jobs/ID?wait_ms=N&while=STATE */
		return api_job_wait(s, req, wait_id);
	if (strncmp(p, "/v1/jobs", 8) == 0 && (p[8] == '\0' || p[8] == '/'))
		route_jobs(s, req, p + 8);
	else if (strncmp(p, "/v1/nodes", 9) == 0 && (p[9] == '\0' || p[9] == '/'))
		api_nodes(s, req, p + 9);
	else if (strncmp(p, "/v1/join-token", 14) == 0 && (p[14] == '\0' || p[14] == '/'))
		api_join_token(s, req, p + 14);
	else if (strncmp(p, "/v1/workflows", 13) == 0 && (p[13] == '\0' || p[13] == '/'))
		api_flows(s, req, p + 13);
	else if (strncmp(p, "/v1/fleet/", 10) == 0)
		api_fleet(s, req, p + 9);
	else if (get && strcmp(p, "/v1/lineage") == 0)
		api_lineage(s, req);
	else if ((get || post) && strcmp(p, "/v1/queues") == 0)
		queues(s, req);
	else if ((get || post) && strcmp(p, "/v1/teams") == 0)
		teams(s, req);
	else if (get && strcmp(p, "/v1/events") == 0)
		events(s, req);
	else
		httpd_error(req, ERR_NOTFOUND, "no such route");
	return HTTPD_DONE;
}
