#include "model/machine.h"

#include <stdio.h>

#include "model/model.h"

#define END                                                                                        \
	{                                                                                          \
		0, 0, NULL, NULL                                                                   \
	}

/* Every move a job makes is its current attempt's, seen from the queue. */
static const struct machine_move job_moves[] = {
        {JOB_PENDING, JOB_SCHEDULED, "job.placed", "the scheduler places it"},
        {JOB_PENDING, JOB_CANCELLED, "job.finished", "cancelled before it was placed"},
        {JOB_SCHEDULED, JOB_RUNNING, "job.running", "every rank reports running"},
        {JOB_SCHEDULED, JOB_PENDING, "job.requeued",
         "its attempt was preempted or requeued (drain, GPU fault, lost node) before every "
         "rank ran"},
        {JOB_SCHEDULED, JOB_SUCCEEDED, "job.finished", "every rank exited 0"},
        {JOB_SCHEDULED, JOB_FAILED, "job.finished",
         "a rank failed: non-zero exit, signal, failed start, GPU fault or time limit"},
        {JOB_SCHEDULED, JOB_CANCELLED, "job.finished", "cancelled: every rank has stopped"},
        {JOB_SCHEDULED, JOB_LOST, "job.finished", "a rank was lost with its node"},
        {JOB_RUNNING, JOB_PENDING, "job.requeued",
         "its attempt was preempted or requeued (drain, GPU fault, lost node)"},
        {JOB_RUNNING, JOB_SUCCEEDED, "job.finished", "every rank exited 0"},
        {JOB_RUNNING, JOB_FAILED, "job.finished",
         "a rank failed: non-zero exit, signal, failed start, GPU fault or time limit"},
        {JOB_RUNNING, JOB_CANCELLED, "job.finished", "cancelled: every rank has stopped"},
        {JOB_RUNNING, JOB_LOST, "job.finished", "a rank was lost with its node"},
        END,
};

/* An attempt's moves record no event of their own: its job's do. */
static const struct machine_move attempt_moves[] = {
        {JOB_SCHEDULED, JOB_RUNNING, NULL, "every rank reports running"},
        {JOB_SCHEDULED, JOB_SUCCEEDED, NULL, "every rank exited 0"},
        {JOB_SCHEDULED, JOB_FAILED, NULL, "a rank failed"},
        {JOB_SCHEDULED, JOB_CANCELLED, NULL, "its job was cancelled"},
        {JOB_SCHEDULED, JOB_LOST, NULL, "a rank was lost with its node"},
        {JOB_SCHEDULED, JOB_PREEMPTED, NULL, "stopped for other work, a drain or a GPU fault"},
        {JOB_RUNNING, JOB_SUCCEEDED, NULL, "every rank exited 0"},
        {JOB_RUNNING, JOB_FAILED, NULL, "a rank failed"},
        {JOB_RUNNING, JOB_CANCELLED, NULL, "its job was cancelled"},
        {JOB_RUNNING, JOB_LOST, NULL, "a rank was lost with its node"},
        {JOB_RUNNING, JOB_PREEMPTED, NULL, "stopped for other work, a drain or a GPU fault"},
        END,
};

/* Ranks are many: their moves record no event (their attempt's job does). */
static const struct machine_move rank_moves[] = {
        {RANK_ASSIGNED, RANK_RUNNING, NULL, "its agent reports it starting or running"},
        {RANK_ASSIGNED, RANK_EXITED, NULL,
         "it ended before its agent reported it running, or was stopped before it started"},
        {RANK_ASSIGNED, RANK_FAILED_START, NULL, "its agent could not start it"},
        {RANK_ASSIGNED, RANK_LOST, NULL, "its node was lost"},
        {RANK_RUNNING, RANK_EXITED, NULL, "its process ended; its agent reports the status"},
        {RANK_RUNNING, RANK_FAILED_START, NULL, "its agent could not finish starting it"},
        {RANK_RUNNING, RANK_LOST, NULL, "its node was lost"},
        END,
};

static const struct machine_move node_moves[] = {
        {NODE_READY, NODE_LOST, "node.lost",
         "its agent was silent longer than the node timeout, or an operator reset its identity"},
        {NODE_LOST, NODE_READY, "node.ready", "its agent syncs again and runs nothing unwanted"},
        END,
};

/* A move to the same state changes the reason (or a fault takes over an
 * operator's drain); it is a move, with its event, all the same. */
