/* sched_fifo.c - see sched_fifo.h. */
#include "sched_fifo.h"

#include <stdlib.h>

#include "base/mem.h"

struct fifo {
	uint64_t *free;                /* per node, this cycle's free GPUs */
	int *order;                    /* pending indices, FIFO order */
	int *pick;                     /* the nodes of the job being placed */
	uint32_t *tried;               /* blocks a gang was tried in */
	struct sched_rank_hold *ranks; /* every placement's ranks, back to back */
	struct sched_placement *placements;
	int cap_nodes, cap_pending, cap_ranks;
};

struct fifo *fifo_new(void)
{
	return xcalloc(1, sizeof(struct fifo));
}

void fifo_free(struct fifo *f)
{
	if (!f)
		return;
	free(f->free);
	free(f->order);
	free(f->pick);
	free(f->tried);
	free(f->ranks);
	free(f->placements);
	free(f);
}

static const struct sched_job *sort_jobs; /* qsort has no context argument */

static int cmp_fifo(const void *a, const void *b)
{
	const struct sched_job *x = &sort_jobs[*(const int *)a], *y = &sort_jobs[*(const int *)b];
	if (x->submit_ms != y->submit_ms)
		return x->submit_ms < y->submit_ms ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

static int fifo_before(const struct sched_job *x, const struct sched_job *y)
{
	return x->submit_ms != y->submit_ms ? x->submit_ms < y->submit_ms : x->id < y->id;
}

static void reserve(struct fifo *f, const struct sched_snapshot *s)
{
	if (s->nnodes > f->cap_nodes) {
		f->cap_nodes = s->nnodes;
		f->free = xrealloc(f->free, sizeof(*f->free) * (size_t)s->nnodes);
		f->pick = xrealloc(f->pick, sizeof(*f->pick) * (size_t)s->nnodes);
		f->tried = xrealloc(f->tried, sizeof(*f->tried) * (size_t)s->nnodes);
	}
	if (s->npending > f->cap_pending) {
		f->cap_pending = s->npending;
		f->order = xrealloc(f->order, sizeof(*f->order) * (size_t)s->npending);
		f->placements =
		        xrealloc(f->placements, sizeof(*f->placements) * (size_t)s->npending);
	}
}

int fifo_node_takes(const struct sched_node *n, uint64_t free, const struct sched_job *j)
{
	if (!n->schedulable || __builtin_popcountll(free) < j->gpus)
		return 0;
	if ((j->gpu_model && n->gpu_model != j->gpu_model) || n->gpu_mem_mib < j->min_gpu_mem_mib ||
	    (j->pool && n->pool != j->pool))
		return 0;
	for (int s = 0; s < j->nselectors; s++) {
		int has = 0;
		for (int l = 0; l < n->nlabels; l++)
			has |= n->labels[l] == j->selectors[s];
		if (!has)
			return 0;
	}
	return 1;
}

static uint64_t lowest(uint64_t mask, int count)
{
	uint64_t out = 0;
	for (; count > 0 && mask; count--) {
		uint64_t bit = mask & -mask;
		out |= bit;
		mask &= ~bit;
	}
	return out;
}

/* First fit from node `from` on; 1 with f->pick filled, or 0. A gang
 * takes the first fitting nodes of one block: a block is a fabric island
 * that no gang spans, for the baseline as for anvil (sched.h). */
static int first_fit(struct fifo *f, const struct sched_snapshot *s, const struct sched_job *j,
                     int from)
{
	int got = 0;
	if (j->nodes == 1) {
		for (int i = from; i < s->nnodes && got < 1; i++)
			if (fifo_node_takes(&s->nodes[i], f->free[i], j))
				f->pick[got++] = i;
		return got == 1;
	}
	int ntried = 0;
	for (int i = from; i < s->nnodes; i++) {
		if (!fifo_node_takes(&s->nodes[i], f->free[i], j))
			continue;
		uint32_t b = s->nodes[i].block;
		int tried = 0;
		for (int t = 0; t < ntried && !tried; t++)
			tried = f->tried[t] == b;
		if (tried)
			continue;
		f->tried[ntried++] = b;
		got = 0;
		for (int k = i; k < s->nnodes && got < j->nodes; k++)
			if (s->nodes[k].block == b && fifo_node_takes(&s->nodes[k], f->free[k], j))
				f->pick[got++] = k;
		if (got == j->nodes)
			return 1;
	}
	return 0;
}

int fifo_cycle(struct fifo *f, const struct sched_snapshot *s, struct sched_result *out)
{
	reserve(f, s);
	int sorted = 1;
	for (int i = 0; i < s->npending; i++) {
		f->order[i] = i;
		if (i > 0 && fifo_before(&s->pending[i], &s->pending[i - 1]))
			sorted = 0;
	}
	if (!sorted) {
		sort_jobs = s->pending;
		qsort(f->order, (size_t)s->npending, sizeof(*f->order), cmp_fifo);
	}
	int lo = 0; /* nodes before lo have no free GPU left: free only shrinks */
	int free_gpus = 0;
	for (int i = 0; i < s->nnodes; i++) {
		f->free[i] = s->nodes[i].gpus_free & s->nodes[i].gpus_healthy;
		free_gpus += __builtin_popcountll(f->free[i]);
	}
	/* Every rank takes at least one free GPU: this many ranks at most. */
	if (free_gpus > f->cap_ranks) {
		f->cap_ranks = free_gpus;
		f->ranks = xrealloc(f->ranks, sizeof(*f->ranks) * (size_t)free_gpus);
	}
	int np = 0, nr = 0;
	for (int k = 0; k < s->npending; k++) {
		const struct sched_job *j = &s->pending[f->order[k]];
		while (lo < s->nnodes && !f->free[lo])
			lo++;
		if (!first_fit(f, s, j, lo))
			break;
		for (int r = 0; r < j->nodes; r++) {
			int n = f->pick[r];
			uint64_t take = lowest(f->free[n], j->gpus);
			f->free[n] &= ~take;
			f->ranks[nr + r] = (struct sched_rank_hold){n, take};
		}
		f->placements[np++] = (struct sched_placement){j->id, 0, j->nodes, f->ranks + nr};
		nr += j->nodes;
	}
	*out = (struct sched_result){f->placements, np, NULL, 0, NULL, 0};
	return 0;
}
