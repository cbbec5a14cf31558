/* sched_fixture.h - small builders and checkers for the scheduler tests.
 *
 * struct fx owns growable arrays of nodes, queues, quotas, teams, running
 * attempts (with their rank holds) and pending jobs, and a snapshot that
 * points at them (fx_snap() refreshes the pointers). Builders return
 * indexes, since the arrays move as they grow. fx_check() asserts what must
 * hold of any cycle's result.
 */
#ifndef ANVIL_SCHED_FIXTURE_H
#define ANVIL_SCHED_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "base/mem.h"
#include "sched/sched.h"

#define FX_HOLDS_MAX 64 /* rank holds per running attempt in the fixture */

struct fx_run {
	struct sched_running r;
	struct sched_rank_hold holds[FX_HOLDS_MAX];
};

struct fx {
	struct sched_node *nodes;
	int nnodes, nodecap;
	struct sched_queue queues[16];
	int nqueues;
	struct sched_quota quotas[64];
	int nquotas;
	struct sched_team teams[16];
	int nteams;
	struct fx_run *runs;
	struct sched_running *running; /* flattened by fx_snap() */
	int nrunning, runcap;
	struct sched_job *jobs;
	int njobs, jobcap;
	struct sched_snapshot snap;
};

static inline struct fx *fx_new(void)
{
	struct fx *f = xcalloc(1, sizeof(*f));
	f->snap.config.max_reservations = 1;
	return f;
}

static inline void fx_free(struct fx *f)
{
	free(f->nodes);
	free(f->runs);
	free(f->running);
	free(f->jobs);
	free(f);
}

/* A schedulable node of `gpus` GPUs, all healthy and free, in two NVLink
 * groups (halves), model 1 with 80 GiB. */
static inline int fx_node(struct fx *f, uint32_t block, uint32_t rack, uint32_t sw, int gpus)
{
	if (f->nnodes == f->nodecap) {
		f->nodecap = f->nodecap ? f->nodecap * 2 : 16;
		f->nodes = xrealloc(f->nodes, sizeof(*f->nodes) * (size_t)f->nodecap);
	}
	struct sched_node *n = &f->nodes[f->nnodes];
	memset(n, 0, sizeof(*n));
	n->id = 100 + f->nnodes;
	n->block = block;
	n->rack = rack;
	n->sw = sw;
	n->gpu_model = 1;
	n->gpu_mem_mib = 81920;
	n->gpus_all = gpus >= 64 ? ~0ull : (1ull << gpus) - 1;
	n->gpus_healthy = n->gpus_free = n->gpus_all;
	uint64_t half = gpus >= 64 ? 0xffffffffull : (1ull << (gpus / 2)) - 1;
	n->nvlink[0] = half;
	n->nvlink[1] = n->gpus_all & ~half;
	n->nnvlink = 2;
	n->schedulable = 1;
	return f->nnodes++;
}

static inline void fx_queue(struct fx *f, uint32_t id, int prio, int borrowing)
{
	f->queues[f->nqueues++] = (struct sched_queue){
	        .id = id, .priority = prio, .weight = 1, .borrowing = borrowing};
}

static inline void fx_quota(struct fx *f, uint32_t queue, uint32_t team, int gpus)
{
	f->quotas[f->nquotas++] = (struct sched_quota){queue, team, gpus};
}

static inline void fx_team(struct fx *f, uint32_t id, int weight, double usage)
{
	f->teams[f->nteams++] = (struct sched_team){id, weight, usage};
}

/* A pending job: 1 node of `gpus`, submitted at its id. */
static inline struct sched_job *fx_job(struct fx *f, int64_t id, uint32_t queue, uint32_t team,
                                       int gpus, int nodes)
{
	if (f->njobs == f->jobcap) {
		f->jobcap = f->jobcap ? f->jobcap * 2 : 16;
		f->jobs = xrealloc(f->jobs, sizeof(*f->jobs) * (size_t)f->jobcap);
	}
	struct sched_job *j = &f->jobs[f->njobs++];
	memset(j, 0, sizeof(*j));
	j->id = id;
	j->queue = queue;
	j->team = team;
	j->gpus = gpus;
	j->nodes = nodes;
	j->submit_ms = id;
	return j;
}

/* A running attempt; add its holds with fx_hold(). */
static inline struct sched_running *fx_run(struct fx *f, int64_t attempt, uint32_t queue,
                                           uint32_t team, int prio)
{
	if (f->nrunning == f->runcap) {
		f->runcap = f->runcap ? f->runcap * 2 : 16;
		f->runs = xrealloc(f->runs, sizeof(*f->runs) * (size_t)f->runcap);
	}
	struct fx_run *r = &f->runs[f->nrunning++];
	memset(r, 0, sizeof(*r));
	r->r.attempt_id = attempt;
	r->r.job_id = attempt + 100000;
	r->r.queue = queue;
	r->r.team = team;
	r->r.priority = prio;
	return &r->r;
}

/* Running attempt `run` holds `gpus` on node `node` (not free any more). */
static inline void fx_hold(struct fx *f, int run, int node, uint64_t gpus)
{
	struct fx_run *r = &f->runs[run];
	r->holds[r->r.nranks].node = node;
	r->holds[r->r.nranks++].gpus = gpus;
	f->nodes[node].gpus_free &= ~gpus;
}

