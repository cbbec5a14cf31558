/* ranks.c - what agents report, what they are told to run, nodes that go
 * silent. Every function runs with the state lock held (see state.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "proto/wire.h"
#include "server/state.h"

static struct attempt *attempt_by_id(struct state *st, int64_t id)
{
	return id >= 1 && id <= st->nattempts ? st->attempts[id - 1] : NULL;
}

/* Asks every rank of a that still runs to stop (its nodes' desired sets
 * lose it); each rank's end is then reported by its agent. */
void state_attempt_stop(struct state *st, struct attempt *a)
{
	if (a->ending)
		return;
	a->ending = 1;
	for (int r = 0; r < a->nranks; r++) {
		struct rank *k = &a->ranks[r];
		if (rank_state_final(k->state))
			continue;
		struct node *n = state_node(st, k->node_id);
		state_bump(st, n);
		k->stop_gen = n ? n->generation : 0;
	}
}

static void finish_attempt(struct state *st, struct job *j, struct attempt *a)
{
	int lost = 0, failed = 0;
	for (int r = 0; r < a->nranks; r++) {
		const struct rank *k = &a->ranks[r];
		if (!rank_state_final(k->state))
			return;
		lost |= k->state == RANK_LOST;
		failed |= k->state == RANK_FAILED_START ||
		          (k->state == RANK_EXITED && (k->exit_code || k->signal));
	}
	enum job_state s = j->cancel_requested ? JOB_CANCELLED
	                   : a->preempted      ? JOB_PREEMPTED
	                   : lost              ? JOB_LOST
	                   : failed            ? JOB_FAILED
	                                       : JOB_SUCCEEDED;
	a->state = s;
	a->end_ms = wall_ms();
	state_account(st, j, a);
	for (int i = 0; i < st->nactive; i++)
		if (st->active[i] == a) {
			st->active[i] = st->active[--st->nactive];
			break;
		}
	st->need_schedule = 1;
	state_mark_job(st, j);
	if (s == JOB_PREEMPTED) { /* back in the queue; a new attempt later */
		j->state = JOB_PENDING;
		j->has_exit = 0;
		j->exit_code = 0;
		j->start_ms = 0;
		state_pending_add(st, j);
		if (!*a->end_reason)
			text_printf(a->end_reason, sizeof(a->end_reason), "preempted");
		text_printf(j->reason, sizeof(j->reason), "requeued: %s", a->end_reason);
		state_event(st, "job.requeued", j->id, 0, "attempt %lld %s; job requeued",
		            (long long)a->id, a->end_reason);
		return;
	}
	j->state = s;
	j->end_ms = a->end_ms;
	if (!j->has_exit) {
		/* Cancelled ranks still have a real status (143 after SIGTERM). */
		j->has_exit = 1;
		j->exit_code = 0;
		for (int r = 0; r < a->nranks && !j->exit_code; r++) {
			const struct rank *k = &a->ranks[r];
			if (k->state == RANK_EXITED)
				j->exit_code = k->signal ? 128 + k->signal : k->exit_code;
		}
	}
	if (s == JOB_SUCCEEDED)
		text_printf(j->reason, sizeof(j->reason), "all %d rank(s) exited 0", a->nranks);
	else if (s == JOB_CANCELLED)
		text_printf(j->reason, sizeof(j->reason), "cancelled by request");
	else if (a->timed_out)
		text_printf(j->reason, sizeof(j->reason), "stopped at its time limit");
	/* The job's reason is final now; the attempt keeps it as its own. */
	text_printf(a->end_reason, sizeof(a->end_reason), "%s", j->reason);
	state_event(st, "job.finished", j->id, 0, "job %lld %s exit_code=%d", (long long)j->id,
	            job_state_name(s), j->exit_code);
}

