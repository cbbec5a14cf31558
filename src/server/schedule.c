/* schedule.c - the glue between the server's records and the pure scheduler
 * (sched/sched.h): build a snapshot, run one cycle, apply its decisions.
 * Layer 4 of the state files (core.h, glue.h); every function runs with
 * the state lock held.
 *
 * The snapshot's nodes are st->nodes in order, so a node index in a result
 * is an index into st->nodes. The snapshot arrays live in struct scratch,
 * reused from cycle to cycle, and so do the glue's caches: the interned ids
 * of each job's queue, team and constraints and of each node's pool, labels
 * and GPU model, made once (glue_job_cache, node_cache) so that a cycle
 * interns nothing. The records (model/model.h) know nothing of them: a
 * node's entry is made again when node->changes moves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "sched/sched.h"
#include "server/glue.h"

/* A node's scheduling attributes, interned (node_cache). */
struct node_cache {
	uint32_t labels[SCHED_MAX_LABELS], block, rack, sw, pool, model;
	uint64_t mem_mib;
	uint8_t nlabels;
	uint8_t cached;  /* 0: never made */
	int64_t changes; /* node->changes it was made at */
};

/* A job's queue, team and constraints, interned (glue_job_cache): 48 bytes,
 * as they took inside struct job. */
struct job_cache {
	uint32_t queue, team, model, pool, sel[SCHED_MAX_SELECTORS];
	uint64_t min_mem_mib;
	uint8_t nsel;
	uint8_t cached; /* 0: never made, or forgotten since */
};

struct scratch {
	/* The caches are arrays indexed like st->nodes and st->jobs, by id - 1:
	 * both kinds of id are dense from 1 (state.h), so a lookup in the
	 * snapshot's loops is an index, not a hash, and allocates nothing once
	 * the array has grown to the newest id. A job's entry stays after it
	 * leaves pending: its running attempts are described with its queue
	 * and team (fill_running), what it holds never changes after submission,
	 * and dropping it would free nothing from a dense array. */
	struct node_cache *nodec;
	size_t capnodec;
	struct job_cache *jobc;
	size_t capjobc;
	struct sched_node *nodes;
	size_t capnodes;
	struct sched_job *jobs;
	size_t capjobs;
	struct job **ready; /* the pending jobs the scheduler may see (deps.c) */
	size_t capready;
	struct job **held; /* ... and those their array's limit holds back */
	size_t capheld;
	int nready, nheld; /* of the last snapshot */
	struct sched_running *running;
	size_t caprunning;
	struct sched_rank_hold *holds;
	size_t capholds;
	struct sched_queue *queues;
	struct sched_quota *quotas;
	struct sched_team *teams;
	struct sched_node *ever; /* glue_fits_ever: every node empty and ready */
	size_t capever;
	struct sched *sched;   /* made by the first cycle */
	int64_t sched_last_ms; /* monotonic time of the last cycle */
	int64_t sched_full_ms; /* ... and of the last one that explained every wait */
};

#define ENSURE(arr, cap, n)                                                                        \
	do {                                                                                       \
		if ((size_t)(n) > (cap)) {                                                         \
			(cap) = (size_t)(n)*2;                                                     \
			(arr) = xrealloc((arr), sizeof(*(arr)) * (cap));                           \
		}                                                                                  \
	} while (0)

void glue_free(struct state *st)
{
	struct scratch *x = st->core->glue;
	if (x) {
		free(x->nodec);
		free(x->jobc);
		free(x->nodes);
		free(x->jobs);
		free(x->ready);
		free(x->held);
		free(x->running);
		free(x->holds);
		free(x->queues);
		free(x->quotas);
		free(x->teams);
		free(x->ever);
		sched_free(x->sched);
		free(x);
	}
	st->core->glue = NULL;
}

/* The snapshot buffers and the caches, made on first use. */
static struct scratch *scratch_of(struct state *st)
{
	if (!st->core->glue)
		st->core->glue = xcalloc(1, sizeof(struct scratch));
	return st->core->glue;
}

/* Grows a cache array to hold index need - 1; new entries are all 0 (not
 * cached). Ids grow by one, so the capacity doubles to keep that amortised. */
static void *grow_cache(void *arr, size_t size, size_t *cap, size_t need)
{
	if (need <= *cap)
		return arr;
	size_t ncap = *cap * 2 > need ? *cap * 2 : need + 64;
	arr = xrealloc(arr, size * ncap);
	memset((char *)arr + size * *cap, 0, size * (ncap - *cap));
	*cap = ncap;
	return arr;
}

