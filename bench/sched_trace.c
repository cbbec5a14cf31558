/* sched_trace.c - see sched_trace.h. */
#include "sched_trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

#define MIN_MS       (60 * 1000LL)
#define HOUR_MS      (60 * MIN_MS)
#define A100_MEM_MIB (80 * 1024ULL)
#define H200_MEM_MIB (141 * 1024ULL)
#define BIG_MEM_MIB  (100 * 1024ULL) /* asks for more than an A100 has */

static const int team_weight[TRACE_NTEAMS] = {4, 3, 2, 1};
static const int team_share_pct[TRACE_NTEAMS] = {40, 30, 20, 10};
static const char *const team_names[TRACE_NTEAMS] = {"vision", "language", "speech", "infra"};

/* The mix, per arrival: probability, median duration, queue split
 * (prod, research, scavenger, in percent), checkpointing percent. */
struct mix {
	int cls;
	int sweep;
	double p;
	int64_t median_ms;
	int queue_pct[3];
	int ckpt_pct;
};

static const struct mix mixes[] = {
        {TRACE_CLASS_1GPU, 0, 0.50, 20 * MIN_MS, {20, 50, 30}, 10},
        {TRACE_CLASS_1GPU, 1, 0.05, 15 * MIN_MS, {0, 60, 40}, 10},
        {TRACE_CLASS_8GPU, 0, 0.30, 60 * MIN_MS, {35, 50, 15}, 40},
        {TRACE_CLASS_GANG_S, 0, 0.10, 3 * HOUR_MS, {40, 60, 0}, 70},
        {TRACE_CLASS_GANG_L, 0, 0.05, 3 * HOUR_MS, {20, 80, 0}, 70},
};
#define NMIXES ((int)(sizeof(mixes) / sizeof(mixes[0])))

/* xoshiro256** seeded through splitmix64. */
void trace_rng_seed(struct trace_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		r->s[i] = z ^ (z >> 31);
	}
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t trace_rand(struct trace_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double trace_uniform(struct trace_rng *r)
{
	return (double)(trace_rand(r) >> 11) * 0x1.0p-53;
}

int trace_below(struct trace_rng *r, int n)
{
	return (int)(trace_uniform(r) * n);
}

static double normal(struct trace_rng *r)
{
	double u = trace_uniform(r), v = trace_uniform(r);
	return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v);
}

const char *trace_class_name(int cls)
{
	static const char *const names[TRACE_NCLASSES] = {"1 GPU", "8 GPUs", "2-4 nodes",
	                                                  "8-16 nodes"};
	return cls >= 0 && cls < TRACE_NCLASSES ? names[cls] : "?";
}

const char *trace_team_name(uint32_t team)
{
	return team >= 1 && team <= TRACE_NTEAMS ? team_names[team - 1] : "?";
}

int trace_class_of(const struct sched_job *job)
{
	if (job->nodes >= 8)
		return TRACE_CLASS_GANG_L;
	if (job->nodes >= 2)
		return TRACE_CLASS_GANG_S;
	return job->gpus >= 8 ? TRACE_CLASS_8GPU : TRACE_CLASS_1GPU;
}

int64_t trace_queue_default_limit(const struct trace_cluster *c, uint32_t queue)
{
	for (int i = 0; i < TRACE_NQUEUES; i++)
		if (c->queues[i].id == queue)
			return c->queues[i].default_time_limit_ms;
	return 0;
}

/* Topology ids restart at a block boundary for each GPU model, so that a
 * block never mixes models. */