/* Rank k has ended: free its GPUs, and end the gang if it failed. */
static void rank_ended(struct state *st, struct job *j, struct attempt *a, struct rank *k)
{
	struct node *n = state_node(st, k->node_id);
	if (n)
		n->gpus_used &= ~k->gpus;
	int bad = k->state != RANK_EXITED || k->exit_code || k->signal;
	if (bad && !j->has_exit && !j->cancel_requested && !a->preempted && !a->timed_out) {
		j->has_exit = 1;
		j->exit_code = k->state == RANK_EXITED
		                       ? (k->signal ? 128 + k->signal : k->exit_code)
		                       : (k->state == RANK_FAILED_START ? 127 : 1);
		if (k->state == RANK_EXITED && k->error[0])
			text_printf(j->reason, sizeof(j->reason), "rank %d on %s was lost: %s",
			            k->rank, n ? n->name : "?", k->error);
		else if (k->state == RANK_FAILED_START && k->error[0]) /* the agent says why */
			text_printf(j->reason, sizeof(j->reason),
			            "rank %d on %s failed to start: %s", k->rank, n ? n->name : "?",
			            k->error);
		else
			text_printf(j->reason, sizeof(j->reason), "rank %d on %s %s", k->rank,
			            n ? n->name : "?",
			            k->state == RANK_LOST           ? "was lost with its node"
			            : k->state == RANK_FAILED_START ? "failed to start"
			            : k->signal                     ? "was killed by a signal"
			                                            : "exited non-zero");
	}
	/* A gang lives and dies as one: when one rank fails, every other rank
	 * is stopped and the attempt fails as a whole. */
	if (bad)
		state_attempt_stop(st, a);
	state_mark_job(st, j);
	st->need_schedule = 1;
	finish_attempt(st, j, a);
}

int state_cancel(struct state *st, struct job *j)
{
	if (job_state_final(j->state) || j->cancel_requested)
		return 0;
	j->cancel_requested = 1;
	state_mark_job(st, j);
	state_event(st, "job.cancel", j->id, 0, "cancel requested");
	if (j->state == JOB_PENDING) {
		state_pending_remove(st, j);
		j->state = JOB_CANCELLED;
		j->end_ms = wall_ms();
		text_printf(j->reason, sizeof(j->reason), "cancelled before it started");
		return 0;
	}
	text_printf(j->reason, sizeof(j->reason), "cancelling: stopping every rank");
	state_attempt_stop(st, j->attempts[j->nattempts - 1]);
	return 0;
}

/* ---- agent reports ---- */

static void apply_report(struct state *st, struct node *n, const json_t *rep)
{
	struct attempt *a = attempt_by_id(st, jv_int(rep, "attempt_id", 0));
	int64_t r = jv_int(rep, "rank", -1);
	if (!a || job_state_final(a->state) || r < 0 || r >= a->nranks)
		return; /* fencing: stale or unknown attempts change nothing */
	struct rank *k = &a->ranks[r];
	if (k->node_id != n->id || rank_state_final(k->state))
		return;
	struct job *j = state_job(st, a->job_id);
	const char *s = jv_str(rep, "state", "");
	k->pid = (int)jv_int(rep, "pid", k->pid);
	int64_t ckpt = jv_int(rep, "checkpoint_ms", 0);
	if (ckpt > a->checkpoint_ms && (a->start_ms == 0 || ckpt >= a->start_ms)) {
		a->checkpoint_ms = ckpt;
		state_mark_job(st, j);
	}
	if (strcmp(s, "running") == 0 || strcmp(s, "starting") == 0) {
		if (k->state == RANK_ASSIGNED) {
			k->state = RANK_RUNNING;
			state_mark_job(st, j);
			int all = 1;
			for (int i = 0; i < a->nranks; i++)
				all &= a->ranks[i].state != RANK_ASSIGNED;
			if (all && a->state == JOB_SCHEDULED && !a->ending) {
				a->state = JOB_RUNNING;
				a->start_ms = wall_ms();
				j->state = JOB_RUNNING;
				j->start_ms = a->start_ms;
				text_printf(j->reason, sizeof(j->reason), "running");
			}
		}
		return;
	}
	if (strcmp(s, "exited") == 0) {
		k->state = RANK_EXITED;
		k->exit_code = (int)jv_int(rep, "exit_code", 0);
		k->signal = (int)jv_int(rep, "signal", 0);
		const char *lost = jv_str(rep, "error", NULL); /* the agent lost it: why */
		if (lost)
			text_printf(k->error, sizeof(k->error), "%s", lost);
	} else if (strcmp(s, "failed_to_start") == 0) {
		k->state = RANK_FAILED_START;
		text_printf(k->error, sizeof(k->error), "%s",
		            jv_str(rep, "error", "failed to start"));
	} else {
		return;
	}
	rank_ended(st, j, a, k);
}

/* A rank dropped from the node's desired set that the agent, having applied
 * that generation, does not report has never run there: it is over. */
static int was_reported(const json_t *ranks, int64_t attempt_id, int rank)
{
	size_t x;
	json_t *rep;
	json_array_foreach (ranks, x, rep) {
		if (jv_int(rep, "attempt_id", 0) == attempt_id && jv_int(rep, "rank", -1) == rank)
			return 1;
	}
	return 0;
}

