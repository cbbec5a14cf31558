#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "sql_int.h"
#include "store/store.h"

struct loaded {
	int queues;
	struct node *node;
	struct job *job;
};

static void on_queue(void *ctx, const char *name, int priority, const json_t *extra)
{
	struct loaded *l = ctx;
	(void)name;
	(void)priority;
	if (jv_int(extra, "weight", 0) == 3)
		l->queues++;
}

static void on_node(void *ctx, struct node *n)
{
	((struct loaded *)ctx)->node = n;
}

static void on_job(void *ctx, struct job *j)
{
	((struct loaded *)ctx)->job = j;
}

static struct job *sample_job(void)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->id = 1;
	j->name = xstrdup("train");
	j->queue = xstrdup("default");
	j->priority = 5;
	j->gpus = 4;
	j->nodes = 2;
	j->command = json_pack("[s,s]", "python3", "train.py");
	j->env = json_pack("{s:s,s:s}", "A", "b", "LR", "3e-4");
	j->exported = json_pack("[s]", "LR");
	j->grace_ms = 3000;
	j->team = xstrdup("vision");
	j->time_limit_ms = 60000;
	j->constraints = json_pack("{s:s}", "gpu_type", "h200");
	j->checkpointing = 1;
	j->state = JOB_RUNNING;
	j->submit_ms = 1000;
	j->start_ms = 2000;
	struct attempt *a = xcalloc(1, sizeof(*a));
	a->id = 7;
	a->job_id = 1;
	a->number = 1;
	a->state = JOB_RUNNING;
	a->borrowed = 1;
	snprintf(a->end_reason, sizeof(a->end_reason), "reclaimed by team a for job 9");
	snprintf(a->master_addr, sizeof(a->master_addr), "10.0.0.1");
	a->master_port = 20007;
	a->nranks = 2;
	a->ranks = xcalloc(2, sizeof(*a->ranks));
	for (int r = 0; r < 2; r++) {
		a->ranks[r].rank = r;
		a->ranks[r].node_id = r + 1;
		a->ranks[r].gpus = 0xf;
		a->ranks[r].state = RANK_RUNNING;
		a->ranks[r].pid = 100 + r;
	}
	j->attempts = xcalloc(1, sizeof(*j->attempts));
	j->attempts[0] = a;
	j->nattempts = 1;
	return j;
}

/* A database in a temporary directory of its own. */
struct tmpdb {
	char dir[32];
	char *path;
};

static void tmpdb_make(struct tmpdb *d)
{
	snprintf(d->dir, sizeof(d->dir), "/tmp/anvil-store-XXXXXX");
	CHECK(mkdtemp(d->dir) != NULL);
	d->path = xasprintf("%s/db", d->dir);
}

static void tmpdb_drop(struct tmpdb *d)
{
	free(d->path);
	rm_rf(d->dir);
}

/* The loader most tests use: queues counted, the last node and job kept. */
static struct store_loader loader_of(struct loaded *l)
{
	return (struct store_loader){.ctx = l, .queue = on_queue, .node = on_node, .job = on_job};
}

