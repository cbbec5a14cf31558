#include "server/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "model/fields.h"
#include "sched/sched.h"

void state_lock(struct state *st)
{
	pthread_mutex_lock(&st->mu);
}

void state_unlock(struct state *st)
{
	pthread_mutex_unlock(&st->mu);
}

struct job *state_job(struct state *st, int64_t id)
{
	return id >= 1 && id <= st->njobs ? st->jobs[id - 1] : NULL;
}

struct node *state_node(struct state *st, int64_t id)
{
	return id >= 1 && id <= st->nnodes ? st->nodes[id - 1] : NULL;
}

struct node *state_node_by_name(struct state *st, const char *name)
{
	for (int i = 0; i < st->nnodes; i++)
		if (strcmp(st->nodes[i]->name, name) == 0)
			return st->nodes[i];
	return NULL;
}

struct queue *state_queue(struct state *st, const char *name)
{
	for (int i = 0; i < st->nqueues; i++)
		if (strcmp(st->queues[i].name, name) == 0)
			return &st->queues[i];
	return NULL;
}

static struct queue *add_queue(struct state *st, const char *name)
{
	struct queue *q = state_queue(st, name);
	if (q)
		return q;
	st->queues = xrealloc(st->queues, sizeof(*st->queues) * (size_t)(st->nqueues + 1));
	q = &st->queues[st->nqueues++];
	memset(q, 0, sizeof(*q));
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->weight = 1;
	q->borrowing = 1;
	q->default_time_limit_ms = 24 * 3600 * 1000LL;
	q->sched_id = state_intern(st, name);
	return q;
}

/* Applies the settings in o (an API body or a stored extra) to q. */
static void queue_apply(struct queue *q, const json_t *o)
{
	q->priority = (int)jv_int(o, "priority", q->priority);
	q->weight = (int)jv_int(o, "weight", q->weight);
	q->borrowing = jv_bool(o, "borrowing", q->borrowing);
	q->default_time_limit_ms = jv_int(o, "default_time_limit_ms", q->default_time_limit_ms);
	q->idle_timeout_ms = jv_int(o, "idle_timeout_ms", q->idle_timeout_ms);
	q->run_as_root = jv_bool(o, "run_as_root", q->run_as_root);
	const json_t *quotas = json_object_get(o, "quotas");
	if (!json_is_object(quotas))
		return;
	const char *team;
	json_t *v;
	json_object_foreach ((json_t *)quotas, team, v) {
		int k = 0;
		while (k < q->nquotas && strcmp(q->quotas[k].team, team) != 0)
			k++;
		if (json_is_null(v)) { /* null removes the team's quota */
			if (k < q->nquotas)
				q->quotas[k] = q->quotas[--q->nquotas];
			continue;
		}
		if (k == q->nquotas && q->nquotas == STATE_MAX_QUOTAS)
			continue; /* the API caps the count first */
		if (k == q->nquotas)
			snprintf(q->quotas[q->nquotas++].team, sizeof(q->quotas[0].team), "%s",
			         team);
		q->quotas[k].nominal_gpus = (int)json_integer_value(v);
	}
}

static json_t *queue_extra(const struct queue *q)
{
	json_t *quotas = json_object();
	for (int k = 0; k < q->nquotas; k++)
		json_object_set_new(quotas, q->quotas[k].team,
		                    json_integer(q->quotas[k].nominal_gpus));
	return json_pack(
	        "{s:i,s:b,s:I,s:I,s:b,s:o}", "weight", q->weight, "borrowing", q->borrowing,
	        "default_time_limit_ms", (json_int_t)q->default_time_limit_ms, "idle_timeout_ms",
	        (json_int_t)q->idle_timeout_ms, "run_as_root", q->run_as_root, "quotas", quotas);
}

