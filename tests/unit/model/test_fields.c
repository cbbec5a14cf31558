/* The job's and the attempt's field tables (model/fields.h): that they
 * agree with the submit record and the database's columns, and that a job
 * built from a body comes back from the store the same, shown the same. */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "model/fields.h"
#include "proto/wire.h"
#include "store/store.h"

/* The client-settable fields are the submit record's, both ways, apart
 * from the table's own (FIELD_MORE), which the submit record must not
 * have: the client builds its body from that record, so the two cannot
 * drift. */
TEST(client_fields_are_the_submit_records)
{
	for (const struct wire_field *w = wire_submit.fields; w->name; w++) {
		const struct field *f = fields_find(fields_job, w->name);
		if (!f || !(f->flags & FIELD_CLIENT) || f->kind == FIELD_MORE)
			FAIL_AT("submit field '%s' is not a client field of fields_job", w->name);
		CHECK(fields_client(w->name) != NULL);
	}
	for (const struct field *f = fields_job; f->name; f++) {
		int in_wire = wire_field(&wire_submit, f->name) != NULL;
		if ((f->flags & FIELD_CLIENT) && f->kind != FIELD_MORE && !in_wire)
			FAIL_AT("client field '%s' is not in the submit record", f->name);
		if (f->kind == FIELD_MORE && in_wire)
			FAIL_AT("field '%s' is described twice: here and in wire_submit", f->name);
		if (f->kind == FIELD_MORE && (f->flags & FIELD_CLIENT)) {
			const struct jv_field *c = fields_client(f->name);
			CHECK(c != NULL);
			CHECK_INT(c->type, f->type);
			CHECK_INT(c->max, f->max);
		}
		if (!(f->flags & FIELD_CLIENT))
			CHECK(fields_client(f->name) == NULL);
	}
}

/* Names, columns and shown names are each used once in a table, and a
 * stored field is in a column or in extra, not both. */
static void check_unique(const struct field *t)
{
	for (const struct field *f = t; f->name; f++) {
		CHECK(f - t < FIELDS_MAX);
		CHECK(!(f->column && (f->flags & FIELD_EXTRA)));
		for (const struct field *g = t; g < f; g++) {
			if (strcmp(f->name, g->name) == 0)
				FAIL_AT("field '%s' twice", f->name);
			if (f->column && g->column && strcmp(f->column, g->column) == 0)
				FAIL_AT("column '%s' twice", f->column);
			if ((f->flags & g->flags & FIELD_SHOWN) &&
			    strcmp(fields_shown_name(f), fields_shown_name(g)) == 0)
				FAIL_AT("shown key '%s' twice", fields_shown_name(f));
		}
	}
}

TEST(names_and_columns_are_unique)
{
	check_unique(fields_job);
	check_unique(fields_attempt);
}

/* Whether table (in the database at path) has a column called name. */
static int has_column(const char *path, const char *table, const char *name)
{
	sqlite3 *db;
	sqlite3_stmt *s;
	char *sql =
	        xasprintf("SELECT count(*) FROM pragma_table_info('%s') WHERE name = ?1", table);
	CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
	CHECK_INT(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	CHECK_INT(sqlite3_step(s), SQLITE_ROW);
	int n = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db);
	free(sql);
	return n;
}

TEST(every_column_is_one_of_the_schema)
{
	char dir[] = "/tmp/anvil-fields-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char *path = xasprintf("%s/db", dir);
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	store_close(st);
	for (const struct field *f = fields_job; f->name; f++)
		if (f->column && !has_column(path, "jobs", f->column))
			FAIL_AT("jobs has no column '%s'", f->column);
	for (const struct field *f = fields_attempt; f->name; f++)
		if (f->column && !has_column(path, "attempts", f->column))
			FAIL_AT("attempts has no column '%s'", f->column);
	free(path);
	rm_rf(dir);
}

static void on_job(void *ctx, struct job *j)
{
	*(struct job **)ctx = j;
}

/* A body with every field a client may set that goes together (no head
 * with mpi), as the server would take it. */
