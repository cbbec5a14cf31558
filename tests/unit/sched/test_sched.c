/* Scenario tests of the scheduler: one per policy point in sched.h. */
#include "sched_fixture.h"

static void text_of(const struct sched_result *res, const struct fx *f, int64_t id, char *buf,
                    size_t len)
{
	const struct sched_wait *w = fx_wait(res, id);
	CHECK(w != NULL);
	sched_wait_text(w, fx_find_job(&f->snap, id), NULL, NULL, buf, len);
}

TEST(best_fit_fills_partly_used_node)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 1, 0x3f); /* node 1: 2 free */
	fx_run(f, 2, 0, 0, 0);
	fx_hold(f, 1, 2, 0x0f); /* node 2: 4 free */
	fx_job(f, 10, 0, 0, 2, 1);
	fx_job(f, 11, 0, 0, 3, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.nplacements, 2);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].node, 1);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].gpus, 0xc0);
	CHECK_INT(fx_placed(&res, 11)->ranks[0].node, 2);
	sched_free(s);
	fx_free(f);
}

TEST(gang_is_whole_or_nothing)
{
	struct fx *f = fx_new();
	for (int i = 0; i < 3; i++)
		fx_node(f, 0, 0, 0, 4);
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 1, 0x1);
	fx_job(f, 10, 0, 0, 4, 3);
	fx_job(f, 11, 0, 0, 4, 2);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) == NULL);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_RESOURCES);
	CHECK_INT(fx_wait(&res, 10)->a, 2);
	CHECK_INT(fx_wait(&res, 10)->b, 3);
	const struct sched_placement *p = fx_placed(&res, 11);
	CHECK(p != NULL);
	CHECK(p->ranks[0].node != 1 && p->ranks[1].node != 1);
	char buf[256];
	text_of(&res, f, 10, buf, sizeof(buf));
	CHECK_STR(buf, "needs 3 nodes × 4 GPUs; 2 matching nodes have 4 free now");
	sched_free(s);
	fx_free(f);
}

/* Block 1: rack 1 = switches 1 (4 nodes) and 2 (4 nodes); rack 2 =
 * switches 3 (2 nodes) and 4 (8 nodes). */
static void topo_cluster(struct fx *f)
{
	int sizes[4] = {4, 4, 2, 8}, racks[4] = {1, 1, 2, 2};
	for (int w = 0; w < 4; w++)
		for (int k = 0; k < sizes[w]; k++)
			fx_node(f, 1, (uint32_t)racks[w], (uint32_t)w + 1, 8);
}

static uint32_t sw_of(const struct fx *f, const struct sched_placement *p, int rank)
{
	return f->nodes[p->ranks[rank].node].sw;
}

TEST(gang_goes_to_smallest_domain)
{
	struct fx *f = fx_new();
	topo_cluster(f);
	fx_job(f, 10, 0, 0, 8, 3); /* a switch: 1 (best fit, first) */
	fx_job(f, 11, 0, 0, 8, 6); /* only switch 4 holds 6 */
	fx_job(f, 12, 0, 0, 8, 2); /* switch 3 fits exactly */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	const struct sched_placement *p = fx_placed(&res, 10);
	for (int k = 0; k < 3; k++)
		CHECK_INT(sw_of(f, p, k), 1);
	p = fx_placed(&res, 11);
	for (int k = 0; k < 6; k++)
		CHECK_INT(sw_of(f, p, k), 4);
	p = fx_placed(&res, 12);
	CHECK_INT(sw_of(f, p, 0), 3);
	CHECK_INT(sw_of(f, p, 1), 3);
	sched_free(s);
	fx_free(f);
}

TEST(gang_rank_order_keeps_neighbours_close)
{
	struct fx *f = fx_new();
	topo_cluster(f);
	fx_job(f, 10, 0, 0, 8, 12); /* rack 2 whole (10), then 2 from switch 1 */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	const struct sched_placement *p = fx_placed(&res, 10);
	CHECK(p != NULL);
	int changes = 0;
	for (int k = 1; k < 12; k++)
		changes += sw_of(f, p, k) != sw_of(f, p, k - 1);
	CHECK_INT(changes, 2); /* three switches, each one contiguous run of ranks */
	int in_sw1 = 0;
	for (int k = 0; k < 12; k++)
		in_sw1 += sw_of(f, p, k) == 1;
	CHECK_INT(in_sw1, 2);
	sched_free(s);
	fx_free(f);
}

TEST(gang_never_spans_blocks)
{
	struct fx *f = fx_new();
	for (int b = 1; b <= 2; b++)
		for (int k = 0; k < 2; k++)
			fx_node(f, (uint32_t)b, 1, 1, 8);
	fx_job(f, 10, 0, 0, 8, 3);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.nplacements, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_UNFIT);
	/* one node of block 2 busy: the job could fit one day, not in one block now */
	fx_node(f, 1, 1, 1, 8);
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 4, 0xff);
	fx_cycle(s, f, &res);
	const struct sched_wait *w = fx_wait(&res, 10);
	CHECK_INT(w->reason, SCHED_WAIT_TOPOLOGY);
	CHECK_INT(w->a, 2);
	char buf[256];
	text_of(&res, f, 10, buf, sizeof(buf));
	CHECK_CONTAINS(buf,
	               "needs 3 nodes × 8 GPUs in one block; the largest free block has 2 nodes");
	sched_free(s);
	fx_free(f);
}

TEST(nvlink_group_holds_a_task)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8); /* groups 0-3 and 4-7 */
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 0, 0x8c); /* GPUs 2, 3, 7 held: free 0,1 | 4,5,6 */
	fx_job(f, 10, 0, 0, 3, 1);
	fx_job(f, 11, 0, 0, 2, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].gpus, 0x70); /* 4,5,6: one group */
	CHECK_INT(fx_placed(&res, 11)->ranks[0].gpus, 0x03);
	sched_free(s);
	fx_free(f);
}

