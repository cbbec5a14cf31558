/* api_nodes.c - /v1/nodes: list, show, labels and pools, cordon / drain /
 * uncordon, reset and approve, and the node check (proxied to the node's
 * agent); /v1/join-token: the token that admits new nodes. */
#include <pthread.h>
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

#define CHECK_TIMEOUT_MS 300000 /* a compute check on every GPU may take minutes */
#define AGENT_BUSY_TRIES 30     /* 100 ms apart */

static struct node *find_node(struct state *st, const char *name)
{
	struct node *n = state_node_by_name(st, name);
	return n ? n : state_node(st, api_path_id(name, strlen(name)));
}

static void nodes_list(struct server *s, struct httpd_req *req)
{
	req->route = "nodes_list";
	struct state *st = &s->state;
	state_lock(st);
	json_t *arr = json_array();
	for (int i = 0; i < st->nnodes; i++)
		json_array_append_new(arr, state_node_json(st, st->nodes[i], 0));
	state_unlock(st);
	api_send_json(req, 200, json_pack("{s:o}", "nodes", arr));
}

static void no_node(struct httpd_req *req, const char *name)
{
	char msg[128];
	snprintf(msg, sizeof(msg), "no node named '%.64s'", name);
	httpd_error(req, ERR_NOTFOUND, msg);
}

static void node_get(struct server *s, struct httpd_req *req, const char *name)
{
	req->route = "nodes_get";
	struct state *st = &s->state;
	state_lock(st);
	struct node *n = find_node(st, name);
	if (n)
		api_send_json(req, 200, json_pack("{s:o}", "node", state_node_json(st, n, 1)));
	else
		no_node(req, name);
	state_unlock(st);
}

static const struct jv_field node_fields[] = {
        {"labels", JV_OBJECT, 0, 0, 0}, {"pool", JV_STRING, 0, 0, 63},
        {"state", JV_STRING, 0, 1, 16}, {"reason", JV_STRING, 0, 0, 200},
        {"force", JV_BOOL, 0, 0, 0},    {NULL, 0, 0, 0, 0},
};

static int check_labels(const struct node *n, const json_t *labels, char *err, size_t errlen)
{
	const char *k;
	json_t *v;
	size_t count = json_object_size(n->labels);
	json_object_foreach ((json_t *)labels, k, v) {
		if (!*k || strlen(k) > 63 || strchr(k, '=') ||
		    !(json_is_null(v) || (json_is_string(v) && json_string_length(v) <= 63))) {
			snprintf(err, errlen,
			         "field 'labels.%.64s': keys are 1-63 characters without '=', "
			         "values "
			         "strings of at most 63 characters (null removes the label)",
			         k);
			return ERR_INVALID;
		}
		int had = n->labels && json_object_get(n->labels, k);
		if (json_is_null(v) && had)
			count--;
		else if (!json_is_null(v) && !had)
			count++;
	}
	if (count > 8) {
		snprintf(err, errlen,
		         "field 'labels': a node carries at most 8 labels (this makes %zu)", count);
		return ERR_INVALID;
	}
	return 0;
}

/* The admin state a "state" value asks for, or ERR_INVALID / ERR_CONFLICT. */
static int target_state(const struct node *n, const json_t *body, enum node_state *to, char *err,
                        size_t errlen)
{
	const char *want = jv_str(body, "state", NULL);
	if (n->admin == NODE_AWAITING) {
		snprintf(err, errlen,
		         "field 'state': node %s is awaiting approval; approve it first (anvil "
		         "node approve %s, POST /v1/nodes/%s/approve)",
		         n->name, n->name, n->name);
		return ERR_CONFLICT;
	}
	if (strcmp(want, "ready") == 0)
		*to = NODE_READY;
	else if (strcmp(want, "cordoned") == 0)
		*to = NODE_CORDONED;
	else if (strcmp(want, "draining") == 0 || strcmp(want, "drained") == 0)
		*to = NODE_DRAINING;
	else {
		snprintf(err, errlen, "field 'state': '%.16s' is not ready, cordoned or draining",
		         want);
		return ERR_INVALID;
	}
	const char *fault = state_node_fault(n);
	if (*to == NODE_READY && fault && !jv_bool(body, "force", 0)) {
		snprintf(err, errlen,
		         "field 'state': node %s still reports a fault (%.160s); it stays out of "
		         "service until its agent stops reporting it (reboot or repair, then "
		         "'anvil node check'), or pass force",
		         n->name, fault);
		return ERR_CONFLICT;
	}
	return 0;
}

