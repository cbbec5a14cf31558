/* sched_int.h - the scheduler's internals, shared by its files (sched.c,
 * fit.c, plan.c, cpu.c, sched_text.c). Nothing outside src/sched includes it.
 *
 * The cycle keeps one live view of the cluster: free[i], the GPUs of node i
 * that nobody holds, has reserved or has been given in this cycle. Every
 * change to it goes through fit_set_free(), which keeps the node indexes of
 * all active constraint classes in step (buckets by free count and
 * per-domain counts), and logs the old mask when an undo mark is open so that
 * a dry run (reservation, preemption, backfill) can be rolled back exactly.
 *
 * Topology: nodes are sorted by (block, rack, switch, id) when the nodes'
 * static fields change (else the order, domains, classes and slots are kept
 * from the last cycle; struct sched_nodekey), so
 * every domain is a contiguous range of that order and the children of a
 * domain are contiguous domain numbers one level down. Level 0 is a switch
 * (block, rack, sw), level 1 a rack (block, rack), level 2 a block. The label
 * value 0 is one more value ("unlabelled"), so an unlabelled cluster is a
 * single block, rack and switch. A gang never spans blocks.
 */
#ifndef ANVIL_SCHED_INT_H
#define ANVIL_SCHED_INT_H

#include <stdint.h>

#include "sched/sched.h"

#define SCHED_LEVELS        3         /* switch, rack, block */
#define SCHED_SLOTS         32        /* constraint classes indexed at once */
#define SCHED_PREEMPT_TRIES 16        /* jobs per cycle that may search for victims */
#define SCHED_NEVER         INT64_MAX /* an end time that never comes */
#define SCHED_MAX_CLASSES   4096      /* kept across cycles; more start afresh */

/* One set of constraints that jobs share. */
struct sched_class {
	uint32_t model, pool;
	uint64_t mem;
	uint32_t sel[SCHED_MAX_SELECTORS]; /* sorted, so equal sets compare equal */
	int nsel;
	int slot; /* index in s->slots while indexed, else -1 */
	/* Per GPU count g: the most matching nodes in one block with at least g
	 * usable GPUs (-1: not computed yet); and the most usable GPUs on one
	 * matching node (-1: not computed). Both depend only on the nodes'
	 * static fields, so they live as long as the class does. */
	int unfit_best[SCHED_MAX_GPUS + 1];
	int unfit_most;
	/* CPU-only jobs of this class (cpu.c), while cpu_cycle is s->cycle: the
	 * eligible nodes, the limit they share (0: they differ), and the heap of
	 * those with room, s->cpu_heap[cpu_off .. cpu_off + cpu_n) */
	uint64_t cpu_cycle;
	int cpu_eligible, cpu_limit, cpu_off, cpu_n;
};

/* The node index of one class: nodes that match it, bucketed by free count,
 * and per domain the number of matching nodes with at least g free GPUs.
 * A bucket is a bitmap over topology positions with a summary word per 64
 * words, so its first node is the lowest position (found in O(n / 4096)):
 * best-fit ties always go the same way, whatever order the nodes entered
 * the bucket in, and the slot can live across cycles. */
struct sched_slot {
	int cls;        /* -1: unused */
	uint64_t tick;  /* last use, for LRU replacement */
	uint64_t *bits; /* bucket g at bits + g * stride: nw position words, then summary */
	int nw, stride;
	int count[SCHED_MAX_GPUS + 1];
	int *dom;                    /* [domain * (gmax + 1) + g] */
	int tot[SCHED_MAX_GPUS + 1]; /* matching nodes with >= g free */
	int bitcap, domcap;
};

/* What of a node the topology order, the domains, the classes and the
 * slots depend on: while no node's key changes, they are kept from one
 * cycle to the next and only free masks are brought up to date. */
struct sched_nodekey {
	int64_t id;
	uint32_t block, rack, sw, pool, model;
	int nlabels;
	uint64_t mem, usable, all;
	uint32_t labels[SCHED_MAX_LABELS];
};

