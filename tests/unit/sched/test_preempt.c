/* Preemption's rules over tables of cases: which victims a waiting job
 * stops, whether the loss limit lets it, what it says while it waits, and
 * that what victims free goes to the job they were stopped for. */
#include "sched_fixture.h"

#define MIN_MS (60 * 1000LL)
#define NOW    (200 * 60 * MIN_MS)

/* Team 1 (the waiting job's) has a large nominal quota in queue 1, team 2
 * none: everything team 2 runs there is borrowed, and team 1 reclaims it. */
static struct fx *world(int nodes)
{
	struct fx *f = fx_new();
	for (int i = 0; i < nodes; i++)
		fx_node(f, 0, 0, 0, 8);
	fx_queue(f, 1, 0, 1);
	fx_quota(f, 1, 1, 1024);
	fx_quota(f, 1, 2, 0);
	f->snap.now_ms = NOW;
	f->snap.config = (struct sched_config){.preemption = 1,
	                                       .max_reservations = 1,
	                                       .min_runtime_ms = 5 * MIN_MS,
	                                       .restart_cost_ms = 10 * MIN_MS,
	                                       .preempt_max_ratio = SCHED_DEFAULT_PREEMPT_RATIO,
	                                       .preempt_loss_pct = SCHED_DEFAULT_PREEMPT_LOSS_PCT};
	return f;
}

static const char *team_name(void *ctx, uint32_t id)
{
	(void)ctx;
	return id == 1 ? "a" : id == 2 ? "b" : NULL;
}

struct loss_case {
	const char *what;
	int vnodes, vgpus;    /* the victim: nodes × GPUs on each (of 8) */
	int64_t ran, ckpt;    /* minutes it has run; since its last checkpoint (-1: none) */
	int borrowed;         /* 1: team 2's borrowed work (reclaim), 0: lower priority */
	int jgpus, jnodes;    /* the waiting job */
	int64_t waited;       /* minutes */
	int ratio, pct;       /* preempt_max_ratio, preempt_loss_pct */
	int stops;            /* expected: the victim is stopped */
	enum sched_held held; /* expected otherwise */
};

static const struct loss_case loss_cases[] = {
        {"equals: an old victim of the same size", 1, 8, 600, -1, 0, 8, 1, 1, 2, 50, 1, 0},
        {"equals: two GPUs for two", 1, 2, 6, -1, 0, 2, 1, 1, 2, 50, 1, 0},
        {"a young victim: wait for its minimum runtime", 1, 8, 2, -1, 0, 8, 1, 1, 2, 50, 0,
         SCHED_HELD_YOUNG},
        {"four GPUs may stop eight (ratio 2)", 1, 8, 600, -1, 0, 4, 1, 1, 2, 50, 1, 0},
        {"two GPUs may not stop eight that lose an hour", 1, 8, 60, -1, 0, 2, 1, 60, 2, 50, 0,
         SCHED_HELD_LOSS},
        {"... until it has waited ten hours", 1, 8, 60, -1, 0, 2, 1, 600, 2, 50, 1, 0},
        {"one GPU does not stop a 16-node gang that just checkpointed", 16, 8, 600, 0, 0, 1, 1, 60,
         2, 50, 0, SCHED_HELD_LOSS},
        {"... until it has waited two days", 16, 8, 600, 0, 0, 1, 1, 3000, 2, 50, 1, 0},
        {"reclaim: a young borrowed gang for one GPU", 16, 8, 1, -1, 1, 1, 1, 0, 2, 50, 1, 0},
        {"reclaim: a borrower that would lose ten hours", 1, 8, 600, -1, 1, 1, 1, 0, 2, 50, 1, 0},
        {"ratio 0: only the loss limit, which holds equals back", 1, 8, 600, -1, 0, 8, 1, 60, 0, 50,
         0, SCHED_HELD_LOSS},
        {"loss limit off: any size once of age", 16, 8, 600, -1, 0, 1, 1, 0, 2, 0, 1, 0},
};

