/* Randomized property tests of the scheduler over generated clusters and
 * workloads (seeded, deterministic), and a long simulated run. */
#include "sched_fixture.h"

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (uint32_t)(rng_state >> 33) % n : 0;
}

static void gen_nodes(struct fx *f)
{
	int n = 4 + (int)rnd(40);
	for (int i = 0; i < n; i++) {
		int gpus = rnd(5) ? 8 : 4;
		int k = fx_node(f, 1 + rnd(3), 1 + rnd(2), 1 + rnd(2), gpus);
		struct sched_node *nd = &f->nodes[k];
		nd->gpu_model = 1 + rnd(2);
		nd->gpu_mem_mib = rnd(2) ? 81920 : 143360;
		nd->pool = rnd(4) == 0;
		for (uint32_t l = 1; l <= 3; l++)
			if (rnd(2))
				nd->labels[nd->nlabels++] = l;
		nd->schedulable = rnd(10) != 0;
		if (rnd(8) == 0)
			nd->gpus_healthy &= ~(1ull << rnd((uint32_t)gpus));
		nd->gpus_free = nd->gpus_healthy;
	}
}

static void gen_policy(struct fx *f)
{
	fx_queue(f, 1, 10, (int)rnd(2));
	fx_queue(f, 2, 5, (int)rnd(2));
	fx_queue(f, 3, 0, 0);
	f->queues[1].default_time_limit_ms = rnd(2) ? 5000 : 0;
	for (uint32_t t = 1; t <= 3; t++) {
		fx_team(f, t, 1 + (int)rnd(3), rnd(100));
		fx_quota(f, 1, t, (int)rnd(40));
		if (rnd(2))
			fx_quota(f, 2, t, (int)rnd(40));
	}
	f->snap.config.aging_ms = rnd(2) ? 1000 : 0;
	f->snap.config.backfill = (int)rnd(2);
	f->snap.config.preemption = (int)rnd(2);
	f->snap.config.max_reservations = 1 + (int)rnd(3);
	f->snap.config.min_runtime_ms = rnd(2) ? 0 : 1000 + rnd(30000);
	f->snap.config.preempt_loss_pct = rnd(2) ? 0 : 50 + (int)rnd(100);
	f->snap.config.preempt_max_ratio = rnd(2) ? 0 : 1 + (int)rnd(4);
	f->snap.config.overdue_ms = rnd(2) ? 0 : 5000 + rnd(40000);
	f->snap.config.starve_ms = rnd(2) ? 0 : f->snap.config.overdue_ms * (2 + rnd(3));
	f->snap.now_ms = 100000;
}

/* Random attempts on random free GPUs of schedulable or not nodes. */
static void gen_running(struct fx *f)
{
	int n = (int)rnd(30);
	for (int k = 0; k < n; k++) {
		struct sched_running *r = fx_run(f, 1 + k, 1 + rnd(3), 1 + rnd(3), (int)rnd(5));
		r->start_ms = rnd(100000);
		r->submit_ms = rnd(3) ? r->start_ms - (int64_t)rnd(100000) : 0; /* <= 0: unknown */
		r->end_by_ms = rnd(3) ? 100000 + rnd(20000) : 0;
		r->checkpointing = (int)rnd(2);
		r->last_checkpoint_ms = r->checkpointing ? r->start_ms + rnd(1000) : 0;
		r->borrowed = rnd(3) == 0;
		r->stopping = rnd(10) == 0;
		int ranks = 1 + (int)rnd(3), idx = f->nrunning - 1;
		for (int q = 0; q < ranks; q++) {
			int node = (int)rnd((uint32_t)f->nnodes);
			uint64_t free = f->nodes[node].gpus_free;
			uint64_t take = free & (free - 1) ? free & ~(free & (free - 1)) : free;
			if (!take)
				continue;
			int dup = 0;
			for (int m = 0; m < f->runs[idx].r.nranks; m++)
				dup |= f->runs[idx].holds[m].node == node;
			if (!dup)
				fx_hold(f, idx, node, rnd(2) ? take : free);
		}
	}
}