static struct job_cache *job_slot(struct state *st, const struct job *j)
{
	struct scratch *x = scratch_of(st);
	x->jobc = grow_cache(x->jobc, sizeof(*x->jobc), &x->capjobc, (size_t)j->id);
	return &x->jobc[j->id - 1];
}

void glue_job_cache(struct state *st, struct job *j)
{
	struct job_cache *c = job_slot(st, j);
	c->queue = state_intern(st, j->queue);
	c->team = state_intern(st, j->team);
	c->model = state_intern(st, jv_str(j->constraints, "gpu_type", NULL));
	c->pool = state_intern(st, jv_str(j->constraints, "pool", NULL));
	c->min_mem_mib = (uint64_t)jv_int(j->constraints, "min_gpu_memory_bytes", 0) >> 20;
	c->nsel = 0;
	const char *k;
	json_t *v;
	json_object_foreach (json_object_get(j->constraints, "selectors"), k, v) {
		if (c->nsel == SCHED_MAX_SELECTORS)
			break;
		char *kv = xasprintf("%s=%s", k, json_string_value(v));
		c->sel[c->nsel++] = state_intern(st, kv);
		free(kv);
	}
	c->cached = 1;
}

static const struct job_cache *job_cache_of(struct state *st, struct job *j)
{
	struct job_cache *c = job_slot(st, j);
	if (!c->cached)
		glue_job_cache(st, j);
	return c;
}

void glue_forget_job(struct state *st, const struct job *j)
{
	struct scratch *x = st->core->glue;
	if (x && j->id >= 1 && (size_t)j->id <= x->capjobc)
		x->jobc[j->id - 1].cached = 0;
}

/* GPU models are matched case-insensitively on what users type ("h200")
 * against what the hardware says ("NVIDIA H200"): the model id of a node is
 * its lower-cased last word, so "h200", "a100-sxm4-80gb" and so on. */
static uint32_t model_id(struct state *st, const char *model)
{
	const char *word = strrchr(model, ' ');
	word = word ? word + 1 : model;
	char low[96];
	size_t i = 0;
	for (; word[i] && i < sizeof(low) - 1; i++)
		low[i] = (char)((word[i] >= 'A' && word[i] <= 'Z') ? word[i] + 32 : word[i]);
	low[i] = '\0';
	return state_intern(st, low);
}

static const struct node_cache *node_cache(struct state *st, const struct node *n)
{
	struct scratch *x = scratch_of(st);
	x->nodec = grow_cache(x->nodec, sizeof(*x->nodec), &x->capnodec, (size_t)n->id);
	struct node_cache *c = &x->nodec[n->id - 1];
	if (c->cached && c->changes == n->changes)
		return c;
	c->changes = n->changes;
	c->model = n->ngpus ? model_id(st, n->gpus[0].model) : 0;
	c->mem_mib = n->ngpus ? n->gpus[0].memory_bytes >> 20 : 0;
	c->pool = state_intern(st, n->pool);
	c->block = state_intern(st, jv_str(n->labels, "block", NULL));
	c->rack = state_intern(st, jv_str(n->labels, "rack", NULL));
	c->sw = state_intern(st, jv_str(n->labels, "switch", NULL));
	c->nlabels = 0;
	const char *k;
	json_t *v;
	json_object_foreach (n->labels, k, v) {
		if (c->nlabels == SCHED_MAX_LABELS || !json_is_string(v))
			continue;
		char *kv = xasprintf("%s=%s", k, json_string_value(v));
		c->labels[c->nlabels++] = state_intern(st, kv);
		free(kv);
	}
	c->cached = 1;
	return c;
}

