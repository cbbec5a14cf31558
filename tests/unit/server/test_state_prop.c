/* A property test of the server's state (server/state.h): a seeded PRNG
 * drives random events - submissions, scheduling ticks, agents' syncs and
 * their ranks' ends, cancels, requeues, nodes going silent and coming back,
 * drains and cordons, preemption and server restarts - on 3 or 4 nodes, and
 * after every step the invariants below are checked:
 *
 *   (a) no job is lost: every job is final, or pending (in st->core->pending
 *       exactly once), or has exactly one attempt that is not final, its
 *       current one, in st->core->active exactly once;
 *   (b) no GPU is held twice: on each node the GPU masks of the ranks that
 *       have not ended, of attempts that have not ended (ending ones
 *       included: their ranks hold GPUs until they report), do not overlap,
 *       and their union is node->gpus_used;
 *   (c) final is final: a job, attempt or rank seen in a final state never
 *       changes state (or end time, or exit code) again;
 *   (d) a job's state agrees with its current attempt's;
 *   (e) a node's desired set is exactly the live ranks on it of the
 *       attempts that are not ending, and its generation never goes back;
 *   (f) new attempts go only to ready nodes; a draining node still runs
 *       something, a drained one nothing;
 *   (g) what must stop is stopping: the attempt of a job being cancelled,
 *       and a gang one of whose ranks failed or was lost.
 *
 * At the end of each seed every node is brought back and every rank left
 * to finish: every job must then be final, with one job.finished event
 * and one job.requeued event per preempted attempt. A failure
 * prints the seed, the step and the event.
 */
#include "state_fixture.h"

#include "base/err.h"

#define SEEDS     20
#define STEPS     300
#define GPUS      4 /* per node */
#define MAX_RANKS 8

static uint64_t rng_state;

static uint64_t rnd(void) /* splitmix64 */
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int pick(int n)
{
	return (int)(rnd() % (uint64_t)n);
}

/* Where a failure happened: printed with it. */
static unsigned cur_seed;
static int cur_step;
static char cur_event[256];

#define INV(cond, ...)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "seed %u step %d after %s: ", cur_seed, cur_step,          \
			        cur_event);                                                        \
			FAIL_AT(__VA_ARGS__);                                                      \
		}                                                                                  \
	} while (0)

/* ---- what the checker has seen ---- */

struct seen_attempt {
	int final;
	enum job_state state;
	int64_t end_ms;
	int nranks;
	enum rank_state ranks[MAX_RANKS];
	int exit_code[MAX_RANKS];
};

struct seen_job {
	int final;
	enum job_state state;
	int64_t end_ms;
};

struct seen {
	struct seen_job *jobs; /* by id - 1 */
	int64_t njobs;
	size_t capjobs;
	struct seen_attempt *attempts; /* by id - 1 */
	int64_t nattempts;
	size_t capattempts;
	int64_t gens[SFX_MAX_NODES];
};

static void seen_grow(struct seen *s, int64_t njobs, int64_t nattempts)
{
	while (s->njobs < njobs) {
		XGROW(s->jobs, s->njobs, s->capjobs);
		memset(&s->jobs[s->njobs++], 0, sizeof(*s->jobs));
	}
	while (s->nattempts < nattempts) {
		XGROW(s->attempts, s->nattempts, s->capattempts);
		memset(&s->attempts[s->nattempts++], 0, sizeof(*s->attempts));
	}
}

/* ---- the invariants ---- */

static int in_pending(struct state *st, const struct job *j)
{
	int count = 0;
	for (int i = 0; i < st->core->npending; i++)
		count += st->core->pending[i] == j;
	return count;
}

static int in_active(struct state *st, const struct attempt *a)
{
	int count = 0;
	for (int i = 0; i < st->core->nactive; i++)
		count += st->core->active[i] == a;
	return count;
}