int state_put_queue(struct state *st, const json_t *body, char *err, size_t errlen)
{
	const char *name = jv_str(body, "name", "");
	const json_t *quotas = json_object_get(body, "quotas");
	struct queue *existing = state_queue(st, name);
	int have = existing ? existing->nquotas : 0;
	if (json_object_size(quotas) + (size_t)have > STATE_MAX_QUOTAS) {
		snprintf(err, errlen, "field 'quotas': at most %d teams per queue",
		         STATE_MAX_QUOTAS);
		return ERR_INVALID;
	}
	struct queue *q = add_queue(st, name);
	queue_apply(q, body);
	const char *team;
	json_t *v;
	json_object_foreach ((json_t *)quotas, team, v)
		state_team(st, team, 1);
	json_t *extra = queue_extra(q);
	char *text = jv_dump(extra);
	state_event(st, "queue.changed", 0, 0, "queue %s: priority %d %s", name, q->priority, text);
	free(text);
	int rc = store_begin(st->core->store);
	if (rc == 0)
		rc = store_put_queue(st->core->store, name, q->priority, extra);
	if (rc == 0)
		rc = store_commit(st->core->store);
	if (rc) /* else the next flush's begin finds this transaction open */
		store_rollback(st->core->store);
	json_decref(extra);
	st->core->need_schedule = 1;
	return rc;
}

uint32_t state_intern(struct state *st, const char *s)
{
	if (!s || !*s)
		return 0;
	for (int i = 0; i < st->core->names.n; i++)
		if (strcmp(st->core->names.v[i], s) == 0)
			return (uint32_t)i + 1;
	XGROW(st->core->names.v, st->core->names.n, st->core->names.cap);
	st->core->names.v[st->core->names.n++] = xstrdup(s);
	return (uint32_t)st->core->names.n;
}

struct team *state_team(struct state *st, const char *name, int create)
{
	for (int i = 0; i < st->nteams; i++)
		if (strcmp(st->teams[i].name, name) == 0)
			return &st->teams[i];
	if (!create)
		return NULL;
	st->teams = xrealloc(st->teams, sizeof(*st->teams) * (size_t)(st->nteams + 1));
	struct team *t = &st->teams[st->nteams++];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->weight = 1;
	t->usage_ms = wall_ms();
	t->sched_id = state_intern(st, name);
	return t;
}

int state_put_team(struct state *st, const char *name, int weight)
{
	struct team *t = state_team(st, name, 1);
	t->weight = weight;
	t->configured = 1;
	state_event(st, "team.changed", 0, 0, "team %s: weight %d", name, weight);
	json_t *extra = json_pack("{s:i}", "weight", weight);
	int rc = store_begin(st->core->store);
	if (rc == 0)
		rc = store_put_team(st->core->store, name, extra);
	if (rc == 0)
		rc = store_commit(st->core->store);
	if (rc) /* else the next flush's begin finds this transaction open */
		store_rollback(st->core->store);
	json_decref(extra);
	st->core->need_schedule = 1;
	return rc;
}

void state_event(struct state *st, const char *kind, int64_t job_id, int64_t node_id,
                 const char *fmt, ...)
{
	XGROW(st->core->events, st->core->nevents, st->core->capevents);
	struct event *e = &st->core->events[st->core->nevents++];
	snprintf(e->kind, sizeof(e->kind), "%s", kind);
	e->job_id = job_id;
	e->node_id = node_id;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&e->message, fmt, ap) < 0)
		e->message = xstrdup(kind);
	va_end(ap);
}

void state_mark_job(struct state *st, struct job *j)
{
	if (j->dirty)
		return;
	j->dirty = 1;
	XGROW(st->core->dirty_jobs, st->core->ndirty_jobs, st->core->capdirty_jobs);
	st->core->dirty_jobs[st->core->ndirty_jobs++] = j;
}

int state_flush_begin(struct state *st)
{
	if (!st->core->ndirty_jobs && !st->core->nodes_dirty && !st->core->nevents &&
	    !st->core->flows_dirty && !st->core->fleet_dirty && !st->core->idem.npending)
		return 1;
	int rc = store_begin(st->core->store);
	for (int i = 0; rc == 0 && i < st->core->ndirty_jobs; i++)
		rc = store_put_job_state(st->core->store, st->core->dirty_jobs[i]);
	for (int i = 0; rc == 0 && st->core->nodes_dirty && i < st->nnodes; i++)
		if (st->nodes[i]->dirty)
			rc = store_put_node(st->core->store, st->nodes[i]);
		else if (st->nodes[i]->gen_dirty)
			rc = store_put_node_generation(st->core->store, st->nodes[i]);
	for (int i = 0; rc == 0 && i < st->core->nevents; i++) {
		struct event *e = &st->core->events[i];
		rc = store_add_event(st->core->store, e->kind, e->job_id, e->node_id, e->message);
	}
	return rc;
}

