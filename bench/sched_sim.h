/* sched_sim.h - what sched_sim.c (the trace-driven simulation and main) shares
 * with sched_micro.c (the micro-benchmarks behind the targets):
 * options, the two engines behind one interface, and measuring helpers.
 * Single-threaded, like the scheduler itself.
 */
#ifndef ANVIL_BENCH_SCHED_SIM_H
#define ANVIL_BENCH_SCHED_SIM_H

#include <stdint.h>

#include "sched/sched.h"

struct options {
	int quick, micro, sims;
	const char *scenario; /* NULL: all */
	uint64_t seed;
	int seeds;         /* > 1: seeds seed .. seed + seeds - 1, pooled */
	double load;       /* 0: each scenario's own */
	double span_hours; /* 0: each scenario's own */
};

/* anvil's sched_cycle() or the FIFO baseline, behind one set of calls. */
struct engine {
	const char *name;
	int reports_waits; /* 1: one sched_wait per job left pending, and quotas apply */
	void *(*make)(void);
	void (*drop)(void *);
	int (*cycle)(void *, const struct sched_snapshot *, struct sched_result *);
};

#define ENGINE_ANVIL 0
#define ENGINE_FIFO  1
#define NENGINES     2
extern const struct engine engines[NENGINES];
extern const struct sched_config sim_config;

int64_t cpu_ns(void);         /* this thread's CPU time */
int64_t wall_ns(void);        /* monotonic */
int64_t heap_bytes(void);     /* malloc'd and not freed, process-wide */
int64_t rss_bytes(void);      /* resident now */
int64_t peak_rss_bytes(void); /* VmHWM */
/* Nearest-rank percentile of v[0..n), which it sorts; 0 when n is 0. */
int64_t percentile(int64_t *v, int n, double pct);

/* Runs the micro-benchmarks and prints their table; returns the number of
 * contract violations found (missed targets are printed, not counted). */
int micro_all(const struct options *o);

/* Per scenario, what the summary of targets compares (filled by sched_sim.c). */
struct sim_summary {
	const char *scenario;
	int have;
	int seeds;                /* 1, or pooled over this many (--seeds) */
	int p95_wins;             /* --seeds: seeds where anvil's 8-16-node p95 <= FIFO's */
	double worst_util_margin; /* --seeds: least (anvil - FIFO) useful utilization */
	double util[NENGINES], useful_util[NENGINES]; /* --seeds: useful_util only, a mean */
	int64_t large_p50[NENGINES], large_p95[NENGINES];
	int64_t large_mean[NENGINES], large_p99[NENGINES]; /* --seeds only */
};
#define SIM_MAX_SUMMARIES 3
extern struct sim_summary sim_summaries[SIM_MAX_SUMMARIES];
/* Prints the rows of the targets table that compare the scenarios run. */
void sim_print_targets(void);

#endif
