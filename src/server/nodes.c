/* nodes.c - what the server knows of a node beyond its ranks: facts, GPU
 * health, and the operator's and faults' decisions (cordon, drain).
 *
 * The agent judges its GPUs (gpu/health.h) and reports, on every sync, the
 * state of each GPU, a node-level fault if there is one, and its newest
 * findings, each with a sequence number. Here the server acts on them, at
 * the smallest scope that fixes the fault:
 *
 *   warning  counted and recorded, nothing else
 *   job      the attempts using that GPU fail (the job's reason says why)
 *   gpu      the GPU is quarantined (never assigned while the agent reports
 *            it unhealthy) and the attempts using it are requeued
 *   node     the node drains: no new work, its attempts are requeued
 *
 * Findings are applied once (node->finding_seq); GPU states are level-
 * triggered (an unhealthy GPU that still holds an attempt requeues it on
 * every report until it is free).
 *
 * Also a node's liveness (registration, silence, return), and how it stands
 * against its fleet profile (server/fleet.c sends it): what its agent
 * reports of converging, the node checks that validate it, and the hold
 * that keeps it from new work until both say it is ready. Layer 3 of the
 * state files (core.h); every function runs with the state lock held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "fleet/plan.h"
#include "server/records.h"

/* ---- facts ---- */

static void set_str(char **field, const json_t *f, const char *key)
{
	const char *v = jv_str(f, key, NULL);
	if (v) {
		free(*field);
		*field = xstrdup(v);
	}
}

static void facts_gpus(struct node *n, const json_t *gpus)
{
	int count = (int)json_array_size(gpus);
	if (count > MODEL_MAX_GPUS)
		count = MODEL_MAX_GPUS;
	free(n->gpus);
	n->gpus = xcalloc((size_t)count + 1, sizeof(*n->gpus));
	n->ngpus = count;
	for (int i = 0; i < count; i++) {
		const json_t *g = json_array_get(gpus, (size_t)i);
		struct gpu_slot *s = &n->gpus[i];
		s->index = (int)jv_int(g, "index", i);
		if (s->index < 0 || s->index >= MODEL_MAX_GPUS)
			s->index = i;
		snprintf(s->uuid, sizeof(s->uuid), "%s", jv_str(g, "uuid", ""));
		/* agents before the GPU layer sent "model"; the inventory says "name" */
		snprintf(s->model, sizeof(s->model), "%s",
		         jv_str(g, "model", jv_str(g, "name", "")));
		s->memory_bytes = (uint64_t)jv_int(g, "memory_bytes", 0);
	}
}

/* Groups of GPUs the agent computed (gpu_groups: NVLink, else switch,
 * else NUMA; gpu_near_groups: a PCIe switch), kept only when they cover
 * the node's GPUs without overlap; else none (the scheduler then treats
 * the node as one group). Returns how many were kept. */
static int facts_groups(const struct node *n, const json_t *groups, uint64_t *out, int max)
{
	uint64_t all = 0, seen = 0;
	for (int i = 0; i < n->ngpus; i++)
		all |= 1ull << n->gpus[i].index;
	int count = 0;
	size_t i;
	json_t *g;
	json_array_foreach (groups, i, g) {
		uint64_t m = (uint64_t)json_integer_value(g);
		if (!json_is_integer(g) || !m || (m & seen) || (m & ~all) || count == max)
			return 0;
		seen |= m;
		out[count++] = m;
	}
	return seen == all ? count : 0;
}

void state_node_facts(struct state *st, struct node *n, const json_t *f)
{
	json_t *keep = json_incref((json_t *)f); /* f may be n->facts itself */
	set_str(&n->hostname, f, "hostname");
	set_str(&n->address, f, "address");
	set_str(&n->agent_url, f, "agent_url");
	set_str(&n->backend, f, "backend");
	n->cpus = (int)jv_int(f, "cpus", n->cpus);
	n->memory_bytes = (uint64_t)jv_int(f, "memory_bytes", (int64_t)n->memory_bytes);
	const json_t *gpus = json_object_get(f, "gpus");
	if (json_is_array(gpus))
		facts_gpus(n, gpus);
	n->nnvlink = facts_groups(n, json_object_get(f, "gpu_groups"), n->nvlink,
	                          (int)(sizeof(n->nvlink) / sizeof(n->nvlink[0])));
	n->nnear = facts_groups(n, json_object_get(f, "gpu_near_groups"), n->near,
	                        (int)(sizeof(n->near) / sizeof(n->near[0])));
	json_decref(n->facts);
	n->facts = keep;
	state_node_changed(st, n);
}