int state_flush_end(struct state *st, int rc)
{
	/* a create's key with what it made: one transaction (idem.h) */
	if (rc == 0)
		rc = idem_write(&st->core->idem, st->core->store);
	if (rc == 0)
		rc = store_commit(st->core->store);
	else
		store_rollback(st->core->store);
	if (rc) {
		/* the housekeeping retries every 50 ms: say it once in 10 s
		 * (docs/operations.md), count each on /metrics */
		int64_t now = now_ms();
		st->core->flush_failures++;
		st->stats.flush_failures++;
		st->stats.unwritten = 1;
		if (st->core->flush_failed_logged_ms == 0 ||
		    now - st->core->flush_failed_logged_ms >= 10000) {
			log_error("state flush failed: %s (%lld failure(s) since the last word; "
			          "changes stay in memory and are retried)",
			          store_error(st->core->store),
			          (long long)st->core->flush_failures);
			st->core->flush_failed_logged_ms = now;
			st->core->flush_failures = 0;
		}
		return rc;
	}
	st->stats.unwritten = 0;
	if (st->core->flush_failed_logged_ms) {
		log_info("state flush works again");
		st->core->flush_failed_logged_ms = 0;
		st->core->flush_failures = 0;
	}
	for (int i = 0; i < st->core->ndirty_jobs; i++)
		st->core->dirty_jobs[i]->dirty = 0;
	st->core->ndirty_jobs = 0;
	idem_written(&st->core->idem);
	for (int i = 0; st->core->nodes_dirty && i < st->nnodes; i++)
		st->nodes[i]->dirty = st->nodes[i]->gen_dirty = 0;
	st->core->nodes_dirty = 0;
	for (int i = 0; i < st->core->nevents; i++)
		free(st->core->events[i].message);
	st->core->nevents = 0;
	return 0;
}

int state_idem_find(struct state *st, const char *scope, const char *key, struct store_idem *out)
{
	return idem_find(&st->core->idem, st->core->store, scope, key, wall_ms(),
	                 st->config.idem_keep_ms, out);
}

void state_idem_add(struct state *st, const struct store_idem *r)
{
	struct store_idem copy = *r;
	if (!copy.created_ms)
		copy.created_ms = wall_ms();
	idem_add(&st->core->idem, &copy);
}

void state_idem_prune(struct state *st)
{
	idem_prune(&st->core->idem, st->core->store, wall_ms(), st->config.idem_keep_ms);
}

void state_mark_node(struct state *st, struct node *n)
{
	n->dirty = 1;
	st->core->nodes_dirty = 1;
}

void state_node_changed(struct state *st, struct node *n)
{
	n->changes++;
	state_mark_node(st, n);
	state_want_schedule(st);
}

void state_want_schedule(struct state *st)
{
	st->core->need_schedule = 1;
}

void state_hold_until(struct state *st, int64_t until)
{
	int64_t *w = &st->core->hold_wake_ms;
	if (!*w || until < *w)
		*w = until;
}

void state_hold_check(struct state *st, int64_t now)
{
	if (st->core->hold_wake_ms && now >= st->core->hold_wake_ms) {
		st->core->hold_wake_ms = 0; /* the cycle's deps_ready sets the next */
		state_want_schedule(st);
	}
}

void state_bump(struct state *st, struct node *n)
{
	if (!n)
		return;
	n->generation++;
	/* the rest of its row is marked by whatever changes it */
	n->gen_dirty = 1;
	st->core->nodes_dirty = 1;
	/* Its agent is told once the change is written (state_wake_written),
	 * never before: a change a node acted on that the database then lost
	 * (a full disk, then a restart) would be undone on the server only,
	 * and a cancelled job, its rank stopped, would read as failed. */
	n->wake_held = 1;
	st->core->wakes_held = 1;
}

void state_wake_written(struct state *st)
{
	if (!st->core->wakes_held)
		return;
	st->core->wakes_held = 0;
	for (int i = 0; i < st->nnodes; i++) {
		struct node *n = st->nodes[i];
		if (!n->wake_held)
			continue;
		n->wake_held = 0;
		if (st->wake)
			st->wake(st, n);
	}
}

/* ---- loading ---- */

static void load_queue(void *ctx, const char *name, int priority, const json_t *extra)
{
	struct queue *q = add_queue(ctx, name);
	queue_apply(q, extra);
	q->priority = priority;
}