static void reap_unreported(struct state *st, struct node *n, const json_t *ranks,
                            int64_t agent_gen)
{
	/* Downward: finishing an attempt swaps the last active one into its
	 * slot, and that one has been visited already. */
	for (int i = st->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->active[i];
		if (!a->ending)
			continue;
		for (int r = 0; r < a->nranks && !job_state_final(a->state); r++) {
			struct rank *k = &a->ranks[r];
			if (k->node_id != n->id || rank_state_final(k->state) ||
			    agent_gen < k->stop_gen || was_reported(ranks, a->id, r))
				continue;
			k->state = RANK_EXITED;
			snprintf(k->error, sizeof(k->error), "stopped before it started");
			rank_ended(st, state_job(st, a->job_id), a, k);
		}
	}
}

void state_reports(struct state *st, struct node *n, const json_t *ranks, int64_t agent_gen)
{
	size_t i;
	json_t *rep;
	json_array_foreach (ranks, i, rep)
		apply_report(st, n, rep);
	reap_unreported(st, n, ranks, agent_gen);
	if (n->state == NODE_LOST) {
		/* Back from the dead: ready once it runs nothing we do not want. */
		int stale = 0;
		json_array_foreach (ranks, i, rep) {
			const char *s = jv_str(rep, "state", "");
			stale |= strcmp(s, "running") == 0 || strcmp(s, "starting") == 0;
		}
		if (!stale) {
			n->state = NODE_READY;
			n->dirty = 1;
			st->nodes_dirty = 1;
			st->need_schedule = 1;
			state_event(st, "node.ready", 0, n->id, "node %s is back", n->name);
			log_info("node is back node=%s", n->name);
		}
	}
	if (st->need_schedule) {
		st->need_schedule = 0;
		state_nodes_settle(st);
		state_schedule(st);
	}
}

/* ---- what a node should run ---- */

static void add_env(json_t *env, const char *k, const char *fmt, long long v)
{
	char tmp[32];
	snprintf(tmp, sizeof(tmp), fmt, v);
	json_object_set_new(env, k, json_string(tmp));
}

static json_t *rank_env(struct state *st, const struct job *j, const struct attempt *a,
                        const struct rank *k, const struct node *n)
{
	json_t *env = json_deep_copy(j->env);
	char cuda[4 * MODEL_MAX_GPUS + 1] = "";
	char uuids[98 * MODEL_MAX_GPUS + 1] = "";
	for (int i = 0; i < n->ngpus; i++) {
		if (!(k->gpus & (1ull << n->gpus[i].index)))
			continue;
		size_t c = strlen(cuda), u = strlen(uuids);
		snprintf(cuda + c, sizeof(cuda) - c, "%s%d", c ? "," : "", n->gpus[i].index);
		snprintf(uuids + u, sizeof(uuids) - u, "%s%s", u ? "," : "", n->gpus[i].uuid);
	}
	int nproc = j->gpus > 0 ? j->gpus : 1;
	json_object_set_new(env, "CUDA_VISIBLE_DEVICES", json_string(cuda));
	json_object_set_new(env, "NVIDIA_VISIBLE_DEVICES", json_string(j->gpus ? uuids : "void"));
	json_object_set_new(env, "MASTER_ADDR", json_string(a->master_addr));
	add_env(env, "MASTER_PORT", "%lld", a->master_port);
	add_env(env, "NNODES", "%lld", j->nodes);
	add_env(env, "NODE_RANK", "%lld", k->rank);
	add_env(env, "NPROC_PER_NODE", "%lld", nproc);
	add_env(env, "WORLD_SIZE", "%lld", (long long)j->nodes * nproc);
	add_env(env, "ANVIL_JOB_ID", "%lld", (long long)j->id);
	add_env(env, "ANVIL_ATTEMPT", "%lld", a->number);
	add_env(env, "ANVIL_ATTEMPT_ID", "%lld", (long long)a->id);
	json_object_set_new(env, "ANVIL_NODE", json_string(n->name));
	json_object_set_new(env, "ANVIL_JOB_NAME", json_string(j->name));
	if (j->checkpointing) /* the agent gives it ANVIL_CHECKPOINT_DIR */
		json_object_set_new(env, "ANVIL_CHECKPOINTING", json_string("1"));
	(void)st;
	return env;
}