static int node_update(struct state *st, struct node *n, const json_t *body, char *err,
                       size_t errlen)
{
	enum node_state to = n->admin;
	int rc = 0;
	const json_t *labels = json_object_get(body, "labels");
	if (json_object_get(body, "state"))
		rc = target_state(n, body, &to, err, errlen);
	if (rc == 0 && labels)
		rc = check_labels(n, labels, err, errlen);
	if (rc)
		return rc; /* nothing applied */
	state_node_relabel(st, n, labels, jv_str(body, "pool", NULL),
	                   json_object_get(body, "pool") != NULL);
	if (labels || json_object_get(body, "pool")) {
		char *text = jv_dump(body);
		state_event(st, "node.changed", 0, n->id, "node %s: %s", n->name, text);
		free(text);
	}
	if (json_object_get(body, "state") &&
	    (to != n->admin || strcmp(jv_str(body, "reason", ""), n->admin_reason) != 0))
		state_node_set_admin(st, n, to, jv_str(body, "reason", ""), 0);
	return 0;
}

static void node_post(struct server *s, struct httpd_req *req, const char *name)
{
	req->route = "nodes_update";
	json_t *body = api_body(req, node_fields);
	if (!body)
		return;
	struct state *st = &s->state;
	char err[400];
	state_lock(st);
	struct node *n = find_node(st, name);
	int rc = n ? node_update(st, n, body, err, sizeof(err)) : ERR_NOTFOUND;
	if (rc == ERR_NOTFOUND)
		snprintf(err, sizeof(err), "no node named '%.64s'", name);
	if (rc) {
		httpd_error(req, rc, err);
	} else if (api_flush_or_fail(st, req) == 0) {
		state_settle(st);
		state_flush(st);
		api_send_json(req, 200, json_pack("{s:o}", "node", state_node_json(st, n, 1)));
	}
	state_unlock(st);
	json_decref(body);
}

static const struct jv_field check_fields[] = {
        {"gpus", JV_INT, 0, 0, 64},
        {"gpu_model", JV_STRING, 0, 1, 95},
        {"driver_version", JV_STRING, 0, 1, 63},
        {NULL, 0, 0, 0, 0},
};

/* What the node is expected to have: the body's values, else its fleet
 * profile's, else what the server recorded of it (its GPU count and
 * model). */
static json_t *expectations(const struct node *n, const json_t *body)
{
	json_t *e = json_deep_copy(body);
	json_t *profile = state_node_expectations(n);
	const char *k;
	json_t *v;
	json_object_foreach (profile, k, v)
		if (!json_object_get(e, k))
			json_object_set(e, k, v);
	json_decref(profile);
	if (!json_object_get(e, "gpus"))
		json_object_set_new(e, "gpus", json_integer(n->ngpus));
	if (!json_object_get(e, "gpu_model") && n->ngpus && n->gpus[0].model[0])
		json_object_set_new(e, "gpu_model", json_string(n->gpus[0].model));
	return e;
}

/* Sends payload (taken) to node node_id's agent at path and collects the
 * answer: 0 with its status and body; ERR_NOTFOUND or ERR_UPSTREAM with
 * why in err. Outside the state lock: the agent may take minutes. */
