/* agentproto.c - /v1/agent/register and the level-triggered /v1/agent/sync
 * long poll. A node has at most one waiting poll (node->waiter); a newer
 * sync, a change to the node's desired set once it is written
 * (state_wake_written), or the deadline answers it. A desired set with a
 * change not written yet is never sent (answer()). */
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
#include "server/peer.h"
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

/* The registration's credentials as state_register judges them: the join
 * token (checked under join_mu), else the named node's own secret (under
 * the state lock, which the caller holds). */
static void admission(struct server *s, struct httpd_req *req, const char *name,
                      struct node_admission *adm, char *why, size_t len)
{
	const struct node *n = state_node_by_name(&s->state, name);
	adm->peer = req->peer;
	adm->join_ok = api_join_ok(s, req, why, len) == 0;
	adm->join_why = why;
	adm->own_secret = !adm->join_ok && n && api_token_ok(req, n->secret);
	adm->approve = s->approve_nodes;
	adm->bind_address = s->bind_node_address;
}

/* Whether the request holds a credential that may register anything (the
 * join token, or the secret of the node its body names): before the body
 * is judged, so that whoever holds neither learns nothing of it and makes
 * the server resolve no name. 0, or ERR_AUTH with why. */
static int may_register(struct server *s, struct httpd_req *req, const json_t *body, char *why,
                        size_t len)
{
	struct node_admission adm;
	state_lock(&s->state);
	admission(s, req, jv_str(body, "name", ""), &adm, why, len);
	state_unlock(&s->state);
	return adm.join_ok || adm.own_secret ? 0 : ERR_AUTH;
}

static void register_answer(struct httpd_req *req, const struct node *n)
{
	json_t *o = json_pack("{s:I,s:s}", "node_id", (json_int_t)n->id, "secret", n->secret);
	char *text = jv_dump(o);
	httpd_json(req, 200, text);
	free(text);
	json_decref(o);
	log_info("node registered node=%s id=%lld peer=%s%s", n->name, (long long)n->id, req->peer,
	         n->admin == NODE_AWAITING ? " awaiting_approval=1" : "");
}

int agentproto_register(struct server *s, struct httpd_req *req)
{
	req->route = "agent_register";
	char err[768], why[300];
	json_t *body = NULL;
	int rc = jv_parse_object(req->body, req->body_len, &body, err, sizeof(err));
	if (rc == 0)
		rc = check_facts(body, &wire_register, err, sizeof(err));
	if (may_register(s, req, body, why, sizeof(why))) {
		rc = ERR_AUTH;
		text_printf(err, sizeof(err), "%s", why);
	}
	if (rc == 0) /* before the lock: a host name in it is resolved */
		rc = peer_url_check("agent_url", jv_str(body, "agent_url", ""), req->peer, err,
		                    sizeof(err));
	struct state *st = &s->state;
	const char *name = jv_str(body, "name", "");
	struct node *n = NULL;
	state_lock(st);
	if (rc == 0) {
		struct node_admission adm;
		admission(s, req, name, &adm, why, sizeof(why));
		rc = state_register(st, body, name, &adm, &n, err, sizeof(err));
	}
	/* A poll parked from the address it had: answered there no more. */
	if (rc == 0 && n->waiter &&
	    strcmp(((struct httpd_req *)n->waiter)->peer, n->registered_from) != 0)
		api_poll_drop(n, "the node registered again from another address");
	if (rc == 0) {
		state_settle(st);
		rc = state_flush(st);
		if (rc)
			text_printf(err, sizeof(err), "cannot persist the registration");
	}
	if (rc) {
		httpd_error(req, rc, err);
		log_info("registration refused node=%.63s peer=%s code=%s", name, req->peer,
		         err_name(rc));
	} else {
		register_answer(req, n);
	}
	state_unlock(st);
	json_decref(body);
	return HTTPD_DONE;
}

static void answer(struct state *st, struct node *n, struct httpd_req *req)
{
	if (n->wake_held) {
		/* Its desired set changed and the change is not written yet
		 * (state_bump): the agent keeps what it runs, retries, and
		 * hears of it once it is written, never of a change that a
		 * restart could take back. */
		httpd_error(req, ERR_BUSY,
		            "the node's desired set changed and is not stored yet (the server "
		            "cannot write its state: see its log); ask again");
		return;
	}
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
		httpd_error(req, ERR_AUTH,
		            n && n->reset
		                    ? "the node was reset by an admin: its secret is revoked; "
		                      "register again with the join token"
		                    : "unknown node or wrong node secret");
		return HTTPD_DONE;
	}
	/* Its ranks' environments go to the address it registered from only. */
	char err[512];
	if (state_node_sync_from(st, n, req->peer, s->bind_node_address, err, sizeof(err))) {
		httpd_error(req, ERR_AUTH, err);
		log_warn("sync refused node=%s peer=%s registered_from=%s", n->name, req->peer,
		         n->registered_from);
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
	char err[768];
	json_t *body = NULL;
	int rc = jv_parse_object(req->body, req->body_len, &body, err, sizeof(err));
	if (rc == 0)
		rc = validate_sync(body, err, sizeof(err));
	/* Before the lock: a host name in it is resolved. */
	if (rc == 0)
		rc = peer_url_check("facts.agent_url",
		                    jv_str(json_object_get(body, "facts"), "agent_url", ""),
		                    req->peer, err, sizeof(err));
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
