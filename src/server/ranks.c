/* ranks.c - attempts and their ranks: what agents report, what they are
 * told to run, how a gang ends, time limits, and a session's notices and
 * idle timeout. Layer 2 of the state files (core.h); every function runs
 * with the state lock held. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "model/fields.h"
#include "proto/wire.h"
#include "server/records.h"

/* Whether a's stop cause decides `what`, a MACHINE_* outcome flag: the
 * table beside model/machine.h's "attempt stop" moves says what each does. */
static int decides(const struct attempt *a, int what)
{
	return machine_decides(MACHINE_ATTEMPT_STOP, (int)a->stop, what);
}

/* Whether rank 0 runs the job's command and the other ranks serve it: a
 * job with a head (its workers), an MPI job (mpirun's daemons). Rank 0's
 * end by itself ends such a gang with rank 0's status. */
static int rank0_leads(const struct job *j)
{
	return j->head || j->mpi;
}

/* Whether rank r's end counts for the attempt's outcome: every rank's, but
 * only rank 0's once rank 0 of a job it leads ended by itself (the others
 * were stopped because of it). */
static int counts(const struct attempt *a, int r)
{
	return !decides(a, MACHINE_RANK0_ONLY) || r == 0;
}

/* The job's exit status from its ranks, unless a failing rank set it. */
static void job_exit(struct job *j, const struct attempt *a)
{
	if (j->has_exit)
		return;
	/* Cancelled ranks still have a real status (143 after SIGTERM). */
	j->has_exit = 1;
	j->exit_code = 0;
	for (int r = 0; r < a->nranks && !j->exit_code && counts(a, r); r++) {
		const struct rank *k = &a->ranks[r];
		if (k->state == RANK_EXITED)
			j->exit_code = k->signal ? 128 + k->signal : k->exit_code;
	}
}

/* ---- requeue when a node is lost ---- */

/* How many times j was requeued after a failure (a lost node, a hang):
 * its attempts stopped for one (attempt->restart). */
static int restarts_of(const struct job *j)
{
	int n = 0;
	for (int i = 0; i < j->nattempts; i++)
		n += j->attempts[i]->restart > 0;
	return n;
}

static int max_restarts_of(const struct job *j)
{
	return j->max_restarts >= 0 ? j->max_restarts : RANKS_MAX_RESTARTS_DEFAULT;
}

/* Whether j wants to be requeued when a rank of its is lost with its node:
 * it said so (requeue), or else it checkpoints. A session is not: its
 * terminal went with its attempt. */
static int wants_requeue(const struct job *j)
{
	return !j->session && (j->requeue >= 0 ? j->requeue : j->checkpointing);
}

/* Wall ms by which the ranks on lost node n have surely stopped: its agent
 * renews their lease with the time it sent each sync, which is before we
 * saw it (last_seen), so the lease ends at the latest a node timeout after
 * that; the margin covers the shim's SIGKILL and the clocks' drift. 0 when
 * ranks hold no lease (--rank-lease off): nothing can be promised. */
static int64_t lease_end_of(const struct state *st, const struct node *n)
{
	if (!st->config.rank_lease)
		return 0;
	int64_t left =
	        n->last_seen_ms + st->config.node_timeout_ms + RANKS_LEASE_MARGIN_MS - now_ms();
	return wall_ms() + (left > 0 ? left : 0);
}

/* Whether j is requeued after a failure of its attempt: it wants it and
 * has restarts left. */
static int requeues(const struct job *j)
{
	return !j->cancel_requested && wants_requeue(j) && restarts_of(j) < max_restarts_of(j);
}

/* Rank k of a was lost with its node (why: ATTEMPT_STOP_NODE_LOST) or
 * hung (ATTEMPT_STOP_HUNG, what: how long without progress), and its job
 * is requeued: the gang stops as one, and ends lost or failed with its
 * job pending again (finish_attempt). */
static void stop_to_requeue(struct state *st, struct job *j, struct attempt *a,
                            const struct rank *k, enum attempt_stop why, const char *what)
{
	const struct node *n = state_node(st, k->node_id);
	a->restart = restarts_of(j) + 1;
	if (why == ATTEMPT_STOP_HUNG)
		text_printf(a->end_reason, sizeof(a->end_reason),
		            "rank %d on %s made no progress for %s (hung; restart %d of %d)",
		            k->rank, n ? n->name : "?", what, a->restart, max_restarts_of(j));
	else
		text_printf(a->end_reason, sizeof(a->end_reason),
		            "rank %d on %s was lost with its node (restart %d of %d)", k->rank,
		            n ? n->name : "?", a->restart, max_restarts_of(j));
	text_printf(j->reason, sizeof(j->reason), "stopping to requeue: %s", a->end_reason);
	attempt_stop_to(st, a, why, k->node_id, "requeued: %s", a->end_reason);
}

static void say_span(char *out, size_t n, int64_t ms);

/* Rank k of a running attempt made no progress for hung_ms, past its
 * job's hang timeout (its agent recorded its stacks): requeued as after a
 * lost node, or the job fails with that reason (exit status 124, as
 * timeout(1) says a command ran out of time). */
