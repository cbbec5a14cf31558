/* cpu.c - CPU-only jobs (gpus 0): placement by the count of CPU-only ranks.
 *
 * The cycle does not model CPUs or memory; what a CPU-only job competes for
 * is a node's room for CPU-only ranks, at most cpu_ranks_max at once
 * (sched.h). s->cpu_used[i] counts the CPU-only ranks on node i: the ranks
 * of running attempts that hold no GPU (stopping ones too: they still run)
 * and those placed in this cycle. It is counted when the cycle meets its
 * first CPU-only job, so a cycle without one pays nothing, and it only grows
 * within a cycle, so a shape that found no room finds none later in the
 * same cycle (struct sched_shape.live_fail, as for GPU jobs).
 *
 * The index: per constraint class met in the cycle, a min-heap of (count,
 * topology position) over its eligible nodes with room, built on its first
 * CPU-only job (one scan of the nodes). Its top is the node to take. A
 * placement by another class leaves an entry's count too low (counts only
 * grow): such a stale entry is found when it comes to the top and goes
 * back with its count, or out once its node is full, so every node with room
 * keeps exactly one entry. Placing a job of N ranks costs O(N log n).
 *
 * Nothing here touches the live GPU view, quotas, reservations or victims:
 * a CPU-only job can neither delay a GPU job nor be delayed by one.
 */
#include <string.h>

#include "sched/sched_int.h"

static void cpu_count(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	memset(s->cpu_used, 0, sizeof(*s->cpu_used) * (size_t)snap->nnodes);
	for (int r = 0; r < snap->nrunning; r++) {
		const struct sched_running *a = &snap->running[r];
		for (int k = 0; k < a->nranks; k++)
			if (!a->ranks[k].gpus)
				s->cpu_used[a->ranks[k].node]++;
	}
	s->cpu_heap_n = 0;
	s->cpu_counted = 1;
}

/* A heap entry: fewer CPU-only ranks first, then the lower topology
 * position, so the order is total and ties go the same way every time. */
static uint64_t key(int used, int pos)
{
	return (uint64_t)(uint32_t)used << 32 | (uint32_t)pos;
}

static void sift_down(uint64_t *h, int n, int k)
{
	uint64_t x = h[k];
	for (int c; (c = 2 * k + 1) < n; k = c) {
		if (c + 1 < n && h[c + 1] < h[c])
			c++;
		if (h[c] >= x)
			break;
		h[k] = h[c];
	}
	h[k] = x;
}

static void push(uint64_t *h, int *n, uint64_t x)
{
	int k = (*n)++;
	for (; k > 0 && h[(k - 1) / 2] > x; k = (k - 1) / 2)
		h[k] = h[(k - 1) / 2];
	h[k] = x;
}

static uint64_t pop(uint64_t *h, int *n)
{
	uint64_t top = h[0];
	h[0] = h[--(*n)];
	sift_down(h, *n, 0);
	return top;
}

/* The heap of class cls for this cycle: its eligible nodes (schedulable,
 * matching it, allowed CPU-only ranks) with room, in one scan. */
static void build(struct sched *s, int cls)
{
	const struct sched_snapshot *snap = s->snap;
	s->cpu_heap = sched_grow(s->cpu_heap, &s->cpu_heapcap, s->cpu_heap_n + snap->nnodes + 1,
	                         sizeof(*s->cpu_heap));
	struct sched_class *c = &s->classes[cls];
	uint64_t *h = s->cpu_heap + s->cpu_heap_n;
	int n = 0, eligible = 0, limit = -1;
	for (int p = 0; p < snap->nnodes; p++) {
		int i = s->order[p];
		const struct sched_node *nd = &snap->nodes[i];
		if (!nd->schedulable || nd->cpu_ranks_max <= 0 || !fit_class_matches(c, nd))
			continue;
		eligible++;
		limit = limit < 0 || limit == nd->cpu_ranks_max ? nd->cpu_ranks_max : 0;
		if (s->cpu_used[i] < nd->cpu_ranks_max)
			h[n++] = key(s->cpu_used[i], p);
	}
	for (int k = n / 2 - 1; k >= 0; k--)
		sift_down(h, n, k);
	c->cpu_cycle = s->cycle;
	c->cpu_eligible = eligible;
	c->cpu_limit = limit > 0 ? limit : 0;
	c->cpu_off = s->cpu_heap_n;
	c->cpu_n = n;
	s->cpu_heap_n += n;
}

/* Pops the node with room that runs the fewest CPU-only ranks (-1: none
 * has room): a stale entry goes back with its count first, or out. */
static int pop_room(struct sched *s, struct sched_class *c)
{
	uint64_t *h = s->cpu_heap + c->cpu_off;
	while (c->cpu_n > 0) {
		uint64_t top = pop(h, &c->cpu_n);
		int pos = (int)(uint32_t)top, i = s->order[pos], used = s->cpu_used[i];
		if ((uint64_t)used == top >> 32)
			return i;
		if (used < s->snap->nodes[i].cpu_ranks_max)
			push(h, &c->cpu_n, key(used, pos));
	}
	return -1;
}

static int by_position(const void *ctx, int x, int y)
{
	const struct sched *s = ctx;
	return s->pos[x] < s->pos[y] ? -1 : s->pos[x] > s->pos[y];
}

/* Puts s->pick[0..n) back in class c's heap, counted as they are now. */
static void put_back(struct sched *s, struct sched_class *c, int n)
{
	for (int k = 0; k < n; k++) {
		int i = s->pick[k];
		if (s->cpu_used[i] < s->snap->nodes[i].cpu_ranks_max)
			push(s->cpu_heap + c->cpu_off, &c->cpu_n, key(s->cpu_used[i], s->pos[i]));
	}
}

/* Decides CPU-only job `job` (shape sh) in its turn: 1 if placed on the
 * sh->nodes eligible nodes with room that run the fewest CPU-only ranks,
 * its ranks in topology order; else 0 with w saying why (UNFIT: too few
 * eligible nodes at all; CPU_LIMIT: too few with room). */
int cpu_decide(struct sched *s, int job, struct sched_shape *sh, struct sched_wait *w)
{
	if (!s->cpu_counted)
		cpu_count(s);
	if (s->classes[sh->cls].cpu_cycle != s->cycle)
		build(s, sh->cls);
	struct sched_class *c = &s->classes[sh->cls];
	if (!sh->live_fail) {
		int n = 0, i;
		while (n < sh->nodes && (i = pop_room(s, c)) >= 0)
			s->pick[n++] = i;
		if (n == sh->nodes) {
			sched_msort(s->pick, s->tmp_int, n, by_position, s);
			for (int k = 0; k < n; k++) {
				s->pick_gpus[k] = 0;
				s->cpu_used[s->pick[k]]++;
			}
			put_back(s, c, n);
			sched_commit(s, job, n, 0);
			return 1;
		}
		put_back(s, c, n); /* n is every node with room now */
		sh->live_fail = 1;
		sh->wait.reason =
		        c->cpu_eligible < sh->nodes ? SCHED_WAIT_UNFIT : SCHED_WAIT_CPU_LIMIT;
		sh->wait.a = sh->wait.reason == SCHED_WAIT_UNFIT ? c->cpu_eligible : n;
		sh->wait.b = sh->nodes;
	}
	w->reason = sh->wait.reason;
	w->a = sh->wait.a;
	w->b = sh->wait.b;
	w->cpu_nodes = c->cpu_eligible;
	w->cpu_limit = c->cpu_limit;
	return 0;
}