static void gen_jobs(struct fx *f, int n)
{
	for (int k = 0; k < n; k++) {
		int gang = rnd(4) == 0;
		struct sched_job *j = fx_job(f, 1000 + k, 1 + rnd(3), 1 + rnd(3),
		                             gang ? (int)(4 + rnd(5)) : (int)(1 + rnd(8)),
		                             gang ? (int)(2 + rnd(3)) : 1);
		j->priority = (int)rnd(5);
		j->submit_ms = rnd(100000);
		if (rnd(4) == 0) /* went back to the queue when an attempt was preempted */
			j->requeued_ms = j->submit_ms + rnd((uint32_t)(100000 - j->submit_ms));
		j->time_limit_ms = rnd(2) ? 1000 + rnd(20000) : 0;
		j->checkpointing = (int)rnd(2);
		if (rnd(4) == 0)
			j->gpu_model = 1 + rnd(2);
		if (rnd(6) == 0)
			j->min_gpu_mem_mib = 100000;
		if (rnd(6) == 0)
			j->pool = 1;
		if (rnd(5) == 0)
			j->selectors[j->nselectors++] = 1 + rnd(3);
	}
}

/* Holds: some stopping attempts stop for a pending job, and some jobs had
 * victims stop lately. At most one job, in the queue without quota, is
 * held so (the_held), and stopping attempts stop for it or for nobody, so
 * that check_held() can say what it must get. */
static int64_t the_held;

static void gen_holds(struct fx *f)
{
	the_held = 0;
	if (!f->njobs || rnd(2))
		return;
	struct sched_job *j = &f->jobs[rnd((uint32_t)f->njobs)];
	if (j->queue != 3)
		return;
	the_held = j->id;
	if (rnd(2))
		j->held_since_ms = f->snap.now_ms - rnd(SCHED_HOLD_MS / 8); /* <= 0: none */
	for (int r = 0; r < f->nrunning; r++)
		if (f->runs[r].r.stopping && rnd(2))
			f->runs[r].r.stopping_for = the_held;
}

static struct fx *gen(uint64_t seed)
{
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
	struct fx *f = fx_new();
	gen_nodes(f);
	gen_policy(f);
	gen_running(f);
	gen_jobs(f, 1 + (int)rnd(150));
	gen_holds(f);
	fx_snap(f);
	return f;
}

static int same_result(const struct sched_result *a, const struct sched_result *b)
{
	if (a->nplacements != b->nplacements || a->npreemptions != b->npreemptions ||
	    a->nwaits != b->nwaits)
		return 0;
	for (int p = 0; p < a->nplacements; p++) {
		const struct sched_placement *x = &a->placements[p], *y = &b->placements[p];
		if (x->job_id != y->job_id || x->borrowed != y->borrowed ||
		    x->nranks != y->nranks ||
		    memcmp(x->ranks, y->ranks, sizeof(*x->ranks) * (size_t)x->nranks) != 0)
			return 0;
	}
	return memcmp(a->preemptions, b->preemptions,
	              sizeof(*a->preemptions) * (size_t)a->npreemptions) == 0 &&
	       memcmp(a->waits, b->waits, sizeof(*a->waits) * (size_t)a->nwaits) == 0;
}

static const struct sched_queue *queue_of(const struct sched_snapshot *snap, uint32_t id)
{
	for (int q = 0; q < snap->nqueues; q++)
		if (snap->queues[q].id == id)
			return &snap->queues[q];
	return NULL;
}

static int64_t nominal(const struct sched_snapshot *snap, uint32_t queue, uint32_t team,
                       int *has_quota, int64_t *sum)
{
	int64_t n = 0;
	*has_quota = 0;
	*sum = 0;
	for (int k = 0; k < snap->nquotas; k++) {
		if (snap->quotas[k].queue != queue)
			continue;
		*has_quota = 1;
		*sum += snap->quotas[k].nominal_gpus;
		if (snap->quotas[k].team == team)
			n = snap->quotas[k].nominal_gpus;
	}
	return n;
}

