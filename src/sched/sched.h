/* sched.h - the scheduler: a snapshot of the cluster in, decisions out.
 *
 * Pure: no I/O, no clock, no globals. The caller (server/schedule.c) builds a
 * struct sched_snapshot from its records, calls sched_cycle(), and applies
 * the decisions: start these placements, stop (preempt) these attempts, and
 * record why every other pending job waits. Same snapshot in, same decisions
 * out (deterministic: ties break on ids, never on addresses or hashes).
 *
 * Strings are interned by the caller into small integer ids (queues, teams,
 * GPU models, pools, node labels, topology domains); id 0 means "none/any".
 *
 * Policy, in the order a cycle applies it:
 *   1. Order: pending jobs by queue priority, then team fair share (recent
 *      decayed GPU-hours divided by team weight, lowest first), then job
 *      priority plus aging (priority grows with time waited), then
 *      submission time, then id. Nothing starves: a job that has waited
 *      past config.overdue_ms is overdue and goes ahead of its queue's
 *      other jobs, and past config.starve_ms it is starving and goes ahead
 *      of every queue's; overdue and starving jobs go in submission order.
 *      A gang's wait counts once per node it asks for (a 16-node gang is
 *      overdue 16 times sooner): it cannot start in the holes small jobs
 *      fill, so it is the one that would starve.
 *   2. Admission and placement are one decision: a job is admitted only if
 *      a concrete node+GPU assignment exists for all of it now AND its
 *      team's quota in the queue allows it (nominal quota, or borrowing of
 *      idle quota when the queue allows borrowing). A job that fits its
 *      quota but no node never blocks the queue: the next job is tried.
 *      An overdue job that waits for idle quota to borrow keeps what it
 *      needs of it from later borrowers of its queue (teams within their
 *      nominal quota still take theirs), and gets a reservation of nodes
 *      meanwhile, so that the nodes drain while the quota does.
 *   3. Placement: single-node jobs best fit (the node with the fewest free
 *      GPUs left over), so whole nodes stay free for gangs; a gang goes to
 *      the smallest topology domain (switch, then rack, then block) that has
 *      enough fitting nodes, best fit among domains, with ranks ordered so
 *      that neighbours share the closest domain. A gang never spans blocks;
 *      the label value 0 counts as one more value, so an unlabelled cluster
 *      is a single block (and a single switch). Within a
 *      node, GPUs come from one NVLink/NUMA group when one can hold them,
 *      and within that group from one PCIe-switch group (`near`) when one
 *      can: NVLink, then a PCIe switch, as the device plugin ranks them.
 *      Constraints: GPU model, minimum GPU memory, pool, label selectors.
 *      Unschedulable nodes and unhealthy GPUs are never used.
 *   4. Backfill: the first job in order that cannot start gets a
 *      reservation (the nodes and time at which running jobs' time limits
 *      free enough GPUs); later jobs start only if they do not delay it
 *      (they end before the reservation, or use no reserved GPU). Jobs with
 *      no time limit get their queue's default.
 *   5. Preemption: a job that cannot start may stop running attempts that
 *      are (a) lower-priority work: in a lower-priority queue, or its own
 *      team's lower-priority jobs in the same queue, or (b) another team's
 *      attempts admitted on borrowed quota in its queue, while that team is
 *      still above its nominal quota (reclaim). It happens only if stopping
 *      the chosen victims makes the job fit. Victims: first what is already
 *      stopping for it, then borrowed attempts it may reclaim, then
 *      lower-priority work, each in order of the least work lost (GPU-time
 *      since their last checkpoint; checkpointing attempts first).
 *      Reclaim is a guarantee: a job within its team's nominal quota gets
 *      borrowed GPUs back whatever the borrowers lose and however young
 *      they are (a borrower runs at that risk, as in Kueue). Priority
 *      preemption has two churn guards: an attempt younger than
 *      config.min_runtime_ms is never a victim (work just started, often a
 *      requeued victim, gets to run), and where young attempts would be
 *      needed the job waits for them rather than stop older, costlier work
 *      (sched_wait.held says so, with the time); and the loss limit: the
 *      priority victims may hold at most config.preempt_max_ratio times the
 *      GPUs the job asks for, or else lose at most config.preempt_loss_pct %
 *      of the GPU-time the job has waited. So equals always may stop each
 *      other, and a one-GPU job does not stop a 16-node gang until it has
 *      waited long. The job then holds the free part of its
 *      assignment and its quota. Holds outlive the cycle: a job that
 *      attempts are stopping_for, or whose victims stopped less than
 *      SCHED_HOLD_MS ago (held_since_ms, set by the caller), is decided
 *      before every other job, so what its victims free goes to it and not
 *      to whoever sorts first (aging or fair share can put a requeued victim
 *      ahead of it); and an attempt stopping for one pending job is never
 *      counted as freed for another. Hysteresis: a job reclaims only within
 *      its nominal quota (a borrower stops only lower-priority work: a
 *      lower queue's, or its own team's), and work admitted within nominal
 *      quota is never reclaimed, so two teams cannot preempt each other in
 *      a loop. No cascades: a job whose attempt was preempted
 *      (requeued_ms) does not preempt its own queue's work in turn, and its
 *      cost allowance counts from its requeue, not its submission. What the
 *      order let start is not stopped for what it went ahead of: an attempt
 *      whose job was overdue when it started (sched_running.submit_ms) is
 *      no victim for its own team's priority, a starving one for no
 *      priority at all (quota reclaim still applies). At most 16 jobs per
 *      cycle search for victims (bounded work).
 *   6. Estimated starts: after the decisions, a dry run in which every
 *      running attempt and every new placement ends at its time limit and
 *      nothing new arrives starts the first SCHED_EST_JOBS waiting jobs in
 *      order (or every one up to config.est_job_id, within SCHED_EST_MAX)
 *      as soon as GPUs and quota allow (each then holds them until its own
 *      limit), and sets their est_start_ms. A reserved job keeps its
 *      reservation's time (sched_wait.reserved), a preempting one gets now
 *      (it starts when its victims have stopped), and one held back only by
 *      its victims' minimum runtime the time that ends (when sooner); a job that can never run,
 *      lies beyond the window, or that no release in sight lets start gets
 *      0 (unknown). Time limits are upper bounds, so estimates lean late.
 *
 * CPU-only jobs (gpus 0) take none of the steps above but the order (cpu.c):
 * the cycle does not model CPUs or memory (a job's cpus and memory are the
 * agent's cgroup limits), so each node runs at most cpu_ranks_max CPU-only
 * ranks at once (the caller gives its CPU count), and that is all they
 * compete for. In its turn a CPU-only job goes to the eligible nodes
 * (schedulable, matching its pool and selectors; topology and blocks do not
 * matter) that run the fewest CPU-only ranks (spread; ties to the lowest
 * topology position), one rank per node, the ranks in topology order; where
 * too few eligible nodes have room, it waits (SCHED_WAIT_CPU_LIMIT) and the
 * next job is tried. They take no GPU and no quota (they count as 0 GPUs:
 * never borrowed), get no reservation and no estimated start (0), never
 * preempt, and, holding no GPU, are never a victim. So they never delay a
 * GPU job, and a GPU job never waits for them.
 *
 * Memory: struct sched owns reusable scratch space sized to the snapshot;
 * a cycle allocates only when the snapshot grows. Results stay valid until
 * the next sched_cycle() or sched_free(). One thread at a time.
 */
