#include "store/store.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "model/fields.h"
#include "store/checkpoint.h"

#define SCHEMA_VERSION 7

enum {
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_META_GET,
	ST_META_SET,
	ST_QUEUE_PUT,
	ST_TEAM_PUT,
	ST_NODE_PUT,
	ST_NODE_GENERATION,
	ST_EVENT_ADD,
	ST_FLOW_EXEC_PUT,
	ST_FLOW_RUN_PUT,
	ST_CACHE_PUT,
	ST_CACHE_GET,
	ST_FLEET_REV_PUT,
	ST_IDEM_PUT,
	ST_IDEM_GET,
	ST_IDEM_PRUNE,
	ST_N
};

static const char *sql_text[ST_N] = {
        [ST_BEGIN] = "BEGIN IMMEDIATE",
        [ST_COMMIT] = "COMMIT",
        [ST_ROLLBACK] = "ROLLBACK",
        [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
        [ST_META_SET] = "INSERT INTO meta(key, value) VALUES (?1, ?2) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [ST_QUEUE_PUT] = "INSERT INTO queues(name, priority, extra) VALUES (?1, ?2, ?3) "
                         "ON CONFLICT(name) DO UPDATE SET priority = excluded.priority, "
                         "extra = excluded.extra",
        [ST_TEAM_PUT] = "INSERT INTO teams(name, extra) VALUES (?1, ?2) "
                        "ON CONFLICT(name) DO UPDATE SET extra = excluded.extra",
        [ST_NODE_PUT] = "INSERT OR REPLACE INTO nodes(id, name, secret, state, generation, facts, "
                        "extra) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        [ST_NODE_GENERATION] = "UPDATE nodes SET generation = ?2 WHERE id = ?1",
        [ST_EVENT_ADD] = "INSERT INTO events(time_ms, kind, job_id, node_id, message) "
                         "VALUES (strftime('%s','now') * 1000, ?1, ?2, ?3, ?4)",
        [ST_FLOW_EXEC_PUT] = "INSERT OR REPLACE INTO flow_execs(id, doc) VALUES (?1, ?2)",
        [ST_FLOW_RUN_PUT] =
                "INSERT OR REPLACE INTO flow_runs(id, exec_id, doc) VALUES (?1, ?2, ?3)",
        [ST_CACHE_PUT] = "INSERT OR REPLACE INTO flow_cache(key, doc) VALUES (?1, ?2)",
        [ST_CACHE_GET] = "SELECT doc FROM flow_cache WHERE key = ?1",
        [ST_FLEET_REV_PUT] = "INSERT OR REPLACE INTO fleet_revisions(id, doc) VALUES (?1, ?2)",
        [ST_IDEM_PUT] = "INSERT OR REPLACE INTO idempotency(scope, key, digest, status, body, "
                        "ref, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        [ST_IDEM_GET] = "SELECT digest, status, body, ref, created_ms FROM idempotency "
                        "WHERE scope = ?1 AND key = ?2",
        [ST_IDEM_PRUNE] = "DELETE FROM idempotency WHERE created_ms < ?1",
};

static const char schema[] =
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS queues(name TEXT PRIMARY KEY, priority INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
        " secret TEXT NOT NULL, state TEXT NOT NULL, generation INTEGER NOT NULL,"
        " facts TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
        " queue TEXT NOT NULL, priority INTEGER NOT NULL, gpus INTEGER NOT NULL,"
        " nodes INTEGER NOT NULL, command TEXT NOT NULL, env TEXT NOT NULL, cwd TEXT,"
        " grace_ms INTEGER NOT NULL, state TEXT NOT NULL, submit_ms INTEGER NOT NULL,"
        " start_ms INTEGER, end_ms INTEGER, exit_code INTEGER,"
        " cancel_requested INTEGER NOT NULL, reason TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS attempts(id INTEGER PRIMARY KEY,"
        " job_id INTEGER NOT NULL REFERENCES jobs(id), number INTEGER NOT NULL,"
        " state TEXT NOT NULL, ending INTEGER NOT NULL, master_addr TEXT NOT NULL,"
        " master_port INTEGER NOT NULL, start_ms INTEGER, end_ms INTEGER, ranks TEXT NOT NULL);"
        "CREATE INDEX IF NOT EXISTS attempts_job ON attempts(job_id);"
        "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " time_ms INTEGER NOT NULL, kind TEXT NOT NULL, job_id INTEGER, node_id INTEGER,"
        " message TEXT NOT NULL);";

/* Schema migrations, applied in order to a database older than each step.
 * Version 2: the scheduler's fields (teams, quotas, constraints, labels) as
 * JSON in an `extra` column per table. Version 3: why each attempt ended
 * (or is being stopped to be requeued); older attempts read as "".
 * Version 4: workflow executions, their runs and the task cache, each row
 * a JSON document (flow/engine.h, server/flows.c). Version 5: the fleet's
 * revisions, each with its spec and its rollout, a JSON document
 * (server/fleet.c); a node's profile and profile status are in its extra.
 * Version 6: no index of jobs by state: nothing ever looked a job up by it
 * (the server keeps its state in memory and loads every job in id order),
 * and each change of a job's state moved its entry, a page or two more in
 * every commit. Version 7: the Idempotency-Keys of creates (server/idem.h),
 * each with its first answer, written in the transaction of what the
 * create made; pruned by their creation time. */
static const char *const migrations[] = {
        [2] = "ALTER TABLE jobs ADD COLUMN extra TEXT NOT NULL DEFAULT '{}';"
              "ALTER TABLE attempts ADD COLUMN extra TEXT NOT NULL DEFAULT '{}';"
              "ALTER TABLE nodes ADD COLUMN extra TEXT NOT NULL DEFAULT '{}';"
              "ALTER TABLE queues ADD COLUMN extra TEXT NOT NULL DEFAULT '{}';"
              "CREATE TABLE IF NOT EXISTS teams(name TEXT PRIMARY KEY, extra TEXT NOT NULL);",
        [3] = "ALTER TABLE attempts ADD COLUMN end_reason TEXT NOT NULL DEFAULT '';",
        [4] = "CREATE TABLE IF NOT EXISTS flow_execs(id INTEGER PRIMARY KEY, doc TEXT NOT NULL);"
              "CREATE TABLE IF NOT EXISTS flow_runs(id INTEGER PRIMARY KEY,"
              " exec_id INTEGER NOT NULL, doc TEXT NOT NULL);"
              "CREATE INDEX IF NOT EXISTS flow_runs_exec ON flow_runs(exec_id, id);"
              "CREATE TABLE IF NOT EXISTS flow_cache(key TEXT PRIMARY KEY, doc TEXT NOT NULL);",
        [5] = "CREATE TABLE IF NOT EXISTS fleet_revisions(id INTEGER PRIMARY KEY,"
              " doc TEXT NOT NULL);",
        [6] = "DROP INDEX IF EXISTS jobs_state;",
        [7] = "CREATE TABLE IF NOT EXISTS idempotency(scope TEXT NOT NULL, key TEXT NOT NULL,"
              " digest TEXT NOT NULL, status INTEGER NOT NULL, body TEXT,"
              " ref TEXT NOT NULL DEFAULT '', created_ms INTEGER NOT NULL,"
              " PRIMARY KEY(scope, key)) WITHOUT ROWID;"
              "CREATE INDEX IF NOT EXISTS idempotency_created ON idempotency(created_ms);",
};

/* The writes of jobs and attempts, made from their field tables
 * (model/fields.h) once, at open: each column is bound by its name, and
 * param[i] is the index of field i's parameter (0: not in this statement). */
enum { PUT_JOB, PUT_JOB_STATE, PUT_ATTEMPT, PUT_N };

struct put {
	sqlite3_stmt *s;
	int param[FIELDS_MAX];
	int extra; /* the extra column's parameter; 0: none */
};

/* A job's JSON values as last written (command, environment, exported
 * names: FIELD_MEMO), by the value's identity: a job's never change
 * (model.h) and an array's members share theirs (server/jobs.c), so a run
 * of members is dumped once, not once each (the exported environment is
 * kilobytes). The reference held keeps the identity from being reused. */
struct memo {
	json_t *value;
	char *text;
};

struct store {
	sqlite3 *db;
	struct checkpointer *ckpt; /* NULL: SQLite checkpoints in the commits */
	int opened;                /* store_open is done: failures are the caller's to say */
	sqlite3_stmt *st[ST_N];
	struct put put[PUT_N];
	struct memo memo[FIELDS_MAX]; /* by the field's index in fields_job */
};

static const char *memo_text(struct store *st, const struct field *f, const json_t *v)
{
	struct memo *m = &st->memo[f - fields_job];
	if (m->value != v) {
		json_decref(m->value);
		free(m->text);
		m->value = json_incref((json_t *)v);
		m->text = jv_dump(v);
	}
	return m->text;
}

static const char *memo_cb(void *ctx, const struct field *f, const json_t *v)
{
	return memo_text(ctx, f, v);
}

const char *store_error(struct store *st)
{
	return sqlite3_errmsg(st->db);
}

/* The code of the last failure: a full disk (SQLITE_FULL, or a write's
 * ENOSPC or EDQUOT underneath) is -ENOSPC or -EDQUOT, which base/err.h
 * answers with 507; anything else -EIO. */
static int code_of(struct store *st)
{
	int sys = sqlite3_system_errno(st->db);
	if (sys == EDQUOT)
		return -EDQUOT;
	return sqlite3_errcode(st->db) == SQLITE_FULL || sys == ENOSPC ? -ENOSPC : -EIO;
}

/* While the store opens, a failure stops the server: said here. Once
 * open, the caller decides (store_error() has the message): a flush that
 * fails on a full disk is retried every 50 ms, and a line each time here
 * would flood the log the caller rate-limits (server/state.c). */
static int fail(struct store *st, const char *what)
{
	if (st->opened)
		log_debug("sqlite %s failed: %s", what, sqlite3_errmsg(st->db));
	else
		log_error("sqlite %s failed: %s", what, sqlite3_errmsg(st->db));
	return code_of(st);
}

static int exec_sql(struct store *st, const char *sql)
{
	char *msg = NULL;
	if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		log_error("sqlite exec failed: %s", msg ? msg : "?");
		sqlite3_free(msg);
		return -EIO;
	}
	return 0;
}

/* The version the database is at: 1 for one created by the version-1
 * schema above (fresh, or written before versions were recorded). */
static int schema_version(struct store *st)
{
	sqlite3_stmt *s;
	int v = 1;
	if (sqlite3_prepare_v2(st->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1,
	                       &s, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(s) == SQLITE_ROW)
		v = (int)strtol((const char *)sqlite3_column_text(s, 0), NULL, 10);
	sqlite3_finalize(s);
	return v;
}

static int migrate(struct store *st)
{
	int v = schema_version(st);
	if (v < 1 || v > SCHEMA_VERSION) {
		log_error("database schema version %d is not one this anvil knows (1..%d)", v,
		          SCHEMA_VERSION);
		return ERR_INVALID;
	}
	int rc = v < SCHEMA_VERSION ? exec_sql(st, "BEGIN IMMEDIATE") : 0;
	for (int step = v + 1; rc == 0 && step <= SCHEMA_VERSION; step++)
		rc = exec_sql(st, migrations[step]);
	if (v < SCHEMA_VERSION) {
		int end = exec_sql(st, rc == 0 ? "COMMIT" : "ROLLBACK");
		if (rc == 0)
			rc = end;
	}
	if (v < SCHEMA_VERSION && rc == 0)
		log_info("database migrated from_version=%d to_version=%d", v, SCHEMA_VERSION);
	return rc;
}

/* A database about to be made is made 0600 here, whatever the umask:
 * SQLite would make it 0644 less the umask, and gives its -wal and -shm
 * files the database's own mode. An empty file is an empty database. */
static void create_private(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return;           /* there already, or SQLite will say why not */
	if (fchmod(fd, 0600) < 0) /* a umask may have taken the owner's bits too */
		log_warn("cannot set the mode of path=%s err=%s", path, strerror(errno));
	close(fd);
}

static int put_prepare(struct store *st, int kind);

int store_open(const char *path, int full_sync, struct store **out)
{
	struct store *st = xcalloc(1, sizeof(*st));
	int rc = 0;
	create_private(path);
	if (sqlite3_open_v2(path, &st->db,
	                    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
	                    NULL) != SQLITE_OK) {
		rc = fail(st, "open");
		goto out;
	}
	sqlite3_busy_timeout(st->db, 5000);
	if ((rc = exec_sql(st, "PRAGMA journal_mode=WAL")) ||
	    (rc = exec_sql(st,
	                   full_sync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL")) ||
	    (rc = exec_sql(st, "PRAGMA foreign_keys=ON")) || (rc = exec_sql(st, schema)) ||
	    (rc = migrate(st)))
		goto out;
	for (int i = 0; i < ST_N; i++) {
		if (sqlite3_prepare_v3(st->db, sql_text[i], -1, SQLITE_PREPARE_PERSISTENT,
		                       &st->st[i], NULL) != SQLITE_OK) {
			rc = fail(st, "prepare");
			goto out;
		}
	}
	for (int k = 0; k < PUT_N; k++)
		if ((rc = put_prepare(st, k)))
			goto out;
	char version[16];
	snprintf(version, sizeof(version), "%d", SCHEMA_VERSION);
	rc = store_meta_set(st, "schema_version", version);
	if (rc == 0)
		checkpointer_start(st->db, path, &st->ckpt); /* else SQLite's own, in the commits */
out:
	if (rc) {
		store_close(st);
		return rc;
	}
	st->opened = 1;
	*out = st;
	return 0;
}

void store_close(struct store *st)
{
	if (!st)
		return;
	checkpointer_stop(st->ckpt); /* first: the last connection's close checkpoints */
	for (int i = 0; i < ST_N; i++)
		sqlite3_finalize(st->st[i]);
	for (int k = 0; k < PUT_N; k++)
		sqlite3_finalize(st->put[k].s);
	sqlite3_close(st->db);
	for (int i = 0; i < FIELDS_MAX; i++) {
		json_decref(st->memo[i].value);
		free(st->memo[i].text);
	}
	free(st);
}

static int step_done(struct store *st, sqlite3_stmt *s, const char *what)
{
	int r = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return r == SQLITE_DONE ? 0 : fail(st, what);
}

int store_begin(struct store *st)
{
	return step_done(st, st->st[ST_BEGIN], "begin");
}

int store_commit(struct store *st)
{
	return step_done(st, st->st[ST_COMMIT], "commit");
}

void store_rollback(struct store *st)
{
	step_done(st, st->st[ST_ROLLBACK], "rollback");
}

int store_meta_get(struct store *st, const char *key, char **out)
{
	sqlite3_stmt *s = st->st[ST_META_GET];
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	int r = sqlite3_step(s);
	int rc = 0;
	if (r == SQLITE_ROW)
		*out = xstrdup((const char *)sqlite3_column_text(s, 0));
	else if (r == SQLITE_DONE)
		rc = ERR_NOTFOUND;
	else
		rc = fail(st, "meta get");
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return rc;
}

int store_meta_set(struct store *st, const char *key, const char *value)
{
	sqlite3_stmt *s = st->st[ST_META_SET];
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, value, -1, SQLITE_STATIC);
	return step_done(st, s, "meta set");
}

static void bind_json(sqlite3_stmt *s, int i, const json_t *v)
{
	char *text = v ? jv_dump(v) : NULL;
	sqlite3_bind_text(s, i, text ? text : "{}", -1, SQLITE_TRANSIENT);
	free(text);
}

int store_put_queue(struct store *st, const char *name, int priority, const json_t *extra)
{
	sqlite3_stmt *s = st->st[ST_QUEUE_PUT];
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, priority);
	bind_json(s, 3, extra);
	return step_done(st, s, "queue put");
}

int store_put_team(struct store *st, const char *name, const json_t *extra)
{
	sqlite3_stmt *s = st->st[ST_TEAM_PUT];
	sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
	bind_json(s, 2, extra);
	return step_done(st, s, "team put");
}

static json_t *node_facts(const struct node *n)
{
	if (n->facts)
		return json_incref(n->facts);
	json_t *gpus = json_array();
	for (int i = 0; i < n->ngpus; i++)
		json_array_append_new(gpus, json_pack("{s:i,s:s,s:s,s:I}", "index",
		                                      n->gpus[i].index, "uuid", n->gpus[i].uuid,
		                                      "model", n->gpus[i].model, "memory_bytes",
		                                      (json_int_t)n->gpus[i].memory_bytes));
	return json_pack("{s:s,s:s,s:s,s:s,s:i,s:I,s:o}", "hostname", n->hostname, "address",
	                 n->address, "agent_url", n->agent_url, "backend", n->backend, "cpus",
	                 n->cpus, "memory_bytes", (json_int_t)n->memory_bytes, "gpus", gpus);
}

int store_put_node(struct store *st, const struct node *n)
{
	sqlite3_stmt *s = st->st[ST_NODE_PUT];
	json_t *facts = node_facts(n);
	char *text = jv_dump(facts);
	json_decref(facts);
	sqlite3_bind_int64(s, 1, n->id);
	sqlite3_bind_text(s, 2, n->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, n->secret, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, node_shown_state(n), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 5, n->generation);
	sqlite3_bind_text(s, 6, text, -1, SQLITE_TRANSIENT);
	free(text);
	json_t *faults = json_array();
	for (int i = 0; i < NODE_FAULT_NSCOPES; i++)
		json_array_append_new(faults, json_integer(n->faults[i]));
	json_t *extra =
	        json_pack("{s:O?,s:s?,s:s,s:s,s:b,s:I,s:o,s:O?}", "labels", n->labels, "pool",
	                  n->pool, "admin", node_state_name(n->admin), "admin_reason",
	                  n->admin_reason, "admin_by_fault", n->admin_by_fault, "finding_seq",
	                  (json_int_t)n->finding_seq, "faults", faults, "health", n->health);
	if (n->profile) /* fleet members only: the rest keep their rows as they were */
		json_object_set(extra, "profile", n->profile);
	if (n->profile_status)
		json_object_set(extra, "profile_status", n->profile_status);
	if (n->profile_checked[0])
		json_object_set_new(extra, "profile_checked", json_string(n->profile_checked));
	if (n->fleet_removed)
		json_object_set_new(extra, "fleet_removed", json_integer(n->fleet_removed));
	if (n->registered_from[0])
		json_object_set_new(extra, "registered_from", json_string(n->registered_from));
	if (n->reset)
		json_object_set_new(extra, "reset", json_true());
	bind_json(s, 7, extra);
	json_decref(extra);
	return step_done(st, s, "node put");
}

int store_put_node_generation(struct store *st, const struct node *n)
{
	sqlite3_stmt *s = st->st[ST_NODE_GENERATION];
	sqlite3_bind_int64(s, 1, n->id);
	sqlite3_bind_int64(s, 2, n->generation);
	return step_done(st, s, "node generation put");
}

/* ---- jobs and attempts, by their field tables ---- */

/* The SQL of a put, from table t: every column of t (only the FIELD_CHANGES
 * ones, by id, for an update), each bound as :column, and the extra column
 * when with_extra. kind: PUT_JOB, PUT_JOB_STATE or PUT_ATTEMPT. */
static char *put_sql(const struct field *t, int kind)
{
	struct buf cols, vals, set;
	buf_init(&cols);
	buf_init(&vals);
	buf_init(&set);
	for (const struct field *f = t; f->name; f++) {
		if (!f->column || (kind == PUT_JOB_STATE && !(f->flags & FIELD_CHANGES)))
			continue;
		buf_printf(&cols, "%s%s", cols.len ? ", " : "", f->column);
		buf_printf(&vals, "%s:%s", vals.len ? ", " : "", f->column);
		if (strcmp(f->column, "id") != 0)
			buf_printf(&set, "%s%s = %s%s", set.len ? ", " : "", f->column,
			           kind == PUT_JOB_STATE ? ":" : "excluded.", f->column);
	}
	char *sql;
	if (kind == PUT_JOB_STATE)
		sql = xasprintf("UPDATE jobs SET %s WHERE id = :id", set.data);
	else if (kind == PUT_JOB)
		sql = xasprintf("INSERT OR REPLACE INTO jobs(%s, extra) VALUES (%s, :extra)",
		                cols.data, vals.data);
	else /* an upsert: a written attempt's row is updated in place, not deleted
	      * and inserted again with its index entry (an attempt is written at
	      * each of its job's transitions) */
		sql = xasprintf("INSERT INTO attempts(%s, extra) VALUES (%s, :extra) "
		                "ON CONFLICT(id) DO UPDATE SET %s, extra = excluded.extra",
		                cols.data, vals.data, set.data);
	buf_cleanup(&cols);
	buf_cleanup(&vals);
	buf_cleanup(&set);
	return sql;
}

static int put_prepare(struct store *st, int kind)
{
	const struct field *t = kind == PUT_ATTEMPT ? fields_attempt : fields_job;
	struct put *p = &st->put[kind];
	char *sql = put_sql(t, kind);
	int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &p->s, NULL);
	free(sql);
	if (rc != SQLITE_OK)
		return fail(st, "prepare");
	for (int i = 0; t[i].name; i++) {
		assert(i < FIELDS_MAX);
		char name[64];
		snprintf(name, sizeof(name), ":%s", t[i].column ? t[i].column : "");
		p->param[i] = t[i].column ? sqlite3_bind_parameter_index(p->s, name) : 0;
	}
	p->extra = sqlite3_bind_parameter_index(p->s, ":extra");
	return 0;
}

/* A JSON scalar (a codec's value) as the column's value. */
static void bind_json_value(sqlite3_stmt *s, int i, const json_t *v)
{
	char *text;
	switch (v ? json_typeof(v) : JSON_NULL) {
	case JSON_STRING:
		sqlite3_bind_text(s, i, json_string_value(v), -1, SQLITE_TRANSIENT);
		break;
	case JSON_INTEGER: sqlite3_bind_int64(s, i, json_integer_value(v)); break;
	case JSON_TRUE:
	case JSON_FALSE: sqlite3_bind_int(s, i, json_is_true(v)); break;
	case JSON_NULL: sqlite3_bind_null(s, i); break;
	default: text = jv_dump(v); sqlite3_bind_text(s, i, text, -1, free);
	}
}

static void bind_field(struct store *st, sqlite3_stmt *s, int i, const struct field *f,
                       const void *rec)
{
	const char *base = rec;
	if (f->codec && f->codec->text) {
		sqlite3_bind_text(s, i, f->codec->text(rec), -1, free);
	} else if (f->codec && f->codec->encode) {
		json_t *v = f->codec->encode(rec);
		bind_json_value(s, i, v);
		json_decref(v);
	} else if ((f->flags & FIELD_SPARSE) && fields_unset(f, rec)) {
		sqlite3_bind_null(s, i); /* 0 is no time yet: NULL */
	} else if (f->kind == FIELD_INT || f->kind == FIELD_BOOL) {
		sqlite3_bind_int(s, i, *(const int *)(const void *)(base + f->offset));
	} else if (f->kind == FIELD_INT64) {
		sqlite3_bind_int64(s, i, *(const int64_t *)(const void *)(base + f->offset));
	} else if (f->kind == FIELD_STR) {
		const char *v = *(char *const *)(const void *)(base + f->offset);
		if (v)
			sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(s, i);
	} else if (f->kind == FIELD_TEXT) {
		sqlite3_bind_text(s, i, base + f->offset, -1, SQLITE_STATIC);
	} else if (f->kind == FIELD_STATE) {
		const enum job_state *v = (const void *)(base + f->offset);
		sqlite3_bind_text(s, i, job_state_name(*v), -1, SQLITE_STATIC);
	} else if (f->kind == FIELD_JSON && (f->flags & FIELD_MEMO)) {
		json_t *v = *(json_t *const *)(const void *)(base + f->offset);
		sqlite3_bind_text(s, i, memo_text(st, f, v), -1, SQLITE_STATIC);
	} else if (f->kind == FIELD_JSON) {
		bind_json_value(s, i, *(json_t *const *)(const void *)(base + f->offset));
	} else {
		sqlite3_bind_null(s, i);
	}
}

/* Binds rec's columns (and extra) to put p and runs it. */
static int put_run(struct store *st, int kind, const void *rec, const char *what)
{
	const struct field *t = kind == PUT_ATTEMPT ? fields_attempt : fields_job;
	struct put *p = &st->put[kind];
	for (int i = 0; t[i].name; i++)
		if (p->param[i])
			bind_field(st, p->s, p->param[i], &t[i], rec);
	if (p->extra)
		sqlite3_bind_text(
		        p->s, p->extra,
		        fields_extra_text(t, rec, kind == PUT_ATTEMPT ? NULL : memo_cb, st), -1,
		        free);
	return step_done(st, p->s, what);
}

int store_put_job(struct store *st, const struct job *j)
{
	int rc = put_run(st, PUT_JOB, j, "job put");
	for (int i = 0; rc == 0 && i < j->nattempts; i++)
		rc = put_run(st, PUT_ATTEMPT, j->attempts[i], "attempt put");
	return rc;
}

int store_put_job_state(struct store *st, const struct job *j)
{
	int rc = put_run(st, PUT_JOB_STATE, j, "job state put");
	if (rc == 0 && sqlite3_changes(st->db) == 0)
		return store_put_job(st, j); /* not written yet: all of it */
	for (int i = 0; rc == 0 && i < j->nattempts; i++)
		rc = put_run(st, PUT_ATTEMPT, j->attempts[i], "attempt put");
	return rc;
}

int store_add_event(struct store *st, const char *kind, int64_t job_id, int64_t node_id,
                    const char *message)
{
	sqlite3_stmt *s = st->st[ST_EVENT_ADD];
	sqlite3_bind_text(s, 1, kind, -1, SQLITE_STATIC);
	if (job_id > 0)
		sqlite3_bind_int64(s, 2, job_id);
	if (node_id > 0)
		sqlite3_bind_int64(s, 3, node_id);
	sqlite3_bind_text(s, 4, message, -1, SQLITE_STATIC);
	return step_done(st, s, "event add");
}

int store_put_flow_exec(struct store *st, int64_t id, const json_t *doc)
{
	sqlite3_stmt *s = st->st[ST_FLOW_EXEC_PUT];
	sqlite3_bind_int64(s, 1, id);
	bind_json(s, 2, doc);
	return step_done(st, s, "workflow put");
}

int store_put_flow_run(struct store *st, int64_t id, int64_t exec_id, const json_t *doc)
{
	sqlite3_stmt *s = st->st[ST_FLOW_RUN_PUT];
	sqlite3_bind_int64(s, 1, id);
	sqlite3_bind_int64(s, 2, exec_id);
	bind_json(s, 3, doc);
	return step_done(st, s, "workflow run put");
}

int store_put_cache(struct store *st, const char *key, const json_t *doc)
{
	sqlite3_stmt *s = st->st[ST_CACHE_PUT];
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	bind_json(s, 2, doc);
	return step_done(st, s, "cache put");
}

int store_put_fleet_revision(struct store *st, int64_t id, const json_t *doc)
{
	sqlite3_stmt *s = st->st[ST_FLEET_REV_PUT];
	sqlite3_bind_int64(s, 1, id);
	bind_json(s, 2, doc);
	return step_done(st, s, "fleet revision put");
}

int store_put_idem(struct store *st, const struct store_idem *r)
{
	sqlite3_stmt *s = st->st[ST_IDEM_PUT];
	sqlite3_bind_text(s, 1, r->scope, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, r->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, r->digest, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 4, r->status);
	if (r->body)
		sqlite3_bind_text(s, 5, r->body, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, 5);
	sqlite3_bind_text(s, 6, r->ref, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 7, r->created_ms);
	return step_done(st, s, "idempotency key put");
}

/* Copies a text column into a fixed field; 0, or -1 when it does not fit
 * (a row this code did not write). */
static int col_copy(sqlite3_stmt *s, int i, char *out, size_t len)
{
	const char *t = (const char *)sqlite3_column_text(s, i);
	return snprintf(out, len, "%s", t ? t : "") < (int)len ? 0 : -1;
}

int store_get_idem(struct store *st, const char *scope, const char *key, struct store_idem *out)
{
	sqlite3_stmt *s = st->st[ST_IDEM_GET];
	sqlite3_bind_text(s, 1, scope, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, key, -1, SQLITE_STATIC);
	int r = sqlite3_step(s), rc = 0;
	struct store_idem got = {0};
	if (r == SQLITE_ROW) {
		if (col_copy(s, 0, got.digest, sizeof(got.digest)) ||
		    col_copy(s, 3, got.ref, sizeof(got.ref)) ||
		    snprintf(got.scope, sizeof(got.scope), "%s", scope) >= (int)sizeof(got.scope) ||
		    snprintf(got.key, sizeof(got.key), "%s", key) >= (int)sizeof(got.key)) {
			log_error("idempotency key row malformed key=%.64s", key);
			rc = -EIO;
		}
		got.status = sqlite3_column_int(s, 1);
		const char *body = (const char *)sqlite3_column_text(s, 2);
		got.body = body && rc == 0 ? xstrdup(body) : NULL;
		got.created_ms = sqlite3_column_int64(s, 4);
	} else {
		rc = r == SQLITE_DONE ? ERR_NOTFOUND : fail(st, "idempotency key get");
	}
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc == 0)
		*out = got;
	return rc;
}