static void load_team(void *ctx, const char *name, const json_t *extra)
{
	struct team *t = state_team(ctx, name, 1);
	t->weight = (int)jv_int(extra, "weight", 1);
	t->configured = 1;
}

static void load_node(void *ctx, struct node *n)
{
	struct state *st = ctx;
	if (n->id != st->nnodes + 1) {
		log_error("node ids not dense at id=%lld; skipping", (long long)n->id);
		node_free(n);
		return;
	}
	n->last_seen_ms = now_ms(); /* a grace period to re-sync after a restart */
	static const char *const strs[] = {"", "127.0.0.1", "", "none"};
	char **fields[] = {&n->hostname, &n->address, &n->agent_url, &n->backend};
	for (int i = 0; i < 4; i++)
		if (!*fields[i])
			*fields[i] = xstrdup(strs[i]);
	st->nodes = xrealloc(st->nodes, sizeof(*st->nodes) * (size_t)(st->nnodes + 1));
	st->nodes[st->nnodes++] = n;
}

static void load_job(void *ctx, struct job *j)
{
	struct state *st = ctx;
	while (st->njobs + 1 < j->id) /* a hole would break dense ids: never expected */
		state_index_job(st, NULL);
	state_index_job(st, j);
	for (int i = 0; i < j->nattempts; i++)
		state_index_attempt(st, NULL, j->attempts[i]);
}

static void load_flow_exec(void *ctx, const json_t *doc)
{
	struct state *st = ctx;
	json_array_append(json_object_get(st->core->flow_loaded, "execs"), (json_t *)doc);
}

static void load_flow_run(void *ctx, int64_t exec_id, const json_t *doc)
{
	struct state *st = ctx;
	json_array_append_new(json_object_get(st->core->flow_loaded, "runs"),
	                      json_pack("[I,O]", (json_int_t)exec_id, doc));
}

static void load_fleet_revision(void *ctx, int64_t id, const json_t *doc)
{
	struct state *st = ctx;
	json_array_append_new(st->core->fleet_loaded, json_pack("[I,O]", (json_int_t)id, doc));
}

int state_core_open(struct state *st, const char *db_path, int full_sync, int64_t node_timeout_ms)
{
	memset(st, 0, sizeof(*st));
	st->config.node_timeout_ms = node_timeout_ms;
	st->config.rank_lease = 1;
	st->config.usage_half_life_ms = 24 * 3600 * 1000LL;
	st->config.aging_ms = 60 * 1000;
	st->config.preempt_min_runtime_ms = SCHED_DEFAULT_MIN_RUNTIME_MS;
	st->config.preempt_max_ratio = SCHED_DEFAULT_PREEMPT_RATIO;
	st->config.preempt_loss_pct = SCHED_DEFAULT_PREEMPT_LOSS_PCT;
	st->config.preempt_restart_cost_ms = SCHED_DEFAULT_RESTART_COST_MS;
	st->config.session_warning_ms = 60 * 1000;
	st->config.idem_keep_ms = IDEM_KEEP_DEFAULT_MS;
	st->core = xcalloc(1, sizeof(*st->core));
	int rc = store_open(db_path, full_sync, &st->core->store);
	if (rc) {
		free(st->core);
		st->core = NULL;
		return rc;
	}
	pthread_mutex_init(&st->mu, NULL);
	st->core->flow_loaded = json_pack("{s:[],s:[]}", "execs", "runs");
	st->core->fleet_loaded = json_array();
	struct store_loader l = {.ctx = st,
	                         .queue = load_queue,
	                         .team = load_team,
	                         .node = load_node,
	                         .job = load_job,
	                         .flow_exec = load_flow_exec,
	                         .flow_run = load_flow_run,
	                         .fleet_revision = load_fleet_revision};
	rc = store_load(st->core->store, &l);
	if (rc == 0 && !state_queue(st, "default")) {
		char err[128];
		json_t *dflt = json_pack("{s:s,s:i}", "name", "default", "priority", 0);
		rc = state_put_queue(st, dflt, err, sizeof(err));
		json_decref(dflt);
	}
	if (rc)
		state_core_free(st); /* what loaded, unwritten: the file stays as it was */
	return rc;
}