/* One job shape: a class with a per-node GPU count and a node count. Jobs of
 * one shape share what the cycle learns about them; what a failure proves
 * stays true for the rest of the cycle because the live view only shrinks. */
struct sched_shape {
	int cls, gpus, nodes;
	int unfit; /* -1: not checked yet */
	int64_t unfit_a, unfit_most;
	int live_fail;           /* no assignment in the live view */
	int full_fail;           /* none even with reserved GPUs given back */
	uint64_t full_fit_gen;   /* s->gen at which the full view was seen to fit (+1) */
	uint64_t short_fail_gen; /* s->gen at which a backfill of this shape failed (+1) */
	int64_t short_fail_end;  /* the end time of that failed backfill */
	struct sched_wait wait;  /* numbers of the live failure */
	int preempt_fail;        /* a victim search for this shape found nothing */
	uint64_t est_fail;       /* the estimate's step at which this shape did not fit (+1) */
};

struct sched_queue_st {
	uint32_t id;
	int prio, weight, borrowing;
	int64_t default_limit;
	int has_quota;
	int64_t nominal_sum, used_sum, running_gpus;
	int64_t borrow_hold; /* idle quota kept for overdue jobs that wait to borrow it */
	int rank;
};

struct sched_team_st {
	uint32_t id;
	int weight;
	double usage;
	int rank;
};

struct sched_qt {
	int queue, team; /* indexes in s->queues, s->teams */
	int64_t nominal;
	int64_t used;    /* running (not stopping) and placed in this cycle */
	int64_t held;    /* kept for jobs waiting on their victims to stop */
	int64_t running; /* of used: what ran at the start of the cycle, less victims */
};

/* Sort record of one pending job; k1 packs queue rank, team rank and the
 * effective priority so that the sort compares one word in most cases. */
struct sched_item {
	uint64_t k1;
	int64_t prio; /* negated effective priority */
	int64_t submit, id;
	int job;
};

struct sched_run_st {
	int queue, qt;
	int64_t gpus;
	double lost; /* lost_work(), for the victim order */
	int taken;   /* chosen as a victim (or its GPUs promised) in this cycle */
	int for_job; /* stopping for this pending job (index), else -1 */
};

struct sched_undo {
	int node;
	uint64_t mask;
};

struct sched_resv {
	int64_t job_id;
	int job; /* its pending index */
	int64_t start;
	int off, nranks; /* in s->resv_ranks */
};

/* The estimated jobs of one shape and quota pair, in order (plan_estimate):
 * within a step of the dry run, where the first of them cannot start, none
 * of them can (the view and the quota only shrink within a step). */
struct sched_estb {
	int shape, qt;
	int64_t need; /* GPUs of each job */
	int head;     /* the first not started yet (index in est; -1: none) */
	int tail;     /* the last, while the lists are built */
};

/* A waiting job in the estimate (plan_estimate()): once it starts in the
 * dry run it holds ranks [off, off + nranks) of s->est_ranks until `end`.
 * A reserved job (wait -1) holds its reservation's GPUs from the start. */
struct sched_est {
	int wait, job;
	int off, nranks;
	int64_t end;
};

struct sched_resv_rank {
	int node;
	uint64_t gpus;    /* all the GPUs it reserves */
	uint64_t freenow; /* the part that was free and left the live view */
};

/* An open-addressing map from 64-bit keys to ints. */
struct sched_map {
	uint64_t *keys;
	int *vals;
	int cap; /* power of two */
	int n;
};

struct sched {
	const struct sched_snapshot *snap;
	uint64_t gen;  /* bumps whenever the live view loses GPUs */
	uint64_t tick; /* slot LRU clock */
	int gmax;      /* most GPUs on one node */

