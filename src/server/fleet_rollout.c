/* fleet_rollout.c - the rolling upgrade's controller (fleet.h: fleet_step,
 * fleet_stop): moves a running rollout's nodes along their phases and
 * starts the next ones as its policy lets. Layer 6 of the state files
 * (core.h): above fleet.c, whose records it moves (fleet_int.h). */
#include "server/fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/schema.h"
#include "base/util.h"
#include "fleet/plan.h"
#include "fleet/rollout.h"
#include "server/fleet_int.h"
#include "server/glue.h"

#define STEP_EVERY_MS 500

/* ---- the rollout: one node ---- */

static json_t *before_json(const struct node *n)
{
	return json_pack("{s:s,s:s,s:b}", "admin", node_state_name(n->admin), "reason",
	                 n->admin_reason, "by_fault", n->admin_by_fault);
}

/* How n was before any rollout took it out: as it is, unless an earlier
 * rollout left it out (stopped or failed while it had it) and it still
 * carries that rollout's reason, or it was removed by a spec and is back. */
static json_t *before_of(struct fleet *f, const struct node *n, int64_t below)
{
	if (n->admin == NODE_READY || (!n->fleet_removed && removed_by_fleet(n)))
		return json_pack("{s:s,s:s,s:b}", "admin", "ready", "reason", "", "by_fault", 0);
	for (int64_t id = below - 1; id >= 1; id--) {
		size_t i;
		json_t *e;
		json_array_foreach (json_object_get(rollout_of(f, id), "nodes"), i, e) {
			if (strcmp(str(e, "name"), n->name) != 0)
				continue;
			enum fleet_phase p = FLEET_QUEUED;
			fleet_phase_parse(str(e, "phase"), &p);
			if (p != FLEET_QUEUED && p != FLEET_DONE &&
			    strcmp(str(e, "reason"), n->admin_reason) == 0 &&
			    json_is_object(json_object_get(e, "before")))
				return json_deep_copy(json_object_get(e, "before"));
			return before_json(n);
		}
	}
	return before_json(n);
}

static void set_phase(json_t *e, enum fleet_phase p, int64_t now)
{
	json_object_set_new(e, "phase", json_string(fleet_phase_name(p)));
	json_object_set_new(e, "since_ms", json_integer(now));
}

/* The node stays out with why; the rollout stops at it. cordon: make it
 * cordoned with the reason (0 when an operator put it back meanwhile). */
static void node_failed(struct state *st, int64_t id, json_t *e, struct node *n, const char *why,
                        int cordon, int64_t now)
{
	set_phase(e, FLEET_FAILED, now);
	json_object_set_new(e, "detail", json_string(why));
	if (n && cordon) {
		char reason[256];
		text_printf(reason, sizeof(reason), "rollout of revision %lld stopped here: %s",
		            (long long)id, why);
		state_node_set_admin(st, n, NODE_CORDONED, reason, 0);
		json_object_set_new(e, "reason", json_string(n->admin_reason));
	}
	state_event(st, "fleet.rollout", 0, n ? n->id : 0, "revision %lld: node %s failed: %s",
	            (long long)id, str(e, "name"), why);
}

/* Back as it was before its turn, unless someone changed its state since
 * the rollout did (its reason is no longer the rollout's). */
static void restore(struct state *st, const json_t *e, struct node *n)
{
	const json_t *b = json_object_get(e, "before");
	enum node_state to = NODE_READY;
	if (strcmp(n->admin_reason, str(e, "reason")) != 0 ||
	    node_state_parse(str(b, "admin"), &to) || to == NODE_LOST)
		return;
	if (to == NODE_DRAINED)
		to = NODE_DRAINING; /* it settles to drained at once */
	const char *reason = to == NODE_READY ? "" : str(b, "reason");
	if (n->admin == to || (to == NODE_DRAINING && n->admin == NODE_DRAINED)) {
		if (strcmp(n->admin_reason, reason) == 0)
			return;
	}
	state_node_set_admin(st, n, to, reason, jv_bool(b, "by_fault", 0));
}

static void node_done(struct state *st, int64_t id, json_t *ro, json_t *e, struct node *n,
                      int64_t now)
{
	restore(st, e, n);
	set_phase(e, FLEET_DONE, now);
	json_object_set_new(ro, "done", json_integer(jv_int(ro, "done", 0) + 1));
	state_event(st, "fleet.rollout", 0, n->id,
	            "revision %lld: node %s upgraded to profile %s (%lld of %lld)", (long long)id,
	            n->name, str(e, "profile"), (long long)jv_int(ro, "done", 0),
	            (long long)jv_int(ro, "total", 0));
}