static void make_nodes(const struct trace_params *p, struct trace_cluster *c, struct trace_rng *r)
{
	int per_rack = p->nodes_per_switch * p->switches_per_rack;
	int per_block = per_rack * p->racks_per_block;
	int a100_blocks = (p->a100_nodes + per_block - 1) / per_block;
	c->nnodes = p->a100_nodes + p->h200_nodes;
	c->nodes = xcalloc((size_t)c->nnodes, sizeof(*c->nodes));
	for (int i = 0; i < c->nnodes; i++) {
		struct sched_node *n = &c->nodes[i];
		int a100 = i < p->a100_nodes;
		int slot = a100 ? i : a100_blocks * per_block + (i - p->a100_nodes);
		n->id = i + 1;
		n->sw = (uint32_t)(slot / p->nodes_per_switch + 1);
		n->rack = (uint32_t)(slot / per_rack + 1);
		n->block = (uint32_t)(slot / per_block + 1);
		n->gpu_model = a100 ? TRACE_MODEL_A100 : TRACE_MODEL_H200;
		n->gpu_mem_mib = a100 ? A100_MEM_MIB : H200_MEM_MIB;
		n->gpus_all = (1ULL << TRACE_GPUS_PER_NODE) - 1;
		n->gpus_healthy = n->gpus_all;
		if (trace_uniform(r) < p->broken_fraction)
			n->gpus_healthy &= ~(1ULL << trace_below(r, TRACE_GPUS_PER_NODE));
		n->gpus_free = n->gpus_healthy;
		n->nvlink[0] = 0x0f;
		n->nvlink[1] = 0xf0;
		n->nnvlink = 2;
		/* One A100 node in ten lacks the fabric label. */
		if (!a100 || trace_below(r, 10) != 0)
			n->labels[n->nlabels++] = TRACE_LABEL_IB;
		n->schedulable = trace_uniform(r) >= p->cordoned_fraction;
		c->gpus += TRACE_GPUS_PER_NODE;
		if (n->schedulable)
			c->gpus_usable += __builtin_popcountll(n->gpus_healthy);
	}
}

void trace_cluster_make(const struct trace_params *p, struct trace_cluster *out)
{
	struct trace_cluster c = {0};
	struct trace_rng r;
	trace_rng_seed(&r, p->seed ^ 0x636c7573746572ULL);
	make_nodes(p, &c, &r);

	c.queues[0] = (struct sched_queue){TRACE_Q_PROD, 100, 1, 0, 72 * HOUR_MS};
	c.queues[1] = (struct sched_queue){TRACE_Q_RESEARCH, 50, 1, 1, 72 * HOUR_MS};
	c.queues[2] = (struct sched_queue){TRACE_Q_SCAVENGER, 0, 1, 0, 24 * HOUR_MS};
	for (int q = 0; q < 2; q++) {
		int left = c.gpus;
		for (int t = 0; t < TRACE_NTEAMS; t++) {
			int nominal =
			        t == TRACE_NTEAMS - 1 ? left : c.gpus * team_share_pct[t] / 100;
			left -= nominal;
			c.quotas[c.nquotas++] =
			        (struct sched_quota){(uint32_t)(q + 1), (uint32_t)(t + 1), nominal};
		}
	}
	for (int t = 0; t < TRACE_NTEAMS; t++)
		c.teams[t] = (struct sched_team){(uint32_t)(t + 1), team_weight[t], 0.0};
	*out = c;
}

void trace_cluster_cleanup(struct trace_cluster *c)
{
	free(c->nodes);
	memset(c, 0, sizeof(*c));
}

static int nominal(const struct trace_cluster *c, uint32_t queue, uint32_t team)
{
	for (int i = 0; i < c->nquotas; i++)
		if (c->quotas[i].queue == queue && c->quotas[i].team == team)
			return c->quotas[i].nominal_gpus;
	return 0;
}

/* How many nodes could ever take one rank, for every combination of the
 * constraints the generator uses: [model][big memory][label][8 GPUs]. */
struct fit {
	int n[3][2][2][2];
};

static int node_takes(const struct sched_node *nd, const struct sched_job *j)
{
	if (!nd->schedulable || __builtin_popcountll(nd->gpus_healthy) < j->gpus)
		return 0;
	if ((j->gpu_model && nd->gpu_model != j->gpu_model) || nd->gpu_mem_mib < j->min_gpu_mem_mib)
		return 0;
	for (int s = 0; s < j->nselectors; s++) {
		int has = 0;
		for (int l = 0; l < nd->nlabels; l++)
			has |= nd->labels[l] == j->selectors[s];
		if (!has)
			return 0;
	}
	return 1;
}