static void fill_node(struct state *st, struct node *n, struct sched_node *s)
{
	const struct node_cache *c = node_cache(st, n);
	memset(s, 0, sizeof(*s));
	uint64_t all = 0;
	for (int g = 0; g < n->ngpus; g++)
		all |= 1ull << n->gpus[g].index;
	s->id = n->id;
	s->block = c->block;
	s->rack = c->rack;
	s->sw = c->sw;
	s->pool = c->pool;
	s->gpu_model = c->model;
	s->gpu_mem_mib = c->mem_mib;
	s->gpus_all = all;
	s->gpus_healthy = all & ~n->gpus_unhealthy;
	s->gpus_free = s->gpus_healthy & ~n->gpus_used;
	s->nnvlink = n->nnvlink <= SCHED_MAX_NVLINK ? n->nnvlink : 0;
	memcpy(s->nvlink, n->nvlink, sizeof(s->nvlink[0]) * (size_t)s->nnvlink);
	s->nnear = n->nnear <= SCHED_MAX_NEAR ? n->nnear : 0;
	memcpy(s->near, n->near, sizeof(s->near[0]) * (size_t)s->nnear);
	s->nlabels = c->nlabels;
	memcpy(s->labels, c->labels, sizeof(s->labels));
	s->schedulable = node_takes_work(n); /* not lost, cordoned, draining or held */
	/* CPU-only ranks at once: one per CPU it reported (docs/scheduling.md) */
	s->cpu_ranks_max = n->cpus > 0 ? n->cpus : 1;
}

static void fill_job(struct state *st, struct job *j, struct sched_job *s)
{
	const struct job_cache *c = job_cache_of(st, j);
	memset(s, 0, sizeof(*s));
	s->id = j->id;
	s->queue = c->queue;
	s->team = c->team;
	s->priority = j->priority;
	s->submit_ms = j->submit_ms;
	s->gpus = j->gpus;
	s->nodes = j->nodes;
	s->time_limit_ms = j->time_limit_ms;
	s->gpu_model = c->model;
	s->min_gpu_mem_mib = c->min_mem_mib;
	s->pool = c->pool;
	s->nselectors = c->nsel;
	memcpy(s->selectors, c->sel, sizeof(s->selectors));
	s->checkpointing = j->checkpointing;
	s->held_since_ms = j->preempt_held_ms;
	if (j->nattempts > 0 && j->attempts[j->nattempts - 1]->state == JOB_PREEMPTED)
		s->requeued_ms = j->attempts[j->nattempts - 1]->end_ms;
}

int glue_fits_ever(struct state *st, struct job *j, char *why, size_t whylen)
{
	if (st->nnodes == 0)
		return 0; /* nothing registered yet: wait rather than judge */
	struct scratch *x = scratch_of(st);
	ENSURE(x->ever, x->capever, st->nnodes);
	struct sched_node *nodes = x->ever; /* reused: no allocation per submission */
	for (int i = 0; i < st->nnodes; i++) {
		fill_node(st, st->nodes[i], &nodes[i]);
		/* a quarantined GPU comes back after its reset: count it */
		nodes[i].gpus_healthy = nodes[i].gpus_all;
		nodes[i].gpus_free = nodes[i].gpus_all;
		nodes[i].schedulable = 1;
	}
	struct sched_job sj;
	fill_job(st, j, &sj);
	int rc = sched_fits_ever(nodes, st->nnodes, &sj, why, whylen);
	if (rc && json_object_size(j->constraints)) {
		/* The scheduler knows interned ids; name what was asked for. */
		char *asked = jv_dump(j->constraints);
		size_t len = strlen(why);
		snprintf(why + len, whylen - len, " (the job asks for %s)", asked);
		free(asked);
	}
	return rc;
}

static int64_t time_limit(struct state *st, const struct job *j)
{
	if (j->time_limit_ms > 0)
		return j->time_limit_ms;
	struct queue *q = state_queue(st, j->queue);
	return q ? q->default_time_limit_ms : 24 * 3600 * 1000LL;
}