/* ---- admin states ---- */

/* 1 if a has a rank that still runs on n using any GPU of mask (0: any). */
static int uses(const struct attempt *a, const struct node *n, uint64_t mask)
{
	for (int r = 0; r < a->nranks; r++) {
		const struct rank *k = &a->ranks[r];
		if (k->node_id == n->id && !rank_state_final(k->state) &&
		    (!mask || (k->gpus & mask)))
			return 1;
	}
	return 0;
}

/* Requeues every attempt on n (mask 0) or on its GPUs in mask. Attempts
 * that checkpoint are asked first; all get SIGTERM and their grace. */
static int requeue_on(struct state *st, struct node *n, uint64_t mask, const char *why)
{
	int count = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int i = st->core->nactive - 1; i >= 0; i--) {
			struct attempt *a = st->core->active[i];
			const struct job *j = state_job(st, a->job_id);
			if (attempt_ending(a) || !j || (j->checkpointing != 0) != (pass == 0) ||
			    !uses(a, n, mask))
				continue;
			state_attempt_requeue(st, a, why);
			count++;
		}
	return count;
}

int state_node_set_admin(struct state *st, struct node *n, enum node_state admin,
                         const char *reason, int by_fault)
{
	if (n->admin == NODE_AWAITING)
		return ERR_CONFLICT; /* it runs nothing; only approval takes it out */
	if (admin == NODE_DRAINING && (n->admin == NODE_DRAINING || n->admin == NODE_DRAINED) &&
	    !(by_fault && !n->admin_by_fault))
		return 0;
	if (!machine_find(MACHINE_NODE_ADMIN, (int)n->admin, (int)admin))
		return node_admin_to(st, n, admin, reason, by_fault, NULL); /* refused, logged */
	int requeued = 0;
	if (admin == NODE_DRAINING) {
		char why[320];
		text_printf(why, sizeof(why), "node %s draining%s%s", n->name,
		            reason && *reason ? ": " : "", reason ? reason : "");
		requeued = requeue_on(st, n, 0, why);
	}
	char note[64];
	snprintf(note, sizeof(note), "(%d attempts requeued)", requeued);
	int rc = node_admin_to(st, n, admin, reason ? reason : "", by_fault, note);
	state_nodes_settle(st);
	return rc;
}

void state_nodes_settle(struct state *st)
{
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		if (n->admin != NODE_DRAINING)
			continue;
		int busy = 0;
		for (int k = 0; k < st->core->nactive && !busy; k++)
			busy = uses(st->core->active[k], n, 0);
		if (!busy && node_admin_to(st, n, NODE_DRAINED, NULL, 0, NULL) == 0)
			st->core->fleet_kick = 1; /* a rollout may wait for it */
	}
}

/* ---- health ---- */

static uint64_t unhealthy_of(const json_t *gpus)
{
	uint64_t m = 0;
	size_t i;
	json_t *g;
	json_array_foreach (gpus, i, g) {
		int64_t idx = jv_int(g, "index", -1);
		if (idx >= 0 && idx < MODEL_MAX_GPUS &&
		    strcmp(jv_str(g, "state", ""), "healthy") != 0)
			m |= 1ull << idx;
	}
	return m;
}

static const json_t *gpu_entry(const json_t *gpus, int index)
{
	size_t i;
	json_t *g;
	json_array_foreach (gpus, i, g) {
		if (jv_int(g, "index", -1) == index)
			return g;
	}
	return NULL;
}

/* Fails every attempt using GPU index on n: an application error (e.g.
 * XID 13) ends the job, not the GPU. */
static void fail_on(struct state *st, struct node *n, int index, const char *why)
{
	for (int i = st->core->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->core->active[i];
		struct job *j = state_job(st, a->job_id);
		if (attempt_ending(a) || !j || !uses(a, n, 1ull << index))
			continue;
		if (!j->has_exit) {
			j->has_exit = 1;
			j->exit_code = 1;
			text_printf(j->reason, sizeof(j->reason), "%s", why);
		}
		attempt_stop_to(st, a, ATTEMPT_STOP_GPU_FAULT, n->id, "%s", why);
	}
}

