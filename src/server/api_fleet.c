/* api_fleet.c - the fleet routes (docs/api.md, "Fleet"):
 *
 *   POST /v1/fleet/plan              a spec against the cluster: the plan
 *   POST /v1/fleet/apply             a spec, or a saved plan, carried out
 *   POST /v1/fleet/rollback          an earlier revision's spec, applied
 *   POST /v1/fleet/stop              the running rollout stops
 *   GET  /v1/fleet/revisions?limit=N the newest revisions
 *   GET  /v1/fleet/revisions/N       one, with its spec, plan and rollout
 *   GET  /v1/fleet/status            the revision, its rollout, each node
 *   GET  /v1/fleet/refresh           drift, without changing anything
 *
 * The admin token, as every /v1 route. The work is server/fleet.c's. Apply
 * and rollback take an Idempotency-Key (server/idem.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "server/fleet.h"
#include "server/server.h"

#define FLEET_ERR_MAX 8192 /* every error of a spec, joined */

static const struct jv_field plan_fields[] = {
        {"spec", JV_OBJECT, 1, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct jv_field apply_fields[] = {
        {"spec", JV_OBJECT, 0, 0, 0},    {"plan", JV_OBJECT, 0, 0, 0},
        {"who", JV_STRING, 0, 0, 63},    {"text", JV_STRING, 0, 0, 1 << 20},
        {"file", JV_STRING, 0, 0, 4096}, {NULL, 0, 0, 0, 0},
};

static const struct jv_field rollback_fields[] = {
        {"revision", JV_INT, 1, 1, INT64_MAX},
        {"who", JV_STRING, 0, 0, 63},
        {NULL, 0, 0, 0, 0},
};

static const struct jv_field stop_fields[] = {
        {"who", JV_STRING, 0, 0, 63},
        {NULL, 0, 0, 0, 0},
};

typedef int (*fleet_call)(struct state *st, const json_t *body, json_t **out, char *err,
                          size_t errlen);

/* A POST: the body checked against fields, then call; what it changed is
 * written before the answer is sent. keyed: it takes an Idempotency-Key
 * (server/idem.h): an apply and a rollback make a revision each. */
static void post(struct server *s, struct httpd_req *req, const struct jv_field *fields,
                 fleet_call call, int keyed)
{
	struct api_idem ik = {0};
	if (keyed && api_idem_begin(req, &ik, NULL))
		return;
	json_t *body = api_body(req, fields);
	if (!body)
		return;
	char *err = xmalloc(FLEET_ERR_MAX);
	err[0] = '\0';
	json_t *out = NULL;
	struct state *st = &s->state;
	state_lock(st);
	int rc = 0;
	if (api_idem_seen(st, req, &ik, NULL)) {
		; /* a repeat: answered */
	} else if ((rc = call(st, body, &out, err, FLEET_ERR_MAX))) {
		httpd_error(req, rc, err);
	} else {
		api_idem_answer(st, req, &ik, 200, out, 1);
		out = NULL;
	}
	state_unlock(st);
	json_decref(out);
	json_decref(body);
	free(err);
}

static void revisions(struct server *s, struct httpd_req *req, const char *rest)
{
	req->route = "fleet_revisions";
	int64_t limit = 100, id = 0;
	const char *l = httpd_query(req, "limit");
	if (l && parse_i64(l, 1, 10000, &limit)) {
		httpd_error(req, ERR_INVALID, "query 'limit' must be 1 to 10000");
		return;
	}
	if (*rest && !(id = api_path_id(rest + 1, strlen(rest + 1)))) {
		httpd_error(req, ERR_INVALID, "revision: must be a positive integer");
		return;
	}
	state_lock(&s->state);
	json_t *o = id ? fleet_revision(&s->state, id) : fleet_revisions(&s->state, (int)limit);
	state_unlock(&s->state);
	if (!o) {
		char msg[64];
		snprintf(msg, sizeof(msg), "no revision %lld", (long long)id);
		httpd_error(req, ERR_NOTFOUND, msg);
		return;
	}
	api_send_json(req, 200, json_pack("{s:o}", id ? "revision" : "revisions", o));
}

/* GET status and refresh: a view made under the lock. */
static void view(struct server *s, struct httpd_req *req, json_t *(*make)(struct state *st))
{
	state_lock(&s->state);
	json_t *o = make(&s->state);
	state_unlock(&s->state);
	api_send_json(req, 200, o);
}

void api_fleet(struct server *s, struct httpd_req *req, const char *rest)
{
	int get = strcmp(req->method, "GET") == 0, post_ = strcmp(req->method, "POST") == 0;
	if (post_ && strcmp(rest, "/plan") == 0) {
		req->route = "fleet_plan";
		post(s, req, plan_fields, fleet_plan_spec, 0);
	} else if (post_ && strcmp(rest, "/apply") == 0) {
		req->route = "fleet_apply";
		post(s, req, apply_fields, fleet_apply, 1);
	} else if (post_ && strcmp(rest, "/rollback") == 0) {
		req->route = "fleet_rollback";
		post(s, req, rollback_fields, fleet_rollback, 1);
	} else if (post_ && strcmp(rest, "/stop") == 0) {
		req->route = "fleet_stop";
		post(s, req, stop_fields, fleet_stop, 0);
	} else if (get &&
	           (strcmp(rest, "/revisions") == 0 || strncmp(rest, "/revisions/", 11) == 0)) {
		revisions(s, req, rest + 10);
	} else if (get && strcmp(rest, "/status") == 0) {
		req->route = "fleet_status";
		view(s, req, fleet_status);
	} else if (get && strcmp(rest, "/refresh") == 0) {
		req->route = "fleet_refresh";
		view(s, req, fleet_refresh);
	} else {
		httpd_error(req, ERR_NOTFOUND, "no such route");
	}
}