static int fill_running(struct state *st, struct scratch *x)
{
	size_t nholds = 0;
	for (int i = 0; i < st->core->nactive; i++)
		nholds += (size_t)st->core->active[i]->nranks;
	ENSURE(x->running, x->caprunning, st->core->nactive + 1);
	ENSURE(x->holds, x->capholds, nholds + 1);
	size_t h = 0;
	for (int i = 0; i < st->core->nactive; i++) {
		const struct attempt *a = st->core->active[i];
		struct job *j = state_job(st, a->job_id);
		const struct job_cache *c = job_cache_of(st, j);
		struct sched_running *r = &x->running[i];
		memset(r, 0, sizeof(*r));
		r->attempt_id = a->id;
		r->job_id = j->id;
		r->queue = c->queue;
		r->team = c->team;
		r->priority = j->priority;
		r->submit_ms = j->submit_ms;
		r->start_ms = a->start_ms > 0 ? a->start_ms : j->submit_ms;
		r->end_by_ms = r->start_ms + time_limit(st, j);
		r->checkpointing = j->checkpointing;
		r->last_checkpoint_ms = a->checkpoint_ms;
		r->borrowed = a->borrowed;
		r->stopping = attempt_ending(a);
		r->stopping_for =
		        machine_decides(MACHINE_ATTEMPT_STOP, (int)a->stop, MACHINE_REQUEUES)
		                ? a->preempted_for
		                : 0;
		r->ranks = &x->holds[h];
		for (int k = 0; k < a->nranks; k++) {
			if (rank_state_final(a->ranks[k].state))
				continue;
			x->holds[h].node = (int)(a->ranks[k].node_id - 1);
			x->holds[h].gpus = a->ranks[k].gpus;
			h++;
			r->nranks++;
		}
	}
	return st->core->nactive;
}

static void fill_policy(struct state *st, struct scratch *x, struct sched_snapshot *snap)
{
	int nquotas = 0;
	for (int i = 0; i < st->nqueues; i++)
		nquotas += st->queues[i].nquotas;
	x->queues = xrealloc(x->queues, sizeof(*x->queues) * (size_t)(st->nqueues + 1));
	x->quotas = xrealloc(x->quotas, sizeof(*x->quotas) * (size_t)(nquotas + 1));
	x->teams = xrealloc(x->teams, sizeof(*x->teams) * (size_t)(st->nteams + 1));
	int k = 0;
	for (int i = 0; i < st->nqueues; i++) {
		const struct queue *q = &st->queues[i];
		x->queues[i] =
		        (struct sched_queue){.id = q->sched_id,
		                             .priority = q->priority,
		                             .weight = q->weight,
		                             .borrowing = q->borrowing,
		                             .default_time_limit_ms = q->default_time_limit_ms};
		for (int m = 0; m < q->nquotas; m++)
			x->quotas[k++] =
			        (struct sched_quota){.queue = q->sched_id,
			                             .team = state_intern(st, q->quotas[m].team),
			                             .nominal_gpus = q->quotas[m].nominal_gpus};
	}
	for (int i = 0; i < st->nteams; i++)
		x->teams[i] = (struct sched_team){
		        .id = st->teams[i].sched_id,
		        .weight = st->teams[i].weight,
		        .usage = state_team_usage(st, &st->teams[i], snap->now_ms)};
	snap->queues = x->queues;
	snap->nqueues = st->nqueues;
	snap->quotas = x->quotas;
	snap->nquotas = k;
	snap->teams = x->teams;
	snap->nteams = st->nteams;
}

static void build(struct state *st, struct scratch *x, struct sched_snapshot *snap)
{
	memset(snap, 0, sizeof(*snap));
	snap->now_ms = wall_ms();
	snap->config = (struct sched_config){.aging_ms = st->config.aging_ms,
	                                     .backfill = 1,
	                                     .preemption = 1,
	                                     .max_reservations = SCHED_DEFAULT_RESERVATIONS,
	                                     .min_runtime_ms = st->config.preempt_min_runtime_ms,
	                                     .preempt_max_ratio = st->config.preempt_max_ratio,
	                                     .preempt_loss_pct = st->config.preempt_loss_pct,
	                                     .overdue_ms = SCHED_DEFAULT_OVERDUE_MS,
	                                     .starve_ms = SCHED_DEFAULT_STARVE_MS,
	                                     .restart_cost_ms = st->config.preempt_restart_cost_ms};
	ENSURE(x->nodes, x->capnodes, st->nnodes + 1);
	for (int i = 0; i < st->nnodes; i++)
		fill_node(st, st->nodes[i], &x->nodes[i]);
	ENSURE(x->ready, x->capready, st->core->npending + 1);
	ENSURE(x->held, x->capheld, st->core->npending + 1);
	/* dependencies and array limits */
	int nready = deps_ready(st, x->ready, x->held, &x->nheld);
	x->nready = nready;
	ENSURE(x->jobs, x->capjobs, nready + 1);
	for (int i = 0; i < nready; i++)
		fill_job(st, x->ready[i], &x->jobs[i]);
	snap->nodes = x->nodes;
	snap->nnodes = st->nnodes;
	snap->pending = x->jobs;
	snap->npending = nready;
	snap->nrunning = fill_running(st, x);
	snap->running = x->running;
	fill_policy(st, x, snap);
}