int store_prune_idem(struct store *st, int64_t before_ms, int64_t *removed)
{
	sqlite3_stmt *s = st->st[ST_IDEM_PRUNE];
	sqlite3_bind_int64(s, 1, before_ms);
	int rc = step_done(st, s, "idempotency key prune");
	if (rc == 0 && removed)
		*removed = sqlite3_changes(st->db);
	return rc;
}

json_t *store_get_cache(struct store *st, const char *key)
{
	sqlite3_stmt *s = st->st[ST_CACHE_GET];
	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	json_t *doc = NULL;
	if (sqlite3_step(s) == SQLITE_ROW)
		doc = json_loads((const char *)sqlite3_column_text(s, 0), 0, NULL);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return doc;
}

sqlite3 *store_db(struct store *st);
sqlite3 *store_db(struct store *st)
{
	return st->db;
}

json_t *store_events(struct store *st, int limit, int64_t job_id)
{
	sqlite3_stmt *s;
	const char *sql =
	        job_id > 0 ? "SELECT id, time_ms, kind, job_id, node_id, message FROM events "
	                     "WHERE job_id = ?2 ORDER BY id DESC LIMIT ?1"
	                   : "SELECT id, time_ms, kind, job_id, node_id, message FROM events "
	                     "ORDER BY id DESC LIMIT ?1";
	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
		return NULL;
	sqlite3_bind_int(s, 1, limit);
	if (job_id > 0)
		sqlite3_bind_int64(s, 2, job_id);
	json_t *arr = json_array();
	while (sqlite3_step(s) == SQLITE_ROW) {
		json_t *e =
		        json_pack("{s:I,s:I,s:s,s:s}", "id", (json_int_t)sqlite3_column_int64(s, 0),
		                  "time_ms", (json_int_t)sqlite3_column_int64(s, 1), "kind",
		                  (const char *)sqlite3_column_text(s, 2), "message",
		                  (const char *)sqlite3_column_text(s, 5));
		json_object_set_new(e, "job_id",
		                    sqlite3_column_type(s, 3) == SQLITE_NULL
		                            ? json_null()
		                            : json_integer(sqlite3_column_int64(s, 3)));
		json_object_set_new(e, "node_id",
		                    sqlite3_column_type(s, 4) == SQLITE_NULL
		                            ? json_null()
		                            : json_integer(sqlite3_column_int64(s, 4)));
		json_array_append_new(arr, e);
	}
	sqlite3_finalize(s);
	return arr;
}