#ifndef ANVIL_SCHED_H
#define ANVIL_SCHED_H

#include <stddef.h>
#include <stdint.h>

#define SCHED_MAX_GPUS      64   /* per node: GPU sets are 64-bit masks */
#define SCHED_MAX_LABELS    8    /* per node */
#define SCHED_MAX_SELECTORS 4    /* per job */
#define SCHED_MAX_NVLINK    8    /* GPU groups per node */
#define SCHED_MAX_NEAR      16   /* PCIe-switch groups per node */
#define SCHED_MAX_RANKS     1024 /* nodes per job */
#define SCHED_EST_JOBS      1024 /* waiting jobs, in order, that get an estimated start */
#define SCHED_EST_MAX       4096 /* ... and at most, to reach sched_config.est_job_id */

#define SCHED_DEFAULT_MIN_RUNTIME_MS   (5 * 60 * 1000LL)   /* sched_config.min_runtime_ms */
#define SCHED_HOLD_MS                  (15 * 60 * 1000LL)  /* see sched_job.held_since_ms */
#define SCHED_DEFAULT_PREEMPT_LOSS_PCT 50                  /* sched_config.preempt_loss_pct */
#define SCHED_DEFAULT_PREEMPT_RATIO    2                   /* sched_config.preempt_max_ratio */
#define SCHED_DEFAULT_OVERDUE_MS       (30 * 60 * 1000LL)  /* sched_config.overdue_ms */
#define SCHED_DEFAULT_STARVE_MS        (4 * 3600 * 1000LL) /* sched_config.starve_ms */
#define SCHED_DEFAULT_RESTART_COST_MS  (10 * 60 * 1000LL)  /* sched_config.restart_cost_ms */
#define SCHED_DEFAULT_RESERVATIONS     4                   /* sched_config.max_reservations */