static void run_loss_case(const struct loss_case *c)
{
	struct fx *f = world(c->vnodes);
	f->snap.config.preempt_max_ratio = c->ratio;
	f->snap.config.preempt_loss_pct = c->pct;
	struct sched_running *v = fx_run(f, 1, 1, c->borrowed ? 2 : 1, 0);
	v->start_ms = NOW - c->ran * MIN_MS;
	v->borrowed = c->borrowed;
	if (c->ckpt >= 0) {
		v->checkpointing = 1;
		v->last_checkpoint_ms = NOW - c->ckpt * MIN_MS;
	}
	uint64_t mask = (1ull << c->vgpus) - 1;
	for (int i = 0; i < c->vnodes; i++)
		fx_hold(f, 0, i, mask);
	if (c->vgpus < 8) { /* the rest of each node: work nobody may stop */
		fx_run(f, 2, 1, 1, 99);
		for (int i = 0; i < c->vnodes; i++)
			fx_hold(f, 1, i, 0xff & ~mask);
	}
	struct sched_job *j = fx_job(f, 10, 1, 1, c->jgpus, c->jnodes);
	j->priority = 5;
	j->submit_ms = NOW - c->waited * MIN_MS;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	const struct sched_wait *w = fx_wait(&res, 10);
	fprintf(stderr, "case: %s\n", c->what);
	CHECK(w != NULL);
	CHECK_INT(res.npreemptions, c->stops);
	if (c->stops) {
		CHECK_INT(res.preemptions[0].attempt_id, 1);
		CHECK_INT(res.preemptions[0].reclaim, c->borrowed);
		CHECK_INT(w->reason, SCHED_WAIT_PREEMPTING);
		CHECK_INT(w->blocker_kind,
		          c->borrowed ? SCHED_BLOCK_BORROWED : SCHED_BLOCK_PRIORITY);
	} else {
		CHECK_INT(w->held, c->held);
		CHECK_INT(w->blockers, 1);
		CHECK_INT(w->blocker_job, 100001);
	}
	if (c->held == SCHED_HELD_YOUNG)
		CHECK_INT(w->held_until_ms, v->start_ms + 5 * MIN_MS);
	if (c->held == SCHED_HELD_LOSS)
		CHECK_INT(w->held_gpus, c->vnodes * c->vgpus);
	sched_free(s);
	fx_free(f);
}

TEST(loss_rule_over_cases)
{
	for (size_t k = 0; k < sizeof(loss_cases) / sizeof(loss_cases[0]); k++)
		run_loss_case(&loss_cases[k]);
}

/* Reclaim is a guarantee: a job within its quota takes borrowed GPUs back
 * at once, even where a cheaper victim of lower priority is still young
 * (it would otherwise wait for it to come of age). */
TEST(reclaim_goes_before_young_lower_priority_work)
{
	struct fx *f = world(2);
	fx_run(f, 1, 1, 1, 0)->start_ms = NOW - MIN_MS; /* young, own team, lower priority */
	fx_hold(f, 0, 0, 0xff);
	struct sched_running *b = fx_run(f, 2, 1, 2, 50); /* team 2's, borrowed, old */
	b->borrowed = 1;
	b->start_ms = NOW - 600 * MIN_MS;
	fx_hold(f, 1, 1, 0xff);
	fx_job(f, 10, 1, 1, 8, 1)->priority = 5;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 1);
	CHECK_INT(res.preemptions[0].attempt_id, 2);
	CHECK_INT(res.preemptions[0].reclaim, 1);
	char buf[256];
	sched_wait_text(fx_wait(&res, 10), &f->jobs[0], team_name, NULL, buf, sizeof(buf));
	CHECK_STR(buf, "stopping job 100002 (borrowed by team b) to reclaim its team's quota");
	sched_free(s);
	fx_free(f);
}

/* Which borrowed attempt a reclaim stops: a checkpointing one first, then
 * the least work lost; age is no protection from reclaim. */
TEST(reclaim_victim_choice)
{
	static const struct {
		const char *what;
		int64_t ran[3];  /* minutes each of three borrowed 8-GPU attempts has run */
		int64_t ckpt[3]; /* minutes since a checkpointing one's checkpoint (-1: none) */
		int64_t stopped; /* the expected victim's attempt id */
	} cases[] = {
	        {"the least work lost", {600, 30, 120}, {-1, -1, -1}, 2},
	        {"a young one is no safer", {600, 1, 120}, {-1, -1, -1}, 2},
	        {"a checkpointing one first", {600, 30, 120}, {50, -1, -1}, 1},
	        {"among checkpointing ones, the least lost", {600, 30, 120}, {5, -1, 2}, 3},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		fprintf(stderr, "case: %s\n", cases[k].what);
		struct fx *f = world(3);
		for (int r = 0; r < 3; r++) {
			struct sched_running *a = fx_run(f, r + 1, 1, 2, 0);
			a->borrowed = 1;
			a->start_ms = NOW - cases[k].ran[r] * MIN_MS;
			a->checkpointing = cases[k].ckpt[r] >= 0;
			a->last_checkpoint_ms =
			        a->checkpointing ? NOW - cases[k].ckpt[r] * MIN_MS : 0;
			fx_hold(f, r, r, 0xff);
		}
		fx_job(f, 10, 1, 1, 8, 1);
		struct sched *s = sched_new();
		struct sched_result res;
		fx_cycle(s, f, &res);
		CHECK_INT(res.npreemptions, 1);
		CHECK_INT(res.preemptions[0].attempt_id, cases[k].stopped);
		sched_free(s);
		fx_free(f);
	}
}