/* A rank's desired entry (proto/wire.h, wire_desired); the limits only when set. */
static json_t *desired_entry(struct state *st, const struct job *j, const struct attempt *a,
                             const struct rank *k, const struct node *n)
{
	const struct wire_record *r = &wire_desired;
	json_t *d = json_object();
	wire_set(d, r, "attempt_id", json_integer(a->id));
	wire_set(d, r, "job_id", json_integer(j->id));
	wire_set(d, r, "rank", json_integer(k->rank));
	wire_set(d, r, "command", json_incref(j->command));
	wire_set(d, r, "cwd", j->cwd ? json_string(j->cwd) : json_null());
	wire_set(d, r, "gpus", state_gpu_list(k->gpus));
	wire_set(d, r, "grace_ms", json_integer(j->grace_ms));
	wire_set(d, r, "env", rank_env(st, j, a, k, n));
	if (j->cpu_millis > 0)
		wire_set(d, r, "cpu_millis", json_integer(j->cpu_millis));
	if (j->memory_bytes > 0)
		wire_set(d, r, "memory_bytes", json_integer(j->memory_bytes));
	return d;
}

json_t *state_desired(struct state *st, struct node *n)
{
	json_t *ranks = json_array();
	for (int i = 0; i < st->nactive; i++) {
		struct attempt *a = st->active[i];
		if (a->ending)
			continue;
		const struct job *j = state_job(st, a->job_id);
		for (int r = 0; r < a->nranks; r++) {
			struct rank *k = &a->ranks[r];
			if (k->node_id != n->id || rank_state_final(k->state))
				continue;
			/* A rank's entry never changes once placed: build it once. */
			if (!k->desired)
				k->desired = desired_entry(st, j, a, k, n);
			json_array_append(ranks, k->desired);
		}
	}
	json_t *o = json_object();
	wire_set(o, &wire_sync_answer, "generation", json_integer(n->generation));
	wire_set(o, &wire_sync_answer, "node_timeout_ms", json_integer(st->node_timeout_ms));
	wire_set(o, &wire_sync_answer, "ranks", ranks);
	return o;
}

/* ---- silent nodes ---- */

static void node_lost(struct state *st, struct node *n)
{
	n->state = NODE_LOST;
	n->dirty = 1;
	st->nodes_dirty = 1;
	state_event(st, "node.lost", 0, n->id, "node %s silent for over %lld ms", n->name,
	            (long long)st->node_timeout_ms);
	log_warn("node lost node=%s timeout_ms=%lld", n->name, (long long)st->node_timeout_ms);
	for (int i = st->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->active[i];
		for (int r = 0; r < a->nranks && !job_state_final(a->state); r++) {
			struct rank *k = &a->ranks[r];
			if (k->node_id != n->id || rank_state_final(k->state))
				continue;
			k->state = RANK_LOST;
			rank_ended(st, state_job(st, a->job_id), a, k);
		}
	}
	state_bump(st, n);
}

static int64_t limit_of(struct state *st, const struct job *j)
{
	if (j->time_limit_ms > 0)
		return j->time_limit_ms;
	struct queue *q = state_queue(st, j->queue);
	return q ? q->default_time_limit_ms : 0;
}

/* Stops attempts past their time limit, as Slurm does (TIMEOUT). */
static void check_time_limits(struct state *st)
{
	int64_t now = wall_ms();
	for (int i = st->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->active[i];
		struct job *j = state_job(st, a->job_id);
		int64_t limit = limit_of(st, j);
		if (a->ending || a->start_ms <= 0 || limit <= 0 || now - a->start_ms < limit)
			continue;
		a->timed_out = 1;
		text_printf(j->reason, sizeof(j->reason),
		            "reached its time limit of %lld s; stopping",
		            (long long)(limit / 1000));
		state_mark_job(st, j);
		state_event(st, "job.timeout", j->id, 0, "time limit %lld ms reached",
		            (long long)limit);
		state_attempt_stop(st, a);
	}
}

void state_check_nodes(struct state *st, int64_t now)
{
	check_time_limits(st);
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		if (n->state != NODE_LOST && !n->waiter &&
		    now - n->last_seen_ms > st->node_timeout_ms)
			node_lost(st, n);
	}
	if (st->need_schedule) {
		st->need_schedule = 0;
		state_nodes_settle(st);
		state_schedule(st);
	}
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
		n->state = NODE_READY;
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
	st->need_schedule = 1;
	return n;
}