struct sched_node {
	int64_t id;
	uint32_t block, rack, sw;          /* topology domains (interned; 0 = unlabelled) */
	uint32_t pool;                     /* 0 = the default pool */
	uint32_t gpu_model;                /* interned model name */
	uint64_t gpu_mem_mib;              /* memory of each GPU */
	uint64_t gpus_all;                 /* GPUs present */
	uint64_t gpus_healthy;             /* subset of gpus_all that may be assigned */
	uint64_t gpus_free;                /* healthy and not held by a running attempt */
	uint64_t nvlink[SCHED_MAX_NVLINK]; /* GPU groups sharing NVLink/NUMA */
	int nnvlink;
	uint64_t near[SCHED_MAX_NEAR]; /* finer groups: GPUs behind one PCIe switch */
	int nnear;
	uint32_t labels[SCHED_MAX_LABELS]; /* interned "key=value" */
	int nlabels;
	int schedulable;   /* ready: not cordoned, draining, lost */
	int cpu_ranks_max; /* CPU-only ranks it may run at once (>= 0): its CPUs */
};

struct sched_queue {
	uint32_t id;
	int priority;  /* higher first */
	int weight;    /* share between queues of equal priority (>= 1) */
	int borrowing; /* teams in it may use other teams' idle quota */
	int64_t default_time_limit_ms;
};

/* A team's nominal GPUs in a queue. A team without an entry for a queue has
 * a nominal quota of 0 there (it can only borrow); a queue without any quota
 * entry is unlimited. */
struct sched_quota {
	uint32_t queue;
	uint32_t team;
	int nominal_gpus;
};

struct sched_team {
	uint32_t id;
	int weight;   /* >= 1 */
	double usage; /* decayed GPU-hours, computed by the caller */
};

struct sched_job {
	int64_t id;
	uint32_t queue, team;
	int priority;
	int64_t submit_ms;
	int gpus;              /* per node; 0: a CPU-only job (above) */
	int nodes;             /* 1..SCHED_MAX_RANKS */
	int64_t time_limit_ms; /* 0: the queue's default */
	uint32_t gpu_model;    /* 0: any */
	uint64_t min_gpu_mem_mib;
	uint32_t pool;                           /* 0: any pool */
	uint32_t selectors[SCHED_MAX_SELECTORS]; /* labels every node must carry */
	int nselectors;
	int checkpointing;
	int64_t held_since_ms; /* attempts were stopped for it at this time and it has
	                        * not started since (0: none); see SCHED_HOLD_MS */
	int64_t requeued_ms;   /* its last attempt was preempted and it went back to
	                        * the queue at this time (0: never) */
};

struct sched_rank_hold {
	int node;      /* index into snapshot nodes */
	uint64_t gpus; /* mask held on that node */
};

struct sched_running {
	int64_t attempt_id, job_id;
	uint32_t queue, team;
	int priority;
	int64_t submit_ms; /* its job's submission (0: unknown) */
	int64_t start_ms;
	int64_t end_by_ms;          /* start + time limit */
	int64_t last_checkpoint_ms; /* 0: never (loses all since start) */
	int checkpointing;
	int borrowed;         /* admitted beyond its team's nominal quota */
	int stopping;         /* already being stopped: its GPUs free up soon */
	int64_t stopping_for; /* the job it is being stopped for (0: none); that
	                       * job is decided first, so that what was taken for
	                       * it (GPUs, quota) goes to it */
	int nranks;
	const struct sched_rank_hold *ranks;
};