static void apply_finding(struct state *st, struct node *n, const json_t *f)
{
	enum node_fault_scope scope;
	if (node_fault_scope_parse(jv_str(f, "scope", ""), &scope))
		return;
	int index = (int)jv_int(f, "gpu", -1);
	const char *reason = jv_str(f, "reason", "");
	const char *code = jv_str(f, "code", "");
	int counted = jv_bool(f, "counted", 1); /* 0: evidence of a fault already acted on */
	if (counted)
		n->faults[scope]++;
	state_event(st, "gpu.fault", 0, n->id, "node %s GPU %d %s [%s]%s: %s", n->name, index,
	            node_fault_scope_name(scope), code, counted ? "" : " (same fault)", reason);
	log_info("gpu fault node=%s gpu=%d scope=%s code=%s reason=\"%s\"", n->name, index,
	         node_fault_scope_name(scope), code, reason);
	char why[400];
	text_printf(why, sizeof(why), "%s on node %s", reason, n->name);
	if (scope == NODE_FAULT_JOB && index >= 0 && index < MODEL_MAX_GPUS)
		fail_on(st, n, index, why);
	else if (scope == NODE_FAULT_NODE)
		state_node_set_admin(st, n, NODE_DRAINING, reason, 1);
	/* gpu scope: the GPU's state in the same report quarantines it */
}

void state_node_health(struct state *st, struct node *n, const json_t *h)
{
	size_t i;
	json_t *f;
	int64_t newest = n->finding_seq;
	json_array_foreach (json_object_get(h, "findings"), i, f) {
		int64_t seq = jv_int(f, "seq", 0);
		if (seq <= n->finding_seq)
			continue;
		apply_finding(st, n, f);
		if (seq > newest)
			newest = seq;
	}
	n->finding_seq = newest;
	const json_t *gpus = json_object_get(h, "gpus");
	uint64_t bad = unhealthy_of(gpus);
	for (int g = 0; g < MODEL_MAX_GPUS; g++) {
		uint64_t bit = 1ull << g;
		if ((bad & bit) == (n->gpus_unhealthy & bit))
			continue;
		const json_t *e = gpu_entry(gpus, g);
		if (bad & bit)
			state_event(st, "gpu.unhealthy", 0, n->id, "node %s GPU %d %s: %s", n->name,
			            g, jv_str(e, "state", "unhealthy"),
			            jv_str(e, "reason", "a fault"));
		else /* the agent says healthy again only after a reset and a clean
		      * check, or as a new process (a reboot) that finds it clean */
			state_event(
			        st, "gpu.healthy", 0, n->id,
			        "node %s GPU %d back in service (reset and clean check passed, or "
			        "clean after an agent restart)",
			        n->name, g);
	}
	if (bad) { /* level-triggered: nothing keeps running on an unhealthy GPU */
		for (int g = 0; g < MODEL_MAX_GPUS; g++) {
			if (!(bad & (1ull << g)))
				continue;
			const json_t *e = gpu_entry(gpus, g);
			char why[320];
			text_printf(why, sizeof(why), "GPU %d of node %s %s: %s", g, n->name,
			            jv_str(e, "state", "unhealthy"),
			            jv_str(e, "reason", "a fault"));
			requeue_on(st, n, 1ull << g, why);
		}
	}
	const json_t *nf = json_object_get(h, "node");
	if (json_is_object(nf) && n->admin != NODE_DRAINING && n->admin != NODE_DRAINED)
		state_node_set_admin(st, n, NODE_DRAINING, jv_str(nf, "reason", "a node fault"), 1);
	if (bad != n->gpus_unhealthy || !json_equal(n->health, (json_t *)h))
		state_node_changed(st, n);
	n->gpus_unhealthy = bad;
	json_t *keep = json_deep_copy(h);
	json_object_del(keep, "findings"); /* applied; the events keep them */
	json_decref(n->health);
	n->health = keep;
}

/* After loading: the masks from the last health report, the profile's hold. */
void state_node_restore(struct state *st, struct node *n)
{
	n->gpus_unhealthy = unhealthy_of(json_object_get(n->health, "gpus"));
	nodes_profile_hold(st, n);
}

/* The fault the agent reports for the node now, or NULL. */
const char *state_node_fault(const struct node *n)
{
	const json_t *nf = json_object_get(n->health, "node");
	return json_is_object(nf) ? jv_str(nf, "reason", "a node fault") : NULL;
}

/* ---- liveness ---- */

/* n is lost (why: the move's reason): its ranks are, and its desired set
 * is empty from now on. */