TEST(job_round_trips_through_sqlite)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	struct job *j = sample_job();
	CHECK_INT(store_begin(st), 0);
	json_t *extra = json_pack("{s:i}", "weight", 3);
	CHECK_INT(store_put_queue(st, "default", 0, extra), 0);
	json_decref(extra);
	CHECK_INT(store_put_job(st, j), 0);
	CHECK_INT(store_add_event(st, "job.submitted", 1, 0, "hello"), 0);
	CHECK_INT(store_commit(st), 0);
	store_close(st);

	CHECK_INT(store_open(path, 1, &st), 0);
	struct loaded l = {0};
	struct store_loader ld = loader_of(&l);
	CHECK_INT(store_load(st, &ld), 0);
	CHECK_INT(l.queues, 1);
	CHECK(l.job != NULL);
	CHECK_STR(l.job->name, "train");
	CHECK_INT(l.job->state, JOB_RUNNING);
	CHECK_INT(l.job->nattempts, 1);
	CHECK_INT(l.job->attempts[0]->master_port, 20007);
	CHECK_INT(l.job->attempts[0]->nranks, 2);
	CHECK_INT(l.job->attempts[0]->ranks[1].gpus, 0xf);
	CHECK_INT(l.job->attempts[0]->ranks[1].pid, 101);
	CHECK_INT(l.job->attempts[0]->borrowed, 1);
	CHECK_STR(l.job->attempts[0]->end_reason, "reclaimed by team a for job 9");
	CHECK_STR(json_string_value(json_array_get(l.job->command, 1)), "train.py");
	CHECK_INT(l.job->has_exit, 0);
	CHECK_STR(l.job->team, "vision");
	CHECK_INT(l.job->time_limit_ms, 60000);
	CHECK_INT(l.job->checkpointing, 1);
	CHECK_STR(json_string_value(json_object_get(l.job->constraints, "gpu_type")), "h200");
	CHECK_STR(jv_str(l.job->env, "LR", ""), "3e-4");
	CHECK_INT(json_array_size(l.job->exported), 1);
	CHECK_STR(json_string_value(json_array_get(l.job->exported, 0)), "LR");
	job_free(l.job);
	job_free(j);
	store_close(st);
	tmpdb_drop(&d);
}

/* Every field of an attempt's two JSON columns (formatted by the store,
 * read back by load.c through jansson) survives, free text with quotes,
 * backslashes, newlines and non-ASCII letters included, and text that is
 * not UTF-8 (JSON cannot hold it) becomes "" without losing the rank. */
TEST(attempt_columns_round_trip_every_field)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	struct job *j = sample_job();
	struct attempt *a = j->attempts[0];
	a->stop = ATTEMPT_STOP_PREEMPTED;
	a->preempted_for = 42;
	a->checkpoint_ms = 1790000000123LL;
	a->head_port = 41234;
	snprintf(a->exec_token, sizeof(a->exec_token), "%064d", 7);
	a->ranks[0].state = RANK_EXITED;
	a->ranks[0].exit_code = 3;
	a->ranks[0].signal = 9;
	a->ranks[0].gpus = 0x8000000000000001ull;
	snprintf(a->ranks[0].error, sizeof(a->ranks[0].error), "say \"no\"\\\n\tcaf\u00e9");
	snprintf(a->ranks[0].reason, sizeof(a->ranks[0].reason), "the head exited: \"%s\"", "x");
	snprintf(a->ranks[1].error, sizeof(a->ranks[1].error), "bad \xff byte");
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_job(st, j), 0);
	CHECK_INT(store_commit(st), 0);
	store_close(st);

	CHECK_INT(store_open(path, 0, &st), 0);
	struct loaded l = {0};
	struct store_loader ld = loader_of(&l);
	CHECK_INT(store_load(st, &ld), 0);
	CHECK(l.job != NULL);
	struct attempt *b = l.job->attempts[0];
	CHECK_INT(b->stop, ATTEMPT_STOP_PREEMPTED);
	CHECK_INT(b->borrowed, 1);
	CHECK_INT(b->preempted_for, 42);
	CHECK(b->checkpoint_ms == 1790000000123LL);
	CHECK_INT(b->head_port, 41234);
	CHECK_STR(b->exec_token, a->exec_token);
	CHECK_INT(b->nranks, 2);
	CHECK_INT(b->ranks[0].state, RANK_EXITED);
	CHECK_INT(b->ranks[0].exit_code, 3);
	CHECK_INT(b->ranks[0].signal, 9);
	CHECK(b->ranks[0].gpus == 0x8000000000000001ull);
	CHECK_STR(b->ranks[0].error, a->ranks[0].error);
	CHECK_STR(b->ranks[0].reason, a->ranks[0].reason);
	CHECK_STR(b->ranks[1].error, "");
	CHECK_INT(b->ranks[1].pid, 101);
	CHECK_STR(b->ranks[1].reason, "");
	job_free(l.job);
	job_free(j);
	store_close(st);
	tmpdb_drop(&d);
}