static inline const struct sched_snapshot *fx_snap(struct fx *f)
{
	free(f->running);
	f->running = xcalloc((size_t)f->nrunning + 1, sizeof(*f->running));
	for (int k = 0; k < f->nrunning; k++) {
		f->running[k] = f->runs[k].r;
		f->running[k].ranks = f->runs[k].holds;
	}
	f->snap.nodes = f->nodes;
	f->snap.nnodes = f->nnodes;
	f->snap.queues = f->queues;
	f->snap.nqueues = f->nqueues;
	f->snap.quotas = f->quotas;
	f->snap.nquotas = f->nquotas;
	f->snap.teams = f->teams;
	f->snap.nteams = f->nteams;
	f->snap.running = f->running;
	f->snap.nrunning = f->nrunning;
	f->snap.pending = f->jobs;
	f->snap.npending = f->njobs;
	return &f->snap;
}

static inline const struct sched_job *fx_find_job(const struct sched_snapshot *snap, int64_t id)
{
	for (int k = 0; k < snap->npending; k++)
		if (snap->pending[k].id == id)
			return &snap->pending[k];
	return NULL;
}

static inline const struct sched_placement *fx_placed(const struct sched_result *res, int64_t id)
{
	for (int k = 0; k < res->nplacements; k++)
		if (res->placements[k].job_id == id)
			return &res->placements[k];
	return NULL;
}

static inline const struct sched_wait *fx_wait(const struct sched_result *res, int64_t id)
{
	for (int k = 0; k < res->nwaits; k++)
		if (res->waits[k].job_id == id)
			return &res->waits[k];
	return NULL;
}

static inline int fx_preempted(const struct sched_result *res, int64_t attempt)
{
	for (int k = 0; k < res->npreemptions; k++)
		if (res->preemptions[k].attempt_id == attempt)
			return 1;
	return 0;
}

/* CPU-only ranks: no node that was given one runs more than its limit. */
static inline void fx_check_cpu(const struct sched_snapshot *snap, const struct sched_result *res)
{
	int *ranks = xcalloc((size_t)snap->nnodes + 1, sizeof(int));
	uint8_t *placed = xcalloc((size_t)snap->nnodes + 1, 1);
	for (int r = 0; r < snap->nrunning; r++)
		for (int k = 0; k < snap->running[r].nranks; k++)
			ranks[snap->running[r].ranks[k].node] += !snap->running[r].ranks[k].gpus;
	for (int p = 0; p < res->nplacements; p++)
		for (int k = 0; k < res->placements[p].nranks; k++)
			if (!res->placements[p].ranks[k].gpus) {
				ranks[res->placements[p].ranks[k].node]++;
				placed[res->placements[p].ranks[k].node] = 1;
			}
	for (int i = 0; i < snap->nnodes; i++)
		if (placed[i])
			CHECK(ranks[i] <= snap->nodes[i].cpu_ranks_max);
	free(ranks);
	free(placed);
}

/* What any result must satisfy: every pending job placed or waiting, once;
 * gangs whole, on distinct nodes, with the asked GPUs; no GPU given twice,
 * none held by a running attempt, unhealthy or on an unschedulable node;
 * CPU-only ranks within their nodes' limits. */
static inline void fx_check(const struct sched_snapshot *snap, const struct sched_result *res)
{
	fx_check_cpu(snap, res);
	uint64_t *given = xcalloc((size_t)snap->nnodes + 1, sizeof(uint64_t));
	CHECK_INT(res->nplacements + res->nwaits, snap->npending);
	for (int r = 0; r < snap->nrunning; r++)
		for (int k = 0; k < snap->running[r].nranks; k++)
			given[snap->running[r].ranks[k].node] |= snap->running[r].ranks[k].gpus;
	for (int p = 0; p < res->nplacements; p++) {
		const struct sched_placement *pl = &res->placements[p];
		const struct sched_job *j = fx_find_job(snap, pl->job_id);
		CHECK(j != NULL);
		CHECK(fx_wait(res, pl->job_id) == NULL);
		CHECK_INT(pl->nranks, j->nodes);
		for (int k = 0; k < pl->nranks; k++) {
			const struct sched_rank_hold *h = &pl->ranks[k];
			const struct sched_node *n = &snap->nodes[h->node];
			CHECK_INT(__builtin_popcountll(h->gpus), j->gpus);
			CHECK((h->gpus & given[h->node]) == 0);
			CHECK((h->gpus & ~(n->gpus_healthy & n->gpus_free & n->gpus_all)) == 0);
			CHECK(n->schedulable);
			for (int m = 0; m < k; m++)
				CHECK(pl->ranks[m].node != h->node);
			given[h->node] |= h->gpus;
		}
	}
	for (int w = 0; w < res->nwaits; w++) {
		CHECK(fx_find_job(snap, res->waits[w].job_id) != NULL);
		CHECK(res->waits[w].reason != SCHED_WAIT_NONE);
	}
	free(given);
}

static inline void fx_cycle(struct sched *s, struct fx *f, struct sched_result *res)
{
	const struct sched_snapshot *snap = fx_snap(f);
	CHECK_INT(sched_cycle(s, snap, res), 0);
	fx_check(snap, res);
}

#endif