TEST(nvlink_spans_fewest_groups)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	f->nodes[0].nnvlink = 4; /* pairs */
	for (int k = 0; k < 4; k++)
		f->nodes[0].nvlink[k] = 3ull << (2 * k);
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 0, 0x01 | 0x10); /* 0 and 4 held */
	fx_job(f, 10, 0, 0, 4, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	/* two whole pairs (2,3 and 6,7), not four half pairs */
	CHECK_INT(fx_placed(&res, 10)->ranks[0].gpus, 0xcc);
	sched_free(s);
	fx_free(f);
}

/* Within an NVLink group, a task's GPUs share a PCIe switch when they can
 * (the device plugin's order: NVLink, then a PCIe switch). */
TEST(nvlink_then_pcie_switch)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8); /* NVLink groups 0-3 and 4-7 */
	f->nodes[0].nnear = 4;  /* a PCIe switch per pair */
	for (int k = 0; k < 4; k++)
		f->nodes[0].near[k] = 3ull << (2 * k);
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 0, 0x02); /* GPU 1 held: free 0 | 2,3 | 4-7 */
	fx_job(f, 10, 0, 0, 2, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	/* the fuller NVLink group (best fit), and in it the pair 2,3, not 0,2 */
	CHECK_INT(fx_placed(&res, 10)->ranks[0].gpus, 0x0c);
	sched_free(s);
	/* without switch groups, the lowest free GPUs of the group */
	f->nodes[0].nnear = 0;
	s = sched_new();
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].gpus, 0x05);
	sched_free(s);
	fx_free(f);
}

TEST(constraints_model_memory_pool_labels)
{
	struct fx *f = fx_new();
	for (int i = 0; i < 5; i++)
		fx_node(f, 0, 0, 0, 8);
	f->nodes[1].gpu_model = 2;
	f->nodes[2].gpu_mem_mib = 143360;
	f->nodes[3].pool = 7;
	f->nodes[4].labels[0] = 40;
	f->nodes[4].labels[1] = 41;
	f->nodes[4].nlabels = 2;
	/* node 0 is partly used, so best fit alone would always pick it */
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 0, 0x0f);
	struct sched_job *j = fx_job(f, 10, 0, 0, 1, 1);
	j->gpu_model = 2;
	j = fx_job(f, 11, 0, 0, 1, 1);
	j->min_gpu_mem_mib = 100000;
	j = fx_job(f, 12, 0, 0, 1, 1);
	j->pool = 7;
	j = fx_job(f, 13, 0, 0, 1, 1);
	j->selectors[0] = 41;
	j->selectors[1] = 40;
	j->nselectors = 2;
	j = fx_job(f, 14, 0, 0, 1, 1);
	j->selectors[0] = 42;
	j->nselectors = 1;
	fx_job(f, 15, 0, 0, 1, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].node, 1);
	CHECK_INT(fx_placed(&res, 11)->ranks[0].node, 2);
	CHECK_INT(fx_placed(&res, 12)->ranks[0].node, 3);
	CHECK_INT(fx_placed(&res, 13)->ranks[0].node, 4);
	CHECK_INT(fx_wait(&res, 14)->reason, SCHED_WAIT_UNFIT);
	CHECK_INT(fx_placed(&res, 15)->ranks[0].node, 0);
	sched_free(s);
	fx_free(f);
}

TEST(unschedulable_nodes_and_unhealthy_gpus)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	f->nodes[0].schedulable = 0;
	f->nodes[1].gpus_healthy = 0xf0;
	f->nodes[1].gpus_free = 0xff; /* the caller may report sick GPUs as free */
	fx_job(f, 10, 0, 0, 4, 1);
	fx_job(f, 11, 0, 0, 8, 1);
	fx_job(f, 12, 0, 0, 1, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].gpus, 0xf0);
	CHECK_INT(fx_wait(&res, 11)->reason, SCHED_WAIT_UNFIT);
	CHECK_INT(fx_wait(&res, 11)->most_free, 4);
	CHECK_INT(fx_wait(&res, 12)->reason, SCHED_WAIT_RESOURCES);
	char buf[256];
	text_of(&res, f, 11, buf, sizeof(buf));
	CHECK_STR(buf,
	          "no schedulable node matching its constraints has 8 usable GPUs (the most is 4)");
	text_of(&res, f, 12, buf, sizeof(buf));
	CHECK_STR(buf, "needs 1 GPU on one node; the most free on a matching node is 0");
	sched_free(s);
	fx_free(f);
}

TEST(quota_blocked_job_does_not_block_queue)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_quota(f, 1, 1, 8);
	fx_quota(f, 1, 2, 8);
	fx_run(f, 1, 1, 1, 0);
	fx_hold(f, 0, 0, 0xff);
	fx_job(f, 10, 1, 1, 1, 1); /* team 1: 8/8 used */
	fx_job(f, 11, 1, 2, 4, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	const struct sched_wait *w = fx_wait(&res, 10);
	CHECK_INT(w->reason, SCHED_WAIT_QUOTA);
	CHECK_INT(w->a, 8);
	CHECK_INT(w->b, 8);
	CHECK(fx_placed(&res, 11) != NULL);
	char buf[256];
	text_of(&res, f, 10, buf, sizeof(buf));
	CHECK_STR(buf, "team quota 8/8 GPUs used in queue; it asks for 1; borrowing disabled for "
	               "this queue");
	sched_free(s);
	fx_free(f);
}

TEST(borrowing_idle_quota)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 1);
	fx_quota(f, 1, 1, 8);
	fx_quota(f, 1, 2, 8);
	fx_job(f, 10, 1, 1, 8, 1);
	fx_job(f, 11, 1, 1, 8, 1); /* borrows team 2's idle 8 */
	fx_job(f, 12, 1, 1, 1, 1); /* nothing idle left */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->borrowed, 0);
	CHECK_INT(fx_placed(&res, 11)->borrowed, 1);
	CHECK_INT(fx_wait(&res, 12)->reason, SCHED_WAIT_QUOTA);
	CHECK_INT(fx_wait(&res, 12)->idle_quota, 0);
	sched_free(s);
	fx_free(f);
}