/* (a) and (d) for job j. */
static void check_job(struct state *st, struct job *j)
{
	int live = 0;
	for (int k = 0; k < j->nattempts; k++) {
		struct attempt *a = j->attempts[k];
		INV(a->job_id == j->id, "attempt %lld of job %lld says job %lld", (long long)a->id,
		    (long long)j->id, (long long)a->job_id);
		INV(a->number == k + 1, "attempt %lld is number %d at %d", (long long)a->id,
		    a->number, k + 1);
		int final = job_state_final(a->state);
		INV(in_active(st, a) == !final, "attempt %lld (%s) is in active %d times",
		    (long long)a->id, job_state_name(a->state), in_active(st, a));
		if (!final) {
			live++;
			INV(k == j->nattempts - 1, "job %lld: attempt %d of %d is not final",
			    (long long)j->id, k + 1, j->nattempts);
		}
	}
	const struct attempt *cur = sfx_attempt(j);
	int pend = in_pending(st, j);
	if (job_state_final(j->state)) {
		INV(pend == 0 && live == 0, "final job %lld (%s): pending %d, live attempts %d",
		    (long long)j->id, job_state_name(j->state), pend, live);
		/* (d): it ended with its attempt, or was cancelled while requeued */
		INV(!cur || cur->state == j->state ||
		            (cur->state == JOB_PREEMPTED && j->state == JOB_CANCELLED),
		    "job %lld is %s, its attempt %lld %s", (long long)j->id,
		    job_state_name(j->state), (long long)cur->id, job_state_name(cur->state));
		INV(j->end_ms > 0, "final job %lld has no end time", (long long)j->id);
	} else if (j->state == JOB_PENDING) {
		INV(pend == 1 && live == 0, "pending job %lld: pending %d, live attempts %d",
		    (long long)j->id, pend, live);
		INV(!cur || cur->state == JOB_PREEMPTED, "pending job %lld, its attempt %s",
		    (long long)j->id, job_state_name(cur->state));
	} else {
		INV(pend == 0 && live == 1, "%s job %lld: pending %d, live attempts %d",
		    job_state_name(j->state), (long long)j->id, pend, live);
		INV(cur->state == j->state, "job %lld is %s, its attempt %lld %s", (long long)j->id,
		    job_state_name(j->state), (long long)cur->id, job_state_name(cur->state));
		/* (g) what must stop is being stopped: a cancelled job's attempt,
		 * and a gang with a rank that failed, failed to start or was lost */
		INV(!j->cancel_requested || attempt_ending(cur),
		    "job %lld: cancel requested, attempt %lld not ending", (long long)j->id,
		    (long long)cur->id);
		for (int r = 0; r < cur->nranks; r++) {
			const struct rank *k = &cur->ranks[r];
			int bad = k->state == RANK_FAILED_START || k->state == RANK_LOST ||
			          (k->state == RANK_EXITED && (k->exit_code || k->signal));
			INV(!bad || attempt_ending(cur),
			    "attempt %lld: rank %d %s (exit %d), not ending", (long long)cur->id, r,
			    rank_state_name(k->state), k->exit_code);
		}
	}
}

/* (a): the indexes hold nothing else. */
static void check_indexes(struct state *st)
{
	for (int i = 0; i < st->core->npending; i++) {
		struct job *j = st->core->pending[i];
		INV(j && state_job(st, j->id) == j && j->state == JOB_PENDING,
		    "pending[%d] is job %lld (%s)", i, j ? (long long)j->id : -1LL,
		    j ? job_state_name(j->state) : "?");
	}
	for (int i = 0; i < st->core->nactive; i++) {
		struct attempt *a = st->core->active[i];
		INV(!job_state_final(a->state), "active[%d] is attempt %lld, %s", i,
		    (long long)a->id, job_state_name(a->state));
		INV(a->id >= 1 && a->id <= st->core->nattempts &&
		            st->core->attempts[a->id - 1] == a,
		    "active[%d] is not indexed", i);
		struct job *j = state_job(st, a->job_id);
		INV(j && sfx_attempt(j) == a, "active attempt %lld is not its job's current",
		    (long long)a->id);
	}
}

/* (b) for node n. */
static void check_gpus(struct state *st, const struct node *n)
{
	uint64_t all = 0, held = 0;
	for (int g = 0; g < n->ngpus; g++)
		all |= 1ull << n->gpus[g].index;
	for (int64_t i = 0; i < st->core->nattempts; i++) {
		const struct attempt *a = st->core->attempts[i];
		for (int r = 0; a && r < a->nranks; r++) {
			const struct rank *k = &a->ranks[r];
			if (job_state_final(a->state)) {
				INV(rank_state_final(k->state), "attempt %lld is %s, rank %d %s",
				    (long long)a->id, job_state_name(a->state), r,
				    rank_state_name(k->state));
				continue;
			}
			if (k->node_id != n->id || rank_state_final(k->state))
				continue;
			INV(!(held & k->gpus),
			    "node %s: attempt %lld rank %d holds GPUs %#llx, already held %#llx",
			    n->name, (long long)a->id, r, (unsigned long long)k->gpus,
			    (unsigned long long)held);
			INV(k->gpus && !(k->gpus & ~all), "attempt %lld rank %d: GPUs %#llx",
			    (long long)a->id, r, (unsigned long long)k->gpus);
			held |= k->gpus;
		}
	}
	INV(held == n->gpus_used, "node %s: ranks hold %#llx, gpus_used %#llx", n->name,
	    (unsigned long long)held, (unsigned long long)n->gpus_used);
}

