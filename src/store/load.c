/* load.c - rebuilding the in-memory records from the database at start-up. */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "store/store.h"

/* store.c keeps the handle private; we reach it through this accessor. */
sqlite3 *store_db(struct store *st);

static char *col_str(sqlite3_stmt *s, int i)
{
	const unsigned char *t = sqlite3_column_text(s, i);
	return t ? xstrdup((const char *)t) : NULL;
}

static json_t *col_json(sqlite3_stmt *s, int i)
{
	const char *t = (const char *)sqlite3_column_text(s, i);
	json_t *v = t ? json_loads(t, 0, NULL) : NULL;
	return v;
}

static int load_queues(sqlite3 *db, const struct store_loader *l)
{
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(db, "SELECT name, priority, extra FROM queues", -1, &s, NULL))
		return -EIO;
	while (sqlite3_step(s) == SQLITE_ROW) {
		json_t *extra = col_json(s, 2);
		l->queue(l->ctx, (const char *)sqlite3_column_text(s, 0), sqlite3_column_int(s, 1),
		         extra);
		json_decref(extra);
	}
	sqlite3_finalize(s);
	if (sqlite3_prepare_v2(db, "SELECT name, extra FROM teams", -1, &s, NULL))
		return -EIO;
	while (sqlite3_step(s) == SQLITE_ROW) {
		json_t *extra = col_json(s, 1);
		if (l->team)
			l->team(l->ctx, (const char *)sqlite3_column_text(s, 0), extra);
		json_decref(extra);
	}
	sqlite3_finalize(s);
	return 0;
}

/* The node's fleet fields (schema v5), absent from older rows. */
static void node_fleet_row(struct node *n, const json_t *extra)
{
	json_t *profile = json_object_get(extra, "profile");
	json_t *status = json_object_get(extra, "profile_status");
	n->profile = json_is_object(profile) ? json_incref(profile) : NULL;
	n->profile_status = json_is_object(status) ? json_incref(status) : NULL;
	snprintf(n->profile_checked, sizeof(n->profile_checked), "%s",
	         jv_str(extra, "profile_checked", ""));
	n->fleet_removed = jv_int(extra, "fleet_removed", 0);
}

static int load_nodes(sqlite3 *db, const struct store_loader *l)
{
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(
	            db, "SELECT id, name, secret, state, generation, facts, extra FROM nodes", -1,
	            &s, NULL))
		return -EIO;
	while (sqlite3_step(s) == SQLITE_ROW) {
		struct node *n = xcalloc(1, sizeof(*n));
		n->id = sqlite3_column_int64(s, 0);
		n->name = col_str(s, 1);
		n->secret = col_str(s, 2);
		const char *shown = (const char *)sqlite3_column_text(s, 3);
		n->state = shown && strcmp(shown, "lost") == 0 ? NODE_LOST : NODE_READY;
		n->generation = sqlite3_column_int64(s, 4);
		n->facts = col_json(s, 5); /* applied by the loader's node callback */
		json_t *extra = col_json(s, 6);
		if (node_state_parse(jv_str(extra, "admin", ""), &n->admin) ||
		    n->admin == NODE_LOST) {
			/* schema v2 rows: the column held the only state there was */
			n->admin = shown && strcmp(shown, "cordoned") == 0 ? NODE_CORDONED
			                                                   : NODE_READY;
		}
		text_printf(n->admin_reason, sizeof(n->admin_reason), "%s",
		            jv_str(extra, "admin_reason", ""));
		n->admin_by_fault = json_is_true(json_object_get(extra, "admin_by_fault"));
		n->finding_seq = jv_int(extra, "finding_seq", 0);
		json_t *faults = json_object_get(extra, "faults");
		for (int i = 0; i < NODE_FAULT_NSCOPES; i++)
			n->faults[i] = json_integer_value(json_array_get(faults, (size_t)i));
		json_t *health = json_object_get(extra, "health");
		n->health = json_is_object(health) ? json_incref(health) : NULL;
		json_t *labels = json_object_get(extra, "labels");
		n->labels = json_is_object(labels) ? json_incref(labels) : json_object();
		const char *pool = jv_str(extra, "pool", NULL);
		n->pool = pool ? xstrdup(pool) : NULL;
		node_fleet_row(n, extra);
		text_printf(n->registered_from, sizeof(n->registered_from), "%s",
		            jv_str(extra, "registered_from", ""));
		n->reset = json_is_true(json_object_get(extra, "reset"));
		json_decref(extra);
		l->node(l->ctx, n);
	}
	sqlite3_finalize(s);
	return 0;
}