static const struct machine_move admin_moves[] = {
        {NODE_READY, NODE_READY, "node.state", "an operator changes the reason"},
        {NODE_READY, NODE_CORDONED, "node.state", "an operator cordons it"},
        {NODE_READY, NODE_DRAINING, "node.state", "an operator drains it, or a node fault"},
        {NODE_CORDONED, NODE_READY, "node.state", "an operator uncordons it"},
        {NODE_CORDONED, NODE_CORDONED, "node.state", "an operator changes the reason"},
        {NODE_CORDONED, NODE_DRAINING, "node.state", "an operator drains it, or a node fault"},
        {NODE_DRAINING, NODE_READY, "node.state", "an operator uncordons it"},
        {NODE_DRAINING, NODE_CORDONED, "node.state", "an operator cordons it"},
        {NODE_DRAINING, NODE_DRAINING, "node.state",
         "the reason changes, or a node fault takes over an operator's drain"},
        {NODE_DRAINING, NODE_DRAINED, "node.state", "its last attempt has ended"},
        {NODE_DRAINED, NODE_READY, "node.state",
         "an operator uncordons it (refused while it reports a fault, unless forced)"},
        {NODE_DRAINED, NODE_CORDONED, "node.state", "an operator cordons it"},
        {NODE_DRAINED, NODE_DRAINING, "node.state",
         "an operator drains it again, or a node fault takes over an operator's drain"},
        {NODE_AWAITING, NODE_READY, "node.approved",
         "an operator approves it (a server with --approve-nodes makes new nodes so)"},
        END,
};

/* A rank on its node (MACHINE_AGENT_RANK): the agent's executor creates it
 * running when it starts it (or reads its record back after a restart),
 * and it ends once. Numbered as agent/exec.h's enum exec_state, which the
 * model cannot include. Its moves record no event: the agent reports the
 * state, and the server's rank moves (above) follow from the reports. */
enum { AGENT_RANK_RUNNING, AGENT_RANK_EXITED, AGENT_RANK_FAILED, AGENT_RANK_NSTATES };

static const struct machine_move agent_rank_moves[] = {
        {AGENT_RANK_RUNNING, AGENT_RANK_EXITED, NULL,
         "its command ended (the shim reports the status), or the agent lost it"},
        {AGENT_RANK_RUNNING, AGENT_RANK_FAILED, NULL,
         "it could not be started, or its record says so after a restart"},
        END,
};

static const char *agent_rank_name(int s)
{
	static const char *const names[AGENT_RANK_NSTATES] = {"running", "exited", "failed"};
	return s >= 0 && s < AGENT_RANK_NSTATES ? names[s] : "?";
}

/* Each cause is set once, from none, by the server's attempt_stop_to; no
 * cause gives way to another (each is set only while the attempt is not
 * stopping). A cancel that comes while one is under way is the job's
 * cancel request, which decides over it (job_cancel_moves). Events: the
 * causes the job's own events would not explain. */
static const struct machine_move stop_moves[] = {
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_RANK_FAILED, NULL,
         "a rank failed or was lost: the gang stops as one"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_CANCELLED, NULL,
         "its job's cancel request (which records job.cancel)"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_PREEMPTED, "job.preempted",
         "the scheduler preempts it for a job of higher priority, or reclaims borrowed quota"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_REQUEUED, NULL,
         "its node drains, or one of its GPUs is quarantined (node.state, gpu.fault tell)"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_TIME_LIMIT, "job.timeout",
         "it has run for its time limit"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_IDLE, "job.idle_timeout",
         "a session's GPUs were idle for its queue's idle_timeout"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_GPU_FAULT, "job.gpu_fault",
         "an application error on one of its GPUs (an XID that ends the job, not the GPU)"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_RANK0_ENDED, NULL,
         "rank 0 of a job with a head or of an MPI job ended by itself"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_NODE_LOST, NULL,
         "a rank was lost with its node, and its job is requeued: it checkpoints or asked "
         "for it (requeue), and has restarts left (max_restarts)"},
        {ATTEMPT_STOP_NONE, ATTEMPT_STOP_HUNG, "job.hung",
         "a rank made no progress for the job's hang timeout (its stacks are in its log), and "
         "its job is requeued as for node_lost"},
        END,
};

static const struct machine_move job_cancel_moves[] = {
        {JOB_CANCEL_NONE, JOB_CANCEL_REQUESTED, "job.cancel",
         "a user cancels it before it has ended; a placed job's attempt is stopped unless "
         "another cause stops it already"},
        END,
};

/* What each cause decides once the attempt's last rank has ended
 * (server/ranks.c finish_attempt); a cancel request decides over all. */
