/* CPU-only jobs (gpus 0, sched.h and cpu.c): spread placement under a
 * per-node limit, constraints, gangs, the words of their waits, and that
 * they never take, block, stop or wait for GPU work. */
#include "sched_fixture.h"

#define POOL_CPU  7
#define LABEL_SSD 11

static const char *name_of(void *ctx, uint32_t id)
{
	(void)ctx;
	return id == POOL_CPU ? "cpu" : id == LABEL_SSD ? "disk=nvme" : NULL;
}

/* A schedulable node of `gpus` GPUs that may run `limit` CPU-only ranks. */
static int cpu_node(struct fx *f, uint32_t block, int gpus, int limit)
{
	int k = fx_node(f, block, 0, 0, gpus);
	f->nodes[k].cpu_ranks_max = limit;
	return k;
}

/* A running CPU-only attempt with a rank on each of nodes[0..n). */
static void cpu_run(struct fx *f, int64_t attempt, uint32_t queue, const int *nodes, int n)
{
	fx_run(f, attempt, queue, 0, 0);
	for (int k = 0; k < n; k++)
		fx_hold(f, f->nrunning - 1, nodes[k], 0);
}

static void why(const struct sched_result *res, const struct fx *f, int64_t id, char *buf,
                size_t len)
{
	const struct sched_wait *w = fx_wait(res, id);
	CHECK(w != NULL);
	sched_wait_text(w, fx_find_job(&f->snap, id), name_of, NULL, buf, len);
}

TEST(cpu_job_goes_to_the_node_with_fewest_cpu_ranks)
{
	struct fx *f = fx_new();
	for (int i = 0; i < 3; i++)
		cpu_node(f, 0, 4, 8);
	int n0[] = {0}, n1[] = {1};
	cpu_run(f, 1, 0, n0, 1);
	cpu_run(f, 2, 0, n0, 1);
	cpu_run(f, 3, 0, n1, 1);
	for (int id = 10; id < 14; id++)
		fx_job(f, id, 0, 0, 0, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.nplacements, 4);
	/* counts 2, 1, 0: node 2; then 2, 1, 1: node 1 (the lower of a tie);
	 * then 2, 2, 1: node 2; then 2, 2, 2: node 0 */
	CHECK_INT(fx_placed(&res, 10)->ranks[0].node, 2);
	CHECK_INT(fx_placed(&res, 11)->ranks[0].node, 1);
	CHECK_INT(fx_placed(&res, 12)->ranks[0].node, 2);
	CHECK_INT(fx_placed(&res, 13)->ranks[0].node, 0);
	for (int id = 10; id < 14; id++) {
		CHECK_INT(fx_placed(&res, id)->ranks[0].gpus, 0);
		CHECK_INT(fx_placed(&res, id)->borrowed, 0);
	}
	CHECK_INT(res.npreemptions, 0);
	sched_free(s);
	fx_free(f);
}

TEST(cpu_job_waits_when_every_node_runs_its_limit)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 4, 2);
	cpu_node(f, 0, 4, 2);
	int both[] = {0, 1};
	cpu_run(f, 1, 0, both, 2);
	fx_job(f, 10, 0, 0, 0, 1); /* takes node 0's last room */
	fx_job(f, 11, 0, 0, 0, 1); /* ... node 1's */
	fx_job(f, 12, 0, 0, 0, 1);
	fx_job(f, 13, 0, 0, 1, 1); /* a GPU job behind it still starts */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) && fx_placed(&res, 11) && fx_placed(&res, 13));
	const struct sched_wait *w = fx_wait(&res, 12);
	CHECK_INT(w->reason, SCHED_WAIT_CPU_LIMIT);
	CHECK_INT(w->a, 0);
	CHECK_INT(w->b, 1);
	CHECK_INT(w->cpu_nodes, 2);
	CHECK_INT(w->cpu_limit, 2);
	CHECK_INT(w->est_start_ms, 0);
	char buf[256];
	why(&res, f, 12, buf, sizeof(buf));
	CHECK_STR(buf, "every eligible node runs its limit of 2 CPU-only ranks (2 nodes)");
	/* differing limits are not given a number */
	f->nodes[1].cpu_ranks_max = 1;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 12)->cpu_limit, 0);
	why(&res, f, 12, buf, sizeof(buf));
	CHECK_STR(buf, "every eligible node runs its limit of CPU-only ranks (2 nodes)");
	sched_free(s);
	fx_free(f);
}