static void ranks_from_json(struct attempt *a, json_t *arr)
{
	a->nranks = (int)json_array_size(arr);
	a->ranks = xcalloc((size_t)a->nranks + 1, sizeof(*a->ranks));
	for (int i = 0; i < a->nranks; i++) {
		json_t *r = json_array_get(arr, (size_t)i);
		struct rank *k = &a->ranks[i];
		k->rank = (int)jv_int(r, "rank", i);
		k->node_id = jv_int(r, "node_id", 0);
		k->gpus = (uint64_t)jv_int(r, "gpus", 0);
		if (rank_state_parse(jv_str(r, "state", ""), &k->state))
			k->state = RANK_LOST;
		k->pid = (int)jv_int(r, "pid", 0);
		k->exit_code = (int)jv_int(r, "exit_code", 0);
		k->signal = (int)jv_int(r, "signal", 0);
		snprintf(k->error, sizeof(k->error), "%s", jv_str(r, "error", ""));
		snprintf(k->reason, sizeof(k->reason), "%s", jv_str(r, "reason", ""));
	}
}

static struct attempt *attempt_row(sqlite3_stmt *s)
{
	struct attempt *a = xcalloc(1, sizeof(*a));
	a->id = sqlite3_column_int64(s, 0);
	a->job_id = sqlite3_column_int64(s, 1);
	a->number = sqlite3_column_int(s, 2);
	if (job_state_parse((const char *)sqlite3_column_text(s, 3), &a->state))
		a->state = JOB_LOST;
	snprintf(a->master_addr, sizeof(a->master_addr), "%s", sqlite3_column_text(s, 5));
	a->master_port = sqlite3_column_int(s, 6);
	a->start_ms = sqlite3_column_int64(s, 7);
	a->end_ms = sqlite3_column_int64(s, 8);
	json_t *ranks = col_json(s, 9);
	ranks_from_json(a, ranks);
	json_decref(ranks);
	json_t *extra = col_json(s, 10);
	a->borrowed = jv_bool(extra, "borrowed", 0);
	a->preempted_for = jv_int(extra, "preempted_for", 0);
	a->checkpoint_ms = jv_int(extra, "checkpoint_ms", 0);
	a->head_port = (int)jv_int(extra, "head_port", 0);
	a->stop = attempt_stop_loaded(sqlite3_column_int(s, 4), jv_bool(extra, "preempted", 0),
	                              a->preempted_for, jv_bool(extra, "command_ended", 0));
	snprintf(a->exec_token, sizeof(a->exec_token), "%s", jv_str(extra, "exec_token", ""));
	json_decref(extra);
	const unsigned char *why = sqlite3_column_text(s, 11);
	text_printf(a->end_reason, sizeof(a->end_reason), "%s", why ? (const char *)why : "");
	return a;
}

static struct job *job_row(sqlite3_stmt *s)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->id = sqlite3_column_int64(s, 0);
	j->name = col_str(s, 1);
	j->queue = col_str(s, 2);
	j->priority = sqlite3_column_int(s, 3);
	j->gpus = sqlite3_column_int(s, 4);
	j->nodes = sqlite3_column_int(s, 5);
	j->command = col_json(s, 6);
	j->env = col_json(s, 7);
	if (!j->command)
		j->command = json_array();
	if (!j->env)
		j->env = json_object();
	j->cwd = col_str(s, 8);
	j->grace_ms = sqlite3_column_int64(s, 9);
	if (job_state_parse((const char *)sqlite3_column_text(s, 10), &j->state))
		j->state = JOB_LOST;
	j->submit_ms = sqlite3_column_int64(s, 11);
	j->start_ms = sqlite3_column_int64(s, 12);
	j->end_ms = sqlite3_column_int64(s, 13);
	j->has_exit = sqlite3_column_type(s, 14) != SQLITE_NULL;
	j->exit_code = sqlite3_column_int(s, 14);
	j->cancel_requested = sqlite3_column_int(s, 15);
	text_printf(j->reason, sizeof(j->reason), "%s", sqlite3_column_text(s, 16));
	json_t *extra = col_json(s, 17);
	j->team = xstrdup(jv_str(extra, "team", "default"));
	j->time_limit_ms = jv_int(extra, "time_limit_ms", 0);
	json_t *c = json_object_get(extra, "constraints");
	j->constraints = json_is_object(c) ? json_incref(c) : NULL;
	j->checkpointing = jv_bool(extra, "checkpointing", 0);
	j->session = jv_bool(extra, "session", 0);
	j->mpi = jv_bool(extra, "mpi", 0);
	json_t *task = json_object_get(extra, "task");
	j->task = json_is_object(task) ? json_incref(task) : NULL;
	j->cpu_millis = jv_int(extra, "cpu_millis", 0);
	j->memory_bytes = jv_int(extra, "memory_bytes", 0);
	json_t *exported = json_object_get(extra, "exported");
	j->exported = json_array_size(exported) ? json_incref(exported) : NULL;
	json_t *after = json_object_get(extra, "after");
	j->after = json_array_size(after) ? json_incref(after) : NULL;
	json_t *array = json_object_get(extra, "array");
	j->array_id = jv_int(array, "id", 0);
	j->array_index = jv_int(array, "index", 0);
	j->array_max_running = (int)jv_int(array, "max_running", 0);
	const char *head = jv_str(extra, "head", NULL), *worker = jv_str(extra, "worker", NULL);
	j->head = head ? xstrdup(head) : NULL;
	j->worker = head && worker ? xstrdup(worker) : NULL;
	j->head_timeout_ms = head ? jv_int(extra, "head_timeout_ms", 0) : 0;
	json_decref(extra);
	return j;
}