TEST(fair_share_orders_teams)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_team(f, 1, 1, 50.0);
	fx_team(f, 2, 1, 10.0);
	fx_team(f, 3, 10, 200.0); /* 20 per weight unit */
	fx_job(f, 10, 0, 1, 8, 1);
	fx_job(f, 11, 0, 3, 8, 1);
	fx_job(f, 12, 0, 2, 8, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 12) != NULL);
	/* waits come in order: team 3 (20/unit) before team 1 (50/unit) */
	CHECK_INT(res.waits[0].job_id, 11);
	CHECK_INT(res.waits[1].job_id, 10);
	sched_free(s);
	fx_free(f);
}

TEST(priority_then_aging)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_job(f, 10, 0, 1, 8, 1)->priority = 0;
	fx_job(f, 11, 0, 1, 8, 1)->priority = 5;
	f->snap.now_ms = 1000;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 11) != NULL);
	/* job 10 waited long: with a point per 100 ms it ages past 5 */
	f->jobs[0].submit_ms = 0;
	f->jobs[1].submit_ms = 900;
	f->snap.config.aging_ms = 100;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) != NULL);
	sched_free(s);
	fx_free(f);
}

TEST(queue_priority_first)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_queue(f, 2, 20, 0);
	fx_job(f, 10, 1, 1, 8, 1)->priority = 100;
	fx_job(f, 11, 2, 1, 8, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 11) != NULL);
	sched_free(s);
	fx_free(f);
}

/* Node 0: 4 GPUs free, 4 held until t=100; node 1: all 8 held until
 * t=1000. A whole-node job cannot start and reserves node 0 from t=100. */
static struct fx *backfill_cluster(void)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_run(f, 1, 0, 0, 0)->end_by_ms = 100;
	fx_hold(f, 0, 0, 0xf0);
	fx_run(f, 2, 0, 0, 0)->end_by_ms = 1000;
	fx_hold(f, 1, 1, 0xff);
	f->snap.now_ms = 10;
	f->snap.config.backfill = 1;
	fx_job(f, 10, 0, 0, 8, 1)->priority = 9;
	fx_job(f, 11, 0, 0, 4, 1);                      /* no limit, no default */
	fx_job(f, 12, 0, 0, 4, 1)->time_limit_ms = 500; /* would run past t=100 */
	fx_job(f, 13, 0, 0, 4, 1)->time_limit_ms = 50;  /* ends at t=60 */
	fx_job(f, 14, 0, 0, 4, 1)->time_limit_ms = 50;  /* nothing left for it */
	return f;
}

TEST(backfill_honours_reservation)
{
	struct fx *f = backfill_cluster();
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	const struct sched_wait *w = fx_wait(&res, 10);
	CHECK_INT(w->reason, SCHED_WAIT_RESOURCES);
	CHECK_INT(w->est_start_ms, 100);
	CHECK_INT(fx_wait(&res, 11)->reason, SCHED_WAIT_RESERVED);
	CHECK_INT(fx_wait(&res, 11)->a, 10);
	CHECK_INT(fx_wait(&res, 12)->reason, SCHED_WAIT_RESERVED);
	CHECK_INT(fx_placed(&res, 13)->ranks[0].gpus, 0x0f);
	CHECK_INT(fx_wait(&res, 14)->reason, SCHED_WAIT_RESOURCES);
	char buf[256];
	text_of(&res, f, 11, buf, sizeof(buf));
	CHECK_CONTAINS(buf, "would delay job 10, which has GPUs reserved");
	text_of(&res, f, 10, buf, sizeof(buf));
	CHECK_CONTAINS(buf, "; expected to start by 1970-01-01 00:00:00 UTC");
	/* everyone else gets an estimate from the dry run: node 1 frees at
	 * t=1000 (node 0 stays job 10's: it has no limit), 11 and 12 start
	 * then, 14 when 12 ends */
	CHECK_INT(fx_wait(&res, 11)->est_start_ms, 1000);
	CHECK_INT(fx_wait(&res, 12)->est_start_ms, 1000);
	CHECK_INT(fx_wait(&res, 14)->est_start_ms, 1500);
	/* without backfill the first fit wins: job 11 takes node 0's GPUs;
	 * in the dry run 12 starts when node 0's other half frees (t=100),
	 * 13 and 14 after it, and 10 gets node 1 at t=1000 */
	f->snap.config.backfill = 0;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 11) != NULL);
	CHECK_INT(fx_wait(&res, 10)->est_start_ms, 1000);
	CHECK_INT(fx_wait(&res, 12)->est_start_ms, 100);
	CHECK_INT(fx_wait(&res, 13)->est_start_ms, 600);
	CHECK_INT(fx_wait(&res, 14)->est_start_ms, 650);
	sched_free(s);
	fx_free(f);
}

TEST(backfill_uses_queue_default_limit)
{
	struct fx *f = backfill_cluster();
	fx_queue(f, 0, 0, 0);
	f->queues[0].default_time_limit_ms = 40; /* job 11 now ends at t=50 */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 11)->ranks[0].gpus, 0x0f);
	CHECK_INT(fx_wait(&res, 12)->reason, SCHED_WAIT_RESOURCES); /* node 0 taken till t=50 */
	sched_free(s);
	fx_free(f);
}

TEST(backfill_away_from_reserved_gpus)
{
	struct fx *f = backfill_cluster();
	fx_node(f, 0, 0, 0, 8); /* node 2: free, the 8-GPU job takes it now */
	fx_node(f, 0, 0, 0, 8); /* node 3: free at t=200 */
	fx_node(f, 0, 0, 0, 8); /* node 4: 2 GPUs free, the rest held for good */
	fx_run(f, 3, 0, 0, 0)->end_by_ms = 200;
	fx_hold(f, 2, 3, 0xff);
	fx_run(f, 4, 0, 0, 0);
	fx_hold(f, 3, 4, 0x3f);
	fx_job(f, 15, 0, 0, 8, 2)->priority = 8; /* two whole nodes: reserved */
	fx_job(f, 16, 0, 0, 2, 1);               /* long, fits off the reservations */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_placed(&res, 10)->ranks[0].node, 2);
	CHECK_INT(fx_wait(&res, 15)->est_start_ms, 200);
	CHECK_INT(fx_placed(&res, 16)->ranks[0].node, 4);
	sched_free(s);
	fx_free(f);
}