/* An attempt's stop cause: the stored ones (preempted, requeued,
 * rank0_ended) come back; those kept in memory only come back as
 * rank_failed, their outcome then their ranks' (model/machine.h). */
TEST(attempt_stop_cause_round_trips_as_stored)
{
	static const enum attempt_stop loads_as[ATTEMPT_STOP_NSTATES] = {
	        [ATTEMPT_STOP_NONE] = ATTEMPT_STOP_NONE,
	        [ATTEMPT_STOP_RANK_FAILED] = ATTEMPT_STOP_RANK_FAILED,
	        [ATTEMPT_STOP_CANCELLED] = ATTEMPT_STOP_RANK_FAILED,
	        [ATTEMPT_STOP_PREEMPTED] = ATTEMPT_STOP_PREEMPTED,
	        [ATTEMPT_STOP_REQUEUED] = ATTEMPT_STOP_REQUEUED,
	        [ATTEMPT_STOP_TIME_LIMIT] = ATTEMPT_STOP_RANK_FAILED,
	        [ATTEMPT_STOP_IDLE] = ATTEMPT_STOP_RANK_FAILED,
	        [ATTEMPT_STOP_GPU_FAULT] = ATTEMPT_STOP_RANK_FAILED,
	        [ATTEMPT_STOP_RANK0_ENDED] = ATTEMPT_STOP_RANK0_ENDED,
	        /* kept as a requeue, so that it still requeues after a restart */
	        [ATTEMPT_STOP_NODE_LOST] = ATTEMPT_STOP_REQUEUED,
	        [ATTEMPT_STOP_HUNG] = ATTEMPT_STOP_REQUEUED,
	};
	for (int s = 0; s < ATTEMPT_STOP_NSTATES; s++) {
		struct tmpdb d;
		tmpdb_make(&d);
		struct store *st;
		CHECK_INT(store_open(d.path, 0, &st), 0);
		struct job *j = sample_job();
		j->attempts[0]->stop = (enum attempt_stop)s;
		j->attempts[0]->preempted_for = s == ATTEMPT_STOP_PREEMPTED ? 42 : 0;
		CHECK_INT(store_begin(st), 0);
		CHECK_INT(store_put_job(st, j), 0);
		CHECK_INT(store_commit(st), 0);
		store_close(st);
		CHECK_INT(store_open(d.path, 0, &st), 0);
		struct loaded l = {0};
		struct store_loader ld = loader_of(&l);
		CHECK_INT(store_load(st, &ld), 0);
		CHECK(l.job != NULL);
		CHECK_INT(l.job->attempts[0]->stop, loads_as[s]);
		CHECK_INT(attempt_ending(l.job->attempts[0]), s != ATTEMPT_STOP_NONE);
		job_free(l.job);
		job_free(j);
		store_close(st);
		tmpdb_drop(&d);
	}
}

/* Keeps the job loaded last (the highest id), freeing the one before. */
static void on_job_last(void *ctx, struct job *j)
{
	struct loaded *l = ctx;
	job_free(l->job);
	l->job = j;
}

/* store_put_job_state writes what changes after submission (state, times,
 * exit code, cancel, reason, attempts) and keeps the rest of the row; a job
 * not written yet is written whole. */
