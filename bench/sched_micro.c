/* sched_micro.c - the micro-benchmarks behind the targets.
 *
 *   1. single-GPU placements per second: one cycle, 10,000 empty nodes x 8
 *      GPUs, 80,000 pending 1-GPU jobs (a queue without quotas);
 *   2. a 16-node x 8-GPU gang, the only pending job, on 10,000 nodes of which
 *      90 % run something (1-8 GPUs held each): cycle CPU time, p50 and p99;
 *   3. a full cycle: 10,000 nodes about 95 % allocated by trace jobs, 100,000
 *      pending trace jobs (all sizes, queues, teams, constraints): p50 and
 *      p99 over repeated cycles on the same snapshot, the first (cold) one
 *      apart, and whether repeated cycles decide the same (determinism);
 *   4. memory per pending job: what sched_new() and the first cycle of (3)
 *      leave allocated (malloc's count, and the RSS growth), divided by the
 *      100,000 pending jobs, plus the caller's struct sched_job.
 *
 * Each result is checked (ranks, masks against free GPUs, constraints, one
 * wait per job left pending); a violation is printed and counted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "sched_fifo.h"
#include "sched_sim.h"
#include "sched_trace.h"

#define MIN_MS  (60 * 1000LL)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS  (24 * HOUR_MS)

static const struct trace_params micro_params = {"10k", 3600,  6400,       32,   4, 8,
                                                 0.005, 0.002, 2 * DAY_MS, 0.95, 1};

struct snap_owner {
	struct trace_cluster cl;
	struct sched_running *run;
	struct sched_rank_hold *holds;
	struct sched_job *pend;
	struct sched_team teams[TRACE_NTEAMS];
	struct sched_snapshot snap;
};

static void snap_owner_free(struct snap_owner *o)
{
	trace_cluster_cleanup(&o->cl);
	free(o->run);
	free(o->holds);
	free(o->pend);
}

static void snap_finish(struct snap_owner *o, int nrun, int npend, int64_t now)
{
	for (int t = 0; t < TRACE_NTEAMS; t++)
		o->teams[t] = o->cl.teams[t];
	o->snap = (struct sched_snapshot){.now_ms = now,
	                                  .config = sim_config,
	                                  .nodes = o->cl.nodes,
	                                  .nnodes = o->cl.nnodes,
	                                  .queues = o->cl.queues,
	                                  .nqueues = TRACE_NQUEUES,
	                                  .quotas = o->cl.quotas,
	                                  .nquotas = o->cl.nquotas,
	                                  .teams = o->teams,
	                                  .nteams = TRACE_NTEAMS,
	                                  .running = o->run,
	                                  .nrunning = nrun,
	                                  .pending = o->pend,
	                                  .npending = npend};
}

static const struct sched_job *by_id_jobs; /* qsort has no context argument */

static int cmp_by_id(const void *a, const void *b)
{
	int64_t x = by_id_jobs[*(const int *)a].id, y = by_id_jobs[*(const int *)b].id;
	return (x > y) - (x < y);
}

