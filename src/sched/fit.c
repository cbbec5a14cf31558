/* fit.c - the live view of the cluster and placement on it.
 *
 * Per active constraint class (a slot) every matching node sits in the
 * bucket (a bitmap by topology position) of its free-GPU count, so best fit
 * for one node is the lowest node of the first non-empty bucket at or above
 * the ask: O(SCHED_MAX_GPUS + nodes / 4096), with no scan over nodes. Per domain the slot counts matching nodes with at least g
 * free GPUs, so the smallest domain that holds a gang is found by looking at
 * domains, not nodes. Both are updated in fit_set_free() as the cycle places,
 * and both outlive the cycle while the nodes' static fields do not change
 * (fit_nodes()): the next cycle only moves the nodes whose free mask moved.
 */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "sched/sched_int.h"

static int popc(uint64_t m)
{
	return __builtin_popcountll(m);
}

/* Lowest `count` set bits of mask (all of them if it has fewer). */
static uint64_t low_bits(uint64_t mask, int count)
{
	uint64_t out = 0;
	while (count-- > 0 && mask) {
		uint64_t low = mask & (~mask + 1);
		out |= low;
		mask &= ~low;
	}
	return out;
}

static int topo_cmp(const void *ctx, int x, int y)
{
	const struct sched_node *a = (const struct sched_node *)ctx + x;
	const struct sched_node *b = (const struct sched_node *)ctx + y;
	if (a->block != b->block)
		return a->block < b->block ? -1 : 1;
	if (a->rack != b->rack)
		return a->rack < b->rack ? -1 : 1;
	if (a->sw != b->sw)
		return a->sw < b->sw ? -1 : 1;
	if (a->id != b->id)
		return a->id < b->id ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Level L key of node n: equal keys are one domain at that level. */
static int same_domain(const struct sched_node *a, const struct sched_node *b, int level)
{
	if (a->block != b->block)
		return 0;
	if (level >= 2)
		return 1;
	if (a->rack != b->rack)
		return 0;
	return level >= 1 || a->sw == b->sw;
}

/* Numbers the domains of each level in topology order (see sched_int.h). */
static void build_domains(struct sched *s)
{
	const struct sched_node *nodes = s->snap->nodes;
	int n = s->snap->nnodes, nl[SCHED_LEVELS] = {0, 0, 0};
	for (int p = 0; p < n; p++) {
		int i = s->order[p];
		for (int L = 0; L < SCHED_LEVELS; L++) {
			if (p > 0 && same_domain(&nodes[s->order[p - 1]], &nodes[i], L))
				s->ndom[i * 3 + L] = s->ndom[s->order[p - 1] * 3 + L];
			else
				s->ndom[i * 3 + L] = nl[L]++;
		}
	}
	s->ndoms = nl[0] + nl[1] + nl[2];
	s->lvl_lo[0] = 0;
	for (int L = 0; L < SCHED_LEVELS; L++) {
		if (L > 0)
			s->lvl_lo[L] = s->lvl_hi[L - 1];
		s->lvl_hi[L] = s->lvl_lo[L] + nl[L];
	}
	s->dom_lo = sched_grow(s->dom_lo, &s->domcap, s->ndoms, sizeof(int));
	s->dom_hi = xrealloc(s->dom_hi, sizeof(int) * (size_t)s->domcap);
	s->dom_clo = xrealloc(s->dom_clo, sizeof(int) * (size_t)s->domcap);
	s->dom_chi = xrealloc(s->dom_chi, sizeof(int) * (size_t)s->domcap);
	s->cand = sched_grow(s->cand, &s->candcap, s->ndoms + 1, sizeof(int));
	for (int p = 0; p < n; p++) {
		int i = s->order[p];
		for (int L = 0; L < SCHED_LEVELS; L++) {
			int d = s->ndom[i * 3 + L] += s->lvl_lo[L];
			if (p == 0 || s->ndom[s->order[p - 1] * 3 + L] != d) {
				s->dom_lo[d] = p;
				s->dom_clo[d] = s->dom_chi[d] = 0;
			}
			s->dom_hi[d] = p + 1;
			if (L > 0) {
				int child = s->ndom[i * 3 + L - 1];
				if (s->dom_chi[d] == 0)
					s->dom_clo[d] = child;
				s->dom_chi[d] = child + 1;
			}
		}
	}
}

/* Whether node nd (with usable GPUs u) still has key k. Field by field: a
 * 10,000-node cluster is compared every cycle. */
static int key_same(const struct sched_nodekey *k, const struct sched_node *nd, uint64_t u)
{
	if (k->id != nd->id || k->usable != u || k->all != nd->gpus_all || k->block != nd->block ||
	    k->rack != nd->rack || k->sw != nd->sw || k->pool != nd->pool ||
	    k->model != nd->gpu_model || k->mem != nd->gpu_mem_mib || k->nlabels != nd->nlabels)
		return 0;
	for (int l = 0; l < nd->nlabels; l++)
		if (k->labels[l] != nd->labels[l])
			return 0;
	return 1;
}

static void key_set(struct sched_nodekey *k, const struct sched_node *nd, uint64_t u)
{
	memset(k, 0, sizeof(*k));
	k->id = nd->id;
	k->block = nd->block;
	k->rack = nd->rack;
	k->sw = nd->sw;
	k->pool = nd->pool;
	k->model = nd->gpu_model;
	k->mem = nd->gpu_mem_mib;
	k->usable = u;
	k->all = nd->gpus_all;
	k->nlabels = nd->nlabels;
	memcpy(k->labels, nd->labels, sizeof(k->labels[0]) * (size_t)nd->nlabels);
}

/* Whether the nodes' static fields are those the kept state was built for;
 * records them (and usable GPUs) either way. */
static int same_nodes(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	int n = snap->nnodes, same = s->keys && s->nkeys == n;
	if (!s->keys || s->nkeys < n) {
		free(s->keys);
		s->keys = xmalloc(sizeof(*s->keys) * (size_t)(n + 1));
	}
	for (int i = 0; i < n; i++) {
		const struct sched_node *nd = &snap->nodes[i];
		uint64_t u = nd->schedulable ? nd->gpus_all & nd->gpus_healthy : 0;
		s->usable[i] = u;
		if (same && key_same(&s->keys[i], nd, u))
			continue;
		same = 0;
		key_set(&s->keys[i], nd, u);
	}
	s->nkeys = n;
	return same;
}

/* Builds what depends on the nodes' static fields: the topology order, the
 * domains, the most GPUs on a node; drops all slots (and the classes, see
 * build_jobs()). */
static void rebuild_nodes(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	int n = snap->nnodes;
	s->gmax = 0;
	for (int i = 0; i < n; i++) {
		s->slotmask[i] = 0;
		s->nfree[i] = 0;
		s->free[i] = 0;
		if (popc(snap->nodes[i].gpus_all) > s->gmax)
			s->gmax = popc(snap->nodes[i].gpus_all);
	}
	/* A cluster's topology rarely changes between cycles: keep the last
	 * order when it still sorts (O(n)) instead of sorting again. */
	int sorted = n == s->order_n;
	for (int p = 0; p < n && sorted; p++)
		sorted = s->order[p] < n &&
		         (p == 0 || topo_cmp(snap->nodes, s->order[p - 1], s->order[p]) < 0);
	if (!sorted) {
		for (int i = 0; i < n; i++)
			s->order[i] = i;
		sched_msort(s->order, s->tmp_int, n, topo_cmp, snap->nodes);
		s->order_n = n;
	}
	for (int p = 0; p < n; p++)
		s->pos[s->order[p]] = p;
	build_domains(s);
	for (int k = 0; k < SCHED_SLOTS; k++)
		s->slots[k].cls = -1;
}

/* Brings the live view up to date with the snapshot: usable and free GPUs
 * less every running attempt's holds. While the nodes' static fields are
 * unchanged (s->kept), the topology order, domains, classes and slots of
 * the last cycle are kept, and only nodes whose free mask differs from the
 * last cycle's final view move in the slots; else all is rebuilt. The
 * result is the same either way: nothing kept depends on history (slot
 * buckets are ordered by topology position, not by arrival). */
void fit_nodes(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	int n = snap->nnodes;
	/* last cycle's reservations leave the view */
	for (int k = 0; k < s->nresv_ranks; k++)
		s->resv[s->resv_ranks[k].node] = 0;
	s->kept = same_nodes(s);
	if (!s->kept) {
		memset(s->resv, 0, sizeof(*s->resv) * (size_t)n);
		rebuild_nodes(s);
	}
	uint64_t *want = s->want; /* scratch, all 0: the new free masks */
	for (int i = 0; i < n; i++)
		want[i] = snap->nodes[i].gpus_free & s->usable[i];
	for (int r = 0; r < snap->nrunning; r++)
		for (int k = 0; k < snap->running[r].nranks; k++) {
			const struct sched_rank_hold *h = &snap->running[r].ranks[k];
			want[h->node] &= ~h->gpus;
		}
	for (int i = 0; i < n; i++) {
		if (want[i] != s->free[i])
			fit_set_free(s, i, want[i]);
		want[i] = 0;
	}
}

int fit_class_matches(const struct sched_class *c, const struct sched_node *n)
{
	if (c->model && c->model != n->gpu_model)
		return 0;
	if (n->gpu_mem_mib < c->mem)
		return 0;
	if (c->pool && c->pool != n->pool)
		return 0;
	for (int k = 0; k < c->nsel; k++) {
		int found = 0;
		for (int l = 0; l < n->nlabels && l < SCHED_MAX_LABELS && !found; l++)
			found = n->labels[l] == c->sel[k];
		if (!found)
			return 0;
	}
	return 1;
}

static int *dom_count(const struct sched *s, const struct sched_slot *sl, int d)
{
	return sl->dom + (size_t)d * (size_t)(s->gmax + 1);
}

static uint64_t *bucket(const struct sched_slot *sl, int g)
{
	return sl->bits + (size_t)g * (size_t)sl->stride;
}

static void bucket_add(struct sched_slot *sl, int g, int pos)
{
	uint64_t *b = bucket(sl, g);
	int w = pos >> 6;
	b[w] |= 1ull << (pos & 63);
	b[sl->nw + (w >> 6)] |= 1ull << (w & 63);
}

static void bucket_del(struct sched_slot *sl, int g, int pos)
{
	uint64_t *b = bucket(sl, g);
	int w = pos >> 6;
	b[w] &= ~(1ull << (pos & 63));
	if (!b[w])
		b[sl->nw + (w >> 6)] &= ~(1ull << (w & 63));
}

/* The lowest topology position in bucket g, or -1 if it is empty. */
static int bucket_first(const struct sched_slot *sl, int g)
{
	const uint64_t *b = bucket(sl, g);
	for (int k = sl->nw; k < sl->stride; k++)
		if (b[k]) {
			int w = (k - sl->nw) * 64 + __builtin_ctzll(b[k]);
			return w * 64 + __builtin_ctzll(b[w]);
		}
	return -1;
}

/* Moves node i of slot sl from free count `from` to `to`. */
static void slot_move(struct sched *s, struct sched_slot *sl, int i, int from, int to)
{
	if (from >= 0) {
		bucket_del(sl, from, s->pos[i]);
		sl->count[from]--;
	}
	bucket_add(sl, to, s->pos[i]);
	sl->count[to]++;
	int lo = from < to ? from : to, hi = from < to ? to : from, delta = from < to ? 1 : -1;
	if (lo < 0)
		lo = 0;
	for (int L = 0; L < SCHED_LEVELS; L++) {
		int *c = dom_count(s, sl, s->ndom[i * 3 + L]);
		for (int g = lo + 1; g <= hi; g++)
			c[g] += delta;
	}
	for (int g = lo + 1; g <= hi; g++)
		sl->tot[g] += delta;
}

static void slot_build(struct sched *s, int k, int cls)
{
	struct sched_slot *sl = &s->slots[k];
	int n = s->snap->nnodes;
	size_t domn = (size_t)s->ndoms * (size_t)(s->gmax + 1);
	sl->nw = (n + 63) / 64;
	sl->stride = sl->nw + (sl->nw + 63) / 64;
	int nbits = sl->stride * (s->gmax + 1);
	sl->bits = sched_grow(sl->bits, &sl->bitcap, nbits, sizeof(uint64_t));
	memset(sl->bits, 0, sizeof(uint64_t) * (size_t)nbits);
	sl->dom = sched_grow(sl->dom, &sl->domcap, (int)domn, sizeof(int));
	memset(sl->dom, 0, sizeof(int) * domn);
	memset(sl->tot, 0, sizeof(sl->tot));
	memset(sl->count, 0, sizeof(sl->count));
	sl->cls = cls;
	s->classes[cls].slot = k;
	const struct sched_class *c = &s->classes[cls];
	int stride = s->gmax + 1;
	for (int p = 0; p < n; p++) {
		int i = s->order[p], f = s->nfree[i];
		if (!s->usable[i] || !fit_class_matches(c, &s->snap->nodes[i]))
			continue;
		s->slotmask[i] |= 1ull << k;
		bucket_add(sl, f, p);
		sl->count[f]++;
		for (int L = 0; L < SCHED_LEVELS; L++)
			sl->dom[(size_t)s->ndom[i * 3 + L] * (size_t)stride + (size_t)f]++;
	}
	/* histograms of free counts into "at least g free": suffix sums */
	for (int d = 0; d < s->ndoms; d++) {
		int *cnt = sl->dom + (size_t)d * (size_t)stride;
		for (int g = s->gmax - 1; g >= 0; g--)
			cnt[g] += cnt[g + 1];
	}
	sl->tot[s->gmax] = sl->count[s->gmax];
	for (int g = s->gmax - 1; g >= 0; g--)
		sl->tot[g] = sl->tot[g + 1] + sl->count[g];
}

/* The slot indexing class cls, built now if it has none; the least
 * recently used slot is replaced when all are taken. */
int fit_slot(struct sched *s, int cls)
{
	int k = s->classes[cls].slot;
	if (k < 0) {
		int best = 0;
		for (int j = 0; j < SCHED_SLOTS; j++) {
			if (s->slots[j].cls < 0) {
				best = j;
				break;
			}
			if (s->slots[j].tick < s->slots[best].tick)
				best = j;
		}
		k = best;
		if (s->slots[k].cls >= 0) {
			s->classes[s->slots[k].cls].slot = -1;
			for (int i = 0; i < s->snap->nnodes; i++)
				s->slotmask[i] &= ~(1ull << k);
		}
		slot_build(s, k, cls);
		s->slot_live |= 1ull << k; /* built from the view as it is: in step from now */
	}
	s->slots[k].tick = ++s->tick;
	return k;
}

static void set_free(struct sched *s, int i, uint64_t mask)
{
	int from = s->nfree[i], to = popc(mask);
	s->free[i] = mask;
	if (from == to)
		return;
	s->nfree[i] = (uint8_t)to;
	for (uint64_t m = s->slotmask[i] & s->slot_live; m; m &= m - 1)
		slot_move(s, &s->slots[__builtin_ctzll(m)], i, from, to);
}

/* The only writer of the live view after fit_nodes(). */
void fit_set_free(struct sched *s, int i, uint64_t mask)
{
	if (s->logging) {
		s->undo = sched_grow(s->undo, &s->undocap, s->nundo + 1, sizeof(*s->undo));
		s->undo[s->nundo].node = i;
		s->undo[s->nundo++].mask = s->free[i];
	}
	set_free(s, i, mask);
}

int fit_mark(struct sched *s)
{
	s->logging++;
	return s->nundo;
}

void fit_rollback(struct sched *s, int mark)
{
	while (s->nundo > mark) {
		s->nundo--;
		set_free(s, s->undo[s->nundo].node, s->undo[s->nundo].mask);
	}
	s->logging--;
}

/* Whether some assignment exists in the live view: O(1) for one node,
 * O(blocks) for a gang. */
int fit_check(const struct sched *s, int slot, int gpus, int nodes)
{
	const struct sched_slot *sl = &s->slots[slot];
	if (gpus > s->gmax || sl->tot[gpus] < nodes)
		return 0;
	if (nodes == 1)
		return 1;
	for (int d = s->lvl_lo[2]; d < s->lvl_hi[2]; d++)
		if (dom_count(s, sl, d)[gpus] >= nodes)
			return 1;
	return 0;
}

static int fits_node(const struct sched *s, int slot, int i, int gpus)
{
	return (s->slotmask[i] >> slot & 1) && s->nfree[i] >= gpus;
}

/* Appends every fitting node of domain d to s->pick, in topology order. */
static void take_all(struct sched *s, int slot, int d, int gpus, int *k)
{
	for (int p = s->dom_lo[d]; p < s->dom_hi[d]; p++) {
		int i = s->order[p];
		if (fits_node(s, slot, i, gpus))
			s->pick[(*k)++] = i;
	}
}

/* Appends the `need` best-fit nodes of switch d (fewest GPUs left over),
 * in topology order: a histogram of free counts gives the threshold, so
 * two passes over the switch and no sort. */
static void take_best(struct sched *s, int slot, int d, int gpus, int need, int *k)
{
	int hist[SCHED_MAX_GPUS + 1] = {0};
	for (int p = s->dom_lo[d]; p < s->dom_hi[d]; p++) {
		int i = s->order[p];
		if (fits_node(s, slot, i, gpus))
			hist[s->nfree[i]]++;
	}
	int thr = gpus, below = 0;
	while (below + hist[thr] < need)
		below += hist[thr++];
	int at_thr = need - below;
	for (int p = s->dom_lo[d]; p < s->dom_hi[d]; p++) {
		int i = s->order[p];
		if (!fits_node(s, slot, i, gpus) || s->nfree[i] > thr)
			continue;
		if (s->nfree[i] == thr && at_thr-- <= 0)
			continue;
		s->pick[(*k)++] = i;
	}
}

struct kids_ctx {
	const int *cnt; /* the slot's domain counts at the asked GPU count */
	size_t stride;
};

static int kids_cmp(const void *ctx, int x, int y)
{
	const struct kids_ctx *kc = ctx;
	int cx = kc->cnt[(size_t)x * kc->stride], cy = kc->cnt[(size_t)y * kc->stride];
	if (cx != cy)
		return cx > cy ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Appends `need` nodes of domain d (level L), which holds at least that
 * many fitting nodes: into the best-fitting child that holds them all, or
 * else whole children, largest first, and the rest into the child that
 * fits the remainder best. Ranks come out grouped by child, so neighbours
 * share the closest domain. */
static void place_in(struct sched *s, int slot, int d, int L, int gpus, int need, int *k)
{
	const struct sched_slot *sl = &s->slots[slot];
	if (L == 0) {
		take_best(s, slot, d, gpus, need, k);
		return;
	}
	int lo = s->dom_clo[d], hi = s->dom_chi[d], best = -1;
	for (int c = lo; c < hi; c++) {
		int cnt = dom_count(s, sl, c)[gpus];
		if (cnt >= need && (best < 0 || cnt < dom_count(s, sl, best)[gpus]))
			best = c;
	}
	if (best >= 0) {
		place_in(s, slot, best, L - 1, gpus, need, k);
		return;
	}
	/* Children of d are the domain numbers [lo, hi): sorting them in
	 * s->cand[lo..hi) cannot clash with a deeper call, whose children
	 * are other domain numbers. */
	int *kids = s->cand + lo;
	for (int c = lo; c < hi; c++)
		kids[c - lo] = c;
	struct kids_ctx kc = {sl->dom + gpus, (size_t)(s->gmax + 1)};
	sched_msort(kids, s->tmp_int, hi - lo, kids_cmp, &kc);
	int j = 0;
	while (need > 0 && j < hi - lo && dom_count(s, sl, kids[j])[gpus] <= need) {
		take_all(s, slot, kids[j], gpus, k);
		need -= dom_count(s, sl, kids[j++])[gpus];
	}
	if (need == 0 || j == hi - lo)
		return;
	best = kids[j];
	for (int m = j + 1; m < hi - lo; m++) {
		int cnt = dom_count(s, sl, kids[m])[gpus];
		if (cnt >= need && cnt < dom_count(s, sl, best)[gpus])
			best = kids[m];
	}
	place_in(s, slot, best, L - 1, gpus, need, k);
}

/* Chooses nodes for `nodes` ranks of `gpus` GPUs in the live view into
 * s->pick[0..nodes), in rank order. 1 if found, 0 if no assignment exists.
 * Changes nothing: the caller applies it with fit_set_free(). */
int fit_find(struct sched *s, int slot, int gpus, int nodes)
{
	const struct sched_slot *sl = &s->slots[slot];
	if (!fit_check(s, slot, gpus, nodes))
		return 0;
	if (nodes == 1) {
		for (int c = gpus; c <= s->gmax; c++)
			if (sl->count[c] > 0) {
				s->pick[0] = s->order[bucket_first(sl, c)];
				return 1;
			}
		return 0;
	}
	for (int L = 0; L < SCHED_LEVELS; L++) {
		int best = -1, bestc = 0;
		for (int d = s->lvl_lo[L]; d < s->lvl_hi[L]; d++) {
			int c = dom_count(s, sl, d)[gpus];
			if (c >= nodes && (best < 0 || c < bestc)) {
				best = d;
				bestc = c;
			}
		}
		if (best >= 0) {
			int k = 0;
			place_in(s, slot, best, L, gpus, nodes, &k);
			return k == nodes;
		}
	}
	return 0;
}

/* need GPUs of avail from the group that holds them with the least left
 * over; if none can, whole groups largest first and the rest from the
 * group that fits it best; GPUs in no group last. With subs, the GPUs
 * taken from a group are chosen the same way among the finer groups. */
static uint64_t pick_groups(uint64_t avail, int need, const uint64_t *groups, int ngroups,
                            const uint64_t *subs, int nsubs)
{
	uint64_t out = 0, rest = avail;
	while (need > 0) {
		int best = -1, bestc = 0, most = -1, mostc = 0;
		for (int k = 0; k < ngroups; k++) {
			int c = popc(rest & groups[k]);
			if (c >= need && (best < 0 || c < bestc)) {
				best = k;
				bestc = c;
			}
			if (c > mostc) {
				most = k;
				mostc = c;
			}
		}
		int g = best >= 0 ? best : most;
		if (g < 0)
			break;
		uint64_t in = rest & groups[g];
		int n = popc(in) < need ? popc(in) : need;
		uint64_t take = nsubs ? pick_groups(in, n, subs, nsubs, NULL, 0) : low_bits(in, n);
		out |= take;
		rest &= ~take;
		need -= popc(take);
	}
	return out | low_bits(rest, need);
}

/* GPUs for one rank on node n: NVLink groups first, PCIe-switch groups
 * within them (pick_groups). */
uint64_t fit_gpus(const struct sched_node *n, uint64_t freemask, int gpus)
{
	int ngroups = n->nnvlink < SCHED_MAX_NVLINK ? n->nnvlink : SCHED_MAX_NVLINK;
	int nnear = n->nnear < SCHED_MAX_NEAR ? n->nnear : SCHED_MAX_NEAR;
	if (ngroups == 0 && nnear > 0) /* no NVLink: the switch groups are the groups */
		return pick_groups(freemask, gpus, n->near, nnear, NULL, 0);
	return pick_groups(freemask, gpus, n->nvlink, ngroups, n->near, nnear);
}

/* GPUs on each picked node, chosen in the current view. */
void fit_choose(struct sched *s, int gpus, int nodes)
{
	for (int k = 0; k < nodes; k++) {
		int i = s->pick[k];
		s->pick_gpus[k] = fit_gpus(&s->snap->nodes[i], s->free[i], gpus);
	}
}

/* Numbers for a job that has no assignment in the live view. */
void fit_wait(const struct sched *s, int slot, int gpus, int nodes, struct sched_wait *w)
{
	const struct sched_slot *sl = &s->slots[slot];
	int tot = gpus <= s->gmax ? sl->tot[gpus] : 0;
	w->most_free = 0;
	for (int c = s->gmax; c > 0; c--)
		if (sl->count[c]) {
			w->most_free = c;
			break;
		}
	w->b = nodes;
	if (tot < nodes) {
		w->reason = SCHED_WAIT_RESOURCES;
		w->a = tot;
		return;
	}
	w->reason = SCHED_WAIT_TOPOLOGY;
	w->a = 0;
	for (int d = s->lvl_lo[2]; d < s->lvl_hi[2]; d++)
		if (dom_count(s, sl, d)[gpus] > w->a)
			w->a = dom_count(s, sl, d)[gpus];
}

/* 1 if no block has enough matching nodes with enough usable GPUs even if
 * nothing ran; sh->unfit_a is the most such nodes in one block. What is
 * learnt is kept in the class while the nodes do not change. */
int fit_unfit(struct sched *s, struct sched_shape *sh)
{
	if (sh->unfit >= 0)
		return sh->unfit;
	struct sched_class *c = &s->classes[sh->cls];
	int g = sh->gpus <= s->gmax ? sh->gpus : s->gmax + 1;
	if (g > s->gmax || c->unfit_best[g] < 0 || c->unfit_most < 0) {
		int slot = fit_slot(s, sh->cls), nb = s->lvl_hi[2] - s->lvl_lo[2], best = 0,
		    most = 0;
		int *per_block = s->cand;
		c = &s->classes[sh->cls];
		memset(per_block, 0, sizeof(int) * (size_t)nb);
		for (int i = 0; i < s->snap->nnodes; i++) {
			if (!(s->slotmask[i] >> slot & 1))
				continue;
			int u = popc(s->usable[i]);
			most = u > most ? u : most;
			if (u < sh->gpus)
				continue;
			int b = s->ndom[i * 3 + 2] - s->lvl_lo[2];
			if (++per_block[b] > best)
				best = per_block[b];
		}
		c->unfit_most = most;
		if (g <= s->gmax)
			c->unfit_best[g] = best;
		else
			best = 0;
		sh->unfit_a = best;
	} else {
		sh->unfit_a = c->unfit_best[g];
	}
	sh->unfit_most = c->unfit_most;
	sh->unfit = sh->unfit_a < sh->nodes;
	return sh->unfit;
}

void fit_slots_cleanup(struct sched *s)
{
	for (int k = 0; k < SCHED_SLOTS; k++) {
		free(s->slots[k].bits);
		free(s->slots[k].dom);
	}
}

/* The live view's invariants: counts match masks, free GPUs are usable and
 * not reserved, and every slot's buckets and domain counts match the nodes.
 * For assert(): O(nodes x slots x levels x GPUs). */
int fit_check_view(const struct sched *s)
{
	if (s->logging || s->nundo)
		return 0;
	for (int i = 0; i < s->snap->nnodes; i++)
		if (s->nfree[i] != popc(s->free[i]) || (s->free[i] & ~s->usable[i]) ||
		    (s->free[i] & s->resv[i]) || s->want[i])
			return 0;
	for (int k = 0; k < SCHED_SLOTS; k++) {
		const struct sched_slot *sl = &s->slots[k];
		if (sl->cls < 0)
			continue;
		for (int c = 0; c <= s->gmax; c++) {
			int seen = 0;
			const uint64_t *b = bucket(sl, c);
			for (int p = 0; p < s->snap->nnodes; p++) {
				int in = b[p >> 6] >> (p & 63) & 1, i = s->order[p];
				if (in != ((s->slotmask[i] >> k & 1) && s->nfree[i] == c))
					return 0;
				seen += in;
			}
			for (int w = 0; w < sl->nw; w++)
				if (!b[w] != !(b[sl->nw + (w >> 6)] >> (w & 63) & 1))
					return 0;
			if (seen != sl->count[c])
				return 0;
		}
		for (int g = 1; g <= s->gmax; g++) {
			int tot = 0;
			for (int i = 0; i < s->snap->nnodes; i++)
				tot += (s->slotmask[i] >> k & 1) && s->nfree[i] >= g;
			if (tot != sl->tot[g])
				return 0;
		}
	}
	return 1;
}
