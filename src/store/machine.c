#include "store/machine.h"

#include <stdio.h>

#include "store/model.h"

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
         "its attempt was preempted or requeued (drain, GPU fault) before every rank ran"},
        {JOB_SCHEDULED, JOB_SUCCEEDED, "job.finished", "every rank exited 0"},
        {JOB_SCHEDULED, JOB_FAILED, "job.finished",
         "a rank failed: non-zero exit, signal, failed start, GPU fault or time limit"},
        {JOB_SCHEDULED, JOB_CANCELLED, "job.finished", "cancelled: every rank has stopped"},
        {JOB_SCHEDULED, JOB_LOST, "job.finished", "a rank was lost with its node"},
        {JOB_RUNNING, JOB_PENDING, "job.requeued",
         "its attempt was preempted or requeued (drain, GPU fault)"},
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
 * store cannot include. Its moves record no event: the agent reports the
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
} kinds[MACHINE_NKINDS] = {
        {"job", job_moves, JOB_NSTATES, JOB_PENDING, -1, job_name},
        {"attempt", attempt_moves, JOB_NSTATES, JOB_SCHEDULED, -1, job_name},
        {"rank", rank_moves, RANK_NSTATES, RANK_ASSIGNED, -1, rank_name},
        {"node", node_moves, NODE_NSTATES, NODE_READY, -1, node_name},
        {"node admin", admin_moves, NODE_NSTATES, NODE_READY, NODE_AWAITING, node_name},
        {"agent rank", agent_rank_moves, AGENT_RANK_NSTATES, AGENT_RANK_RUNNING, -1,
         agent_rank_name},
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
	return n < len ? n : len - 1;
}