/* Index in s->pending of the job with this id, or -1; order sorts by id. */
static int find_job(const struct sched_snapshot *s, const int *order, int64_t id)
{
	int lo = 0, hi = s->npending - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int64_t m = s->pending[order[mid]].id;
		if (m == id)
			return order[mid];
		if (m < id)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

static const char *rank_problem(const struct sched_snapshot *s, const struct sched_job *j,
                                const struct sched_placement *pl, uint64_t *free_now)
{
	if (pl->nranks != j->nodes)
		return "rank count";
	for (int k = 0; k < pl->nranks; k++) {
		int n = pl->ranks[k].node;
		uint64_t m = pl->ranks[k].gpus;
		if (n < 0 || n >= s->nnodes)
			return "node index out of range";
		if (m & ~free_now[n])
			return "GPU not free (double booking, unhealthy, held, or two ranks on a "
			       "node)";
		if (__builtin_popcountll(m) != j->gpus)
			return "GPU count";
		if (!fifo_node_takes(&s->nodes[n], m, j))
			return "node breaks constraints or is unschedulable";
		free_now[n] &= ~m;
	}
	return NULL;
}

/* Checks a result against its snapshot; returns the number of violations. */
static int result_check(const char *what, const struct sched_snapshot *s,
                        const struct sched_result *r, int want_waits)
{
	int bad = 0;
	uint64_t *free_now = xmalloc(sizeof(*free_now) * (size_t)s->nnodes);
	int *order = xmalloc(sizeof(*order) * (size_t)(s->npending + 1));
	char *placed = xcalloc((size_t)s->npending + 1, 1);
	for (int i = 0; i < s->nnodes; i++)
		free_now[i] = s->nodes[i].gpus_free & s->nodes[i].gpus_healthy;
	for (int i = 0; i < s->npending; i++)
		order[i] = i;
	by_id_jobs = s->pending;
	qsort(order, (size_t)s->npending, sizeof(*order), cmp_by_id);
	for (int p = 0; p < r->nplacements; p++) {
		const struct sched_placement *pl = &r->placements[p];
		int k = find_job(s, order, pl->job_id);
		const char *why = k < 0       ? "job not pending"
		                  : placed[k] ? "job placed twice"
		                              : rank_problem(s, &s->pending[k], pl, free_now);
		if (k >= 0)
			placed[k] = 1;
		if (why && bad++ < 10)
			fprintf(stderr, "sched_sim: VIOLATION micro=%s placement of job %lld: %s\n",
			        what, (long long)pl->job_id, why);
	}
	if (want_waits && r->nwaits != s->npending - r->nplacements && bad++ < 10)
		fprintf(stderr,
		        "sched_sim: VIOLATION micro=%s: %d waits for %d jobs left pending\n", what,
		        r->nwaits, s->npending - r->nplacements);
	free(free_now);
	free(order);
	free(placed);
	return bad;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	return h;
}

/* A digest of every decision in r, to compare two cycles' decisions. */
static uint64_t result_digest(const struct sched_result *r)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (int i = 0; i < r->nplacements; i++) {
		const struct sched_placement *p = &r->placements[i];
		h = fnv(h, &p->job_id, sizeof(p->job_id));
		h = fnv(h, &p->borrowed, sizeof(p->borrowed));
		for (int k = 0; k < p->nranks; k++) {
			h = fnv(h, &p->ranks[k].node, sizeof(p->ranks[k].node));
			h = fnv(h, &p->ranks[k].gpus, sizeof(p->ranks[k].gpus));
		}
	}
	for (int i = 0; i < r->npreemptions; i++) {
		h = fnv(h, &r->preemptions[i].attempt_id, sizeof(int64_t));
		h = fnv(h, &r->preemptions[i].for_job_id, sizeof(int64_t));
	}
	for (int i = 0; i < r->nwaits; i++) {
		const struct sched_wait *w = &r->waits[i];
		int reason = (int)w->reason;
		h = fnv(h, &w->job_id, sizeof(w->job_id));
		h = fnv(h, &reason, sizeof(reason));
		h = fnv(h, &w->a, sizeof(w->a));
		h = fnv(h, &w->b, sizeof(w->b));
		h = fnv(h, &w->est_start_ms, sizeof(w->est_start_ms));
	}
	return h;
}

struct timing {
	int64_t cold_ns, p50_ns, p99_ns;
	int placed, preempted, waits, violations, deterministic;
	int64_t heap_growth, rss_growth; /* across make + the first cycle */
};