static int load_jobs(sqlite3 *db, const struct store_loader *l)
{
	sqlite3_stmt *js, *as;
	if (sqlite3_prepare_v2(db,
	                       "SELECT id, name, queue, priority, gpus, nodes, command, env, cwd, "
	                       "grace_ms, state, submit_ms, start_ms, end_ms, exit_code, "
	                       "cancel_requested, reason, extra FROM jobs ORDER BY id",
	                       -1, &js, NULL))
		return -EIO;
	if (sqlite3_prepare_v2(
	            db,
	            "SELECT id, job_id, number, state, ending, master_addr, master_port, "
	            "start_ms, end_ms, ranks, extra, end_reason FROM attempts "
	            "ORDER BY job_id, number",
	            -1, &as, NULL)) {
		sqlite3_finalize(js);
		return -EIO;
	}
	/* Both cursors walk in job order: a merge join, no per-job query. */
	int ar = sqlite3_step(as);
	while (sqlite3_step(js) == SQLITE_ROW) {
		struct job *j = job_row(js);
		while (ar == SQLITE_ROW && sqlite3_column_int64(as, 1) <= j->id) {
			if (sqlite3_column_int64(as, 1) == j->id) {
				j->attempts =
				        xrealloc(j->attempts,
				                 sizeof(*j->attempts) * (size_t)(j->nattempts + 1));
				j->attempts[j->nattempts++] = attempt_row(as);
			}
			ar = sqlite3_step(as);
		}
		l->job(l->ctx, j);
	}
	sqlite3_finalize(js);
	sqlite3_finalize(as);
	return 0;
}

/* Each row's JSON document to cb; sql selects (id, doc) or (exec, doc). */
static int load_docs(sqlite3 *db, const char *sql, void *ctx,
                     void (*cb)(void *ctx, int64_t id, const json_t *doc))
{
	sqlite3_stmt *s;
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL))
		return -EIO;
	int r;
	while ((r = sqlite3_step(s)) == SQLITE_ROW) {
		json_t *doc = json_loads((const char *)sqlite3_column_text(s, 1), 0, NULL);
		if (doc)
			cb(ctx, sqlite3_column_int64(s, 0), doc);
		else
			log_error("a record that is not JSON was skipped id=%lld",
			          (long long)sqlite3_column_int64(s, 0));
		json_decref(doc);
	}
	sqlite3_finalize(s);
	return r == SQLITE_DONE ? 0 : -EIO;
}

struct exec_cb {
	const struct store_loader *l;
};

static void exec_row(void *ctx, int64_t id, const json_t *doc)
{
	(void)id;
	const struct store_loader *l = ((struct exec_cb *)ctx)->l;
	l->flow_exec(l->ctx, doc);
}

static void run_row(void *ctx, int64_t exec_id, const json_t *doc)
{
	const struct store_loader *l = ((struct exec_cb *)ctx)->l;
	l->flow_run(l->ctx, exec_id, doc);
}

static void revision_row(void *ctx, int64_t id, const json_t *doc)
{
	const struct store_loader *l = ((struct exec_cb *)ctx)->l;
	l->fleet_revision(l->ctx, id, doc);
}

static int load_fleet(sqlite3 *db, const struct store_loader *l)
{
	if (!l->fleet_revision)
		return 0;
	struct exec_cb c = {l};
	return load_docs(db, "SELECT id, doc FROM fleet_revisions ORDER BY id", &c, revision_row);
}

static int load_flows(sqlite3 *db, const struct store_loader *l)
{
	if (!l->flow_exec || !l->flow_run)
		return 0;
	struct exec_cb c = {l};
	int rc = load_docs(db, "SELECT id, doc FROM flow_execs ORDER BY id", &c, exec_row);
	if (rc == 0)
		rc = load_docs(db, "SELECT exec_id, doc FROM flow_runs ORDER BY id", &c, run_row);
	return rc;
}

int store_load(struct store *st, const struct store_loader *l)
{
	sqlite3 *db = store_db(st);
	int rc = load_queues(db, l);
	if (rc == 0)
		rc = load_nodes(db, l);
	if (rc == 0)
		rc = load_jobs(db, l);
	if (rc == 0)
		rc = load_flows(db, l);
	if (rc == 0)
		rc = load_fleet(db, l);
	if (rc)
		log_error("loading state failed: %s", sqlite3_errmsg(db));
	return rc;
}