static const struct machine_outcome stop_outcomes[ATTEMPT_STOP_NSTATES] = {
        {ATTEMPT_STOP_NONE, MACHINE_RANK_STATUS,
         "succeeded once every rank has exited 0: exit status 0, reason \"all N rank(s) exited "
         "0\""},
        {ATTEMPT_STOP_RANK_FAILED, MACHINE_RANK_STATUS,
         "failed, or lost if a rank was lost with its node: exit status and reason of the first "
         "rank to fail (a cause kept in memory only is this one after a restart)"},
        {ATTEMPT_STOP_CANCELLED, 0,
         "cancelled (its job's cancel request decides): exit status from its ranks (143 after "
         "SIGTERM), reason \"cancelled by request\""},
        {ATTEMPT_STOP_PREEMPTED, MACHINE_REQUEUES,
         "preempted: its job is pending again (job.requeued), reason \"requeued: preempted for "
         "job N (higher priority)\" or the reclaim's"},
        {ATTEMPT_STOP_REQUEUED, MACHINE_REQUEUES,
         "preempted: its job is pending again (job.requeued), reason \"requeued: node N "
         "draining: ...\" or the quarantined GPU's"},
        {ATTEMPT_STOP_TIME_LIMIT, 0,
         "failed (lost if a rank was lost; succeeded, as for none, if every rank exits 0): exit "
         "status from its ranks (143 after SIGTERM), reason \"stopped at its time limit\""},
        {ATTEMPT_STOP_IDLE, 0,
         "failed (as for time_limit): exit status from its ranks, reason \"stopped: its GPUs "
         "were idle for ...\""},
        {ATTEMPT_STOP_GPU_FAULT, MACHINE_RANK_STATUS,
         "failed (as its ranks end): exit status 1 and the fault as reason, set when it was "
         "stopped"},
        {ATTEMPT_STOP_RANK0_ENDED, MACHINE_RANK_STATUS | MACHINE_RANK0_ONLY,
         "rank 0's: succeeded if it exited 0 (reason \"the command exited 0 on rank 0; ...\", "
         "or mpirun's), else failed with its status; the stopped ranks' ends do not count"},
        {ATTEMPT_STOP_NODE_LOST, MACHINE_REQUEUES | MACHINE_ENDS_LOST,
         "lost: its job is pending again (job.requeued), reason \"requeued: rank R on node N "
         "was lost with its node (restart K of M)\"; its next attempt is placed once the lost "
         "ranks' lease has run out (lease_end_time_ms)"},
        {ATTEMPT_STOP_HUNG, MACHINE_REQUEUES | MACHINE_ENDS_FAILED,
         "failed: its job is pending again (job.requeued), reason \"requeued: rank R on node N "
         "made no progress for D (hung; restart K of M)\""},
};

static const struct machine_outcome cancel_outcomes[JOB_CANCEL_NSTATES] = {
        {JOB_CANCEL_NONE, 0, "its attempt's stop cause decides"},
        {JOB_CANCEL_REQUESTED, 0,
         "a pending job ends cancelled at once; a placed one's attempt ends cancelled once "
         "every rank has stopped, whatever its stop cause: exit status from its ranks, reason "
         "\"cancelled by request\""},
};

static const char *const stop_names[ATTEMPT_STOP_NSTATES] = {
        "none",         "rank_failed", "cancelled",   "preempted", "requeued", "time_limit",
        "idle_timeout", "gpu_fault",   "rank0_ended", "node_lost", "hung"};
static const char *const cancel_names[JOB_CANCEL_NSTATES] = {"none", "requested"};

static const char *stop_name(int s)
{
	return s >= 0 && s < ATTEMPT_STOP_NSTATES ? stop_names[s] : "?";
}

static const char *cancel_name(int s)
{
	return s >= 0 && s < JOB_CANCEL_NSTATES ? cancel_names[s] : "?";
}

static const char *job_name(int s)
{
	return job_state_name((enum job_state)s);
}

static const char *rank_name(int s)
{
	return rank_state_name((enum rank_state)s);
}

static const char *node_name(int s)
{
	return node_state_name((enum node_state)s);
}

/* initial: the state a record is created in; also_initial: another one
 * some records are created in (-1: none). */