/* Cycles reps + 1 times on the same snapshot with one engine state. */
static void time_cycles(const struct engine *e, const char *what, const struct sched_snapshot *s,
                        int reps, struct timing *t)
{
	memset(t, 0, sizeof(*t));
	t->deterministic = 1;
	int64_t *ns = xcalloc((size_t)reps, sizeof(*ns));
	int64_t h0 = heap_bytes(), r0 = rss_bytes();
	void *st = e->make();
	uint64_t first = 0;
	for (int i = 0; i <= reps; i++) {
		struct sched_result r = {0};
		int64_t c0 = cpu_ns();
		int rc = e->cycle(st, s, &r);
		int64_t dt = cpu_ns() - c0;
		if (rc != 0) {
			fprintf(stderr,
			        "sched_sim: VIOLATION micro=%s engine=%s: cycle returned %d\n",
			        what, e->name, rc);
			t->violations++;
			break;
		}
		uint64_t d = result_digest(&r);
		if (i == 0) {
			t->cold_ns = dt;
			t->heap_growth = heap_bytes() - h0;
			t->rss_growth = rss_bytes() - r0;
			t->placed = r.nplacements;
			t->preempted = r.npreemptions;
			t->waits = r.nwaits;
			t->violations += result_check(what, s, &r, e->reports_waits);
			first = d;
		} else {
			ns[i - 1] = dt;
			t->deterministic &= d == first;
		}
	}
	t->p50_ns = percentile(ns, reps, 50);
	t->p99_ns = percentile(ns, reps, 99);
	e->drop(st);
	free(ns);
}

/* (1): every node empty, 80,000 one-GPU jobs in the queue without quotas. */
static void make_single_gpu(struct snap_owner *o, uint64_t seed)
{
	struct trace_params p = micro_params;
	p.broken_fraction = p.cordoned_fraction = 0;
	p.seed = seed;
	trace_cluster_make(&p, &o->cl);
	enum { N = 80000 };
	o->pend = xcalloc(N, sizeof(*o->pend));
	for (int i = 0; i < N; i++)
		o->pend[i] = (struct sched_job){.id = i + 1,
		                                .queue = TRACE_Q_SCAVENGER,
		                                .team = (uint32_t)(i % TRACE_NTEAMS + 1),
		                                .priority = i % 10,
		                                .submit_ms = i * 10LL,
		                                .gpus = 1,
		                                .nodes = 1,
		                                .time_limit_ms = HOUR_MS};
	snap_finish(o, 0, N, N * 10LL + 1000);
}

static uint64_t random_subset(struct trace_rng *r, uint64_t from, int k)
{
	uint64_t out = 0;
	while (k > 0 && from) {
		int n = __builtin_popcountll(from), pick = trace_below(r, n);
		uint64_t m = from;
		for (int i = 0; i < pick; i++)
			m &= m - 1;
		uint64_t bit = m & -m;
		out |= bit;
		from &= ~bit;
		k--;
	}
	return out;
}

/* (2): 90 % of the nodes hold 1-8 GPUs of one scavenger attempt each; the
 * free nodes are scattered, so few switches have 16 of them. */
static void make_fragmented(struct snap_owner *o, uint64_t seed)
{
	struct trace_params p = micro_params;
	p.seed = seed;
	trace_cluster_make(&p, &o->cl);
	struct trace_rng r;
	trace_rng_seed(&r, seed ^ 0x66726167ULL);
	int64_t now = 10 * DAY_MS;
	o->run = xcalloc((size_t)o->cl.nnodes, sizeof(*o->run));
	o->holds = xcalloc((size_t)o->cl.nnodes, sizeof(*o->holds));
	int nrun = 0;
	for (int i = 0; i < o->cl.nnodes; i++) {
		struct sched_node *n = &o->cl.nodes[i];
		if (trace_below(&r, 10) == 0)
			continue;
		uint64_t m = random_subset(&r, n->gpus_free, 1 + trace_below(&r, 8));
		n->gpus_free &= ~m;
		o->holds[nrun] = (struct sched_rank_hold){i, m};
		int64_t start = now - trace_below(&r, 600) * MIN_MS;
		o->run[nrun] = (struct sched_running){
		        .attempt_id = nrun + 1,
		        .job_id = 1000000 + nrun,
		        .queue = TRACE_Q_SCAVENGER,
		        .team = (uint32_t)(trace_below(&r, TRACE_NTEAMS) + 1),
		        .priority = trace_below(&r, 10),
		        .start_ms = start,
		        .end_by_ms = start + 24 * HOUR_MS,
		        .checkpointing = trace_below(&r, 2),
		        .nranks = 1,
		        .ranks = &o->holds[nrun]};
		nrun++;
	}
	o->pend = xcalloc(1, sizeof(*o->pend));
	o->pend[0] = (struct sched_job){.id = 1,
	                                .queue = TRACE_Q_RESEARCH,
	                                .team = 1,
	                                .priority = 5,
	                                .submit_ms = now - MIN_MS,
	                                .gpus = 8,
	                                .nodes = 16,
	                                .time_limit_ms = 4 * HOUR_MS,
	                                .checkpointing = 1};
	snap_finish(o, nrun, 1, now);
}