static void rank_hung(struct state *st, struct job *j, struct attempt *a, const struct rank *k,
                      int64_t hung_ms)
{
	char span[32];
	say_span(span, sizeof(span), hung_ms);
	if (requeues(j)) {
		stop_to_requeue(st, j, a, k, ATTEMPT_STOP_HUNG, span);
		return;
	}
	const struct node *n = state_node(st, k->node_id);
	j->has_exit = 1;
	j->exit_code = 124;
	text_printf(j->reason, sizeof(j->reason),
	            "rank %d on %s made no progress for %s: hung (its stacks are in its stderr, "
	            "anvil logs %lld)%s",
	            k->rank, n ? n->name : "?", span, (long long)j->id,
	            wants_requeue(j) ? "; not requeued: no restart left (max_restarts)" : "");
	attempt_stop_to(st, a, ATTEMPT_STOP_RANK_FAILED, k->node_id, "rank %d hung", k->rank);
}

/* j's lost attempt a is requeued: its next attempt waits for a's lease. */
static void requeue_held(struct state *st, struct job *j, const struct attempt *a)
{
	int64_t now = wall_ms();
	if (a->lease_end_ms <= now) {
		text_printf(j->reason, sizeof(j->reason), "requeued: %s", a->end_reason);
		return;
	}
	char at[32];
	time_t t = (time_t)(a->lease_end_ms / 1000);
	struct tm tm;
	if (!gmtime_r(&t, &tm) || strftime(at, sizeof(at), "%H:%M:%S UTC", &tm) == 0)
		snprintf(at, sizeof(at), "soon");
	text_printf(j->reason, sizeof(j->reason),
	            "requeued: %s; placed from %s, when the lost ranks' lease has run out",
	            a->end_reason, at);
	state_hold_until(st, a->lease_end_ms);
}

/* The final state of an attempt whose cause requeues its job. */
static enum job_state requeued_as(const struct attempt *a)
{
	return decides(a, MACHINE_ENDS_LOST)     ? JOB_LOST
	       : decides(a, MACHINE_ENDS_FAILED) ? JOB_FAILED
	                                         : JOB_PREEMPTED;
}

static void finish_attempt(struct state *st, struct job *j, struct attempt *a)
{
	int lost = 0, failed = 0;
	for (int r = 0; r < a->nranks; r++)
		if (!rank_state_final(a->ranks[r].state))
			return;
	for (int r = 0; r < a->nranks && counts(a, r); r++) {
		const struct rank *k = &a->ranks[r];
		lost |= k->state == RANK_LOST;
		failed |= k->state == RANK_FAILED_START ||
		          (k->state == RANK_EXITED && (k->exit_code || k->signal));
	}
	/* The cancel request decides over every cause, then the cause. */
	int requeue = !j->cancel_requested && decides(a, MACHINE_REQUEUES);
	enum job_state s = j->cancel_requested ? JOB_CANCELLED
	                   : requeue           ? requeued_as(a)
	                   : lost              ? JOB_LOST
	                   : failed            ? JOB_FAILED
	                                       : JOB_SUCCEEDED;
	if (attempt_to(st, a, s))
		return;
	if (requeue) { /* back in the queue; a new attempt later */
		if (!*a->end_reason)
			text_printf(a->end_reason, sizeof(a->end_reason), "preempted");
		if (s == JOB_LOST)
			requeue_held(st, j, a);
		else
			text_printf(j->reason, sizeof(j->reason), "requeued: %s", a->end_reason);
		if (job_to(st, j, JOB_PENDING, "attempt %lld %s: %s; job requeued",
		           (long long)a->id, job_state_name(s), a->end_reason) == 0)
			state_pending_add(st, j);
		return;
	}
	job_exit(j, a);
	int rank0 = a->stop == ATTEMPT_STOP_RANK0_ENDED;
	if (s == JOB_SUCCEEDED && rank0 && j->mpi)
		text_printf(j->reason, sizeof(j->reason),
		            "mpirun exited 0 on rank 0; the other ranks were stopped");
	else if (s == JOB_SUCCEEDED && rank0)
		text_printf(j->reason, sizeof(j->reason),
		            "the command exited 0 on rank 0; the head and workers were stopped");
	else if (s == JOB_SUCCEEDED)
		text_printf(j->reason, sizeof(j->reason), "all %d rank(s) exited 0", a->nranks);
	else if (s == JOB_CANCELLED)
		text_printf(j->reason, sizeof(j->reason), "cancelled by request");
	else if (a->stop == ATTEMPT_STOP_TIME_LIMIT)
		text_printf(j->reason, sizeof(j->reason), "stopped at its time limit");
	else if (a->stop == ATTEMPT_STOP_IDLE) /* its cause, set when it was stopped */
		text_printf(j->reason, sizeof(j->reason), "stopped: %s", a->end_reason);
	/* The job's reason is final now; the attempt keeps it as its own. */
	text_printf(a->end_reason, sizeof(a->end_reason), "%s", j->reason);
	job_to(st, j, s, "job %lld %s exit_code=%d", (long long)j->id, job_state_name(s),
	       j->exit_code);
}