static const char body_text[] =
        "{\"command\": [\"python3\", \"train.py\"], \"gpus\": 2, \"nodes\": 1, \"queue\": \"q\","
        " \"team\": \"vision\", \"priority\": 3, \"name\": \"train\", \"env\": {\"A\": \"1\","
        " \"B\": \"2\"}, \"exported\": [\"B\"], \"cwd\": \"/data\", \"grace_ms\": 3000,"
        " \"time_limit_ms\": 60000, \"gpu_type\": \"h200\", \"pool\": \"batch\","
        " \"selectors\": {\"disk\": \"nvme\"}, \"checkpointing\": true, \"cpus\": 0.5,"
        " \"memory_bytes\": 8388608, \"after\": [{\"job\": 1}], \"head\": \"ray start\","
        " \"worker\": \"ray join\", \"session\": true"
#ifdef ANVIL_FIELD_PROBE
        ", \"probe\": \"seen\""
#endif
        "}";

static struct job *job_of_body(void)
{
	json_t *body = json_loads(body_text, 0, NULL);
	CHECK(body != NULL);
	char err[256] = "";
	if (jv_check(body, fields_body(), err, sizeof(err)))
		FAIL_AT("body: %s", err);
	struct job *j = xcalloc(1, sizeof(*j));
	j->id = 2;
	fields_job_from_body(j, body, NULL);
	json_decref(body);
	j->state = JOB_PENDING;
	j->submit_ms = 1000;
	text_printf(j->reason, sizeof(j->reason), "waiting to be scheduled");
	return j;
}

TEST(a_job_from_a_body_round_trips_through_the_store)
{
	struct job *j = job_of_body();
	CHECK_INT(j->cpu_millis, 500);
	CHECK_INT(j->head_timeout_ms, 300000);
	CHECK_STR(jv_str(j->constraints, "gpu_type", ""), "h200");
	CHECK_STR(jv_str(json_array_get(j->after, 0), "when", ""), "ok");
	char dir[] = "/tmp/anvil-fields-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char *path = xasprintf("%s/db", dir);
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	CHECK_INT(store_put_job(st, j), 0);
	store_close(st);
	struct job *back = NULL;
	CHECK_INT(store_open(path, 0, &st), 0);
	struct store_loader l = {.ctx = &back, .job = on_job};
	CHECK_INT(store_load(st, &l), 0);
	store_close(st);
	CHECK(back != NULL);
	json_t *want = json_object(), *got = json_object();
	fields_show_all(fields_job, j, want);
	fields_show_all(fields_job, back, got);
	char *w = jv_dump(want), *g = jv_dump(got);
	CHECK_STR(g, w);
	CHECK_CONTAINS(w, "\"exported\":[\"B\"]");
	CHECK(strstr(w, "\"B\":\"2\"") == NULL); /* an exported value is not shown */
#ifdef ANVIL_FIELD_PROBE
	CHECK_CONTAINS(g, "\"probe\":\"seen\"");
#endif
	free(w);
	free(g);
	json_decref(want);
	json_decref(got);
	job_free(j);
	job_free(back);
	free(path);
	rm_rf(dir);
}

static void put(void *ctx, const char *name, json_t *v)
{
	json_object_set_new(ctx, name, v);
}

/* What the desired entry gets of the job: its FIELD_DESIRED fields that
 * are set; the limits and flags only when set. */
TEST(desired_fields_are_the_marked_ones)
{
	struct job *j = job_of_body();
	json_t *d = json_object();
	fields_desired(j, put, d);
	char *text = jv_dump(d);
	CHECK_STR(text, "{\"command\":[\"python3\",\"train.py\"],\"cwd\":\"/data\","
	                "\"grace_ms\":3000,\"cpu_millis\":500,\"memory_bytes\":8388608,"
	                "\"session\":true"
#ifdef ANVIL_FIELD_PROBE
	                ",\"probe\":\"seen\""
#endif
	                "}");
	free(text);
	json_decref(d);
	job_free(j);
	j = xcalloc(1, sizeof(*j));
	d = json_object();
	fields_desired(j, put, d);
	text = jv_dump(d);
	CHECK_STR(text, "{\"command\":null,\"cwd\":null,\"grace_ms\":0}");
	free(text);
	json_decref(d);
	job_free(j);
}

TEST_MAIN()
