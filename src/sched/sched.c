/* sched.c - one scheduling cycle: tables, order, admission, results.
 *
 * A cycle: validate the snapshot; return at once if nothing is pending;
 * bring the live view up to date (fit.c, incrementally while the nodes are
 * unchanged); intern the
 * queues, teams, quota pairs, constraint classes and job shapes into tables;
 * sort the pending jobs once on precomputed keys; then decide each job in
 * order (decide()) and collect placements, preemptions and waits.
 */
#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "sched/sched_int.h"

void *sched_grow(void *p, int *cap, int need, size_t elem)
{
	if (need <= *cap && p)
		return p;
	int n = *cap ? *cap : 16;
	while (n < need)
		n *= 2;
	*cap = n;
	return xrealloc(p, elem * (size_t)n);
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static void map_rehash(struct sched_map *m, int cap)
{
	uint64_t *keys = m->keys;
	int *vals = m->vals, old = m->cap;
	m->keys = xmalloc(sizeof(*m->keys) * (size_t)cap);
	m->vals = xmalloc(sizeof(*m->vals) * (size_t)cap);
	memset(m->vals, 0xff, sizeof(*m->vals) * (size_t)cap);
	m->cap = cap;
	for (int h = 0; h < old; h++) {
		if (vals[h] < 0)
			continue;
		int k = (int)(mix(keys[h]) & (uint64_t)(cap - 1));
		while (m->vals[k] >= 0)
			k = (k + 1) & (cap - 1);
		m->keys[k] = keys[h];
		m->vals[k] = vals[h];
	}
	free(keys);
	free(vals);
}

/* Empties m, sized for `need` keys without growing. */
void sched_map_reset(struct sched_map *m, int need)
{
	int cap = m->cap ? m->cap : 16;
	while (cap < 2 * need + 2)
		cap *= 2;
	if (cap > m->cap) {
		free(m->keys);
		free(m->vals);
		m->keys = xmalloc(sizeof(*m->keys) * (size_t)cap);
		m->vals = xmalloc(sizeof(*m->vals) * (size_t)cap);
		m->cap = cap;
	}
	memset(m->vals, 0xff, sizeof(*m->vals) * (size_t)m->cap);
	m->n = 0;
}

/* The slot of key, or the empty slot where it would go. */
static int map_slot(const struct sched_map *m, uint64_t key)
{
	int h = (int)(mix(key) & (uint64_t)(m->cap - 1));
	while (m->vals[h] >= 0 && m->keys[h] != key)
		h = (h + 1) & (m->cap - 1);
	return h;
}

int sched_map_find(const struct sched_map *m, uint64_t key)
{
	return m->vals[map_slot(m, key)];
}

/* Adds or replaces key; grows the map past half full. */
void sched_map_put(struct sched_map *m, uint64_t key, int val)
{
	if ((m->n + 1) * 2 > m->cap)
		map_rehash(m, m->cap * 2);
	int h = map_slot(m, key);
	m->n += m->vals[h] < 0;
	m->keys[h] = key;
	m->vals[h] = val;
}

void sched_map_free(struct sched_map *m)
{
	free(m->keys);
	free(m->vals);
}

/* Stable bottom-up merge sort of ints with a caller's order: no allocation
 * (tmp holds n), and deterministic whatever the comparison's ties. */
void sched_msort(int *a, int *tmp, int n, int (*cmp)(const void *ctx, int x, int y),
                 const void *ctx)
{
	int *src = a, *dst = tmp;
	for (int w = 1; w < n; w *= 2) {
		for (int lo = 0; lo < n; lo += 2 * w) {
			int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			int i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				dst[k++] = cmp(ctx, src[j], src[i]) < 0 ? src[j++] : src[i++];
			while (i < mid)
				dst[k++] = src[i++];
			while (j < hi)
				dst[k++] = src[j++];
		}
		int *t = src;
		src = dst;
		dst = t;
	}
	if (src != a)
		memcpy(a, src, sizeof(int) * (size_t)n);
}

struct sched *sched_new(void)
{
	struct sched *s = xcalloc(1, sizeof(struct sched));
	s->slot_live = ~0ull;
	return s;
}

void sched_free(struct sched *s)
{
	if (!s)
		return;
	void *arrays[] = {
	        s->usable,        s->want,        s->free,       s->nfree,     s->slotmask,
	        s->resv,          s->order,       s->pos,        s->ndom,      s->tmp_int,
	        s->dom_lo,        s->dom_hi,      s->dom_clo,    s->dom_chi,   s->classes,
	        s->shapes,        s->queues,      s->teams,      s->qts,       s->qt_taken,
	        s->items,         s->items_tmp,   s->job_shape,  s->job_qt,    s->job_queue,
	        s->job_first,     s->run,         s->run_order,  s->run_first, s->undo,
	        s->resvs,         s->resv_ranks,  s->rel_time,   s->rel_who,   s->rel_tmp,
	        s->cand,          s->victims,     s->placements, s->place_end, s->place_off,
	        s->ranks,         s->preemptions, s->waits,      s->wait_job,  s->place_job,
	        s->est,           s->est_ends,    s->est_ranks,  s->est_saved, s->run_rel,
	        s->run_rel_order, s->est_next,    s->estb,       s->estb_heap, s->est_qfail,
	        s->est_qfail_step};
	for (size_t k = 0; k < sizeof(arrays) / sizeof(arrays[0]); k++)
		free(arrays[k]);
	fit_slots_cleanup(s);
	free(s->keys);
	free(s->cpu_used);
	free(s->cpu_heap);
	struct sched_map *maps[] = {&s->class_map, &s->shape_map, &s->queue_map, &s->team_map,
	                            &s->qt_map,    &s->job_map,   &s->estb_map};
	for (size_t k = 0; k < sizeof(maps) / sizeof(maps[0]); k++)
		sched_map_free(maps[k]);
	free(s);
}

int64_t sched_job_limit(const struct sched *s, int job)
{
	const struct sched_job *j = &s->snap->pending[job];
	if (j->time_limit_ms > 0)
		return j->time_limit_ms;
	return s->queues[s->job_queue[job]].default_limit;
}

/* How long a wait that began at `since` has lasted by `at`, for a job of
 * `nodes` nodes: 0 within config.overdue_ms, 1 past it (overdue), 2 past
 * config.starve_ms too (starving). The wait counts once per node, so a
 * 16-node gang is overdue 16 times sooner than a one-node job: it cannot
 * start in the holes that smaller jobs fill, so it is the one that starves
 * (Slurm's job size factor favours large jobs for the same reason). */
int sched_wait_level(const struct sched_config *c, int64_t since, int64_t at, int nodes)
{
	if (since <= 0 || at <= since || c->overdue_ms <= 0)
		return 0;
	int64_t waited = at - since;
	waited =
	        waited > INT64_MAX / SCHED_MAX_RANKS ? INT64_MAX : waited * (nodes > 0 ? nodes : 1);
	if (waited <= c->overdue_ms)
		return 0;
	return c->starve_ms > 0 && waited > c->starve_ms ? 2 : 1;
}

int sched_overdue(const struct sched *s, int job)
{
	return sched_wait_level(&s->snap->config, s->snap->pending[job].submit_ms, s->snap->now_ms,
	                        s->snap->pending[job].nodes);
}

/* An end time now + limit, where 0 means no limit. */
int64_t sched_end(const struct sched *s, int64_t limit)
{
	if (limit <= 0 || limit > SCHED_NEVER - s->snap->now_ms)
		return SCHED_NEVER;
	return s->snap->now_ms + limit;
}

/* Also copies each node's GPUs into all[] for valid_running(): a compact
 * array, where the ranks of 10,000s of attempts look them up at random. */
static int valid_nodes(const struct sched_snapshot *snap, uint64_t *all)
{
	for (int i = 0; i < snap->nnodes; i++) {
		const struct sched_node *n = &snap->nodes[i];
		if (n->nnvlink < 0 || n->nnvlink > SCHED_MAX_NVLINK || n->nnear < 0 ||
		    n->nnear > SCHED_MAX_NEAR || n->nlabels < 0 || n->nlabels > SCHED_MAX_LABELS ||
		    n->cpu_ranks_max < 0)
			return 0;
		if ((n->gpus_healthy | n->gpus_free) & ~n->gpus_all)
			return 0;
		all[i] = n->gpus_all;
	}
	return 1;
}

static int valid_running(const struct sched_snapshot *snap, const uint64_t *all)
{
	for (int r = 0; r < snap->nrunning; r++) {
		const struct sched_running *a = &snap->running[r];
		if (a->nranks < 0 || a->nranks > SCHED_MAX_RANKS || (a->nranks && !a->ranks))
			return 0;
		for (int k = 0; k < a->nranks; k++) {
			int node = a->ranks[k].node;
			if (node < 0 || node >= snap->nnodes || (a->ranks[k].gpus & ~all[node]))
				return 0;
		}
	}
	return 1;
}

/* The counts and the pending jobs; nodes and attempts are checked by
 * valid_nodes() and valid_running() once scratch space is sized. */
static int valid_snapshot(const struct sched_snapshot *snap)
{
	if (!snap || snap->nnodes < 0 || snap->nqueues < 0 || snap->nquotas < 0 ||
	    snap->nteams < 0 || snap->nrunning < 0 || snap->npending < 0)
		return 0;
	if ((snap->nnodes && !snap->nodes) || (snap->nqueues && !snap->queues) ||
	    (snap->nquotas && !snap->quotas) || (snap->nteams && !snap->teams) ||
	    (snap->nrunning && !snap->running) || (snap->npending && !snap->pending))
		return 0;
	for (int q = 0; q < snap->nquotas; q++)
		if (snap->quotas[q].nominal_gpus < 0)
			return 0;
	for (int j = 0; j < snap->npending; j++) {
		const struct sched_job *job = &snap->pending[j];
		if (job->gpus < 0 || job->gpus > SCHED_MAX_GPUS || job->nodes < 1 ||
		    job->nodes > SCHED_MAX_RANKS || job->nselectors < 0 ||
		    job->nselectors > SCHED_MAX_SELECTORS)
			return 0;
	}
	return 1;
}

/* Sizes every per-node, per-job and per-attempt array for this snapshot;
 * capacities only grow, so a steady cluster allocates nothing. */
static void reserve_space(struct sched *s, const struct sched_snapshot *snap)
{
	int n = snap->nnodes + 1, cap = s->nodecap;
	if (n > cap) {
		s->usable = sched_grow(s->usable, &cap, n, sizeof(uint64_t));
		s->free = xrealloc(s->free, sizeof(uint64_t) * (size_t)cap);
		s->nfree = xrealloc(s->nfree, (size_t)cap);
		s->slotmask = xrealloc(s->slotmask, sizeof(uint64_t) * (size_t)cap);
		s->resv = xrealloc(s->resv, sizeof(uint64_t) * (size_t)cap);
		free(s->want);
		s->want = xcalloc((size_t)cap, sizeof(uint64_t));
		s->order = xrealloc(s->order, sizeof(int) * (size_t)cap);
		s->pos = xrealloc(s->pos, sizeof(int) * (size_t)cap);
		s->ndom = xrealloc(s->ndom, sizeof(int) * 3 * (size_t)cap);
		s->cpu_used = xrealloc(s->cpu_used, sizeof(int) * (size_t)cap);
		s->nodecap = cap;
	}
	int big = snap->nnodes + snap->npending + snap->nrunning + snap->nqueues + snap->nteams +
	          snap->nquotas + 1;
	s->tmp_int = sched_grow(s->tmp_int, &s->tmpcap, big, sizeof(int));
	if (big > s->relcap) {
		s->rel_time = sched_grow(s->rel_time, &s->relcap, big, sizeof(int64_t));
		s->rel_who = xrealloc(s->rel_who, sizeof(int) * (size_t)s->relcap);
		s->rel_tmp = xrealloc(s->rel_tmp, sizeof(int) * (size_t)s->relcap);
	}
	int j = snap->npending + 1;
	if (j > s->jobcap) {
		cap = s->jobcap;
		s->items = sched_grow(s->items, &cap, j, sizeof(*s->items));
		s->items_tmp = xrealloc(s->items_tmp, sizeof(*s->items) * (size_t)cap);
		s->job_shape = xrealloc(s->job_shape, sizeof(int) * (size_t)cap);
		s->job_qt = xrealloc(s->job_qt, sizeof(int) * (size_t)cap);
		s->job_queue = xrealloc(s->job_queue, sizeof(int) * (size_t)cap);
		s->job_first = xrealloc(s->job_first, (size_t)cap);
		s->jobcap = cap;
	}
	s->placements = sched_grow(s->placements, &s->placecap, j, sizeof(*s->placements));
	s->place_end = xrealloc(s->place_end, sizeof(int64_t) * (size_t)s->placecap);
	s->place_off = xrealloc(s->place_off, sizeof(int) * (size_t)s->placecap);
	s->place_job = xrealloc(s->place_job, sizeof(int) * (size_t)s->placecap);
	s->waits = sched_grow(s->waits, &s->waitcap, j, sizeof(*s->waits));
	s->wait_job = xrealloc(s->wait_job, sizeof(int) * (size_t)s->waitcap);
	int r = snap->nrunning + 1;
	if (r > s->runcap) {
		cap = s->runcap;
		s->run = sched_grow(s->run, &cap, r, sizeof(*s->run));
		s->run_order = xrealloc(s->run_order, sizeof(int) * (size_t)cap);
		s->run_first = xrealloc(s->run_first, sizeof(int) * (size_t)cap);
		s->run_rel = xrealloc(s->run_rel, sizeof(int64_t) * (size_t)cap);
		s->run_rel_order = xrealloc(s->run_rel_order, sizeof(int) * (size_t)cap);
		s->runcap = cap;
	}
	s->preemptions = sched_grow(s->preemptions, &s->preemptcap, r, sizeof(*s->preemptions));
}

static int queue_index(struct sched *s, uint32_t id)
{
	int q = sched_map_find(&s->queue_map, id);
	if (q >= 0)
		return q;
	s->queues = sched_grow(s->queues, &s->queuecap, s->nqueues + 1, sizeof(*s->queues));
	q = s->nqueues++;
	s->queues[q] = (struct sched_queue_st){.id = id, .weight = 1};
	sched_map_put(&s->queue_map, id, q);
	return q;
}

static int team_index(struct sched *s, uint32_t id)
{
	int t = sched_map_find(&s->team_map, id);
	if (t >= 0)
		return t;
	s->teams = sched_grow(s->teams, &s->teamcap, s->nteams + 1, sizeof(*s->teams));
	t = s->nteams++;
	s->teams[t] = (struct sched_team_st){.id = id, .weight = 1};
	sched_map_put(&s->team_map, id, t);
	return t;
}

/* The (queue, team) pair; one without a quota entry has a nominal of 0. */
static int qt_index(struct sched *s, uint32_t queue, uint32_t team)
{
	int q = queue_index(s, queue), t = team_index(s, team);
	uint64_t key = (uint64_t)q << 32 | (uint32_t)t;
	int k = sched_map_find(&s->qt_map, key);
	if (k >= 0)
		return k;
	s->qts = sched_grow(s->qts, &s->qtcap, s->nqts + 1, sizeof(*s->qts));
	k = s->nqts++;
	s->qts[k] = (struct sched_qt){.queue = q, .team = t};
	sched_map_put(&s->qt_map, key, k);
	return k;
}

static void build_policy(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	s->nqueues = s->nteams = s->nqts = 0;
	sched_map_reset(&s->queue_map, snap->nqueues + 16);
	sched_map_reset(&s->team_map, snap->nteams + 16);
	sched_map_reset(&s->qt_map, snap->nquotas + 16);
	for (int k = 0; k < snap->nqueues; k++) {
		const struct sched_queue *sq = &snap->queues[k];
		if (sched_map_find(&s->queue_map, sq->id) >= 0)
			continue;                /* the first entry of an id wins */
		int qi = queue_index(s, sq->id); /* may move s->queues */
		struct sched_queue_st *q = &s->queues[qi];
		q->prio = sq->priority;
		q->weight = sq->weight > 0 ? sq->weight : 1;
		q->borrowing = sq->borrowing;
		q->default_limit = sq->default_time_limit_ms;
	}
	for (int k = 0; k < snap->nteams; k++) {
		const struct sched_team *st = &snap->teams[k];
		if (sched_map_find(&s->team_map, st->id) >= 0)
			continue;
		int ti = team_index(s, st->id);
		struct sched_team_st *t = &s->teams[ti];
		t->weight = st->weight > 0 ? st->weight : 1;
		t->usage = st->usage > 0 ? st->usage : 0;
	}
	for (int k = 0; k < snap->nquotas; k++) {
		const struct sched_quota *sq = &snap->quotas[k];
		int k2 = qt_index(s, sq->queue, sq->team);
		struct sched_qt *qt = &s->qts[k2];
		qt->nominal = sq->nominal_gpus;
		s->queues[qt->queue].has_quota = 1;
	}
	for (int k = 0; k < s->nqts; k++)
		s->queues[s->qts[k].queue].nominal_sum += s->qts[k].nominal;
}

/* What running attempts use: quota (unless already stopping) and the
 * queue's share. A small direct-mapped memo of (queue, team) -> pair spares
 * most of the three map lookups per attempt. */
static void build_running(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	struct {
		uint64_t key;
		int qt;
	} memo[64];
	memset(memo, 0xff, sizeof(memo));
	for (int r = 0; r < snap->nrunning; r++) {
		const struct sched_running *a = &snap->running[r];
		struct sched_run_st *rs = &s->run[r];
		uint64_t key = (uint64_t)a->queue << 32 | a->team;
		int h = (int)((a->queue * 31u + a->team) & 63);
		if (memo[h].key != key || memo[h].qt < 0) {
			memo[h].key = key;
			memo[h].qt = qt_index(s, a->queue, a->team);
		}
		rs->qt = memo[h].qt;
		rs->queue = s->qts[rs->qt].queue;
		rs->taken = 0;
		rs->gpus = 0;
		for (int k = 0; k < a->nranks; k++)
			rs->gpus += __builtin_popcountll(a->ranks[k].gpus);
		if (a->stopping)
			continue;
		s->qts[rs->qt].used += rs->gpus;
		s->qts[rs->qt].running += rs->gpus;
		s->queues[rs->queue].used_sum += rs->gpus;
		s->queues[rs->queue].running_gpus += rs->gpus;
	}
}

static uint64_t class_hash(const struct sched_class *c)
{
	uint64_t h = mix(c->model ^ (uint64_t)c->pool << 32) ^ mix(c->mem + 0x9e3779b97f4a7c15ull);
	for (int k = 0; k < c->nsel; k++)
		h = mix(h ^ c->sel[k]);
	return h;
}

static int class_eq(const struct sched_class *a, const struct sched_class *b)
{
	if (a->model != b->model || a->pool != b->pool || a->mem != b->mem || a->nsel != b->nsel)
		return 0;
	return memcmp(a->sel, b->sel, sizeof(a->sel[0]) * (size_t)a->nsel) == 0;
}

/* The class of job j's constraints: selectors sorted and deduplicated, so
 * that jobs asking the same thing share one node index. */
static int class_index(struct sched *s, const struct sched_job *j)
{
	struct sched_class c = {.model = j->gpu_model, .pool = j->pool, .mem = j->min_gpu_mem_mib};
	for (int k = 0; k < j->nselectors; k++) {
		uint32_t v = j->selectors[k];
		int p = c.nsel;
		while (p > 0 && c.sel[p - 1] > v)
			p--;
		if (p > 0 && c.sel[p - 1] == v)
			continue;
		memmove(&c.sel[p + 1], &c.sel[p], sizeof(c.sel[0]) * (size_t)(c.nsel - p));
		c.sel[p] = v;
		c.nsel++;
	}
	uint64_t h = class_hash(&c);
	struct sched_map *m = &s->class_map;
	if ((m->n + 1) * 2 > m->cap)
		map_rehash(m, m->cap * 2);
	int slot = (int)(mix(h) & (uint64_t)(m->cap - 1));
	for (; m->vals[slot] >= 0; slot = (slot + 1) & (m->cap - 1))
		if (m->keys[slot] == h && class_eq(&s->classes[m->vals[slot]], &c))
			return m->vals[slot];
	s->classes = sched_grow(s->classes, &s->classcap, s->nclasses + 1, sizeof(*s->classes));
	c.slot = -1;
	memset(c.unfit_best, 0xff, sizeof(c.unfit_best));
	c.unfit_most = -1;
	s->classes[s->nclasses] = c;
	m->keys[slot] = h;
	m->vals[slot] = s->nclasses;
	m->n++;
	return s->nclasses++;
}

static int shape_index(struct sched *s, int cls, int gpus, int nodes)
{
	uint64_t key = (uint64_t)cls << 20 | (uint64_t)gpus << 11 | (uint64_t)nodes;
	int k = sched_map_find(&s->shape_map, key);
	if (k >= 0)
		return k;
	s->shapes = sched_grow(s->shapes, &s->shapecap, s->nshapes + 1, sizeof(*s->shapes));
	k = s->nshapes++;
	s->shapes[k] = (struct sched_shape){.cls = cls, .gpus = gpus, .nodes = nodes, .unfit = -1};
	sched_map_put(&s->shape_map, key, k);
	return k;
}

static int queue_rank_cmp(const void *ctx, int x, int y)
{
	const struct sched_queue_st *a = (const struct sched_queue_st *)ctx + x;
	const struct sched_queue_st *b = (const struct sched_queue_st *)ctx + y;
	if (a->prio != b->prio)
		return a->prio > b->prio ? -1 : 1;
	/* running/weight, lowest first, compared exactly */
	int64_t l = a->running_gpus * b->weight, r = b->running_gpus * a->weight;
	if (l != r)
		return l < r ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

static int team_rank_cmp(const void *ctx, int x, int y)
{
	const struct sched_team_st *a = (const struct sched_team_st *)ctx + x;
	const struct sched_team_st *b = (const struct sched_team_st *)ctx + y;
	double l = a->usage * b->weight, r = b->usage * a->weight;
	if (l != r)
		return l < r ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* Ranks queues and teams once, so a job's first sort word is just the
 * two ranks side by side. */
static void rank_policy(struct sched *s)
{
	int *idx = s->tmp_int, *tmp = s->rel_tmp; /* both hold every queue and team */
	for (int k = 0; k < s->nqueues; k++)
		idx[k] = k;
	sched_msort(idx, tmp, s->nqueues, queue_rank_cmp, s->queues);
	for (int k = 0; k < s->nqueues; k++)
		s->queues[idx[k]].rank = k;
	for (int k = 0; k < s->nteams; k++)
		idx[k] = k;
	sched_msort(idx, tmp, s->nteams, team_rank_cmp, s->teams);
	for (int k = 0; k < s->nteams; k++)
		s->teams[idx[k]].rank = k;
}

/* Jobs that running attempts are being stopped for go first, and so do
 * jobs whose victims have stopped lately (held_since_ms) but that have not
 * started yet: the cycle that chose the victims held their GPUs and quota
 * for them, and a job that others could overtake meanwhile (a requeued
 * victim aged past it, or a team below it in fair share) would find its
 * GPUs taken and stop them again, or find its team's quota spent and start
 * as a borrower, to be reclaimed by the very team it reclaimed from. Each
 * stopping attempt learns the index of the pending job it stops for.
 * Among them, the job whose victims were chosen first goes first: its
 * victims are the first to be gone, and a later one decided before it
 * would take what they freed (both find whole free nodes, and best fit
 * cannot tell whose they were). */
static void mark_resuming(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	int any = 0;
	for (int j = 0; j < snap->npending; j++) {
		int64_t since = snap->pending[j].held_since_ms;
		s->job_first[j] = since > 0 && snap->now_ms - since < SCHED_HOLD_MS;
	}
	for (int r = 0; r < snap->nrunning; r++) {
		s->run[r].for_job = -1;
		any |= snap->running[r].stopping && snap->running[r].stopping_for;
	}
	if (!any)
		return;
	sched_map_reset(&s->job_map, snap->npending);
	for (int j = 0; j < snap->npending; j++)
		sched_map_put(&s->job_map, (uint64_t)snap->pending[j].id, j);
	for (int r = 0; r < snap->nrunning; r++) {
		const struct sched_running *a = &snap->running[r];
		int j = a->stopping && a->stopping_for
		                ? sched_map_find(&s->job_map, (uint64_t)a->stopping_for)
		                : -1;
		s->run[r].for_job = j;
		if (j >= 0)
			s->job_first[j] = 1;
	}
}

/* Interns each pending job's queue, quota pair, class and shape, and its
 * sort record: queue rank, team rank, priority plus aging, submit, id. */
static void build_jobs(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	/* Classes live as long as the nodes do (their slots index them), unless
	 * too many have piled up. */
	if (!s->kept || s->nclasses > SCHED_MAX_CLASSES) {
		if (s->kept) {
			for (int k = 0; k < SCHED_SLOTS; k++)
				s->slots[k].cls = -1;
			memset(s->slotmask, 0, sizeof(*s->slotmask) * (size_t)snap->nnodes);
		}
		s->nclasses = 0;
		sched_map_reset(&s->class_map, 64);
	}
	s->nshapes = 0;
	sched_map_reset(&s->shape_map, 64);
	for (int j = 0; j < snap->npending; j++) {
		const struct sched_job *job = &snap->pending[j];
		s->job_qt[j] = qt_index(s, job->queue, job->team);
		s->job_queue[j] = s->qts[s->job_qt[j]].queue;
		int cls = class_index(s, job);
		s->job_shape[j] = shape_index(s, cls, job->gpus, job->nodes);
	}
	rank_policy(s);
	mark_resuming(s);
	s->qt_taken = sched_grow(s->qt_taken, &s->qt_takencap, s->nqts, sizeof(int64_t));
	memset(s->qt_taken, 0, sizeof(int64_t) * (size_t)s->nqts);
	int64_t aging = snap->config.aging_ms;
	for (int j = 0; j < snap->npending; j++) {
		const struct sched_job *job = &snap->pending[j];
		const struct sched_qt *qt = &s->qts[s->job_qt[j]];
		int64_t prio = job->priority;
		if (aging > 0 && snap->now_ms > job->submit_ms) {
			int64_t aged = (snap->now_ms - job->submit_ms) / aging;
			prio += aged < ((int64_t)1 << 40) ? aged : (int64_t)1 << 40;
		}
		struct sched_item *it = &s->items[j];
		int level = sched_overdue(s, j);
		it->k1 = (uint64_t)!s->job_first[j] << 63;
		if (s->job_first[j]) { /* first held, first served: see mark_resuming() */
			if (job->held_since_ms > 0)
				it->k1 |= (uint64_t)job->held_since_ms & (((uint64_t)1 << 62) - 1);
		} else {
			if (level < 2)
				it->k1 |= (uint64_t)1 << 62 |
				          (uint64_t)(uint32_t)s->queues[qt->queue].rank << 32;
			if (level < 1)
				it->k1 |= (uint64_t)1 << 31 | (uint32_t)s->teams[qt->team].rank;
		}
		/* higher priority first: store it negated (it fits: |prio| < 2^62);
		 * overdue jobs go in submission order */
		it->prio = level ? 0 : -prio;
		it->submit = job->submit_ms;
		it->id = job->id;
		it->job = j;
	}
}

static int item_before(const struct sched_item *a, const struct sched_item *b)
{
	if (a->k1 != b->k1)
		return a->k1 < b->k1;
	if (a->prio != b->prio)
		return a->prio < b->prio;
	if (a->submit != b->submit)
		return a->submit < b->submit;
	if (a->id != b->id)
		return a->id < b->id;
	return a->job < b->job;
}

/* Merge sort of the sort records themselves (not indexes into them), so
 * that 100,000 jobs sort with sequential memory access. */
static void sort_items(struct sched *s, int n)
{
	struct sched_item *src = s->items, *dst = s->items_tmp;
	for (int w = 1; w < n; w *= 2) {
		for (int lo = 0; lo < n; lo += 2 * w) {
			int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			int i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				dst[k++] = item_before(&src[j], &src[i]) ? src[j++] : src[i++];
			while (i < mid)
				dst[k++] = src[i++];
			while (j < hi)
				dst[k++] = src[j++];
		}
		struct sched_item *t = src;
		src = dst;
		dst = t;
	}
	if (src != s->items)
		memcpy(s->items, src, sizeof(*src) * (size_t)n);
}

/* Records a placement of s->pick[0..nodes) with GPUs s->pick_gpus[], and
 * takes its GPUs out of the live view (those still in it: a backfill may
 * use GPUs a reservation had taken out already). A CPU-only job's ranks
 * hold no GPU: the view, and so s->gen, stay as they are. */
void sched_commit(struct sched *s, int job, int nodes, int borrowed)
{
	const struct sched_job *j = &s->snap->pending[job];
	int p = s->nplacements++;
	s->ranks = sched_grow(s->ranks, &s->rankcap, s->nranks + nodes, sizeof(*s->ranks));
	s->place_off[p] = s->nranks;
	for (int k = 0; k < nodes; k++) {
		int i = s->pick[k];
		uint64_t m = s->pick_gpus[k];
		assert(__builtin_popcountll(m) == j->gpus && (m & ~s->usable[i]) == 0);
		if (m)
			fit_set_free(s, i, s->free[i] & ~m);
		memset(&s->ranks[s->nranks], 0, sizeof(s->ranks[0]));
		s->ranks[s->nranks].node = i;
		s->ranks[s->nranks++].gpus = m;
	}
	memset(&s->placements[p], 0, sizeof(s->placements[p]));
	s->placements[p].job_id = j->id;
	s->placements[p].borrowed = borrowed;
	s->placements[p].nranks = nodes;
	s->place_end[p] = sched_end(s, sched_job_limit(s, job));
	s->place_job[p] = job;
	struct sched_qt *qt = &s->qts[s->job_qt[job]];
	qt->used += (int64_t)j->gpus * j->nodes;
	s->queues[qt->queue].used_sum += (int64_t)j->gpus * j->nodes;
	if (j->gpus)
		s->gen++;
}

/* Whether the job's team may take its GPUs in its queue now: within its
 * nominal quota, or by borrowing idle quota where the queue allows. */
int sched_quota_admits(struct sched *s, int job, int *borrowed, struct sched_wait *w)
{
	const struct sched_job *j = &s->snap->pending[job];
	const struct sched_qt *qt = &s->qts[s->job_qt[job]];
	const struct sched_queue_st *q = &s->queues[qt->queue];
	int64_t need = (int64_t)j->gpus * j->nodes;
	*borrowed = 0;
	if (!q->has_quota || qt->used + qt->held + need <= qt->nominal)
		return 1;
	if (q->borrowing && q->used_sum + q->borrow_hold + need <= q->nominal_sum) {
		*borrowed = 1;
		return 1;
	}
	w->reason = SCHED_WAIT_QUOTA;
	w->a = qt->used + qt->held;
	w->b = qt->nominal;
	w->idle_quota = -1;
	if (q->borrowing) {
		int64_t idle = q->nominal_sum - q->used_sum - q->borrow_hold;
		w->idle_quota = idle > 0 ? idle : 0;
	}
	return 0;
}

/* An overdue job that waits for idle quota to borrow keeps what there is
 * from later borrowers in its queue (teams within their nominal quota still
 * take theirs), so that a large borrower is not overtaken forever by small
 * ones. At most max_reservations such holds per cycle. */
static int hold_borrowing(struct sched *s, int job)
{
	const struct sched_job *j = &s->snap->pending[job];
	struct sched_queue_st *q = &s->queues[s->job_queue[job]];
	int64_t need = (int64_t)j->gpus * j->nodes;
	int most = s->snap->config.max_reservations > 1 ? s->snap->config.max_reservations : 1;
	if (!q->borrowing || q->borrow_hold + need > q->nominal_sum || !sched_overdue(s, job) ||
	    s->nborrow_holds >= most)
		return 0;
	q->borrow_hold += need;
	s->nborrow_holds++;
	return 1;
}

/* One job, in order: never fits -> UNFIT; over quota -> QUOTA; fits the
 * live view -> placed; else backfill on reserved GPUs, preemption, and a
 * reservation, in that order. A CPU-only job takes none of these steps
 * (cpu.c): it is placed where a node has room for it, or waits. */
static void decide(struct sched *s, int job)
{
	const struct sched_config *cfg = &s->snap->config;
	struct sched_shape *sh = &s->shapes[s->job_shape[job]];
	/* Filled in place, padding zeroed, so results compare byte for byte. */
	struct sched_wait *w = &s->waits[s->nwaits];
	memset(w, 0, sizeof(*w));
	s->wait_job[s->nwaits] = job;
	w->job_id = s->snap->pending[job].id;
	int borrowed = 0;
	if (sh->gpus == 0) {
		if (cpu_decide(s, job, sh, w))
			return;
		goto wait;
	}
	if (fit_unfit(s, sh)) {
		w->reason = SCHED_WAIT_UNFIT;
		w->a = sh->unfit_a;
		w->b = sh->nodes;
		w->most_free = sh->unfit_most;
		goto wait;
	}
	if (!sched_quota_admits(s, job, &borrowed, w)) {
		/* The nodes drain for it while its queue's quota does */
		if (hold_borrowing(s, job) && cfg->backfill &&
		    s->nresvs < (cfg->max_reservations > 1 ? cfg->max_reservations : 1)) {
			int slot = fit_slot(s, sh->cls);
			struct sched_wait tmp = *w;
			if (!fit_check(s, slot, sh->gpus, sh->nodes))
				plan_reserve(s, job, sh, slot, &tmp);
			w->est_start_ms = tmp.est_start_ms;
			w->reserved = tmp.reserved;
		}
		goto wait;
	}
	int slot = fit_slot(s, sh->cls);
	if (!sh->live_fail) {
		if (fit_find(s, slot, sh->gpus, sh->nodes)) {
			fit_choose(s, sh->gpus, sh->nodes);
			sched_commit(s, job, sh->nodes, borrowed);
			return;
		}
		sh->live_fail = 1;
		fit_wait(s, slot, sh->gpus, sh->nodes, &sh->wait);
	}
	w->reason = sh->wait.reason;
	w->a = sh->wait.a;
	w->b = sh->wait.b;
	w->most_free = sh->wait.most_free;
	if (s->nresvs && plan_backfill(s, job, sh, slot, borrowed, w))
		return;
	if (w->reason == SCHED_WAIT_RESERVED)
		goto wait;
	if (cfg->preemption && plan_preempt(s, job, sh, slot, borrowed, w))
		goto wait;
	if (cfg->backfill && s->nresvs < (cfg->max_reservations > 1 ? cfg->max_reservations : 1))
		plan_reserve(s, job, sh, slot, w);
wait:
	s->nwaits++;
}

int sched_cycle(struct sched *s, const struct sched_snapshot *snap, struct sched_result *out)
{
	if (!s || !out || !valid_snapshot(snap))
		return ERR_INVALID;
	reserve_space(s, snap);
	/* s->want is scratch that is all 0 between uses */
	int ok = valid_nodes(snap, s->want) && valid_running(snap, s->want);
	memset(s->want, 0, sizeof(*s->want) * (size_t)snap->nnodes);
	if (!ok)
		return ERR_INVALID;
	s->snap = snap;
	s->nplacements = s->nranks = s->npreemptions = s->nwaits = 0;
	if (snap->npending == 0) {
		/* Nothing to decide: the kept state is brought up to date next time. */
		*out = (struct sched_result){.placements = s->placements,
		                             .preemptions = s->preemptions,
		                             .waits = s->waits};
		s->snap = NULL;
		return 0;
	}
	s->nundo = s->logging = 0;
	s->run_order_done = 0;
	s->run_rel_n = -1;
	s->preempt_tries = 0;
	s->nborrow_holds = 0;
	s->cycle++;
	s->cpu_counted = 0;
	fit_nodes(s); /* clears last cycle's reservations first */
	s->nresvs = s->nresv_ranks = 0;
	build_policy(s);
	build_running(s);
	build_jobs(s);
	sort_items(s, snap->npending);
	for (int k = 0; k < snap->npending; k++)
		decide(s, s->items[k].job);
	if (!snap->config.skip_estimate)
		plan_estimate(s);
	/* A job that waits only for its victims' minimum runtime starts about
	 * when that ends, whatever the dry run or a reservation says. */
	for (int k = 0; k < s->nwaits; k++) {
		struct sched_wait *w = &s->waits[k];
		if (w->held == SCHED_HELD_YOUNG && w->held_until_ms > 0 &&
		    (w->est_start_ms <= 0 || w->held_until_ms < w->est_start_ms))
			w->est_start_ms = w->held_until_ms;
	}
	assert(fit_check_view(s));
	for (int p = 0; p < s->nplacements; p++)
		s->placements[p].ranks = s->ranks + s->place_off[p];
	*out = (struct sched_result){
	        .placements = s->placements,
	        .nplacements = s->nplacements,
	        .preemptions = s->preemptions,
	        .npreemptions = s->npreemptions,
	        .waits = s->waits,
	        .nwaits = s->nwaits,
	};
	s->snap = NULL; /* the snapshot is the caller's again */
	return 0;
}