/* Up to j->nodes fitting nodes from a random start; 1 with pick filled. */
static int fill_fit(const struct trace_cluster *cl, const struct sched_job *j, struct trace_rng *r,
                    int *pick)
{
	int got = 0, from = trace_below(r, cl->nnodes);
	int tries = j->nodes == 1 ? 64 : 512;
	for (int k = 0; k < tries && got < j->nodes; k++) {
		int i = j->nodes == 1 ? trace_below(r, cl->nnodes) : (from + k) % cl->nnodes;
		if (fifo_node_takes(&cl->nodes[i], cl->nodes[i].gpus_free, j))
			pick[got++] = i;
	}
	return got == j->nodes;
}

/* (3): trace jobs fill 95 % of the usable GPUs as running attempts (started
 * at random moments, still running); the next 100,000 trace jobs, and those
 * that did not fit while filling, are pending. */
static void make_full(struct snap_owner *o, uint64_t seed)
{
	struct trace_params p = micro_params;
	p.seed = seed;
	trace_cluster_make(&p, &o->cl);
	struct trace_job *jobs;
	int njobs = trace_jobs_make(&p, &o->cl, &jobs);
	struct trace_rng r;
	trace_rng_seed(&r, seed ^ 0x66756c6cULL);
	enum { NPEND = 100000 };
	int64_t now = p.span_ms, used = 0, target = (int64_t)o->cl.gpus_usable * 95 / 100;
	o->run = xcalloc((size_t)o->cl.gpus, sizeof(*o->run));
	o->holds = xcalloc((size_t)o->cl.gpus, sizeof(*o->holds));
	o->pend = xcalloc(NPEND, sizeof(*o->pend));
	int nrun = 0, nholds = 0, npend = 0, pick[SCHED_MAX_RANKS];
	for (int k = 0; k < njobs && npend < NPEND; k++) {
		const struct trace_job *tj = &jobs[k];
		const struct sched_job *j = &tj->spec;
		if (used >= target || !fill_fit(&o->cl, j, &r, pick)) {
			o->pend[npend++] = *j;
			continue;
		}
		int64_t ran =
		        (int64_t)(trace_uniform(&r) * (double)(tj->duration_ms < now - j->submit_ms
		                                                       ? tj->duration_ms
		                                                       : now - j->submit_ms));
		int64_t limit = j->time_limit_ms ? j->time_limit_ms
		                                 : trace_queue_default_limit(&o->cl, j->queue);
		o->run[nrun] = (struct sched_running){.attempt_id = nrun + 1,
		                                      .job_id = j->id,
		                                      .queue = j->queue,
		                                      .team = j->team,
		                                      .priority = j->priority,
		                                      .start_ms = now - ran,
		                                      .end_by_ms = now - ran + limit,
		                                      .checkpointing = j->checkpointing,
		                                      .borrowed = j->queue == TRACE_Q_RESEARCH &&
		                                                  trace_below(&r, 4) == 0,
		                                      .nranks = j->nodes,
		                                      .ranks = &o->holds[nholds]};
		for (int i = 0; i < j->nodes; i++) {
			struct sched_node *n = &o->cl.nodes[pick[i]];
			uint64_t m = random_subset(&r, n->gpus_free, j->gpus);
			n->gpus_free &= ~m;
			o->holds[nholds++] = (struct sched_rank_hold){pick[i], m};
		}
		used += j->gpus * j->nodes;
		nrun++;
	}
	free(jobs);
	snap_finish(o, nrun, npend, now);
	for (int t = 0; t < TRACE_NTEAMS; t++)
		o->teams[t].usage = 1000.0 * (t + 1);
}