struct sched_config {
	int64_t aging_ms;        /* one priority point per this much waiting (0: no aging) */
	int backfill;            /* 1: reserve for the first blocked job and backfill */
	int preemption;          /* 1: allowed */
	int max_reservations;    /* blocked jobs that get a reservation (>= 1) */
	int64_t min_runtime_ms;  /* an attempt younger than this is never a victim (0: any
	                         * age); SCHED_DEFAULT_MIN_RUNTIME_MS is the usual value */
	int preempt_max_ratio;   /* priority victims holding at most this many times the
	                         * GPUs the job asks for may always be stopped (0: none
	                         * may, only preempt_loss_pct decides);
	                         * SCHED_DEFAULT_PREEMPT_RATIO */
	int preempt_loss_pct;    /* ... larger ones only if they lose at most this % of the
	                         * GPU-time the job has waited (0: no loss limit at all,
	                         * the ratio aside); SCHED_DEFAULT_PREEMPT_LOSS_PCT.
	                         * Neither applies to reclaim. */
	int64_t overdue_ms;      /* a job waiting longer goes ahead of its queue's others, in
	                         * submission order (0: never); SCHED_DEFAULT_OVERDUE_MS */
	int64_t starve_ms;       /* ... and this long ahead of every other queue's (0: never);
	                         * SCHED_DEFAULT_STARVE_MS */
	int64_t restart_cost_ms; /* what stopping an attempt costs beyond its lost work, per
	                          * GPU it holds: reloading, re-initialising, waiting again
	                          * (0: nothing); SCHED_DEFAULT_RESTART_COST_MS */
	int skip_estimate;       /* 1: no estimated starts this cycle (every est_start_ms 0
	                         * but reservations'): the dry run is the costliest part of
	                         * a cycle, and a caller that cycles on every event needs
	                         * it only now and then */
	int64_t est_job_id;      /* also estimate this waiting job where it lies beyond the
	                         * first SCHED_EST_JOBS: the dry run then takes every job
	                         * ahead of it too, up to SCHED_EST_MAX (0: none) */
};

struct sched_snapshot {
	int64_t now_ms;
	struct sched_config config;
	const struct sched_node *nodes;
	int nnodes;
	const struct sched_queue *queues;
	int nqueues;
	const struct sched_quota *quotas;
	int nquotas;
	const struct sched_team *teams;
	int nteams;
	const struct sched_running *running;
	int nrunning;
	const struct sched_job *pending;
	int npending;
};

/* Why a job did not start in this cycle. */
enum sched_reason {
	SCHED_WAIT_NONE,      /* placed */
	SCHED_WAIT_RESOURCES, /* no assignment exists now; a = fitting nodes, b = needed */
	SCHED_WAIT_TOPOLOGY, /* enough nodes, but no domain holds the gang; a = largest, b = needed */
	SCHED_WAIT_QUOTA,    /* team quota in the queue is used up; a = used, b = nominal */
	SCHED_WAIT_RESERVED,   /* would delay a reserved higher job; a = that job's id */
	SCHED_WAIT_PREEMPTING, /* victims are being stopped for it; a = attempts */
	SCHED_WAIT_UNFIT, /* no schedulable matching node could take it; a = most matching nodes
	                   * with enough usable GPUs in one block (a CPU-only job: schedulable
	                   * matching nodes, any block), b = needed */
	/* a CPU-only job: too few eligible nodes run fewer CPU-only ranks than their
	 * limit; a = those that do, b = needed, cpu_nodes = eligible nodes, cpu_limit =
	 * the limit they share (0: they differ) */
	SCHED_WAIT_CPU_LIMIT,
};

/* What holds a waiting job's GPUs and could be stopped for it. */
#define SCHED_BLOCK_PRIORITY 1 /* lower-priority work */
#define SCHED_BLOCK_BORROWED 2 /* another team's borrowed quota, to reclaim */

/* Why the preemption that would make a job fit does not happen yet. */
enum sched_held {
	SCHED_HELD_NONE,
	SCHED_HELD_YOUNG, /* victims it needs are younger than the minimum runtime:
	                   * until held_until_ms */
	SCHED_HELD_LOSS,  /* the loss limit: victims of held_gpus GPUs for what it asks */
};