TEST(preemption_by_priority)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_queue(f, 2, 0, 0);
	f->snap.config.preemption = 1;
	f->snap.now_ms = 1000;
	fx_run(f, 1, 1, 2, 0); /* other team, same queue: not lower-priority work */
	fx_hold(f, 0, 0, 0xff);
	fx_run(f, 2, 2, 2, 50); /* lower-priority queue */
	fx_hold(f, 1, 1, 0xff);
	fx_job(f, 10, 1, 1, 8, 1)->priority = 5;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 2);
	CHECK_INT(res.preemptions[0].for_job_id, 10);
	CHECK_INT(res.preemptions[0].reclaim, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_PREEMPTING);
	CHECK_INT(fx_wait(&res, 10)->a, 1);
	/* next cycle the victim is stopping: nothing more is stopped */
	f->runs[1].r.stopping = 1;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_PREEMPTING);
	/* same team, lower priority, same queue: fair game */
	f->runs[1].r.stopping = 0;
	f->runs[1].r.queue = 1;
	f->runs[1].r.team = 1;
	f->runs[1].r.priority = 1;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	/* preemption off: nothing stops */
	f->snap.config.preemption = 0;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_RESOURCES);
	sched_free(s);
	fx_free(f);
}

TEST(reclaim_borrowed_quota)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 1);
	fx_quota(f, 1, 1, 8);
	fx_quota(f, 1, 2, 8);
	f->snap.config.preemption = 1;
	fx_run(f, 1, 1, 2, 9); /* team 2 within its quota */
	fx_hold(f, 0, 0, 0xff);
	fx_run(f, 2, 1, 2, 9)->borrowed = 1; /* team 2 on team 1's idle quota */
	fx_hold(f, 1, 1, 0xff);
	fx_job(f, 10, 1, 1, 8, 1);
	fx_job(f, 11, 1, 2, 8, 1)->priority = 99; /* a borrower never preempts */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 2);
	CHECK_INT(res.preemptions[0].reclaim, 1);
	CHECK_INT(fx_wait(&res, 11)->reason, SCHED_WAIT_QUOTA);
	sched_free(s);
	fx_free(f);
}

/* A job admitted on borrowed quota stops lower-priority work (a lower
 * queue's, its own team's) like any job, but reclaims nothing and never
 * touches another team's work admitted within its nominal quota. */
TEST(borrower_stops_only_lower_priority_work)
{
	struct fx *f = fx_new();
	for (int i = 0; i < 3; i++)
		fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 1);
	fx_queue(f, 2, 0, 0); /* scavenger: no quota */
	fx_quota(f, 1, 1, 8);
	fx_quota(f, 1, 2, 24);
	fx_quota(f, 1, 3, 0);
	f->snap.config.preemption = 1;
	f->snap.now_ms = 3600000;
	fx_run(f, 1, 1, 2, 0); /* team 2 within its nominal quota, priority 0 */
	fx_hold(f, 0, 0, 0xff);
	fx_run(f, 2, 1, 3, 0)->borrowed = 1; /* team 3 borrowing all it holds */
	fx_hold(f, 1, 1, 0xff);
	fx_run(f, 3, 2, 2, 0); /* scavenger work */
	fx_hold(f, 2, 2, 0xff);
	/* team 1 (nominal 8) wants 16 GPUs: 8 of its own, 8 borrowed of
	 * team 2's idle 16 */
	fx_job(f, 10, 1, 1, 8, 2)->priority = 5;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	/* the scavenger's node is not enough, and team 3's borrowed node is
	 * not a borrower's to reclaim: waits */
	CHECK_INT(res.npreemptions, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_RESOURCES);
	/* team 3's borrowed attempt becomes team 1's lower-priority work:
	 * with the scavenger's node that makes two */
	f->runs[1].r.team = 1;
	f->runs[1].r.borrowed = 0;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 2);
	CHECK(fx_preempted(&res, 2) && fx_preempted(&res, 3) && !fx_preempted(&res, 1));
	CHECK_INT(res.preemptions[0].reclaim, 0);
	CHECK_INT(res.preemptions[1].reclaim, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_PREEMPTING);
	sched_free(s);
	fx_free(f);
}

TEST(checkpointing_victim_preferred)
{
	struct fx *f = fx_new();
	for (int i = 0; i < 3; i++)
		fx_node(f, 0, 0, 0, 8);
	f->snap.config.preemption = 1;
	f->snap.now_ms = 10000;
	struct sched_running *r = fx_run(f, 1, 0, 1, 0);
	r->start_ms = 9000; /* loses 1000 */
	fx_hold(f, 0, 0, 0xff);
	r = fx_run(f, 2, 0, 1, 0);
	r->start_ms = 1000;
	r->checkpointing = 1;
	r->last_checkpoint_ms = 9500; /* loses 500 */
	fx_hold(f, 1, 1, 0xff);
	r = fx_run(f, 3, 0, 1, 0);
	r->start_ms = 9900; /* loses 100, but does not checkpoint */
	fx_hold(f, 2, 2, 0xff);
	fx_job(f, 10, 0, 1, 8, 1)->priority = 1;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 2);
	/* without checkpoints the least work lost wins */
	f->runs[1].r.checkpointing = 0;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 3);
	sched_free(s);
	fx_free(f);
}

/* Stopping a gang costs a restart on every GPU it holds, so a one-GPU job
 * that has waited an hour does not stop a 16-GPU gang that has just
 * checkpointed (it would free 15 GPUs it does not need); it stops a small
 * attempt instead, or waits. */