TEST(cpu_job_keeps_to_its_pool_and_selectors_and_schedulable_nodes)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 4, 4); /* default pool */
	cpu_node(f, 0, 4, 4);
	f->nodes[1].pool = POOL_CPU;
	cpu_node(f, 0, 4, 4);
	f->nodes[2].pool = POOL_CPU;
	f->nodes[2].labels[f->nodes[2].nlabels++] = LABEL_SSD;
	cpu_node(f, 0, 4, 4);
	f->nodes[3].pool = POOL_CPU;
	f->nodes[3].labels[f->nodes[3].nlabels++] = LABEL_SSD;
	f->nodes[3].schedulable = 0; /* cordoned */
	struct sched_job *j = fx_job(f, 10, 0, 0, 0, 1);
	j->pool = POOL_CPU;
	j = fx_job(f, 11, 0, 0, 0, 1);
	j->pool = POOL_CPU;
	j->selectors[j->nselectors++] = LABEL_SSD;
	j = fx_job(f, 12, 0, 0, 0, 2);
	j->pool = POOL_CPU;
	j->selectors[j->nselectors++] = LABEL_SSD;
	j = fx_job(f, 13, 0, 0, 0, 1);
	j->pool = 9; /* a pool no node is in */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].node, 1);
	CHECK_INT(fx_placed(&res, 11)->ranks[0].node, 2);
	char buf[256];
	CHECK_INT(fx_wait(&res, 12)->reason, SCHED_WAIT_UNFIT);
	CHECK_INT(fx_wait(&res, 12)->a, 1);
	why(&res, f, 12, buf, sizeof(buf));
	CHECK_STR(buf, "needs 2 nodes for its CPU-only ranks; only 1 schedulable node in pool cpu "
	               "that carries disk=nvme");
	CHECK_INT(fx_wait(&res, 13)->reason, SCHED_WAIT_UNFIT);
	why(&res, f, 13, buf, sizeof(buf));
	CHECK_STR(buf, "no schedulable node in pool #9");
	sched_free(s);
	fx_free(f);
}

TEST(cpu_gang_takes_one_rank_per_node_across_blocks)
{
	struct fx *f = fx_new();
	cpu_node(f, 2, 8, 4); /* blocks do not matter: nothing crosses a fabric */
	cpu_node(f, 1, 8, 4);
	cpu_node(f, 1, 8, 4);
	cpu_node(f, 3, 8, 4);
	int busy[] = {1, 1, 2};
	cpu_run(f, 1, 0, busy, 1);
	cpu_run(f, 2, 0, busy + 1, 1);
	cpu_run(f, 3, 0, busy + 2, 1);
	fx_job(f, 10, 0, 0, 0, 3);
	fx_job(f, 11, 0, 0, 0, 4);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	/* counts by node 0, 1, 2, 3: 0, 2, 1, 0: nodes 0, 3 and 2, in
	 * topology order (block 1 first): 2, 0, 3 */
	const struct sched_placement *p = fx_placed(&res, 10);
	CHECK(p != NULL);
	CHECK_INT(p->nranks, 3);
	CHECK_INT(p->ranks[0].node, 2);
	CHECK_INT(p->ranks[1].node, 0);
	CHECK_INT(p->ranks[2].node, 3);
	/* then 1, 2, 2, 1: the 4-node gang fits (every node has room) */
	p = fx_placed(&res, 11);
	CHECK(p != NULL);
	CHECK_INT(p->ranks[0].node, 1);
	CHECK_INT(p->ranks[1].node, 2);
	CHECK_INT(p->ranks[2].node, 0);
	CHECK_INT(p->ranks[3].node, 3);
	sched_free(s);
	fx_free(f);
}