static int64_t gpus_of(const struct sched_running *r)
{
	int64_t n = 0;
	for (int k = 0; k < r->nranks; k++)
		n += __builtin_popcountll(r->ranks[k].gpus);
	return n;
}

/* Within nominal quota unless marked borrowed, and borrowed only where the
 * queue allows it. */
static void check_quotas(const struct sched_snapshot *snap, const struct sched_result *res)
{
	for (uint32_t q = 1; q <= 3; q++)
		for (uint32_t t = 1; t <= 3; t++) {
			int has;
			int64_t sum, nom = nominal(snap, q, t, &has, &sum), used = 0, own = 0,
			             hold = 0;
			for (int r = 0; r < snap->nrunning; r++)
				if (snap->running[r].queue == q && snap->running[r].team == t &&
				    !snap->running[r].stopping)
					used += gpus_of(&snap->running[r]);
			for (int r = 0; r < snap->nrunning; r++)
				if (snap->running[r].queue == q && snap->running[r].team == t &&
				    fx_preempted(res, snap->running[r].attempt_id))
					used -= gpus_of(&snap->running[r]);
			for (int w = 0; w < res->nwaits; w++) {
				const struct sched_job *j = fx_find_job(snap, res->waits[w].job_id);
				if (j->queue == q && j->team == t &&
				    res->waits[w].reason == SCHED_WAIT_PREEMPTING)
					hold += (int64_t)j->gpus * j->nodes;
			}
			for (int p = 0; p < res->nplacements; p++) {
				const struct sched_job *j =
				        fx_find_job(snap, res->placements[p].job_id);
				if (j->queue != q || j->team != t)
					continue;
				if (res->placements[p].borrowed) {
					CHECK(has && queue_of(snap, q)->borrowing);
					continue;
				}
				own += (int64_t)j->gpus * j->nodes;
			}
			if (has && own)
				CHECK(used + own <= nom);
			/* a job stopping victims holds its quota: within nominal, or
			 * borrowed where the queue lends */
			if (has && hold)
				CHECK(used + own + hold <= nom || queue_of(snap, q)->borrowing);
		}
}

static int lower(const struct sched_snapshot *snap, const struct sched_running *r,
                 const struct sched_job *j)
{
	int rp = queue_of(snap, r->queue)->priority, jp = queue_of(snap, j->queue)->priority;
	return rp < jp || (r->queue == j->queue && r->team == j->team && r->priority < j->priority);
}

/* How long r's job had waited when it started, as sched.h defines it: 0
 * within overdue_ms, 1 overdue, 2 starving (the wait counted once per node). */
static int started_level(const struct sched_config *c, const struct sched_running *r)
{
	if (r->submit_ms <= 0 || r->start_ms <= r->submit_ms || c->overdue_ms <= 0)
		return 0;
	int64_t waited = (r->start_ms - r->submit_ms) * r->nranks;
	if (waited <= c->overdue_ms)
		return 0;
	return c->starve_ms > 0 && waited > c->starve_ms ? 2 : 1;
}