/* A job's memory limit as a user reads it: "limit 64 MiB", "limit 1.5 GiB". */
static void limit_words(int64_t bytes, char *out, size_t n)
{
	int64_t unit = bytes >= 1LL << 30 ? 1LL << 30 : 1LL << 20;
	const char *name = unit == 1LL << 30 ? "GiB" : "MiB";
	if (bytes % unit == 0)
		snprintf(out, n, "limit %lld %s", (long long)(bytes / unit), name);
	else
		snprintf(out, n, "limit %.1f %s", (double)bytes / (double)unit, name);
}

/* The job's exit status and reason when rank k is the first to fail. */
static void first_failure(struct state *st, struct job *j, const struct rank *k)
{
	const struct node *n = state_node(st, k->node_id);
	char limit[64] = "no memory limit";
	if (j->memory_bytes > 0)
		limit_words(j->memory_bytes, limit, sizeof(limit));
	j->has_exit = 1;
	j->exit_code = k->state == RANK_EXITED ? (k->signal ? 128 + k->signal : k->exit_code)
	               : k->state == RANK_FAILED_START ? 127
	                                               : RANKS_EXIT_LOST;
	if (k->state == RANK_EXITED && k->error[0])
		text_printf(j->reason, sizeof(j->reason), "rank %d on %s was lost: %s", k->rank,
		            n ? n->name : "?", k->error);
	else if (k->state == RANK_EXITED && k->oom_kills > 0) /* its agent read its cgroup */
		text_printf(j->reason, sizeof(j->reason),
		            "rank %d on %s ran out of memory (%s): the kernel killed %d of "
		            "its processes",
		            k->rank, n ? n->name : "?", limit, k->oom_kills);
	else if (k->state == RANK_EXITED && k->reason[0]) /* its launcher says why */
		text_printf(j->reason, sizeof(j->reason), "rank %d on %s: %s", k->rank,
		            n ? n->name : "?", k->reason);
	else if (k->state == RANK_EXITED && j->mpi && k->rank == 0 && k->signal)
		text_printf(j->reason, sizeof(j->reason),
		            "rank 0 on %s: mpirun was killed by signal %d", n ? n->name : "?",
		            k->signal);
	else if (k->state == RANK_EXITED && j->mpi && k->rank == 0)
		text_printf(j->reason, sizeof(j->reason),
		            "rank 0 on %s: mpirun exited with status %d", n ? n->name : "?",
		            k->exit_code);
	else if (k->state == RANK_FAILED_START && k->error[0]) /* the agent says why */
		text_printf(j->reason, sizeof(j->reason), "rank %d on %s failed to start: %s",
		            k->rank, n ? n->name : "?", k->error);
	else if (k->state == RANK_LOST && wants_requeue(j)) /* and has no restart left */
		text_printf(
		        j->reason, sizeof(j->reason),
		        "rank %d on %s was lost with its node; not requeued: it was restarted %d "
		        "time(s), its max_restarts (its attempts say why each ended)",
		        k->rank, n ? n->name : "?", restarts_of(j));
	else
		text_printf(j->reason, sizeof(j->reason), "rank %d on %s %s", k->rank,
		            n ? n->name : "?",
		            k->state == RANK_LOST           ? "was lost with its node"
		            : k->state == RANK_FAILED_START ? "failed to start"
		            : k->signal                     ? "was killed by a signal"
		                                            : "exited non-zero");
}

/* Rank k ends in state `to` (its GPUs are freed); a failed rank ends the
 * gang, and so does rank 0 of a job with a head or an MPI job, whatever
 * its status. */
static void rank_end(struct state *st, struct attempt *a, struct rank *k, enum rank_state to)
{
	struct job *j = state_job(st, a->job_id);
	if (!j || rank_to(st, a, k, to))
		return;
	/* Lost with its node: the job is requeued when it wants to be and has
	 * restarts left, unless something stops the attempt already. */
	if (to == RANK_LOST && !attempt_ending(a) && requeues(j)) {
		stop_to_requeue(st, j, a, k, ATTEMPT_STOP_NODE_LOST, NULL);
		finish_attempt(st, j, a);
		return;
	}
	int bad = k->state != RANK_EXITED || k->exit_code || k->signal;
	int ends = bad;
	enum attempt_stop why = ATTEMPT_STOP_RANK_FAILED;
	/* In a job with a head, rank 0 runs the job's command; in an MPI job,
	 * mpirun. When rank 0 ends by itself (not stopped), the job ends with
	 * its status, and the other ranks (the workers, or the placeholders
	 * mpirun's daemons ran in) are stopped; their ends, SIGTERM's 143
	 * included, no longer count. Another rank that fails first still fails
	 * the gang, as any rank does. */
	if (rank0_leads(j) && k->rank == 0 && to == RANK_EXITED && !attempt_ending(a)) {
		why = ATTEMPT_STOP_RANK0_ENDED;
		ends = 1;
	} else if (!counts(a, k->rank)) {
		bad = ends = 0;
	}
	/* A cancel, a preemption or requeue, a time limit or an idle timeout
	 * keeps its own account of the end: the failing rank's is not the job's. */
	if (bad && !j->has_exit && !j->cancel_requested && decides(a, MACHINE_RANK_STATUS))
		first_failure(st, j, k);
	/* A gang lives and dies as one: when one rank fails, every other rank
	 * is stopped and the attempt fails as a whole (unless another cause
	 * stops it already). */
	if (ends && !attempt_ending(a))
		attempt_stop_to(st, a, why, 0, "rank %d ended", k->rank);
	finish_attempt(st, j, a);
}