TEST(restart_cost_keeps_small_jobs_off_gangs)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	f->snap.config.preemption = 1;
	f->snap.config.preempt_loss_pct = 50;
	f->snap.config.restart_cost_ms = 10 * 60000;
	f->snap.now_ms = 10 * 3600000LL;
	struct sched_running *r = fx_run(f, 1, 0, 1, 0); /* the gang */
	r->start_ms = f->snap.now_ms - 3 * 3600000LL;
	r->checkpointing = 1;
	r->last_checkpoint_ms = f->snap.now_ms - 1000; /* loses one second */
	fx_hold(f, 0, 0, 0xff);
	fx_hold(f, 0, 1, 0xff);
	struct sched_job *j = fx_job(f, 10, 0, 1, 1, 1);
	j->priority = 5;
	j->submit_ms = f->snap.now_ms - 3600000LL;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_RESOURCES);
	/* without the restart's cost the second's loss was worth it */
	f->snap.config.restart_cost_ms = 0;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 1);
	sched_free(s);
	fx_free(f);
}

TEST(no_preemption_when_it_would_not_fit)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	f->snap.config.preemption = 1;
	fx_run(f, 1, 0, 1, 0); /* lower priority */
	fx_hold(f, 0, 0, 0xff);
	fx_run(f, 2, 0, 1, 9); /* higher priority */
	fx_hold(f, 1, 1, 0x01);
	fx_job(f, 10, 0, 1, 8, 2)->priority = 5;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	const struct sched_wait *w = fx_wait(&res, 10);
	CHECK_INT(w->reason, SCHED_WAIT_RESOURCES);
	CHECK_INT(w->blockers, 1);
	CHECK_INT(w->blocker_gpus, 8);
	CHECK_INT(w->blocker_job, 100001);
	CHECK_INT(w->blocker_kind, SCHED_BLOCK_PRIORITY);
	CHECK_INT(w->held, SCHED_HELD_NONE);
	char buf[256];
	text_of(&res, f, 10, buf, sizeof(buf));
	CHECK_STR(buf, "needs 2 nodes × 8 GPUs; 0 matching nodes have 8 free now; job 100001 "
	               "(lower priority) holds 8 GPUs it could use");
	sched_free(s);
	fx_free(f);
}

TEST(victims_are_not_shared)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	f->snap.config.preemption = 1;
	fx_run(f, 1, 0, 1, 0);
	fx_hold(f, 0, 0, 0xff);
	fx_job(f, 10, 0, 1, 8, 1)->priority = 5;
	fx_job(f, 11, 0, 1, 8, 1)->priority = 4;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].for_job_id, 10);
	CHECK_INT(fx_wait(&res, 11)->reason, SCHED_WAIT_RESOURCES);
	sched_free(s);
	fx_free(f);
}

/* The reclaim loop the simulator found: team 2 (lower usage, so first in
 * fair share) had borrowed; team 1 reclaimed; the victim stopped and was
 * requeued. Its GPUs must go to team 1's job, not back to the victim. */
TEST(held_job_gets_what_its_victims_freed)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 1);
	fx_quota(f, 1, 1, 8);
	fx_quota(f, 1, 2, 8);
	fx_team(f, 1, 1, 100.0);
	fx_team(f, 2, 1, 1.0);
	f->snap.config.preemption = 1;
	f->snap.now_ms = 60000;
	fx_job(f, 10, 1, 1, 8, 1)->held_since_ms = 59000; /* reclaimed a minute ago */
	fx_job(f, 11, 1, 2, 8, 1);                        /* the requeued victim */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.nplacements, 1);
	CHECK(fx_placed(&res, 10) != NULL);
	/* the hold is what makes the difference: expired, fair share wins */
	f->jobs[0].held_since_ms = f->snap.now_ms - SCHED_HOLD_MS;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 11) != NULL);
	sched_free(s);
	fx_free(f);
}

/* An attempt stopping for one job is not freed for another, even one
 * decided before it. */
TEST(stopping_attempt_belongs_to_its_job)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_queue(f, 2, 5, 0);
	fx_queue(f, 3, 0, 0);
	f->snap.config.preemption = 1;
	f->snap.now_ms = 100000;
	struct sched_running *r = fx_run(f, 1, 3, 1, 0); /* stopping for job 11 */
	r->stopping = 1;
	r->stopping_for = 11;
	fx_hold(f, 0, 0, 0xff);
	fx_run(f, 2, 3, 1, 0); /* lower priority, free to preempt */
	fx_hold(f, 1, 1, 0xff);
	fx_job(f, 10, 1, 1, 8, 1)->held_since_ms = 99000; /* first, and before 11 */
	fx_job(f, 11, 2, 1, 8, 1);
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 2);
	CHECK_INT(res.preemptions[0].for_job_id, 10);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_PREEMPTING);
	CHECK_INT(fx_wait(&res, 11)->reason, SCHED_WAIT_PREEMPTING);
	sched_free(s);
	fx_free(f);
}

/* A just-started attempt (a requeued victim, typically) is no victim, and
 * a job that young work would make fit waits for it rather than stop older
 * work that loses more. */
TEST(young_attempts_are_not_victims)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	f->snap.config.preemption = 1;
	f->snap.config.min_runtime_ms = 5000;
	f->snap.now_ms = 100000;
	fx_run(f, 1, 0, 1, 0)->start_ms = 98000; /* young */
	fx_hold(f, 0, 0, 0xff);
	fx_run(f, 2, 0, 1, 0)->start_ms = 10000; /* old: loses 90 s */
	fx_hold(f, 1, 1, 0xff);
	fx_job(f, 10, 0, 1, 8, 1)->priority = 5;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_RESOURCES);
	/* only the young one could make room: still nothing */
	f->runs[1].r.priority = 9;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	/* of age: it goes */
	f->snap.now_ms = 103000;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 1);
	/* 0: any age */
	f->snap.now_ms = 100000;
	f->snap.config.min_runtime_ms = 0;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	sched_free(s);
	fx_free(f);
}

/* Lost work is GPU-time: one GPU that ran 5 s loses less than eight that
 * ran 1 s. */