static void fit_make(const struct trace_cluster *c, struct fit *f)
{
	memset(f, 0, sizeof(*f));
	for (int m = 0; m < 3; m++)
		for (int b = 0; b < 2; b++)
			for (int l = 0; l < 2; l++)
				for (int g = 0; g < 2; g++) {
					struct sched_job j = {.gpus = g ? TRACE_GPUS_PER_NODE : 1,
					                      .gpu_model = (uint32_t)m,
					                      .min_gpu_mem_mib =
					                              b ? BIG_MEM_MIB : 0,
					                      .nselectors = l,
					                      .selectors = {TRACE_LABEL_IB}};
					for (int i = 0; i < c->nnodes; i++)
						f->n[m][b][l][g] += node_takes(&c->nodes[i], &j);
				}
}

static int nodes_fitting(const struct fit *f, const struct sched_job *j)
{
	return f->n[j->gpu_model][j->min_gpu_mem_mib > 0][j->nselectors > 0][j->gpus > 1];
}

/* Drops constraints, then ranks, until the job fits the whole cluster. */
static void make_fit(const struct fit *f, struct sched_job *j)
{
	if (nodes_fitting(f, j) >= j->nodes)
		return;
	j->nselectors = 0;
	if (nodes_fitting(f, j) >= j->nodes)
		return;
	j->gpu_model = 0;
	j->min_gpu_mem_mib = 0;
	int n = nodes_fitting(f, j);
	if (n < j->nodes)
		j->nodes = n;
}

static void set_constraints(struct trace_rng *r, struct sched_job *j)
{
	double u = trace_uniform(r);
	double h200 = j->nodes > 1 ? 0.40 : j->gpus > 1 ? 0.30 : 0.15;
	double a100 = j->nodes > 1 ? 0.10 : j->gpus > 1 ? 0.15 : 0.10;
	if (u < h200) {
		/* 1-GPU jobs ask for memory, whole nodes for the model. */
		if (j->gpus == 1)
			j->min_gpu_mem_mib = BIG_MEM_MIB;
		else
			j->gpu_model = TRACE_MODEL_H200;
	} else if (u < h200 + a100) {
		j->gpu_model = TRACE_MODEL_A100;
	}
	if (trace_uniform(r) < 0.02)
		j->selectors[j->nselectors++] = TRACE_LABEL_IB;
}

static int pick_mix(struct trace_rng *r)
{
	double u = trace_uniform(r), acc = 0;
	for (int i = 0; i < NMIXES; i++) {
		acc += mixes[i].p;
		if (u < acc)
			return i;
	}
	return NMIXES - 1;
}

static uint32_t pick_team(struct trace_rng *r)
{
	int u = trace_below(r, 100), acc = 0;
	for (int t = 0; t < TRACE_NTEAMS; t++) {
		acc += team_share_pct[t];
		if (u < acc)
			return (uint32_t)(t + 1);
	}
	return TRACE_NTEAMS;
}

static uint32_t pick_queue(struct trace_rng *r, const struct mix *m)
{
	int u = trace_below(r, 100);
	if (u < m->queue_pct[0])
		return TRACE_Q_PROD;
	return u < m->queue_pct[0] + m->queue_pct[1] ? TRACE_Q_RESEARCH : TRACE_Q_SCAVENGER;
}

static int64_t pick_duration(struct trace_rng *r, int64_t median)
{
	double d = (double)median * exp(1.2 * normal(r));
	if (d < (double)MIN_MS)
		d = (double)MIN_MS;
	if (d > (double)(24 * HOUR_MS))
		d = (double)(24 * HOUR_MS);
	return (int64_t)d;
}

/* A quarter of the jobs leave the limit to the queue default (>= 24 h, and
 * durations are capped at 24 h); the rest ask for 1.1-3x their duration,
 * rounded up to 5 minutes, as users who know their job roughly do. */
static int64_t pick_limit(struct trace_rng *r, int64_t duration)
{
	if (trace_below(r, 4) == 0)
		return 0;
	int64_t l = (int64_t)((double)duration * (1.1 + 1.9 * trace_uniform(r)));
	return (l + 5 * MIN_MS - 1) / (5 * MIN_MS) * (5 * MIN_MS);
}