void state_core_free(struct state *st)
{
	struct state_core *c = st->core;
	json_decref(c->flow_loaded);
	json_decref(c->fleet_loaded);
	free(c->flow_done);
	for (int i = 0; i < c->nevents; i++) /* not flushed: the disk refused them */
		free(c->events[i].message);
	for (int64_t i = 0; i < st->njobs; i++)
		job_free(st->jobs[i]); /* frees attempts too */
	for (int i = 0; i < st->nnodes; i++)
		node_free(st->nodes[i]);
	free(st->jobs);
	free(c->attempts);
	free(st->nodes);
	free(c->pending);
	free(c->active);
	free(st->queues);
	free(st->teams);
	for (int i = 0; i < c->names.n; i++)
		free(c->names.v[i]);
	free(c->names.v);
	free(c->dirty_jobs);
	free(c->events);
	idem_cleanup(&c->idem); /* not flushed: the disk refused them */
	store_close(c->store);
	free(c);
	st->core = NULL;
	pthread_mutex_destroy(&st->mu);
}

json_t *state_events(struct state *st, int limit, int64_t job_id)
{
	return store_events(st->core->store, limit, job_id);
}

/* ---- indexes ---- */

struct attempt *state_attempt(struct state *st, int64_t id)
{
	return id >= 1 && id <= st->core->nattempts ? st->core->attempts[id - 1] : NULL;
}

void state_index_job(struct state *st, struct job *j)
{
	XGROW(st->jobs, st->njobs, st->core->capjobs);
	st->jobs[st->njobs++] = j;
}

/* Indexes a at its id; with j, also appends it to j's attempts. Loading
 * brings attempts in job order, not id order (a requeued job's later
 * attempt is newer than other jobs' attempts still to come), so the slots
 * of older ones are left NULL for them. */
void state_index_attempt(struct state *st, struct job *j, struct attempt *a)
{
	struct state_core *c = st->core;
	if (a->id < 1)
		return;
	while (c->nattempts < a->id) {
		XGROW(c->attempts, c->nattempts, c->capattempts);
		c->attempts[c->nattempts++] = NULL;
	}
	c->attempts[a->id - 1] = a;
	if (j) {
		j->attempts =
		        xrealloc(j->attempts, sizeof(*j->attempts) * (size_t)(j->nattempts + 1));
		j->attempts[j->nattempts++] = a;
	}
}

static int queue_priority(struct state *st, const struct job *j)
{
	struct queue *q = state_queue(st, j->queue);
	return q ? q->priority : 0;
}

/* Negative when a should be scheduled before b. */
static int order(struct state *st, const struct job *a, const struct job *b)
{
	int qa = queue_priority(st, a), qb = queue_priority(st, b);
	if (qa != qb)
		return qb - qa;
	if (a->priority != b->priority)
		return b->priority - a->priority;
	return a->id < b->id ? -1 : 1;
}

void state_pending_add(struct state *st, struct job *j)
{
	struct state_core *c = st->core;
	XGROW(c->pending, c->npending, c->cappending);
	int pos = c->npending;
	while (pos > 0 && order(st, j, c->pending[pos - 1]) < 0) {
		c->pending[pos] = c->pending[pos - 1];
		pos--;
	}
	c->pending[pos] = j;
	c->npending++;
	c->npending_cpu += j->gpus == 0;
}

void state_pending_remove(struct state *st, struct job *j)
{
	struct state_core *c = st->core;
	for (int i = 0; i < c->npending; i++)
		if (c->pending[i] == j) {
			memmove(&c->pending[i], &c->pending[i + 1],
			        sizeof(*c->pending) * (size_t)(c->npending - i - 1));
			c->npending--;
			c->npending_cpu -= j->gpus == 0;
			return;
		}
}

void state_active_add(struct state *st, struct attempt *a)
{
	XGROW(st->core->active, st->core->nactive, st->core->capactive);
	st->core->active[st->core->nactive++] = a;
}

/* Swaps the last active attempt into a's place: callers that walk active
 * while attempts end walk it downward. */
void state_active_remove(struct state *st, struct attempt *a)
{
	struct state_core *c = st->core;
	for (int i = 0; i < c->nactive; i++)
		if (c->active[i] == a) {
			c->active[i] = c->active[--c->nactive];
			return;
		}
}

/* ---- JSON views ---- */

static json_t *gpu_list(uint64_t mask)
{
	json_t *a = json_array();
	for (int i = 0; i < MODEL_MAX_GPUS; i++)
		if (mask & (1ull << i))
			json_array_append_new(a, json_integer(i));
	return a;
}