TEST(victims_by_lost_gpu_time)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	f->snap.config.preemption = 1;
	f->snap.now_ms = 10000;
	fx_run(f, 1, 0, 1, 0)->start_ms = 9000; /* 8 GPUs x 1 s */
	fx_hold(f, 0, 0, 0xff);
	fx_run(f, 2, 0, 1, 0)->start_ms = 5000; /* 1 GPU x 5 s */
	fx_hold(f, 1, 1, 0x01);
	fx_run(f, 3, 0, 1, 9); /* the rest of node 1, not preemptible */
	fx_hold(f, 2, 1, 0xfe);
	fx_job(f, 10, 0, 1, 1, 1)->priority = 5;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 2);
	sched_free(s);
	fx_free(f);
}

/* Victims may lose at most preempt_loss_pct % of the GPU-time the job has
 * waited. */
TEST(preemption_pays_back)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	f->snap.config.preemption = 1;
	f->snap.config.preempt_loss_pct = 100;
	f->snap.now_ms = 20000;
	fx_run(f, 1, 0, 1, 0)->start_ms = 10000; /* would lose 8 x 10 s */
	fx_hold(f, 0, 0, 0xff);
	struct sched_job *j = fx_job(f, 10, 0, 1, 8, 1);
	j->priority = 5;
	j->submit_ms = 15000; /* waited 8 x 5 s */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	f->jobs[0].submit_ms = 10000; /* waited as long as the victim ran */
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	sched_free(s);
	fx_free(f);
}

/* A requeued victim waits its turn: it does not stop its own team's
 * lower-priority work in its queue (a cascade), only lower queues' work. */
TEST(requeued_job_does_not_cascade)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_queue(f, 2, 0, 0);
	f->snap.config.preemption = 1;
	f->snap.now_ms = 100000;
	fx_run(f, 1, 1, 1, 0); /* its own team's, lower priority, same queue */
	fx_hold(f, 0, 0, 0xff);
	struct sched_job *j = fx_job(f, 10, 1, 1, 8, 1);
	j->priority = 5;
	j->requeued_ms = 90000;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_RESOURCES);
	f->jobs[0].requeued_ms = 0; /* never preempted itself: it may */
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	f->jobs[0].requeued_ms = 90000; /* lower queue's work: it may too */
	f->runs[0].r.queue = 2;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	sched_free(s);
	fx_free(f);
}

/* The victims may lose at most preempt_loss_pct % of the GPU-time the job
 * has waited since it last entered the queue, not since its submission. */
TEST(preemption_cost_counts_from_requeue)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_queue(f, 2, 0, 0);
	f->snap.config.preemption = 1;
	f->snap.config.preempt_loss_pct = 50;
	f->snap.now_ms = 10000;
	fx_run(f, 1, 2, 1, 0)->start_ms = 6000; /* loses 4,000 ms x 8 GPUs */
	fx_hold(f, 0, 0, 0xff);
	fx_job(f, 10, 1, 1, 8, 1)->submit_ms = 1; /* waited ~10,000 ms: may lose 40,000 */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	f->jobs[0].requeued_ms = 5000; /* back in the queue 5,000 ms: may lose 20,000 */
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	sched_free(s);
	fx_free(f);
}

/* Past overdue_ms a job goes ahead of its queue's others (fair share and
 * priority aside), in submission order; a gang's wait counts once per
 * node. Past starve_ms it goes ahead of higher queues too. */
TEST(overdue_and_starving_jobs_go_first)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_queue(f, 2, 0, 0);
	fx_team(f, 1, 1, 100.0); /* a heavy user: last in fair share */
	fx_team(f, 2, 1, 0.0);
	f->snap.now_ms = 100000;
	f->snap.config.overdue_ms = 60000;
	f->snap.config.starve_ms = 150000;
	fx_run(f, 1, 1, 1, 0);
	fx_hold(f, 0, 1, 0xff);                       /* one node free */
	fx_job(f, 10, 2, 1, 8, 1)->submit_ms = 1000;  /* lower queue, waited 99 s */
	fx_job(f, 11, 1, 1, 8, 1)->submit_ms = 20000; /* waited 80 s: overdue */
	fx_job(f, 12, 1, 2, 8, 1)->priority = 9;      /* fresh, team 2, high priority */
	f->jobs[2].submit_ms = 99000;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 11) != NULL);
	f->snap.config.overdue_ms = 0; /* off: fair share and priority decide */
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 12) != NULL);
	f->snap.config.overdue_ms = 60000;
	f->snap.config.starve_ms = 90000; /* job 10 starves: ahead of queue 1 */
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) != NULL);
	sched_free(s);
	fx_free(f);
}

/* A gang's wait counts once per node: it cannot use the holes small jobs
 * fill, so it is overdue sooner. */
TEST(gang_is_overdue_sooner)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_node(f, 0, 0, 0, 8);
	fx_team(f, 1, 1, 100.0);
	fx_team(f, 2, 1, 0.0);
	f->snap.now_ms = 100000;
	f->snap.config.overdue_ms = 60000;
	fx_job(f, 10, 0, 2, 8, 1)->submit_ms = 50000; /* team 2 first in fair share */
	fx_job(f, 11, 0, 1, 8, 2)->submit_ms = 60000; /* 40 s x 2 nodes: overdue */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 11) != NULL);
	f->jobs[1].nodes = 1; /* 40 s on one node: not overdue, fair share decides */
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) != NULL);
	CHECK(fx_placed(&res, 11) != NULL);
	f->jobs[1].nodes = 2;
	f->snap.config.overdue_ms = 0;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) != NULL);
	sched_free(s);
	fx_free(f);
}

/* An attempt that started only once its job was overdue (starving) is not
 * stopped for its queue's (any higher queue's) work: that would undo the
 * aging that let it start. */
TEST(late_starters_keep_running)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 0);
	fx_queue(f, 2, 0, 0);
	f->snap.config.preemption = 1;
	f->snap.config.overdue_ms = 10000;
	f->snap.config.starve_ms = 40000;
	f->snap.now_ms = 200000;
	struct sched_running *r = fx_run(f, 1, 2, 1, 0);
	r->submit_ms = 1000;
	r->start_ms = 100000; /* waited 99 s: starving when it started */
	fx_hold(f, 0, 0, 0xff);
	fx_job(f, 10, 1, 1, 8, 1)->submit_ms = 190000;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	f->runs[0].r.submit_ms = 80000; /* waited 20 s: only overdue in its queue */
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	f->runs[0].r.queue = 1; /* the job's own team and queue, lower priority */
	f->jobs[0].priority = 5;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	sched_free(s);
	fx_free(f);
}