static struct attempt *start_attempt(struct state *st, struct job *j,
                                     const struct sched_placement *p)
{
	struct attempt *a = xcalloc(1, sizeof(*a));
	a->id = st->core->nattempts + 1;
	a->job_id = j->id;
	a->number = j->nattempts + 1;
	a->state = JOB_SCHEDULED; /* created scheduled: not a move (model/machine.h) */
	a->borrowed = p->borrowed;
	a->nranks = p->nranks;
	a->ranks = xcalloc((size_t)p->nranks, sizeof(*a->ranks));
	for (int r = 0; r < p->nranks; r++) {
		struct node *n = st->nodes[p->ranks[r].node];
		a->ranks[r].rank = r;
		a->ranks[r].node_id = n->id;
		a->ranks[r].gpus = p->ranks[r].gpus;
		a->ranks[r].state = RANK_ASSIGNED;
		n->gpus_used |= p->ranks[r].gpus;
	}
	struct node *master = st->nodes[p->ranks[0].node];
	snprintf(a->master_addr, sizeof(a->master_addr), "%s", master->address);
	/* Attempt ids are unique and increasing, so ports only repeat after
	 * 20,000 attempts: far longer than any rendezvous lives. */
	a->master_port = 20000 + (int)(a->id % 20000);
	/* A head's port, likewise, from a range of its own: never the master
	 * port of this attempt or of another on the same node. */
	a->head_port = j->head ? 10000 + (int)(a->id % 10000) : 0;
	/* An MPI job's ranks exec into each other with a secret of their own
	 * (docs/cli.md, "MPI"), new for each attempt: a requeued attempt's
	 * token cannot reach the next one. A workflow task's wrapper uses its
	 * attempt's token for the objects and outputs it reads and writes, and
	 * a checkpointing job's agent and restore for its checkpoints
	 * (ckpt/JOB/..., agent/ckpt.h). */
	if (j->mpi || j->task || j->checkpointing)
		random_hex(a->exec_token, (sizeof(a->exec_token) - 1) / 2);
	state_index_attempt(st, j, a);
	state_active_add(st, a);
	for (int r = 0; r < p->nranks; r++)
		state_bump(st, st->nodes[p->ranks[r].node]);
	return a;
}

/* Checks a placement against the records before applying it: the
 * scheduler is pure and tested, but a GPU given twice would be the one
 * unforgivable bug, so the glue refuses rather than trusts. */
static int placement_ok(struct state *st, const struct job *j, const struct sched_placement *p)
{
	if (p->nranks != j->nodes)
		return 0;
	for (int r = 0; r < p->nranks; r++) {
		int idx = p->ranks[r].node;
		if (idx < 0 || idx >= st->nnodes)
			return 0;
		const struct node *n = st->nodes[idx];
		if (((n->gpus_used | n->gpus_unhealthy) & p->ranks[r].gpus) ||
		    __builtin_popcountll(p->ranks[r].gpus) != j->gpus || !node_takes_work(n))
			return 0;
	}
	return 1;
}

static void apply_placement(struct state *st, const struct sched_placement *p)
{
	struct job *j = state_job(st, p->job_id);
	if (!j || j->state != JOB_PENDING || !placement_ok(st, j, p)) {
		log_error("scheduler placement refused job=%lld", (long long)p->job_id);
		return;
	}
	struct attempt *a = start_attempt(st, j, p);
	state_pending_remove(st, j);
	j->est_start_ms = 0;
	j->preempt_held_ms = 0;
	text_printf(j->reason, sizeof(j->reason), "placed%s",
	            p->borrowed ? " on borrowed quota" : "");
	st->stats.placed_total++;
	job_to(st, j, JOB_SCHEDULED, "attempt %lld placed on %d node(s)%s", (long long)a->id,
	       j->nodes, p->borrowed ? " (borrowed quota)" : "");
}