json_t *state_gpu_list(uint64_t mask)
{
	return gpu_list(mask);
}

static json_t *opt_int(int has, int64_t v)
{
	return has ? json_integer(v) : json_null();
}

void state_head_addr(const struct attempt *a, char *out, size_t n)
{
	snprintf(out, n, strchr(a->master_addr, ':') ? "[%s]:%d" : "%s:%d", a->master_addr,
	         a->head_port);
}

int64_t state_gpu_idle_ms(const struct attempt *a, const struct rank *k, int64_t now_mono,
                          int64_t now_wall)
{
	if (!k->has_gpu_idle || rank_state_final(k->state))
		return -1;
	/* Between reports an idle rank stays idle: its agent syncs at once
	 * when one of its GPUs gets busy again (agent/gpuwatch.h). */
	int64_t idle = k->gpu_idle_ms > 0 ? k->gpu_idle_ms + (now_mono - k->gpu_idle_at) : 0;
	/* GPUs idle before the attempt started do not count against it. */
	if (a->start_ms > 0 && idle > now_wall - a->start_ms)
		idle = now_wall - a->start_ms;
	return idle < 0 ? 0 : idle;
}

static json_t *rank_json(struct state *st, const struct attempt *a, const struct rank *r)
{
	struct node *n = state_node(st, r->node_id);
	int final = r->state == RANK_EXITED;
	json_t *o = json_pack(
	        "{s:i,s:I,s:s,s:o,s:s,s:o,s:o,s:o}", "rank", r->rank, "node_id",
	        (json_int_t)r->node_id, "node", n ? n->name : "?", "gpus", gpu_list(r->gpus),
	        "state", rank_state_name(r->state), "pid", opt_int(r->pid > 0, r->pid), "exit_code",
	        opt_int(final, r->exit_code), "signal", opt_int(final && r->signal, r->signal));
	if (r->error[0])
		json_object_set_new(o, "error", json_string(r->error));
	if (r->reason[0])
		json_object_set_new(o, "reason", json_string(r->reason));
	int64_t idle = state_gpu_idle_ms(a, r, now_ms(), wall_ms());
	if (idle >= 0)
		json_object_set_new(o, "gpu_idle_ms", json_integer(idle));
	return o;
}

static json_t *attempt_json(struct state *st, const struct attempt *a)
{
	json_t *ranks = json_array();
	for (int i = 0; i < a->nranks; i++)
		json_array_append_new(ranks, rank_json(st, a, &a->ranks[i]));
	json_t *o = json_object();
	fields_show_all(fields_attempt, a, o); /* as its entries say (model/fields.h) */
	json_object_set_new(o, "ranks", ranks);
	if (a->head_port) {
		char addr[96];
		state_head_addr(a, addr, sizeof(addr));
		json_object_set_new(o, "head_addr", json_string(addr));
	}
	return o;
}

/* Listings show where the current attempt runs: "node-1:0,1" per rank. */
static json_t *placement_json(struct state *st, const struct attempt *a)
{
	json_t *where = json_array();
	for (int i = 0; i < a->nranks; i++) {
		struct node *n = state_node(st, a->ranks[i].node_id);
		char text[96 + 4 * MODEL_MAX_GPUS];
		int len = snprintf(text, sizeof(text), "%s", n ? n->name : "?");
		for (int g = 0, first = 1; g < MODEL_MAX_GPUS; g++) {
			if (!(a->ranks[i].gpus & (1ull << g)))
				continue;
			len += snprintf(text + len, sizeof(text) - (size_t)len, "%s%d",
			                first ? ":" : ",", g);
			first = 0;
		}
		json_array_append_new(where, json_string(text));
	}
	return where;
}

json_t *state_job_json(struct state *st, const struct job *j, int with_attempts)
{
	json_t *o = json_object();
	fields_show_all(fields_job, j,
	                o); /* every shown field, as its entry says (model/fields.h) */
	if (with_attempts) {
		json_t *arr = json_array();
		for (int i = 0; i < j->nattempts; i++)
			json_array_append_new(arr, attempt_json(st, j->attempts[i]));
		json_object_set_new(o, "attempts", arr);
	} else {
		/* A requeued job runs nowhere until its next attempt: the
		 * attempt that was preempted is history, not its placement. */
		const struct attempt *a = j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
		int placed = a && a->state != JOB_PREEMPTED && j->state != JOB_PENDING;
		json_object_set_new(o, "placement", placed ? placement_json(st, a) : json_array());
		json_object_set_new(o, "borrowed", json_boolean(placed && a->borrowed));
	}
	return o;
}

