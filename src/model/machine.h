/* machine.h - the state machines of jobs, attempts, ranks and nodes, as
 * tables.
 *
 * Each record kind has one table of the moves it may make; the server's
 * transition functions (server/core.h) refuse any other. A row also names
 * the event a move records ("job.placed"), or NULL for a move that records
 * none. docs/states.md draws these tables, and a unit test keeps the
 * drawing equal to them. Pure: no state, no I/O.
 *
 * A node has two machines: whether its agent answers (MACHINE_NODE: ready,
 * lost) and what operators and faults decided (MACHINE_NODE_ADMIN: ready,
 * cordoned, draining, drained); model.h explains how they combine.
 * Records are created in their first state (a job pending, an attempt
 * scheduled, a rank assigned, a node ready, or awaiting approval where the
 * server asks for it), which is not a move.
 *
 * Two machines are causes rather than states, and decide how the record
 * ends: why an attempt is being stopped (MACHINE_ATTEMPT_STOP: none, then
 * once one cause, which never changes) and whether its job's cancel was
 * requested (MACHINE_JOB_CANCEL), which may come while any stop is under
 * way and then decides over the cause: the attempt ends cancelled. Their
 * states carry an outcome (struct machine_outcome), which server/ranks.c
 * reads when the attempt's last rank has ended, and the drawing shows.
 */
#ifndef ANVIL_MACHINE_H
#define ANVIL_MACHINE_H

#include <stddef.h>

enum machine_kind {
	MACHINE_JOB,
	MACHINE_ATTEMPT,
	MACHINE_RANK,
	MACHINE_NODE,
	MACHINE_NODE_ADMIN,
	MACHINE_ATTEMPT_STOP, /* why an attempt is being stopped (enum attempt_stop) */
	MACHINE_JOB_CANCEL,   /* a job's cancel request (enum job_cancel) */
	/* A rank on its node, as the agent's executor runs it (agent/exec.h,
	 * enum exec_state; the agent's exec_rank_move checks its moves). The
	 * model cannot name the agent's enum, so the table numbers its states
	 * as that enum does, and tests/unit/agent/test_exec.c checks that the
	 * two agree. */
	MACHINE_AGENT_RANK,
};
#define MACHINE_NKINDS 8

struct machine_move {
	int from, to;      /* enum job_state, rank_state, node_state, attempt_stop, job_cancel */
	const char *event; /* the event kind it records, or NULL */
	const char *why;   /* what makes it happen, for the drawing */
};

/* The moves of one kind, ended by a row with why == NULL. */
const struct machine_move *machine_moves(enum machine_kind k);
/* The row for from -> to, or NULL if the move is not allowed. */
const struct machine_move *machine_find(enum machine_kind k, int from, int to);
/* "job", "attempt", "rank", "node", "node admin", "attempt stop", "job
 * cancel", "agent rank". */
const char *machine_kind_name(enum machine_kind k);
/* The name of state s of kind k ("pending", "assigned", "draining"). */
const char *machine_state_name(enum machine_kind k, int s);
/* Number of states of kind k (the enum's NSTATES). */
int machine_nstates(enum machine_kind k);
/* The state a record of kind k is created in. */
int machine_initial(enum machine_kind k);
/* Another state some records of kind k are created in (a node awaiting
 * approval), or -1. */
int machine_also_initial(enum machine_kind k);
/* A state with no move out of it. */
int machine_final(enum machine_kind k, int s);
/* What a state decides when the attempt's last rank has ended. */
enum {
	MACHINE_REQUEUES = 1, /* it ends preempted and its job is pending again */
	MACHINE_RANK_STATUS =
	        2, /* the first rank to fail gives the job its exit status and reason */
	MACHINE_RANK0_ONLY = 4,   /* only rank 0's end counts (the others were stopped for it) */
	MACHINE_ENDS_LOST = 8,    /* with MACHINE_REQUEUES: it ends lost, not preempted */
	MACHINE_ENDS_FAILED = 16, /* with MACHINE_REQUEUES: it ends failed, not preempted */
};

struct machine_outcome {
	int state;
	int decides;      /* MACHINE_REQUEUES, MACHINE_RANK_STATUS, ... (above) */
	const char *what; /* the outcome in words, for the drawing */
};

/* The outcome of state s of kind k; NULL for a kind whose states decide
 * none (all but MACHINE_ATTEMPT_STOP and MACHINE_JOB_CANCEL). */
const struct machine_outcome *machine_outcome(enum machine_kind k, int s);
/* Whether state s of kind k decides `what` (one MACHINE_* flag above). */
int machine_decides(enum machine_kind k, int s, int what);
/* Kind k as docs/states.md shows it: a mermaid state diagram (moves to
 * the same state left out), then the table, "| from | to | event | when |",
 * one row per move in table order, and for a kind with outcomes a second,
 * "| state | outcome |", one row per state. Returns the length written (truncated
 * to len - 1, always terminated). */
size_t machine_markdown(enum machine_kind k, char *out, size_t len);

#endif