void state_attempt_requeue(struct state *st, struct attempt *a, const char *why)
{
	if (attempt_ending(a))
		return;
	a->preempted_for = 0; /* ends as preempted: the job goes back to its queue */
	text_printf(a->end_reason, sizeof(a->end_reason), "%s", why);
	struct job *j = state_job(st, a->job_id);
	if (j) {
		text_printf(j->reason, sizeof(j->reason), "stopping to requeue: %s", why);
		state_mark_job(st, j);
	}
	attempt_stop_to(st, a, ATTEMPT_STOP_REQUEUED, 0, "requeued: %s", why);
}

/* ---- agent reports ---- */

/* Rank k runs; when the whole gang does, so do its attempt and job. */
static void rank_running(struct state *st, struct job *j, struct attempt *a, struct rank *k)
{
	if (rank_to(st, a, k, RANK_RUNNING))
		return;
	for (int i = 0; i < a->nranks; i++)
		if (a->ranks[i].state == RANK_ASSIGNED)
			return;
	if (a->state != JOB_SCHEDULED || attempt_ending(a) || attempt_to(st, a, JOB_RUNNING))
		return;
	text_printf(j->reason, sizeof(j->reason), "running");
	job_to(st, j, JOB_RUNNING, "attempt %lld: all %d rank(s) running", (long long)a->id,
	       a->nranks);
}

/* ---- uploaded checkpoints ---- */

/* Rank 0's agent says which checkpoint it uploaded last (docs/api.md,
 * "checkpoint" in a report): added to a's list unless it is there, the
 * oldest dropped past RANKS_CHECKPOINTS_KEPT. */
static void add_checkpoint(struct state *st, struct job *j, struct attempt *a, const json_t *c)
{
	const char *key = jv_str(c, "key", NULL), *name = jv_str(c, "name", NULL);
	char prefix[40];
	int n = snprintf(prefix, sizeof(prefix), "ckpt/%lld/", (long long)j->id);
	if (!key || !name || strncmp(key, prefix, (size_t)n) != 0 || strcmp(key + n, name) != 0)
		return; /* only its own job's, named as the agent names them */
	size_t i;
	json_t *have;
	json_array_foreach (a->checkpoints, i, have)
		if (strcmp(jv_str(have, "key", ""), key) == 0 &&
		    jv_int(have, "time_ms", 0) == jv_int(c, "time_ms", -1))
			return;
	if (!a->checkpoints)
		a->checkpoints = json_array();
	json_t *e = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I}", "name", name, "key", key, "bytes",
	                      (json_int_t)jv_int(c, "bytes", 0), "sent_bytes",
	                      (json_int_t)jv_int(c, "sent_bytes", 0), "files",
	                      (json_int_t)jv_int(c, "files", 0), "time_ms",
	                      (json_int_t)jv_int(c, "time_ms", 0));
	json_array_append_new(a->checkpoints, e);
	while (json_array_size(a->checkpoints) > RANKS_CHECKPOINTS_KEPT)
		json_array_remove(a->checkpoints, 0);
	state_mark_job(st, j);
}

/* The newest checkpoint j's earlier attempts uploaded (its key), which a
 * new attempt's ranks restore (agent/ckpt.h); NULL: none. */
static const char *newest_checkpoint(const struct job *j, const struct attempt *now)
{
	const char *key = NULL;
	int64_t best = -1;
	for (int i = 0; i < j->nattempts; i++) {
		const struct attempt *a = j->attempts[i];
		size_t n = json_array_size(a->checkpoints);
		const json_t *c = n && a != now ? json_array_get(a->checkpoints, n - 1) : NULL;
		if (c && jv_int(c, "time_ms", 0) > best) {
			best = jv_int(c, "time_ms", 0);
			key = jv_str(c, "key", NULL);
		}
	}
	return key;
}

