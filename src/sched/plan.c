/* plan.c - the dry runs of a cycle: reservations, backfill, preemption,
 * and the estimated starts of the jobs left waiting.
 *
 * Each one opens an undo mark, gives GPUs back to the live view (released
 * by running attempts as their time limits pass, held by reservations, or
 * held by would-be victims), asks fit.c whether and where the job fits, and
 * rolls the view back before it applies its decision. So a dry run that
 * finds nothing leaves the live view exactly as it was; the estimate's
 * decides nothing at all.
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

static int run_release_cmp(const void *ctx, int x, int y)
{
	const struct sched *s = ctx;
	if (s->run_rel[x] != s->run_rel[y])
		return s->run_rel[x] < s->run_rel[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int place_release_cmp(const void *ctx, int x, int y)
{
	const struct sched *s = ctx;
	if (s->place_end[x] != s->place_end[y])
		return s->place_end[x] < s->place_end[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Everything that will free GPUs at a known time, in time order (ties:
 * running attempts by index, then placements by index), into
 * s->rel_who/rel_time[0..n) with s->rel_tmp[k] = k: running attempts not
 * taken as victims, and this cycle's placements. The running attempts are
 * sorted once a cycle (their times do not change), the placements so far
 * each time (there are few when anything waits), and the two merged. */
static int collect_releases(struct sched *s)
{
	const struct sched_snapshot *snap = s->snap;
	if (s->run_rel_n < 0) {
		s->run_rel_n = 0;
		for (int r = 0; r < snap->nrunning; r++) {
			s->run_rel[r] = release_time(s, r);
			if (s->run_rel[r] != SCHED_NEVER)
				s->run_rel_order[s->run_rel_n++] = r;
		}
		sched_msort(s->run_rel_order, s->tmp_int, s->run_rel_n, run_release_cmp, s);
	}
	int np = 0;
	for (int p = 0; p < s->nplacements; p++)
		if (s->place_end[p] != SCHED_NEVER)
			s->rel_tmp[np++] = p;
	sched_msort(s->rel_tmp, s->tmp_int, np, place_release_cmp, s);
	int n = 0, i = 0, j = 0;
	while (i < s->run_rel_n || j < np) {
		int r = i < s->run_rel_n ? s->run_rel_order[i] : -1;
		if (r >= 0 && s->run[r].taken) {
			i++;
			continue;
		}
		if (r >= 0 && (j >= np || s->run_rel[r] <= s->place_end[s->rel_tmp[j]])) {
			s->rel_who[n] = r;
			s->rel_time[n++] = s->run_rel[r];
			i++;
		} else {
			s->rel_who[n] = ~s->rel_tmp[j];
			s->rel_time[n++] = s->place_end[s->rel_tmp[j++]];
		}
	}
	for (int k = 0; k < n; k++)
		s->rel_tmp[k] = k;
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
 * plan_backfill). What attempts stopping for another job free is that
 * job's: it counts for no one else's reservation. */
