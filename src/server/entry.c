/* entry.c - state.h's entry points that compose the layers below: opening
 * (load, then restore every index), submission (build, the can-it-ever-fit
 * check, admit, a cycle), registration (the node, then what the fleet's
 * spec gives it), agent reports and housekeeping (apply, then settle, then
 * the workflow engine's step and the fleet's rollout), and the flush (the
 * core's records with the engine's and the fleet's, in one transaction).
 * Layer 7 of the state files (core.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "server/fleet.h"
#include "server/flows.h"
#include "server/glue.h"

/* A loaded node's facts and health masks, as when it last reported. */
static void restore_node(struct state *st, struct node *n)
{
	if (n->facts)
		state_node_facts(st, n, n->facts);
	state_node_restore(st, n);
	n->dirty = 0; /* as loaded */
}

/* After loading: pending, active, GPU allocations, usage and the glue's
 * interned ids. */
static void restore_job(struct state *st, struct job *j)
{
	state_team(st, j->team, 1);
	glue_job_cache(st, j);
	if (j->state == JOB_PENDING)
		state_pending_add(st, j);
	for (int k = 0; k < j->nattempts; k++) {
		struct attempt *a = j->attempts[k];
		if (job_state_final(a->state)) {
			state_account(st, j, a);
			continue;
		}
		state_active_add(st, a);
		for (int r = 0; r < a->nranks; r++) {
			struct node *n = state_node(st, a->ranks[r].node_id);
			if (n && !rank_state_final(a->ranks[r].state)) {
				n->gpus_used |= a->ranks[r].gpus;
				a->ranks[r].stop_gen = n->generation;
			}
		}
	}
}

int state_open(struct state *st, const char *db_path, int full_sync, int64_t node_timeout_ms)
{
	int rc = state_core_open(st, db_path, full_sync, node_timeout_ms);
	if (rc)
		return rc;
	for (int i = 0; i < st->nnodes; i++)
		restore_node(st, st->nodes[i]);
	for (int64_t i = 0; i < st->njobs; i++)
		if (st->jobs[i])
			restore_job(st, st->jobs[i]);
	log_info("state loaded nodes=%d jobs=%lld attempts=%lld active=%d pending=%d", st->nnodes,
	         (long long)st->njobs, (long long)st->core->nattempts, st->core->nactive,
	         st->core->npending);
	rc = flows_open(st);
	if (rc == 0)
		rc = fleet_open(st);
	if (rc == 0)
		rc = state_flush(st);
	if (rc)
		state_close(st);
	return rc;
}

void state_close(struct state *st)
{
	state_flush(st);
	glue_free(st);
	flows_close(st);
	fleet_close(st);
	state_core_free(st);
}

/* Here, not in state.c: the workflow engine's and the fleet's records are
 * written in the core's transaction, and they lie above the core. */
int state_flush(struct state *st)
{
	struct state_core *c = st->core;
	int rc = state_flush_begin(st);
	if (rc == 1)
		return 0; /* nothing to write */
	if (rc == 0 && c->flows_dirty)
		rc = flows_flush(st, c->store);
	if (rc == 0 && c->fleet_dirty)
		rc = fleet_flush(st, c->store);
	rc = state_flush_end(st, rc);
	if (rc)
		return rc;
	if (c->flows_dirty)
		flows_flushed(st);
	c->flows_dirty = 0;
	if (c->fleet_dirty)
		fleet_flushed(st);
	c->fleet_dirty = 0;
	state_wake_written(st);
	return 0;
}

int state_submit(struct state *st, const json_t *body, struct job **out, char *err, size_t errlen)
{
	return state_submit_keyed(st, body, NULL, out, err, errlen);
}

int state_submit_keyed(struct state *st, const json_t *body, const struct store_idem *key,
                       struct job **out, char *err, size_t errlen)
{
	struct job **js = NULL;
	int n = 0;
	st->core->admit_key = key; /* for jobs_admit's transaction */
	int rc = glue_submit(st, body, NULL, &js, &n, err, errlen);
	st->core->admit_key = NULL;
	if (rc)
		return rc;
	state_schedule(st);
	for (int k = 0; k < n; k++) {
		struct job *j = js[k];
		if (j->state == JOB_PENDING && strcmp(j->reason, "waiting to be scheduled") == 0)
			text_printf(j->reason, sizeof(j->reason), /* the cycle was skipped */
			            "needs %d GPU(s) on %d node(s); every GPU is in use", j->gpus,
			            j->nodes);
	}
	*out = js[0];
	free(js);
	return 0;
}

void state_reports(struct state *st, struct node *n, const json_t *ranks, int64_t agent_gen)
{
	ranks_apply_reports(st, n, ranks, agent_gen);
	nodes_back(st, n, ranks);
	state_settle(st);
	flows_step(st);
}

void state_check_nodes(struct state *st, int64_t now)
{
	ranks_check_time_limits(st);
	ranks_check_idle(st);
	nodes_check_silent(st, now);
	state_hold_check(st, wall_ms());
	state_settle(st);
	flows_step(st);
	fleet_step(st, wall_ms(), 0);
	state_settle(st); /* what the rollout changed (a node back in service) */
}

int state_register(struct state *st, const json_t *facts, const char *name,
                   const struct node_admission *adm, struct node **out, char *err, size_t errlen)
{
	struct node *n = NULL;
	int rc = nodes_register(st, facts, name, adm, &n, err, errlen);
	if (rc == 0) {
		fleet_node_joined(st, n);
		*out = n;
	}
	return rc;
}