static void apply_report(struct state *st, struct node *n, const json_t *rep)
{
	struct attempt *a = state_attempt(st, jv_int(rep, "attempt_id", 0));
	int64_t r = jv_int(rep, "rank", -1);
	if (!a || job_state_final(a->state) || r < 0 || r >= a->nranks)
		return; /* fencing: stale or unknown attempts change nothing */
	struct rank *k = &a->ranks[r];
	if (k->node_id != n->id || rank_state_final(k->state))
		return;
	struct job *j = state_job(st, a->job_id);
	const char *s = jv_str(rep, "state", "");
	k->pid = (int)jv_int(rep, "pid", k->pid);
	json_t *idle = json_object_get(rep, "gpu_idle_ms"); /* a session's rank */
	if (json_is_integer(idle)) {
		k->has_gpu_idle = 1;
		k->gpu_idle_ms = json_integer_value(idle);
		k->gpu_idle_at = now_ms();
	}
	int64_t ckpt = jv_int(rep, "checkpoint_ms", 0);
	if (ckpt > a->checkpoint_ms && (a->start_ms == 0 || ckpt >= a->start_ms)) {
		a->checkpoint_ms = ckpt;
		state_mark_job(st, j);
	}
	const json_t *up = json_object_get(rep, "checkpoint");
	if (j && j->checkpointing && r == 0 && json_is_object(up))
		add_checkpoint(st, j, a, up);
	int64_t hung = jv_int(rep, "hung_ms", 0);
	if (j && j->hang_timeout_ms > 0 && hung > 0 && !attempt_ending(a) &&
	    strcmp(s, "running") == 0 && k->state == RANK_RUNNING)
		rank_hung(st, j, a, k, hung);
	if (strcmp(s, "running") == 0 || strcmp(s, "starting") == 0) {
		if (k->state == RANK_ASSIGNED)
			rank_running(st, j, a, k);
		return;
	}
	enum rank_state to;
	if (strcmp(s, "exited") == 0) {
		to = RANK_EXITED;
		k->exit_code = (int)jv_int(rep, "exit_code", 0);
		k->signal = (int)jv_int(rep, "signal", 0);
		k->oom_kills = (int)jv_int(rep, "oom_kills", 0);
		const char *lost = jv_str(rep, "error", NULL); /* the agent lost it: why */
		if (lost)
			text_printf(k->error, sizeof(k->error), "%s", lost);
		/* Its launcher's words: only a job with a head has a launcher. */
		const char *why = j && j->head ? jv_str(rep, "reason", NULL) : NULL;
		if (why)
			text_printf(k->reason, sizeof(k->reason), "%s", why);
	} else if (strcmp(s, "failed_to_start") == 0) {
		to = RANK_FAILED_START;
		text_printf(k->error, sizeof(k->error), "%s",
		            jv_str(rep, "error", "failed to start"));
	} else {
		return;
	}
	rank_end(st, a, k, to);
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
	for (int i = st->core->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->core->active[i];
		if (!attempt_ending(a))
			continue;
		for (int r = 0; r < a->nranks && !job_state_final(a->state); r++) {
			struct rank *k = &a->ranks[r];
			if (k->node_id != n->id || rank_state_final(k->state) ||
			    agent_gen < k->stop_gen || was_reported(ranks, a->id, r))
				continue;
			snprintf(k->error, sizeof(k->error), "stopped before it started");
			rank_end(st, a, k, RANK_EXITED);
		}
	}
}

void ranks_apply_reports(struct state *st, struct node *n, const json_t *ranks, int64_t agent_gen)
{
	size_t i;
	json_t *rep;
	json_array_foreach (ranks, i, rep)
		apply_report(st, n, rep);
	reap_unreported(st, n, ranks, agent_gen);
}

/* ---- what a node should run ---- */

/* Forgets k's desired entry: the next answer builds it again. */
static void rank_entry_drop(struct rank *k)
{
	json_decref(k->desired);
	k->desired = NULL;
	free(k->desired_text);
	k->desired_text = NULL;
}

/* Shared environments (docs/api.md, "Agent protocol"). An agent that
 * speaks protocol 2 or later (its facts say so) gets each job's own
 * environment once per answer, in the answer's "envs" under a key, and
 * each entry names it ("env_base") and carries only the rank's variables
 * in "env": the entries of an array's members, or of any ranks of one job,
 * repeat none of it. A 2 KB environment parsed once per answer instead of
 * once per entry is most of what a sync of short jobs costs an agent.
 *
 * The key is the id of the job that owns the environment: an array's
 * first member for every member (they share it, model/model.h), else the
 * job's own. Two entries of one answer with one key therefore have the
 * same environment. An older agent gets every entry whole. */

/* 1 when node n's agent takes shared environments. */
static int shares_env(const struct node *n)
{
	return jv_int(n->facts, "protocol", 1) >= WIRE_PROTOCOL_SHARED_ENV;
}

/* 1 when j's entries on n name a shared environment. */
static int names_env(const struct job *j, const struct node *n)
{
	return shares_env(n) && json_object_size(j->env) > 0;
}

static void env_key(const struct job *j, char out[24])
{
	snprintf(out, 24, "%lld", (long long)(j->array_id ? j->array_id : j->id));
}

