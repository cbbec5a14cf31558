/* agentproto.c - /v1/agent/register and the level-triggered /v1/agent/sync
 * long poll. A node has at most one waiting poll (node->waiter); a newer
 * sync, a change to the node's desired set, or the deadline answers it. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "fleet/plan.h"
#include "proto/wire.h"
#include "server/server.h"

/* The facts (proto/wire.h, wire_facts or wire_register) with their GPUs
 * and RDMA ports. */
static int check_facts(const json_t *facts, const struct wire_record *r, char *err, size_t errlen)
{
	int rc = wire_check(facts, r, err, errlen);
	if (rc == 0)
		rc = wire_check_each(facts, "gpus", &wire_gpu, err, errlen);
	return rc ? rc : wire_check_each(facts, "rdma", &wire_rdma_port, err, errlen);
}

/* The GPU health report (wire_health), and what its tables cannot say:
 * that each finding's scope is one the server knows. */
static int check_health(const json_t *h, char *err, size_t errlen)
{
	char inner[220];
	int rc = wire_check(h, &wire_health, inner, sizeof(inner));
	const json_t *nf = json_object_get(h, "node");
	if (rc == 0)
		rc = wire_check_each(h, "gpus", &wire_gpu_health, inner, sizeof(inner));
	if (rc == 0)
		rc = wire_check_each(h, "findings", &wire_finding, inner, sizeof(inner));
	if (rc == 0 && json_is_object(nf))
		rc = wire_check(nf, &wire_node_fault, inner, sizeof(inner));
	enum node_fault_scope scope;
	size_t i;
	json_t *f;
	json_array_foreach (json_object_get(h, "findings"), i, f) {
		if (rc == 0 && node_fault_scope_parse(jv_str(f, "scope", ""), &scope)) {
			snprintf(
			        inner, sizeof(inner),
			        "findings[%zu]: field 'scope': '%.15s' is not warning, job, gpu or "
			        "node",
			        i, jv_str(f, "scope", ""));
			rc = ERR_INVALID;
		}
	}
	if (rc)
		snprintf(err, errlen, "health: %s", inner);
	return rc;
}

/* The profile status (wire_profile_status, its steps), and what its tables
 * cannot say: that its state and each step's status are words the server
 * knows. */
static int check_profile_status(const json_t *ps, char *err, size_t errlen)
{
	static const char *const statuses[] = {"ok", "changed", "failed", "skipped"};
	char inner[220];
	int rc = wire_check(ps, &wire_profile_status, inner, sizeof(inner));
	if (rc == 0)
		rc = wire_check_each(ps, "steps", &wire_profile_step, inner, sizeof(inner));
	if (rc == 0 && !fleet_status_state_ok(jv_str(ps, "state", ""))) {
		snprintf(inner, sizeof(inner),
		         "field 'state': '%.16s' is not converging, converged, failed or drifted",
		         jv_str(ps, "state", ""));
		rc = ERR_INVALID;
	}
	size_t i;
	json_t *step;
	json_array_foreach (json_object_get(ps, "steps"), i, step) {
		const char *st = jv_str(step, "status", "");
		int known = 0;
		for (size_t k = 0; k < sizeof(statuses) / sizeof(statuses[0]); k++)
			known |= strcmp(st, statuses[k]) == 0;
		if (rc == 0 && !known) {
			snprintf(
			        inner, sizeof(inner),
			        "steps[%zu]: field 'status': '%.16s' is not ok, changed, failed or "
			        "skipped",
			        i, st);
			rc = ERR_INVALID;
		}
	}
	if (rc)
		snprintf(err, errlen, "profile_status: %s", inner);
	return rc;
}

int agentproto_register(struct server *s, struct httpd_req *req)
{
	req->route = "agent_register";
	if (!api_token_ok(req, s->join_token)) {
		httpd_error(req, ERR_AUTH, "register needs the cluster's join token");
		return HTTPD_DONE;
	}
	char err[256];
	json_t *body = NULL;
	int rc = jv_parse_object(req->body, req->body_len, &body, err, sizeof(err));
	if (rc == 0)
		rc = check_facts(body, &wire_register, err, sizeof(err));
	if (rc) {
		httpd_error(req, rc, err);
		json_decref(body);
		return HTTPD_DONE;
	}
	struct state *st = &s->state;
	state_lock(st);
	struct node *n = state_register(st, body, jv_str(body, "name", ""));
	state_settle(st);
	rc = state_flush(st);
	if (rc) {
		httpd_error(req, rc, "cannot persist the registration");
	} else {
		json_t *o =
		        json_pack("{s:I,s:s}", "node_id", (json_int_t)n->id, "secret", n->secret);
		char *text = jv_dump(o);
		httpd_json(req, 200, text);
		free(text);
		json_decref(o);
		log_info("node registered node=%s id=%lld", n->name, (long long)n->id);
	}
	state_unlock(st);
	json_decref(body);
	return HTTPD_DONE;
}

