/* jobs.c - job, attempt and rank transitions; placement through sched/.
 * Every function runs with the state lock held (see state.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "sched/place.h"
#include "server/state.h"

/* ---- ordering and indexes ---- */

static int queue_priority(struct state *st, const struct job *j)
{
	struct queue *q = state_queue(st, j->queue);
	return q ? q->priority : 0;
}

/* Negative when a should be scheduled before b. */
static int order(struct state *st, const struct job *a, const struct job *b)
{
	int qa = queue_priority(st, a), qb = queue_priority(st, b);
	if (qa != qb)
		return qb - qa;
	if (a->priority != b->priority)
		return b->priority - a->priority;
	return a->id < b->id ? -1 : 1;
}

static void pending_insert(struct state *st, struct job *j)
{
	XGROW(st->pending, st->npending, st->cappending);
	int pos = st->npending;
	while (pos > 0 && order(st, j, st->pending[pos - 1]) < 0) {
		st->pending[pos] = st->pending[pos - 1];
		pos--;
	}
	st->pending[pos] = j;
	st->npending++;
}

static void active_add(struct state *st, struct attempt *a)
{
	XGROW(st->active, st->nactive, st->capactive);
	st->active[st->nactive++] = a;
}

void state_index_job(struct state *st, struct job *j)
{
	XGROW(st->jobs, st->njobs, st->capjobs);
	st->jobs[st->njobs++] = j;
}

/* After loading: rebuild pending, active and GPU allocations. */
void state_restore(struct state *st)
{
	for (int64_t i = 0; i < st->njobs; i++) {
		struct job *j = st->jobs[i];
		if (!j)
			continue;
		if (j->state == JOB_PENDING)
			pending_insert(st, j);
		for (int k = 0; k < j->nattempts; k++) {
			struct attempt *a = j->attempts[k];
			if (job_state_final(a->state))
				continue;
			active_add(st, a);
			for (int r = 0; r < a->nranks; r++) {
				struct node *n = state_node(st, a->ranks[r].node_id);
				if (n && !rank_state_final(a->ranks[r].state)) {
					n->gpus_used |= a->ranks[r].gpus;
					a->ranks[r].stop_gen = n->generation;
				}
			}
		}
	}
}

/* ---- submission ---- */

static const struct jv_field job_fields[] = {
        {"command", JV_STRINGS, 1, 1, 1024},  {"gpus", JV_INT, 0, 0, MODEL_MAX_GPUS},
        {"nodes", JV_INT, 0, 1, 1024},        {"queue", JV_STRING, 0, 1, 63},
        {"priority", JV_INT, 0, -1000, 1000}, {"name", JV_STRING, 0, 0, 128},
        {"env", JV_STRING_MAP, 0, 0, 256},    {"cwd", JV_STRING, 0, 1, 4096},
        {"grace_ms", JV_INT, 0, 0, 600000},   {NULL, 0, 0, 0, 0},
};

static int snapshot(struct state *st, struct place_node **out);

static int check_semantics(struct state *st, const json_t *body, char *err, size_t errlen)
{
	const json_t *cmd = json_object_get(body, "command");
	if (json_string_length(json_array_get(cmd, 0)) == 0) {
		snprintf(err, errlen, "field 'command[0]': the program to run must not be empty");
		return ERR_INVALID;
	}
	const char *queue = jv_str(body, "queue", "default");
	if (!state_queue(st, queue)) {
		snprintf(err, errlen, "field 'queue': no queue named '%.63s'", queue);
		return ERR_INVALID;
	}
	const json_t *env = json_object_get(body, "env");
	const char *key;
	json_t *v;
	json_object_foreach ((json_t *)env, key, v) {
		if (!*key || strchr(key, '=')) {
			snprintf(err, errlen, "field 'env': '%.64s' is not a valid variable name",
			         key);
			return ERR_INVALID;
		}
	}
	if (st->nnodes == 0)
		return 0; /* nothing registered yet: wait rather than judge */
	struct place_node *snap;
	int n = snapshot(st, &snap);
	struct place_request req = {.gpus = (int)jv_int(body, "gpus", 1),
	                            .nodes = (int)jv_int(body, "nodes", 1)};
	int rc = place_fits_ever(snap, n, &req, err, errlen);
	free(snap);
	return rc;
}

