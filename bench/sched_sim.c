/* sched_sim.c - trace-driven simulator for the scheduler (src/sched/sched.h).
 *
 *   sched_sim [--quick] [--scenario ref|1k|10k|all] [--seed N] [--seeds N]
 *             [--load X] [--span-hours H] [--no-micro] [--micro-only]
 *             [--log-preemptions]
 *
 * Runs the real sched_cycle() and the FIFO first-fit baseline (sched_fifo.c)
 * over the same generated trace (sched_trace.c) in virtual time, and prints
 * one table per scenario: placements per second of scheduler CPU, cycle
 * latency, scheduler memory, GPU utilization, queue waits by job size and by
 * team, preemptions and lost work, the reclaim delay (below). Then the
 * micro-benchmarks behind the targets, each with met / not met.
 *
 * The simulation: arrivals come from the trace; a cycle runs at the first
 * multiple of `gap` after any event (arrival, completion, a preempted attempt
 * having stopped) and at least every `tick` while jobs wait. Placements start
 * attempts at the cycle's time; an attempt completes after its remaining
 * work; a preemption marks the attempt stopping, and `grace` later its GPUs
 * free and the job is requeued (same submission time) with its remaining
 * work less what its last checkpoint saved. Only the scheduler call is timed
 * (CLOCK_THREAD_CPUTIME_ID); building snapshots and checking results is not.
 *
 * Reclaim delay: a job that its team could take within its nominal quota
 * when it was submitted (reclaim_due()) should start within the victims'
 * grace plus one cycle, whoever borrowed the quota meanwhile. Both are
 * modelled: the grace is GRACE_MS, and an arrival gets a cycle within one
 * `gap` (the stop of the victims, at a multiple of `gap` too, gets one at
 * once), so the target printed is GRACE_MS + gap. The figure is submission
 * to first start, counted once per job (a requeued job is not submitted
 * again), for jobs submitted in the window; one never started counts with
 * its wait so far and is counted apart, as the other waits are.
 *
 * Every result is checked against the contract in sched.h before it is
 * applied: a double booking, a GPU that is unhealthy or on an unschedulable
 * node, a broken constraint, a wrong rank count, an unknown or twice-placed
 * job, a bad preemption or a missing wait is printed as a VIOLATION line
 * (scenario, seed, engine, cycle, virtual time) and counted; the run goes on
 * without applying that decision.
 */
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/mem.h"
#include "sched/sched.h"
#include "sched_fifo.h"
#include "sched_sim.h"
#include "sched_trace.h"

#define SEC_MS               1000LL
#define MIN_MS               (60 * SEC_MS)
#define HOUR_MS              (60 * MIN_MS)
#define DAY_MS               (24 * HOUR_MS)
#define GRACE_MS             (30 * SEC_MS) /* a preempted attempt's stop time */
#define CKPT_EVERY_MS        (30 * MIN_MS) /* checkpointing jobs save this often */
#define VICTIMS_RECLAIM      1             /* reclaim_wait.victims: a quota reclaim */
#define VICTIMS_PRIORITY     2             /* ... a priority preemption */
#define USAGE_HALF_LIFE_MS   (24 * HOUR_MS)
#define MAX_VIOLATIONS_SHOWN 20

/* ---- measuring ---- */

int64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Bytes malloc has handed out and not had back (arenas and mmap'd chunks). */
int64_t heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();
	return (int64_t)mi.uordblks + (int64_t)mi.hblkhd;
}

int64_t rss_bytes(void)
{
	char line[128], *end;
	int64_t resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f)) {
		strtoll(line, &end, 10); /* size, then resident pages */
		resident = strtoll(end, NULL, 10);
	}
	fclose(f);
	return resident * sysconf(_SC_PAGESIZE);
}