TEST(job_state_put_keeps_the_submitted_row)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	struct job *j = sample_job(), *k = sample_job();
	k->id = 2;
	k->attempts[0]->job_id = 2;
	k->attempts[0]->id = 8;
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_job(st, j), 0);
	CHECK_INT(store_put_job_state(st, k), 0); /* no row yet: all of it */
	CHECK_INT(store_commit(st), 0);
	j->state = JOB_SUCCEEDED;
	j->end_ms = 3000;
	j->has_exit = 1;
	j->exit_code = 0;
	snprintf(j->reason, sizeof(j->reason), "exited 0");
	j->attempts[0]->state = JOB_SUCCEEDED;
	j->attempts[0]->ranks[1].state = RANK_EXITED;
	free(j->name); /* not written again: the stored name stays */
	j->name = xstrdup("renamed");
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_job_state(st, j), 0);
	CHECK_INT(store_commit(st), 0);
	store_close(st);

	CHECK_INT(store_open(path, 0, &st), 0);
	struct loaded l = {0};
	struct store_loader ld = {
	        .ctx = &l, .queue = on_queue, .node = on_node, .job = on_job_last};
	CHECK_INT(store_load(st, &ld), 0);
	CHECK(l.job != NULL); /* the last loaded: job 2, written whole */
	CHECK_INT(l.job->id, 2);
	CHECK_STR(l.job->name, "train");
	CHECK_STR(jv_str(l.job->env, "LR", ""), "3e-4");
	CHECK_INT(l.job->nattempts, 1);
	job_free(l.job);
	store_close(st);

	sqlite3 *db;
	CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_stmt *q;
	CHECK_INT(sqlite3_prepare_v2(db,
	                             "SELECT name, state, end_ms, exit_code, reason, env FROM "
	                             "jobs WHERE id = 1",
	                             -1, &q, NULL),
	          SQLITE_OK);
	CHECK_INT(sqlite3_step(q), SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(q, 0), "train");
	CHECK_STR((const char *)sqlite3_column_text(q, 1), "succeeded");
	CHECK_INT(sqlite3_column_int64(q, 2), 3000);
	CHECK_INT(sqlite3_column_type(q, 3), SQLITE_INTEGER);
	CHECK_STR((const char *)sqlite3_column_text(q, 4), "exited 0");
	CHECK_STR((const char *)sqlite3_column_text(q, 5), "{\"A\":\"b\",\"LR\":\"3e-4\"}");
	sqlite3_finalize(q);
	CHECK_INT(sqlite3_prepare_v2(db, "SELECT state, ranks FROM attempts WHERE id = 7", -1, &q,
	                             NULL),
	          SQLITE_OK);
	CHECK_INT(sqlite3_step(q), SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(q, 0), "succeeded");
	CHECK(strstr((const char *)sqlite3_column_text(q, 1), "\"exited\"") != NULL);
	sqlite3_finalize(q);
	sqlite3_close(db);
	job_free(j);
	job_free(k);
	tmpdb_drop(&d);
}

/* Collects every loaded job by id (1..4). */
static void on_job_each(void *ctx, struct job *j)
{
	struct job **all = ctx;
	if (j->id >= 1 && j->id <= 4 && !all[j->id - 1])
		all[j->id - 1] = j;
	else
		job_free(j);
}

/* Jobs that share their command and environment (an array's members) and
 * jobs that do not, written in turns: each row has its own, and the
 * exported names (spliced into extra) sit beside the rest of extra. */