/* (c): compares with what was seen, then remembers. */
static void check_final(struct state *st, struct seen *s)
{
	seen_grow(s, st->njobs, st->core->nattempts);
	for (int64_t i = 0; i < st->njobs; i++) {
		const struct job *j = st->jobs[i];
		struct seen_job *w = &s->jobs[i];
		if (w->final)
			INV(j->state == w->state && j->end_ms == w->end_ms,
			    "job %lld was %s (end %lld), now %s (end %lld)", (long long)j->id,
			    job_state_name(w->state), (long long)w->end_ms,
			    job_state_name(j->state), (long long)j->end_ms);
		w->final = job_state_final(j->state);
		w->state = j->state;
		w->end_ms = j->end_ms;
	}
	for (int64_t i = 0; i < st->core->nattempts; i++) {
		const struct attempt *a = st->core->attempts[i];
		struct seen_attempt *w = &s->attempts[i];
		INV(a && a->nranks <= MAX_RANKS, "attempt %lld", (long long)i + 1);
		if (w->final)
			INV(a->state == w->state && a->end_ms == w->end_ms,
			    "attempt %lld was %s (end %lld), now %s (end %lld)", (long long)a->id,
			    job_state_name(w->state), (long long)w->end_ms,
			    job_state_name(a->state), (long long)a->end_ms);
		for (int r = 0; r < a->nranks && r < w->nranks; r++) {
			const struct rank *k = &a->ranks[r];
			if (rank_state_final(w->ranks[r]))
				INV(k->state == w->ranks[r] && k->exit_code == w->exit_code[r],
				    "attempt %lld rank %d was %s (exit %d), now %s (exit %d)",
				    (long long)a->id, r, rank_state_name(w->ranks[r]),
				    w->exit_code[r], rank_state_name(k->state), k->exit_code);
			else
				INV(!(w->ranks[r] == RANK_RUNNING && k->state == RANK_ASSIGNED),
				    "attempt %lld rank %d went back to assigned", (long long)a->id,
				    r);
		}
		w->final = job_state_final(a->state);
		w->state = a->state;
		w->end_ms = a->end_ms;
		w->nranks = a->nranks;
		for (int r = 0; r < a->nranks; r++) {
			w->ranks[r] = a->ranks[r].state;
			w->exit_code[r] = a->ranks[r].exit_code;
		}
	}
}

/* (e) for node index i. */
static void check_desired(struct sfx *f, struct seen *s, int i)
{
	struct state *st = &f->st;
	struct node *n = sfx_node(f, i);
	INV(n->generation >= s->gens[i], "node %s: generation %lld after %lld", n->name,
	    (long long)n->generation, (long long)s->gens[i]);
	s->gens[i] = n->generation;
	json_t *o = sfx_desired(f, i);
	const json_t *ranks = json_object_get(o, "ranks");
	size_t x;
	json_t *d;
	json_array_foreach (ranks, x, d) {
		int64_t aid = jv_int(d, "attempt_id", 0);
		int r = (int)jv_int(d, "rank", -1);
		const struct attempt *a =
		        aid >= 1 && aid <= st->core->nattempts ? st->core->attempts[aid - 1] : NULL;
		INV(a && r >= 0 && r < a->nranks, "node %s desires attempt %lld rank %d", n->name,
		    (long long)aid, r);
		INV(!job_state_final(a->state) && !attempt_ending(a) &&
		            a->ranks[r].node_id == n->id && !rank_state_final(a->ranks[r].state),
		    "node %s desires attempt %lld (%s%s) rank %d (%s)", n->name, (long long)aid,
		    job_state_name(a->state), attempt_ending(a) ? ", ending" : "", r,
		    rank_state_name(a->ranks[r].state));
	}
	size_t want = 0;
	for (int k = 0; k < st->core->nactive; k++) {
		const struct attempt *a = st->core->active[k];
		for (int r = 0; r < a->nranks && !attempt_ending(a); r++)
			want += a->ranks[r].node_id == n->id &&
			        !rank_state_final(a->ranks[r].state);
	}
	INV(json_array_size(ranks) == want, "node %s desires %zu ranks, %zu live", n->name,
	    json_array_size(ranks), want);
	json_decref(o);
}

