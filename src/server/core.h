/* core.h - the state core: what only the server's state files see.
 *
 * The state files are layered; each calls only the layers below it
 * (tests/lint/layers.py checks it, calls through a function pointer
 * included: a file below that needs one above is called by a file above
 * both, as state_flush calls the core's flush and then the engine's, and
 * st->wake in state.h is the one upcall by design):
 *
 *  -1  idem.c        the Idempotency-Keys of creates (idem.h): checks,
 *                    digests, the records a flush writes; only the store
 *   0  state.c       the core: indexes, dirty records, events, its part
 *                    of the flush, queues and teams, accounting;
 *                    jointoken.c and peer.c: leaves that know no state
 *                    (the join token's life, agent URLs against their
 *                    address)
 *   1  transition.c  the transitions: the only writers of a job's,
 *                    attempt's, rank's or node's state, of an attempt's
 *                    stop cause and of a job's cancel request
 *                    (model/machine.h)
 *   2  ranks.c       attempts and ranks: reports, stops, desired sets;
 *                    how a gang ends: when one rank fails, and in a job
 *                    with a head (head and workers, docs/cli.md) or an
 *                    MPI job (mpirun on rank 0) when rank 0 ends by
 *                    itself: its status is the job's, and the other
 *                    ranks are stopped without counting (the
 *                    attempt's stop cause rank0_ended)
 *   3  jobs.c        submission and cancellation; nodes.c: facts, admin
 *                    states, health, liveness, registration
 *   4  schedule.c    the scheduler glue (glue.h)
 *   5  flows.c       the workflow engine: executions' runs as jobs
 *                    (flows.h, flow/engine.h); fleet.c: the fleet as
 *                    code: plans, applies, revisions, joining and the
 *                    views (fleet.h, fleet_int.h, fleet/plan.h)
 *   6  fleet_rollout.c  the rolling upgrade's controller: moves a
 *                    rollout's nodes along (fleet.h, fleet/rollout.h)
 *   7  entry.c       the entry points that compose them (state.h),
 *                    state_flush among them
 *
 * Every function runs with the state lock held.
 */
#ifndef ANVIL_CORE_H
#define ANVIL_CORE_H

#include "server/idem.h"
#include "server/state.h"

/* Interned strings for the scheduler: id = index + 1; 0 means none. */
struct names {
	char **v;
	int n, cap;
};

struct event {
	char kind[32];
	int64_t job_id;
	int64_t node_id;
	char *message;
};

struct scratch; /* the scheduler glue's own (schedule.c) */
struct flows;   /* the workflow engine's own (flows.c) */
struct fleet;   /* the fleet's own (fleet.c, fleet_int.h) */

struct state_core {
	struct store *store;
	size_t capjobs;
	struct attempt **attempts; /* attempts[id - 1] */
	int64_t nattempts;
	size_t capattempts;
	struct job **pending; /* in scheduling order (see pending_add) */
	int npending, cappending;
	struct attempt **active; /* attempts not final */
	int nactive, capactive;
	int npending_cpu; /* pending jobs that are CPU-only (gpus 0) */
	struct names names;
	struct job **dirty_jobs;
	int ndirty_jobs, capdirty_jobs;
	int nodes_dirty;
	struct event *events;
	int nevents, capevents;
	int need_schedule;              /* a change may let work start: run a cycle */
	int64_t hold_wake_ms;           /* the earliest hold's end (wall ms); 0: none */
	int wakes_held;                 /* some node's wake_held is set (state_bump) */
	int64_t flush_failed_logged_ms; /* when a failed flush was last logged; 0: none failing */
	int64_t flush_failures;         /* failed flushes since then */
	struct scratch *glue;           /* made by the glue's first use, freed by it */
	/* The workflow engine (flows.c): its records, the documents loaded for
	 * it (until flows_open takes them), the workflow jobs that ended since
	 * it last looked (job_to adds them). Its part of a flush is called by
	 * state_flush (entry.c), above both, inside the transaction that
	 * state_flush_begin opened: state.c is below it and never calls it. */
	struct flows *flows;
	json_t *flow_loaded; /* {"execs": [doc], "runs": [[exec_id, doc]]} */
	int64_t *flow_done;
	int nflow_done, capflow_done;
	int flows_dirty; /* it has records to write: state_flush calls flows_flush */
	/* The fleet (fleet.c; its rollouts: fleet_rollout.c), alike: its
	 * records, the revisions loaded for it (until fleet_open takes them),
	 * whether it has records to write (state_flush calls fleet_flush),
	 * and a kick: something a rollout waits for may
	 * have happened (a node's profile status, a check, a drain), so its
	 * next step should not wait. */
	struct fleet *fleet;
	json_t *fleet_loaded; /* [[id, doc]] */
	int fleet_dirty;
	int fleet_kick;
	/* The Idempotency-Keys the next flush writes (idem.h), and the key of
	 * the submission being admitted: jobs_admit writes it in the
	 * transaction of the new jobs (state_submit_keyed sets it for the
	 * call; NULL otherwise). */
	struct idem_table idem;
	const struct store_idem *admit_key;
};

/* ---- layer 0: state.c ---- */