int state_submit(struct state *st, const json_t *body, struct job **out, char *err, size_t errlen)
{
	int rc = jv_check(body, job_fields, err, errlen);
	if (rc == 0)
		rc = check_semantics(st, body, err, errlen);
	if (rc)
		return rc;
	struct job *j = xcalloc(1, sizeof(*j));
	j->id = st->njobs + 1;
	j->name = xstrdup(jv_str(body, "name", ""));
	j->queue = xstrdup(jv_str(body, "queue", "default"));
	j->priority = (int)jv_int(body, "priority", 0);
	j->gpus = (int)jv_int(body, "gpus", 1);
	j->nodes = (int)jv_int(body, "nodes", 1);
	j->command = json_deep_copy(json_object_get(body, "command"));
	const json_t *env = json_object_get(body, "env");
	j->env = json_is_object(env) ? json_deep_copy(env) : json_object();
	const char *cwd = jv_str(body, "cwd", NULL);
	j->cwd = cwd ? xstrdup(cwd) : NULL;
	j->grace_ms = jv_int(body, "grace_ms", 10000);
	j->state = JOB_PENDING;
	j->submit_ms = wall_ms();
	snprintf(j->reason, sizeof(j->reason), "waiting to be scheduled");
	state_index_job(st, j);
	pending_insert(st, j);
	state_mark_job(st, j);
	st->submitted_total++;
	state_event(st, "job.submitted", j->id, 0, "job %lld submitted: %d node(s) x %d GPU(s)",
	            (long long)j->id, j->nodes, j->gpus);
	state_schedule(st);
	*out = j;
	return 0;
}

/* ---- placement ---- */

static int snapshot(struct state *st, struct place_node **out)
{
	struct place_node *s = xcalloc((size_t)st->nnodes + 1, sizeof(*s));
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		uint64_t all = n->ngpus >= 64 ? ~0ull : ((1ull << n->ngpus) - 1);
		s[i].id = n->id;
		s[i].total = n->ngpus;
		s[i].free = all & ~n->gpus_used;
		s[i].usable = n->state == NODE_READY;
	}
	*out = s;
	return st->nnodes;
}

static void pending_remove_at(struct state *st, int i)
{
	memmove(&st->pending[i], &st->pending[i + 1],
	        sizeof(*st->pending) * (size_t)(st->npending - i - 1));
	st->npending--;
}

static struct attempt *start_attempt(struct state *st, struct job *j, struct place_node *snap,
                                     const int *idx, const uint64_t *gpus)
{
	struct attempt *a = xcalloc(1, sizeof(*a));
	a->id = st->nattempts + 1;
	a->job_id = j->id;
	a->number = j->nattempts + 1;
	a->state = JOB_SCHEDULED;
	a->nranks = j->nodes;
	a->ranks = xcalloc((size_t)j->nodes, sizeof(*a->ranks));
	for (int r = 0; r < j->nodes; r++) {
		struct node *n = st->nodes[idx[r]];
		a->ranks[r].rank = r;
		a->ranks[r].node_id = n->id;
		a->ranks[r].gpus = gpus[r];
		a->ranks[r].state = RANK_ASSIGNED;
		n->gpus_used |= gpus[r];
		snap[idx[r]].free &= ~gpus[r];
	}
	struct node *master = st->nodes[idx[0]];
	snprintf(a->master_addr, sizeof(a->master_addr), "%s", master->address);
	/* Attempt ids are unique and increasing, so ports only repeat after
	 * 20,000 attempts: far longer than any rendezvous lives. */
	a->master_port = 20000 + (int)(a->id % 20000);
	XGROW(st->attempts, st->nattempts, st->capattempts);
	st->attempts[st->nattempts++] = a;
	j->attempts = xrealloc(j->attempts, sizeof(*j->attempts) * (size_t)(j->nattempts + 1));
	j->attempts[j->nattempts++] = a;
	active_add(st, a);
	for (int r = 0; r < j->nodes; r++)
		state_bump(st, st->nodes[idx[r]]);
	return a;
}

void state_schedule(struct state *st)
{
	if (!st->npending)
		return;
	int64_t t0 = now_us();
	struct place_node *snap;
	int n = snapshot(st, &snap);
	int idx[1024];
	uint64_t gpus[1024];
	for (int i = 0; i < st->npending;) {
		struct job *j = st->pending[i];
		struct place_request req = {.gpus = j->gpus, .nodes = j->nodes};
		char why[256];
		if (n == 0) {
			snprintf(why, sizeof(why), "no nodes have registered yet");
		} else if (place_job(snap, n, &req, idx, gpus, why, sizeof(why)) == 0) {
			struct attempt *a = start_attempt(st, j, snap, idx, gpus);
			j->state = JOB_SCHEDULED;
			snprintf(j->reason, sizeof(j->reason), "placed");
			state_mark_job(st, j);
			st->placed_total++;
			state_event(st, "job.placed", j->id, a->ranks[0].node_id,
			            "attempt %lld placed on %d node(s)", (long long)a->id,
			            j->nodes);
			pending_remove_at(st, i);
			continue;
		}
		if (strcmp(why, j->reason) != 0) {
			snprintf(j->reason, sizeof(j->reason), "%s", why);
			state_mark_job(st, j);
		}
		i++;
	}
	free(snap);
	st->sched_passes++;
	st->sched_seconds += (double)(now_us() - t0) / 1e6;
}