static void print_timing(const char *label, const struct timing *t)
{
	printf("| %-48s | %10.3f | %10.3f | %10.3f | %8d | %8d | %s |\n", label,
	       (double)t->cold_ns / 1e6, (double)t->p50_ns / 1e6, (double)t->p99_ns / 1e6,
	       t->placed, t->preempted, t->deterministic ? "yes" : "NO");
}

static const char *met(int ok)
{
	return ok ? "met" : "NOT met";
}

static const char *dur(char *buf, size_t len, int64_t ms)
{
	if (ms < 2 * HOUR_MS)
		snprintf(buf, len, "%.1f min", (double)ms / MIN_MS);
	else
		snprintf(buf, len, "%.1f h", (double)ms / HOUR_MS);
	return buf;
}

void sim_print_targets(void)
{
	char w[8][32];
	for (int i = 0; i < SIM_MAX_SUMMARIES; i++) {
		const struct sim_summary *s = &sim_summaries[i];
		if (!s->have)
			continue;
		if (s->seeds > 1) {
			printf("| useful GPU utilization >= FIFO's (%s, each of %d seeds) | mean %.2f %% "
			       "vs %.2f %%; least margin %+.2f points | %s |\n",
			       s->scenario, s->seeds, 100 * s->useful_util[ENGINE_ANVIL],
			       100 * s->useful_util[ENGINE_FIFO], 100 * s->worst_util_margin,
			       met(s->worst_util_margin >= 0));
			printf("| lower 8-16-node wait than FIFO (%s, %d seeds pooled) | mean %s vs %s, "
			       "p50 %s vs %s, p95 %s vs %s (p99 %s vs %s; p95 <= FIFO's on %d of %d "
			       "seeds alone) | %s |\n",
			       s->scenario, s->seeds, dur(w[0], sizeof(w[0]), s->large_mean[ENGINE_ANVIL]),
			       dur(w[1], sizeof(w[1]), s->large_mean[ENGINE_FIFO]),
			       dur(w[2], sizeof(w[2]), s->large_p50[ENGINE_ANVIL]),
			       dur(w[3], sizeof(w[3]), s->large_p50[ENGINE_FIFO]),
			       dur(w[4], sizeof(w[4]), s->large_p95[ENGINE_ANVIL]),
			       dur(w[5], sizeof(w[5]), s->large_p95[ENGINE_FIFO]),
			       dur(w[6], sizeof(w[6]), s->large_p99[ENGINE_ANVIL]),
			       dur(w[7], sizeof(w[7]), s->large_p99[ENGINE_FIFO]), s->p95_wins, s->seeds,
			       met(s->large_mean[ENGINE_ANVIL] < s->large_mean[ENGINE_FIFO] &&
			           s->large_p50[ENGINE_ANVIL] < s->large_p50[ENGINE_FIFO] &&
			           s->large_p95[ENGINE_ANVIL] <= s->large_p95[ENGINE_FIFO]));
			continue;
		}
		/* >=: where both keep up with the offered load, both hold what it
		 * offers, and a tie is all there is to have */
		printf("| useful GPU utilization >= FIFO's (%s) | held %.2f %% vs %.2f %%; useful "
		       "(less lost work) %.2f %% vs %.2f %% | %s |\n",
		       s->scenario, 100 * s->util[ENGINE_ANVIL], 100 * s->util[ENGINE_FIFO],
		       100 * s->useful_util[ENGINE_ANVIL], 100 * s->useful_util[ENGINE_FIFO],
		       met(s->useful_util[ENGINE_ANVIL] >= s->useful_util[ENGINE_FIFO]));
		printf("| lower 8-16-node wait than FIFO (%s) | p50 %s vs %s, p95 %s vs %s | %s "
		       "|\n",
		       s->scenario, dur(w[0], sizeof(w[0]), s->large_p50[ENGINE_ANVIL]),
		       dur(w[1], sizeof(w[1]), s->large_p50[ENGINE_FIFO]),
		       dur(w[2], sizeof(w[2]), s->large_p95[ENGINE_ANVIL]),
		       dur(w[3], sizeof(w[3]), s->large_p95[ENGINE_FIFO]),
		       met(s->large_p50[ENGINE_ANVIL] < s->large_p50[ENGINE_FIFO] &&
		           s->large_p95[ENGINE_ANVIL] <= s->large_p95[ENGINE_FIFO]));
	}
}