/* An overdue job waiting for idle quota to borrow keeps it from later
 * borrowers of its queue; a team within its nominal quota still starts. */
TEST(overdue_borrower_keeps_idle_quota)
{
	struct fx *f = fx_new();
	for (int i = 0; i < 4; i++)
		fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 10, 1);
	fx_quota(f, 1, 1, 16);
	fx_quota(f, 1, 2, 8);
	f->snap.now_ms = 100000;
	f->snap.config.overdue_ms = 30000;
	f->snap.config.backfill = 1;
	f->snap.config.max_reservations = 2;
	fx_run(f, 1, 1, 1, 0);
	fx_hold(f, 0, 0, 0xff);
	fx_hold(f, 0, 1, 0xff);                      /* team 1 holds its 16: 8 idle GPUs of quota */
	fx_job(f, 10, 1, 3, 8, 2)->submit_ms = 1000; /* overdue, borrows 16 */
	fx_job(f, 11, 1, 3, 8, 1)->submit_ms = 90000; /* borrows 8 */
	fx_job(f, 12, 1, 2, 8, 1)->submit_ms = 95000; /* within team 2's nominal */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_QUOTA);
	CHECK_INT(fx_wait(&res, 11)->reason, SCHED_WAIT_QUOTA);
	CHECK_INT(fx_wait(&res, 11)->idle_quota, 0);
	CHECK(fx_placed(&res, 12) != NULL);
	f->snap.config.overdue_ms = 0; /* no hold: the small borrower goes */
	f->njobs = 2;                  /* (without job 12, which would take the 8) */
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 11) != NULL);
	sched_free(s);
	fx_free(f);
}

/* Every waiting job gets an estimated start from the dry run (the first
 * SCHED_EST_JOBS in order, or up to the one asked for), quota included; one
 * that can never run, or beyond the window, gets none. */
TEST(every_waiting_job_gets_an_estimate)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 0, 0);
	fx_quota(f, 1, 1, 8);
	fx_quota(f, 1, 2, 8);
	f->snap.now_ms = 10;
	fx_run(f, 1, 1, 1, 0)->end_by_ms = 1000;
	fx_hold(f, 0, 0, 0xff);
	for (int k = 0; k < SCHED_EST_JOBS + 10; k++)
		fx_job(f, 10 + k, 1, 2, 8, 1)->time_limit_ms = 100;
	fx_job(f, 5, 1, 1, 16, 1);                     /* 16 GPUs on one node: never */
	fx_job(f, 6, 1, 1, 8, 1)->time_limit_ms = 100; /* team 1: quota from t=1000 */
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 5)->reason, SCHED_WAIT_UNFIT);
	CHECK_INT(fx_wait(&res, 5)->est_start_ms, 0);
	CHECK_INT(fx_wait(&res, 6)->reason, SCHED_WAIT_QUOTA);
	CHECK_INT(fx_wait(&res, 6)->est_start_ms, 1000); /* first in order (id) */
	CHECK_INT(fx_wait(&res, 6)->reserved, 0);
	CHECK_INT(fx_wait(&res, 10)->est_start_ms, 1100);
	CHECK_INT(fx_wait(&res, 11)->est_start_ms, 1200);
	CHECK_INT(fx_wait(&res, 10 + SCHED_EST_JOBS - 2)->est_start_ms,
	          1000 + 100 * (SCHED_EST_JOBS - 1));
	CHECK_INT(fx_wait(&res, 10 + SCHED_EST_JOBS - 1)->est_start_ms, 0); /* beyond */
	char buf[256];
	text_of(&res, f, 10, buf, sizeof(buf)); /* an estimate is not in the words */
	CHECK(strstr(buf, "expected") == NULL);
	/* asked for, a job further back gets one too, from every job ahead of it */
	f->snap.config.est_job_id = 10 + SCHED_EST_JOBS + 5;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 10 + SCHED_EST_JOBS + 5)->est_start_ms,
	          1100 + 100 * (SCHED_EST_JOBS + 5));
	CHECK_INT(fx_wait(&res, 10 + SCHED_EST_JOBS + 6)->est_start_ms, 0);
	CHECK_INT(fx_wait(&res, 10)->est_start_ms, 1100);
	f->snap.config.est_job_id = 5; /* never runs: nothing changes */
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 5)->est_start_ms, 0);
	CHECK_INT(fx_wait(&res, 10 + SCHED_EST_JOBS - 1)->est_start_ms, 0);
	sched_free(s);
	fx_free(f);
}

/* A reserved job holds its GPUs in the dry run from its reservation to its
 * time limit and then gives them back: the jobs behind it are estimated
 * too (they once all showed "unknown" behind a reservation). */
TEST(jobs_behind_a_reservation_get_estimates)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 8);
	f->snap.config.backfill = 1;
	f->snap.config.max_reservations = 1;
	f->snap.now_ms = 10;
	fx_run(f, 1, 0, 1, 0)->end_by_ms = 1000;
	fx_hold(f, 0, 0, 0xff);
	fx_job(f, 10, 0, 1, 8, 1)->time_limit_ms = 100;
	fx_job(f, 11, 0, 1, 4, 1)->time_limit_ms = 100;
	fx_job(f, 12, 0, 1, 8, 1)->time_limit_ms = 100;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 10)->reserved, 1);
	CHECK_INT(fx_wait(&res, 10)->est_start_ms, 1000);
	CHECK_INT(fx_wait(&res, 11)->est_start_ms, 1100);
	CHECK_INT(fx_wait(&res, 12)->est_start_ms, 1200);
	/* the dry run leaves the reservation as it was: the same decisions again */
	fx_cycle(s, f, &res);
	CHECK_INT(res.nplacements, 0);
	CHECK_INT(fx_wait(&res, 10)->reserved, 1);
	CHECK_INT(fx_wait(&res, 11)->est_start_ms, 1100);
	CHECK_INT(fx_wait(&res, 12)->est_start_ms, 1200);
	sched_free(s);
	fx_free(f);
}