TEST(cpu_gang_waits_for_room_on_enough_nodes)
{
	struct fx *f = fx_new();
	for (int i = 0; i < 3; i++)
		cpu_node(f, 0, 8, 1);
	int full[] = {0, 1};
	cpu_run(f, 1, 0, full, 2);
	fx_job(f, 10, 0, 0, 0, 2);
	fx_job(f, 11, 0, 0, 0, 2); /* same shape: decided from what job 10 learnt */
	fx_job(f, 12, 0, 0, 0, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	const struct sched_wait *w = fx_wait(&res, 10);
	CHECK_INT(w->reason, SCHED_WAIT_CPU_LIMIT);
	CHECK_INT(w->a, 1);
	CHECK_INT(w->b, 2);
	CHECK_INT(fx_wait(&res, 11)->reason, SCHED_WAIT_CPU_LIMIT);
	CHECK_INT(fx_placed(&res, 12)->ranks[0].node, 2); /* a later, smaller job goes on */
	char buf[256];
	why(&res, f, 10, buf, sizeof(buf));
	CHECK_STR(buf, "needs 2 nodes for its CPU-only ranks; 1 of 3 eligible nodes has room, the "
	               "others run their limit of 1 CPU-only rank");
	sched_free(s);
	fx_free(f);
}

TEST(cpu_job_runs_on_a_node_without_gpus)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 0, 16); /* a CPU node: no GPU at all */
	cpu_node(f, 0, 8, 16);
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 1, 0xff);
	fx_job(f, 10, 0, 0, 0, 1);
	fx_job(f, 11, 0, 0, 0, 2);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].node, 0);
	CHECK_INT(fx_placed(&res, 11)->nranks, 2); /* every GPU busy: no matter */
	sched_free(s);
	fx_free(f);
}

TEST(cpu_jobs_take_no_quota_and_never_borrow)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 4, 4);
	fx_queue(f, 1, 0, 1);
	fx_quota(f, 1, 1, 0); /* team 1 has nothing of its own here */
	fx_quota(f, 1, 2, 4);
	fx_run(f, 1, 1, 2, 0);
	fx_hold(f, 0, 0, 0xf); /* team 2 uses all of its quota */
	fx_job(f, 10, 1, 1, 1, 1);
	fx_job(f, 11, 1, 1, 0, 1);
	fx_job(f, 12, 1, 2, 0, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_QUOTA);
	CHECK_INT(fx_placed(&res, 11)->borrowed, 0);
	CHECK_INT(fx_placed(&res, 12)->borrowed, 0);
	sched_free(s);
	fx_free(f);
}

TEST(cpu_attempts_are_never_victims)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 4, 4);
	fx_queue(f, 1, 100, 0);
	fx_queue(f, 2, 0, 0);
	int n0[] = {0};
	cpu_run(f, 1, 2, n0, 1); /* low-priority CPU-only work on the node */
	fx_run(f, 2, 2, 0, 0);   /* ... and low-priority GPU work */
	fx_hold(f, 1, 0, 0x3);
	f->snap.config.preemption = 1;
	fx_job(f, 10, 1, 0, 2, 1); /* fits beside both: nothing stopped */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) != NULL);
	CHECK_INT(res.npreemptions, 0);
	f->jobs[0].gpus = 4; /* needs the GPU work's GPUs: only it is stopped */
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK(fx_preempted(&res, 2));
	CHECK(!fx_preempted(&res, 1));
	const struct sched_wait *w = fx_wait(&res, 10);
	CHECK_INT(w->reason, SCHED_WAIT_PREEMPTING);
	CHECK_INT(w->blockers, 1);
	CHECK_INT(w->blocker_job, f->runs[1].r.job_id);
	CHECK_INT(w->blocker_gpus, 2);
	/* while the GPU work is too young to stop, it alone is named as what
	 * holds the job's GPUs, not the CPU-only rank (the cheaper to stop, were
	 * it a victim at all) */
	f->snap.now_ms = 1000;
	f->snap.config.min_runtime_ms = 60000;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	w = fx_wait(&res, 10);
	CHECK_INT(w->held, SCHED_HELD_YOUNG);
	CHECK_INT(w->blockers, 1);
	CHECK_INT(w->blocker_job, f->runs[1].r.job_id);
	char buf[256];
	why(&res, f, 10, buf, sizeof(buf));
	CHECK_CONTAINS(buf, "job 100002 (lower priority) holds 2 GPUs it could use");
	sched_free(s);
	fx_free(f);
}