/* (f) for node n; new_from: the first attempt id made in this step. */
static void check_node_admin(struct state *st, const struct node *n, int64_t new_from)
{
	int busy = 0;
	for (int k = 0; k < st->core->nactive; k++) {
		const struct attempt *a = st->core->active[k];
		for (int r = 0; r < a->nranks; r++) {
			const struct rank *rk = &a->ranks[r];
			if (rk->node_id != n->id || rank_state_final(rk->state))
				continue;
			busy = 1;
			INV(a->id < new_from || (n->state == NODE_READY && n->admin == NODE_READY),
			    "new attempt %lld placed on node %s (%s)", (long long)a->id, n->name,
			    node_shown_state(n));
		}
	}
	INV(n->admin != NODE_DRAINING || busy, "node %s is draining with nothing on it", n->name);
	INV(n->admin != NODE_DRAINED || !busy, "node %s is drained but runs a rank", n->name);
}

static void check_all(struct sfx *f, struct seen *s, int64_t new_from)
{
	struct state *st = &f->st;
	INV(st->stats.refused_moves == 0, "%llu state changes refused (the log names them)",
	    (unsigned long long)st->stats.refused_moves);
	check_indexes(st);
	for (int64_t i = 0; i < st->njobs; i++) {
		INV(st->jobs[i] && st->jobs[i]->id == i + 1, "job slot %lld", (long long)i + 1);
		check_job(st, st->jobs[i]);
		/* a job that ended keeps its attempt's start, however quickly it failed */
		const struct job *j = st->jobs[i];
		const struct attempt *a = j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
		if (job_state_final(j->state) && a && a->state != JOB_PREEMPTED)
			INV(j->start_ms == a->start_ms,
			    "job %lld %s: start %lld, its attempt's %lld", (long long)j->id,
			    job_state_name(j->state), (long long)j->start_ms,
			    (long long)a->start_ms);
	}
	for (int i = 0; i < f->nnodes; i++) {
		check_gpus(st, sfx_node(f, i));
		check_desired(f, s, i);
		check_node_admin(st, sfx_node(f, i), new_from);
	}
	check_final(st, s);
}

/* ---- the events ---- */

static void ev_submit(struct sfx *f)
{
	int nodes = 1 + (pick(4) == 0) + (pick(8) == 0);
	int gpus = 1 + pick(GPUS);
	int too_big = pick(20) == 0;
	static const int prios[] = {0, 0, 0, 1, 5, 10};
	char body[160];
	snprintf(body, sizeof(body),
	         "{\"command\": [\"train\"], \"gpus\": %d, \"nodes\": %d,"
	         " \"priority\": %d}",
	         too_big ? GPUS + 1 : gpus, nodes,
	         prios[pick((int)(sizeof(prios) / sizeof(prios[0])))]);
	snprintf(cur_event, sizeof(cur_event), "submit %s", body);
	if (too_big || nodes > f->nnodes) {
		int64_t before = f->st.njobs;
		char err[256] = "";
		int rc = sfx_submit_refused(f, body, err, sizeof(err));
		INV(rc == ERR_UNFIT && *err, "refusal rc %d: %s", rc, err);
		INV(f->st.njobs == before, "a refused job was kept");
		return;
	}
	sfx_submit(f, body);
}

/* One of the agent's ranks (a random one) ends: SIGTERM if it was told to
 * stop, else exit 0 or 1, or, never reported yet, failed to start. */