static json_t *rank_env(const struct job *j, const struct attempt *a, const struct rank *k,
                        const struct node *n)
{
	/* its values are shared, never changed */
	json_t *env = names_env(j, n) ? json_object() : json_copy(j->env);
	char cuda[4 * MODEL_MAX_GPUS + 1] = "";
	char uuids[98 * MODEL_MAX_GPUS + 1] = "";
	for (int i = 0; i < n->ngpus; i++) {
		if (!(k->gpus & (1ull << n->gpus[i].index)))
			continue;
		size_t c = strlen(cuda), u = strlen(uuids);
		snprintf(cuda + c, sizeof(cuda) - c, "%s%d", c ? "," : "", n->gpus[i].index);
		snprintf(uuids + u, sizeof(uuids) - u, "%s%s", u ? "," : "", n->gpus[i].uuid);
	}
	char head[96] = "";
	if (j->head)
		state_head_addr(a, head, sizeof(head));
	struct wire_rank_vars v = {
	        .cuda = cuda,
	        .uuids = j->gpus ? uuids : NULL,
	        .master_addr = a->master_addr,
	        .master_port = a->master_port,
	        .nnodes = j->nodes,
	        .node_rank = k->rank,
	        .nproc = j->gpus > 0 ? j->gpus : 1,
	        .job_id = j->id,
	        .attempt_id = a->id,
	        .attempt = a->number,
	        .node = n->name,
	        .job_name = j->name,
	        .checkpointing = j->checkpointing,
	        .array_id = j->array_id,
	        .array_index = j->array_index,
	        .head_addr = j->head ? head : NULL,
	        .head_port = a->head_port,
	};
	wire_rank_env_set(env, &v);
	if (a->exec_token[0]) /* an MPI job: `anvil _rsh` execs into the ranks with it */
		json_object_set_new(env, "ANVIL_EXEC_TOKEN", json_string(a->exec_token));
	if (j->task) { /* a workflow task: its wrapper's instructions (agent/task.c) */
		char *doc = json_dumps(j->task, JSON_COMPACT | JSON_SORT_KEYS);
		json_object_set_new(env, "ANVIL_TASK", json_string(doc ? doc : "{}"));
		free(doc);
	}
	return env;
}

/* A field of the job's table that goes into the desired entry: through
 * wire_set() when the desired record has it, which checks its type; a
 * field that the table alone describes (FIELD_MORE) as it is. */
static void desired_put(void *ctx, const char *name, json_t *v)
{
	if (wire_field(&wire_desired, name))
		wire_set(ctx, &wire_desired, name, v);
	else
		json_object_set_new(ctx, name, v);
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
	fields_desired(j, desired_put, d); /* the job's own (model/fields.h) */
	wire_set(d, r, "gpus", state_gpu_list(k->gpus));
	wire_set(d, r, "env", rank_env(j, a, k, n));
	if (names_env(j, n)) {
		char key[24];
		env_key(j, key);
		wire_set(d, r, "env_base", json_string(key));
	}
	if (j->head) { /* the agent runs the rank under its launcher (agent/launch.h) */
		char addr[96];
		state_head_addr(a, addr, sizeof(addr));
		wire_set(d, r, "head_addr", json_string(addr));
		if (k->rank == 0)
			wire_set(d, r, "head", json_string(j->head));
		if (j->worker)
			wire_set(d, r, "worker", json_string(j->worker));
		wire_set(d, r, "head_timeout_ms", json_integer(j->head_timeout_ms));
	}
	const struct queue *q = state_queue(st, j->queue);
	if (q && q->run_as_root) /* else the agent's rank account (agent/fence.h) */
		wire_set(d, r, "as_root", json_true());
	if (j->session && a->notice_id) {
		json_t *notice = json_object();
		wire_set(notice, &wire_notice, "id", json_integer(a->notice_id));
		wire_set(notice, &wire_notice, "text", json_string(a->notice));
		wire_set(d, r, "notice", notice);
	}
	if (j->task && jv_bool(j->task, "wrap", 1)) /* under `anvil _task` (agent/task.c) */
		wire_set(d, r, "task", json_true());
	const char *restore = j->checkpointing && !j->task ? newest_checkpoint(j, a) : NULL;
	if (restore) /* agent/ckpt.h: restored before the command starts */
		wire_set(d, r, "restore", json_string(restore));
	if (j->mpi && k->rank == 0) {
		json_t *hosts = json_array();
		for (int i = 0; i < a->nranks; i++) {
			const struct node *h = state_node(st, a->ranks[i].node_id);
			json_array_append_new(hosts, json_string(h ? h->name : "?"));
		}
		wire_set(d, r, "mpi_hosts", hosts);
	}
	return d;
}

/* Calls each(rank's entry) for the ranks node n should run. */
static void each_desired(struct state *st, struct node *n,
                         void (*each)(struct rank *, const struct job *, void *), void *ctx)
{
	for (int i = 0; i < st->core->nactive; i++) {
		struct attempt *a = st->core->active[i];
		if (attempt_ending(a))
			continue;
		const struct job *j = state_job(st, a->job_id);
		for (int r = 0; r < a->nranks; r++) {
			struct rank *k = &a->ranks[r];
			if (k->node_id != n->id || rank_state_final(k->state))
				continue;
			/* A rank's entry changes only with its session's notice
			 * (session_notice drops it), or when its agent is replaced
			 * by one that does (not) take shared environments: build
			 * it once. */
			if (k->desired &&
			    !json_object_get(k->desired, "env_base") != !names_env(j, n))
				rank_entry_drop(k);
			if (!k->desired)
				k->desired = desired_entry(st, j, a, k, n);
			each(k, j, ctx);
		}
	}
}

/* The answer without its ranks; with envs, the shared environments. */
static json_t *answer_rest(struct state *st, struct node *n, json_t *envs)
{
	json_t *o = json_object();
	if (json_object_size(envs))
		wire_set(o, &wire_sync_answer, "envs", json_incref(envs));
	wire_set(o, &wire_sync_answer, "generation", json_integer(n->generation));
	wire_set(o, &wire_sync_answer, "node_timeout_ms", json_integer(st->config.node_timeout_ms));
	wire_set(o, &wire_sync_answer, "lease_ms",
	         json_integer(st->config.rank_lease ? st->config.node_timeout_ms : 0));
	if (n->profile) /* a fleet member: what it must converge to (docs/fleet.md) */
		wire_set(o, &wire_sync_answer, "profile", json_incref(n->profile));
	return o;
}

