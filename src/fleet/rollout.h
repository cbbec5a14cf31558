/* rollout.h - the pace of a rolling upgrade: which nodes may go out of
 * service now.
 *
 * A rollout takes each node whose profile change needs a drain (plan.h)
 * through these phases, one node at a time or as many as the spec's
 * `upgrade` policy allows (server/fleet.c carries them out):
 *
 *   queued --start--> draining --drained--> converging --converged-->
 *     validating --node check passed--> done
 *
 *   draining:   cordoned and drained (checkpointing jobs get their grace
 *               and are requeued)
 *   converging: the new profile is sent; its agent converges to it
 *   validating: converged; the node check must pass within the policy's
 *               validation_timeout
 *   done:       back in service (unless it was out before its turn)
 *
 * and failed, from converging (its agent reports the profile failed) or
 * validating (no passing check in time): the rollout stops there, the node
 * stays out of service with the reason, and no other node starts.
 *
 * fleet_rollout_next() decides what may start: at most max_unavailable
 * nodes out at once fleet-wide and max_unavailable_per_block within one
 * topology block, counting the nodes between queued and done. A node that
 * was out of service before its turn (cordoned by hand, drained) costs no
 * capacity: it starts without counting, and stays out after. A node without
 * a block is a block of its own. A lost node waits in the queue. Nodes
 * start in their order (the spec's), skipping those whose block is full.
 *
 * Pure: no I/O, no allocation (the caller gives the arrays); one thread
 * per call.
 */
#ifndef ANVIL_FLEET_ROLLOUT_H
#define ANVIL_FLEET_ROLLOUT_H

#include <stdint.h>

enum fleet_phase {
	FLEET_QUEUED,
	FLEET_DRAINING,
	FLEET_CONVERGING,
	FLEET_VALIDATING,
	FLEET_DONE,
	FLEET_FAILED,
	FLEET_NPHASES
};

const char *fleet_phase_name(enum fleet_phase p);
/* 0, or -1 when s names no phase. */
int fleet_phase_parse(const char *s, enum fleet_phase *out);

/* The spec's `upgrade` policy. */
struct fleet_policy {
	int max_unavailable;
	int max_per_block;
};

/* One node of a rollout as the decision needs it. */
struct fleet_unit {
	const char *block; /* its topology block; NULL or "": a block of its own */
	enum fleet_phase phase;
	int was_out; /* out of service before its turn: costs no capacity */
	int lost;    /* its agent is silent: it cannot start now */
};

struct fleet_next {
	int stop;   /* a node failed: nothing starts, the rollout stops */
	int done;   /* every node is done */
	int out;    /* nodes out now that count against the policy */
	int nstart; /* how many indexes start[] holds */
};

/* Which of the n units start now: their indexes, in order, into start
 * (room for n), their count and the rollout's standing in *r. work is the
 * caller's scratch, room for n. */
void fleet_rollout_next(const struct fleet_policy *p, const struct fleet_unit *u, int n, int *start,
                        int *work, struct fleet_next *r);

#endif