/* ---- the job listing (GET /v1/jobs) ---- */

int state_jobs_filter(const char *f, enum job_state s)
{
	if (!f || !*f || strcmp(f, "all") == 0)
		return 1;
	if (strcmp(f, "active") == 0)
		return !job_state_final(s);
	if (strcmp(f, "done") == 0)
		return job_state_final(s);
	return strcmp(f, job_state_name(s)) == 0;
}

/* One entry for the array whose members are st->jobs[lo..hi] (ids lo + 1
 * to hi + 1): what they share, taken from the first, and what they are,
 * counted over those that match q's state; NULL when none match. The
 * reason is the next member in line's: the lowest pending one. */
static json_t *array_entry(struct state *st, const struct state_jobs_query *q, int64_t lo,
                           int64_t hi)
{
	const struct job *first = st->jobs[lo], *next = NULL;
	int64_t counts[JOB_NSTATES] = {0}, matched = 0, started = 0, ended = 0,
	        members = hi - lo + 1;
	for (int64_t k = lo; k <= hi; k++) {
		const struct job *m = st->jobs[k];
		if (!state_jobs_filter(q->state, m->state))
			continue;
		counts[m->state]++;
		matched++;
		if (m->start_ms > 0 && (!started || m->start_ms < started))
			started = m->start_ms;
		if (job_state_final(m->state) && m->end_ms > ended)
			ended = m->end_ms;
		if (m->state == JOB_PENDING && !next)
			next = m;
	}
	if (!matched)
		return NULL;
	json_t *states = json_object();
	for (int s = 0; s < JOB_NSTATES; s++)
		if (counts[s])
			json_object_set_new(states, job_state_name((enum job_state)s),
			                    json_integer(counts[s]));
	int all_ended = counts[JOB_PENDING] + counts[JOB_SCHEDULED] + counts[JOB_RUNNING] == 0;
	json_t *array =
	        json_pack("{s:I,s:i,s:I,s:I,s:I,s:o}", "id", (json_int_t)first->array_id,
	                  "max_running", first->array_max_running, "members", (json_int_t)members,
	                  "first_index", (json_int_t)first->array_index, "last_index",
	                  (json_int_t)st->jobs[hi]->array_index, "states", states);
	return json_pack("{s:I,s:s,s:s,s:s,s:i,s:i,s:i,s:O,s:I,s:o,s:o,s:s,s:o}", "id",
	                 (json_int_t)first->id, "name", first->name, "queue", first->queue, "team",
	                 first->team ? first->team : "default", "priority", first->priority, "gpus",
	                 first->gpus, "nodes", first->nodes, "command", first->command,
	                 "submit_time_ms", (json_int_t)first->submit_ms, "start_time_ms",
	                 opt_int(started > 0, started), "end_time_ms",
	                 opt_int(all_ended && ended > 0, ended), "reason", next ? next->reason : "",
	                 "array", array);
}

/* Whether j is one q lists (its state aside). */
static int listed(const struct state_jobs_query *q, const struct job *j)
{
	return j && (!q->array || j->array_id == q->array) &&
	       (q->index < 0 || (j->array_id && j->array_index == q->index));
}

json_t *state_jobs_json(struct state *st, const struct state_jobs_query *q)
{
	json_t *list = json_array();
	int more = 0;
	for (int64_t i = st->njobs - 1; i >= 0 && !more; i--) {
		struct job *j = st->jobs[i];
		if (!listed(q, j))
			continue;
		json_t *e = NULL;
		if (q->group && j->array_id && !q->array) {
			/* Members have consecutive ids: j is its array's last,
			 * and the whole array is one entry. */
			int64_t lo = i;
			while (lo > 0 && st->jobs[lo - 1] &&
			       st->jobs[lo - 1]->array_id == j->array_id)
				lo--;
			e = array_entry(st, q, lo, i);
			i = lo;
		} else if (state_jobs_filter(q->state, j->state)) {
			e = state_job_json(st, j, 0);
		}
		if (e && (int64_t)json_array_size(list) >= q->limit) {
			more = 1; /* one more than asked for: there is more */
			json_decref(e);
		} else if (e) {
			json_array_append_new(list, e);
		}
	}
	return json_pack("{s:o,s:b}", "jobs", list, "more", more);
}