static void node_lost(struct state *st, struct node *n, const char *why)
{
	if (node_to(st, n, NODE_LOST, "node %s %s", n->name, why))
		return;
	log_warn("node lost node=%s why=\"%s\"", n->name, why);
	ranks_node_lost(st, n);
	state_bump(st, n);
}

void nodes_check_silent(struct state *st, int64_t now)
{
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		char why[64];
		if (n->state == NODE_LOST || n->waiter ||
		    now - n->last_seen_ms <= st->config.node_timeout_ms)
			continue;
		text_printf(why, sizeof(why), "silent for over %lld ms",
		            (long long)st->config.node_timeout_ms);
		node_lost(st, n, why);
	}
}

/* A lost node is back, and ready, once it runs nothing we do not want. */
void nodes_back(struct state *st, struct node *n, const json_t *ranks)
{
	if (n->state != NODE_LOST)
		return;
	size_t i;
	json_t *rep;
	json_array_foreach (ranks, i, rep) {
		const char *s = jv_str(rep, "state", "");
		if (strcmp(s, "running") == 0 || strcmp(s, "starting") == 0)
			return;
	}
	if (node_to(st, n, NODE_READY, "node %s is back", n->name) == 0)
		log_info("node is back node=%s", n->name);
}

/* ---- registration ----
 *
 * A node's identity is its name, its secret and the address it registered
 * from. The join token admits a name the server does not know, and a name
 * an operator reset (once); a registered name is taken again only with the
 * node's own secret, which keeps it (an agent whose sync was refused, e.g.
 * after it moved to another address, registers again so). A join-token
 * registration of a registered name is refused with ERR_CONFLICT: else
 * whoever holds the join token (any job could read it) would take the node
 * over, its ranks' environments and its log and exec traffic with it. */

static struct node *node_new(struct state *st, const char *name, int approve)
{
	struct node *n = xcalloc(1, sizeof(*n));
	n->id = st->nnodes + 1;
	n->name = xstrdup(name);
	n->secret = xstrdup("");
	n->hostname = xstrdup("");
	n->address = xstrdup("127.0.0.1");
	n->agent_url = xstrdup("");
	n->backend = xstrdup("none");
	n->state = NODE_READY; /* created ready or awaiting: not a move (model/machine.h) */
	n->admin = approve ? NODE_AWAITING : NODE_READY;
	if (approve)
		text_printf(n->admin_reason, sizeof(n->admin_reason),
		            "new node: awaiting approval (anvil node approve %s)", name);
	st->nodes = xrealloc(st->nodes, sizeof(*st->nodes) * (size_t)(st->nnodes + 1));
	st->nodes[st->nnodes++] = n;
	state_event(st, "node.registered", 0, n->id, "node %s registered%s", name,
	            approve ? ", awaiting approval" : "");
	return n;
}

/* Whether adm may take the registered node n: 0, or an error and why. */
static int admit_again(const struct node *n, const struct node_admission *adm, char *err,
                       size_t errlen)
{
	if (adm->own_secret) {
		if (!adm->bind_address || !n->registered_from[0] ||
		    strcmp(n->registered_from, adm->peer) == 0)
			return 0;
		text_printf(err, errlen,
		            "node %s's secret is bound to the address it registered from, %s "
		            "(--bind-node-address); this registration comes from %s. To move the "
		            "node, an admin resets it (anvil node reset %s)",
		            n->name, n->registered_from, adm->peer, n->name);
		return ERR_AUTH;
	}
	if (!adm->join_ok) {
		text_printf(err, errlen, "%s", adm->join_why ? adm->join_why : "not authorized");
		return ERR_AUTH;
	}
	if (n->reset)
		return 0;
	text_printf(err, errlen,
	            "field 'name': node %s is registered already, and the join token admits new "
	            "nodes only; its agent registers again with its own secret (WORK_DIR/"
	            "node.json). If that is lost, an admin re-admits the node: anvil node reset %s",
	            n->name, n->name);
	return ERR_CONFLICT;
}