int64_t peak_rss_bytes(void)
{
	char line[256];
	int64_t kib = 0;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmHWM:", 6) == 0) {
			kib = strtoll(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return kib * 1024;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of v[0..n) (sorted in place); 0 when empty. */
int64_t percentile(int64_t *v, int n, double pct)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	int k = (int)ceil(pct / 100.0 * n) - 1;
	return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* ---- engines: the scheduler under test and the baseline ---- */

static void *anvil_make(void)
{
	return sched_new();
}

static void anvil_drop(void *s)
{
	sched_free(s);
}

static int anvil_cycle(void *s, const struct sched_snapshot *snap, struct sched_result *out)
{
	return sched_cycle(s, snap, out);
}

static void *fifo_make(void)
{
	return fifo_new();
}

static void fifo_drop(void *f)
{
	fifo_free(f);
}

static int fifo_cycle_any(void *f, const struct sched_snapshot *snap, struct sched_result *out)
{
	return fifo_cycle(f, snap, out);
}

const struct engine engines[NENGINES] = {
        {"anvil", 1, anvil_make, anvil_drop, anvil_cycle},
        {"FIFO", 0, fifo_make, fifo_drop, fifo_cycle_any},
};
const struct sched_config sim_config = {.aging_ms = 30 * MIN_MS,
                                        .backfill = 1,
                                        .preemption = 1,
                                        .max_reservations = SCHED_DEFAULT_RESERVATIONS,
                                        .min_runtime_ms = SCHED_DEFAULT_MIN_RUNTIME_MS,
                                        .preempt_max_ratio = SCHED_DEFAULT_PREEMPT_RATIO,
                                        .preempt_loss_pct = SCHED_DEFAULT_PREEMPT_LOSS_PCT,
                                        .overdue_ms = SCHED_DEFAULT_OVERDUE_MS,
                                        .starve_ms = SCHED_DEFAULT_STARVE_MS,
                                        .restart_cost_ms = SCHED_DEFAULT_RESTART_COST_MS};

/* ---- scenarios ---- */

struct scenario {
	const char *name, *title;
	struct trace_params trace;
	int64_t warm_ms; /* waits and utilization count from here to the span's end */
	int64_t gap_ms, tick_ms;
	int64_t quick_span_ms, quick_warm_ms; /* 0: skipped by --quick */
};

/* The cluster starts empty and durations reach 24 h, so the first day is a
 * warm-up: waits and utilization count only from warm_ms on. */
static const struct scenario scenarios[] = {
        {"ref",
         "reference fleet: 10 x 8 A100 + 18 x 8 H200 (224 GPUs)",
         {"ref", 10, 18, 4, 2, 3, 0.0, 0.0, 8 * DAY_MS, 1.0, 1},
         DAY_MS,
         1 * SEC_MS,
         60 * SEC_MS,
         3 * DAY_MS,
         DAY_MS},
        {"1k",
         "1,000 nodes x 8 GPUs (360 A100 + 640 H200)",
         {"1k", 360, 640, 32, 4, 8, 0.005, 0.002, 3 * DAY_MS, 1.0, 1},
         DAY_MS,
         10 * SEC_MS,
         60 * SEC_MS,
         36 * HOUR_MS,
         DAY_MS},
        {"10k",
         "10,000 nodes x 8 GPUs (3,600 A100 + 6,400 H200)",
         {"10k", 3600, 6400, 32, 4, 8, 0.005, 0.002, 3 * DAY_MS, 1.0, 1},
         DAY_MS,
         30 * SEC_MS,
         60 * SEC_MS,
         0,
         0},
};
#define NSCENARIOS 3

/* ---- the simulation ---- */

enum { EV_COMPLETE, EV_STOPPED };

struct event {
	int64_t t;
	int64_t attempt;
	int type;
};

/* One job that its team could take within its nominal quota when it was
 * submitted (reclaim_due()): how long it took to start. */
struct reclaim_wait {
	int64_t ms; /* first start - submission; never started: the span's end - submission */
	int64_t from_reclaim_ms; /* first start - the first reclaim for it (-1: none) */
	uint32_t queue;          /* the job's */
	int victims; /* VICTIMS_* bits: attempts stopped for it before its first start */
	int started; /* within the span */
};

struct report {
	int64_t cycles, placements, preemptions, violations, completed, max_pending;
	int64_t cycle_cpu_ns, cycle_p50_ns, cycle_p99_ns, cycle_max_ns;
	int64_t sched_heap_peak; /* bytes the engine held, most at once */
	double util, useful_util, lost_gpu_h, busy_gpu_h, carried_gpu_h;
	int64_t wait_p50[TRACE_NCLASSES + TRACE_NTEAMS], wait_p95[TRACE_NCLASSES + TRACE_NTEAMS];
	int64_t *class_waits[TRACE_NCLASSES]; /* every wait of the class (malloc'd; for --seeds) */
	int waited[TRACE_NCLASSES + TRACE_NTEAMS], unstarted[TRACE_NCLASSES + TRACE_NTEAMS];
	int64_t wait_reasons[SCHED_WAIT_UNFIT + 1]; /* job-cycles, by reason */
	int64_t reclaims, young_victims, repeat_preemptors;
	int64_t est_cycles, est_known; /* waiting job-cycles, and those with an estimate */
	int64_t est_err_p50, est_by;   /* |error| of first estimates; starts by them */
	int est_n;
	struct reclaim_wait *reclaim; /* malloc'd; none for an engine without quotas */
	int nreclaim;
	int64_t reclaim_target_ms; /* the victims' grace plus one cycle */
	double wall_s;
};

struct sim {
	const struct scenario *sc;
	const struct engine *eng;
	void *engine_state;
	uint64_t seed;
	int64_t span_ms, warm_ms;
	const struct trace_cluster *cl;
	const struct trace_job *jobs;
	int njobs, next_arrival;
	struct sched_node *nodes; /* mutable copy: gpus_free changes */

	/* per job (index = id - 1) */
	int64_t *remaining, *first_start;
	int64_t *first_reclaim; /* the first reclaim for it before its first start (-1: none) */
	int *pend_pos;          /* index in pend, or -1 */
	int *done;
	int64_t *placed_in;         /* cycle that placed it (checks) */
	int64_t *preempted_for;     /* last cycle that preempted for it, or -1 */
	int64_t *held_since;        /* last preemption for it since it last started, or 0 */
	int64_t *requeued;          /* when its last attempt was preempted, or 0 */
	unsigned char *reclaim_due; /* within its team's nominal quota when submitted */
	unsigned char *victims_for; /* VICTIMS_* bits: stopped for it before its first start */

	/* running attempts; slot_of[attempt id - 1] = index in run, or -1 */
	struct sched_running *run;
	int *run_job;
	int nrun, caprun;
	int *slot_of;
	int64_t nattempts, capattempts;

	struct sched_job *pend;
	int npend, cappend;

	struct event *heap;
	int nheap, capheap;

	double usage[TRACE_NTEAMS + 1];
	int team_gpus[TRACE_NTEAMS + 1];
	int64_t usage_at;
	/* GPUs held against quota, by queue and team: attempts already stopping
	 * do not count (sched.c gives their quota back at once). */
	int used[TRACE_NQUEUES + 1][TRACE_NTEAMS + 1];
	int borrowed[TRACE_NQUEUES + 1][TRACE_NTEAMS + 1]; /* of which borrowed */

	int64_t *node_stamp; /* per node: last (cycle * 2048 + placement) that used it */
	int64_t cycle_no, now;
	int64_t *cycle_ns;
	int ncycle_ns, capcycle_ns;
	int64_t heap_held;
	double busy_gpu_ms, lost_gpu_ms;
	double lost_window_gpu_ms; /* of busy_gpu_ms: the part that preemptions threw away */
	double carried_gpu_ms;     /* of busy_gpu_ms: held by jobs submitted before the window */
	int64_t *est_first;        /* per job: its first estimated start, or 0 */
	int64_t *est_err;          /* |first start - first estimate| of jobs started */
	int nest_err;
	struct report rep;
};

static int log_preemptions; /* --log-preemptions: one stderr line each */

static void violation(struct sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void violation(struct sim *s, const char *fmt, ...)
{
	if (s->rep.violations++ >= MAX_VIOLATIONS_SHOWN)
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr,
	        "sched_sim: VIOLATION scenario=%s seed=%llu engine=%s cycle=%lld now_ms=%lld: %s\n",
	        s->sc->name, (unsigned long long)s->seed, s->eng->name, (long long)s->cycle_no,
	        (long long)s->now, msg);
}

static int ev_before(const struct event *a, const struct event *b)
{
	if (a->t != b->t)
		return a->t < b->t;
	if (a->type != b->type)
		return a->type < b->type;
	return a->attempt < b->attempt;
}

static void heap_push(struct sim *s, struct event e)
{
	XGROW(s->heap, s->nheap, s->capheap);
	int i = s->nheap++;
	while (i > 0 && ev_before(&e, &s->heap[(i - 1) / 2])) {
		s->heap[i] = s->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	s->heap[i] = e;
}

static struct event heap_pop(struct sim *s)
{
	struct event top = s->heap[0], last = s->heap[--s->nheap];
	int i = 0;
	for (;;) {
		int c = 2 * i + 1;
		if (c >= s->nheap)
			break;
		if (c + 1 < s->nheap && ev_before(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!ev_before(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (s->nheap > 0)
		s->heap[i] = last;
	return top;
}

static void pend_add(struct sim *s, int j)
{
	XGROW(s->pend, s->npend, s->cappend);
	s->pend[s->npend] = s->jobs[j].spec;
	s->pend_pos[j] = s->npend++;
	if (s->npend > s->rep.max_pending)
		s->rep.max_pending = s->npend;
}

/* Drops the jobs placed in this cycle from pend, keeping the order. */
static void pend_compact(struct sim *s)
{
	int k = 0;
	for (int i = 0; i < s->npend; i++) {
		int j = (int)s->pend[i].id - 1;
		if (s->pend_pos[j] < 0)
			continue;
		s->pend[k] = s->pend[i];
		s->pend_pos[j] = k++;
	}
	s->npend = k;
}

static int64_t overlap(int64_t a, int64_t b, int64_t lo, int64_t hi)
{
	a = a > lo ? a : lo;
	b = b < hi ? b : hi;
	return b > a ? b - a : 0;
}

static int attempt_gpus(const struct sched_running *r)
{
	int g = 0;
	for (int i = 0; i < r->nranks; i++)
		g += __builtin_popcountll(r->ranks[i].gpus);
	return g;
}

/* Ends the attempt in slot at time t: frees its GPUs, accounts its GPU-time,
 * and either finishes its job or (preempted) requeues it. */
static void attempt_end(struct sim *s, int slot, int64_t t, int preempted)
{
	struct sched_running *r = &s->run[slot];
	int j = s->run_job[slot];
	int gpus = attempt_gpus(r);
	for (int i = 0; i < r->nranks; i++) {
		struct sched_node *n = &s->nodes[r->ranks[i].node];
		if (n->gpus_free & r->ranks[i].gpus)
			violation(s, "attempt %lld frees GPUs already free on node %lld",
			          (long long)r->attempt_id, (long long)n->id);
		n->gpus_free |= r->ranks[i].gpus;
	}
	double held = (double)gpus * (double)overlap(r->start_ms, t, s->warm_ms, s->span_ms);
	s->busy_gpu_ms += held;
	if (s->jobs[j].spec.submit_ms < s->warm_ms)
		s->carried_gpu_ms += held;
	s->team_gpus[r->team] -= gpus;
	if (!r->stopping) {
		s->used[r->queue][r->team] -= gpus;
		if (r->borrowed)
			s->borrowed[r->queue][r->team] -= gpus;
	}
	if (preempted) {
		int64_t ran = t - r->start_ms;
		int64_t saved = r->checkpointing ? ran / CKPT_EVERY_MS * CKPT_EVERY_MS : 0;
		s->remaining[j] -= saved;
		s->lost_gpu_ms += (double)gpus * (double)(ran - saved);
		/* what ran since the last checkpoint is lost; count the part of it
		 * that busy_gpu_ms counts (inside the window) */
		s->lost_window_gpu_ms += (double)gpus * (double)overlap(r->start_ms + saved, t,
		                                                        s->warm_ms, s->span_ms);
		s->requeued[j] = t;
		pend_add(s, j);
	} else {
		s->done[j] = 1;
		if (t <= s->span_ms)
			s->rep.completed++;
	}
	s->slot_of[r->attempt_id - 1] = -1;
	free((void *)r->ranks);
	int last = --s->nrun;
	if (slot != last) {
		s->run[slot] = s->run[last];
		s->run_job[slot] = s->run_job[last];
		s->slot_of[s->run[slot].attempt_id - 1] = slot;
	}
}

static int node_ok_for(const struct sched_node *n, const struct sched_job *j)
{
	if ((j->gpu_model && n->gpu_model != j->gpu_model) || n->gpu_mem_mib < j->min_gpu_mem_mib ||
	    (j->pool && n->pool != j->pool))
		return 0;
	for (int i = 0; i < j->nselectors; i++) {
		int has = 0;
		for (int l = 0; l < n->nlabels; l++)
			has |= n->labels[l] == j->selectors[i];
		if (!has)
			return 0;
	}
	return 1;
}

static int quota_of(const struct sim *s, uint32_t queue, uint32_t team, int *nominal)
{
	int any = 0;
	*nominal = 0;
	for (int i = 0; i < s->cl->nquotas; i++) {
		if (s->cl->quotas[i].queue != queue)
			continue;
		any = 1;
		if (s->cl->quotas[i].team == team)
			*nominal = s->cl->quotas[i].nominal_gpus;
	}
	return any;
}

static const struct sched_queue *queue_of(const struct sim *s, uint32_t id)
{
	for (int i = 0; i < TRACE_NQUEUES; i++)
		if (s->cl->queues[i].id == id)
			return &s->cl->queues[i];
	return NULL;
}

/* 0 if placement p may be applied to the current state, else prints why. */
static int placement_check(struct sim *s, const struct sched_placement *p, int index)
{
	int j = (int)p->job_id - 1;
	if (j < 0 || j >= s->njobs || s->pend_pos[j] < 0) {
		violation(s, "placement of job %lld, which is not pending", (long long)p->job_id);
		return -1;
	}
	if (s->placed_in[j] == s->cycle_no) {
		violation(s, "job %lld placed twice in one cycle", (long long)p->job_id);
		return -1;
	}
	const struct sched_job *job = &s->jobs[j].spec;
	if (p->nranks != job->nodes || !p->ranks) {
		violation(s, "job %lld: %d ranks for a %d-node job", (long long)p->job_id,
		          p->nranks, job->nodes);
		return -1;
	}
	int64_t stamp = s->cycle_no * 4194304 + index;
	for (int r = 0; r < p->nranks; r++) {
		int ni = p->ranks[r].node;
		uint64_t m = p->ranks[r].gpus;
		if (ni < 0 || ni >= s->cl->nnodes) {
			violation(s, "job %lld rank %d: node index %d out of range",
			          (long long)p->job_id, r, ni);
			return -1;
		}
		const struct sched_node *n = &s->nodes[ni];
		const char *why = NULL;
		if (s->node_stamp[ni] == stamp)
			why = "two ranks on one node";
		else if (__builtin_popcountll(m) != job->gpus)
			why = "wrong GPU count";
		else if (!n->schedulable)
			why = "node not schedulable";
		else if (m & ~n->gpus_healthy)
			why = "unhealthy or absent GPU";
		else if (m & ~n->gpus_free)
			why = "GPU already held (double booking)";
		else if (!node_ok_for(n, job))
			why = "node breaks the job's constraints";
		else if (n->block != s->nodes[p->ranks[0].node].block)
			why = "a gang across blocks (a block is a fabric island)";
		if (why) {
			violation(s, "job %lld rank %d on node %lld mask %#llx (free %#llx): %s",
			          (long long)p->job_id, r, (long long)n->id, (unsigned long long)m,
			          (unsigned long long)n->gpus_free, why);
			return -1;
		}
		s->node_stamp[ni] = stamp;
	}
	const struct sched_queue *q = queue_of(s, job->queue);
	int nominal, gpus = job->gpus * job->nodes;
	int has_quota = quota_of(s, job->queue, job->team, &nominal);
	if (!s->eng->reports_waits)
		return 0; /* the baseline has no quotas */
	if (p->borrowed && q && !q->borrowing)
		violation(s,
		          "job %lld admitted on borrowed quota in queue %u, which does not borrow",
		          (long long)p->job_id, job->queue);
	else if (has_quota && q && !q->borrowing && s->used[job->queue][job->team] + gpus > nominal)
		violation(s, "job %lld takes team %u to %d GPUs in queue %u, over its quota %d",
		          (long long)p->job_id, job->team, s->used[job->queue][job->team] + gpus,
		          job->queue, nominal);
	else if (has_quota && !p->borrowed &&
	         s->used[job->queue][job->team] - s->borrowed[job->queue][job->team] + gpus >
	                 nominal)
		violation(s,
		          "job %lld not marked borrowed, but team %u's unborrowed GPUs in queue "
		          "%u reach %d > nominal %d",
		          (long long)p->job_id, job->team, job->queue,
		          s->used[job->queue][job->team] - s->borrowed[job->queue][job->team] +
		                  gpus,
		          nominal);
	return 0;
}

static void placement_apply(struct sim *s, const struct sched_placement *p)
{
	int j = (int)p->job_id - 1;
	const struct sched_job *job = &s->jobs[j].spec;
	struct sched_rank_hold *ranks = xmalloc(sizeof(*ranks) * (size_t)p->nranks);
	memcpy(ranks, p->ranks, sizeof(*ranks) * (size_t)p->nranks);
	for (int r = 0; r < p->nranks; r++)
		s->nodes[ranks[r].node].gpus_free &= ~ranks[r].gpus;
	int64_t limit = job->time_limit_ms ? job->time_limit_ms
	                                   : trace_queue_default_limit(s->cl, job->queue);
	XGROW(s->run, s->nrun, s->caprun);
	s->run_job = xrealloc(s->run_job, sizeof(*s->run_job) * (size_t)s->caprun);
	if (s->nattempts >= s->capattempts) {
		s->capattempts = s->capattempts ? 2 * s->capattempts : 1024;
		s->slot_of = xrealloc(s->slot_of, sizeof(*s->slot_of) * (size_t)s->capattempts);
	}
	int64_t id = ++s->nattempts;
	s->slot_of[id - 1] = s->nrun;
	s->run_job[s->nrun] = j;
	s->run[s->nrun++] = (struct sched_running){.attempt_id = id,
	                                           .job_id = job->id,
	                                           .queue = job->queue,
	                                           .team = job->team,
	                                           .priority = job->priority,
	                                           .submit_ms = job->submit_ms,
	                                           .start_ms = s->now,
	                                           .end_by_ms = s->now + limit,
	                                           .checkpointing = job->checkpointing,
	                                           .borrowed = p->borrowed,
	                                           .nranks = p->nranks,
	                                           .ranks = ranks};
	int gpus = job->gpus * job->nodes;
	s->team_gpus[job->team] += gpus;
	s->used[job->queue][job->team] += gpus;
	if (p->borrowed)
		s->borrowed[job->queue][job->team] += gpus;
	if (s->first_start[j] < 0) {
		s->first_start[j] = s->now;
		int64_t e = s->est_first[j] - s->now;
		if (s->est_first[j] > 0 && job->submit_ms >= s->warm_ms) {
			s->est_err[s->nest_err++] = e < 0 ? -e : e;
			s->rep.est_by += e >= 0;
		}
	}
	s->pend_pos[j] = -1;
	s->held_since[j] = 0;
	s->placed_in[j] = s->cycle_no;
	s->rep.placements++;
	heap_push(s, (struct event){s->now + s->remaining[j], id, EV_COMPLETE});
}

static void preemption_apply(struct sim *s, const struct sched_preemption *pe)
{
	int64_t a = pe->attempt_id;
	int slot = a >= 1 && a <= s->nattempts ? s->slot_of[a - 1] : -1;
	int j = (int)pe->for_job_id - 1;
	if (slot < 0) {
		violation(s, "preempts attempt %lld, which is not running", (long long)a);
		return;
	}
	struct sched_running *r = &s->run[slot];
	if (r->stopping) {
		violation(s, "preempts attempt %lld, which is already stopping", (long long)a);
		return;
	}
	if (j < 0 || j >= s->njobs || (s->pend_pos[j] < 0 && s->placed_in[j] != s->cycle_no)) {
		violation(s, "preempts attempt %lld for job %lld, which is not pending",
		          (long long)a, (long long)pe->for_job_id);
		return;
	}
	const struct sched_job *job = &s->jobs[j].spec;
	const struct sched_queue *vq = queue_of(s, r->queue), *jq = queue_of(s, job->queue);
	if (pe->reclaim && !r->borrowed)
		violation(s, "reclaim preempts attempt %lld, which is not borrowed", (long long)a);
	else if (!pe->reclaim && vq && jq &&
	         (vq->priority > jq->priority ||
	          (vq->priority == jq->priority && r->priority >= job->priority)))
		violation(s,
		          "attempt %lld (queue %u, priority %d) preempted for job %lld (queue %u, "
		          "priority %d), which does not outrank it",
		          (long long)a, r->queue, r->priority, (long long)job->id, job->queue,
		          job->priority);
	r->stopping = 1;
	r->stopping_for = pe->for_job_id; /* as the server does, from its preemption record */
	int gpus = attempt_gpus(r);
	s->used[r->queue][r->team] -= gpus;
	if (r->borrowed)
		s->borrowed[r->queue][r->team] -= gpus;
	s->rep.preemptions++;
	s->rep.reclaims += pe->reclaim;
	if (s->now - r->start_ms < 10 * MIN_MS)
		s->rep.young_victims++;
	if (s->preempted_for[j] != s->cycle_no && s->preempted_for[j] >= 0)
		s->rep.repeat_preemptors++; /* preempted for in an earlier cycle too */
	s->preempted_for[j] = s->cycle_no;
	s->held_since[j] = s->now; /* as the server records it, until the job starts */
	if (s->first_start[j] < 0) {
		s->victims_for[j] |= pe->reclaim ? VICTIMS_RECLAIM : VICTIMS_PRIORITY;
		if (pe->reclaim && s->first_reclaim[j] < 0)
			s->first_reclaim[j] = s->now;
	}
	if (log_preemptions) {
		int64_t ran = s->now + GRACE_MS - r->start_ms;
		int64_t saved = r->checkpointing ? ran / CKPT_EVERY_MS * CKPT_EVERY_MS : 0;
		fprintf(stderr,
		        "preempt t=%.3fh cycle=%lld attempt=%lld (job %lld q%u team %u prio %d%s%s "
		        "%d GPUs ran %llds, loses %.1f GPU-h) for job %lld (q%u team %u prio %d, "
		        "%dx%d)%s\n",
		        (double)s->now / HOUR_MS, (long long)s->cycle_no, (long long)a,
		        (long long)r->job_id, r->queue, r->team, r->priority,
		        r->borrowed ? " borrowed" : "", r->checkpointing ? " ckpt" : "", gpus,
		        (long long)((s->now - r->start_ms) / SEC_MS),
		        (double)gpus * (double)(ran - saved) / HOUR_MS, (long long)job->id,
		        job->queue, job->team, job->priority, job->nodes, job->gpus,
		        pe->reclaim ? " reclaim" : "");
	}
	heap_push(s, (struct event){s->now + GRACE_MS, a, EV_STOPPED});
}

static void waits_check(struct sim *s, const struct sched_result *res)
{
	int expect = s->npend; /* placed jobs were already taken out of pend_pos */
	if (res->nwaits != expect) {
		violation(s, "%d waits for %d jobs left pending", res->nwaits, expect);
		return;
	}
	for (int i = 0; i < res->nwaits; i++) {
		const struct sched_wait *w = &res->waits[i];
		int j = (int)w->job_id - 1;
		if (j < 0 || j >= s->njobs || s->pend_pos[j] < 0) {
			violation(s, "a wait for job %lld, which is not left pending",
			          (long long)w->job_id);
			return;
		}
		if (w->reason == SCHED_WAIT_NONE || w->reason > SCHED_WAIT_UNFIT) {
			violation(s, "job %lld waits for reason %d", (long long)w->job_id,
			          (int)w->reason);
			continue;
		}
		/* The trace holds only jobs that fit the cluster (sched_trace.c). */
		if (w->reason == SCHED_WAIT_UNFIT)
			violation(s, "job %lld called unfit (a=%lld), but it fits the cluster",
			          (long long)w->job_id, (long long)w->a);
		s->rep.wait_reasons[w->reason]++;
		if (s->jobs[j].spec.submit_ms >= s->warm_ms && s->now <= s->span_ms) {
			s->rep.est_cycles++;
			s->rep.est_known += w->est_start_ms > 0;
		}
		if (!s->est_first[j] && s->first_start[j] < 0)
			s->est_first[j] = w->est_start_ms;
	}
}

/* Fair share and checkpoints as the server would compute them. */
static void snapshot_refresh(struct sim *s)
{
	double f = pow(0.5, (double)(s->now - s->usage_at) / (double)USAGE_HALF_LIFE_MS);
	for (int t = 1; t <= TRACE_NTEAMS; t++)
		s->usage[t] = s->usage[t] * f +
		              s->team_gpus[t] * (double)(s->now - s->usage_at) / (double)HOUR_MS;
	s->usage_at = s->now;
	for (int i = 0; i < s->nrun; i++) {
		struct sched_running *r = &s->run[i];
		int64_t k = r->checkpointing ? (s->now - r->start_ms) / CKPT_EVERY_MS : 0;
		r->last_checkpoint_ms = k > 0 ? r->start_ms + k * CKPT_EVERY_MS : 0;
	}
}

static void run_cycle(struct sim *s)
{
	snapshot_refresh(s);
	for (int i = 0; i < s->npend; i++) {
		s->pend[i].held_since_ms = s->held_since[s->pend[i].id - 1];
		s->pend[i].requeued_ms = s->requeued[s->pend[i].id - 1];
	}
	struct sched_team teams[TRACE_NTEAMS];
	for (int t = 0; t < TRACE_NTEAMS; t++) {
		teams[t] = s->cl->teams[t];
		teams[t].usage = s->usage[t + 1];
	}
	struct sched_snapshot snap = {.now_ms = s->now,
	                              .config = sim_config,
	                              .nodes = s->nodes,
	                              .nnodes = s->cl->nnodes,
	                              .queues = s->cl->queues,
	                              .nqueues = TRACE_NQUEUES,
	                              .quotas = s->cl->quotas,
	                              .nquotas = s->cl->nquotas,
	                              .teams = teams,
	                              .nteams = TRACE_NTEAMS,
	                              .running = s->run,
	                              .nrunning = s->nrun,
	                              .pending = s->pend,
	                              .npending = s->npend};
	struct sched_result res = {0};
	s->cycle_no++;
	int64_t h0 = heap_bytes();
	int64_t t0 = cpu_ns();
	int rc = s->eng->cycle(s->engine_state, &snap, &res);
	int64_t dt = cpu_ns() - t0;
	s->heap_held += heap_bytes() - h0;
	if (s->heap_held > s->rep.sched_heap_peak)
		s->rep.sched_heap_peak = s->heap_held;
	XGROW(s->cycle_ns, s->ncycle_ns, s->capcycle_ns);
	s->cycle_ns[s->ncycle_ns++] = dt;
	s->rep.cycle_cpu_ns += dt;
	if (rc != 0) {
		violation(
		        s,
		        "cycle returned %d on a valid snapshot (%d nodes, %d running, %d pending)",
		        rc, snap.nnodes, snap.nrunning, snap.npending);
		return;
	}
	/* Victims first: a stopping attempt's quota is given back at once, and a
	 * job of the victim's team may be admitted on it in the same cycle. */
	for (int i = 0; i < res.npreemptions; i++)
		preemption_apply(s, &res.preemptions[i]);
	for (int i = 0; i < res.nplacements; i++)
		if (placement_check(s, &res.placements[i], i) == 0)
			placement_apply(s, &res.placements[i]);
	pend_compact(s);
	if (s->eng->reports_waits)
		waits_check(s, &res);
}

/* Whether job j, arriving now, is one its team could take within its
 * nominal quota in its queue: the queue has quotas, and the team's GPUs
 * there (running attempts not stopping, as sched.c counts them, plus what
 * its pending jobs hold while their victims stop or lately stopped, see
 * SCHED_HOLD_MS) plus the job's own come to at most its nominal quota.
 * Earlier pending jobs of the team hold nothing and are not counted: a job
 * behind its own team's sweep may qualify and still wait for it. Only for
 * an engine that applies quotas. */
static int reclaim_due(const struct sim *s, int j)
{
	const struct sched_job *job = &s->jobs[j].spec;
	int nominal;
	if (!s->eng->reports_waits || !quota_of(s, job->queue, job->team, &nominal))
		return 0;
	int held = 0;
	for (int i = 0; i < s->npend; i++) {
		const struct sched_job *p = &s->pend[i];
		int64_t since = s->held_since[p->id - 1];
		if (p->queue == job->queue && p->team == job->team && since > 0 &&
		    job->submit_ms - since < SCHED_HOLD_MS)
			held += p->gpus * p->nodes;
	}
	return s->used[job->queue][job->team] + held + job->gpus * job->nodes <= nominal;
}

/* Events at or before t, in time order. 1 if any happened. */
static int events_until(struct sim *s, int64_t t)
{
	int any = 0;
	for (;;) {
		int64_t ta = s->next_arrival < s->njobs ? s->jobs[s->next_arrival].spec.submit_ms
		                                        : INT64_MAX;
		int64_t te = s->nheap ? s->heap[0].t : INT64_MAX;
		if (ta > t && te > t)
			return any;
		any = 1;
		if (ta <= te) {
			int j = s->next_arrival++;
			s->remaining[j] = s->jobs[j].duration_ms;
			s->reclaim_due[j] = reclaim_due(s, j);
			pend_add(s, j);
			continue;
		}
		struct event e = heap_pop(s);
		int slot = s->slot_of[e.attempt - 1];
		if (slot < 0)
			continue; /* completed while stopping, or stopped before completing */
		s->now = e.t;
		attempt_end(s, slot, e.t, e.type == EV_STOPPED);
	}
}

static int64_t next_event(const struct sim *s)
{
	int64_t ta =
	        s->next_arrival < s->njobs ? s->jobs[s->next_arrival].spec.submit_ms : INT64_MAX;
	int64_t te = s->nheap ? s->heap[0].t : INT64_MAX;
	return ta < te ? ta : te;
}

static void sim_loop(struct sim *s)
{
	int64_t gap = s->sc->gap_ms, tick = s->sc->tick_ms, last = -tick, t = 0;
	while (t <= s->span_ms) {
		int dirty = events_until(s, t);
		s->now = t;
		if (s->npend > 0 && (dirty || t - last >= tick)) {
			run_cycle(s);
			last = t;
		}
		int64_t ne = next_event(s);
		int64_t next = ne == INT64_MAX ? INT64_MAX : (ne + gap - 1) / gap * gap;
		if (s->npend > 0 && last + tick < next)
			next = last + tick;
		t = next > t + gap ? next : t + gap;
	}
}

static void wait_stats(struct sim *s)
{
	int64_t *w = xmalloc(sizeof(*w) * (size_t)s->njobs);
	for (int g = 0; g < TRACE_NCLASSES + TRACE_NTEAMS; g++) {
		int n = 0, unstarted = 0;
		for (int j = 0; j < s->njobs; j++) {
			const struct trace_job *tj = &s->jobs[j];
			int group = g < TRACE_NCLASSES ? tj->cls
			                               : TRACE_NCLASSES + (int)tj->spec.team - 1;
			if (group != g || tj->spec.submit_ms < s->warm_ms ||
			    tj->spec.submit_ms >= s->span_ms)
				continue;
			/* A job still waiting counts with the wait so far: leaving it out
			 * would flatter whichever scheduler starves it. */
			int64_t start = s->first_start[j];
			if (start < 0 || start > s->span_ms) {
				start = s->span_ms;
				unstarted++;
			}
			w[n++] = start - tj->spec.submit_ms;
		}
		s->rep.waited[g] = n;
		s->rep.unstarted[g] = unstarted;
		if (g < TRACE_NCLASSES) {
			s->rep.class_waits[g] = xmalloc(sizeof(*w) * (size_t)(n + 1));
			memcpy(s->rep.class_waits[g], w, sizeof(*w) * (size_t)n);
		}
		s->rep.wait_p50[g] = percentile(w, n, 50);
		s->rep.wait_p95[g] = percentile(w, n, 95);
	}
	free(w);
}

/* The reclaim delay of every job reclaim_due() picked at its submission in
 * the window, once each (its first start), into s->rep.reclaim. */
static void reclaim_waits(struct sim *s)
{
	struct reclaim_wait *v = xmalloc(sizeof(*v) * (size_t)(s->njobs + 1));
	int n = 0;
	for (int j = 0; j < s->njobs; j++) {
		const struct sched_job *job = &s->jobs[j].spec;
		if (!s->reclaim_due[j] || job->submit_ms < s->warm_ms ||
		    job->submit_ms >= s->span_ms)
			continue;
		int64_t start = s->first_start[j];
		int started = start >= 0 && start <= s->span_ms;
		v[n++] = (struct reclaim_wait){
		        .ms = (started ? start : s->span_ms) - job->submit_ms,
		        .queue = job->queue,
		        .from_reclaim_ms = started && s->first_reclaim[j] >= 0
		                                   ? start - s->first_reclaim[j]
		                                   : -1,
		        .victims = s->victims_for[j],
		        .started = started};
	}
	s->rep.reclaim = v;
	s->rep.nreclaim = n;
	s->rep.reclaim_target_ms = GRACE_MS + s->sc->gap_ms;
}

static void sim_init(struct sim *s, const struct scenario *sc, const struct engine *eng,
                     const struct trace_cluster *cl, const struct trace_job *jobs, int njobs,
                     int64_t span, int64_t warm, uint64_t seed)
{
	memset(s, 0, sizeof(*s));
	s->sc = sc;
	s->eng = eng;
	s->cl = cl;
	s->jobs = jobs;
	s->njobs = njobs;
	s->span_ms = span;
	s->warm_ms = warm;
	s->seed = seed;
	s->nodes = xmalloc(sizeof(*s->nodes) * (size_t)cl->nnodes);
	memcpy(s->nodes, cl->nodes, sizeof(*s->nodes) * (size_t)cl->nnodes);
	s->node_stamp = xcalloc((size_t)cl->nnodes, sizeof(*s->node_stamp));
	for (int i = 0; i < cl->nnodes; i++)
		s->node_stamp[i] = -1;
	s->remaining = xcalloc((size_t)njobs, sizeof(*s->remaining));
	s->first_start = xmalloc(sizeof(*s->first_start) * (size_t)njobs);
	s->placed_in = xmalloc(sizeof(*s->placed_in) * (size_t)njobs);
	s->preempted_for = xmalloc(sizeof(*s->preempted_for) * (size_t)njobs);
	s->held_since = xcalloc((size_t)njobs, sizeof(*s->held_since));
	s->requeued = xcalloc((size_t)njobs, sizeof(*s->requeued));
	s->reclaim_due = xcalloc((size_t)njobs, sizeof(*s->reclaim_due));
	s->victims_for = xcalloc((size_t)njobs, sizeof(*s->victims_for));
	s->first_reclaim = xmalloc(sizeof(*s->first_reclaim) * (size_t)njobs);
	s->est_first = xcalloc((size_t)njobs, sizeof(*s->est_first));
	s->est_err = xmalloc(sizeof(*s->est_err) * (size_t)(njobs + 1));
	s->pend_pos = xmalloc(sizeof(*s->pend_pos) * (size_t)njobs);
	s->done = xcalloc((size_t)njobs, sizeof(*s->done));
	for (int j = 0; j < njobs; j++) {
		s->first_start[j] = -1;
		s->first_reclaim[j] = -1;
		s->placed_in[j] = -1;
		s->preempted_for[j] = -1;
		s->pend_pos[j] = -1;
	}
}

static void sim_cleanup(struct sim *s)
{
	for (int i = 0; i < s->nrun; i++)
		free((void *)s->run[i].ranks);
	free(s->nodes);
	free(s->node_stamp);
	free(s->remaining);
	free(s->first_start);
	free(s->first_reclaim);
	free(s->placed_in);
	free(s->preempted_for);
	free(s->held_since);
	free(s->requeued);
	free(s->reclaim_due);
	free(s->victims_for);
	free(s->est_first);
	free(s->est_err);
	free(s->pend_pos);
	free(s->done);
	free(s->run);
	free(s->run_job);
	free(s->slot_of);
	free(s->pend);
	free(s->heap);
	free(s->cycle_ns);
}

static void simulate(const struct scenario *sc, const struct engine *eng,
                     const struct trace_cluster *cl, const struct trace_job *jobs, int njobs,
                     int64_t span, int64_t warm, uint64_t seed, struct report *out)
{
	struct sim s;
	int64_t w0 = wall_ns();
	sim_init(&s, sc, eng, cl, jobs, njobs, span, warm, seed);
	int64_t h0 = heap_bytes();
	s.engine_state = eng->make();
	s.heap_held = heap_bytes() - h0;
	sim_loop(&s);
	for (int i = 0; i < s.nrun; i++) {
		const struct sched_running *r = &s.run[i];
		double held =
		        (double)attempt_gpus(r) * (double)overlap(r->start_ms, span, warm, span);
		s.busy_gpu_ms += held;
		if (s.jobs[s.run_job[i]].spec.submit_ms < warm)
			s.carried_gpu_ms += held;
	}
	wait_stats(&s);
	reclaim_waits(&s);
	s.rep.est_n = s.nest_err;
	s.rep.est_err_p50 = percentile(s.est_err, s.nest_err, 50);
	s.rep.cycles = s.ncycle_ns;
	int64_t total = s.rep.cycle_cpu_ns;
	s.rep.cycle_max_ns = percentile(s.cycle_ns, s.ncycle_ns, 100);
	s.rep.cycle_p50_ns = percentile(s.cycle_ns, s.ncycle_ns, 50);
	s.rep.cycle_p99_ns = percentile(s.cycle_ns, s.ncycle_ns, 99);
	s.rep.cycle_cpu_ns = total;
	s.rep.util = s.busy_gpu_ms / ((double)cl->gpus * (double)(span - warm));
	s.rep.useful_util =
	        (s.busy_gpu_ms - s.lost_window_gpu_ms) / ((double)cl->gpus * (double)(span - warm));
	s.rep.busy_gpu_h = s.busy_gpu_ms / (double)HOUR_MS;
	s.rep.carried_gpu_h = s.carried_gpu_ms / (double)HOUR_MS;
	s.rep.lost_gpu_h = s.lost_gpu_ms / (double)HOUR_MS;
	eng->drop(s.engine_state);
	s.rep.wall_s = (double)(wall_ns() - w0) / 1e9;
	*out = s.rep;
	sim_cleanup(&s);
}

/* ---- printing ---- */

static const char *fmt_dur(char *buf, size_t len, int64_t ms)
{
	if (ms < MIN_MS)
		snprintf(buf, len, "%llds", (long long)(ms / SEC_MS));
	else if (ms < 2 * HOUR_MS)
		snprintf(buf, len, "%.0fm", (double)ms / MIN_MS);
	else
		snprintf(buf, len, "%.1fh", (double)ms / HOUR_MS);
	return buf;
}

static const char *fmt_bytes(char *buf, size_t len, int64_t b)
{
	if (b < 10 * 1024)
		snprintf(buf, len, "%lld B", (long long)b);
	else if (b < 10 * 1024 * 1024)
		snprintf(buf, len, "%.0f KiB", (double)b / 1024);
	else
		snprintf(buf, len, "%.0f MiB", (double)b / (1024 * 1024));
	return buf;
}

/* Which of a run's reclaim waits a figure takes. */
enum { RW_ALL, RW_PROD, RW_RESEARCH, RW_RECLAIMED, RW_FROM_RECLAIM, RW_PRIORITY, RW_NKINDS };
static const char *const rw_names[RW_NKINDS] = {"all",
                                                "queue prod",
                                                "queue research",
                                                "a reclaim for them",
                                                "the same, from the first reclaim for them",
                                                "only priority preemption for them"};

struct reclaim_stats {
	int n, unstarted;
	int after_reclaim, after_priority; /* started after a reclaim for it; after only
	                                    * priority preemptions for it */
	int64_t p50, p90, p99, max;
};

static void reclaim_stats_of(const struct reclaim_wait *v, int n, int kind,
                             struct reclaim_stats *out)
{
	int64_t *ms = xmalloc(sizeof(*ms) * (size_t)(n + 1));
	*out = (struct reclaim_stats){0};
	for (int i = 0; i < n; i++) {
		if ((kind == RW_PROD && v[i].queue != TRACE_Q_PROD) ||
		    (kind == RW_RESEARCH && v[i].queue != TRACE_Q_RESEARCH) ||
		    (kind == RW_RECLAIMED && !(v[i].victims & VICTIMS_RECLAIM)) ||
		    (kind == RW_FROM_RECLAIM && v[i].from_reclaim_ms < 0) ||
		    (kind == RW_PRIORITY && v[i].victims != VICTIMS_PRIORITY))
			continue;
		ms[out->n++] = kind == RW_FROM_RECLAIM ? v[i].from_reclaim_ms : v[i].ms;
		out->unstarted += !v[i].started;
		out->after_reclaim += v[i].started && (v[i].victims & VICTIMS_RECLAIM);
		out->after_priority += v[i].started && v[i].victims == VICTIMS_PRIORITY;
	}
	out->p50 = percentile(ms, out->n, 50);
	out->p90 = percentile(ms, out->n, 90);
	out->p99 = percentile(ms, out->n, 99);
	out->max = percentile(ms, out->n, 100);
	free(ms);
}

static void row(const char *label, const char *a, const char *b)
{
	printf("| %-58s | %20s | %20s |\n", label, a, b);
}

static void print_report(const struct report r[NENGINES])
{
	char a[64], b[64], x[32], y[32];
	row("", "anvil", "FIFO first-fit");
	printf("| ---------------------------------------------------------- | "
	       "-------------------- | "
	       "-------------------- |\n");
#define BOTH(label, ...)                                                                           \
	do {                                                                                       \
		for (int e_ = 0; e_ < NENGINES; e_++) {                                            \
			const struct report *R = &r[e_];                                           \
			snprintf(e_ ? b : a, sizeof(a), __VA_ARGS__);                              \
		}                                                                                  \
		row(label, a, b);                                                                  \
	} while (0)
	BOTH("placements / s of scheduler CPU", "%.0f",
	     R->cycle_cpu_ns ? (double)R->placements * 1e9 / (double)R->cycle_cpu_ns : 0.0);
	BOTH("cycles", "%lld", (long long)R->cycles);
	BOTH("cycle CPU p50 / p99 (ms)", "%.3f / %.3f", (double)R->cycle_p50_ns / 1e6,
	     (double)R->cycle_p99_ns / 1e6);
	BOTH("cycle CPU max (ms)", "%.3f", (double)R->cycle_max_ns / 1e6);
	BOTH("scheduler heap, peak", "%s", fmt_bytes(x, sizeof(x), R->sched_heap_peak));
	BOTH("GPU utilization (GPUs held)", "%.1f %%", 100.0 * R->util);
	BOTH("useful GPU utilization (less work lost)", "%.1f %%", 100.0 * R->useful_util);
	BOTH("GPU-h in the window: jobs submitted in it / before", "%.0f / %.0f",
	     R->busy_gpu_h - R->carried_gpu_h, R->carried_gpu_h);
	BOTH("attempts started / jobs completed", "%lld / %lld", (long long)R->placements,
	     (long long)R->completed);
	BOTH("most jobs pending at once", "%lld", (long long)R->max_pending);
	for (int g = 0; g < TRACE_NCLASSES + TRACE_NTEAMS; g++) {
		char label[64];
		if (g < TRACE_NCLASSES)
			snprintf(label, sizeof(label), "wait p50 / p95: %s", trace_class_name(g));
		else
			snprintf(label, sizeof(label), "wait p50 / p95: team %s",
			         trace_team_name((uint32_t)(g - TRACE_NCLASSES + 1)));
		BOTH(label, "%s / %s%s", fmt_dur(x, sizeof(x), R->wait_p50[g]),
		     fmt_dur(y, sizeof(y), R->wait_p95[g]), R->unstarted[g] ? " *" : "");
	}
	BOTH("jobs never started (*)", "%d of %d",
	     R->unstarted[0] + R->unstarted[1] + R->unstarted[2] + R->unstarted[3],
	     R->waited[0] + R->waited[1] + R->waited[2] + R->waited[3]);
	for (int e = 0; e < NENGINES; e++) {
		const struct report *R = &r[e];
		int64_t n = 0;
		for (int k = 0; k <= SCHED_WAIT_UNFIT; k++)
			n += R->wait_reasons[k];
		if (!n) {
			snprintf(e ? b : a, sizeof(a), "-");
			continue;
		}
		snprintf(e ? b : a, sizeof(a), "%.0f/%.0f/%.0f/%.0f/%.0f %%",
		         100.0 * R->wait_reasons[SCHED_WAIT_RESOURCES] / n,
		         100.0 * R->wait_reasons[SCHED_WAIT_TOPOLOGY] / n,
		         100.0 * R->wait_reasons[SCHED_WAIT_QUOTA] / n,
		         100.0 * R->wait_reasons[SCHED_WAIT_RESERVED] / n,
		         100.0 * R->wait_reasons[SCHED_WAIT_PREEMPTING] / n);
	}
	row("wait reasons: resources/topology/quota/reserved/preempting", a, b);
	for (int e = 0; e < NENGINES; e++) {
		const struct report *R = &r[e];
		if (!R->est_cycles)
			snprintf(e ? b : a, sizeof(a), "-");
		else
			snprintf(e ? b : a, sizeof(a), "%.0f %% / %.0f %% / %s",
			         100.0 * (double)R->est_known / (double)R->est_cycles,
			         R->est_n ? 100.0 * (double)R->est_by / R->est_n : 0.0,
			         fmt_dur(x, sizeof(x), R->est_err_p50));
	}
	row("start estimates: known / met by first one / its error p50", a, b);
	BOTH("preemptions (of which quota reclaims)", "%lld (%lld)", (long long)R->preemptions,
	     (long long)R->reclaims);
	BOTH("victims that had run < 10 min", "%lld", (long long)R->young_victims);
	BOTH("preemptions for a job already preempted for", "%lld",
	     (long long)R->repeat_preemptors);
	BOTH("lost work (GPU-h, % of busy)", "%.0f (%.1f %%)", R->lost_gpu_h,
	     R->busy_gpu_h > 0 ? 100.0 * R->lost_gpu_h / R->busy_gpu_h : 0.0);
	struct reclaim_stats rs[NENGINES];
	for (int e = 0; e < NENGINES; e++)
		reclaim_stats_of(r[e].reclaim, r[e].nreclaim, RW_ALL, &rs[e]);
	char label[64], z[32];
	snprintf(label, sizeof(label), "reclaim delay p50 / p99 / max (target: grace + cycle %s)",
	         fmt_dur(x, sizeof(x), r[ENGINE_ANVIL].reclaim_target_ms));
	for (int e = 0; e < NENGINES; e++)
		if (!engines[e].reports_waits) /* no quotas: nothing to reclaim */
			snprintf(e ? b : a, sizeof(a), "-");
		else
			snprintf(e ? b : a, sizeof(a), "%s / %s / %s%s",
			         fmt_dur(x, sizeof(x), rs[e].p50), fmt_dur(y, sizeof(y), rs[e].p99),
			         fmt_dur(z, sizeof(z), rs[e].max), rs[e].unstarted ? " *" : "");
	row(label, a, b);
	for (int e = 0; e < NENGINES; e++)
		if (!engines[e].reports_waits)
			snprintf(e ? b : a, sizeof(a), "-");
		else
			snprintf(e ? b : a, sizeof(a), "%d (%d) / %d, %d", rs[e].n, rs[e].unstarted,
			         rs[e].after_reclaim, rs[e].after_priority);
	row("reclaim delay: jobs (never started) / after reclaim, prio", a, b);
	BOTH("contract violations", "%lld", (long long)R->violations);
	BOTH("simulation wall time (s)", "%.1f", R->wall_s);
#undef BOTH
}

struct sim_summary sim_summaries[SIM_MAX_SUMMARIES];

/* One seed of a scenario with both engines into r[] (free with
 * report_free()); prints the scenario's header when `header`. */
static void run_seed(const struct scenario *sc, const struct options *o, uint64_t seed, int header,
                     struct report r[NENGINES])
{
	struct trace_params tp = sc->trace;
	int64_t span = o->quick ? sc->quick_span_ms : tp.span_ms;
	int64_t warm = o->quick ? sc->quick_warm_ms : sc->warm_ms;
	if (o->span_hours > 0) {
		span = (int64_t)(o->span_hours * HOUR_MS);
		warm = span / 3;
	}
	tp.span_ms = span;
	tp.seed = seed;
	if (o->load > 0)
		tp.load = o->load;
	struct trace_cluster cl;
	struct trace_job *jobs;
	trace_cluster_make(&tp, &cl);
	int njobs = trace_jobs_make(&tp, &cl, &jobs);
	int cls_n[TRACE_NCLASSES] = {0};
	double demand = 0;
	for (int j = 0; j < njobs; j++) {
		cls_n[jobs[j].cls]++;
		demand += (double)jobs[j].duration_ms * jobs[j].spec.gpus * jobs[j].spec.nodes;
	}
	if (header) {
		printf("seed %llu; %.0f h simulated (waits and utilization from hour %.0f); "
		       "offered load %.2f (the trace's GPU-time / the fleet's: %.2f); %d jobs "
		       "(%d 1-GPU incl. sweeps, %d 8-GPU, %d 2-4-node, %d 8-16-node); "
		       "%d nodes, %d GPUs (%d usable); a cycle at most every %llds after an event, "
		       "and every %llds while jobs wait\n\n",
		       (unsigned long long)tp.seed, (double)span / HOUR_MS, (double)warm / HOUR_MS,
		       tp.load, demand / ((double)cl.gpus * (double)span), njobs, cls_n[0],
		       cls_n[1], cls_n[2], cls_n[3], cl.nnodes, cl.gpus, cl.gpus_usable,
		       (long long)(sc->gap_ms / SEC_MS), (long long)(sc->tick_ms / SEC_MS));
		fflush(stdout);
	}
	for (int e = 0; e < NENGINES; e++)
		simulate(sc, &engines[e], &cl, jobs, njobs, span, warm, tp.seed, &r[e]);
	free(jobs);
	trace_cluster_cleanup(&cl);
}

static void report_free(struct report r[NENGINES])
{
	for (int e = 0; e < NENGINES; e++) {
		for (int c = 0; c < TRACE_NCLASSES; c++)
			free(r[e].class_waits[c]);
		free(r[e].reclaim);
	}
}

static double mean_of(const int64_t *v, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += (double)v[i];
	return n ? sum / n : 0;
}

/* Waits of one class and engine, pooled over seeds. */
struct pool {
	int64_t *v;
	int n, cap;
};

static void pool_add(struct pool *p, const int64_t *v, int n)
{
	if (p->n + n > p->cap) {
		p->cap = 2 * (p->n + n);
		p->v = xrealloc(p->v, sizeof(*p->v) * (size_t)p->cap);
	}
	memcpy(p->v + p->n, v, sizeof(*v) * (size_t)n);
	p->n += n;
}

/* anvil's reclaim delay pooled over n seeds (v, nv: every seed's waits),
 * with the scenario's target: p50 and p99 within the grace plus a cycle. */
static void print_reclaim_pool(const struct reclaim_wait *v, int nv, int seeds, int64_t target)
{
	char t[32], p50[32], p90[32], p99[32], mx[32];
	fmt_dur(t, sizeof(t), target);
	printf("\nReclaim delay of anvil pooled over the %d seeds: submission to first start "
	       "of the jobs that their team could take within its nominal quota in their queue "
	       "when submitted (the team's running and held GPUs there plus the job's <= "
	       "nominal); a job never started counts with its wait so far. Target: p50 and p99 "
	       "within the victims' grace plus one cycle, %llds + %llds = %s.\n\n",
	       seeds, (long long)(GRACE_MS / SEC_MS), (long long)((target - GRACE_MS) / SEC_MS), t);
	printf("| reclaim delay | jobs | never started | started after a reclaim / only priority "
	       "preemption for it | p50 | p90 | p99 | max | p50, p99 <= %s |\n"
	       "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
	       t);
	for (int k = 0; k < RW_NKINDS; k++) {
		struct reclaim_stats rs;
		reclaim_stats_of(v, nv, k, &rs);
		printf("| %s | %d | %d | %d / %d | %s | %s | %s | %s | %s |\n", rw_names[k], rs.n,
		       rs.unstarted, rs.after_reclaim, rs.after_priority,
		       fmt_dur(p50, sizeof(p50), rs.p50), fmt_dur(p90, sizeof(p90), rs.p90),
		       fmt_dur(p99, sizeof(p99), rs.p99), fmt_dur(mx, sizeof(mx), rs.max),
		       !rs.n                                  ? "-"
		       : rs.p50 <= target && rs.p99 <= target ? "met"
		                                              : "NOT met");
	}
}

/* --seeds N: the scenario on N seeds, a line each, then every class's waits
 * pooled over all of them (a 40-job class's p95 on one seed is its second
 * longest wait: it moves by many hours between seeds, the pool does not). */
static int64_t run_seeds(const struct scenario *sc, int index, const struct options *o)
{
	char a[32], b[32], c[32], d[32];
	struct pool pool[NENGINES][TRACE_NCLASSES] = {{{0}}};
	double util[NENGINES] = {0}, worst = 1e9, lost_h = 0, busy_h = 0;
	int wins = 0;
	int64_t violations = 0, preemptions = 0, reclaims = 0, target = 0;
	struct reclaim_wait *rw = NULL;
	int nrw = 0;
	printf("\n### %s, seeds %llu-%llu\n\n", sc->title, (unsigned long long)o->seed,
	       (unsigned long long)(o->seed + (uint64_t)o->seeds - 1));
	printf("| seed | useful utilization anvil / FIFO | 8-16-node wait p50 anvil / FIFO | "
	       "p95 anvil / FIFO | anvil preemptions (reclaims) / lost work | violations |\n"
	       "| --- | --- | --- | --- | --- | --- |\n");
	for (int k = 0; k < o->seeds; k++) {
		uint64_t seed = o->seed + (uint64_t)k;
		struct report r[NENGINES];
		run_seed(sc, o, seed, 0, r);
		const struct report *A = &r[ENGINE_ANVIL], *F = &r[ENGINE_FIFO];
		int g = TRACE_CLASS_GANG_L;
		printf("| %llu | %.2f %% / %.2f %% | %s / %s | %s / %s | %lld (%lld) / %.1f %% | "
		       "%lld |\n",
		       (unsigned long long)seed, 100 * A->useful_util, 100 * F->useful_util,
		       fmt_dur(a, sizeof(a), A->wait_p50[g]), fmt_dur(b, sizeof(b), F->wait_p50[g]),
		       fmt_dur(c, sizeof(c), A->wait_p95[g]), fmt_dur(d, sizeof(d), F->wait_p95[g]),
		       (long long)A->preemptions, (long long)A->reclaims,
		       A->busy_gpu_h > 0 ? 100.0 * A->lost_gpu_h / A->busy_gpu_h : 0.0,
		       (long long)(A->violations + F->violations));
		preemptions += A->preemptions;
		reclaims += A->reclaims;
		lost_h += A->lost_gpu_h;
		busy_h += A->busy_gpu_h;
		target = A->reclaim_target_ms;
		rw = xrealloc(rw, sizeof(*rw) * (size_t)(nrw + A->nreclaim + 1));
		memcpy(rw + nrw, A->reclaim, sizeof(*rw) * (size_t)A->nreclaim);
		nrw += A->nreclaim;
		fflush(stdout);
		wins += A->wait_p95[g] <= F->wait_p95[g];
		double margin = A->useful_util - F->useful_util;
		worst = margin < worst ? margin : worst;
		for (int e = 0; e < NENGINES; e++) {
			util[e] += r[e].useful_util / o->seeds;
			for (int cl = 0; cl < TRACE_NCLASSES; cl++)
				pool_add(&pool[e][cl], r[e].class_waits[cl], r[e].waited[cl]);
		}
		violations += A->violations + F->violations;
		report_free(r);
	}
	printf("\nWaits pooled over the %d seeds (jobs submitted in each window; a job never "
	       "started counts with its wait so far):\n\n",
	       o->seeds);
	printf("| class | engine | jobs | mean | p50 | p90 | p95 | p99 | max |\n"
	       "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
	struct sim_summary *sum = &sim_summaries[index];
	*sum = (struct sim_summary){.scenario = sc->name,
	                            .have = 1,
	                            .seeds = o->seeds,
	                            .p95_wins = wins,
	                            .worst_util_margin = worst};
	for (int cl = 0; cl < TRACE_NCLASSES; cl++)
		for (int e = 0; e < NENGINES; e++) {
			struct pool *p = &pool[e][cl];
			char p50[32], p90[32], p95[32], p99[32], mx[32], mean[32];
			int64_t m = (int64_t)mean_of(p->v, p->n);
			int64_t q50 = percentile(p->v, p->n, 50), q95 = percentile(p->v, p->n, 95);
			int64_t q99 = percentile(p->v, p->n, 99);
			printf("| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n",
			       trace_class_name(cl), engines[e].name, p->n,
			       fmt_dur(mean, sizeof(mean), m), fmt_dur(p50, sizeof(p50), q50),
			       fmt_dur(p90, sizeof(p90), percentile(p->v, p->n, 90)),
			       fmt_dur(p95, sizeof(p95), q95), fmt_dur(p99, sizeof(p99), q99),
			       fmt_dur(mx, sizeof(mx), percentile(p->v, p->n, 100)));
			if (cl == TRACE_CLASS_GANG_L) {
				sum->large_mean[e] = m;
				sum->large_p50[e] = q50;
				sum->large_p95[e] = q95;
				sum->large_p99[e] = q99;
			}
			free(p->v);
		}
	for (int e = 0; e < NENGINES; e++)
		sum->useful_util[e] = util[e]; /* mean useful utilization; util[] stays 0 */
	printf("\nanvil over the %d seeds: mean useful utilization %.2f %% (FIFO %.2f %%); "
	       "preemptions %lld (of which quota reclaims %lld); lost work %.0f GPU-h (%.2f %% of "
	       "busy)\n",
	       o->seeds, 100 * util[ENGINE_ANVIL], 100 * util[ENGINE_FIFO], (long long)preemptions,
	       (long long)reclaims, lost_h, busy_h > 0 ? 100.0 * lost_h / busy_h : 0.0);
	print_reclaim_pool(rw, nrw, o->seeds, target);
	free(rw);
	fflush(stdout);
	return violations;
}

/* Simulates one scenario with both engines and prints its table (or, with
 * --seeds, its pooled tables); returns the number of contract violations. */
static int64_t run_scenario(const struct scenario *sc, int index, const struct options *o)
{
	if (o->seeds > 1)
		return run_seeds(sc, index, o);
	printf("\n### %s\n\n", sc->title);
	struct report r[NENGINES];
	run_seed(sc, o, o->seed, 1, r);
	print_report(r);
	fflush(stdout);
	struct sim_summary *sum = &sim_summaries[index];
	*sum = (struct sim_summary){.scenario = sc->name, .have = 1, .seeds = 1};
	for (int e = 0; e < NENGINES; e++) {
		sum->util[e] = r[e].util;
		sum->useful_util[e] = r[e].useful_util;
		sum->large_p50[e] = r[e].wait_p50[TRACE_CLASS_GANG_L];
		sum->large_p95[e] = r[e].wait_p95[TRACE_CLASS_GANG_L];
	}
	report_free(r);
	return r[ENGINE_ANVIL].violations + r[ENGINE_FIFO].violations;
}

static void usage(void)
{
	fprintf(stderr, "usage: sched_sim [--quick] [--scenario ref|1k|10k|all] [--seed N] "
	                "[--seeds N] [--load X] [--span-hours H] [--no-micro] [--micro-only] "
	                "[--log-preemptions]\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
	*o = (struct options){.micro = 1, .sims = 1, .seed = 1, .seeds = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick"))
			o->quick = 1;
		else if (!strcmp(a, "--no-micro"))
			o->micro = 0;
		else if (!strcmp(a, "--log-preemptions"))
			log_preemptions = 1;
		else if (!strcmp(a, "--micro-only"))
			o->sims = 0;
		else if (!strcmp(a, "--scenario") && v && ++i)
			o->scenario = strcmp(v, "all") ? v : NULL;
		else if (!strcmp(a, "--seed") && v && ++i)
			o->seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--seeds") && v && ++i)
			o->seeds = atoi(v);
		else if (!strcmp(a, "--load") && v && ++i)
			o->load = strtod(v, NULL);
		else if (!strcmp(a, "--span-hours") && v && ++i)
			o->span_hours = strtod(v, NULL);
		else
			return -1;
	}
	if (o->seeds < 1 || o->seeds > 1000)
		return -1;
	if (o->seeds > 1)
		o->micro = 0; /* the micro-benchmarks do not depend on the trace's seed */
	if (o->scenario) {
		int known = 0;
		for (int i = 0; i < NSCENARIOS; i++)
			known |= !strcmp(o->scenario, scenarios[i].name);
		if (!known)
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct options o;
	if (parse_args(argc, argv, &o) < 0) {
		usage();
		return 2;
	}
	int64_t w0 = wall_ns();
	printf("## sched_sim%s, seed %llu\n", o.quick ? " --quick" : "",
	       (unsigned long long)o.seed);
	int64_t violations = 0;
	if (o.sims)
		for (int i = 0; i < NSCENARIOS; i++) {
			const struct scenario *sc = &scenarios[i];
			if (o.scenario ? strcmp(o.scenario, sc->name) != 0
			               : o.quick && !sc->quick_span_ms)
				continue;
			violations += run_scenario(sc, i, &o);
		}
	if (o.micro) {
		violations += micro_all(&o);
	} else if (o.sims) {
		printf("\n### Targets (simulations only)\n\n| target | figure | |\n| --- | --- | "
		       "--- |\n");
		sim_print_targets();
	}
	printf("\npeak RSS of the whole process (trace, simulator and both engines): %.0f MiB; "
	       "wall time %.1f s\n",
	       (double)peak_rss_bytes() / (1024 * 1024), (double)(wall_ns() - w0) / 1e9);
	return violations ? 1 : 0;
}