/* While preemption is held back, the wait says by whom and until when. */
TEST(wait_says_who_holds_and_until_when)
{
	struct fx *f = world(1);
	f->snap.now_ms = 20 * 3600 * 1000LL; /* 20:00 UTC on day 0 */
	fx_run(f, 1, 1, 1, 0)->start_ms = f->snap.now_ms - 60 * 1000;
	fx_hold(f, 0, 0, 0x03);
	fx_run(f, 2, 1, 1, 99); /* the rest: higher priority */
	fx_hold(f, 1, 0, 0xfc);
	fx_job(f, 10, 1, 1, 2, 1)->priority = 5;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	char buf[320];
	sched_wait_text(fx_wait(&res, 10), &f->jobs[0], team_name, NULL, buf, sizeof(buf));
	CHECK_STR(buf,
	          "needs 2 GPUs on one node; the most free on a matching node is 0; job 100001 "
	          "(lower priority) holds 2 GPUs it could use, and may be preempted at "
	          "1970-01-01 20:04:00 UTC, when its minimum runtime ends");
	/* ... and it is expected to start then, not when the victim's time
	 * limit would end it */
	CHECK_INT(fx_wait(&res, 10)->est_start_ms, f->snap.now_ms + 4 * MIN_MS);
	/* borrowed GPUs that are not enough: said, with the borrowing team */
	f->runs[0].r.team = 2;
	f->runs[0].r.borrowed = 1;
	f->jobs[0].gpus = 4;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	sched_wait_text(fx_wait(&res, 10), &f->jobs[0], team_name, NULL, buf, sizeof(buf));
	CHECK_STR(buf,
	          "needs 4 GPUs on one node; the most free on a matching node is 0; job 100001 "
	          "(borrowed by team b) holds 2 GPUs it could use");
	sched_free(s);
	fx_free(f);
}

/* The loss limit's wait says what it would stop for what. */
TEST(wait_says_when_the_loss_limit_holds_back)
{
	struct fx *f = world(2);
	struct sched_running *g = fx_run(f, 1, 1, 1, 0);
	g->start_ms = NOW - 600 * MIN_MS;
	g->checkpointing = 1;
	g->last_checkpoint_ms = NOW - 1000;
	fx_hold(f, 0, 0, 0xff);
	fx_hold(f, 0, 1, 0xff);
	fx_job(f, 10, 1, 1, 1, 1)->priority = 5;
	f->jobs[0].submit_ms = NOW - 60 * MIN_MS;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(res.npreemptions, 0);
	char buf[320];
	sched_wait_text(fx_wait(&res, 10), &f->jobs[0], NULL, NULL, buf, sizeof(buf));
	CHECK_STR(buf,
	          "needs 1 GPU on one node; the most free on a matching node is 0; job 100001 "
	          "(lower priority) holds 16 GPUs it could use; not preempted: that would stop "
	          "16 GPUs of work for the 1 it asks for, more than the loss limit allows "
	          "until it has waited longer");
	sched_free(s);
	fx_free(f);
}

/* What an attempt stopping for one job frees counts for no other job's
 * reservation: a job decided after it must not plan on those GPUs. */
TEST(stopping_for_another_job_is_no_release)
{
	struct fx *f = world(1);
	f->snap.config.backfill = 1;
	struct sched_running *v = fx_run(f, 1, 1, 1, 0);
	v->stopping = 1;
	v->stopping_for = 10;
	fx_hold(f, 0, 0, 0xff);
	struct sched_job *a = fx_job(f, 10, 1, 1, 8, 1);
	a->held_since_ms = NOW - 1000;
	fx_job(f, 11, 1, 1, 8, 1)->priority = 1;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK_INT(fx_wait(&res, 10)->reason, SCHED_WAIT_PREEMPTING);
	CHECK_INT(fx_wait(&res, 11)->reserved, 0);
	sched_free(s);
	fx_free(f);
}

/* Two jobs whose victims have stopped: the one held first starts first, on
 * the GPUs its victims freed, whatever the order would say otherwise. */
TEST(first_held_first_served)
{
	struct fx *f = world(1);
	struct sched_job *early = fx_job(f, 10, 1, 1, 8, 1);
	early->held_since_ms = NOW - 2000;
	struct sched_job *late = fx_job(f, 11, 1, 1, 8, 1);
	late->held_since_ms = NOW - 1000;
	late->priority = 9;
	struct sched *s = sched_new();
	struct sched_result res;
	fx_cycle(s, f, &res);
	CHECK(fx_placed(&res, 10) != NULL);
	CHECK(fx_placed(&res, 11) == NULL);
	sched_free(s);
	fx_free(f);
}

TEST_MAIN()