static void check_preemptions(const struct sched_snapshot *snap, const struct sched_result *res)
{
	for (int k = 0; k < res->npreemptions; k++) {
		const struct sched_preemption *p = &res->preemptions[k];
		const struct sched_running *r = NULL;
		for (int m = 0; m < snap->nrunning; m++)
			if (snap->running[m].attempt_id == p->attempt_id)
				r = &snap->running[m];
		CHECK(r != NULL && !r->stopping);
		for (int m = 0; m < k; m++)
			CHECK(res->preemptions[m].attempt_id != p->attempt_id);
		const struct sched_job *j = fx_find_job(snap, p->for_job_id);
		CHECK(j != NULL);
		CHECK_INT(fx_wait(res, j->id)->reason, SCHED_WAIT_PREEMPTING);
		/* never a young victim of priority: a requeued one gets to run
		 * first; reclaim takes borrowed GPUs back whatever their age */
		CHECK(p->reclaim || !snap->config.min_runtime_ms ||
		      snap->now_ms - r->start_ms >= snap->config.min_runtime_ms);
		if (p->reclaim) {
			int has;
			int64_t sum, nom = nominal(snap, r->queue, r->team, &has, &sum), used = 0;
			for (int m = 0; m < snap->nrunning; m++)
				if (snap->running[m].queue == r->queue &&
				    snap->running[m].team == r->team && !snap->running[m].stopping)
					used += gpus_of(&snap->running[m]);
			CHECK(has && used > nom && r->borrowed && r->queue == j->queue &&
			      r->team != j->team);
		} else {
			CHECK(lower(snap, r, j));
			/* no cascade: a requeued job does not preempt in its own queue; and
			 * what aging let start is not stopped for what it went ahead of */
			if (r->queue == j->queue)
				CHECK(j->requeued_ms <= 0 && started_level(&snap->config, r) == 0);
			else
				CHECK(started_level(&snap->config, r) < 2);
		}
	}
}

/* Estimated starts: never in the past; none for a job that can never run;
 * "as soon as its victims stop" for a preempting one. */
static int check_estimates(const struct sched_snapshot *snap, const struct sched_result *res)
{
	int known = 0;
	for (int w = 0; w < res->nwaits; w++) {
		const struct sched_wait *x = &res->waits[w];
		CHECK(x->est_start_ms == 0 || x->est_start_ms >= snap->now_ms);
		if (x->reason == SCHED_WAIT_UNFIT)
			CHECK_INT(x->est_start_ms, 0);
		if (x->reason == SCHED_WAIT_PREEMPTING)
			CHECK_INT(x->est_start_ms, snap->now_ms);
		known += x->est_start_ms > 0;
	}
	return known;
}

/* A job that preempts must fit once its victims (and attempts already
 * stopping) are gone, next to this cycle's placements. */
static void check_preemption_fits(struct fx *f, const struct sched_result *res, int64_t job)
{
	const struct sched_snapshot *snap = &f->snap;
	struct fx *v = fx_new();
	for (int i = 0; i < snap->nnodes; i++) {
		int k = fx_node(v, 0, 0, 0, 8);
		v->nodes[k] = snap->nodes[i];
	}
	for (int r = 0; r < snap->nrunning; r++) {
		const struct sched_running *a = &snap->running[r];
		int gone = a->stopping;
		for (int k = 0; k < res->npreemptions; k++)
			gone |= res->preemptions[k].attempt_id == a->attempt_id &&
			        res->preemptions[k].for_job_id == job;
		for (int k = 0; gone && k < a->nranks; k++)
			v->nodes[a->ranks[k].node].gpus_free |=
			        a->ranks[k].gpus & v->nodes[a->ranks[k].node].gpus_healthy;
	}
	for (int p = 0; p < res->nplacements; p++) {
		fx_run(v, 1 + p, 0, 0, 0);
		for (int k = 0; k < res->placements[p].nranks; k++)
			fx_hold(v, p, res->placements[p].ranks[k].node,
			        res->placements[p].ranks[k].gpus);
	}
	*fx_job(v, job, 0, 0, 1, 1) = *fx_find_job(snap, job);
	struct sched *s = sched_new();
	struct sched_result vr;
	fx_cycle(s, v, &vr);
	CHECK_INT(vr.nplacements, 1);
	sched_free(s);
	fx_free(v);
}

/* A held job is decided first, so what its victims freed goes to it: if
 * it fits the free GPUs (with no running attempt, nor anything else
 * pending), it is placed. The generator keeps it out of quotas and gives
 * it any stopping attempt that stops for someone. */