TEST(cpu_jobs_never_preempt)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 4, 1);
	fx_queue(f, 1, 100, 0);
	fx_queue(f, 2, 0, 0);
	int n0[] = {0};
	cpu_run(f, 1, 2, n0, 1); /* a lower queue's CPU-only rank fills the node */
	fx_run(f, 2, 2, 0, 0);
	fx_hold(f, 1, 0, 0xf);
	f->snap.config.preemption = 1;
	f->snap.config.backfill = 1;
	fx_job(f, 10, 1, 0, 0, 1);
	f->snap.now_ms = SCHED_DEFAULT_STARVE_MS * 2; /* it is starving, even */
	f->snap.config.overdue_ms = SCHED_DEFAULT_OVERDUE_MS;
	f->snap.config.starve_ms = SCHED_DEFAULT_STARVE_MS;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_CPU_LIMIT);
	CHECK_INT(fx_wait(&res, 10)->reserved, 0);
	CHECK_INT(res.npreemptions, 0);
	sched_free(s);
	fx_free(f);
}

TEST(cpu_job_runs_while_every_gpu_is_busy_and_a_gpu_job_is_reserved)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 4, 4);
	cpu_node(f, 0, 4, 4);
	f->snap.config.backfill = 1;
	f->snap.now_ms = 1000;
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 0, 0xf);
	f->runs[0].r.end_by_ms = 5000;
	fx_run(f, 2, 0, 0, 0);
	fx_hold(f, 1, 1, 0xf);
	f->runs[1].r.end_by_ms = 9000;
	fx_job(f, 10, 0, 0, 4, 1);                /* reserved on node 0 at 5000 */
	fx_job(f, 11, 0, 0, 0, 2);                /* no time limit at all: runs anyway */
	fx_job(f, 12, 0, 0, 1, 1)->priority = -1; /* after both */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	const struct sched_wait *w = fx_wait(&res, 10);
	CHECK_INT(w->reason, SCHED_WAIT_RESOURCES);
	CHECK_INT(w->reserved, 1);
	CHECK_INT(w->est_start_ms, 5000);
	CHECK_INT(fx_placed(&res, 11)->nranks, 2);
	CHECK_INT(fx_wait(&res, 12)->est_start_ms, 9000);
	sched_free(s);
	fx_free(f);
}

TEST(cpu_fits_ever)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 8, 4);
	cpu_node(f, 0, 0, 4);
	f->nodes[1].pool = POOL_CPU;
	f->nodes[1].schedulable = 0; /* the state does not matter here */
	struct sched_job j = {.id = 1, .gpus = 0, .nodes = 1};
	char why_[256];
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), 0);
	j.nodes = 2;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), 0);
	j.nodes = 3;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), ERR_UNFIT);
	CHECK_STR(why_, "asks for 3 nodes for its CPU-only ranks, but only 2 nodes match its pool "
	                "and labels");
	j.nodes = 1;
	j.pool = POOL_CPU;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), 0);
	j.pool = 9;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), ERR_UNFIT);
	CHECK_STR(why_, "no node is in the requested pool");
	j.pool = POOL_CPU;
	j.selectors[j.nselectors++] = LABEL_SSD;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), ERR_UNFIT);
	CHECK_STR(why_, "no node in the requested pool carries all of the requested labels");
	j.nselectors = 0;
	f->nodes[1].cpu_ranks_max = 0;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), ERR_UNFIT);
	CHECK_STR(why_, "no matching node may run CPU-only ranks");
	j.pool = 0;
	j.gpu_model = 1;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), ERR_INVALID);
	CHECK_CONTAINS(why_, "asks for 0 GPUs (a CPU-only job) but for a GPU model");
	j.gpu_model = 0;
	j.min_gpu_mem_mib = 1024;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why_, sizeof(why_)), ERR_INVALID);
	CHECK_CONTAINS(why_, "but for a GPU memory");
	fx_free(f);
}