struct sched_wait {
	int64_t job_id;
	enum sched_reason reason;
	int64_t a, b;
	int64_t blockers;      /* attempts holding what it needs that it may stop (RESOURCES,
	                        * TOPOLOGY), or that are stopping for it (PREEMPTING) */
	int64_t blocker_job;   /* the job of the first of them (the cheapest to stop) */
	int64_t blocker_gpus;  /* GPUs they hold on nodes it could use */
	int blocker_kind;      /* SCHED_BLOCK_* bits */
	uint32_t blocker_team; /* BORROWED: the borrowing team, if one (0: several) */
	enum sched_held held;
	int64_t held_until_ms; /* HELD_YOUNG: when the last victim it needs comes of age */
	int64_t held_gpus;     /* HELD_LOSS: GPUs the priority victims hold */
	int64_t est_start_ms;  /* estimated start (0: unknown): its reservation's time if
	                        * `reserved`, else the estimate's dry run (sched_cycle()) */
	int reserved;          /* GPUs are reserved for it from est_start_ms on */
	int64_t most_free;     /* RESOURCES, UNFIT: most free (usable) GPUs on one matching node */
	int64_t idle_quota;    /* QUOTA: idle GPUs of the queue to borrow; -1: no borrowing */
	int64_t cpu_nodes;     /* CPU_LIMIT: eligible nodes */
	int64_t cpu_limit;     /* CPU_LIMIT: their limit of CPU-only ranks (0: not one) */
};

struct sched_placement {
	int64_t job_id;
	int borrowed; /* admitted on borrowed quota */
	int nranks;
	const struct sched_rank_hold *ranks; /* rank order */
};

struct sched_preemption {
	int64_t attempt_id;
	int64_t for_job_id;
	int reclaim; /* 1: quota reclaim; 0: priority */
};

struct sched_result {
	const struct sched_placement *placements;
	int nplacements;
	const struct sched_preemption *preemptions;
	int npreemptions;
	const struct sched_wait *waits; /* one per pending job not placed, in order */
	int nwaits;
};

struct sched;

struct sched *sched_new(void);
void sched_free(struct sched *s);

/* One scheduling cycle. 0, or ERR_INVALID for a malformed snapshot (an index
 * out of range, a mask beyond a node's GPUs, a negative cpu_ranks_max, a job
 * outside the limits that sched_fits_ever() checks). Unknown queue or team
 * ids get defaults: priority 0, weight 1, no quota, no borrowing. A
 * CPU-only job's GPU model and memory, which sched_fits_ever() refuses,
 * still narrow its nodes here. */
int sched_cycle(struct sched *s, const struct sched_snapshot *snap, struct sched_result *out);

/* 0 if job could ever run on these nodes (all GPUs healthy and free, every
 * node schedulable, constraints applied, a gang within one block; a
 * CPU-only job: enough nodes of its pool and selectors with a
 * cpu_ranks_max of at least 1, any block); ERR_UNFIT with the reason in why
 * ("asks for 16 GPUs per node, but the largest matching node has 8")
 * otherwise, or ERR_INVALID for a job outside the limits above (gpus
 * 0..64, nodes 1..1024, selectors 0..4) or a CPU-only job that asks for a
 * GPU model or GPU memory. Used at submission so a job that can never run
 * is rejected. */
int sched_fits_ever(const struct sched_node *nodes, int nnodes, const struct sched_job *job,
                    char *why, size_t whylen);

/* The string interned as id (borrowed, valid until the caller's names
 * change), or NULL. */
typedef const char *(*sched_name_fn)(void *ctx, uint32_t id);

/* Plain words for a wait, e.g. "needs 2 GPUs on one node; the most free on a
 * matching node is 0; job 1 (lower priority) holds 2 GPUs it could use, and
 * may be preempted at 20:46:00 UTC, when its minimum runtime ends". name
 * (may be NULL) names teams; without it they are "team #ID". */
void sched_wait_text(const struct sched_wait *w, const struct sched_job *job, sched_name_fn name,
                     void *ctx, char *out, size_t outlen);

/* Decays a usage figure: usage * 0.5^(elapsed / half_life). */
double sched_decay(double usage, int64_t elapsed_ms, int64_t half_life_ms);

#endif