TEST(shared_and_own_environments_round_trip)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	struct job *js[4];
	for (int i = 0; i < 4; i++) {
		js[i] = sample_job();
		js[i]->id = i + 1;
		js[i]->attempts[0]->id = 10 + i;
		js[i]->attempts[0]->job_id = i + 1;
	}
	json_decref(js[1]->env); /* 2 and 4 share 1's; 3 has its own, no exported */
	js[1]->env = json_incref(js[0]->env);
	json_decref(js[3]->env);
	js[3]->env = json_incref(js[0]->env);
	json_decref(js[2]->env);
	js[2]->env = json_pack("{s:s}", "ONLY", "three");
	json_decref(js[2]->exported);
	js[2]->exported = NULL;
	CHECK_INT(store_begin(st), 0);
	for (int i = 0; i < 4; i++)
		CHECK_INT(store_put_job(st, js[i]), 0);
	CHECK_INT(store_commit(st), 0);
	store_close(st);

	CHECK_INT(store_open(path, 0, &st), 0);
	struct job *all[4] = {0};
	struct store_loader ld = {
	        .ctx = all, .queue = on_queue, .node = on_node, .job = on_job_each};
	CHECK_INT(store_load(st, &ld), 0);
	for (int i = 0; i < 4; i++) {
		CHECK(all[i] != NULL);
		CHECK_STR(all[i]->team, "vision");
		CHECK_STR(jv_str(all[i]->env, "LR", ""), i == 2 ? "" : "3e-4");
		CHECK_STR(jv_str(all[i]->env, "ONLY", ""), i == 2 ? "three" : "");
		CHECK_INT(json_array_size(all[i]->exported), i == 2 ? 0 : 1);
		CHECK_INT(all[i]->checkpointing, 1);
		job_free(all[i]);
		job_free(js[i]);
	}
	store_close(st);
	tmpdb_drop(&d);
}

/* A database written at schema version 2 (no end_reason column) opens,
 * migrates, keeps its attempts (with no end reason) and stores new ones. */
TEST(version_2_database_migrates)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	struct job *j = sample_job();
	CHECK_INT(store_open(path, 0, &st), 0);
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_job(st, j), 0);
	CHECK_INT(store_commit(st), 0);
	store_close(st);
	sqlite3 *db;
	CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
	CHECK_INT(sqlite3_exec(db,
	                       "ALTER TABLE attempts DROP COLUMN end_reason;"
	                       "CREATE INDEX jobs_state ON jobs(state);"
	                       "UPDATE meta SET value = '2' WHERE key = 'schema_version';",
	                       NULL, NULL, NULL),
	          SQLITE_OK);
	sqlite3_close(db);

	CHECK_INT(store_open(path, 0, &st), 0);
	struct loaded l = {0};
	struct store_loader ld = loader_of(&l);
	CHECK_INT(store_load(st, &ld), 0);
	CHECK(l.job != NULL);
	CHECK_INT(l.job->nattempts, 1);
	CHECK_INT(l.job->attempts[0]->borrowed, 1);
	CHECK_STR(l.job->attempts[0]->end_reason, "");
	char *v = NULL;
	CHECK_INT(store_meta_get(st, "schema_version", &v), 0);
	CHECK_STR(v, "7");
	free(v);
	CHECK_INT(sql_int(path,
	                  "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?1",
	                  "jobs_state"),
	          0); /* version 6 dropped it */
	snprintf(l.job->attempts[0]->end_reason, sizeof(l.job->attempts[0]->end_reason),
	         "node node-2 draining: new NIC");
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_job(st, l.job), 0);
	CHECK_INT(store_commit(st), 0);
	job_free(l.job);
	store_close(st);

	CHECK_INT(store_open(path, 0, &st), 0);
	l.job = NULL;
	CHECK_INT(store_load(st, &ld), 0);
	CHECK(l.job != NULL);
	CHECK_STR(l.job->attempts[0]->end_reason, "node node-2 draining: new NIC");
	job_free(l.job);
	job_free(j);
	store_close(st);
	tmpdb_drop(&d);
}

static void on_revision(void *ctx, int64_t id, const json_t *doc)
{
	struct loaded *l = ctx;
	CHECK_INT(id, 1);
	CHECK_STR(jv_str(doc, "who", ""), "alice");
	l->queues += 100; /* counted apart from the queues */
}

/* Node 1, h-1 at 10.0.0.1, with what a stored node must have. */
static struct node *node_h1(void)
{
	struct node *n = xcalloc(1, sizeof(*n));
	n->id = 1;
	n->name = xstrdup("h-1");
	n->secret = xstrdup("s");
	n->hostname = xstrdup("");
	n->address = xstrdup("10.0.0.1");
	n->agent_url = xstrdup("");
	n->backend = xstrdup("sim");
	return n;
}