	/* nodes */
	int nodecap;
	uint64_t *usable;   /* healthy GPUs of a schedulable node */
	uint64_t *free;     /* the live view */
	uint8_t *nfree;     /* popcount(free) */
	uint64_t *slotmask; /* slots whose class the node matches */
	uint64_t *resv;     /* GPUs promised to a reservation */
	uint64_t *want;     /* scratch, all 0 between uses: a preemptor's GPUs */
	int *order;         /* nodes in topology order */
	int order_n;        /* nodes it ordered (kept across cycles) */
	int *pos;           /* position of a node in order */
	int *ndom;          /* [node * 3 + level] */
	int *tmp_int;       /* merge sort scratch */
	int tmpcap;
	struct sched_nodekey *keys; /* the nodes the kept state was built for */
	int nkeys;                  /* how many (0 with keys NULL: nothing kept) */
	int kept;                   /* this cycle kept the topology, classes and slots */

	/* domains */
	int ndoms, domcap;
	int lvl_lo[SCHED_LEVELS], lvl_hi[SCHED_LEVELS]; /* domain numbers per level */
	int *dom_lo, *dom_hi;                           /* range in order */
	int *dom_clo, *dom_chi; /* children: domain numbers one level down */

	/* classes, slots, shapes */
	struct sched_class *classes;
	int nclasses, classcap;
	struct sched_slot slots[SCHED_SLOTS];
	uint64_t slot_live; /* slots fit_set_free() keeps in step: all, except in
	                     * plan_estimate(), whose dry run (and its rollback)
	                     * leaves the slots it does not use as they are */
	struct sched_shape *shapes;
	int nshapes, shapecap;
	struct sched_map class_map, shape_map;

	/* queues, teams, quotas */
	struct sched_queue_st *queues;
	int nqueues, queuecap;
	struct sched_team_st *teams;
	int nteams, teamcap;
	struct sched_qt *qts;
	int nqts, qtcap;
	int64_t *qt_taken; /* GPUs of a team's attempts a victim search has taken */
	int qt_takencap;
	struct sched_map queue_map, team_map, qt_map;

	/* pending jobs */
	int jobcap;
	struct sched_item *items, *items_tmp;
	int *job_shape, *job_qt, *job_queue;
	uint8_t *job_first;       /* attempts are being stopped for it: decided first */
	struct sched_map job_map; /* job id -> index, only when some are */

	/* running attempts */
	int runcap;
	struct sched_run_st *run;
	int *run_order; /* victim preference order */
	int *run_first; /* ... its stopping and borrowed attempts alone, in that order */
	int nrun_first;
	int run_order_done;
	int preempt_tries;
	int preempt_borrowing; /* plan_preempt()'s job is admitted on borrowed quota */
	int64_t young_until;   /* gather_victims(): when its young victims come of age */
	int nborrow_holds;

	/* CPU-only jobs (cpu.c) */
	uint64_t cycle;     /* counts cycles: what struct sched_class.cpu_cycle is of */
	int *cpu_used;      /* per node: CPU-only ranks running or placed in this cycle */
	int cpu_counted;    /* cpu_used is counted for this cycle */
	uint64_t *cpu_heap; /* the classes' heaps of (CPU-only ranks, topology position) */
	int cpu_heap_n, cpu_heapcap;

	/* the undo log of dry runs */
	struct sched_undo *undo;
	int nundo, undocap, logging;

	/* reservations */
	struct sched_resv *resvs;
	int nresvs, resvcap;
	struct sched_resv_rank *resv_ranks;
	int nresv_ranks, resv_rankcap;

	/* the running attempts' release times and their order, once a cycle */
	int64_t *run_rel;
	int *run_rel_order;
	int run_rel_n; /* -1: not yet this cycle */

	/* releases for the reservation dry run: (time, running index or ~placement) */
	int64_t *rel_time;
	int *rel_who, *rel_tmp;
	int relcap;

	/* selection scratch */
	int pick[SCHED_MAX_RANKS];
	uint64_t pick_gpus[SCHED_MAX_RANKS];
	int *cand; /* candidate nodes / children */
	int candcap;
	int *victims;
	int nvictims, victimcap;