int micro_all(const struct options *o)
{
	int reps_small = o->quick ? 21 : 201, reps_big = o->quick ? 3 : 10;
	int bad = 0;
	struct timing t1[NENGINES], t2, t3[NENGINES];
	struct snap_owner s1 = {0}, s2 = {0}, s3 = {0};

	printf("\n### Micro-benchmarks (10,000 nodes x 8 GPUs, seed %llu)\n\n",
	       (unsigned long long)o->seed);
	printf("Scheduler CPU time of one cycle in ms: the first (cold: sizes scratch space), then "
	       "p50 / p99 over repeated cycles on the same snapshot.\n\n");
	printf("| %-48s | %10s | %10s | %10s | %8s | %8s | %s |\n", "benchmark", "cold ms",
	       "p50 ms", "p99 ms", "placed", "preempts", "same decisions");
	printf("| %.48s | ---------- | ---------- | ---------- | -------- | -------- | --- |\n",
	       "------------------------------------------------");
	fflush(stdout);

	make_single_gpu(&s1, o->seed);
	for (int e = 0; e < NENGINES; e++) {
		char label[96];
		time_cycles(&engines[e], "single-gpu", &s1.snap, 3, &t1[e]);
		snprintf(label, sizeof(label), "(1) 80,000 x 1 GPU on empty nodes, %s",
		         engines[e].name);
		print_timing(label, &t1[e]);
		bad += t1[e].violations;
	}
	snap_owner_free(&s1);
	fflush(stdout);

	make_fragmented(&s2, o->seed);
	time_cycles(&engines[ENGINE_ANVIL], "gang", &s2.snap, reps_small, &t2);
	print_timing("(2) one 16 x 8 gang, 90 % of nodes busy, anvil", &t2);
	bad += t2.violations;
	/* The same snapshot with nothing pending: what a cycle costs before any
	 * job is looked at (snapshot intake, node order, indexes). */
	struct timing t2e;
	s2.snap.npending = 0;
	time_cycles(&engines[ENGINE_ANVIL], "gang-empty", &s2.snap, reps_small, &t2e);
	print_timing("(2') the same, nothing pending, anvil", &t2e);
	bad += t2e.violations;
	snap_owner_free(&s2);
	fflush(stdout);

	make_full(&s3, o->seed);
	int64_t running_gpus = 0;
	for (int i = 0; i < s3.snap.nrunning; i++)
		for (int k = 0; k < s3.snap.running[i].nranks; k++)
			running_gpus += __builtin_popcountll(s3.snap.running[i].ranks[k].gpus);
	for (int e = 0; e < NENGINES; e++) {
		char label[96];
		time_cycles(&engines[e], "full", &s3.snap, reps_big, &t3[e]);
		snprintf(label, sizeof(label), "(3) 100,000 pending, 95 %% busy, %s",
		         engines[e].name);
		print_timing(label, &t3[e]);
		bad += t3[e].violations;
	}
	/* (3''): `anvil why` on a job SCHED_EST_MAX back in line, whose estimate
	 * needs a dry run through every job ahead of it (the server runs such a
	 * cycle on request). */
	struct sched *probe = sched_new();
	struct sched_result res;
	int64_t far = 0, far_est = 0;
	if (sched_cycle(probe, &s3.snap, &res) == 0)
		for (int k = 0, seen = 0; k < res.nwaits && !far; k++)
			if (res.waits[k].reason != SCHED_WAIT_UNFIT && ++seen == SCHED_EST_MAX)
				far = res.waits[k].job_id;
	struct timing tw;
	s3.snap.config.est_job_id = far;
	time_cycles(&engines[ENGINE_ANVIL], "why", &s3.snap, reps_big, &tw);
	if (far && sched_cycle(probe, &s3.snap, &res) == 0)
		for (int k = 0; k < res.nwaits; k++)
			if (res.waits[k].job_id == far)
				far_est = res.waits[k].est_start_ms;
	s3.snap.config.est_job_id = 0;
	sched_free(probe);
	char why_label[96];
	snprintf(why_label, sizeof(why_label), "(3'') the same, anvil why on job %d in line",
	         SCHED_EST_MAX);
	print_timing(why_label, &tw);
	bad += tw.violations;
	printf("\n(3'') that job (id %lld) %s.\n", (long long)far,
	       far_est > 0 ? "got an estimated start" : "got no estimate (nothing in sight frees enough)");
	int npend = s3.snap.npending, nrun = s3.snap.nrunning, gpus = s3.cl.gpus;
	snap_owner_free(&s3);
	printf("\n(3) snapshot: %d pending jobs, %d running attempts holding %lld GPUs of %d.\n",
	       npend, nrun, (long long)running_gpus, gpus);

	const struct timing *a3 = &t3[ENGINE_ANVIL];
	double per_job = (double)a3->heap_growth / npend;
	double per_job_rss = (double)a3->rss_growth / npend;
	double total = per_job + (double)sizeof(struct sched_job);
	printf("(4) memory: sched_new() + the first cycle of (3) left %.1f MiB allocated (RSS grew "
	       "%.1f MiB): %.0f B (RSS %.0f B) per pending job, plus the caller's struct sched_job "
	       "(%zu B) = %.0f B per pending job.\n",
	       (double)a3->heap_growth / (1 << 20), (double)a3->rss_growth / (1 << 20), per_job,
	       per_job_rss, sizeof(struct sched_job), total);

	double rate = t1[ENGINE_ANVIL].p50_ns
	                      ? t1[ENGINE_ANVIL].placed * 1e9 / (double)t1[ENGINE_ANVIL].p50_ns
	                      : 0;
	printf("\n### Targets\n\n| target | figure | |\n| --- | --- | --- |\n");
	printf("| >= 100,000 single-GPU placements/s on one core | %.0f /s (%.1fx; cold cycle "
	       "%.0f /s) | %s |\n",
	       rate, rate / 100000,
	       t1[0].cold_ns ? t1[0].placed * 1e9 / (double)t1[0].cold_ns : 0.0, met(rate >= 1e5));
	printf("| 16 x 8 gang on 10,000 nodes < 1 ms | p50 %.3f ms, p99 %.3f ms (cold %.3f ms; "
	       "%.3f ms with nothing pending)%s | %s |\n",
	       (double)t2.p50_ns / 1e6, (double)t2.p99_ns / 1e6, (double)t2.cold_ns / 1e6,
	       (double)t2e.p50_ns / 1e6, t2.placed == 1 ? "" : ", NOT PLACED",
	       met(t2.placed == 1 && t2.p50_ns < 1000000));
	printf("| full cycle, 10,000 nodes, 100,000 pending < 250 ms | p50 %.1f ms, p99 %.1f ms "
	       "(cold %.1f ms) | %s |\n",
	       (double)a3->p50_ns / 1e6, (double)a3->p99_ns / 1e6, (double)a3->cold_ns / 1e6,
	       met(a3->p99_ns < 250000000));
	printf("| < 1 KiB per pending job | %.0f B (%.0f B by RSS) + %zu B snapshot entry | %s |\n",
	       per_job, per_job_rss, sizeof(struct sched_job),
	       met(total < 1024 && per_job_rss + (double)sizeof(struct sched_job) < 1024));
	sim_print_targets();
	printf("| deterministic (same snapshot, same decisions) | %s | |\n",
	       t1[0].deterministic && t2.deterministic && a3->deterministic ? "yes" : "NO");
	fflush(stdout);
	return bad;
}