/* A node's fleet fields (schema v5) and a revision come back as stored. */
TEST(fleet_fields_round_trip)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	struct node *n = node_h1();
	n->profile = json_pack("{s:s,s:s,s:{}}", "hash", "ab12", "name", "h200", "spec");
	n->profile_status = json_pack("{s:s,s:s,s:[],s:i}", "hash", "ab12", "state", "converged",
	                              "steps", "time_ms", 5);
	snprintf(n->profile_checked, sizeof(n->profile_checked), "ab12");
	n->fleet_removed = 3;
	json_t *doc = json_pack("{s:i,s:s}", "id", 1, "who", "alice");
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_node(st, n), 0);
	CHECK_INT(store_put_fleet_revision(st, 1, doc), 0);
	CHECK_INT(store_commit(st), 0);
	store_close(st);
	CHECK_INT(store_open(path, 0, &st), 0);
	struct loaded l = {0};
	struct store_loader ld = {.ctx = &l,
	                          .queue = on_queue,
	                          .node = on_node,
	                          .job = on_job,
	                          .fleet_revision = on_revision};
	CHECK_INT(store_load(st, &ld), 0);
	CHECK(l.node != NULL);
	CHECK(json_equal(l.node->profile, n->profile));
	CHECK(json_equal(l.node->profile_status, n->profile_status));
	CHECK_STR(l.node->profile_checked, "ab12");
	CHECK_INT(l.node->fleet_removed, 3);
	CHECK_INT(l.queues, 100);
	node_free(l.node);
	node_free(n);
	json_decref(doc);
	store_close(st);
	tmpdb_drop(&d);
}

TEST(node_generation_put_keeps_the_row)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	struct node *n = node_h1();
	n->pool = xstrdup("a");
	n->generation = 4;
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_node(st, n), 0);
	CHECK_INT(store_commit(st), 0);
	/* only the generation goes: the pool changed in memory stays "a" */
	n->generation = 9;
	free(n->pool);
	n->pool = xstrdup("b");
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_node_generation(st, n), 0);
	CHECK_INT(store_commit(st), 0);
	store_close(st);
	CHECK_INT(store_open(path, 0, &st), 0);
	struct loaded l = {0};
	struct store_loader ld = loader_of(&l);
	CHECK_INT(store_load(st, &ld), 0);
	CHECK(l.node != NULL);
	CHECK_INT(l.node->generation, 9);
	CHECK_STR(l.node->pool, "a");
	node_free(l.node);
	node_free(n);
	store_close(st);
	tmpdb_drop(&d);
}

static struct store_idem idem_rec(const char *scope, const char *key, const char *body,
                                  int64_t created_ms)
{
	struct store_idem r = {.status = 201, .created_ms = created_ms};
	snprintf(r.scope, sizeof(r.scope), "%s", scope);
	snprintf(r.key, sizeof(r.key), "%s", key);
	snprintf(r.digest, sizeof(r.digest), "d-%s", key);
	r.body = (char *)body;
	if (!body)
		snprintf(r.ref, sizeof(r.ref), "job:17");
	return r;
}

/* Idempotency-Keys (schema v7): each is found under its scope and key
 * only, with its answer (or, without one, what the create made); a put
 * replaces; pruning removes exactly the ones created before the cut. */
