/* sched_trace.h - deterministic clusters and workloads for the scheduler simulator.
 *
 * Everything here is a pure function of struct trace_params (the seed
 * included): the same parameters give the same nodes, quotas and jobs on
 * every machine, so anvil's scheduler and the FIFO baseline run the very same
 * trace and two runs of bench/sched_sim can be compared figure by figure.
 *
 * The cluster: A100 80 GB nodes, then H200 141 GB nodes, 8 GPUs each in two
 * NVLink groups of 4, labelled with switch/rack/block ids (a block boundary
 * between the two models). The policy: four teams (weights 4/3/2/1, quota
 * shares 40/30/20/10 %), three queues: prod (priority 100, no borrowing),
 * research (priority 50, borrowing) - each with team quotas summing to the
 * fleet - and scavenger (priority 0, no quota entries, so unlimited).
 *
 * The workload: Poisson arrivals at the rate that offers `load` times the
 * fleet's GPU-time; each arrival is a 1-GPU job, a sweep (a burst of 30 similar
 * 1-GPU jobs, one a second), an 8-GPU job, a 2-4-node or an 8-16-node gang of
 * 8-GPU ranks. Durations are lognormal (heavy tail, capped at 24 h), time
 * limits are at least the duration or left to the queue default, some jobs
 * checkpoint, some ask for a GPU model, more GPU memory or a label. Every job
 * fits the cluster (sched_fits_ever would accept it).
 *
 * The caller owns what trace_cluster_make and trace_jobs_make return and frees
 * it with trace_cluster_cleanup and free(). Single-threaded.
 */
#ifndef ANVIL_BENCH_SCHED_TRACE_H
#define ANVIL_BENCH_SCHED_TRACE_H

#include <stdint.h>

#include "sched/sched.h"

#define TRACE_GPUS_PER_NODE 8
#define TRACE_NTEAMS        4
#define TRACE_NQUEUES       3
#define TRACE_SWEEP_SIZE    30

enum trace_model { TRACE_MODEL_A100 = 1, TRACE_MODEL_H200 = 2 };
enum trace_queue { TRACE_Q_PROD = 1, TRACE_Q_RESEARCH = 2, TRACE_Q_SCAVENGER = 3 };
#define TRACE_LABEL_IB 1 /* "fabric=ib": most nodes carry it */

/* Size classes the report groups queue waits by. */
enum trace_class {
	TRACE_CLASS_1GPU,   /* one GPU (sweeps included) */
	TRACE_CLASS_8GPU,   /* one whole node */
	TRACE_CLASS_GANG_S, /* 2-4 nodes x 8 GPUs */
	TRACE_CLASS_GANG_L, /* 8-16 nodes x 8 GPUs */
	TRACE_NCLASSES,
};

struct trace_rng {
	uint64_t s[4];
};

struct trace_params {
	const char *name;
	int a100_nodes, h200_nodes;
	int nodes_per_switch, switches_per_rack, racks_per_block;
	double broken_fraction;   /* nodes with one unhealthy GPU */
	double cordoned_fraction; /* nodes not schedulable */
	int64_t span_ms;          /* arrivals in [0, span) */
	double load;              /* offered GPU-time / fleet GPU-time */
	uint64_t seed;
};

struct trace_cluster {
	struct sched_node *nodes;
	int nnodes;
	int gpus;        /* GPUs present (gpus_all), which the quotas sum to */
	int gpus_usable; /* healthy GPUs on schedulable nodes */
	struct sched_queue queues[TRACE_NQUEUES];
	struct sched_quota quotas[2 * TRACE_NTEAMS];
	int nquotas;
	struct sched_team teams[TRACE_NTEAMS];
};

struct trace_job {
	struct sched_job spec; /* spec.id = index + 1; spec.submit_ms = arrival */
	int64_t duration_ms;   /* work to do; <= the time limit */
	int cls;               /* enum trace_class */
};

void trace_rng_seed(struct trace_rng *r, uint64_t seed);
uint64_t trace_rand(struct trace_rng *r);
double trace_uniform(struct trace_rng *r);   /* [0, 1) */
int trace_below(struct trace_rng *r, int n); /* [0, n) */

void trace_cluster_make(const struct trace_params *p, struct trace_cluster *out);
void trace_cluster_cleanup(struct trace_cluster *c);

/* Jobs in arrival order (ties by id); returns how many, *out to free(). */
int trace_jobs_make(const struct trace_params *p, const struct trace_cluster *c,
                    struct trace_job **out);

int trace_class_of(const struct sched_job *job);
const char *trace_class_name(int cls);
const char *trace_team_name(uint32_t team);
int64_t trace_queue_default_limit(const struct trace_cluster *c, uint32_t queue);

#endif