int nodes_register(struct state *st, const json_t *facts, const char *name,
                   const struct node_admission *adm, struct node **out, char *err, size_t errlen)
{
	struct node *n = state_node_by_name(st, name);
	if (!n && !adm->join_ok) {
		text_printf(err, errlen, "%s", adm->join_why ? adm->join_why : "not authorized");
		return ERR_AUTH;
	}
	int rc = n ? admit_again(n, adm, err, errlen) : 0;
	if (rc)
		return rc;
	if (!n) {
		n = node_new(st, name, adm->approve);
	} else {
		state_event(st, "node.reregistered", 0, n->id, "node %s registered again from %s%s",
		            name, adm->peer, n->reset ? " after a reset" : "");
	}
	if (!n->secret[0]) { /* new, or reset: its own secret keeps the one it has */
		char secret[65];
		random_hex(secret, 32);
		free(n->secret);
		n->secret = xstrdup(secret);
	}
	n->reset = 0;
	text_printf(n->registered_from, sizeof(n->registered_from), "%s", adm->peer);
	state_node_facts(st, n, facts);
	n->last_seen_ms = n->facts_ms = now_ms();
	state_want_schedule(st);
	*out = n;
	return 0;
}

int state_node_sync_from(struct state *st, struct node *n, const char *peer, int bind_address,
                         char *err, size_t errlen)
{
	if (!n->registered_from[0]) { /* registered before addresses were recorded */
		text_printf(n->registered_from, sizeof(n->registered_from), "%s", peer);
		state_mark_node(st, n);
		return 0;
	}
	if (strcmp(n->registered_from, peer) == 0)
		return 0;
	if (bind_address)
		text_printf(err, errlen,
		            "node %s's secret is bound to the address it registered from, %s "
		            "(--bind-node-address); this sync comes from %s. To move the node, an "
		            "admin resets it (anvil node reset %s)",
		            n->name, n->registered_from, peer, n->name);
	else
		text_printf(err, errlen,
		            "node %s registered from %s; this sync comes from %s. The server "
		            "answers a node only at the address it registered from: register "
		            "again from here with the node's secret (an agent does so by itself)",
		            n->name, n->registered_from, peer);
	return ERR_AUTH;
}

void state_node_reset(struct state *st, struct node *n)
{
	free(n->secret);
	n->secret = xstrdup(""); /* revoked: no sync, no agent call carries it */
	n->reset = 1;
	state_event(st, "node.reset", 0, n->id,
	            "node %s reset by an operator: its secret is revoked and its next "
	            "registration with the join token is accepted",
	            n->name);
	log_info("node reset node=%s", n->name);
	if (n->state != NODE_LOST)
		node_lost(st, n, "reset by an operator");
	state_mark_node(st, n);
}

int state_node_approve(struct state *st, struct node *n, char *err, size_t errlen)
{
	if (n->admin != NODE_AWAITING) {
		text_printf(err, errlen, "node %s is not awaiting approval (it is %s)", n->name,
		            node_shown_state(n));
		return ERR_CONFLICT;
	}
	int rc = node_admin_to(st, n, NODE_READY, "", 0, NULL);
	if (rc)
		text_printf(err, errlen, "node %s cannot be approved now", n->name);
	return rc;
}

/* ---- labels and pool ---- */

void state_node_relabel(struct state *st, struct node *n, const json_t *labels, const char *pool,
                        int set_pool)
{
	const char *k;
	json_t *v;
	if (!n->labels)
		n->labels = json_object();
	json_object_foreach ((json_t *)labels, k, v) {
		if (json_is_null(v))
			json_object_del(n->labels, k);
		else
			json_object_set(n->labels, k, v);
	}
	if (set_pool) {
		free(n->pool);
		n->pool = pool && *pool ? xstrdup(pool) : NULL;
	}
	state_node_changed(st, n);
}

/* ---- the fleet profile ---- */

static const char *profile_name(const struct node *n)
{
	return jv_str(n->profile, "name", "?");
}

static const char *profile_hash(const struct node *n)
{
	return jv_str(n->profile, "hash", "");
}

void nodes_profile_hold(struct state *st, struct node *n)
{
	char why[sizeof(n->hold)] = "";
	int stuck = 0;
	if (n->profile) {
		const char *name = profile_name(n), *hash = profile_hash(n);
		enum fleet_hold h =
		        fleet_hold_reason(n->profile, n->profile_status, why, sizeof(why));
		if (n->converge_pending) { /* its last word is stale until the next */
			h = FLEET_HOLD_WAIT;
			text_printf(why, sizeof(why),
			            "its agent is asked to converge to profile %s again", name);
		}
		stuck = h == FLEET_HOLD_STUCK;
		if (h == FLEET_HOLD_NONE && strcmp(n->profile_checked, hash) != 0) {
			stuck = n->check_failed[0] != 0;
			if (stuck)
				text_printf(why, sizeof(why), "profile %s: node check failed: %s",
				            name, n->check_failed);
			else
				text_printf(why, sizeof(why),
				            "profile %s converged; waiting for the node check",
				            name);
		}
	}
	if (strcmp(why, n->hold) == 0 && stuck == n->hold_stuck)
		return;
	int was_held = n->hold[0] != 0;
	text_printf(n->hold, sizeof(n->hold), "%s", why);
	n->hold_stuck = stuck;
	state_mark_node(st, n);
	st->core->fleet_kick = 1;
	if (was_held && !why[0]) {
		state_event(st, "node.profile", 0, n->id,
		            "node %s: profile %s converged and checked: in service", n->name,
		            profile_name(n));
		state_want_schedule(st);
	}
}