static void check_held(struct fx *f, const struct sched_result *res)
{
	const struct sched_snapshot *snap = &f->snap;
	const struct sched_job *held = the_held ? fx_find_job(snap, the_held) : NULL;
	int first = 0;
	for (int r = 0; held && r < snap->nrunning; r++)
		first |= snap->running[r].stopping && snap->running[r].stopping_for == held->id;
	if (!held || !(first || (held->held_since_ms > 0 &&
	                         snap->now_ms - held->held_since_ms < SCHED_HOLD_MS)))
		return;
	struct fx *v = fx_new();
	for (int i = 0; i < snap->nnodes; i++) {
		fx_node(v, 0, 0, 0, 8);
		v->nodes[i] = snap->nodes[i];
	}
	for (int r = 0; r < snap->nrunning; r++)
		for (int k = 0; k < snap->running[r].nranks; k++)
			v->nodes[snap->running[r].ranks[k].node].gpus_free &=
			        ~snap->running[r].ranks[k].gpus;
	*fx_job(v, held->id, 0, 0, 1, 1) = *held;
	v->jobs[0].held_since_ms = 0;
	struct sched *s = sched_new();
	struct sched_result vr;
	fx_cycle(s, v, &vr);
	if (vr.nplacements)
		CHECK(fx_placed(res, held->id) != NULL);
	sched_free(s);
	fx_free(v);
}

TEST(random_cycles_keep_invariants)
{
	struct sched *s = sched_new(), *fresh = sched_new();
	int placed = 0, preempted = 0, reserved = 0, held = 0, estimated = 0;
	for (uint64_t seed = 1; seed <= 300; seed++) {
		struct fx *f = gen(seed);
		struct sched_result a, b;
		fx_cycle(s, f, &a);
		check_quotas(&f->snap, &a);
		check_preemptions(&f->snap, &a);
		check_held(f, &a);
		estimated += check_estimates(&f->snap, &a);
		held += the_held != 0;
		for (int w = 0; w < a.nwaits; w++) {
			reserved += a.waits[w].reserved;
			if (a.waits[w].reason == SCHED_WAIT_PREEMPTING && a.npreemptions)
				check_preemption_fits(f, &a, a.waits[w].job_id);
		}
		placed += a.nplacements;
		preempted += a.npreemptions;
		/* same input, same output: a reused scheduler and a fresh one */
		sched_free(fresh);
		fresh = sched_new();
		fx_cycle(fresh, f, &b);
		CHECK(same_result(&a, &b));
		fx_free(f);
	}
	/* the generator exercises what it should */
	CHECK(placed > 1000);
	CHECK(preempted > 10);
	CHECK(reserved > 10);
	CHECK(held > 10);
	CHECK(estimated > 1000);
	sched_free(s);
	sched_free(fresh);
}

/* A small world for the long run: jobs arrive, run for their durations,
 * checkpoint, get preempted and requeued, and finish. */
#define SIM_JOBS       300
#define SIM_STEP_MS    1000
#define SIM_CKPT_MS    3000
#define SIM_MIN_RUN_MS 3000

struct sim_job {
	struct sched_job job;
	int arrive;                           /* step */
	int64_t remaining;                    /* ms of work left */
	int running, done, preempted, starts; /* preempted: for priority */
	int64_t held_since;                   /* its victims' preemption, until it starts */
	int64_t requeued;                     /* when its last attempt was preempted */
	uint64_t freed[12]; /* per node: GPUs its victims freed, until it starts */
};

struct sim_att {
	int64_t id;
	int job;
	int64_t start;
	int borrowed, stopping, stop_step; /* stopping takes a step: gone after two */
	int64_t stopping_for;
	int nranks;
	struct sched_rank_hold ranks[8];
};

struct sim {
	struct sim_job jobs[SIM_JOBS];
	struct sim_att *atts;
	int natts, attcap;
	int64_t next_attempt;
	double usage[4];
	int64_t reclaims[SIM_JOBS * 4][2]; /* (reclaiming job, victim job) */
	int nreclaims;
	int preemptions;
};