static int agent_post(struct server *s, int64_t node_id, const char *path, json_t *payload,
                      int64_t timeout_ms, int *status, struct buf *out, char *err, size_t errlen)
{
	struct state *st = &s->state;
	char url[512] = "", secret[65] = "";
	state_lock(st);
	struct node *n = state_node(st, node_id);
	if (n) {
		snprintf(url, sizeof(url), "%s%s", n->agent_url, path);
		snprintf(secret, sizeof(secret), "%s", n->secret);
	}
	int unreachable = n && (n->state == NODE_LOST || !n->agent_url[0]);
	state_unlock(st);
	if (!n || unreachable) {
		snprintf(err, errlen, "%s",
		         !n ? "no such node" : "the node's agent is not reachable (lost)");
		json_decref(payload);
		return !n ? ERR_NOTFOUND : ERR_UPSTREAM;
	}
	char *text = jv_dump(payload);
	json_decref(payload);
	struct httpc *c = httpc_new();
	int rc;
	/* 503: the agent is still registering (it has no secret yet) */
	for (int tries = 0;; tries++) {
		out->len = 0;
		rc = httpc_do(c, "POST", url, secret, text, strlen(text), timeout_ms, status, out);
		if (rc || *status != 503 || tries == AGENT_BUSY_TRIES)
			break;
		sleep_ms(100);
	}
	if (rc)
		snprintf(err, errlen, "the node's agent did not answer: %s", httpc_error(c));
	free(text);
	httpc_free(c);
	return rc ? ERR_UPSTREAM : 0;
}

/* Sends payload (taken) to the node's agent at path and returns its JSON
 * object answer, or NULL after answering the request with the error
 * itself. */
static json_t *agent_call(struct server *s, struct httpd_req *req, const char *name,
                          const char *path, json_t *payload, int64_t timeout_ms)
{
	state_lock(&s->state);
	struct node *n = find_node(&s->state, name);
	int64_t id = n ? n->id : 0;
	state_unlock(&s->state);
	if (!id) {
		json_decref(payload);
		no_node(req, name);
		return NULL;
	}
	int status = 0;
	char err[300];
	struct buf out;
	buf_init(&out);
	int rc = agent_post(s, id, path, payload, timeout_ms, &status, &out, err, sizeof(err));
	json_t *result = rc == 0 ? json_loadb(out.data, out.len, 0, NULL) : NULL;
	if (rc) {
		httpd_error(req, rc, err);
	} else if (status != 200 && json_is_object(result)) {
		/* the agent's own error (e.g. a bad fault object): pass it on */
		req->status = status;
		req->content_type = "application/json";
		buf_add(&req->out, out.data, out.len);
		json_decref(result);
		result = NULL;
	} else if (!json_is_object(result)) {
		httpd_error(req, ERR_UPSTREAM,
		            "the node's agent did not answer: not a JSON object");
		json_decref(result);
		result = NULL;
	}
	buf_cleanup(&out);
	return result;
}

int api_nodes_check(struct server *s, int64_t node_id, json_t *expect, json_t **result, char *err,
                    size_t errlen)
{
	int status = 0;
	struct buf out;
	buf_init(&out);
	int rc = agent_post(s, node_id, "/v1/check", expect, CHECK_TIMEOUT_MS, &status, &out, err,
	                    errlen);
	json_t *r = rc == 0 ? json_loadb(out.data, out.len, 0, NULL) : NULL;
	if (rc == 0 && (status != 200 || !json_is_object(r))) {
		snprintf(err, errlen, "the node's agent answered the check with HTTP %d%s", status,
		         json_is_object(r) ? "" : " and no JSON object");
		rc = ERR_UPSTREAM;
	}
	buf_cleanup(&out);
	if (rc)
		json_decref(r);
	else
		*result = r;
	return rc;
}

int api_nodes_converge(struct server *s, int64_t node_id, const char *hash, char *err,
                       size_t errlen)
{
	int status = 0;
	struct buf out;
	buf_init(&out);
	json_t *body = json_pack("{s:s}", "hash", hash);
	int rc = agent_post(s, node_id, "/v1/profile/converge", body, 10000, &status, &out, err,
	                    errlen);
	if (rc == 0 && status != 202 && status != 200) {
		snprintf(err, errlen, "the node's agent answered HTTP %d: %.200s", status,
		         out.data ? out.data : "");
		rc = ERR_UPSTREAM;
	}
	buf_cleanup(&out);
	return rc;
}

