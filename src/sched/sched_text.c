/* sched_text.c - the scheduler's words: why a job waits, why a job can
 * never run, and the usage decay that fair share reads. Pure functions. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/err.h"
#include "base/mem.h"
#include "sched/sched.h"

/* Appends to out at *used, never past len, always terminated. */
__attribute__((format(printf, 4, 5))) static void add(char *out, size_t len, size_t *used,
                                                      const char *fmt, ...)
{
	if (*used >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out + *used, len - *used, fmt, ap);
	va_end(ap);
	if (n > 0)
		*used = *used + (size_t)n < len ? *used + (size_t)n : len - 1;
}

static const char *s_(long long n)
{
	return n == 1 ? "" : "s";
}

/* "2026-12-01 20:46:00 UTC" */
static void utc(int64_t ms, char *out, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	snprintf(out, len, "?");
	if (gmtime_r(&t, &tm))
		strftime(out, len, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

struct names {
	sched_name_fn fn;
	void *ctx;
};

/* Whose the blockers' GPUs are: "lower priority", "borrowed by team a". */
static void add_kind(const struct sched_wait *w, const struct names *nm, char *out, size_t len,
                     size_t *used)
{
	const char *team = w->blocker_team && nm->fn ? nm->fn(nm->ctx, w->blocker_team) : NULL;
	if (w->blocker_kind & SCHED_BLOCK_PRIORITY)
		add(out, len, used, "lower priority%s",
		    w->blocker_kind & SCHED_BLOCK_BORROWED ? " or borrowed" : "");
	else if (w->blocker_kind & SCHED_BLOCK_BORROWED && team)
		add(out, len, used, "borrowed by team %s", team);
	else if (w->blocker_kind & SCHED_BLOCK_BORROWED && w->blocker_team)
		add(out, len, used, "borrowed by team #%u", (unsigned)w->blocker_team);
	else if (w->blocker_kind & SCHED_BLOCK_BORROWED)
		add(out, len, used, "borrowed by other teams");
	else
		add(out, len, used, "stopping");
}

/* "job 1 (lower priority)" or "3 jobs (lower priority; job 1 first)" */
static void add_whose(const struct sched_wait *w, const struct names *nm, char *out, size_t len,
                      size_t *used)
{
	if (w->blockers == 1)
		add(out, len, used, "job %lld (", (long long)w->blocker_job);
	else
		add(out, len, used, "%lld jobs (", (long long)w->blockers);
	add_kind(w, nm, out, len, used);
	if (w->blockers != 1)
		add(out, len, used, "; job %lld first", (long long)w->blocker_job);
	add(out, len, used, ")");
}

/* What holds the GPUs a waiting job needs, and when or whether it may be
 * stopped for it. */
static void add_blockers(const struct sched_wait *w, const struct sched_job *job,
                         const struct names *nm, char *out, size_t len, size_t *used)
{
	char when[40];
	if (w->blockers > 0) {
		add(out, len, used, "; ");
		add_whose(w, nm, out, len, used);
		add(out, len, used, " hold%s %lld GPU%s it could use", w->blockers == 1 ? "s" : "",
		    (long long)w->blocker_gpus, s_(w->blocker_gpus));
	}
	if (w->held == SCHED_HELD_YOUNG) {
		utc(w->held_until_ms, when, sizeof(when));
		if (w->blockers == 1)
			add(out, len, used,
			    ", and may be preempted at %s, when its minimum runtime ends", when);
		else
			add(out, len, used,
			    "; they may be preempted at %s, when their minimum runtime ends", when);
	} else if (w->held == SCHED_HELD_LOSS) {
		long long ask = job ? (long long)job->gpus * job->nodes : 0;
		add(out, len, used,
		    "; not preempted: that would stop %lld GPUs of work for the %lld it asks for, "
		    "more than the loss limit allows until it has waited longer",
		    (long long)w->held_gpus, ask);
	}
	if (w->reserved && w->est_start_ms > 0) { /* an estimate moves every cycle: not in words */
		utc(w->est_start_ms, when, sizeof(when));
		add(out, len, used, "; expected to start by %s", when);
	}
}

static void preempting_text(const struct sched_wait *w, const struct names *nm, char *out,
                            size_t len, size_t *used)
{
	if (w->blockers == 0) {
		add(out, len, used, "stopping %lld running attempt%s to make room", (long long)w->a,
		    s_(w->a));
		return;
	}
	add(out, len, used, "stopping ");
	add_whose(w, nm, out, len, used);
	if (w->blocker_kind == SCHED_BLOCK_BORROWED)
		add(out, len, used, " to reclaim its team's quota");
	else
		add(out, len, used, " to make room");
}

static void resources_text(const struct sched_wait *w, const struct sched_job *job,
                           const struct names *nm, char *out, size_t len, size_t *used)
{
	int gpus = job ? job->gpus : 0;
	if (w->b <= 1)
		add(out, len, used,
		    "needs %d GPU%s on one node; the most free on a matching node is %lld", gpus,
		    s_(gpus), (long long)w->most_free);
	else
		add(out, len, used,
		    "needs %lld nodes × %d GPU%s; %lld matching node%s %s %d free now",
		    (long long)w->b, gpus, s_(gpus), (long long)w->a, s_(w->a),
		    w->a == 1 ? "has" : "have", gpus);
	add_blockers(w, job, nm, out, len, used);
}

static void quota_text(const struct sched_wait *w, const struct sched_job *job, char *out,
                       size_t len, size_t *used)
{
	long long ask = job ? (long long)job->gpus * job->nodes : 0;
	if (w->b == 0)
		add(out, len, used, "team has no quota in this queue (%lld GPUs in use)",
		    (long long)w->a);
	else
		add(out, len, used, "team quota %lld/%lld GPUs used in queue", (long long)w->a,
		    (long long)w->b);
	if (ask)
		add(out, len, used, "; it asks for %lld", ask);
	if (w->idle_quota < 0)
		add(out, len, used, "; borrowing disabled for this queue");
	else
		add(out, len, used, "; only %lld idle GPU%s to borrow in the queue",
		    (long long)w->idle_quota, s_(w->idle_quota));
}

/* An interned id in words: its name, else "#ID". */
static void add_name(const struct names *nm, uint32_t id, char *out, size_t len, size_t *used)
{
	const char *name = nm->fn ? nm->fn(nm->ctx, id) : NULL;
	if (name)
		add(out, len, used, "%s", name);
	else
		add(out, len, used, "#%u", (unsigned)id);
}

/* Where a CPU-only job may run: " in pool cpu", " that carry disk=nvme, zone=a". */
static void add_where(const struct sched_job *job, const struct names *nm, int plural, char *out,
                      size_t len, size_t *used)
{
	if (job && job->pool) {
		add(out, len, used, " in pool ");
		add_name(nm, job->pool, out, len, used);
	}
	if (!job || job->nselectors <= 0)
		return;
	add(out, len, used, " that carr%s ", plural ? "y" : "ies");
	for (int k = 0; k < job->nselectors && k < SCHED_MAX_SELECTORS; k++) {
		add(out, len, used, "%s", k ? ", " : "");
		add_name(nm, job->selectors[k], out, len, used);
	}
}

/* A CPU-only job that too few schedulable nodes could take at all. */
static void cpu_unfit_text(const struct sched_wait *w, const struct sched_job *job,
                           const struct names *nm, char *out, size_t len, size_t *used)
{
	if (w->a == 0) {
		add(out, len, used, "no schedulable node");
		add_where(job, nm, 0, out, len, used);
		return;
	}
	add(out, len, used, "needs %lld nodes for its CPU-only ranks; only %lld schedulable node%s",
	    (long long)w->b, (long long)w->a, s_(w->a));
	add_where(job, nm, w->a != 1, out, len, used);
}

/* A CPU-only job that finds too few eligible nodes with room. */
static void cpu_limit_text(const struct sched_wait *w, const struct sched_job *job,
                           const struct names *nm, char *out, size_t len, size_t *used)
{
	long long limit = (long long)w->cpu_limit;
	if (w->b <= 1) {
		if (limit > 0)
			add(out, len, used,
			    "every eligible node runs its limit of %lld CPU-only rank%s", limit,
			    s_(limit));
		else
			add(out, len, used, "every eligible node runs its limit of CPU-only ranks");
		add(out, len, used, " (%lld node%s", (long long)w->cpu_nodes, s_(w->cpu_nodes));
		add_where(job, nm, w->cpu_nodes != 1, out, len, used);
		add(out, len, used, ")");
		return;
	}
	add(out, len, used, "needs %lld nodes for its CPU-only ranks; %lld of %lld eligible node%s",
	    (long long)w->b, (long long)w->a, (long long)w->cpu_nodes, s_(w->cpu_nodes));
	add_where(job, nm, w->cpu_nodes != 1, out, len, used);
	add(out, len, used, " %s room, the others run their limit", w->a == 1 ? "has" : "have");
	if (limit > 0)
		add(out, len, used, " of %lld CPU-only rank%s", limit, s_(limit));
	else
		add(out, len, used, "s of CPU-only ranks");
}

void sched_wait_text(const struct sched_wait *w, const struct sched_job *job, sched_name_fn name,
                     void *ctx, char *out, size_t outlen)
{
	size_t used = 0;
	const struct names nm = {name, ctx};
	int gpus = job ? job->gpus : 0;
	if (!out || outlen == 0)
		return;
	out[0] = '\0';
	switch (w->reason) {
	case SCHED_WAIT_NONE: add(out, outlen, &used, "placed"); break;
	case SCHED_WAIT_RESOURCES: resources_text(w, job, &nm, out, outlen, &used); break;
	case SCHED_WAIT_TOPOLOGY:
		add(out, outlen, &used,
		    "needs %lld nodes × %d GPU%s in one block; the largest free block has %lld "
		    "node%s",
		    (long long)w->b, gpus, s_(gpus), (long long)w->a, s_(w->a));
		add_blockers(w, job, &nm, out, outlen, &used);
		break;
	case SCHED_WAIT_QUOTA: quota_text(w, job, out, outlen, &used); break;
	case SCHED_WAIT_RESERVED:
		add(out, outlen, &used,
		    "would delay job %lld, which has GPUs reserved; this job's time limit runs "
		    "past "
		    "the reservation",
		    (long long)w->a);
		break;
	case SCHED_WAIT_PREEMPTING: preempting_text(w, &nm, out, outlen, &used); break;
	case SCHED_WAIT_CPU_LIMIT: cpu_limit_text(w, job, &nm, out, outlen, &used); break;
	case SCHED_WAIT_UNFIT:
		if (job && job->gpus == 0)
			cpu_unfit_text(w, job, &nm, out, outlen, &used);
		else if (w->b <= 1)
			add(out, outlen, &used,
			    "no schedulable node matching its constraints has %d "
			    "usable GPU%s (the most is %lld)",
			    gpus, s_(gpus), (long long)w->most_free);
		else
			add(out, outlen, &used,
			    "needs %lld nodes × %d GPU%s in one block; only %lld "
			    "schedulable matching node%s in one block have that many usable GPUs",
			    (long long)w->b, gpus, s_(gpus), (long long)w->a, s_(w->a));
		break;
	default: add(out, outlen, &used, "waiting (reason %d)", (int)w->reason); break;
	}
}

static int has_labels(const struct sched_node *n, const struct sched_job *job)
{
	for (int k = 0; k < job->nselectors; k++) {
		int found = 0;
		for (int l = 0; l < n->nlabels && l < SCHED_MAX_LABELS && !found; l++)
			found = n->labels[l] == job->selectors[k];
		if (!found)
			return 0;
	}
	return 1;
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The most nodes in one block among the first n of blocks (sorted here). */
static int largest_block(uint32_t *blocks, int n)
{
	int best = 0, run = 0;
	qsort(blocks, (size_t)n, sizeof(*blocks), u32_cmp);
	for (int k = 0; k < n; k++) {
		run = k > 0 && blocks[k] == blocks[k - 1] ? run + 1 : 1;
		best = run > best ? run : best;
	}
	return best;
}

struct fit_counts {
	int model, mem, pool, labels, big, largest;
	uint64_t maxmem;
	int most;
};

static void count_fits(const struct sched_node *nodes, int nnodes, const struct sched_job *job,
                       struct fit_counts *c, uint32_t *blocks)
{
	for (int i = 0; i < nnodes; i++) {
		const struct sched_node *n = &nodes[i];
		if (job->gpu_model && n->gpu_model != job->gpu_model)
			continue;
		c->model++;
		c->maxmem = n->gpu_mem_mib > c->maxmem ? n->gpu_mem_mib : c->maxmem;
		if (n->gpu_mem_mib < job->min_gpu_mem_mib)
			continue;
		c->mem++;
		if (job->pool && n->pool != job->pool)
			continue;
		c->pool++;
		if (!has_labels(n, job))
			continue;
		c->labels++;
		int cap = __builtin_popcountll(n->gpus_all);
		c->most = cap > c->most ? cap : c->most;
		if (cap >= job->gpus)
			blocks[c->big++] = n->block;
	}
	c->largest = largest_block(blocks, c->big);
}

/* sched_fits_ever() for a CPU-only job: a GPU model or GPU memory makes no
 * sense without a GPU; else enough nodes of its pool and labels that may
 * run CPU-only ranks, in any block. */
static int cpu_fits_ever(const struct sched_node *nodes, int nnodes, const struct sched_job *job,
                         char *why, size_t whylen)
{
	size_t used = 0;
	if (job->gpu_model || job->min_gpu_mem_mib) {
		add(why, whylen, &used,
		    "asks for 0 GPUs (a CPU-only job) but for a GPU %s; ask for at least 1 GPU, "
		    "or for no GPU model and no GPU memory",
		    job->gpu_model ? "model" : "memory");
		return ERR_INVALID;
	}
	int pool = 0, labels = 0, fit = 0;
	for (int i = 0; i < nnodes; i++) {
		if (job->pool && nodes[i].pool != job->pool)
			continue;
		pool++;
		if (!has_labels(&nodes[i], job))
			continue;
		labels++;
		fit += nodes[i].cpu_ranks_max > 0;
	}
	if (nnodes == 0)
		add(why, whylen, &used, "the cluster has no nodes");
	else if (pool == 0)
		add(why, whylen, &used, "no node is in the requested pool");
	else if (labels == 0)
		add(why, whylen, &used, "no node%s carries all of the requested labels",
		    job->pool ? " in the requested pool" : "");
	else if (fit == 0)
		add(why, whylen, &used, "no matching node may run CPU-only ranks");
	else if (fit < job->nodes)
		add(why, whylen, &used,
		    "asks for %d nodes for its CPU-only ranks, but only %d node%s match%s its "
		    "pool and labels",
		    job->nodes, fit, s_(fit), fit == 1 ? "es" : "");
	else
		return 0;
	return ERR_UNFIT;
}

int sched_fits_ever(const struct sched_node *nodes, int nnodes, const struct sched_job *job,
                    char *why, size_t whylen)
{
	size_t used = 0;
	if (job->gpus < 0 || job->gpus > SCHED_MAX_GPUS || job->nodes < 1 ||
	    job->nodes > SCHED_MAX_RANKS || job->nselectors < 0 ||
	    job->nselectors > SCHED_MAX_SELECTORS) {
		add(why, whylen, &used,
		    "asks for %d node%s × %d GPU%s and %d label selectors; a job "
		    "asks for 1 to %d nodes × 0 to %d GPUs and at most %d selectors",
		    job->nodes, s_(job->nodes), job->gpus, s_(job->gpus), job->nselectors,
		    SCHED_MAX_RANKS, SCHED_MAX_GPUS, SCHED_MAX_SELECTORS);
		return ERR_INVALID;
	}
	if (job->gpus == 0)
		return cpu_fits_ever(nodes, nnodes, job, why, whylen);
	struct fit_counts c = {0};
	uint32_t *blocks = xmalloc(sizeof(uint32_t) * (size_t)(nnodes + 1));
	count_fits(nodes, nnodes, job, &c, blocks);
	free(blocks);
	const char *of_model = job->gpu_model ? " of the requested model" : "";
	if (nnodes == 0)
		add(why, whylen, &used, "the cluster has no nodes");
	else if (c.model == 0)
		add(why, whylen, &used, "no node has the requested GPU model");
	else if (c.mem == 0)
		add(why, whylen, &used,
		    "asks for %llu MiB per GPU, but the largest GPUs%s have %llu MiB",
		    (unsigned long long)job->min_gpu_mem_mib, of_model,
		    (unsigned long long)c.maxmem);
	else if (c.pool == 0)
		add(why, whylen, &used, "no node with the requested GPUs is in the requested pool");
	else if (c.labels == 0)
		add(why, whylen, &used,
		    "no node with the requested GPUs and pool carries all of "
		    "the requested labels");
	else if (c.most < job->gpus)
		add(why, whylen, &used,
		    "asks for %d GPU%s per node, but the largest matching node "
		    "has %d",
		    job->gpus, s_(job->gpus), c.most);
	else if (c.big < job->nodes)
		add(why, whylen, &used,
		    "asks for %d nodes with %d GPU%s each, but only %d matching "
		    "node%s %s that many",
		    job->nodes, job->gpus, s_(job->gpus), c.big, s_(c.big),
		    c.big == 1 ? "has" : "have");
	else if (c.largest < job->nodes)
		add(why, whylen, &used,
		    "asks for %d nodes with %d GPU%s each in one block, but the "
		    "largest block has %d such node%s",
		    job->nodes, job->gpus, s_(job->gpus), c.largest, s_(c.largest));
	else
		return 0;
	return ERR_UNFIT;
}

/* 2^-x for x >= 0 without libm: 0.5^floor(x) by squaring, times
 * e^(-f ln 2) for the fraction f by its series (|term| < 1e-17 at 20). */
static double half_pow(double x)
{
	if (x > 2000)
		return 0;
	int64_t k = (int64_t)x;
	double f = (x - (double)k) * -0.6931471805599453, term = 1, sum = 1, base = 0.5, r = 1;
	for (int n = 1; n < 20; n++) {
		term *= f / n;
		sum += term;
	}
	for (; k; k >>= 1, base *= base)
		if (k & 1)
			r *= base;
	return r * sum;
}

double sched_decay(double usage, int64_t elapsed_ms, int64_t half_life_ms)
{
	if (elapsed_ms <= 0 || half_life_ms <= 0)
		return usage;
	return usage * half_pow((double)elapsed_ms / (double)half_life_ms);
}
