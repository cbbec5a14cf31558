/* load.c - rebuilding the in-memory records from the database at start-up. */
#include <assert.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "model/fields.h"
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

/* ---- jobs and attempts, by their field tables (model/fields.h) ---- */

/* A select of every column of table t and its extra, and where each field's
 * column is in a row, found by its name (-1: not a column). */
struct select {
	sqlite3_stmt *s;
	const struct field *t;
	int col[FIELDS_MAX];
	int extra;
};

static int select_open(sqlite3 *db, const struct field *t, const char *table, const char *order,
                       struct select *out)
{
	struct buf sql;
	buf_init(&sql);
	buf_adds(&sql, "SELECT ");
	for (const struct field *f = t; f->name; f++)
		if (f->column)
			buf_printf(&sql, "%s, ", f->column);
	buf_printf(&sql, "extra FROM %s ORDER BY %s", table, order);
	int rc = sqlite3_prepare_v2(db, sql.data, -1, &out->s, NULL);
	buf_cleanup(&sql);
	if (rc)
		return -EIO;
	out->t = t;
	out->extra = -1;
	for (int i = 0; t[i].name; i++)
		out->col[i] = -1;
	for (int c = 0; c < sqlite3_column_count(out->s); c++) {
		const char *name = sqlite3_column_name(out->s, c);
		for (int i = 0; t[i].name; i++)
			if (t[i].column && strcmp(t[i].column, name) == 0)
				out->col[i] = c;
		if (strcmp(name, "extra") == 0)
			out->extra = c;
	}
	return 0;
}

/* Column c as the JSON value a codec decodes: text as a string (or parsed,
 * for a column its codec stores as JSON text), an integer, or NULL. */
static json_t *col_value(sqlite3_stmt *s, int c, const struct field *f)
{
	switch (sqlite3_column_type(s, c)) {
	case SQLITE_INTEGER: return json_integer(sqlite3_column_int64(s, c));
	case SQLITE_NULL: return NULL;
	default: break;
	}
	const char *t = (const char *)sqlite3_column_text(s, c);
	if (f->kind == FIELD_JSON || (f->codec && f->codec->text))
		return t ? json_loads(t, 0, NULL) : NULL;
	return t ? json_string(t) : NULL;
}

static void col_decode(sqlite3_stmt *s, int c, const struct field *f, void *rec)
{
	char *base = rec;
	int null = sqlite3_column_type(s, c) == SQLITE_NULL;
	const unsigned char *t;
	if (f->codec && f->codec->decode) {
		json_t *v = col_value(s, c, f);
		fields_decode(f, rec, v);
		json_decref(v);
	} else if (f->kind == FIELD_INT || f->kind == FIELD_BOOL) {
		*(int *)(void *)(base + f->offset) = null ? (int)f->dflt : sqlite3_column_int(s, c);
	} else if (f->kind == FIELD_INT64) {
		*(int64_t *)(void *)(base + f->offset) =
		        null ? f->dflt : sqlite3_column_int64(s, c);
	} else if (f->kind == FIELD_TEXT) {
		t = sqlite3_column_text(s, c);
		text_printf(base + f->offset, f->size, "%s", t ? (const char *)t : "");
	} else if (f->kind == FIELD_STR) {
		t = sqlite3_column_text(s, c);
		*(char **)(void *)(base + f->offset) =
		        t ? xstrdup((const char *)t) : (f->dflt_str ? xstrdup(f->dflt_str) : NULL);
	} else {
		json_t *v = col_value(s, c, f);
		fields_decode(f, rec, v);
		json_decref(v);
	}
}

/* The current row of sel into rec: its columns by name, then its extra. */
static void select_row(const struct select *sel, void *rec)
{
	for (int i = 0; sel->t[i].name; i++)
		if (sel->col[i] >= 0)
			col_decode(sel->s, sel->col[i], &sel->t[i], rec);
	json_t *extra = sel->extra >= 0 ? col_json(sel->s, sel->extra) : NULL;
	fields_extra_decode(sel->t, rec, extra);
	json_decref(extra);
}

static int load_jobs(sqlite3 *db, const struct store_loader *l)
{
	struct select js, as;
	if (select_open(db, fields_job, "jobs", "id", &js))
		return -EIO;
	if (select_open(db, fields_attempt, "attempts", "job_id, number", &as)) {
		sqlite3_finalize(js.s);
		return -EIO;
	}
	int job_id = -1; /* the attempt's job_id column */
	for (int i = 0; fields_attempt[i].name; i++)
		if (strcmp(fields_attempt[i].name, "job_id") == 0)
			job_id = as.col[i];
	assert(job_id >= 0);
	/* Both cursors walk in job order: a merge join, no per-job query. */
	int ar = sqlite3_step(as.s);
	while (sqlite3_step(js.s) == SQLITE_ROW) {
		struct job *j = xcalloc(1, sizeof(*j));
		select_row(&js, j);
		while (ar == SQLITE_ROW && sqlite3_column_int64(as.s, job_id) <= j->id) {
			if (sqlite3_column_int64(as.s, job_id) == j->id) {
				struct attempt *a = xcalloc(1, sizeof(*a));
				select_row(&as, a);
				j->attempts =
				        xrealloc(j->attempts,
				                 sizeof(*j->attempts) * (size_t)(j->nattempts + 1));
				j->attempts[j->nattempts++] = a;
			}
			ar = sqlite3_step(as.s);
		}
		l->job(l->ctx, j);
	}
	sqlite3_finalize(js.s);
	sqlite3_finalize(as.s);
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