TEST(cpu_limit_below_zero_is_invalid)
{
	struct fx *f = fx_new();
	cpu_node(f, 0, 4, -1);
	fx_job(f, 1, 0, 0, 0, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	CHECK_INT(sched_cycle(s, fx_snap(f), &res), ERR_INVALID);
	f->nodes[0].cpu_ranks_max = 0; /* may run none */
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 1)->reason, SCHED_WAIT_UNFIT);
	sched_free(s);
	fx_free(f);
}

/* ---- a property: CPU-only jobs change no GPU job's decision ---- */

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (uint32_t)(rng >> 33) % n : 0;
}

/* A random cluster, policy, GPU work and GPU jobs. */
static void gen_gpu(struct fx *f)
{
	int n = 3 + (int)rnd(20);
	for (int i = 0; i < n; i++) {
		int k = cpu_node(f, 1 + rnd(3), rnd(6) ? 8 : 0, (int)rnd(4));
		f->nodes[k].pool = rnd(4) == 0;
		f->nodes[k].schedulable = rnd(8) != 0;
		if (rnd(3))
			f->nodes[k].labels[f->nodes[k].nlabels++] = 1;
	}
	fx_queue(f, 1, 10, 1);
	fx_queue(f, 2, 0, 1);
	fx_quota(f, 1, 1, (int)rnd(24));
	fx_quota(f, 1, 2, (int)rnd(24));
	f->snap.now_ms = 100000;
	f->snap.config = (struct sched_config){.aging_ms = 1000,
	                                       .backfill = 1,
	                                       .preemption = 1,
	                                       .max_reservations = 2,
	                                       .min_runtime_ms = rnd(2) ? 0 : 20000,
	                                       .preempt_max_ratio = 2,
	                                       .preempt_loss_pct = 50,
	                                       .overdue_ms = 30000,
	                                       .starve_ms = 60000,
	                                       .restart_cost_ms = 1000};
	for (int r = 0, nr = (int)rnd(16); r < nr; r++) {
		struct sched_running *a = fx_run(f, 1 + r, 1 + rnd(2), 1 + rnd(2), (int)rnd(3));
		a->start_ms = rnd(100000);
		a->end_by_ms = rnd(3) ? 100000 + rnd(50000) : 0;
		a->borrowed = rnd(3) == 0;
		int node = (int)rnd((uint32_t)f->nnodes);
		uint64_t free = f->nodes[node].gpus_free;
		if (free)
			fx_hold(f, f->nrunning - 1, node, rnd(2) ? free : free & (~free + 1));
	}
	for (int k = 0, nj = 1 + (int)rnd(40); k < nj; k++) {
		int gang = rnd(4) == 0;
		struct sched_job *j =
		        fx_job(f, 1000 + k, 1 + rnd(2), 1 + rnd(2), 1 + (int)rnd(gang ? 8 : 4),
		               gang ? 2 + (int)rnd(2) : 1);
		j->priority = (int)rnd(3);
		j->submit_ms = rnd(100000);
		j->time_limit_ms = rnd(2) ? 1000 + rnd(50000) : 0;
		if (rnd(5) == 0)
			j->pool = 1;
	}
}

/* CPU-only work and CPU-only jobs, mixed into the order anywhere. */
static void gen_cpu(struct fx *f)
{
	for (int r = 0, nr = (int)rnd(12); r < nr; r++) {
		int node = (int)rnd((uint32_t)f->nnodes);
		fx_run(f, 500 + r, 1 + rnd(2), 1 + rnd(2), (int)rnd(3))->start_ms = rnd(100000);
		fx_hold(f, f->nrunning - 1, node, 0);
	}
	for (int k = 0, nj = 1 + (int)rnd(30); k < nj; k++) {
		struct sched_job *j = fx_job(f, 5000 + k, 1 + rnd(2), 1 + rnd(2), 0,
		                             rnd(4) ? 1 : 2 + (int)rnd(2));
		j->priority = (int)rnd(5) - 1;
		j->submit_ms = rnd(100000);
		if (rnd(4) == 0)
			j->pool = 1;
		if (rnd(4) == 0)
			j->selectors[j->nselectors++] = 1;
	}
}

