/* plan.c - the dry runs of a cycle: reservations, backfill, preemption.
 *
 * Each one opens an undo mark, gives GPUs back to the live view (released
 * by running attempts as their time limits pass, held by reservations, or
 * held by would-be victims), asks fit.c whether and where the job fits, and
 * rolls the view back before it applies its decision. So a dry run that
 * finds nothing leaves the live view exactly as it was.
 */
#include <assert.h>
#include <string.h>

#include "base/mem.h"
#include "sched/sched_int.h"

static int64_t release_time(const struct sched *s, int who)
{
	const struct sched_snapshot *snap = s->snap;
	if (who < 0)
		return s->place_end[~who];
	const struct sched_running *a = &snap->running[who];
	if (a->stopping)
		return snap->now_ms;
	if (a->end_by_ms <= 0)
		return SCHED_NEVER; /* no limit known: it may never end */
	return a->end_by_ms > snap->now_ms ? a->end_by_ms : snap->now_ms;
}

static int release_cmp(const void *ctx, int x, int y)
{
	const struct sched *s = ctx;
	if (s->rel_time[x] != s->rel_time[y])
		return s->rel_time[x] < s->rel_time[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Everything that will free GPUs at a known time, in time order, into
 * s->rel_tmp[0..n): running attempts not taken as victims, and this
 * cycle's placements. */
static int collect_releases(struct sched *s)
{
	int n = 0;
	for (int r = 0; r < s->snap->nrunning; r++) {
		if (s->run[r].taken || release_time(s, r) == SCHED_NEVER)
			continue;
		s->rel_who[n] = r;
		s->rel_time[n++] = release_time(s, r);
	}
	for (int p = 0; p < s->nplacements; p++) {
		if (s->place_end[p] == SCHED_NEVER)
			continue;
		s->rel_who[n] = ~p;
		s->rel_time[n++] = s->place_end[p];
	}
	for (int k = 0; k < n; k++)
		s->rel_tmp[k] = k;
	sched_msort(s->rel_tmp, s->tmp_int, n, release_cmp, s);
	return n;
}

/* Gives a hold back to the live view (inside an undo mark), except GPUs an
 * earlier reservation counts on. */
static void give(struct sched *s, const struct sched_rank_hold *h, int n)
{
	for (int k = 0; k < n; k++) {
		int i = h[k].node;
		uint64_t add = h[k].gpus & s->usable[i] & ~s->resv[i];
		if (add & ~s->free[i])
			fit_set_free(s, i, s->free[i] | add);
	}
}

static void give_running(struct sched *s, int r)
{
	give(s, s->snap->running[r].ranks, s->snap->running[r].nranks);
}

static void give_release(struct sched *s, int who)
{
	if (who >= 0)
		give_running(s, who);
	else
		give(s, s->ranks + s->place_off[~who], s->placements[~who].nranks);
}

/* The first job that cannot start gets the GPUs that the earliest releases
 * would give it: est_start_ms is when, and from now on those GPUs leave the
 * live view (a later job may still use them if it ends before then, see
 * plan_backfill). */
void plan_reserve(struct sched *s, int job, struct sched_shape *sh, int slot, struct sched_wait *w)
{
	int n = collect_releases(s), mark = fit_mark(s), found = 0;
	int64_t at = 0;
	for (int k = 0; k < n && !found;) {
		at = s->rel_time[s->rel_tmp[k]];
		while (k < n && s->rel_time[s->rel_tmp[k]] == at)
			give_release(s, s->rel_who[s->rel_tmp[k++]]);
		found = fit_check(s, slot, sh->gpus, sh->nodes);
	}
	found = found && fit_find(s, slot, sh->gpus, sh->nodes);
	if (found)
		fit_choose(s, sh->gpus, sh->nodes);
	fit_rollback(s, mark);
	if (!found)
		return;
	s->resvs = sched_grow(s->resvs, &s->resvcap, s->nresvs + 1, sizeof(*s->resvs));
	s->resv_ranks = sched_grow(s->resv_ranks, &s->resv_rankcap, s->nresv_ranks + sh->nodes,
	                           sizeof(*s->resv_ranks));
	struct sched_resv *rv = &s->resvs[s->nresvs++];
	*rv = (struct sched_resv){.job_id = s->snap->pending[job].id,
	                          .start = at,
	                          .off = s->nresv_ranks,
	                          .nranks = sh->nodes};
	for (int k = 0; k < sh->nodes; k++) {
		int i = s->pick[k];
		uint64_t m = s->pick_gpus[k], now = m & s->free[i];
		s->resv_ranks[s->nresv_ranks++] = (struct sched_resv_rank){i, m, now};
		s->resv[i] |= m;
		fit_set_free(s, i, s->free[i] & ~now);
	}
	s->gen++;
	w->est_start_ms = at;
}

/* Gives back, inside an undo mark, the free part of every reservation
 * that starts at or after `end`; the number of such reservations. */
static int give_reserved(struct sched *s, int64_t end)
{
	int given = 0;
	for (int r = 0; r < s->nresvs; r++) {
		if (s->resvs[r].start < end)
			continue;
		given++;
		for (int k = 0; k < s->resvs[r].nranks; k++) {
			const struct sched_resv_rank *rr = &s->resv_ranks[s->resvs[r].off + k];
			if (rr->freenow & ~s->free[rr->node])
				fit_set_free(s, rr->node, s->free[rr->node] | rr->freenow);
		}
	}
	return given;
}

/* A backfilled job used reserved GPUs: they are no longer free now (the
 * reservation still counts on them, since the job ends before it starts). */
static void consume_reserved(struct sched *s, int nodes)
{
	for (int k = 0; k < nodes; k++)
		for (int r = 0; r < s->nresv_ranks; r++)
			if (s->resv_ranks[r].node == s->pick[k])
				s->resv_ranks[r].freenow &= ~s->pick_gpus[k];
}

/* The first reservation that starts before `end`. */
static const struct sched_resv *blocking_resv(const struct sched *s, int64_t end)
{
	const struct sched_resv *best = &s->resvs[0];
	for (int r = 0; r < s->nresvs; r++)
		if (s->resvs[r].start < end &&
		    (best->start >= end || s->resvs[r].start < best->start))
			best = &s->resvs[r];
	return best;
}

/* For a job that does not fit the live view while reservations exist: 1 if
 * it was placed on reserved GPUs because it ends before they are needed;
 * else 0, with w turned into RESERVED when only reservations stand in its
 * way. What is learnt is kept per shape while the view does not change. */
int plan_backfill(struct sched *s, int job, struct sched_shape *sh, int slot, int borrowed,
                  struct sched_wait *w)
{
	if (sh->full_fail)
		return 0;
	if (sh->full_fit_gen != s->gen + 1) {
		int mark = fit_mark(s);
		give_reserved(s, INT64_MIN);
		int ok = fit_check(s, slot, sh->gpus, sh->nodes);
		fit_rollback(s, mark);
		if (!ok) {
			sh->full_fail = 1; /* the full view only shrinks from here */
			return 0;
		}
		sh->full_fit_gen = s->gen + 1;
	}
	int64_t end = sched_end(s, sched_job_limit(s, job));
	if (sh->short_fail_gen != s->gen + 1 || end < sh->short_fail_end) {
		int mark = fit_mark(s);
		int ok = give_reserved(s, end) && fit_find(s, slot, sh->gpus, sh->nodes);
		if (ok)
			fit_choose(s, sh->gpus, sh->nodes);
		fit_rollback(s, mark);
		if (ok) {
			consume_reserved(s, sh->nodes);
			sched_commit(s, job, sh->nodes, borrowed);
			return 1;
		}
		sh->short_fail_gen = s->gen + 1;
		sh->short_fail_end = end;
	}
	w->reason = SCHED_WAIT_RESERVED;
	w->a = blocking_resv(s, end)->job_id;
	w->b = 0;
	return 0;
}

/* GPU-milliseconds of work attempt r loses if stopped now: since its last
 * checkpoint, on every GPU it holds (a 16-node gang that ran an hour loses
 * 128 GPU-hours, not one hour). */
static double lost_work(const struct sched *s, int r)
{
	const struct sched_running *a = &s->snap->running[r];
	int64_t since = a->start_ms;
	if (a->checkpointing && a->last_checkpoint_ms > since)
		since = a->last_checkpoint_ms;
	int64_t ms = s->snap->now_ms > since ? s->snap->now_ms - since : 0;
	return (double)ms * (double)s->run[r].gpus;
}

/* Victim preference: already stopping (free), then checkpointing ones,
 * then the least work lost, admitted on borrowed quota, the lowest
 * priority, the lowest attempt id. */
static int victim_cmp(const void *ctx, int x, int y)
{
	const struct sched *s = ctx;
	const struct sched_running *a = &s->snap->running[x], *b = &s->snap->running[y];
	if (!a->stopping != !b->stopping)
		return a->stopping ? -1 : 1;
	if (!a->checkpointing != !b->checkpointing)
		return a->checkpointing ? -1 : 1;
	double la = lost_work(s, x), lb = lost_work(s, y);
	if (la != lb)
		return la < lb ? -1 : 1;
	if (!a->borrowed != !b->borrowed)
		return a->borrowed ? -1 : 1;
	int qa = s->queues[s->run[x].queue].prio, qb = s->queues[s->run[y].queue].prio;
	if (qa != qb)
		return qa < qb ? -1 : 1;
	if (a->priority != b->priority)
		return a->priority < b->priority ? -1 : 1;
	if (a->attempt_id != b->attempt_id)
		return a->attempt_id < b->attempt_id ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Whether pending job `job` may stop running attempt r: lower-priority
 * work (a lower-priority queue, or its own team's lower-priority job in the
 * same queue), or another team's attempt admitted on borrowed quota in the
 * job's queue (reclaim; the caller has checked the job is within its own
 * nominal quota, and gather_victims() takes such an attempt only while its
 * team is still above nominal: a team whose other work ended is no longer
 * borrowing). Work admitted within nominal quota is never reclaimed, so two
 * teams cannot take the same GPUs back and forth.
 * 2 for a reclaim, 1 for priority, 0 for no. */
static int may_preempt(const struct sched *s, int job, int r)
{
	const struct sched_job *j = &s->snap->pending[job];
	const struct sched_running *a = &s->snap->running[r];
	int jq = s->job_queue[job], rq = s->run[r].queue;
	if (s->queues[rq].prio < s->queues[jq].prio)
		return 1;
	if (rq != jq)
		return 0;
	int jt = s->qts[s->job_qt[job]].team, rt = s->qts[s->run[r].qt].team;
	if (jt == rt)
		return a->priority < j->priority;
	return s->queues[jq].has_quota && a->borrowed ? 2 : 0;
}

/* A reclaim may take attempt r only while its team's running work stays
 * above nominal with the victims chosen so far gone (s->qt_taken). What the
 * team was given in this cycle does not count: else a team could lose old
 * work in the very cycle it borrowed new, and quota held for its waiting
 * preemptors is not usage yet. */
static int reclaimable(const struct sched *s, int r)
{
	const struct sched_qt *qt = &s->qts[s->run[r].qt];
	return qt->running - s->qt_taken[s->run[r].qt] > qt->nominal;
}

static int touches(const struct sched *s, int slot, int r)
{
	const struct sched_running *a = &s->snap->running[r];
	for (int k = 0; k < a->nranks; k++)
		if (s->slotmask[a->ranks[k].node] >> slot & 1)
			return 1;
	return 0;
}

static int intersects(const struct sched *s, int r)
{
	const struct sched_running *a = &s->snap->running[r];
	for (int k = 0; k < a->nranks; k++)
		if (s->want[a->ranks[k].node] & a->ranks[k].gpus)
			return 1;
	return 0;
}

/* Whether attempt r started less than min_runtime_ms ago: a requeued
 * victim, say, must get to run before it can be stopped again. */
static int young(const struct sched *s, int r)
{
	int64_t min = s->snap->config.min_runtime_ms;
	return min > 0 && s->snap->now_ms - s->snap->running[r].start_ms < min;
}

/* Gives back would-be victims' GPUs, cheapest first, until the job fits;
 * the candidates are left in s->victims. 1 if it fits with no young
 * victim. Young attempts are counted (they are the cheapest, and stopping
 * costly old work now, when cheap work will do in a few minutes, would
 * lose more), but a fit that needs one is 0: the job waits for them to
 * come of age. An attempt stopping for another pending job is not counted:
 * what it frees is that job's. */
static int gather_victims(struct sched *s, int job, struct sched_shape *sh, int slot)
{
	const struct sched_snapshot *snap = s->snap;
	s->victims = sched_grow(s->victims, &s->victimcap, snap->nrunning + 1, sizeof(int));
	s->nvictims = 0;
	int any_young = 0;
	for (int k = 0; k < snap->nrunning; k++) {
		int r = s->run_order[k], why = 0;
		if (s->run[r].taken || !touches(s, slot, r))
			continue;
		if (snap->running[r].stopping) {
			if (s->run[r].for_job >= 0 && s->run[r].for_job != job)
				continue;
		} else {
			why = may_preempt(s, job, r);
			if (why == 0 || (why == 2 && !reclaimable(s, r)))
				continue;
			any_young |= young(s, r);
		}
		if (why == 2)
			s->qt_taken[s->run[r].qt] += s->run[r].gpus;
		give_running(s, r);
		s->victims[s->nvictims++] = r;
		if (fit_check(s, slot, sh->gpus, sh->nodes))
			return !any_young;
	}
	return 0;
}

/* GPU-ms the victims that the chosen assignment (s->pick) needs would
 * lose. */
static double victims_cost(struct sched *s, const struct sched_shape *sh)
{
	double cost = 0;
	for (int k = 0; k < sh->nodes; k++)
		s->want[s->pick[k]] |= s->pick_gpus[k];
	for (int v = 0; v < s->nvictims; v++)
		if (!s->snap->running[s->victims[v]].stopping && intersects(s, s->victims[v]))
			cost += lost_work(s, s->victims[v]);
	for (int k = 0; k < sh->nodes; k++)
		s->want[s->pick[k]] = 0;
	return cost;
}

/* Whether the work the victims lose is at most preempt_loss_pct % of the
 * GPU-time the job has waited: waiting a little longer (running work ends
 * all the time) is cheaper than throwing away much, and the longer a job
 * waits the more it may stop, so it still gets its turn. */
static int worth_it(struct sched *s, int job, const struct sched_shape *sh)
{
	int pct = s->snap->config.preempt_loss_pct;
	const struct sched_job *j = &s->snap->pending[job];
	if (pct <= 0)
		return 1;
	int64_t waited = s->snap->now_ms > j->submit_ms ? s->snap->now_ms - j->submit_ms : 0;
	double may = (double)waited * (double)sh->gpus * (double)sh->nodes * pct / 100.0;
	return victims_cost(s, sh) <= may;
}

static void forget_taken(struct sched *s)
{
	for (int v = 0; v < s->nvictims; v++)
		s->qt_taken[s->run[s->victims[v]].qt] = 0;
}

/* Stops the victims whose GPUs the job's assignment uses, and holds the
 * assignment's free GPUs for it so no later job takes them meanwhile. */
static int apply_preemption(struct sched *s, int job, struct sched_shape *sh)
{
	int stopped = 0;
	for (int k = 0; k < sh->nodes; k++)
		s->want[s->pick[k]] |= s->pick_gpus[k];
	for (int v = 0; v < s->nvictims; v++) {
		int r = s->victims[v];
		if (!intersects(s, r))
			continue;
		s->run[r].taken = 1;
		stopped++;
		if (s->snap->running[r].stopping)
			continue;
		/* a stopped attempt no longer counts against its team's quota */
		s->qts[s->run[r].qt].used -= s->run[r].gpus;
		s->qts[s->run[r].qt].running -= s->run[r].gpus;
		s->queues[s->run[r].queue].used_sum -= s->run[r].gpus;
		struct sched_preemption *p = &s->preemptions[s->npreemptions++];
		memset(p, 0, sizeof(*p)); /* padding too: results compare byte for byte */
		p->attempt_id = s->snap->running[r].attempt_id;
		p->for_job_id = s->snap->pending[job].id;
		p->reclaim = may_preempt(s, job, r) == 2;
	}
	/* ... and its quota, so no later job of its team spends what the
	 * victims give back before it can start */
	int64_t need = (int64_t)sh->gpus * sh->nodes;
	s->qts[s->job_qt[job]].held += need;
	s->queues[s->job_queue[job]].used_sum += need;
	for (int k = 0; k < sh->nodes; k++) {
		int i = s->pick[k];
		s->want[i] = 0;
		fit_set_free(s, i, s->free[i] & ~s->pick_gpus[k]);
	}
	s->gen++;
	return stopped;
}

/* For a job with no assignment now (and not borrowing): 1 if stopping
 * lower-priority or borrowed work (or waiting for attempts already
 * stopping) makes it fit, with the victims chosen and w PREEMPTING; else 0,
 * with w->blockers and w->blocker_nodes saying what lower-priority work
 * holds. Never stops anything unless the job then fits. */
int plan_preempt(struct sched *s, int job, struct sched_shape *sh, int slot, struct sched_wait *w)
{
	if (s->preempt_tries >= SCHED_PREEMPT_TRIES)
		return 0;
	s->preempt_tries++;
	if (!s->run_order_done) {
		for (int r = 0; r < s->snap->nrunning; r++)
			s->run_order[r] = r;
		sched_msort(s->run_order, s->tmp_int, s->snap->nrunning, victim_cmp, s);
		s->run_order_done = 1;
	}
	int before = s->slots[slot].tot[sh->gpus];
	int mark = fit_mark(s);
	int fits = gather_victims(s, job, sh, slot) && fit_find(s, slot, sh->gpus, sh->nodes);
	if (fits) {
		fit_choose(s, sh->gpus, sh->nodes);
		fits = worth_it(s, job, sh);
	}
	int after = s->slots[slot].tot[sh->gpus];
	fit_rollback(s, mark);
	forget_taken(s);
	if (!fits) {
		w->blockers = 0;
		for (int v = 0; v < s->nvictims; v++)
			w->blockers += !s->snap->running[s->victims[v]].stopping;
		w->blocker_nodes = after - before;
		return 0;
	}
	w->reason = SCHED_WAIT_PREEMPTING;
	w->a = apply_preemption(s, job, sh);
	w->b = 0;
	return 1;
}