void api_nodes_check_text(const json_t *result, char *out, size_t len)
{
	size_t used = 0, i;
	json_t *c;
	out[0] = '\0';
	json_array_foreach (json_object_get(result, "checks"), i, c) {
		if (jv_bool(c, "ok", 1) || used + 1 >= len)
			continue;
		used += (size_t)text_printf(out + used, len - used, "%s%s: %s", used ? "; " : "",
		                            jv_str(c, "name", "?"), jv_str(c, "detail", ""));
	}
	if (!out[0])
		text_printf(out, len, "%s", jv_str(result, "summary", ""));
}

static void record(struct server *s, const char *name, const char *kind, const char *what)
{
	struct state *st = &s->state;
	state_lock(st);
	struct node *n = find_node(st, name);
	if (n) {
		state_event(st, kind, 0, n->id, "node %s %s", n->name, what);
		state_flush(st);
	}
	state_unlock(st);
}

/* POST /v1/nodes/NAME/check: the agent runs the checks (agent/gpuwatch.h);
 * the verdict is recorded as an event. A check of a node's fleet profile
 * (no expectations of its own given) is also the profile's validation. */
static void node_check(struct server *s, struct httpd_req *req, const char *name)
{
	req->route = "nodes_check";
	json_t *body = api_body(req, check_fields);
	if (!body)
		return;
	state_lock(&s->state);
	struct node *n = find_node(&s->state, name);
	json_t *expect = n ? expectations(n, body) : json_incref(body);
	char hash[72] = "";
	int64_t id = n ? n->id : 0;
	if (n && n->profile && json_object_size(body) == 0)
		snprintf(hash, sizeof(hash), "%s", jv_str(n->profile, "hash", ""));
	state_unlock(&s->state);
	json_decref(body);
	json_t *result = agent_call(s, req, name, "/v1/check", expect, CHECK_TIMEOUT_MS);
	if (!result)
		return;
	char what[200];
	snprintf(what, sizeof(what), "check %s: %s", jv_bool(result, "ok", 0) ? "passed" : "failed",
	         jv_str(result, "summary", ""));
	record(s, name, "node.check", what);
	if (hash[0]) {
		char text[200];
		api_nodes_check_text(result, text, sizeof(text));
		state_lock(&s->state);
		state_node_checked(&s->state, id, hash, jv_bool(result, "ok", 0), text, 0);
		state_flush(&s->state);
		state_unlock(&s->state);
	}
	api_send_json(req, 200, result);
}

/* POST /v1/nodes/NAME/faults: a simulated fault (gpu/sim.h), checked by
 * the agent, which refuses it on real hardware. */
static void node_fault(struct server *s, struct httpd_req *req, const char *name)
{
	req->route = "nodes_fault";
	char err[256];
	json_t *body = NULL;
	if (jv_parse_object(req->body, req->body_len, &body, err, sizeof(err))) {
		httpd_error(req, ERR_INVALID, err);
		return;
	}
	char *text = jv_dump(body);
	json_t *result = agent_call(s, req, name, "/v1/gpu/faults", body, 10000);
	if (result) {
		char what[300];
		snprintf(what, sizeof(what), "simulated fault injected: %.250s", text);
		record(s, name, "node.fault_injected", what);
		api_send_json(req, 200, result);
	}
	free(text);
}

/* POST /v1/nodes/NAME/reset and /approve: the node's identity and its
 * admission (server/nodes.c, "registration"). */
