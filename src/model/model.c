#include "model/model.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static const char *job_names[JOB_NSTATES] = {"pending", "scheduled", "running", "succeeded",
                                             "failed",  "cancelled", "lost",    "preempted"};
static const char *rank_names[RANK_NSTATES] = {"assigned", "running", "exited", "failed_to_start",
                                               "lost"};
static const char *node_names[NODE_NSTATES] = {"ready",    "lost",    "cordoned",
                                               "draining", "drained", "awaiting_approval"};
static const char *scope_names[NODE_FAULT_NSCOPES] = {"warning", "job", "gpu", "node"};

static int parse(const char *const *names, int n, const char *s, int *out)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], s) == 0) {
			*out = i;
			return 0;
		}
	return ERR_INVALID;
}

const char *job_state_name(enum job_state s)
{
	return s < JOB_NSTATES ? job_names[s] : "?";
}

int job_state_parse(const char *s, enum job_state *out)
{
	int v;
	int rc = parse(job_names, JOB_NSTATES, s, &v);
	if (rc == 0)
		*out = (enum job_state)v;
	return rc;
}

int job_state_final(enum job_state s)
{
	return s >= JOB_SUCCEEDED;
}

const char *rank_state_name(enum rank_state s)
{
	return s < RANK_NSTATES ? rank_names[s] : "?";
}

int rank_state_parse(const char *s, enum rank_state *out)
{
	int v;
	int rc = parse(rank_names, RANK_NSTATES, s, &v);
	if (rc == 0)
		*out = (enum rank_state)v;
	return rc;
}

int rank_state_final(enum rank_state s)
{
	return s >= RANK_EXITED;
}

const char *node_state_name(enum node_state s)
{
	return s < NODE_NSTATES ? node_names[s] : "?";
}

int node_state_parse(const char *s, enum node_state *out)
{
	int v;
	int rc = parse(node_names, NODE_NSTATES, s, &v);
	if (rc == 0)
		*out = (enum node_state)v;
	return rc;
}

const char *node_shown_state(const struct node *n)
{
	if (n->state != NODE_LOST && n->admin == NODE_READY && n->hold[0])
		return n->hold_stuck ? "held" : "converging";
	return node_state_name(n->state == NODE_LOST ? NODE_LOST : n->admin);
}

int node_takes_work(const struct node *n)
{
	return n->state == NODE_READY && n->admin == NODE_READY && !n->hold[0];
}

const char *node_fault_scope_name(enum node_fault_scope s)
{
	return s < NODE_FAULT_NSCOPES ? scope_names[s] : "?";
}

int node_fault_scope_parse(const char *s, enum node_fault_scope *out)
{
	int v;
	int rc = parse(scope_names, NODE_FAULT_NSCOPES, s, &v);
	if (rc == 0)
		*out = (enum node_fault_scope)v;
	return rc;
}

int attempt_ending(const struct attempt *a)
{
	return a->stop != ATTEMPT_STOP_NONE;
}

int attempt_kept_preempted(const struct attempt *a)
{
	/* a node_lost cause is kept as a requeue: it still requeues after a restart */
	return a->stop == ATTEMPT_STOP_PREEMPTED || a->stop == ATTEMPT_STOP_REQUEUED ||
	       a->stop == ATTEMPT_STOP_NODE_LOST || a->stop == ATTEMPT_STOP_HUNG;
}

int attempt_kept_rank0_ended(const struct attempt *a)
{
	return a->stop == ATTEMPT_STOP_RANK0_ENDED;
}

enum attempt_stop attempt_stop_loaded(int ending, int preempted, int64_t preempted_for,
                                      int command_ended)
{
	if (!ending)
		return ATTEMPT_STOP_NONE;
	if (preempted)
		return preempted_for ? ATTEMPT_STOP_PREEMPTED : ATTEMPT_STOP_REQUEUED;
	return command_ended ? ATTEMPT_STOP_RANK0_ENDED : ATTEMPT_STOP_RANK_FAILED;
}

void attempt_free(struct attempt *a)
{
	if (!a)
		return;
	for (int r = 0; r < a->nranks; r++) {
		json_decref(a->ranks[r].desired);
		free(a->ranks[r].desired_text);
	}
	free(a->ranks);
	json_decref(a->checkpoints);
	free(a);
}

void job_free(struct job *j)
{
	if (!j)
		return;
	free(j->name);
	free(j->queue);
	free(j->cwd);
	free(j->team);
	free(j->head);
	free(j->worker);
	json_decref(j->constraints);
	json_decref(j->command);
	json_decref(j->env);
	json_decref(j->exported);
	json_decref(j->after);
	json_decref(j->task);
	json_decref(j->more);
	for (int i = 0; i < j->nattempts; i++)
		attempt_free(j->attempts[i]);
	free(j->attempts);
	free(j);
}

void node_free(struct node *n)
{
	if (!n)
		return;
	free(n->name);
	free(n->secret);
	free(n->hostname);
	free(n->address);
	free(n->agent_url);
	free(n->backend);
	free(n->pool);
	json_decref(n->labels);
	json_decref(n->facts);
	json_decref(n->health);
	json_decref(n->profile);
	json_decref(n->profile_status);
	free(n->gpus);
	free(n);
}