static void ev_rank_ends(struct sfx *f, int node)
{
	struct sfx_agent *ag = &f->agents[node];
	int live[64], nlive = 0;
	for (int p = 0; p < ag->nprocs && nlive < 64; p++)
		if (ag->procs[p].state == SFX_RUNNING)
			live[nlive++] = p;
	if (!nlive) {
		snprintf(cur_event, sizeof(cur_event), "node-%d: no rank to end", node + 1);
		return;
	}
	struct sfx_proc *p = &ag->procs[live[pick(nlive)]];
	int how = pick(8);
	if (p->stopping) {
		p->state = SFX_EXITED;
		p->signal = 15;
	} else if (how == 0 && !p->reported) {
		p->state = SFX_FAILED;
	} else {
		p->state = SFX_EXITED;
		p->exit_code = how < 3 ? 1 : 0;
	}
	snprintf(cur_event, sizeof(cur_event), "node-%d: attempt %lld rank %d %s exit %d sig %d",
	         node + 1, (long long)p->attempt_id, p->rank,
	         p->state == SFX_FAILED ? "failed to start" : "exited", p->exit_code, p->signal);
	if (pick(2))
		sfx_report(f, node);
}

static int pick_node(struct sfx *f, int want_silent)
{
	int cand[SFX_MAX_NODES], n = 0;
	for (int i = 0; i < f->nnodes; i++)
		if (f->agents[i].silent == want_silent)
			cand[n++] = i;
	return n ? cand[pick(n)] : -1;
}

static void ev_agent(struct sfx *f)
{
	int node = pick_node(f, 0);
	if (node < 0)
		return;
	int what = pick(6);
	snprintf(cur_event, sizeof(cur_event), "node-%d: %s", node + 1,
	         what < 3    ? "sync"
	         : what == 3 ? "report"
	         : what == 4 ? "apply"
	                     : "ends a rank");
	if (what < 3)
		sfx_sync(f, node);
	else if (what == 3)
		sfx_report(f, node);
	else if (what == 4)
		sfx_apply(f, node);
	else
		ev_rank_ends(f, node);
}

static void ev_cancel(struct sfx *f)
{
	if (!f->st.njobs)
		return;
	struct job *j = f->st.jobs[pick((int)f->st.njobs)];
	snprintf(cur_event, sizeof(cur_event), "cancel job %lld (%s)", (long long)j->id,
	         job_state_name(j->state));
	INV(state_cancel(&f->st, j) == 0, "cancel");
	sfx_flush(f);
}

static void ev_requeue(struct sfx *f)
{
	if (!f->st.core->nactive)
		return;
	struct attempt *a = f->st.core->active[pick(f->st.core->nactive)];
	snprintf(cur_event, sizeof(cur_event), "requeue attempt %lld%s", (long long)a->id,
	         attempt_ending(a) ? " (ending)" : "");
	state_attempt_requeue(&f->st, a, "a test requeues it");
	sfx_flush(f);
}

static void ev_silence(struct sfx *f)
{
	int node = pick_node(f, 0);
	if (node < 0 || sfx_node(f, node)->state == NODE_LOST)
		return;
	snprintf(cur_event, sizeof(cur_event), "node-%d goes silent", node + 1);
	sfx_silence(f, node);
	INV(sfx_node(f, node)->state == NODE_LOST, "a silent node is not lost");
}

static void ev_return(struct sfx *f)
{
	int node = pick_node(f, 1);
	if (node < 0)
		return;
	int reboot = pick(2);
	snprintf(cur_event, sizeof(cur_event), "node-%d comes back%s", node + 1,
	         reboot ? " rebooted" : "");
	if (reboot)
		sfx_agent_reboot(f, node);
	sfx_sync(f, node);
	if (reboot || sfx_running(f, node) == 0)
		INV(sfx_node(f, node)->state == NODE_READY,
		    "node-%d back with nothing running is %s", node + 1,
		    node_shown_state(sfx_node(f, node)));
}

static void ev_admin(struct sfx *f)
{
	int node = pick(f->nnodes);
	enum node_state now = sfx_node(f, node)->admin, to;
	if (now == NODE_READY)
		to = pick(3) ? NODE_DRAINING : NODE_CORDONED;
	else
		to = pick(4) ? NODE_READY : NODE_DRAINING;
	snprintf(cur_event, sizeof(cur_event), "node-%d %s -> %s", node + 1, node_state_name(now),
	         node_state_name(to));
	sfx_set_admin(f, node, to, "test");
}