static void apply_preemption(struct state *st, const struct sched_preemption *pr)
{
	struct attempt *a = state_attempt(st, pr->attempt_id);
	if (!a || job_state_final(a->state) || attempt_ending(a))
		return;
	struct job *j = state_job(st, a->job_id);
	a->preempted_for = pr->for_job_id;
	struct job *for_job = state_job(st, pr->for_job_id);
	if (for_job) /* what its victims free is held for it (sched.h) */
		for_job->preempt_held_ms = wall_ms();
	/* The cause stays with the attempt (shown by `anvil show`); the job's
	 * reason gives way to its next wait once it is requeued. */
	if (pr->reclaim)
		text_printf(a->end_reason, sizeof(a->end_reason),
		            "reclaimed by team %s for job %lld", for_job ? for_job->team : "?",
		            (long long)pr->for_job_id);
	else
		text_printf(a->end_reason, sizeof(a->end_reason),
		            "preempted for job %lld (higher priority)", (long long)pr->for_job_id);
	text_printf(j->reason, sizeof(j->reason), "%s; will be requeued", a->end_reason);
	attempt_stop_to(st, a, ATTEMPT_STOP_PREEMPTED, 0, "attempt %lld %s", (long long)a->id,
	                a->end_reason);
}

/* Teams in a wait's words: the scheduler knows interned ids. */
static const char *name_of(void *ctx, uint32_t id)
{
	const struct state *st = ctx;
	return id >= 1 && (int)id <= st->core->names.n ? st->core->names.v[id - 1] : NULL;
}

/* A full cycle explains every waiting job; the others (many a second in a
 * burst) only the jobs never explained yet, so that a new job has its
 * reason at once while the text and the estimate of the rest are redone
 * once a second. */
static void apply_wait(struct state *st, const struct sched_wait *w, int full)
{
	struct job *j = state_job(st, w->job_id);
	if (!j || j->state != JOB_PENDING || (!full && j->explained))
		return;
	j->explained = 1;
	struct sched_job sj;
	fill_job(st, j, &sj);
	char why[256];
	sched_wait_text(w, &sj, name_of, st, why, sizeof(why));
	j->est_start_ms = w->est_start_ms;
	if (strcmp(why, j->reason) != 0) {
		text_printf(j->reason, sizeof(j->reason), "%s", why);
		state_mark_job(st, j);
	}
}

/* A cycle can place nothing while every schedulable GPU is taken and no
 * CPU-only job waits (every other job asks for a GPU); in a burst that is
 * most submissions and most reports. Such cycles are skipped, except once a
 * second (state_schedule_tick), which keeps preemption and the reasons
 * current. */
static int nothing_placeable(struct state *st)
{
	if (st->core->npending_cpu > 0)
		return 0; /* it needs no GPU: room for it is the scheduler's to find */
	for (int i = 0; i < st->nnodes; i++) {
		const struct node *n = st->nodes[i];
		if (node_takes_work(n) &&
		    __builtin_popcountll(n->gpus_used | n->gpus_unhealthy) < n->ngpus)
			return 0;
	}
	return 1;
}

void glue_age(struct state *st)
{
	struct scratch *x = scratch_of(st);
	x->sched_last_ms = 0;
	x->sched_full_ms = 0;
}

void state_schedule_tick(struct state *st, int64_t now)
{
	struct scratch *x = scratch_of(st);
	if (st->core->npending && now - x->sched_last_ms >= 1000) {
		x->sched_last_ms = 0; /* force */
		state_schedule(st);
	}
}

/* Whether a node in service is one a running rollout has yet to drain. */
static int rollout_ahead(const struct state *st)
{
	for (int i = 0; i < st->nnodes; i++)
		if (st->nodes[i]->rollout_queued && node_takes_work(st->nodes[i]))
			return 1;
	return 0;
}

/* While a rollout runs, the nodes it has yet to drain (node->rollout_queued,
 * set by server/fleet.c) are a last resort for new work. This first pass
 * sees them as unschedulable, the hint every cycle already honours, and
 * places what fits on the other nodes (those the rollout finished or will
 * not touch); it stops nothing (no preemption) and explains nothing. The
 * cycle after it sees every node as usual and places the rest there,
 * preempts and explains every wait. So work the rollout requeued from one
 * node does not land on the next one it drains, to be stopped twice, while
 * other room exists; and where none does, work still runs where it can,
 * as without a rollout, rather than wait for it (hours, on a large fleet).
 * What the first pass changes is where a job goes, not whether it starts;
 * but a lower job it placed can take room a higher one needed together
 * with a queued node (a gang across both): that one waits for the next
 * room, as for any other placement. */