void nodes_set_profile(struct state *st, struct node *n, const json_t *profile)
{
	if (json_equal(n->profile, (json_t *)profile) || (!n->profile && !profile))
		return;
	json_decref(n->profile);
	n->profile = profile ? json_deep_copy(profile) : NULL;
	n->profile_checked[0] = '\0'; /* a new profile is checked anew, even one seen before */
	state_mark_node(st, n);
	n->check_failed[0] = '\0';
	n->check_after_ms = 0;
	if (profile)
		state_event(st, "node.profile", 0, n->id, "node %s: profile %s (%.12s) sent",
		            n->name, profile_name(n), profile_hash(n));
	else
		state_event(st, "node.profile", 0, n->id, "node %s: profile removed", n->name);
	state_bump(st, n); /* the sync answer carries it: wake the long poll */
	/* A profile its agent ran before (sent again after a removal, say): it
	 * may not run it again by itself, and its last status is stale. */
	if (profile && strcmp(jv_str(n->profile_status, "hash", ""), profile_hash(n)) == 0)
		nodes_request_converge(st, n);
	nodes_profile_hold(st, n);
}

void nodes_request_converge(struct state *st, struct node *n)
{
	if (!n->profile)
		return;
	text_printf(n->converge_wanted, sizeof(n->converge_wanted), "%s", profile_hash(n));
	n->converge_pending = 1;
	state_event(st, "node.profile", 0, n->id,
	            "node %s: its agent is asked to converge to profile %s again", n->name,
	            profile_name(n));
	nodes_profile_hold(st, n);
}

int state_node_next_converge(struct state *st, int64_t *node_id, char *hash, size_t hashlen)
{
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		if (!n->converge_wanted[0] || n->state != NODE_READY)
			continue;
		*node_id = n->id;
		snprintf(hash, hashlen, "%s", n->converge_wanted);
		n->converge_wanted[0] = '\0'; /* asked once; an apply asks again */
		return 0;
	}
	return ERR_NOTFOUND;
}

void state_node_converge_asked(struct state *st, int64_t node_id, const char *hash, int rc,
                               const char *why)
{
	struct node *n = state_node(st, node_id);
	if (!n || rc == 0)
		return;
	n->converge_pending = 0; /* it will not: what it said last stands */
	nodes_profile_hold(st, n);
	state_event(st, "node.profile", 0, n->id,
	            "node %s: asking its agent to converge to profile %.12s again failed: %s",
	            n->name, hash, why);
}

/* An event when what the agent says changed in kind: another hash or state. */
static void status_event(struct state *st, struct node *n, const json_t *was, const json_t *now)
{
	const char *state = jv_str(now, "state", "");
	if (was && strcmp(jv_str(was, "state", ""), state) == 0 &&
	    strcmp(jv_str(was, "hash", ""), jv_str(now, "hash", "")) == 0)
		return;
	char why[sizeof(n->hold)];
	if (n->profile && fleet_hold_reason(n->profile, now, why, sizeof(why)) == FLEET_HOLD_STUCK)
		state_event(st, "node.profile", 0, n->id, "node %s: %s", n->name, why);
	else
		state_event(st, "node.profile", 0, n->id, "node %s: profile %.12s %s (%zu steps)",
		            n->name, jv_str(now, "hash", ""), state,
		            json_array_size(json_object_get(now, "steps")));
}

void state_node_profile_status(struct state *st, struct node *n, const json_t *status)
{
	if (json_equal(n->profile_status, (json_t *)status))
		return;
	status_event(st, n, n->profile_status, status);
	json_decref(n->profile_status);
	n->profile_status = json_deep_copy(status);
	n->converge_pending = 0;
	state_mark_node(st, n);
	st->core->fleet_kick = 1;
	nodes_profile_hold(st, n);
}