/* The environment entry k of job j names, into envs (once per key). */
static void add_env(json_t *envs, const struct rank *k, const struct job *j)
{
	const char *key = json_string_value(json_object_get(k->desired, "env_base"));
	if (key && !json_object_get(envs, key))
		json_object_set(envs, key, j->env);
}

struct answer {
	json_t *ranks; /* state_desired: the entries */
	struct buf b;  /* state_desired_text: the entries' text */
	int n;
	json_t *envs;
};

static void append_entry(struct rank *k, const struct job *j, void *out)
{
	struct answer *t = out;
	json_array_append(t->ranks, k->desired);
	add_env(t->envs, k, j);
}

json_t *state_desired(struct state *st, struct node *n)
{
	struct answer t = {.ranks = json_array(), .envs = json_object()};
	each_desired(st, n, append_entry, &t);
	json_t *o = answer_rest(st, n, t.envs);
	wire_set(o, &wire_sync_answer, "ranks", t.ranks);
	json_decref(t.envs);
	return o;
}

static void append_text(struct rank *k, const struct job *j, void *out)
{
	struct answer *t = out;
	if (!k->desired_text)
		k->desired_text = jv_dump(k->desired);
	if (t->n++)
		buf_adds(&t->b, ",");
	buf_adds(&t->b, k->desired_text);
	add_env(t->envs, k, j);
}

char *state_desired_text(struct state *st, struct node *n)
{
	struct answer t = {.n = 0, .envs = json_object()};
	buf_init(&t.b);
	buf_adds(&t.b, "{\"ranks\":[");
	each_desired(st, n, append_text, &t);
	json_t *rest = answer_rest(st, n, t.envs); /* never empty: it has the generation */
	char *text = jv_dump(rest);
	json_decref(rest);
	json_decref(t.envs);
	buf_adds(&t.b, "],");
	buf_adds(&t.b, text + 1);
	free(text);
	return buf_detach(&t.b);
}

/* ---- nodes lost, time limits ---- */

void ranks_node_lost(struct state *st, struct node *n)
{
	for (int i = st->core->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->core->active[i];
		for (int r = 0; r < a->nranks && !job_state_final(a->state); r++) {
			struct rank *k = &a->ranks[r];
			if (k->node_id != n->id || rank_state_final(k->state))
				continue;
			int64_t end = lease_end_of(st, n);
			if (end > a->lease_end_ms)
				a->lease_end_ms = end;
			rank_end(st, a, k, RANK_LOST);
		}
	}
}

static int64_t limit_of(struct state *st, const struct job *j)
{
	if (j->time_limit_ms > 0)
		return j->time_limit_ms;
	struct queue *q = state_queue(st, j->queue);
	return q ? q->default_time_limit_ms : 0;
}

/* ---- sessions: notices, warnings, idle timeouts ----
 *
 * A session (a job with session) is warned on its terminal before the
 * cluster ends it: session_warning_ms (a minute by default; at most half
 * of the span, so a 30 s limit is warned at 15 s) before its time limit,
 * and as long before its queue's idle_timeout once its GPUs have been
 * idle that long. The warning is a notice in its ranks' desired entries,
 * which their agents hand to each rank's session holder once by its id
 * (docs/api.md, "notice"); it is level-triggered like the rest of the
 * desired set, so a lost answer or an agent restart loses nothing. */

/* "2h", "1h30m", "30m", "1m30s", "45s": a span as people write it, in
 * whole seconds (cut). */
static void say_span(char *out, size_t n, int64_t ms)
{
	long long s = (long long)(ms / 1000);
	if (s >= 3600 && s % 3600 == 0)
		snprintf(out, n, "%lldh", s / 3600);
	else if (s >= 3600)
		snprintf(out, n, "%lldh%02lldm", s / 3600, s / 60 % 60);
	else if (s >= 60 && s % 60 == 0)
		snprintf(out, n, "%lldm", s / 60);
	else if (s >= 60)
		snprintf(out, n, "%lldm%02llds", s / 60, s % 60);
	else
		snprintf(out, n, "%llds", s);
}

/* How long before the end of a span of span_ms a session is warned. */
static int64_t warning_of(const struct state *st, int64_t span_ms)
{
	int64_t lead = st->config.session_warning_ms;
	return lead < span_ms / 2 ? lead : span_ms / 2;
}

/* Gives every running rank of session attempt a the notice: their desired
 * entries are rebuilt with it and their nodes' agents woken; each agent
 * hands it to the rank's terminal once. Recorded as a job.notice event. */