void plan_reserve(struct sched *s, int job, struct sched_shape *sh, int slot, struct sched_wait *w)
{
	int n = collect_releases(s), mark = fit_mark(s), found = 0;
	int64_t at = 0;
	for (int k = 0; k < n && !found;) {
		at = s->rel_time[s->rel_tmp[k]];
		for (; k < n && s->rel_time[s->rel_tmp[k]] == at; k++) {
			int who = s->rel_who[s->rel_tmp[k]];
			if (who < 0 || s->run[who].for_job < 0 || s->run[who].for_job == job)
				give_release(s, who);
		}
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
	                          .job = job,
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
	w->reserved = 1;
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

/* GPU-milliseconds attempt r costs if stopped now: the work since its last
 * checkpoint and the restart (config.restart_cost_ms), on every GPU it
 * holds. A 16-node gang that ran an hour loses 128 GPU-hours, not one; and
 * one that has just checkpointed still costs 128 restarts, so that a
 * one-GPU job does not stop it to free one GPU. */
static double lost_work(const struct sched *s, int r)
{
	const struct sched_running *a = &s->snap->running[r];
	int64_t since = a->start_ms;
	if (a->checkpointing && a->last_checkpoint_ms > since)
		since = a->last_checkpoint_ms;
	int64_t ms = s->snap->now_ms > since ? s->snap->now_ms - since : 0;
	int64_t restart = s->snap->config.restart_cost_ms > 0 ? s->snap->config.restart_cost_ms : 0;
	return ((double)ms + (double)restart) * (double)s->run[r].gpus;
}

/* Victim preference: already stopping (free), then checkpointing ones,
 * then the least cost (work lost and restarts), admitted on borrowed quota,
 * the lowest priority, the lowest attempt id. */
static int victim_cmp(const void *ctx, int x, int y)
{
	const struct sched *s = ctx;
	const struct sched_running *a = &s->snap->running[x], *b = &s->snap->running[y];
	if (!a->stopping != !b->stopping)
		return a->stopping ? -1 : 1;
	if (!a->checkpointing != !b->checkpointing)
		return a->checkpointing ? -1 : 1;
	double la = s->run[x].lost, lb = s->run[y].lost;
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

/* How long attempt r's job had waited when it started (sched_wait_level()):
 * an overdue attempt went ahead of its queue's higher jobs, a starving one
 * ahead of higher queues' too, so that it would not starve; stopping it
 * for them would undo that. */
static int started_late(const struct sched *s, int r)
{
	const struct sched_running *a = &s->snap->running[r];
	return sched_wait_level(&s->snap->config, a->submit_ms, a->start_ms, a->nranks);
}

/* Whether pending job `job` may reclaim borrowed quota at all: its queue
 * has quotas and the job is within its team's (plan_preempt() is told
 * whether it borrows). */
static int may_reclaim(const struct sched *s, int job)
{
	return s->queues[s->job_queue[job]].has_quota && !s->preempt_borrowing;
}

/* Whether pending job `job` may stop running attempt r: lower-priority
 * work (a lower-priority queue, or its own team's lower-priority job in the
 * same queue), or another team's attempt admitted on borrowed quota in the
 * job's queue (reclaim, for a job within its own nominal quota only:
 * gather_victims() takes such an attempt only while its team is still above
 * nominal, as a team whose other work ended is no longer borrowing). Work
 * admitted within nominal quota is never reclaimed, so two teams cannot take
 * the same GPUs back and forth; and a job that itself borrows reclaims
 * nothing (it would take one borrower's GPUs for another), but may stop
 * lower-priority work like any job (Kueue's borrowWithinCohort:
 * LowerPriority, less other teams' work).
 * 2 for a reclaim, 1 for priority, 0 for no. */
static int may_preempt(const struct sched *s, int job, int r)
{
	const struct sched_job *j = &s->snap->pending[job];
	const struct sched_running *a = &s->snap->running[r];
	int jq = s->job_queue[job], rq = s->run[r].queue, late = started_late(s, r);
	if (s->queues[rq].prio < s->queues[jq].prio)
		return late < 2;
	if (rq != jq)
		return 0;
	int jt = s->qts[s->job_qt[job]].team, rt = s->qts[s->run[r].qt].team;
	if (jt == rt)
		return a->priority < j->priority && j->requeued_ms <= 0 && late < 1;
	return a->borrowed && may_reclaim(s, job) ? 2 : 0;
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

/* How job may take attempt r as a victim now: 0 not at all, 1 priority,
 * 2 reclaim (may_preempt()), 3 already stopping (for this job or none). */
static int victim_kind(const struct sched *s, int job, int r)
{
	if (s->run[r].taken)
		return 0;
	if (s->snap->running[r].stopping)
		return s->run[r].for_job < 0 || s->run[r].for_job == job ? 3 : 0;
	int why = may_preempt(s, job, r);
	return why == 2 && !reclaimable(s, r) ? 0 : why;
}

/* Gives back would-be victims' GPUs until the job fits; the candidates
 * are left in s->victims. What is stopping already and borrowed GPUs it
 * may reclaim come first (reclaim is a guarantee: the borrowers run at that
 * risk, young or not), lower-priority work second, each cheapest first
 * (the order of s->run_order). 1 if it fits; -1 if it fits only with a
 * young priority victim: young attempts are counted (they are the
 * cheapest, and stopping costly old work now, when cheap work will do in a
 * few minutes, would lose more), but the job waits for them to come of age
 * (s->young_until); 0 if it does not fit. An attempt stopping for another
 * pending job is not counted: what it frees is that job's. */
static int gather_victims(struct sched *s, int job, struct sched_shape *sh, int slot)
{
	const struct sched_snapshot *snap = s->snap;
	s->victims = sched_grow(s->victims, &s->victimcap, snap->nrunning + 1, sizeof(int));
	s->nvictims = 0;
	s->young_until = 0;
	/* One pass where nothing can be reclaimed (what is stopping sorts
	 * first); else first over the stopping and borrowed attempts alone. */
	int passes = may_reclaim(s, job) ? 2 : 1;
	for (int pass = 0; pass < passes; pass++) {
		int first = passes == 2 && pass == 0;
		int n = first ? s->nrun_first : snap->nrunning;
		for (int k = 0; k < n; k++) {
			int r = first ? s->run_first[k] : s->run_order[k];
			if (!s->run[r].gpus || !touches(s, slot, r))
				continue; /* a CPU-only attempt frees no GPU: never a victim */
			int kind = victim_kind(s, job, r);
			if (kind == 0 || (passes == 2 && (kind == 1) != (pass == 1)))
				continue;
			if (kind == 2)
				s->qt_taken[s->run[r].qt] += s->run[r].gpus;
			if (kind == 1 && young(s, r)) {
				int64_t until =
				        snap->running[r].start_ms + snap->config.min_runtime_ms;
				s->young_until = until > s->young_until ? until : s->young_until;
			}
			give_running(s, r);
			s->victims[s->nvictims++] = r;
			if (fit_check(s, slot, sh->gpus, sh->nodes))
				return s->young_until ? -1 : 1;
		}
	}
	return 0;
}

/* The loss limit, for the victims that the chosen assignment (s->pick)
 * needs: 1 if the job may stop them. Reclaimed and already stopping ones
 * cost nothing here. Priority victims holding at most preempt_max_ratio
 * times the GPUs the job asks for may always be stopped, so equals stop
 * each other whatever they have run; larger ones only if they lose at most
 * preempt_loss_pct % of the GPU-time the job has waited (work since their
 * last checkpoint and a restart on every GPU, lost_work()): waiting a
 * little longer (running work ends all the time) is cheaper than throwing
 * much away, and the longer a job waits the more it may stop, so it still
 * gets its turn. *prio_gpus: the priority victims' GPUs. */
static int worth_it(struct sched *s, int job, const struct sched_shape *sh, int64_t *prio_gpus)
{
	const struct sched_config *cfg = &s->snap->config;
	const struct sched_job *j = &s->snap->pending[job];
	double cost = 0;
	*prio_gpus = 0;
	for (int k = 0; k < sh->nodes; k++)
		s->want[s->pick[k]] |= s->pick_gpus[k];
	for (int v = 0; v < s->nvictims; v++) {
		int r = s->victims[v];
		if (s->snap->running[r].stopping || !intersects(s, r) ||
		    may_preempt(s, job, r) != 1)
			continue;
		cost += s->run[r].lost;
		*prio_gpus += s->run[r].gpus;
	}
	for (int k = 0; k < sh->nodes; k++)
		s->want[s->pick[k]] = 0;
	int64_t ask = (int64_t)sh->gpus * sh->nodes;
	if (cfg->preempt_loss_pct <= 0 || *prio_gpus == 0 ||
	    (cfg->preempt_max_ratio > 0 && *prio_gpus <= (int64_t)cfg->preempt_max_ratio * ask))
		return 1;
	int64_t since = j->requeued_ms > j->submit_ms ? j->requeued_ms : j->submit_ms;
	int64_t waited = s->snap->now_ms > since ? s->snap->now_ms - since : 0;
	return cost <= (double)waited * (double)ask * cfg->preempt_loss_pct / 100.0;
}

/* Adds attempt r, a victim of kind `kind` (victim_kind()), to what w says
 * holds the job's GPUs: the first one's job, the GPUs on nodes of the
 * job's slot, whose they are. */
static void note_blocker(const struct sched *s, int slot, int r, int kind, struct sched_wait *w)
{
	const struct sched_running *a = &s->snap->running[r];
	if (w->blockers++ == 0)
		w->blocker_job = a->job_id;
	for (int k = 0; k < a->nranks; k++)
		if (slot < 0 || s->slotmask[a->ranks[k].node] >> slot & 1)
			w->blocker_gpus += __builtin_popcountll(a->ranks[k].gpus);
	if (kind == 1)
		w->blocker_kind |= SCHED_BLOCK_PRIORITY;
	if (kind == 2) {
		w->blocker_team =
		        (w->blocker_kind & SCHED_BLOCK_BORROWED) && w->blocker_team != a->team
		                ? 0
		                : a->team;
		w->blocker_kind |= SCHED_BLOCK_BORROWED;
	}
}

static void forget_taken(struct sched *s)
{
	for (int v = 0; v < s->nvictims; v++)
		s->qt_taken[s->run[s->victims[v]].qt] = 0;
}

/* Stops the victims whose GPUs the job's assignment uses (each noted in
 * w), and holds the assignment's free GPUs for it so no later job takes
 * them meanwhile. */
static void apply_preemption(struct sched *s, int job, struct sched_shape *sh, int slot,
                             struct sched_wait *w)
{
	for (int k = 0; k < sh->nodes; k++)
		s->want[s->pick[k]] |= s->pick_gpus[k];
	for (int v = 0; v < s->nvictims; v++) {
		int r = s->victims[v];
		if (!intersects(s, r))
			continue;
		s->run[r].taken = 1;
		int kind = may_preempt(s, job, r);
		note_blocker(s, slot, r, kind, w);
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
		p->reclaim = kind == 2;
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
}

/* For a job with no assignment now, admitted against its quota (on
 * borrowed quota if `borrowed`): 1 if stopping lower-priority work, or
 * other teams' borrowed work where the job is within its own quota (or
 * waiting for attempts already stopping), makes it fit, with the victims
 * chosen and w PREEMPTING (a: how many, and whose, in the blocker fields);
 * else 0, with the blocker fields saying what such work holds and w->held
 * why it is not stopped yet. Never stops anything unless the job then
 * fits. */
int plan_preempt(struct sched *s, int job, struct sched_shape *sh, int slot, int borrowed,
                 struct sched_wait *w)
{
	s->preempt_borrowing = borrowed;
	if (s->preempt_tries >= SCHED_PREEMPT_TRIES)
		return 0;
	s->preempt_tries++;
	if (!s->run_order_done) {
		for (int r = 0; r < s->snap->nrunning; r++) {
			s->run_order[r] = r;
			s->run[r].lost = lost_work(s, r); /* once, not per comparison */
		}
		sched_msort(s->run_order, s->tmp_int, s->snap->nrunning, victim_cmp, s);
		s->nrun_first = 0;
		for (int k = 0; k < s->snap->nrunning; k++) {
			const struct sched_running *a = &s->snap->running[s->run_order[k]];
			if (a->stopping || a->borrowed)
				s->run_first[s->nrun_first++] = s->run_order[k];
		}
		s->run_order_done = 1;
	}
	int mark = fit_mark(s);
	int64_t prio_gpus = 0;
	int gathered = gather_victims(s, job, sh, slot);
	int fits = gathered > 0 && fit_find(s, slot, sh->gpus, sh->nodes);
	if (fits) {
		fit_choose(s, sh->gpus, sh->nodes);
		fits = worth_it(s, job, sh, &prio_gpus);
		if (!fits) {
			w->held = SCHED_HELD_LOSS;
			w->held_gpus = prio_gpus;
		}
	}
	fit_rollback(s, mark);
	forget_taken(s);
	if (!fits) {
		for (int v = 0; v < s->nvictims; v++) {
			int r = s->victims[v];
			if (!s->snap->running[r].stopping)
				note_blocker(s, slot, r, may_preempt(s, job, r), w);
		}
		if (gathered < 0) {
			w->held = SCHED_HELD_YOUNG;
			w->held_until_ms = s->young_until;
		}
		return 0;
	}
	w->reason = SCHED_WAIT_PREEMPTING;
	apply_preemption(s, job, sh, slot, w);
	w->a = w->blockers;
	w->b = 0;
	return 1;
}

/* Quota use of a hold of `gpus` GPUs of quota pair qt: +1 to take, -1 to
 * give back. */
static void est_quota(struct sched *s, int qt, int64_t gpus, int sign)
{
	s->qts[qt].used += sign * gpus;
	s->queues[s->qts[qt].queue].used_sum += sign * gpus;
}

/* Saves the quota use the dry run changes (restore: 1 puts it back), and
 * lifts the borrowing holds: in the dry run the jobs start in order. */
static void est_save(struct sched *s, int restore)
{
	int need = s->nqts + 2 * s->nqueues;
	if (!restore)
		s->est_saved = sched_grow(s->est_saved, &s->est_savedcap, need, sizeof(int64_t));
	int64_t *v = s->est_saved;
	for (int k = 0; k < s->nqts; k++, v++) {
		if (restore)
			s->qts[k].used = *v;
		else
			*v = s->qts[k].used;
	}
	for (int q = 0; q < s->nqueues; q++, v += 2) {
		struct sched_queue_st *qs = &s->queues[q];
		if (restore) {
			qs->used_sum = v[0];
			qs->borrow_hold = v[1];
		} else {
			v[0] = qs->used_sum;
			v[1] = qs->borrow_hold;
			qs->borrow_hold = 0;
		}
	}
}

/* Whether wait k is estimated: not a job that can never run, nor a CPU-only
 * job (it holds no GPU, and what it waits for, room for CPU-only ranks, the
 * dry run does not follow: it keeps 0). */
static int est_counts(const struct sched *s, int k)
{
	return s->waits[k].reason != SCHED_WAIT_UNFIT && s->snap->pending[s->wait_job[k]].gpus > 0;
}

/* The waiting jobs to estimate, in order, into s->est: the first
 * SCHED_EST_JOBS waits that could start at all (est_counts()), or every one up
 * to config.est_job_id where that lies further back (within SCHED_EST_MAX:
 * a job further back than that keeps 0). A reserved
 * job keeps its reservation's time (its GPUs stay out of the view, so the
 * dry run counts them as its); a job whose victims are stopping starts as
 * soon as they have stopped. */
static int est_pick(struct sched *s)
{
	int n = 0, window = 0, limit = SCHED_EST_JOBS;
	int64_t want = s->snap->config.est_job_id;
	if (want > 0) { /* how far back it waits, counting what can start at all */
		int ahead = 0;
		for (int k = 0; k < s->nwaits && ahead < SCHED_EST_MAX; k++) {
			if (!est_counts(s, k))
				continue;
			ahead++;
			if (s->waits[k].job_id == want) {
				limit = ahead > limit ? ahead : limit;
				break;
			}
		}
	}
	if (s->estcap < limit + s->nresvs) { /* the reservations follow the jobs */
		s->estcap = limit + s->nresvs;
		s->est = xrealloc(s->est, sizeof(*s->est) * (size_t)s->estcap);
		s->est_ends = xrealloc(s->est_ends, sizeof(*s->est_ends) * (size_t)s->estcap);
		s->est_next = xrealloc(s->est_next, sizeof(*s->est_next) * (size_t)s->estcap);
	}
	for (int k = 0; k < s->nwaits && window < limit; k++) {
		struct sched_wait *w = &s->waits[k];
		if (!est_counts(s, k))
			continue;
		window++;
		if (w->reason == SCHED_WAIT_PREEMPTING)
			w->est_start_ms = s->snap->now_ms;
		if (w->est_start_ms > 0)
			continue;
		s->est[n++] = (struct sched_est){.wait = k, .job = s->wait_job[k], .off = -1};
	}
	return n;
}

/* Gives back what releases at or before `until` from s->rel_tmp[*r..nrel)
 * (running attempts and this cycle's placements) and from the dry run's
 * started jobs. */
static void est_release(struct sched *s, int *r, int nrel, int *nends, int64_t until)
{
	for (; *r < nrel && s->rel_time[s->rel_tmp[*r]] <= until; (*r)++) {
		int who = s->rel_who[s->rel_tmp[*r]];
		give_release(s, who);
		if (who < 0)
			est_quota(s, s->job_qt[s->place_job[~who]],
			          (int64_t)s->placements[~who].nranks *
			                  s->snap->pending[s->place_job[~who]].gpus,
			          -1);
		else if (!s->snap->running[who].stopping)
			est_quota(s, s->run[who].qt, s->run[who].gpus, -1);
	}
	int k = 0;
	for (; k < *nends && s->est[s->est_ends[k]].end <= until; k++) {
		const struct sched_est *e = &s->est[s->est_ends[k]];
		const struct sched_job *j = &s->snap->pending[e->job];
		if (e->wait < 0) /* a reservation's GPUs: no longer promised */
			for (int q = 0; q < e->nranks; q++)
				s->resv[s->est_ranks[e->off + q].node] &=
				        ~s->est_ranks[e->off + q].gpus;
		give(s, s->est_ranks + e->off, e->nranks);
		est_quota(s, s->job_qt[e->job], (int64_t)j->gpus * j->nodes, -1);
	}
	memmove(s->est_ends, s->est_ends + k, sizeof(int) * (size_t)(*nends - k));
	*nends -= k;
}

/* est[i], started at t, ends at its time limit: filed among the ends. */
static void est_file_end(struct sched *s, int i, int64_t t, int *nends)
{
	struct sched_est *e = &s->est[i];
	int64_t limit = sched_job_limit(s, e->job);
	e->end = limit > 0 && limit < SCHED_NEVER - t ? t + limit : SCHED_NEVER;
	if (e->end == SCHED_NEVER)
		return;
	int k = *nends;
	while (k > 0 && s->est[s->est_ends[k - 1]].end > e->end) {
		s->est_ends[k] = s->est_ends[k - 1];
		k--;
	}
	s->est_ends[k] = i;
	(*nends)++;
}

/* The reserved jobs, est[n..): each holds its reservation's GPUs (out of
 * the view already) and its quota from the start of the dry run, and gives
 * them back at its reservation's start plus its time limit, so that the
 * jobs behind it can be estimated too. */
static void est_reserved(struct sched *s, int n, int *nends)
{
	for (int r = 0; r < s->nresvs; r++) {
		const struct sched_resv *rv = &s->resvs[r];
		const struct sched_job *j = &s->snap->pending[rv->job];
		s->est_ranks = sched_grow(s->est_ranks, &s->est_rankcap, s->nest_ranks + rv->nranks,
		                          sizeof(*s->est_ranks));
		s->est[n + r] = (struct sched_est){
		        .wait = -1, .job = rv->job, .off = s->nest_ranks, .nranks = rv->nranks};
		for (int k = 0; k < rv->nranks; k++) {
			const struct sched_resv_rank *rr = &s->resv_ranks[rv->off + k];
			s->est_ranks[s->nest_ranks++] =
			        (struct sched_rank_hold){rr->node, rr->gpus};
		}
		est_quota(s, s->job_qt[rv->job], (int64_t)j->gpus * j->nodes, 1);
		est_file_end(s, n + r, rv->start, nends);
	}
}

/* Starts est[i] at t in the dry run if its quota and an assignment allow:
 * takes its GPUs and quota, and files its end among the releases. 1 when
 * it started, -1 when its quota refused it, 0 when no assignment exists
 * (then none exists for its shape until the next step). */
static int est_start(struct sched *s, int i, int64_t t, int *nends, uint64_t step)
{
	struct sched_est *e = &s->est[i];
	struct sched_shape *sh = &s->shapes[s->job_shape[e->job]];
	struct sched_wait scratch;
	int borrowed;
	if (sh->est_fail == step + 1)
		return 0;
	if (!sched_quota_admits(s, e->job, &borrowed, &scratch))
		return -1;
	int slot = fit_slot(s, sh->cls);
	if (!fit_find(s, slot, sh->gpus, sh->nodes)) {
		sh->est_fail = step + 1; /* the view only shrinks until the next step */
		return 0;
	}
	fit_choose(s, sh->gpus, sh->nodes);
	s->est_ranks = sched_grow(s->est_ranks, &s->est_rankcap, s->nest_ranks + sh->nodes,
	                          sizeof(*s->est_ranks));
	e->off = s->nest_ranks;
	e->nranks = sh->nodes;
	for (int k = 0; k < sh->nodes; k++) {
		int node = s->pick[k];
		s->est_ranks[s->nest_ranks++] = (struct sched_rank_hold){node, s->pick_gpus[k]};
		fit_set_free(s, node, s->free[node] & ~s->pick_gpus[k]);
	}
	est_quota(s, s->job_qt[e->job], (int64_t)sh->gpus * sh->nodes, 1);
	s->waits[e->wait].est_start_ms = t;
	est_file_end(s, i, t, nends);
	return 1;
}

/* Sorts the jobs est[0..n) into buckets by (shape, quota pair), each
 * bucket's list in order. */
static void est_buckets(struct sched *s, int n)
{
	sched_map_reset(&s->estb_map, n);
	s->nestb = 0;
	for (int i = 0; i < n; i++) {
		const struct sched_est *e = &s->est[i];
		int shape = s->job_shape[e->job], qt = s->job_qt[e->job];
		uint64_t key = (uint64_t)(uint32_t)shape << 32 | (uint32_t)qt;
		int b = sched_map_find(&s->estb_map, key);
		s->est_next[i] = -1;
		if (b >= 0) {
			s->est_next[s->estb[b].tail] = i;
			s->estb[b].tail = i;
			continue;
		}
		s->estb = sched_grow(s->estb, &s->estbcap, s->nestb + 1, sizeof(*s->estb));
		const struct sched_shape *sh = &s->shapes[shape];
		s->estb[s->nestb] = (struct sched_estb){.shape = shape,
		                                        .qt = qt,
		                                        .need = (int64_t)sh->gpus * sh->nodes,
		                                        .head = i,
		                                        .tail = i};
		sched_map_put(&s->estb_map, key, s->nestb++);
	}
	s->estb_heap = sched_grow(s->estb_heap, &s->estb_heapcap, s->nestb, sizeof(int));
	if (s->nqts > s->est_qcap) {
		s->est_qcap = s->nqts;
		s->est_qfail = xrealloc(s->est_qfail, sizeof(int64_t) * (size_t)s->est_qcap);
		s->est_qfail_step =
		        xrealloc(s->est_qfail_step, sizeof(uint64_t) * (size_t)s->est_qcap);
	}
	memset(s->est_qfail_step, 0, sizeof(uint64_t) * (size_t)s->nqts);
}

/* A min-heap of buckets by the order (est index) of their first job. */
static void heap_push(struct sched *s, int *nh, int b)
{
	int *h = s->estb_heap, k = (*nh)++;
	while (k > 0 && s->estb[h[(k - 1) / 2]].head > s->estb[b].head) {
		h[k] = h[(k - 1) / 2];
		k = (k - 1) / 2;
	}
	h[k] = b;
}

static int heap_pop(struct sched *s, int *nh)
{
	int *h = s->estb_heap, top = h[0], last = h[--(*nh)], k = 0;
	for (;;) {
		int c = 2 * k + 1;
		if (c >= *nh)
			break;
		if (c + 1 < *nh && s->estb[h[c + 1]].head < s->estb[h[c]].head)
			c++;
		if (s->estb[h[c]].head >= s->estb[last].head)
			break;
		h[k] = h[c];
		k = c;
	}
	if (*nh > 0)
		h[k] = last;
	return top;
}

/* One step of the dry run at t: the jobs not started yet, in order, start
 * where they can. Only the first job of each bucket is looked at: where it
 * cannot start, its bucket's others cannot either (same shape, same quota
 * pair; fit and quota only shrink within a step), and where a pair's quota
 * refuses a need, it refuses every larger one. The number started. */
static int est_step(struct sched *s, int64_t t, int *nends, uint64_t step)
{
	int nh = 0, started = 0;
	for (int b = 0; b < s->nestb; b++)
		if (s->estb[b].head >= 0 && s->shapes[s->estb[b].shape].est_fail != step + 1)
			heap_push(s, &nh, b);
	while (nh > 0) {
		int b = heap_pop(s, &nh);
		struct sched_estb *eb = &s->estb[b];
		if (s->est_qfail_step[eb->qt] == step + 1 && eb->need >= s->est_qfail[eb->qt])
			continue;
		int rc = est_start(s, eb->head, t, nends, step);
		if (rc > 0) {
			started++;
			eb->head = s->est_next[eb->head];
			if (eb->head >= 0)
				heap_push(s, &nh, b);
		} else if (rc < 0 && (s->est_qfail_step[eb->qt] != step + 1 ||
		                      eb->need < s->est_qfail[eb->qt])) {
			s->est_qfail_step[eb->qt] = step + 1;
			s->est_qfail[eb->qt] = eb->need;
		}
	}
	return started;
}

/* Whether some job not started yet in the dry run might start now: the
 * shape of a bucket with jobs left fits the view (quota aside). */
static int est_any_fits(struct sched *s)
{
	for (int b = 0; b < s->nestb; b++) {
		if (s->estb[b].head < 0)
			continue;
		const struct sched_shape *sh = &s->shapes[s->estb[b].shape];
		int slot = s->classes[sh->cls].slot;
		if (slot < 0 || fit_check(s, slot, sh->gpus, sh->nodes))
			return 1;
	}
	return 0;
}

/* Estimated starts for the waiting jobs: a dry run from the end of the
 * cycle, in which every running attempt and every placement of this cycle
 * ends at its time limit, nothing new arrives, and the waiting jobs of
 * est_pick() start in the cycle's order as soon as an assignment and
 * their quota allow (each then holds its GPUs and quota until its own time
 * limit). A job that waits on one that the dry run has not started yet may
 * still start before it where it fits (as backfill would let it); a job
 * beyond the window, or that no release in sight lets start, keeps 0
 * (unknown). The walk visits each release time once, and looks at the jobs
 * only when one of their shapes fits, and then only at the first of each
 * (shape, quota pair) group (est_step); only the slots of their classes
 * follow it (a 10,000-node walk gives back tens of thousands of holds). The
 * view is rolled back: nothing of it is decided. */
void plan_estimate(struct sched *s)
{
	int n = est_pick(s);
	if (n == 0)
		return;
	s->nest_ranks = 0;
	est_buckets(s, n);
	est_save(s, 0);
	for (int i = 0; i < n; i++)
		fit_slot(s, s->shapes[s->job_shape[s->est[i].job]].cls);
	s->slot_live = 0;
	for (int i = 0; i < n; i++) {
		int slot = s->classes[s->shapes[s->job_shape[s->est[i].job]].cls].slot;
		if (slot >= 0) /* else more classes than slots: rebuilt (and live) when used */
			s->slot_live |= 1ull << slot;
	}
	int nrel = collect_releases(s), r = 0, nends = 0, left = n, mark = fit_mark(s);
	est_reserved(s, n, &nends);
	for (uint64_t step = 0; left > 0; step++) {
		int64_t t = r < nrel ? s->rel_time[s->rel_tmp[r]] : SCHED_NEVER;
		if (nends && s->est[s->est_ends[0]].end < t)
			t = s->est[s->est_ends[0]].end;
		if (t == SCHED_NEVER)
			break;
		est_release(s, &r, nrel, &nends, t);
		if (est_any_fits(s))
			left -= est_step(s, t, &nends, step);
	}
	fit_rollback(s, mark);
	for (int k = 0; k < s->nresv_ranks; k++) /* promised again */
		s->resv[s->resv_ranks[k].node] |= s->resv_ranks[k].gpus;
	s->slot_live = ~0ull;
	est_save(s, 1);
}