static void same_wait(const struct sched_wait *a, const struct sched_wait *b)
{
	CHECK(b != NULL);
	CHECK_INT(a->reason, b->reason);
	CHECK_INT(a->a, b->a);
	CHECK_INT(a->b, b->b);
	CHECK_INT(a->blockers, b->blockers);
	CHECK_INT(a->blocker_gpus, b->blocker_gpus);
	CHECK_INT(a->est_start_ms, b->est_start_ms);
	CHECK_INT(a->reserved, b->reserved);
}

static void same_gpu_decisions(const struct sched_result *gpu, const struct sched_result *mix)
{
	for (int p = 0; p < gpu->nplacements; p++) {
		const struct sched_placement *a = &gpu->placements[p];
		const struct sched_placement *b = fx_placed(mix, a->job_id);
		CHECK(b != NULL);
		CHECK_INT(a->nranks, b->nranks);
		CHECK_INT(a->borrowed, b->borrowed);
		for (int k = 0; k < a->nranks; k++) {
			CHECK_INT(a->ranks[k].node, b->ranks[k].node);
			CHECK_INT(a->ranks[k].gpus, b->ranks[k].gpus);
		}
	}
	for (int w = 0; w < gpu->nwaits; w++)
		same_wait(&gpu->waits[w], fx_wait(mix, gpu->waits[w].job_id));
	CHECK_INT(gpu->npreemptions, mix->npreemptions);
	for (int k = 0; k < gpu->npreemptions; k++)
		CHECK_INT(gpu->preemptions[k].attempt_id, mix->preemptions[k].attempt_id);
}

static int cpu_eligible(const struct sched_node *n, const struct sched_job *j)
{
	int ok = n->schedulable && n->cpu_ranks_max > 0 && (!j->pool || n->pool == j->pool);
	for (int k = 0; ok && k < j->nselectors; k++)
		ok = n->nlabels > 0 && n->labels[0] == j->selectors[k];
	return ok;
}

/* Topology order as sched_int.h has it: (block, rack, switch, id). */
static int topo_before(const struct sched_node *a, const struct sched_node *b)
{
	if (a->block != b->block)
		return a->block < b->block;
	if (a->rack != b->rack)
		return a->rack < b->rack;
	if (a->sw != b->sw)
		return a->sw < b->sw;
	return a->id < b->id;
}

/* Whether node x goes before node y for a CPU-only rank: fewer CPU-only
 * ranks, then topology order. */
static int fewer(const int *used, const int *rank, int x, int y)
{
	return used[x] != used[y] ? used[x] < used[y] : rank[x] < rank[y];
}

/* The rule, replayed the slow way over the CPU-only placements in the order
 * the cycle made them: each takes the eligible nodes with room that run the
 * fewest CPU-only ranks (ties: topology order), its ranks in topology order. */
static void check_cpu_spread(const struct sched_snapshot *snap, const struct sched_result *res)
{
	int n = snap->nnodes, *used = xcalloc((size_t)n + 1, sizeof(int));
	int *rank = xcalloc((size_t)n + 1, sizeof(int)),
	    *pick = xcalloc((size_t)n + 1, sizeof(int));
	for (int i = 0; i < n; i++)
		for (int k = 0; k < n; k++)
			rank[i] += topo_before(&snap->nodes[k], &snap->nodes[i]);
	for (int r = 0; r < snap->nrunning; r++)
		for (int k = 0; k < snap->running[r].nranks; k++)
			used[snap->running[r].ranks[k].node] += !snap->running[r].ranks[k].gpus;
	for (int p = 0; p < res->nplacements; p++) {
		const struct sched_placement *pl = &res->placements[p];
		const struct sched_job *j = fx_find_job(snap, pl->job_id);
		if (j->gpus)
			continue;
		int m = 0;
		for (int i = 0; i < n; i++) { /* eligible with room, the best first */
			if (!cpu_eligible(&snap->nodes[i], j) ||
			    used[i] >= snap->nodes[i].cpu_ranks_max)
				continue;
			int q = m++;
			for (; q > 0 && fewer(used, rank, i, pick[q - 1]); q--)
				pick[q] = pick[q - 1];
			pick[q] = i;
		}
		CHECK(m >= j->nodes);
		for (int k = 0; k < j->nodes; k++) { /* the first j->nodes, in topology order */
			int want = -1;
			for (int q = 0; q < j->nodes; q++)
				if ((k == 0 || rank[pick[q]] > rank[pl->ranks[k - 1].node]) &&
				    (want < 0 || rank[pick[q]] < rank[want]))
					want = pick[q];
			CHECK_INT(pl->ranks[k].node, want);
		}
		for (int k = 0; k < j->nodes; k++)
			used[pl->ranks[k].node]++;
	}
	free(used);
	free(rank);
	free(pick);
}