/* What a check of n's profile expects: its GPUs and their model. Not the
 * driver: the check compares a driver version exactly, while a profile
 * pins one by the converging steps' rule ("550" matches 550.54.15,
 * fleet/steps.h), which the profile's own driver step has already judged. */
static json_t *profile_expectations(const struct node *n)
{
	const json_t *spec = json_object_get(n->profile, "spec");
	const json_t *gpu = json_object_get(spec, "gpu");
	json_t *e = json_pack("{s:I}", "gpus", (json_int_t)jv_int(gpu, "count", 0));
	if (jv_str(gpu, "model", NULL) && jv_int(gpu, "count", 0) > 0)
		json_object_set_new(e, "gpu_model", json_string(jv_str(gpu, "model", "")));
	return e;
}

json_t *state_node_expectations(const struct node *n)
{
	return n->profile ? profile_expectations(n) : NULL;
}

/* Whether n waits for a check of its profile now: converged for it, not
 * passed yet, its agent answers, and no check runs or waits to retry. */
static int wants_check(const struct node *n, int64_t now)
{
	const char *hash = profile_hash(n);
	return n->profile && !n->checking && n->state == NODE_READY && now >= n->check_after_ms &&
	       strcmp(n->profile_checked, hash) != 0 &&
	       strcmp(jv_str(n->profile_status, "hash", ""), hash) == 0 &&
	       strcmp(jv_str(n->profile_status, "state", ""), "converged") == 0;
}

int state_node_next_check(struct state *st, int64_t now, int64_t *node_id, char *hash,
                          size_t hashlen, json_t **expect)
{
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		if (!wants_check(n, now))
			continue;
		n->checking = 1;
		*node_id = n->id;
		snprintf(hash, hashlen, "%s", profile_hash(n));
		*expect = profile_expectations(n);
		return 0;
	}
	return ERR_NOTFOUND;
}

void state_node_checked(struct state *st, int64_t node_id, const char *hash, int ok,
                        const char *summary, int ran)
{
	struct node *n = state_node(st, node_id);
	if (!n)
		return;
	if (ran)
		n->checking = 0;
	if (!n->profile || strcmp(hash, profile_hash(n)) != 0)
		return; /* its profile changed while the check ran */
	/* a check that fails again as before is retried quietly */
	int same = !ok && strncmp(n->check_failed, summary, sizeof(n->check_failed) - 1) == 0;
	if (ok) {
		text_printf(n->profile_checked, sizeof(n->profile_checked), "%s", hash);
		n->check_failed[0] = '\0';
		state_mark_node(st, n);
	} else {
		text_printf(n->check_failed, sizeof(n->check_failed), "%s", summary);
		n->check_after_ms = wall_ms() + NODES_CHECK_RETRY_MS;
	}
	if (!same)
		state_event(st, "node.check", 0, n->id, "node %s check %s for profile %s: %s",
		            n->name, ok ? "passed" : "failed", profile_name(n), summary);
	st->core->fleet_kick = 1;
	nodes_profile_hold(st, n);
}

/* ---- JSON ---- */

static int64_t gpu_owner(struct state *st, const struct node *n, int index)
{
	for (int i = 0; i < st->core->nactive; i++) {
		const struct attempt *a = st->core->active[i];
		for (int k = 0; k < a->nranks; k++)
			if (a->ranks[k].node_id == n->id && (a->ranks[k].gpus & (1ull << index)) &&
			    !rank_state_final(a->ranks[k].state))
				return a->job_id;
	}
	return 0;
}

static const json_t *inventory_entry(const struct node *n, int index)
{
	size_t i;
	json_t *g;
	json_array_foreach (json_object_get(n->facts, "gpus"), i, g) {
		if (jv_int(g, "index", -1) == index)
			return g;
	}
	return NULL;
}