TEST(idempotency_keys_round_trip_and_prune)
{
	struct tmpdb d;
	tmpdb_make(&d);
	struct store *st;
	CHECK_INT(store_open(d.path, 0, &st), 0);
	struct store_idem a = idem_rec("alice", "k1", "{\"job\":{\"id\":1}}", 1000);
	struct store_idem b = idem_rec("alice", "k2", NULL, 2000);
	struct store_idem c = idem_rec("bob", "k1", "{}", 3000);
	CHECK_INT(store_begin(st), 0);
	CHECK_INT(store_put_idem(st, &a), 0);
	CHECK_INT(store_put_idem(st, &b), 0);
	CHECK_INT(store_commit(st), 0);
	CHECK_INT(store_put_idem(st, &c), 0); /* outside a transaction: its own */
	struct store_idem got;
	CHECK_INT(store_get_idem(st, "alice", "k1", &got), 0);
	CHECK_STR(got.body, "{\"job\":{\"id\":1}}");
	CHECK_STR(got.digest, "d-k1");
	CHECK_STR(got.key, "k1");
	CHECK_INT(got.status, 201);
	CHECK_INT(got.created_ms, 1000);
	free(got.body);
	CHECK_INT(store_get_idem(st, "alice", "k2", &got), 0);
	CHECK(got.body == NULL);
	CHECK_STR(got.ref, "job:17");
	CHECK_INT(store_get_idem(st, "bob", "k1", &got), 0);
	CHECK_STR(got.body, "{}");
	free(got.body);
	CHECK_INT(store_get_idem(st, "bob", "k2", &got), ERR_NOTFOUND);
	CHECK_INT(store_get_idem(st, "carol", "k1", &got), ERR_NOTFOUND);
	/* the answer written after the create: the same row, with its body */
	b.body = "{\"job\":{\"id\":17}}";
	CHECK_INT(store_put_idem(st, &b), 0);
	CHECK_INT(store_get_idem(st, "alice", "k2", &got), 0);
	CHECK_STR(got.body, "{\"job\":{\"id\":17}}");
	free(got.body);
	int64_t removed = -1;
	CHECK_INT(store_prune_idem(st, 2000, &removed), 0);
	CHECK_INT(removed, 1);
	CHECK_INT(store_get_idem(st, "alice", "k1", &got), ERR_NOTFOUND);
	CHECK_INT(store_get_idem(st, "alice", "k2", &got), 0);
	free(got.body);
	CHECK_INT(sql_int(d.path, "SELECT count(*) FROM idempotency", NULL), 2);
	store_close(st);
	tmpdb_drop(&d);
}

/* A database at schema version 6 gets the table of keys (step 7). */
TEST(version_6_database_gets_idempotency_keys)
{
	struct tmpdb d;
	tmpdb_make(&d);
	struct store *st;
	CHECK_INT(store_open(d.path, 0, &st), 0);
	store_close(st);
	sqlite3 *db;
	CHECK_INT(sqlite3_open(d.path, &db), SQLITE_OK);
	CHECK_INT(sqlite3_exec(db,
	                       "DROP TABLE idempotency;"
	                       "UPDATE meta SET value = '6' WHERE key = 'schema_version';",
	                       NULL, NULL, NULL),
	          SQLITE_OK);
	sqlite3_close(db);
	CHECK_INT(store_open(d.path, 0, &st), 0);
	struct store_idem r = idem_rec("s", "k", "{}", 5);
	CHECK_INT(store_put_idem(st, &r), 0);
	store_close(st);
	CHECK_INT(sql_int(d.path, "SELECT value FROM meta WHERE key = ?1", "schema_version"), 7);
	CHECK_INT(sql_int(d.path, "SELECT count(*) FROM idempotency WHERE key = ?1", "k"), 1);
	tmpdb_drop(&d);
}

TEST(meta_get_missing_is_notfound)
{
	struct tmpdb d;
	tmpdb_make(&d);
	const char *path = d.path;
	struct store *st;
	CHECK_INT(store_open(path, 0, &st), 0);
	char *v = NULL;
	CHECK(store_meta_get(st, "nope", &v) < 0);
	CHECK_INT(store_meta_set(st, "k", "v"), 0);
	CHECK_INT(store_meta_get(st, "k", &v), 0);
	CHECK_STR(v, "v");
	free(v);
	store_close(st);
	tmpdb_drop(&d);
}

TEST_MAIN()