static void sim_cluster(struct fx *f)
{
	for (int i = 0; i < 12; i++)
		fx_node(f, i < 8 ? 1 : 2, 1 + (uint32_t)(i % 8) / 4, 1 + (uint32_t)(i % 8) / 2, 8);
	fx_queue(f, 1, 10, 1);
	fx_queue(f, 2, 0, 0);
	fx_quota(f, 1, 1, 48);
	fx_quota(f, 1, 2, 48);
	f->snap.config = (struct sched_config){.aging_ms = 5000,
	                                       .backfill = 1,
	                                       .preemption = 1,
	                                       .max_reservations = 2,
	                                       .min_runtime_ms = SIM_MIN_RUN_MS,
	                                       .overdue_ms = 20 * SIM_STEP_MS,
	                                       .starve_ms = 60 * SIM_STEP_MS};
}

static void sim_jobs(struct sim *sm)
{
	for (int k = 0; k < SIM_JOBS; k++) {
		struct sim_job *j = &sm->jobs[k];
		int kind = (int)rnd(10);
		j->job.id = k + 1;
		j->job.queue = rnd(5) < 3 ? 1 : 2;
		j->job.team = 1 + rnd(3);
		j->job.priority = (int)rnd(4);
		j->job.gpus = kind < 6 ? 1 + (int)rnd(4) : 8;
		j->job.nodes = kind < 8 ? 1 : 2 + (int)rnd(3);
		j->job.checkpointing = (int)rnd(2);
		j->arrive = (int)rnd(200);
		j->job.submit_ms = (int64_t)j->arrive * SIM_STEP_MS;
		j->remaining = (2 + rnd(30)) * SIM_STEP_MS;
		j->job.time_limit_ms = rnd(3) ? j->remaining + rnd(10) * SIM_STEP_MS : 0;
	}
}

static int64_t sim_checkpoint(const struct sim_att *a, int64_t now)
{
	return a->start + (now - a->start) / SIM_CKPT_MS * SIM_CKPT_MS;
}

/* Retires finished and stopped attempts; returns jobs still to finish. */
static int sim_retire(struct sim *sm, int64_t now)
{
	int kept = 0, left = 0;
	for (int k = 0; k < sm->natts; k++) {
		struct sim_att *a = &sm->atts[k];
		struct sim_job *j = &sm->jobs[a->job];
		if (a->stopping && now - (int64_t)a->stop_step * SIM_STEP_MS < 2 * SIM_STEP_MS) {
			sm->atts[kept++] = *a;
		} else if (a->stopping) {
			if (j->job.checkpointing)
				j->remaining -= sim_checkpoint(a, now) - a->start;
			j->running = 0;
			j->requeued = now;
			struct sim_job *x = &sm->jobs[a->stopping_for - 1];
			for (int q = 0; q < a->nranks && !x->running && !x->done; q++)
				x->freed[a->ranks[q].node] |= a->ranks[q].gpus;
		} else if (now - a->start >= j->remaining) {
			j->done = 1;
			j->running = 0;
		} else {
			sm->atts[kept++] = *a;
		}
	}
	sm->natts = kept;
	for (int k = 0; k < SIM_JOBS; k++)
		left += !sm->jobs[k].done;
	return left;
}