/* Allocates the core and opens the store; state_open (entry.c) loads it.
 * On an error nothing is left open. */
int state_core_open(struct state *st, const char *db_path, int full_sync, int64_t node_timeout_ms);
/* Frees every record and closes the store (unflushed changes are lost).
 * state_close (entry.c) has closed the workflow engine and the fleet. */
void state_core_free(struct state *st);
/* The core's part of a flush; state_flush (entry.c) composes it with the
 * workflow engine's and the fleet's, which lie above this layer, so one
 * transaction holds them all:
 *   state_flush_begin  1 when nothing at all is dirty (no transaction);
 *                      else opens the transaction and writes the dirty
 *                      jobs, nodes and events: 0, or an error (the
 *                      transaction is still open: state_flush_end ends it)
 *   state_flush_end    given the parts' result rc: writes the creates'
 *                      keys and commits when rc is 0, rolls back
 *                      otherwise (logged at most once in 10 s); on a
 *                      commit forgets what was dirty in the core.
 *                      Returns the flush's result. */
int state_flush_begin(struct state *st);
int state_flush_end(struct state *st, int rc);

void state_mark_job(struct state *st, struct job *j);   /* dirty: flush writes it */
void state_mark_node(struct state *st, struct node *n); /* dirty: flush writes it */
void state_bump(struct state *st, struct node *n);      /* its desired set changed */
void state_want_schedule(struct state *st);             /* run a cycle when settled */
/* A pending job may not be placed before wall ms `until` (a lost attempt's
 * lease: ranks.c, deps.c); state_hold_check asks for a cycle once the
 * earliest such time (now, wall ms) has passed. */
void state_hold_until(struct state *st, int64_t until);
void state_hold_check(struct state *st, int64_t now);
/* After a flush that wrote everything (state_flush): the nodes whose
 * desired sets changed (state_bump) are woken now, with what is stored. */
void state_wake_written(struct state *st);
/* Interns s for the scheduler (names); 0 for NULL or "". */
uint32_t state_intern(struct state *st, const char *s);
void state_index_job(struct state *st, struct job *j);
void state_index_attempt(struct state *st, struct job *j, struct attempt *a);
/* pending: the queue in scheduling order (queue priority, job priority,
 * then FIFO); active: attempts not final. */
void state_pending_add(struct state *st, struct job *j);
void state_pending_remove(struct state *st, struct job *j);
void state_active_add(struct state *st, struct attempt *a);
void state_active_remove(struct state *st, struct attempt *a);
/* Adds a's GPU-hours, once ended, to its team's usage. */
void state_account(struct state *st, const struct job *j, const struct attempt *a);
json_t *state_gpu_list(uint64_t mask);
/* How long the GPUs of a running session rank k of a have been idle now,
 * from its agent's last report (monotonic now_mono) and no longer than a
 * has run (wall now_wall); -1 when its agent has not said. */
int64_t state_gpu_idle_ms(const struct attempt *a, const struct rank *k, int64_t now_mono,
                          int64_t now_wall);
/* "host:port" of the head of a's job (a job with a head: a->head_port is
 * set), "[v6]:port" for an IPv6 master address. */
void state_head_addr(const struct attempt *a, char *out, size_t n);

/* ---- layer 1: transition.c ----
 *
 * Each checks the move against its kind's table (model/machine.h), sets
 * the times that belong to it, marks the record dirty and records the event
 * the table names, with the formatted text as its message (a move whose row
 * names no event records none). An illegal move changes nothing: it is
 * logged as an error, counted (stats.refused_moves) and ERR_CONFLICT is
 * returned. */

/* Job times: placed clears the estimate; running sets start_ms from its
 * attempt; requeued (pending) clears start, exit status and end; a final
 * state sets end_ms and keeps the attempt's start even when the job never
 * got to running (a quickly failing gang). */
int job_to(struct state *st, struct job *j, enum job_state to, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Attempt times: running sets start_ms if no rank set it; a final state
 * sets end_ms, leaves the active list and is accounted to its team. */
int attempt_to(struct state *st, struct attempt *a, enum job_state to);
/* A rank that has run (reported running, or exited with a status of its
 * own: no error) starts its attempt's clock if it is the first; a final
 * rank frees its GPUs. */
int rank_to(struct state *st, struct attempt *a, struct rank *k, enum rank_state to);
/* Why a is being stopped (set once, from none): marks its job dirty and
 * asks every rank of a that still runs to stop (its nodes' desired sets
 * lose it; each rank's end is then reported by its agent). The cause
 * decides the attempt's outcome (model/machine.h); the event its row
 * names is recorded for its job, on node_id (0: none). */
int attempt_stop_to(struct state *st, struct attempt *a, enum attempt_stop to, int64_t node_id,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A job's cancel request (none -> requested); stored with the job. */
int job_cancel_to(struct state *st, struct job *j, enum job_cancel to, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Whether the node's agent answers: ready <-> lost. */
int node_to(struct state *st, struct node *n, enum node_state to, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* The operators' and faults' state; reason is kept as admin_reason, and
 * the event says "node N: from -> to[ by a fault][: reason][ note]". */
int node_admin_to(struct state *st, struct node *n, enum node_state to, const char *reason,
                  int by_fault, const char *note);

#endif
