/* sched_fifo.h - the baseline the simulator compares anvil's scheduler with.
 *
 * Strict FIFO by submission time (then id), first-fit placement: a job takes
 * the first nodes, in snapshot order, with enough free healthy GPUs (the
 * lowest free GPU indices on each), and the first job that does not fit ends
 * the cycle. No topology, no backfill, no preemption, no quotas, no fair
 * share. Job constraints (GPU model, memory, pool, labels) are honoured, and
 * unschedulable nodes skipped, because a placement that ignores them is not
 * a placement. Same structs as sched.h, so both run the same trace.
 *
 * Like struct sched: the caller owns struct fifo; results stay valid until
 * the next fifo_cycle() or fifo_free(). Waits are not reported (nwaits 0).
 */
#ifndef ANVIL_BENCH_SCHED_FIFO_H
#define ANVIL_BENCH_SCHED_FIFO_H

#include "sched/sched.h"

struct fifo;

struct fifo *fifo_new(void);
void fifo_free(struct fifo *f);
int fifo_cycle(struct fifo *f, const struct sched_snapshot *snap, struct sched_result *out);

/* 1 if node n, with these free GPUs, meets job j's GPU count and
 * constraints (model, memory, pool, selectors). */
int fifo_node_takes(const struct sched_node *n, uint64_t free, const struct sched_job *j);

#endif