TEST(wait_text_wording)
{
	struct sched_job j = {.id = 1, .gpus = 8, .nodes = 16};
	char buf[256];
	struct sched_wait w = {.job_id = 1,
	                       .reason = SCHED_WAIT_TOPOLOGY,
	                       .a = 11,
	                       .b = 16,
	                       .blockers = 3,
	                       .blocker_job = 7,
	                       .blocker_gpus = 40,
	                       .blocker_kind = SCHED_BLOCK_PRIORITY};
	sched_wait_text(&w, &j, NULL, NULL, buf, sizeof(buf));
	CHECK_STR(buf,
	          "needs 16 nodes × 8 GPUs in one block; the largest free block has 11 nodes; 3 "
	          "jobs (lower priority; job 7 first) hold 40 GPUs it could use");
	w = (struct sched_wait){.reason = SCHED_WAIT_QUOTA, .a = 64, .b = 64, .idle_quota = -1};
	j.nodes = 1;
	sched_wait_text(&w, &j, NULL, NULL, buf, sizeof(buf));
	CHECK_STR(buf, "team quota 64/64 GPUs used in queue; it asks for 8; borrowing disabled for "
	               "this queue");
	w.idle_quota = 2;
	sched_wait_text(&w, &j, NULL, NULL, buf, sizeof(buf));
	CHECK_CONTAINS(buf, "; only 2 idle GPUs to borrow in the queue");
	w = (struct sched_wait){.reason = SCHED_WAIT_PREEMPTING, .a = 2};
	sched_wait_text(&w, &j, NULL, NULL, buf, sizeof(buf));
	CHECK_STR(buf, "stopping 2 running attempts to make room");
	char tiny[8];
	sched_wait_text(&w, &j, NULL, NULL, tiny, sizeof(tiny));
	CHECK_STR(tiny, "stoppin");
}

TEST(fits_ever_explains)
{
	struct fx *f = fx_new();
	fx_node(f, 1, 1, 1, 8);
	fx_node(f, 1, 1, 1, 4);
	fx_node(f, 2, 1, 1, 8);
	f->nodes[2].gpu_model = 2;
	f->nodes[2].pool = 3;
	struct sched_job j = {.id = 1, .gpus = 8, .nodes = 1};
	char why[256];
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), 0);
	j.gpus = 16;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_UNFIT);
	CHECK_STR(why, "asks for 16 GPUs per node, but the largest matching node has 8");
	j.gpus = 8;
	j.nodes = 3;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_UNFIT);
	CHECK_STR(why,
	          "asks for 3 nodes with 8 GPUs each, but only 2 matching nodes have that many");
	j.nodes = 2;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_UNFIT);
	CHECK_STR(why,
	          "asks for 2 nodes with 8 GPUs each in one block, but the largest block has 1 "
	          "such node");
	j.nodes = 1;
	j.gpu_model = 9;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_UNFIT);
	CHECK_STR(why, "no node has the requested GPU model");
	j.gpu_model = 1;
	j.min_gpu_mem_mib = 200000;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_UNFIT);
	CHECK_STR(why, "asks for 200000 MiB per GPU, but the largest GPUs of the requested model "
	               "have 81920 MiB");
	j.min_gpu_mem_mib = 0;
	j.pool = 3;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_UNFIT);
	CHECK_STR(why, "no node with the requested GPUs is in the requested pool");
	j.pool = 0;
	j.selectors[0] = 5;
	j.nselectors = 1;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_UNFIT);
	CHECK_CONTAINS(why, "carries all of the requested labels");
	j.nselectors = 0;
	j.gpus = -1;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), ERR_INVALID);
	/* state does not matter: a drained, busy node still counts */
	j.gpus = 4;
	f->nodes[1].schedulable = 0;
	f->nodes[1].gpus_free = 0;
	CHECK_INT(sched_fits_ever(f->nodes, f->nnodes, &j, why, sizeof(why)), 0);
	fx_free(f);
}

TEST(malformed_snapshot_is_invalid)
{
	struct fx *f = fx_new();
	fx_node(f, 0, 0, 0, 4);
	fx_run(f, 1, 0, 0, 0);
	fx_hold(f, 0, 0, 0x10); /* GPU 4 of a 4-GPU node */
	struct sched *s = sched_new();
	struct sched_result res = {0};
	CHECK_INT(sched_cycle(s, fx_snap(f), &res), ERR_INVALID);
	f->runs[0].holds[0].gpus = 0x1;
	f->runs[0].holds[0].node = 3;
	CHECK_INT(sched_cycle(s, fx_snap(f), &res), ERR_INVALID);
	f->runs[0].holds[0].node = 0;
	fx_job(f, 1, 0, 0, -1, 1);
	CHECK_INT(sched_cycle(s, fx_snap(f), &res), ERR_INVALID);
	f->jobs[0].gpus = 1;
	CHECK_INT(sched_cycle(s, fx_snap(f), &res), 0);
	CHECK_INT(res.nplacements, 1);
	sched_free(s);
	fx_free(f);
}

TEST(empty_cluster_and_empty_queue)
{
	struct fx *f = fx_new();
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.nplacements + res.nwaits + res.npreemptions, 0);
	fx_job(f, 1, 0, 0, 1, 1);
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 1)->reason, SCHED_WAIT_UNFIT);
	sched_free(s);
	sched_free(NULL);
	fx_free(f);
}

TEST(decay_halves_per_half_life)
{
	CHECK(sched_decay(8.0, 0, 1000) == 8.0);
	double h = sched_decay(8.0, 1000, 1000);
	CHECK(h > 3.999999 && h < 4.000001);
	h = sched_decay(8.0, 1500, 1000);
	CHECK(h > 2.828426 && h < 2.828428);
	CHECK(sched_decay(8.0, 1000000000, 1) == 0.0);
}

TEST_MAIN()