static json_t *gpu_json(struct state *st, const struct node *n, const struct gpu_slot *g,
                        int detail)
{
	int64_t owner = (n->gpus_used & (1ull << g->index)) ? gpu_owner(st, n, g->index) : 0;
	const json_t *h = gpu_entry(json_object_get(n->health, "gpus"), g->index);
	json_t *o =
	        json_pack("{s:i,s:s,s:s,s:I,s:o,s:s}", "index", g->index, "uuid", g->uuid, "model",
	                  g->model, "memory_bytes", (json_int_t)g->memory_bytes, "job_id",
	                  owner > 0 ? json_integer(owner) : json_null(), "health",
	                  (n->gpus_unhealthy & (1ull << g->index)) ? jv_str(h, "state", "unhealthy")
	                                                           : "healthy");
	if (h && *jv_str(h, "reason", ""))
		json_object_set_new(o, "health_reason", json_string(jv_str(h, "reason", "")));
	const json_t *inv = inventory_entry(n, g->index);
	if (detail && inv) { /* topology and the rest of the inventory, as reported */
		const char *k;
		json_t *v;
		json_object_foreach ((json_t *)inv, k, v) {
			if (!json_object_get(o, k))
				json_object_set(o, k, v);
		}
	}
	return o;
}

/* The profile's part of a node: its name and hash, how its agent stands
 * against it (with every step when detail), and what holds it. */
static void profile_json(const struct node *n, json_t *o, int detail)
{
	if (n->admin == NODE_READY && n->hold[0]) /* what keeps it from work */
		json_object_set_new(o, "reason", json_string(n->hold));
	json_object_set_new(o, "held", n->hold[0] ? json_string(n->hold) : json_null());
	json_object_set_new(o, "profile",
	                    n->profile ? json_pack("{s:s,s:s}", "name", profile_name(n), "hash",
	                                           profile_hash(n))
	                               : json_null());
	json_t *status = json_null();
	if (n->profile_status && detail)
		status = json_deep_copy(n->profile_status);
	else if (n->profile_status)
		status = json_pack("{s:s,s:s}", "hash", jv_str(n->profile_status, "hash", ""),
		                   "state", jv_str(n->profile_status, "state", ""));
	json_object_set_new(o, "profile_status", status);
	json_object_set_new(o, "profile_checked",
	                    n->profile_checked[0] ? json_string(n->profile_checked) : json_null());
	json_object_set_new(o, "fleet_removed",
	                    n->fleet_removed ? json_integer(n->fleet_removed) : json_null());
}

json_t *state_node_json(struct state *st, const struct node *n, int detail)
{
	json_t *gpus = json_array();
	for (int i = 0; i < n->ngpus; i++)
		json_array_append_new(gpus, gpu_json(st, n, &n->gpus[i], detail));
	json_t *o = json_pack(
	        "{s:I,s:s,s:s,s:s,s:s,s:s,s:i,s:I,s:s,s:I,s:i,s:i,s:i,s:o}", "id",
	        (json_int_t)n->id, "name", n->name, "hostname", n->hostname, "address", n->address,
	        "agent_url", n->agent_url, "state", node_shown_state(n), "cpus", n->cpus,
	        "memory_bytes", (json_int_t)n->memory_bytes, "backend", n->backend,
	        "last_seen_ms_ago", (json_int_t)(now_ms() - n->last_seen_ms), "gpus_total",
	        n->ngpus, "gpus_allocated", __builtin_popcountll(n->gpus_used), "gpus_unhealthy",
	        __builtin_popcountll(n->gpus_unhealthy), "gpus", gpus);
	json_object_set_new(o, "facts_ms_ago",
	                    n->facts_ms ? json_integer(now_ms() - n->facts_ms) : json_null());
	json_object_set_new(o, "reason", json_string(n->admin_reason));
	json_object_set_new(o, "registered_from",
	                    n->registered_from[0] ? json_string(n->registered_from) : json_null());
	json_object_set_new(o, "reset", json_boolean(n->reset));
	json_object_set_new(o, "drained_by_fault", json_boolean(n->admin_by_fault));
	const char *fault = state_node_fault(n);
	json_object_set_new(o, "fault", fault ? json_string(fault) : json_null());
	json_t *faults = json_object();
	for (int s = 0; s < NODE_FAULT_NSCOPES; s++)
		json_object_set_new(faults, node_fault_scope_name(s), json_integer(n->faults[s]));
	json_object_set_new(o, "faults", faults);
	json_object_set_new(o, "labels", n->labels ? json_incref(n->labels) : json_object());
	json_object_set_new(o, "pool", n->pool ? json_string(n->pool) : json_null());
	profile_json(n, o, detail);
	if (detail) {
		static const char *const keys[] = {"driver_version", "cuda_version",
		                                   "agent_version",  "rdma",
		                                   "gpu_groups",     "gpu_near_groups"};
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			json_t *v = json_object_get(n->facts, keys[k]);
			if (v)
				json_object_set(o, keys[k], v);
		}
	}
	return o;
}
