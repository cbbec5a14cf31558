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
 * Also a node's liveness (registration, silence, return). Layer 3 of the
 * state files (core.h); every function runs with the state lock held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
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
			if (a->ending || !j || (j->checkpointing != 0) != (pass == 0) ||
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
		if (!busy)
			node_admin_to(st, n, NODE_DRAINED, NULL, 0, NULL);
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
		if (a->ending || !j || !uses(a, n, 1ull << index))
			continue;
		if (!j->has_exit) {
			j->has_exit = 1;
			j->exit_code = 1;
			text_printf(j->reason, sizeof(j->reason), "%s", why);
		}
		a->fault = 1;
		state_mark_job(st, j);
		state_event(st, "job.gpu_fault", j->id, n->id, "%s", why);
		state_attempt_stop(st, a);
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

/* After loading: the masks from the last health report. */
void state_node_restore(struct state *st, struct node *n)
{
	(void)st;
	n->gpus_unhealthy = unhealthy_of(json_object_get(n->health, "gpus"));
}

/* The fault the agent reports for the node now, or NULL. */
const char *state_node_fault(const struct node *n)
{
	const json_t *nf = json_object_get(n->health, "node");
	return json_is_object(nf) ? jv_str(nf, "reason", "a node fault") : NULL;
}

/* ---- liveness ---- */

static void node_lost(struct state *st, struct node *n)
{
	if (node_to(st, n, NODE_LOST, "node %s silent for over %lld ms", n->name,
	            (long long)st->config.node_timeout_ms))
		return;
	log_warn("node lost node=%s timeout_ms=%lld", n->name,
	         (long long)st->config.node_timeout_ms);
	ranks_node_lost(st, n);
	state_bump(st, n);
}

void nodes_check_silent(struct state *st, int64_t now)
{
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		if (n->state != NODE_LOST && !n->waiter &&
		    now - n->last_seen_ms > st->config.node_timeout_ms)
			node_lost(st, n);
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

/* ---- registration ---- */

struct node *state_register(struct state *st, const json_t *facts, const char *name)
{
	struct node *n = state_node_by_name(st, name);
	if (!n) {
		n = xcalloc(1, sizeof(*n));
		n->id = st->nnodes + 1;
		n->name = xstrdup(name);
		n->hostname = xstrdup("");
		n->address = xstrdup("127.0.0.1");
		n->agent_url = xstrdup("");
		n->backend = xstrdup("none");
		n->state = NODE_READY; /* created ready: not a move (store/machine.h) */
		n->admin = NODE_READY;
		st->nodes = xrealloc(st->nodes, sizeof(*st->nodes) * (size_t)(st->nnodes + 1));
		st->nodes[st->nnodes++] = n;
		state_event(st, "node.registered", 0, n->id, "node %s registered", name);
	} else {
		state_event(st, "node.reregistered", 0, n->id, "node %s registered again", name);
	}
	char secret[65];
	random_hex(secret, 32);
	free(n->secret);
	n->secret = xstrdup(secret);
	state_node_facts(st, n, facts);
	n->last_seen_ms = now_ms();
	state_want_schedule(st);
	return n;
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
	json_object_set_new(o, "reason", json_string(n->admin_reason));
	json_object_set_new(o, "drained_by_fault", json_boolean(n->admin_by_fault));
	const char *fault = state_node_fault(n);
	json_object_set_new(o, "fault", fault ? json_string(fault) : json_null());
	json_t *faults = json_object();
	for (int s = 0; s < NODE_FAULT_NSCOPES; s++)
		json_object_set_new(faults, node_fault_scope_name(s), json_integer(n->faults[s]));
	json_object_set_new(o, "faults", faults);
	json_object_set_new(o, "labels", n->labels ? json_incref(n->labels) : json_object());
	json_object_set_new(o, "pool", n->pool ? json_string(n->pool) : json_null());
	if (detail) {
		static const char *const keys[] = {"driver_version", "cuda_version", "rdma",
		                                   "gpu_groups", "gpu_near_groups"};
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			json_t *v = json_object_get(n->facts, keys[k]);
			if (v)
				json_object_set(o, keys[k], v);
		}
	}
	return o;
}