/* What a CPU-only job's wait says holds at the end of the cycle too:
 * counts only grow within it. */
static void check_cpu_waits(const struct sched_snapshot *snap, const struct sched_result *res)
{
	int *used = xcalloc((size_t)snap->nnodes + 1, sizeof(int));
	for (int r = 0; r < snap->nrunning; r++)
		for (int k = 0; k < snap->running[r].nranks; k++)
			used[snap->running[r].ranks[k].node] += !snap->running[r].ranks[k].gpus;
	for (int p = 0; p < res->nplacements; p++)
		for (int k = 0; k < res->placements[p].nranks; k++)
			used[res->placements[p].ranks[k].node] += !res->placements[p].ranks[k].gpus;
	for (int w = 0; w < res->nwaits; w++) {
		const struct sched_job *j = fx_find_job(snap, res->waits[w].job_id);
		if (j->gpus)
			continue;
		int eligible = 0, room = 0;
		for (int i = 0; i < snap->nnodes; i++) {
			const struct sched_node *n = &snap->nodes[i];
			int ok = cpu_eligible(n, j);
			eligible += ok;
			room += ok && used[i] < n->cpu_ranks_max;
		}
		CHECK(res->waits[w].reason == SCHED_WAIT_UNFIT ||
		      res->waits[w].reason == SCHED_WAIT_CPU_LIMIT);
		CHECK(res->waits[w].reason == SCHED_WAIT_UNFIT ? eligible < j->nodes
		                                               : room < j->nodes);
		CHECK_INT(res->waits[w].est_start_ms, 0);
	}
	free(used);
}

/* A copy of the n first of a fixture array of cap elements (src may be
 * NULL when cap is 0). */
static void *copy_of(const void *src, int n, int cap, size_t size)
{
	void *out = xmalloc(size * (size_t)(cap + 1));
	if (n > 0)
		memcpy(out, src, size * (size_t)n);
	return out;
}

TEST(random_cpu_jobs_change_no_gpu_decision)
{
	for (uint64_t seed = 1; seed <= 300; seed++) {
		rng = seed * 0x9e3779b97f4a7c15ull + 7;
		struct fx *gpu = fx_new();
		gen_gpu(gpu);
		struct fx *mix = fx_new();
		*mix = *gpu; /* the same cluster, policy and GPU work, copied */
		mix->nodes = copy_of(gpu->nodes, gpu->nnodes, gpu->nodecap, sizeof(*gpu->nodes));
		mix->runs = copy_of(gpu->runs, gpu->nrunning, gpu->runcap, sizeof(*gpu->runs));
		mix->jobs = copy_of(gpu->jobs, gpu->njobs, gpu->jobcap, sizeof(*gpu->jobs));
		mix->running = NULL;
		gen_cpu(mix);
		struct sched *s1 = sched_new(), *s2 = sched_new();
		struct sched_result r1, r2;
		fx_cycle(s1, gpu, &r1);
		fx_cycle(s2, mix, &r2);
		same_gpu_decisions(&r1, &r2);
		check_cpu_waits(&mix->snap, &r2);
		check_cpu_spread(&mix->snap, &r2);
		sched_free(s1);
		sched_free(s2);
		fx_free(gpu);
		fx_free(mix);
	}
}

TEST_MAIN()