static void node_identity(struct server *s, struct httpd_req *req, const char *name, int reset)
{
	static const struct jv_field none[] = {{NULL, 0, 0, 0, 0}};
	req->route = reset ? "nodes_reset" : "nodes_approve";
	json_t *body = req->body_len ? api_body(req, none) : NULL; /* none, or {} */
	if (req->body_len && !body)
		return;
	json_decref(body);
	struct state *st = &s->state;
	char err[300];
	int rc = 0;
	state_lock(st);
	struct node *n = find_node(st, name);
	if (!n) {
		no_node(req, name);
	} else {
		if (reset) {
			api_poll_drop(n, "the node was reset by an admin: its secret is revoked");
			state_node_reset(st, n);
		} else
			rc = state_node_approve(st, n, err, sizeof(err));
		if (rc)
			httpd_error(req, rc, err);
		else
			state_settle(st);
	}
	if (n && rc == 0 && api_flush_or_fail(st, req) == 0)
		api_send_json(req, 200, json_pack("{s:o}", "node", state_node_json(st, n, 1)));
	state_unlock(st);
}

static const struct jv_field rotate_fields[] = {
        {"ttl_ms", JV_INT, 0, 0, JOINTOKEN_TTL_MAX_MS},
        {NULL, 0, 0, 0, 0},
};

/* GET /v1/join-token: the token and its expiry; POST /v1/join-token/rotate
 * {"ttl_ms"}: a new one (the old one refused from now on). */
void api_join_token(struct server *s, struct httpd_req *req, const char *rest)
{
	int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
	json_t *body = NULL;
	char err[300];
	int rc = 0;
	if (get && !*rest) {
		req->route = "join_token_get";
	} else if (post && strcmp(rest, "/rotate") == 0) {
		req->route = "join_token_rotate";
		body = req->body_len ? api_body(req, rotate_fields) : json_object();
		if (!body)
			return;
	} else {
		httpd_error(req, ERR_NOTFOUND,
		            "use GET /v1/join-token or POST /v1/join-token/rotate");
		return;
	}
	int64_t now = wall_ms();
	pthread_mutex_lock(&s->join_mu);
	if (body)
		rc = jointoken_rotate(s->state_dir, &s->join,
		                      jv_int(body, "ttl_ms", s->join_ttl_ms), now, err,
		                      sizeof(err));
	json_t *view = rc ? NULL : jointoken_json(&s->join, now);
	pthread_mutex_unlock(&s->join_mu);
	if (rc) {
		log_error("join token rotation failed: %s", err);
		httpd_error(req, rc, err);
	} else {
		if (body) {
			log_info("join token rotated expires_ms=%lld",
			         (long long)jv_int(view, "expires_ms", 0));
			state_lock(&s->state);
			state_event(&s->state, "join_token.rotated", 0, 0,
			            "the join token was rotated; the old one is refused");
			state_flush(&s->state);
			state_unlock(&s->state);
		}
		api_send_json(req, 200, view);
	}
	json_decref(body);
}

void api_nodes(struct server *s, struct httpd_req *req, const char *rest)
{
	int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
	if (!*rest || strcmp(rest, "/") == 0) {
		if (get)
			nodes_list(s, req);
		else
			httpd_error(req, ERR_NOTFOUND, "use GET on /v1/nodes");
		return;
	}
	char name[80];
	const char *seg = rest + 1, *slash = strchr(seg, '/');
	size_t len = slash ? (size_t)(slash - seg) : strlen(seg);
	if (len == 0 || len >= sizeof(name)) {
		httpd_error(req, ERR_INVALID, "node name: 1 to 63 characters");
		return;
	}
	memcpy(name, seg, len);
	name[len] = '\0';
	const char *tail = slash ? slash : "";
	if (!*tail && get)
		node_get(s, req, name);
	else if (!*tail && post)
		node_post(s, req, name);
	else if (strcmp(tail, "/check") == 0 && post)
		node_check(s, req, name);
	else if (strcmp(tail, "/faults") == 0 && post)
		node_fault(s, req, name);
	else if ((strcmp(tail, "/reset") == 0 || strcmp(tail, "/approve") == 0) && post)
		node_identity(s, req, name, strcmp(tail, "/reset") == 0);
	else
		httpd_error(req, ERR_NOTFOUND, "no such route");
}