static struct fx *sim_snapshot(struct sim *sm, int step)
{
	int64_t now = (int64_t)step * SIM_STEP_MS;
	struct fx *f = fx_new();
	sim_cluster(f);
	f->snap.now_ms = now;
	for (uint32_t t = 1; t <= 3; t++)
		fx_team(f, t, 1, sm->usage[t]);
	for (int k = 0; k < sm->natts; k++) {
		const struct sim_att *a = &sm->atts[k];
		const struct sim_job *j = &sm->jobs[a->job];
		struct sched_running *r =
		        fx_run(f, a->id, j->job.queue, j->job.team, j->job.priority);
		r->job_id = j->job.id;
		r->submit_ms = j->job.submit_ms;
		r->start_ms = a->start;
		r->end_by_ms = j->job.time_limit_ms ? a->start + j->job.time_limit_ms : 0;
		r->checkpointing = j->job.checkpointing;
		r->last_checkpoint_ms = j->job.checkpointing ? sim_checkpoint(a, now) : 0;
		r->borrowed = a->borrowed;
		r->stopping = a->stopping;
		r->stopping_for = a->stopping_for;
		for (int q = 0; q < a->nranks; q++)
			fx_hold(f, k, a->ranks[q].node, a->ranks[q].gpus);
	}
	for (int k = 0; k < SIM_JOBS; k++) {
		const struct sim_job *j = &sm->jobs[k];
		if (j->arrive <= step && !j->done && !j->running) {
			*fx_job(f, j->job.id, 0, 0, 1, 1) = j->job;
			f->jobs[f->njobs - 1].held_since_ms = j->held_since;
			f->jobs[f->njobs - 1].requeued_ms = j->requeued;
		}
	}
	fx_snap(f);
	return f;
}

/* Job `by` reclaimed quota from job `from`. A reversal (`from` had
 * reclaimed from `by` before) can happen once when a team's load shifts;
 * a second one would be a loop: A -> B -> A. */
static void sim_reclaim(struct sim *sm, int64_t by, int64_t from)
{
	int flips = 0;
	int64_t last = 0; /* the reclaiming job of the pair's previous reclaim */
	CHECK(sm->nreclaims < SIM_JOBS * 4);
	sm->reclaims[sm->nreclaims][0] = by;
	sm->reclaims[sm->nreclaims++][1] = from;
	for (int k = 0; k < sm->nreclaims; k++) {
		int64_t x = sm->reclaims[k][0], y = sm->reclaims[k][1];
		if (!((x == by && y == from) || (x == from && y == by)))
			continue;
		flips += last && x != last;
		last = x;
	}
	CHECK(flips < 2);
}

/* Applies a cycle's decisions. */
static void sim_apply(struct sim *sm, const struct sched_result *res, int step)
{
	for (int p = 0; p < res->nplacements; p++) {
		const struct sched_placement *pl = &res->placements[p];
		if (sm->natts == sm->attcap) {
			sm->attcap = sm->attcap ? sm->attcap * 2 : 64;
			sm->atts = xrealloc(sm->atts, sizeof(*sm->atts) * (size_t)sm->attcap);
		}
		struct sim_att *a = &sm->atts[sm->natts++];
		memset(a, 0, sizeof(*a));
		a->id = ++sm->next_attempt;
		a->job = (int)pl->job_id - 1;
		a->start = (int64_t)step * SIM_STEP_MS;
		a->borrowed = pl->borrowed;
		a->nranks = pl->nranks;
		memcpy(a->ranks, pl->ranks, sizeof(*pl->ranks) * (size_t)pl->nranks);
		sm->jobs[a->job].running = 1;
		sm->jobs[a->job].starts++;
		sm->jobs[a->job].held_since = 0;
		memset(sm->jobs[a->job].freed, 0, sizeof(sm->jobs[a->job].freed));
	}
	for (int k = 0; k < res->npreemptions; k++) {
		const struct sched_preemption *pr = &res->preemptions[k];
		for (int m = 0; m < sm->natts; m++) {
			if (sm->atts[m].id != pr->attempt_id)
				continue;
			sm->atts[m].stopping = 1;
			sm->atts[m].stop_step = step;
			sm->atts[m].stopping_for = pr->for_job_id;
			sm->jobs[pr->for_job_id - 1].held_since = (int64_t)step * SIM_STEP_MS;
			if (pr->reclaim)
				sim_reclaim(sm, pr->for_job_id, sm->jobs[sm->atts[m].job].job.id);
			else
				sm->jobs[sm->atts[m].job].preempted++;
		}
		sm->preemptions++;
	}
}