	/* results */
	struct sched_placement *placements;
	int nplacements, placecap;
	int64_t *place_end; /* end_by of each placement, for the dry run */
	int *place_off;     /* its first rank in s->ranks (pointers are set at the end) */
	struct sched_rank_hold *ranks;
	int nranks, rankcap;
	struct sched_preemption *preemptions;
	int npreemptions, preemptcap;
	struct sched_wait *waits;
	int nwaits, waitcap;
	int *wait_job;  /* the pending job of each wait */
	int *place_job; /* the pending job of each placement */

	/* the estimate's dry run */
	struct sched_est *est; /* estcap of them once used */
	int estcap;
	int *est_next;           /* per est: the next of its bucket (-1: none) */
	struct sched_estb *estb; /* the buckets */
	int nestb, estbcap;
	int *estb_heap; /* buckets by their head's order, in a step */
	int estb_heapcap;
	int64_t *est_qfail;       /* per quota pair: the least need refused this step */
	uint64_t *est_qfail_step; /* ... at this step (+1) */
	int est_qcap;
	struct sched_map estb_map; /* (shape, pair) -> bucket */
	int *est_ends;             /* started jobs (indexes in est) by end time */
	struct sched_rank_hold *est_ranks;
	int nest_ranks, est_rankcap;
	int64_t *est_saved; /* quota use to restore: per pair, then per queue */
	int est_savedcap;
};

/* sched.c */
void *sched_grow(void *p, int *cap, int need, size_t elem);
void sched_map_reset(struct sched_map *m, int need);
int sched_map_find(const struct sched_map *m, uint64_t key);
void sched_map_put(struct sched_map *m, uint64_t key, int val);
void sched_map_free(struct sched_map *m);
void sched_msort(int *a, int *tmp, int n, int (*cmp)(const void *ctx, int x, int y),
                 const void *ctx);
int64_t sched_job_limit(const struct sched *s, int job);
int64_t sched_end(const struct sched *s, int64_t limit);
int sched_wait_level(const struct sched_config *c, int64_t since, int64_t at, int nodes);
int sched_overdue(const struct sched *s, int job);
void sched_commit(struct sched *s, int job, int nodes, int borrowed);
int sched_quota_admits(struct sched *s, int job, int *borrowed, struct sched_wait *w);

/* fit.c: the live view and placement */
void fit_nodes(struct sched *s);
int fit_class_matches(const struct sched_class *c, const struct sched_node *n);
int fit_slot(struct sched *s, int cls);
void fit_set_free(struct sched *s, int node, uint64_t mask);
int fit_mark(struct sched *s);
void fit_rollback(struct sched *s, int mark);
int fit_check(const struct sched *s, int slot, int gpus, int nodes);
int fit_find(struct sched *s, int slot, int gpus, int nodes);
uint64_t fit_gpus(const struct sched_node *n, uint64_t freemask, int gpus);
void fit_choose(struct sched *s, int gpus, int nodes);
void fit_wait(const struct sched *s, int slot, int gpus, int nodes, struct sched_wait *w);
int fit_unfit(struct sched *s, struct sched_shape *sh);
void fit_slots_cleanup(struct sched *s);
int fit_check_view(const struct sched *s);

/* cpu.c: CPU-only jobs */
int cpu_decide(struct sched *s, int job, struct sched_shape *sh, struct sched_wait *w);

/* plan.c: reservations, backfill, preemption */
int plan_backfill(struct sched *s, int job, struct sched_shape *sh, int slot, int borrowed,
                  struct sched_wait *w);
int plan_preempt(struct sched *s, int job, struct sched_shape *sh, int slot, int borrowed,
                 struct sched_wait *w);
void plan_reserve(struct sched *s, int job, struct sched_shape *sh, int slot, struct sched_wait *w);
void plan_estimate(struct sched *s);

#endif