static void place_around_rollout(struct state *st, struct scratch *x)
{
	struct sched_snapshot snap;
	build(st, x, &snap);
	for (int i = 0; i < snap.nnodes; i++)
		if (st->nodes[i]->rollout_queued)
			x->nodes[i].schedulable = 0;
	snap.config.preemption = 0;
	snap.config.skip_estimate = 1;
	struct sched_result res;
	int rc = sched_cycle(x->sched, &snap, &res);
	if (rc) {
		log_error("scheduling cycle around the rollout failed: %s", err_msg(rc));
		return;
	}
	for (int i = 0; i < res.nplacements; i++)
		apply_placement(st, &res.placements[i]);
}

static void cycle(struct state *st, int64_t t0, int full, int64_t est_job_id)
{
	struct scratch *x = scratch_of(st);
	x->sched_last_ms = t0 / 1000;
	if (full)
		x->sched_full_ms = x->sched_last_ms;
	if (!x->sched)
		x->sched = sched_new();
	if (rollout_ahead(st))
		place_around_rollout(st, x);
	struct sched_snapshot snap;
	build(st, x, &snap);
	snap.config.skip_estimate = !full;
	snap.config.est_job_id = est_job_id;
	struct sched_result res;
	int rc = sched_cycle(x->sched, &snap, &res);
	if (rc) {
		log_error("scheduling cycle failed: %s", err_msg(rc));
		return;
	}
	for (int i = 0; i < res.npreemptions; i++)
		apply_preemption(st, &res.preemptions[i]);
	for (int i = 0; i < res.nplacements; i++)
		apply_placement(st, &res.placements[i]);
	for (int i = 0; i < res.nwaits; i++)
		apply_wait(st, &res.waits[i], full);
	/* after the waits: a held member may say what holds the one ahead */
	deps_explain(st, x->ready, x->nready, x->held, x->nheld);
	if (st->nnodes == 0)
		for (int i = 0; i < st->core->npending; i++)
			snprintf(st->core->pending[i]->reason, sizeof(st->core->pending[i]->reason),
			         "no nodes have registered yet");
	st->stats.sched_passes++;
	st->stats.sched_seconds += (double)(now_us() - t0) / 1e6;
}

void state_schedule(struct state *st)
{
	if (!st->core->npending)
		return;
	int64_t t0 = now_us();
	struct scratch *x = scratch_of(st);
	if (x->sched_last_ms && t0 / 1000 - x->sched_last_ms < 1000 && nothing_placeable(st)) {
		st->stats.sched_skipped++;
		return;
	}
	cycle(st, t0, t0 / 1000 - x->sched_full_ms >= 1000, 0);
}

int glue_build(struct state *st, const json_t *body, json_t *task, int64_t first_id,
               struct job ***out, int *n, char *err, size_t errlen)
{
	struct job **js = NULL;
	int rc = jobs_build(st, body, first_id, &js, n, err, errlen);
	if (rc) {
		json_decref(task);
		return rc;
	}
	js[0]->task = task;
	glue_job_cache(st, js[0]); /* an array's members ask for the same */
	rc = glue_fits_ever(st, js[0], err, errlen);
	if (rc) {
		glue_forget_job(st, js[0]);
		for (int k = 0; k < *n; k++)
			job_free(js[k]);
		free(js);
		return rc;
	}
	*out = js;
	return 0;
}

int glue_admit(struct state *st, struct job **js, int n, char *err, size_t errlen)
{
	int rc = jobs_admit(st, js, n, err, errlen);
	if (rc) {
		for (int k = 0; k < n; k++) {
			glue_forget_job(st, js[k]);
			job_free(js[k]);
		}
	}
	return rc;
}

int glue_submit(struct state *st, const json_t *body, json_t *task, struct job ***out, int *n,
                char *err, size_t errlen)
{
	struct job **js = NULL;
	int rc = glue_build(st, body, task, st->njobs + 1, &js, n, err, errlen);
	if (rc == 0)
		rc = glue_admit(st, js, *n, err, errlen);
	if (rc) {
		if (js)
			free(js);
		return rc;
	}
	*out = js;
	return 0;
}

void state_settle(struct state *st)
{
	if (!st->core->need_schedule)
		return;
	st->core->need_schedule = 0;
	state_nodes_settle(st);
	state_schedule(st);
}

void state_schedule_estimate(struct state *st, struct job *j)
{
	if (j->state == JOB_PENDING && j->est_start_ms <= 0)
		cycle(st, now_us(), 1, j->id);
}