static void step(struct sfx *f)
{
	int r = pick(100);
	if (r < 16)
		ev_submit(f);
	else if (r < 22) {
		snprintf(cur_event, sizeof(cur_event), "tick");
		sfx_tick(f);
	} else if (r < 72)
		ev_agent(f);
	else if (r < 76)
		ev_cancel(f);
	else if (r < 79)
		ev_requeue(f);
	else if (r < 82)
		ev_silence(f);
	else if (r < 88)
		ev_return(f);
	else if (r < 93)
		ev_admin(f);
	else if (r < 95) {
		snprintf(cur_event, sizeof(cur_event), "server restart");
		sfx_restart(f);
	} else {
		snprintf(cur_event, sizeof(cur_event), "housekeeping");
		state_check_nodes(&f->st, now_ms());
		sfx_flush(f);
	}
}

/* Every node back and ready, every rank left to finish with exit 0: then
 * every job must be final. */
static void wind_down(struct sfx *f, struct seen *s)
{
	snprintf(cur_event, sizeof(cur_event), "wind-down");
	for (int i = 0; i < f->nnodes; i++) {
		if (sfx_node(f, i)->admin != NODE_READY)
			sfx_set_admin(f, i, NODE_READY, "");
		f->agents[i].silent = 0;
	}
	for (int round = 0; round < 200; round++) {
		cur_step = STEPS + round;
		int64_t new_from = f->st.core->nattempts + 1;
		for (int i = 0; i < f->nnodes; i++) {
			sfx_sync(f, i);
			sfx_end_stopped(f, i);
			for (int p = 0; p < f->agents[i].nprocs; p++)
				if (f->agents[i].procs[p].state == SFX_RUNNING &&
				    f->agents[i].procs[p].reported) {
					f->agents[i].procs[p].state = SFX_EXITED;
					f->agents[i].procs[p].exit_code = 0;
				}
		}
		sfx_tick(f);
		check_all(f, s, new_from);
		int busy = f->st.core->npending || f->st.core->nactive;
		for (int i = 0; i < f->nnodes; i++)
			busy |= f->agents[i].nprocs > 0 || sfx_node(f, i)->state != NODE_READY;
		if (!busy)
			break;
	}
	/* one read of the event log: counts by job */
	sfx_flush(f);
	json_t *events = state_events(&f->st, 1000000, 0);
	CHECK(events != NULL);
	int64_t njobs = f->st.njobs;
	int *finished = xcalloc((size_t)njobs + 1, sizeof(int));
	int *requeued = xcalloc((size_t)njobs + 1, sizeof(int));
	size_t x;
	json_t *e;
	json_array_foreach (events, x, e) {
		int64_t id = jv_int(e, "job_id", 0);
		if (id < 1 || id > njobs)
			continue;
		finished[id] += strcmp(jv_str(e, "kind", ""), "job.finished") == 0;
		requeued[id] += strcmp(jv_str(e, "kind", ""), "job.requeued") == 0;
	}
	json_decref(events);
	for (int64_t i = 0; i < njobs; i++) {
		const struct job *j = f->st.jobs[i];
		INV(job_state_final(j->state), "job %lld is still %s (%s)", (long long)j->id,
		    job_state_name(j->state), j->reason);
		/* every move to a final state records one, a pending job's cancel too */
		INV(finished[j->id] == 1, "job %lld: %d job.finished events", (long long)j->id,
		    finished[j->id]);
		int preempted = 0;
		for (int k = 0; k < j->nattempts; k++)
			preempted += j->attempts[k]->state == JOB_PREEMPTED;
		INV(requeued[j->id] == preempted,
		    "job %lld: %d preempted attempts, %d job.requeued events", (long long)j->id,
		    preempted, requeued[j->id]);
	}
	free(finished);
	free(requeued);
}

struct totals {
	int64_t jobs, attempts, restarts;
	int64_t ended[JOB_NSTATES]; /* attempts by final state */
};

static void run_seed(unsigned seed, struct totals *t)
{
	cur_seed = seed;
	rng_state = seed * 0x2545f4914f6cdd1dull + 1;
	struct sfx *f = sfx_open_timeout(3 + (int)(seed % 2), GPUS, 600000);
	f->st.config.preempt_min_runtime_ms = 0;
	struct seen s = {0};
	for (cur_step = 0; cur_step < STEPS; cur_step++) {
		int64_t new_from = f->st.core->nattempts + 1;
		snprintf(cur_event, sizeof(cur_event), "nothing");
		if (pick(2)) /* a second has passed: no cycle is skipped (schedule.c) */
			glue_age(&f->st);
		step(f);
		t->restarts += strcmp(cur_event, "server restart") == 0;
		check_all(f, &s, new_from);
	}
	wind_down(f, &s);
	t->jobs += f->st.njobs;
	t->attempts += f->st.core->nattempts;
	for (int64_t i = 0; i < f->st.core->nattempts; i++)
		t->ended[f->st.core->attempts[i]->state]++;
	free(s.jobs);
	free(s.attempts);
	sfx_close(f);
}