static const struct kind {
	const char *name;
	const struct machine_move *moves;
	int nstates, initial, also_initial;
	const char *(*state_name)(int s);
	const struct machine_outcome *outcomes; /* [nstates], or NULL */
} kinds[MACHINE_NKINDS] = {
        {"job", job_moves, JOB_NSTATES, JOB_PENDING, -1, job_name, NULL},
        {"attempt", attempt_moves, JOB_NSTATES, JOB_SCHEDULED, -1, job_name, NULL},
        {"rank", rank_moves, RANK_NSTATES, RANK_ASSIGNED, -1, rank_name, NULL},
        {"node", node_moves, NODE_NSTATES, NODE_READY, -1, node_name, NULL},
        {"node admin", admin_moves, NODE_NSTATES, NODE_READY, NODE_AWAITING, node_name, NULL},
        {"attempt stop", stop_moves, ATTEMPT_STOP_NSTATES, ATTEMPT_STOP_NONE, -1, stop_name,
         stop_outcomes},
        {"job cancel", job_cancel_moves, JOB_CANCEL_NSTATES, JOB_CANCEL_NONE, -1, cancel_name,
         cancel_outcomes},
        {"agent rank", agent_rank_moves, AGENT_RANK_NSTATES, AGENT_RANK_RUNNING, -1,
         agent_rank_name, NULL},
};

static const struct kind *kind_of(enum machine_kind k)
{
	return (unsigned)k < MACHINE_NKINDS ? &kinds[k] : NULL;
}

const struct machine_move *machine_moves(enum machine_kind k)
{
	return kind_of(k) ? kind_of(k)->moves : NULL;
}

const struct machine_move *machine_find(enum machine_kind k, int from, int to)
{
	const struct machine_move *m = machine_moves(k);
	for (; m && m->why; m++)
		if (m->from == from && m->to == to)
			return m;
	return NULL;
}

const char *machine_kind_name(enum machine_kind k)
{
	return kind_of(k) ? kind_of(k)->name : "?";
}

const char *machine_state_name(enum machine_kind k, int s)
{
	return kind_of(k) ? kind_of(k)->state_name(s) : "?";
}

int machine_nstates(enum machine_kind k)
{
	return kind_of(k) ? kind_of(k)->nstates : 0;
}

int machine_initial(enum machine_kind k)
{
	return kind_of(k) ? kind_of(k)->initial : 0;
}

int machine_also_initial(enum machine_kind k)
{
	return kind_of(k) ? kind_of(k)->also_initial : -1;
}

const struct machine_outcome *machine_outcome(enum machine_kind k, int s)
{
	const struct kind *x = kind_of(k);
	if (!x || !x->outcomes || s < 0 || s >= x->nstates)
		return NULL;
	return &x->outcomes[s];
}

int machine_decides(enum machine_kind k, int s, int what)
{
	const struct machine_outcome *o = machine_outcome(k, s);
	return o && (o->decides & what) != 0;
}

int machine_final(enum machine_kind k, int s)
{
	const struct machine_move *m = machine_moves(k);
	for (; m && m->why; m++)
		if (m->from == s)
			return 0;
	return 1;
}

/* A state some move reaches or leaves, or the initial one. */
static int used(enum machine_kind k, int s)
{
	if (s == machine_initial(k) || s == machine_also_initial(k))
		return 1;
	for (const struct machine_move *m = machine_moves(k); m && m->why; m++)
		if (m->from == s || m->to == s)
			return 1;
	return 0;
}

#define EMIT(...)                                                                                  \
	do {                                                                                       \
		if (n < len)                                                                       \
			n += (size_t)snprintf(out + n, len - n, __VA_ARGS__);                      \
	} while (0)

size_t machine_markdown(enum machine_kind k, char *out, size_t len)
{
	size_t n = 0;
	if (len == 0)
		return 0;
	out[0] = '\0';
	EMIT("```mermaid\nstateDiagram-v2\n    [*] --> %s\n",
	     machine_state_name(k, machine_initial(k)));
	if (machine_also_initial(k) >= 0)
		EMIT("    [*] --> %s\n", machine_state_name(k, machine_also_initial(k)));
	for (const struct machine_move *m = machine_moves(k); m && m->why; m++)
		if (m->from != m->to)
			EMIT("    %s --> %s\n", machine_state_name(k, m->from),
			     machine_state_name(k, m->to));
	for (int s = 0; s < machine_nstates(k); s++)
		if (used(k, s) && machine_final(k, s))
			EMIT("    %s --> [*]\n", machine_state_name(k, s));
	EMIT("```\n\n| from | to | event | when |\n|---|---|---|---|\n");
	for (const struct machine_move *m = machine_moves(k); m && m->why; m++)
		EMIT("| %s | %s | %s | %s |\n", machine_state_name(k, m->from),
		     machine_state_name(k, m->to), m->event ? m->event : "-", m->why);
	if (machine_outcome(k, 0))
		EMIT("\n| state | outcome |\n|---|---|\n");
	for (int s = 0; machine_outcome(k, 0) && s < machine_nstates(k); s++)
		EMIT("| %s | %s |\n", machine_state_name(k, s), machine_outcome(k, s)->what);
	return n < len ? n : len - 1;
}
