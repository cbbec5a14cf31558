/* records.h - the record files of the server's state: layers 2 and 3 of
 * core.h's drawing. What they offer users is declared in state.h; this is
 * what they offer the layers above them. Every function runs with the
 * state lock held.
 */
#ifndef ANVIL_RECORDS_H
#define ANVIL_RECORDS_H

#include "model/machine.h"
#include "server/core.h"

/* ---- layer 2: ranks.c ---- */

/* A job lost with its node is requeued at most this many times unless it
 * says otherwise (max_restarts), as Kubernetes' Job backoffLimit bounds
 * its retries. */
#define RANKS_MAX_RESTARTS_DEFAULT 3
/* After a lost node's lease, this long for its ranks' shims to have
 * killed them (agent/lease.h): they act at the lease's end to the ms. */
#define RANKS_LEASE_MARGIN_MS 1000
/* A job lost with its node exits 75 (EX_TEMPFAIL: try again), as
 * `anvil run --wait` does (docs/cli.md). */
#define RANKS_EXIT_LOST 75
/* How many uploaded checkpoints an attempt lists (the newest last); the
 * next attempt restores the newest of all its job's attempts. */
#define RANKS_CHECKPOINTS_KEPT 3

/* Stops a so that its job goes back to its queue (drain, bad GPU); why is
 * the attempt's end reason. */
void state_attempt_requeue(struct state *st, struct attempt *a, const char *why);
/* Applies one sync's rank reports; agent_gen is the generation the agent
 * last applied (a rank dropped before it and not reported never ran). */
void ranks_apply_reports(struct state *st, struct node *n, const json_t *ranks, int64_t agent_gen);
/* Every rank still on n is lost with it (the gangs end). */
void ranks_node_lost(struct state *st, struct node *n);
/* Stops attempts past their time limit, as Slurm does (TIMEOUT); a
 * session is warned on its terminal first (config.session_warning_ms). */
void ranks_check_time_limits(struct state *st);
/* Stops running sessions whose GPUs have been idle for their queue's
 * idle_timeout (from their agents' gpu_idle_ms reports), warned first. */
void ranks_check_idle(struct state *st);

/* ---- layer 3: jobs.c ---- */

/* Validates a submission body and makes its job records: one, or an
 * array's members (*n of them, in *out, which the caller frees), not yet
 * indexed, with ids from first_id on: st->njobs + 1 for the next
 * submission, more for one admitted together with others built before it
 * (jobs_admit takes them all). On failure: a code and a message naming the
 * field, the value and the reason. */
int jobs_build(struct state *st, const json_t *body, int64_t first_id, struct job ***out, int *n,
               char *err, size_t errlen);
/* Persists built jobs in one transaction and queues them; on failure
 * nothing changed and the caller frees them. */
int jobs_admit(struct state *st, struct job **js, int n, char *err, size_t errlen);

/* ---- layer 3: deps.c ---- */

/* The pending jobs the scheduler may see now, in pending order, into out
 * (room for npending): those whose dependencies hold and whose array is
 * under its limit; those held by their array's limit into held (room for
 * npending, *nheld of them). The reasons of those waiting for a
 * dependency say so; a job whose dependency can never hold is cancelled,
 * saying why. Returns the count in out. */
int deps_ready(struct state *st, struct job **out, struct job **held, int *nheld);
/* After the cycle that saw ready (deps_ready's out): the reasons of the
 * held members. Where its array runs as many as its limit allows, the
 * limit; else what holds the member let through ahead of them (the CPU
 * room, GPUs), which the limit only repeats. */
void deps_explain(struct state *st, struct job *const *ready, int nready, struct job *const *held,
                  int nheld);

/* ---- layer 3: nodes.c ---- */

/* Marks nodes silent for longer than the node timeout lost. */
void nodes_check_silent(struct state *st, int64_t now);
/* A lost node whose agent syncs again running nothing unwanted is ready. */
void nodes_back(struct state *st, struct node *n, const json_t *ranks);
/* After loading: the masks from the last health report, the profile's hold. */
void state_node_restore(struct state *st, struct node *n);
/* Registration (state_register composes it with the fleet's part): the
 * node named name, made (with a new secret) or admitted again as adm
 * allows, with these facts; state.h says what is refused. */
int nodes_register(struct state *st, const json_t *facts, const char *name,
                   const struct node_admission *adm, struct node **out, char *err, size_t errlen);
/* How long a node whose check of its profile failed waits for the next. */
#define NODES_CHECK_RETRY_MS 10000
/* Recomputes what holds n from new work (node->hold): its profile not
 * converged for the current hash, or its node check not passed for it.
 * When the hold lifts, a cycle may place work on n. */
void nodes_profile_hold(struct state *st, struct node *n);
/* Sets the profile n's agent is to converge to ({"hash", "name", "spec"},
 * copied; NULL: none): the node's long poll is woken and it is held until
 * converged and checked for it. Nothing when it is the same. */
void nodes_set_profile(struct state *st, struct node *n, const json_t *profile);
/* Asks n's agent, through the checker threads (state_node_next_converge),
 * to run its profile's steps again: how an apply fixes a node that failed
 * or drifted, which its agent never does by itself. */
void nodes_request_converge(struct state *st, struct node *n);
/* Draining nodes whose last attempt has ended become drained. */
void state_nodes_settle(struct state *st);

#endif