/* ANVIL_PROP_SEED=n runs seed n alone. A seed fixes the events; what the
 * scheduler makes of them can still depend on the clock (backfill and the
 * preemption loss limit compare wall times), so a failure may need a few
 * runs of its seed to come back. */
TEST(random_events_keep_the_invariants)
{
	struct totals t = {0};
	const char *only = getenv("ANVIL_PROP_SEED");
	unsigned first = only ? (unsigned)strtoul(only, NULL, 10) : 1;
	unsigned last = only ? first : SEEDS;
	for (unsigned seed = first; seed <= last; seed++)
		run_seed(seed, &t);
	printf("%u seed(s) x %d steps: %lld jobs, %lld restarts, %lld attempts:", last - first + 1,
	       STEPS, (long long)t.jobs, (long long)t.restarts, (long long)t.attempts);
	for (int k = JOB_SUCCEEDED; k < JOB_NSTATES; k++)
		printf(" %lld %s", (long long)t.ended[k], job_state_name(k));
	printf("\n");
	/* the events did reach every ending, and restarts */
	for (int k = JOB_SUCCEEDED; k < JOB_NSTATES && !only; k++)
		CHECK(t.ended[k] > 0);
	CHECK(t.restarts > 0 || only);
}

/* ---- the checker itself: it must catch what it claims to ---- */

/* A small healthy state - jobs 1 (2 GPUs) and 3 (2 GPUs) running on one
 * node, 2 (4 GPUs) on the other, 4 cancelled while pending, 5 pending -
 * broken by `breaker`: check_all must fail (in a child: a failure exits). */
static void expect_caught(void (*breaker)(struct sfx *f))
{
	cur_seed = 0;
	struct sfx *f = sfx_open_timeout(2, GPUS, 600000);
	struct seen s = {0};
	struct job *a = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	struct job *c = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 4}");
	struct job *e = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	struct job *b = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2, \"nodes\": 2}");
	struct job *g = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	CHECK_INT(state_cancel(&f->st, b), 0);
	sfx_start_all(f);
	CHECK_INT(a->state, JOB_RUNNING);
	CHECK_INT(c->state, JOB_RUNNING);
	CHECK_INT(e->state, JOB_RUNNING);
	CHECK_INT(b->state, JOB_CANCELLED);
	CHECK_INT(g->state, JOB_PENDING);
	CHECK_INT(sfx_attempt(a)->ranks[0].node_id, sfx_attempt(e)->ranks[0].node_id);
	check_all(f, &s, f->st.core->nattempts + 1); /* healthy: passes */
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		breaker(f);
		check_all(f, &s, f->st.core->nattempts + 1);
		_exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0);
	free(s.jobs);
	free(s.attempts);
	sfx_close(f);
}

static void gpu_twice(struct sfx *f) /* job 3's rank gets job 1's GPUs */
{
	sfx_attempt(state_job(&f->st, 3))->ranks[0].gpus =
	        sfx_attempt(state_job(&f->st, 1))->ranks[0].gpus;
}

static void pending_twice(struct sfx *f)
{
	state_pending_add(&f->st, state_job(&f->st, 5));
}

static void final_changes(struct sfx *f)
{
	state_job(&f->st, 4)->end_ms++;
}

static void job_disagrees(struct sfx *f)
{
	state_job(&f->st, 2)->state = JOB_SCHEDULED;
}

TEST(the_checker_catches_a_gpu_held_twice)
{
	expect_caught(gpu_twice);
}

TEST(the_checker_catches_a_job_pending_twice)
{
	expect_caught(pending_twice);
}

TEST(the_checker_catches_a_final_job_changing)
{
	expect_caught(final_changes);
}

TEST(the_checker_catches_a_job_disagreeing_with_its_attempt)
{
	expect_caught(job_disagrees);
}

TEST_MAIN()