static void session_notice(struct state *st, const struct job *j, struct attempt *a,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void session_notice(struct state *st, const struct job *j, struct attempt *a,
                           const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a->notice, sizeof(a->notice), fmt, ap);
	va_end(ap);
	/* Wall-clock ms: ids keep growing across server restarts. */
	int64_t id = wall_ms();
	a->notice_id = id > a->notice_id ? id : a->notice_id + 1;
	for (int r = 0; r < a->nranks; r++) {
		struct rank *k = &a->ranks[r];
		if (rank_state_final(k->state))
			continue;
		rank_entry_drop(k);
		state_bump(st, state_node(st, k->node_id));
	}
	state_event(st, "job.notice", j->id, 0, "attempt %lld: %s", (long long)a->id, a->notice);
}

/* "14:03 UTC": when wall-clock ms at falls, for a notice. */
static void say_clock(char *out, size_t n, int64_t at)
{
	time_t t = (time_t)(at / 1000);
	struct tm tm;
	if (!gmtime_r(&t, &tm) || strftime(out, n, "%H:%M UTC", &tm) == 0)
		snprintf(out, n, "soon");
}

static void warn_time_limit(struct state *st, const struct job *j, struct attempt *a, int64_t limit,
                            int64_t now)
{
	int64_t left = a->start_ms + limit - now;
	if (!j->session || a->limit_warned || left > warning_of(st, limit))
		return;
	a->limit_warned = 1;
	char span[32], at[32];
	say_span(span, sizeof(span), limit);
	say_clock(at, sizeof(at), a->start_ms + limit);
	session_notice(st, j, a,
	               "this session ends in %lld s: its time limit (%s) is reached at %s",
	               (long long)((left + 999) / 1000), span, at);
}

/* Stops attempts past their time limit, as Slurm does (TIMEOUT), and
 * warns sessions before theirs. */
void ranks_check_time_limits(struct state *st)
{
	int64_t now = wall_ms();
	for (int i = st->core->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->core->active[i];
		struct job *j = state_job(st, a->job_id);
		int64_t limit = limit_of(st, j);
		if (attempt_ending(a) || a->start_ms <= 0 || limit <= 0)
			continue;
		if (now - a->start_ms < limit) {
			warn_time_limit(st, j, a, limit, now);
			continue;
		}
		text_printf(j->reason, sizeof(j->reason),
		            "reached its time limit of %lld s; stopping",
		            (long long)(limit / 1000));
		attempt_stop_to(st, a, ATTEMPT_STOP_TIME_LIMIT, 0, "time limit %lld ms reached",
		                (long long)limit);
	}
}

/* How long every rank's GPUs have been idle; -1 while an agent has not said. */
static int64_t session_idle(const struct attempt *a, int64_t now_mono, int64_t now_wall)
{
	int64_t idle = INT64_MAX;
	for (int r = 0; r < a->nranks; r++) {
		int64_t k = state_gpu_idle_ms(a, &a->ranks[r], now_mono, now_wall);
		if (k < 0 && !rank_state_final(a->ranks[r].state))
			return -1;
		if (k >= 0 && k < idle)
			idle = k;
	}
	return idle == INT64_MAX ? -1 : idle;
}

/* One running session against its queue's idle timeout: warned, then stopped. */
static void check_idle(struct state *st, struct job *j, struct attempt *a, int64_t timeout,
                       int64_t now_mono, int64_t now_wall)
{
	int64_t idle = session_idle(a, now_mono, now_wall);
	int64_t warn_at = timeout - warning_of(st, timeout);
	char span[32];
	say_span(span, sizeof(span), timeout);
	if (idle < warn_at) {
		a->idle_warned = 0; /* busy again: a new idle spell is warned anew */
		return;
	}
	if (idle < timeout) {
		if (!a->idle_warned) {
			char was[32];
			say_span(was, sizeof(was), idle);
			session_notice(
			        st, j, a,
			        "this session ends in %lld s unless its GPUs are used: they "
			        "have been idle for %s, and queue %s ends sessions idle for %s",
			        (long long)((timeout - idle + 999) / 1000), was, j->queue, span);
		}
		a->idle_warned = 1;
		return;
	}
	text_printf(a->end_reason, sizeof(a->end_reason),
	            "its GPUs were idle for %s (queue %s's idle_timeout)", span, j->queue);
	text_printf(j->reason, sizeof(j->reason), "%s; stopping", a->end_reason);
	attempt_stop_to(st, a, ATTEMPT_STOP_IDLE, 0, "GPUs idle for %lld ms (idle_timeout %lld ms)",
	                (long long)idle, (long long)timeout);
}

/* Stops running sessions whose GPUs have been idle past their queue's
 * idle_timeout, warning them first. Only sessions: a batch job's idle
 * GPUs are its own business (it may be loading data or waiting on a peer). */
void ranks_check_idle(struct state *st)
{
	int64_t now_mono = now_ms(), now_wall = wall_ms();
	for (int i = st->core->nactive - 1; i >= 0; i--) {
		struct attempt *a = st->core->active[i];
		struct job *j = state_job(st, a->job_id);
		const struct queue *q = j && j->session ? state_queue(st, j->queue) : NULL;
		if (!q || q->idle_timeout_ms <= 0 || attempt_ending(a) || a->state != JOB_RUNNING)
			continue;
		check_idle(st, j, a, q->idle_timeout_ms, now_mono, now_wall);
	}
}