/* What victims freed for a job that is still held goes to it: no other
 * job is placed on it in a cycle that neither places the held job nor
 * finds it a whole assignment elsewhere (PREEMPTING: it holds that one, so
 * it no longer needs these; counted in *moved). */
static int steals(const struct sim *sm, const struct sched_result *res, int64_t now, int *moved)
{
	int bad = 0;
	for (int k = 0; k < SIM_JOBS; k++) {
		const struct sim_job *x = &sm->jobs[k];
		if (x->running || x->done || !x->held_since ||
		    now - x->held_since >= SCHED_HOLD_MS || fx_placed(res, x->job.id))
			continue;
		int elsewhere = fx_wait(res, x->job.id)->reason == SCHED_WAIT_PREEMPTING;
		for (int p = 0; p < res->nplacements; p++)
			for (int q = 0; q < res->placements[p].nranks; q++) {
				const struct sched_rank_hold *h = &res->placements[p].ranks[q];
				if (h->gpus & x->freed[h->node])
					*(elsewhere ? moved : &bad) += 1;
			}
	}
	return bad;
}

TEST(long_run_no_starvation_no_preemption_loop)
{
	struct sim *sm = xcalloc(1, sizeof(*sm));
	rng_state = 42;
	sim_jobs(sm);
	struct sched *s = sched_new();
	int step = 0, left = SIM_JOBS, stolen = 0, moved = 0;
	for (; step < 3000 && left > 0; step++) {
		int64_t now = (int64_t)step * SIM_STEP_MS;
		left = sim_retire(sm, now);
		struct fx *f = sim_snapshot(sm, step);
		struct sched_result res, res2;
		fx_cycle(s, f, &res);
		check_quotas(&f->snap, &res);
		check_preemptions(&f->snap, &res);
		stolen += steals(sm, &res, now, &moved);
		/* what the scheduler keeps from cycle to cycle changes nothing */
		struct sched *fresh = sched_new();
		fx_cycle(fresh, f, &res2);
		CHECK(same_result(&res, &res2));
		sched_free(fresh);
		sim_apply(sm, &res, step);
		for (uint32_t t = 1; t <= 3; t++)
			sm->usage[t] = sched_decay(sm->usage[t], SIM_STEP_MS, 60 * SIM_STEP_MS);
		for (int k = 0; k < sm->natts; k++) {
			const struct sim_job *j = &sm->jobs[sm->atts[k].job];
			sm->usage[j->job.team] += j->job.gpus * j->job.nodes / 3600.0;
		}
		fx_free(f);
	}
	CHECK_INT(left, 0); /* every job started and finished */
	int most = 0;
	for (int k = 0; k < SIM_JOBS; k++)
		most = sm->jobs[k].preempted > most ? sm->jobs[k].preempted : most;
	/* bounded: each preemption makes a higher job fit, a victim of priority
	 * has run at least SIM_MIN_RUN_MS (a requeued one is not stopped again
	 * at once), and what victims free goes to the job they stopped for, so
	 * no job is preempted over and over (the allowance was 50 a job, 900 in
	 * all, when freed GPUs could go to whoever sorted first). Reclaim takes
	 * borrowed GPUs back at any age (a job of team 3, which has no quota,
	 * is reclaimed each time it borrows what a team within quota then asks
	 * for): each is for a different job, and sim_reclaim() checks that no
	 * two jobs take GPUs back and forth. */
	CHECK(most <= 8);
	CHECK(sm->preemptions > 0 && sm->preemptions <= SIM_JOBS / 2);
	CHECK_INT(stolen, 0);
	fprintf(stderr,
	        "sim: %d steps, %d preemptions (%d reclaims), most preempted job %d times, "
	        "%d ranks placed on GPUs freed for a job holding others\n",
	        step, sm->preemptions, sm->nreclaims, most, moved);
	sched_free(s);
	free(sm->atts);
	free(sm);
}

TEST_MAIN()
