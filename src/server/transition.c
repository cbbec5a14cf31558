/* transition.c - the only writers of a job's, attempt's, rank's and node's
 * state, of an attempt's stop cause and of a job's cancel request
 * (core.h). Each move is checked against model/machine.h's table. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "model/machine.h"
#include "server/core.h"

static const struct machine_move *allowed(struct state *st, enum machine_kind k, int64_t id,
                                          int from, int to)
{
	const struct machine_move *m = machine_find(k, from, to);
	if (!m)
		st->stats.refused_moves++;
	if (!m)
		log_error("illegal state change refused: %s %lld %s -> %s", machine_kind_name(k),
		          (long long)id, machine_state_name(k, from), machine_state_name(k, to));
	return m;
}

static void record(struct state *st, const struct machine_move *m, int64_t job_id, int64_t node_id,
                   const char *fmt, va_list ap)
{
	if (!m->event)
		return;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	state_event(st, m->event, job_id, node_id, "%s", msg);
}

static struct attempt *current(const struct job *j)
{
	return j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
}

int job_to(struct state *st, struct job *j, enum job_state to, const char *fmt, ...)
{
	const struct machine_move *m = allowed(st, MACHINE_JOB, j->id, (int)j->state, (int)to);
	if (!m)
		return ERR_CONFLICT;
	const struct attempt *a = current(j);
	int64_t node_id = 0;
	if (to == JOB_SCHEDULED && a && a->nranks)
		node_id = a->ranks[0].node_id;
	if (to == JOB_RUNNING)
		j->start_ms = a && a->start_ms ? a->start_ms : wall_ms();
	if (to == JOB_PENDING) { /* requeued: the next attempt starts afresh */
		j->start_ms = 0;
		j->end_ms = 0;
		j->has_exit = 0;
		j->exit_code = 0;
	}
	if (job_state_final(to)) {
		j->end_ms = a && a->end_ms ? a->end_ms : wall_ms();
		if (!j->start_ms && a && j->state != JOB_PENDING)
			j->start_ms = a->start_ms; /* ended before every rank ran */
	}
	if (job_state_final(to) && j->task) { /* the workflow engine looks next (flows.c) */
		struct state_core *c = st->core;
		XGROW(c->flow_done, c->nflow_done, c->capflow_done);
		c->flow_done[c->nflow_done++] = j->id;
	}
	j->state = to;
	state_mark_job(st, j);
	va_list ap;
	va_start(ap, fmt);
	record(st, m, j->id, node_id, fmt, ap);
	va_end(ap);
	return 0;
}

int attempt_to(struct state *st, struct attempt *a, enum job_state to)
{
	if (!allowed(st, MACHINE_ATTEMPT, a->id, (int)a->state, (int)to))
		return ERR_CONFLICT;
	struct job *j = state_job(st, a->job_id);
	if (to == JOB_RUNNING && !a->start_ms)
		a->start_ms = wall_ms();
	a->state = to;
	if (job_state_final(to)) {
		a->end_ms = wall_ms();
		state_active_remove(st, a);
		state_account(st, j, a);
		state_want_schedule(st);
	}
	if (j)
		state_mark_job(st, j);
	return 0;
}

int attempt_stop_to(struct state *st, struct attempt *a, enum attempt_stop to, int64_t node_id,
                    const char *fmt, ...)
{
	const struct machine_move *m =
	        allowed(st, MACHINE_ATTEMPT_STOP, a->id, (int)a->stop, (int)to);
	if (!m)
		return ERR_CONFLICT;
	a->stop = to;
	struct job *j = state_job(st, a->job_id);
	if (j)
		state_mark_job(st, j);
	va_list ap;
	va_start(ap, fmt);
	record(st, m, a->job_id, node_id, fmt, ap);
	va_end(ap);
	/* Its nodes' desired sets lose its ranks; each rank's end is then
	 * reported by its agent (or it never started: ranks.c reaps it). */
	for (int r = 0; r < a->nranks; r++) {
		struct rank *k = &a->ranks[r];
		if (rank_state_final(k->state))
			continue;
		struct node *n = state_node(st, k->node_id);
		state_bump(st, n);
		k->stop_gen = n ? n->generation : 0;
	}
	return 0;
}

int job_cancel_to(struct state *st, struct job *j, enum job_cancel to, const char *fmt, ...)
{
	const struct machine_move *m =
	        allowed(st, MACHINE_JOB_CANCEL, j->id, (int)j->cancel_requested, (int)to);
	if (!m)
		return ERR_CONFLICT;
	j->cancel_requested = to;
	state_mark_job(st, j);
	va_list ap;
	va_start(ap, fmt);
	record(st, m, j->id, 0, fmt, ap);
	va_end(ap);
	return 0;
}

int rank_to(struct state *st, struct attempt *a, struct rank *k, enum rank_state to)
{
	if (!allowed(st, MACHINE_RANK, a->id, (int)k->state, (int)to))
		return ERR_CONFLICT;
	/* Reported running, or exited with a status of its own (a rank the
	 * agent lost, or one stopped before it started, carries an error). */
	int ran = to == RANK_RUNNING || (to == RANK_EXITED && !k->error[0]);
	if (ran && !a->start_ms)
		a->start_ms = wall_ms();
	k->state = to;
	if (rank_state_final(to)) {
		struct node *n = state_node(st, k->node_id);
		if (n)
			n->gpus_used &= ~k->gpus;
		state_want_schedule(st);
	}
	struct job *j = state_job(st, a->job_id);
	if (j)
		state_mark_job(st, j);
	return 0;
}

int node_to(struct state *st, struct node *n, enum node_state to, const char *fmt, ...)
{
	const struct machine_move *m = allowed(st, MACHINE_NODE, n->id, (int)n->state, (int)to);
	if (!m)
		return ERR_CONFLICT;
	n->state = to;
	state_mark_node(st, n);
	if (to == NODE_READY)
		state_want_schedule(st);
	va_list ap;
	va_start(ap, fmt);
	record(st, m, 0, n->id, fmt, ap);
	va_end(ap);
	return 0;
}

int node_admin_to(struct state *st, struct node *n, enum node_state to, const char *reason,
                  int by_fault, const char *note)
{
	const struct machine_move *m =
	        allowed(st, MACHINE_NODE_ADMIN, n->id, (int)n->admin, (int)to);
	if (!m)
		return ERR_CONFLICT;
	enum node_state was = n->admin;
	n->admin = to;
	if (to == NODE_READY)
		n->admin_by_fault = 0;
	else if (to != NODE_DRAINED)
		n->admin_by_fault = by_fault;
	if (reason)
		text_printf(n->admin_reason, sizeof(n->admin_reason), "%s", reason);
	state_mark_node(st, n);
	state_want_schedule(st);
	state_event(st, m->event, 0, n->id, "node %s: %s -> %s%s%s%s%s%s", n->name,
	            node_state_name(was), node_state_name(to), by_fault ? " by a fault" : "",
	            *n->admin_reason ? ": " : "", n->admin_reason, note ? " " : "",
	            note ? note : "");
	log_info("node state node=%s from=%s to=%s reason=\"%s\"", n->name, node_state_name(was),
	         node_state_name(to), n->admin_reason);
	return 0;
}