static void node_start(struct state *st, struct fleet *f, int64_t id, json_t *e, struct node *n,
                       int64_t now)
{
	json_t *before = before_of(f, n, id);
	json_object_set_new(e, "was_out", json_boolean(strcmp(str(before, "admin"), "ready") != 0));
	json_object_set_new(e, "before", before);
	if (n->admin != NODE_DRAINED) {
		char reason[200];
		text_printf(reason, sizeof(reason),
		            "rollout of revision %lld: upgrading to profile %s", (long long)id,
		            str(e, "profile"));
		state_node_set_admin(st, n, NODE_DRAINING, reason, 0);
	}
	json_object_set_new(e, "reason", json_string(n->admin_reason));
	set_phase(e, FLEET_DRAINING, now);
	state_event(st, "fleet.rollout", 0, n->id, "revision %lld: node %s out for profile %s",
	            (long long)id, n->name, str(e, "profile"));
}

static const json_t *target_of(const json_t *ro, const json_t *e)
{
	return json_object_get(json_object_get(ro, "profiles"), str(e, "profile"));
}

/* The time of n's status for e's profile, or -1 when it has none for it. */
static int64_t status_time(const struct node *n, const json_t *e)
{
	if (strcmp(jv_str(n->profile_status, "hash", ""), str(e, "hash")) != 0)
		return -1;
	return jv_int(n->profile_status, "time_ms", -1);
}

/* A validating node whose check did not pass in time. */
static void timed_out(struct state *st, int64_t id, const json_t *ro, json_t *e, struct node *n,
                      int64_t now)
{
	char t[32], why[256];
	schema_duration_text(jv_int(json_object_get(ro, "policy"), "validation_timeout_ms", 0), t,
	                     sizeof(t));
	text_printf(why, sizeof(why), "no node check passed within %s%s%s", t,
	            n->check_failed[0] ? ": " : " (no check could run)", n->check_failed);
	node_failed(st, id, e, n, why, 1, now);
}

/* Moves a started node along its phases; 1 when it moved. */
static int advance(struct state *st, int64_t id, json_t *ro, json_t *e, int64_t now)
{
	struct node *n = fleet_node_named(st, str(e, "name"));
	enum fleet_phase p = phase_of(e);
	if (p == FLEET_QUEUED || p == FLEET_DONE || p == FLEET_FAILED)
		return 0;
	if (!n) {
		node_failed(st, id, e, NULL, "the node is gone", 0, now);
		return 1;
	}
	int moved = 0;
	if (p == FLEET_DRAINING) {
		if (n->admin != NODE_DRAINING && n->admin != NODE_DRAINED) {
			char why[96];
			snprintf(why, sizeof(why), "an operator made it %s while it drained",
			         node_state_name(n->admin));
			node_failed(st, id, e, n, why, 0, now);
			return 1;
		}
		if (n->admin != NODE_DRAINED)
			return 0;
		nodes_set_profile(st, n, target_of(ro, e));
		/* what its agent said before it had this profile is no answer */
		json_object_set_new(e, "status_at", json_integer(status_time(n, e)));
		set_phase(e, FLEET_CONVERGING, now);
		p = FLEET_CONVERGING;
		moved = 1;
	}
	char why[256];
	enum fleet_hold h =
	        fleet_hold_reason(target_of(ro, e), n->profile_status, why, sizeof(why));
	if (status_time(n, e) >= 0 && status_time(n, e) == jv_int(e, "status_at", -1))
		h = FLEET_HOLD_WAIT; /* no word from its agent since the profile went out */
	if (h == FLEET_HOLD_STUCK) {
		node_failed(st, id, e, n, why, 1, now);
		return 1;
	}
	if (p == FLEET_CONVERGING) {
		if (h != FLEET_HOLD_NONE)
			return moved;
		set_phase(e, FLEET_VALIDATING, now);
		int64_t t = jv_int(json_object_get(ro, "policy"), "validation_timeout_ms", 600000);
		json_object_set_new(e, "deadline_ms", json_integer(now + t));
		moved = 1; /* and its check may have passed already */
	}
	if (h == FLEET_HOLD_NONE && strcmp(n->profile_checked, str(e, "hash")) == 0) {
		node_done(st, id, ro, e, n, now);
		return 1;
	}
	if (now < jv_int(e, "deadline_ms", 0))
		return moved;
	timed_out(st, id, ro, e, n, now);
	return 1;
}

/* ---- the rollout: the whole ---- */

static void rollout_end(struct state *st, struct fleet *f, int64_t id, const char *state,
                        const char *why, int64_t now)
{
	json_t *doc = rev(f, id), *ro = json_object_get(doc, "rollout");
	json_object_set_new(ro, "state", json_string(state));
	json_object_set_new(ro, "reason", json_string(why));
	json_object_set_new(ro, "ended_ms", json_integer(now));
	char result[512];
	if (strcmp(state, "done") == 0)
		snprintf(result, sizeof(result), "rolled out to %lld node(s)",
		         (long long)jv_int(ro, "total", 0));
	else
		snprintf(result, sizeof(result), "rollout stopped: %s", why);
	json_object_set_new(doc, "result", json_string(result));
	state_event(st, "fleet.rollout", 0, 0, "revision %lld: %s", (long long)id, result);
	log_info("fleet rollout ended revision=%lld result=\"%s\"", (long long)id, result);
	f->active = 0;
	fleet_mark_queued(st); /* the nodes it did not start stay in service as they are */
	fleet_touch(st, id);
}