/* ---- queues and teams as JSON ---- */

static int64_t attempt_gpus(const struct job *j)
{
	return (int64_t)j->gpus * j->nodes;
}

int state_team_gpus(struct state *st, const char *queue, const char *team)
{
	int64_t n = 0;
	for (int i = 0; i < st->core->nactive; i++) {
		const struct job *j = state_job(st, st->core->active[i]->job_id);
		if (strcmp(j->queue, queue) == 0 && strcmp(j->team, team) == 0)
			n += attempt_gpus(j);
	}
	return (int)n;
}

double state_team_usage(struct state *st, struct team *t, int64_t now)
{
	double u = sched_decay(t->usage, now - t->usage_ms, st->config.usage_half_life_ms);
	for (int i = 0; i < st->core->nactive; i++) {
		const struct attempt *a = st->core->active[i];
		const struct job *j = state_job(st, a->job_id);
		if (strcmp(j->team, t->name) == 0 && a->start_ms > 0 && now > a->start_ms)
			u += (double)attempt_gpus(j) * (double)(now - a->start_ms) / 3.6e6;
	}
	return u;
}

/* Adds a finished attempt's GPU-hours to its team's decayed usage. */
void state_account(struct state *st, const struct job *j, const struct attempt *a)
{
	if (a->start_ms <= 0 || a->end_ms <= a->start_ms)
		return;
	struct team *t = state_team(st, j->team, 1);
	int64_t now = a->end_ms;
	double add = (double)attempt_gpus(j) * (double)(a->end_ms - a->start_ms) / 3.6e6;
	if (now >= t->usage_ms) {
		t->usage = sched_decay(t->usage, now - t->usage_ms, st->config.usage_half_life_ms) +
		           add;
		t->usage_ms = now;
	} else { /* loading history out of order: decay the addition instead */
		t->usage += sched_decay(add, t->usage_ms - now, st->config.usage_half_life_ms);
	}
}

json_t *state_queue_json(struct state *st, const struct queue *q)
{
	json_t *quotas = json_array();
	for (int k = 0; k < q->nquotas; k++)
		json_array_append_new(
		        quotas, json_pack("{s:s,s:i,s:i}", "team", q->quotas[k].team,
		                          "nominal_gpus", q->quotas[k].nominal_gpus, "used_gpus",
		                          state_team_gpus(st, q->name, q->quotas[k].team)));
	int pending = 0, running = 0, used = 0;
	for (int i = 0; i < st->core->npending; i++)
		pending += strcmp(st->core->pending[i]->queue, q->name) == 0;
	for (int i = 0; i < st->core->nactive; i++) {
		const struct job *j = state_job(st, st->core->active[i]->job_id);
		if (strcmp(j->queue, q->name) == 0) {
			running++;
			used += (int)attempt_gpus(j);
		}
	}
	return json_pack("{s:s,s:i,s:i,s:b,s:I,s:I,s:b,s:o,s:i,s:i,s:i}", "name", q->name,
	                 "priority", q->priority, "weight", q->weight, "borrowing", q->borrowing,
	                 "default_time_limit_ms", (json_int_t)q->default_time_limit_ms,
	                 "idle_timeout_ms", (json_int_t)q->idle_timeout_ms, "run_as_root",
	                 q->run_as_root, "quotas", quotas, "pending_jobs", pending, "running_jobs",
	                 running, "used_gpus", used);
}

json_t *state_team_json(struct state *st, const struct team *t)
{
	double usage = state_team_usage(st, (struct team *)t, wall_ms());
	int gpus = 0;
	for (int i = 0; i < st->core->nactive; i++) {
		const struct job *j = state_job(st, st->core->active[i]->job_id);
		if (strcmp(j->team, t->name) == 0)
			gpus += (int)attempt_gpus(j);
	}
	return json_pack("{s:s,s:i,s:f,s:f,s:i}", "name", t->name, "weight", t->weight,
	                 "usage_gpu_hours", usage, "fair_share_score",
	                 usage / (t->weight ? t->weight : 1), "used_gpus", gpus);
}