/* One arrival: 1 job, or TRACE_SWEEP_SIZE for a sweep. Returns how many. */
static int make_arrival(struct trace_rng *r, const struct trace_cluster *c, const struct fit *f,
                        int64_t t, struct trace_job *out)
{
	const struct mix *m = &mixes[pick_mix(r)];
	struct sched_job j = {0};
	j.team = pick_team(r);
	j.queue = pick_queue(r, m);
	j.priority = trace_below(r, 10) + (trace_below(r, 20) == 0 ? 50 : 0);
	j.gpus = m->cls == TRACE_CLASS_1GPU ? 1 : TRACE_GPUS_PER_NODE;
	j.nodes = m->cls == TRACE_CLASS_GANG_S   ? 2 + trace_below(r, 3)
	          : m->cls == TRACE_CLASS_GANG_L ? 8 + trace_below(r, 9)
	                                         : 1;
	j.checkpointing = trace_below(r, 100) < m->ckpt_pct;
	set_constraints(r, &j);
	make_fit(f, &j);
	/* A job bigger than its team's prod quota could never be admitted there. */
	if (j.queue == TRACE_Q_PROD && j.gpus * j.nodes > nominal(c, TRACE_Q_PROD, j.team))
		j.queue = TRACE_Q_RESEARCH;
	int64_t base = pick_duration(r, m->median_ms);
	int count = m->sweep ? TRACE_SWEEP_SIZE : 1;
	for (int i = 0; i < count; i++) {
		struct trace_job *tj = &out[i];
		tj->spec = j;
		tj->spec.submit_ms = t + i * 1000;
		tj->duration_ms =
		        m->sweep ? (int64_t)((double)base * (0.7 + 0.6 * trace_uniform(r))) : base;
		if (tj->duration_ms < MIN_MS)
			tj->duration_ms = MIN_MS;
		tj->spec.time_limit_ms = pick_limit(r, tj->duration_ms);
		tj->cls = trace_class_of(&tj->spec);
	}
	return count;
}

static int cmp_arrival(const void *a, const void *b)
{
	const struct trace_job *x = a, *y = b;
	if (x->spec.submit_ms != y->spec.submit_ms)
		return x->spec.submit_ms < y->spec.submit_ms ? -1 : 1;
	return (x->spec.id > y->spec.id) - (x->spec.id < y->spec.id);
}

/* Mean GPU-milliseconds one arrival asks for, by sampling the mix. */
static double mean_demand(const struct trace_params *p, const struct trace_cluster *c,
                          const struct fit *f)
{
	struct trace_rng r;
	struct trace_job buf[TRACE_SWEEP_SIZE];
	trace_rng_seed(&r, p->seed ^ 0x64656d616e64ULL);
	double sum = 0;
	enum { SAMPLES = 20000 };
	for (int i = 0; i < SAMPLES; i++) {
		int n = make_arrival(&r, c, f, 0, buf);
		for (int k = 0; k < n; k++)
			sum += (double)buf[k].duration_ms * buf[k].spec.gpus * buf[k].spec.nodes;
	}
	return sum / SAMPLES;
}

int trace_jobs_make(const struct trace_params *p, const struct trace_cluster *c,
                    struct trace_job **out)
{
	struct fit f;
	fit_make(c, &f);
	double rate = p->load * c->gpus / mean_demand(p, c, &f); /* arrivals per ms */
	struct trace_rng r;
	trace_rng_seed(&r, p->seed);
	struct trace_job *jobs = NULL;
	int n = 0, cap = 0;
	double t = 0;
	for (;;) {
		t += -log(1.0 - trace_uniform(&r)) / rate;
		if (t >= (double)p->span_ms)
			break;
		while (n + TRACE_SWEEP_SIZE > cap) {
			cap = cap ? cap * 2 : 1024;
			jobs = xrealloc(jobs, sizeof(*jobs) * (size_t)cap);
		}
		int k = make_arrival(&r, c, &f, (int64_t)t, &jobs[n]);
		for (int i = 0; i < k; i++)
			jobs[n + i].spec.id = n + i + 1;
		n += k;
	}
	/* Sweeps overlap later arrivals: sort, then renumber so id = index + 1
	 * and ids grow with submission time, as a server would assign them. */
	qsort(jobs, (size_t)n, sizeof(*jobs), cmp_arrival);
	for (int i = 0; i < n; i++)
		jobs[i].spec.id = i + 1;
	*out = jobs;
	return n;
}