static void answer(struct state *st, struct node *n, struct httpd_req *req)
{
	char *text = state_desired_text(st, n);
	httpd_json(req, 200, text);
	free(text);
}

/* Lock held. Answers the node's waiting poll, if any. */
void agentproto_wake(struct state *st, struct node *n)
{
	struct httpd_req *w = n->waiter;
	if (!w)
		return;
	n->waiter = NULL;
	n->last_seen_ms = now_ms();
	answer(st, n, w);
	httpd_resume(w);
}

void agentproto_expire(struct server *s, int64_t now)
{
	struct state *st = &s->state;
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		if (n->waiter && (now >= n->waiter_deadline_ms || s->stopping))
			agentproto_wake(st, n);
	}
}

void agentproto_release_all(struct server *s)
{
	state_lock(&s->state);
	s->stopping = 1;
	agentproto_expire(s, INT64_MAX);
	state_unlock(&s->state);
}

static int validate_sync(const json_t *body, char *err, size_t errlen)
{
	int rc = wire_check(body, &wire_sync_request, err, errlen);
	const json_t *facts = json_object_get(body, "facts");
	if (rc == 0 && facts)
		rc = check_facts(facts, &wire_facts, err, errlen);
	const json_t *health = json_object_get(body, "health");
	if (rc == 0 && health)
		rc = check_health(health, err, errlen);
	const json_t *ps = json_object_get(body, "profile_status");
	if (rc == 0 && ps)
		rc = check_profile_status(ps, err, errlen);
	return rc ? rc : wire_check_each(body, "ranks", &wire_report, err, errlen);
}

static int sync_locked(struct server *s, struct httpd_req *req, const json_t *body)
{
	struct state *st = &s->state;
	struct node *n = state_node(st, jv_int(body, "node_id", 0));
	if (!n || !api_token_ok(req, n->secret)) {
		httpd_error(req, ERR_AUTH, "unknown node or wrong node secret");
		return HTTPD_DONE;
	}
	n->last_seen_ms = now_ms();
	const json_t *facts = json_object_get(body, "facts");
	if (facts) {
		state_node_facts(st, n, facts);
		n->facts_ms = now_ms();
	}
	int64_t gen = jv_int(body, "generation", -1);
	state_reports(st, n, json_object_get(body, "ranks"), gen);
	const json_t *health = json_object_get(body, "health");
	if (health) {
		state_node_health(st, n, health);
		state_settle(st);
	}
	const json_t *ps = json_object_get(body, "profile_status");
	if (ps) {
		state_node_profile_status(st, n, ps);
		state_settle(st);
	}
	int rc = state_flush(st);
	if (rc) {
		httpd_error(req, rc, "cannot persist the reports");
		return HTTPD_DONE;
	}
	api_wait_check(s, now_ms()); /* a rank that started or ended: a job moved */
	if (n->waiter)
		agentproto_wake(st, n); /* superseded by this newer poll */
	int64_t wait = jv_int(body, "wait_ms", 0);
	if (wait > s->max_wait_ms)
		wait = s->max_wait_ms;
	if (gen != n->generation || wait <= 0 || s->stopping) {
		answer(st, n, req);
		return HTTPD_DONE;
	}
	n->waiter = req;
	n->waiter_deadline_ms = now_ms() + wait;
	httpd_suspend(req);
	return HTTPD_SUSPENDED;
}

int agentproto_sync(struct server *s, struct httpd_req *req)
{
	req->route = "agent_sync";
	char err[256];
	json_t *body = NULL;
	int rc = jv_parse_object(req->body, req->body_len, &body, err, sizeof(err));
	if (rc == 0)
		rc = validate_sync(body, err, sizeof(err));
	if (rc) {
		httpd_error(req, rc, err);
		json_decref(body);
		return HTTPD_DONE;
	}
	state_lock(&s->state);
	rc = sync_locked(s, req, body);
	state_unlock(&s->state);
	json_decref(body);
	return rc;
}