static void ensure_units(struct fleet *f, int n)
{
	if (n <= f->capunits)
		return;
	f->capunits = n * 2;
	f->start = xrealloc(f->start, sizeof(*f->start) * (size_t)f->capunits);
	f->work = xrealloc(f->work, sizeof(*f->work) * (size_t)f->capunits);
}

/* Whether a queued node is out of service for its own reasons (it costs
 * the rollout no capacity and stays out after it). */
static int queued_out(struct fleet *f, const struct node *n, int64_t id)
{
	if (n->admin == NODE_READY)
		return 0;
	json_t *b = before_of(f, n, id);
	int out = strcmp(str(b, "admin"), "ready") != 0;
	json_decref(b);
	return out;
}

/* Starts what the policy lets start; 1 when something did. */
static int start_next(struct state *st, struct fleet *f, int64_t id, json_t *ro, int64_t now)
{
	json_t *entries = json_object_get(ro, "nodes");
	int n = (int)json_array_size(entries);
	ensure_units(f, n + 1);
	struct fleet_unit *u = xcalloc((size_t)n + 1, sizeof(*u));
	for (int i = 0; i < n; i++) {
		const json_t *e = json_array_get(entries, (size_t)i);
		struct node *x = fleet_node_named(st, str(e, "name"));
		u[i].block = jv_str(e, "block", NULL);
		u[i].phase = phase_of(e);
		u[i].lost = !x || x->state == NODE_LOST;
		u[i].was_out = u[i].phase == FLEET_QUEUED ? x && queued_out(f, x, id)
		                                          : jv_bool(e, "was_out", 0);
	}
	const json_t *pol = json_object_get(ro, "policy");
	struct fleet_policy p = {(int)jv_int(pol, "max_unavailable", 1),
	                         (int)jv_int(pol, "max_unavailable_per_block", 1)};
	struct fleet_next r;
	fleet_rollout_next(&p, u, n, f->start, f->work, &r);
	free(u);
	for (int i = 0; i < r.nstart; i++) {
		json_t *e = json_array_get(entries, (size_t)f->start[i]);
		node_start(st, f, id, e, fleet_node_named(st, str(e, "name")), now);
		advance(st, id, ro, e, now); /* an idle node is drained at once */
	}
	if (r.stop || r.done) {
		char why[300] = "";
		size_t i;
		json_t *e;
		json_array_foreach (entries, i, e)
			if (!why[0] && phase_of(e) == FLEET_FAILED)
				text_printf(why, sizeof(why), "node %s: %s", str(e, "name"),
				            str(e, "detail"));
		rollout_end(st, f, id, r.done ? "done" : "stopped", why, now);
	}
	return r.nstart > 0 || r.stop || r.done;
}

void fleet_step(struct state *st, int64_t now, int force)
{
	struct fleet *f = fleet_of(st);
	if (!f || !f->active)
		return;
	if (!force && !st->core->fleet_kick && now - f->last_step < STEP_EVERY_MS)
		return;
	st->core->fleet_kick = 0;
	f->last_step = now;
	int64_t id = f->active;
	json_t *ro = json_object_get(rev(f, id), "rollout");
	int moved = 0;
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(ro, "nodes"), i, e)
		moved |= advance(st, id, ro, e, now);
	moved |= start_next(st, f, id, ro, now);
	if (moved) {
		fleet_mark_queued(st);
		fleet_touch(st, id);
	}
}

int fleet_stop(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen)
{
	struct fleet *f = fleet_of(st);
	if (!f->active) {
		snprintf(err, errlen, "no rollout is running");
		return ERR_NOTFOUND;
	}
	int64_t id = f->active, now = wall_ms();
	json_t *ro = json_object_get(rev(f, id), "rollout");
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(ro, "nodes"), i, e) {
		struct node *n = fleet_node_named(st, str(e, "name"));
		if (phase_of(e) != FLEET_DRAINING || !n)
			continue;
		/* nothing was sent to it yet: back as it was */
		restore(st, e, n);
		set_phase(e, FLEET_QUEUED, now);
	}
	char why[128];
	const char *who = jv_str(body, "who", "");
	snprintf(why, sizeof(why), "stopped by %s", *who ? who : "admin");
	rollout_end(st, f, id, "stopped", why, now);
	*out = json_pack("{s:I,s:O}", "revision", (json_int_t)id, "rollout", ro);
	return 0;
}
