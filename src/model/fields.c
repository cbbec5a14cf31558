#include "model/fields.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/util.h"
#include "proto/wire.h"

/* How long the ranks of a job with a head wait for it to answer, unless
 * the job says (docs/cli.md, "Head and workers"). */
#define HEAD_TIMEOUT_MS 300000

#define MEMBER(type, m) .offset = offsetof(type, m), .size = sizeof(((type *)0)->m)
#define JOB(m)          MEMBER(struct job, m)
#define ATTEMPT(m)      MEMBER(struct attempt, m)

/* ---- the codecs of the fields their kind cannot copy ---- */

/* exit_code: NULL until the job has one (has_exit). */
static json_t *exit_encode(const void *rec)
{
	const struct job *j = rec;
	return j->has_exit ? json_integer(j->exit_code) : NULL;
}

static json_t *exit_show(const void *rec)
{
	const struct job *j = rec;
	return j->has_exit ? json_integer(j->exit_code) : json_null();
}

static void exit_decode(void *rec, const json_t *v)
{
	struct job *j = rec;
	j->has_exit = json_is_integer(v);
	j->exit_code = (int)json_integer_value(v);
}

static const struct field_codec exit_code = {
        .encode = exit_encode, .decode = exit_decode, .show = exit_show};

/* The environment as shown: the values of the names exported from the
 * client's environment are left out (they are listed by name in
 * "exported"): a whole environment would swell every listing, and may hold
 * secrets that the ranks need but nobody should read back. */
static json_t *env_show(const void *rec)
{
	const struct job *j = rec;
	if (!j->exported)
		return json_incref(j->env);
	json_t *env = json_copy(j->env);
	size_t i;
	json_t *name;
	json_array_foreach (j->exported, i, name)
		json_object_del(env, json_string_value(name));
	return env;
}

static const struct field_codec env = {.show = env_show};

/* The placement constraints as stored: only what the body asked for of
 * gpu_type, min_gpu_memory_bytes, pool and selectors (FIELD_NONE entries
 * below, which the client sets). */
static void constraints_from_body(void *rec, const json_t *body)
{
	json_t *c = json_object();
	static const char *const keys[] = {"gpu_type", "min_gpu_memory_bytes", "pool", "selectors"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(body, keys[i]);
		if (v && !json_is_null(v))
			json_object_set(c, keys[i], v);
	}
	((struct job *)rec)->constraints = c;
}

static const struct field_codec constraints = {.from_body = constraints_from_body};

/* cpus (a number of CPUs, checked 0.01-1024) is kept as cpu_millis, and
 * shown as cpus again. */
static void cpus_from_body(void *rec, const json_t *body)
{
	const json_t *cpus = json_object_get(body, "cpus");
	((struct job *)rec)->cpu_millis =
	        json_is_number(cpus) ? (int64_t)(json_number_value(cpus) * 1000 + 0.5) : 0;
}

static json_t *cpus_show(const void *rec)
{
	const struct job *j = rec;
	return j->cpu_millis > 0 ? json_real((double)j->cpu_millis / 1000.0) : NULL;
}

static const struct field_codec cpus_body = {.from_body = cpus_from_body};
static const struct field_codec cpus_shown = {.show = cpus_show};

/* "after" as stored: every entry with its "when". */
static void after_from_body(void *rec, const json_t *body)
{
	const json_t *after = json_object_get(body, "after");
	if (!json_array_size(after))
		return;
	json_t *out = json_array();
	size_t i;
	json_t *a;
	json_array_foreach (after, i, a)
		json_array_append_new(out, json_pack("{s:O,s:s}", "job", json_object_get(a, "job"),
		                                     "when", jv_str(a, "when", "ok")));
	((struct job *)rec)->after = out;
}

static const struct field_codec after = {.from_body = after_from_body};

/* An array's member: {"id", "index", "max_running"} stored and shown; the
 * body's "array" ({"indices", "max_running"}) makes the members
 * (server/jobs.c, jobs_build). */
static json_t *array_encode(const void *rec)
{
	const struct job *j = rec;
	if (!j->array_id)
		return NULL;
	return json_pack("{s:I,s:I,s:i}", "id", (json_int_t)j->array_id, "index",
	                 (json_int_t)j->array_index, "max_running", j->array_max_running);
}

static json_t *array_show(const void *rec)
{
	json_t *v = array_encode(rec);
	return v ? v : json_null();
}

static void array_decode(void *rec, const json_t *v)
{
	struct job *j = rec;
	j->array_id = jv_int(v, "id", 0);
	j->array_index = jv_int(v, "index", 0);
	j->array_max_running = (int)jv_int(v, "max_running", 0);
}

static const struct field_codec array = {
        .encode = array_encode, .decode = array_decode, .show = array_show};

/* A head's timeout and its worker are only with a head. */
static json_t *head_timeout_encode(const void *rec)
{
	const struct job *j = rec;
	return j->head ? json_integer(j->head_timeout_ms) : NULL;
}

static json_t *head_timeout_show(const void *rec)
{
	json_t *v = head_timeout_encode(rec);
	return v ? v : json_null();
}

static void head_timeout_decode(void *rec, const json_t *v)
{
	struct job *j = rec;
	j->head_timeout_ms = j->head ? json_integer_value(v) : 0;
	if (!j->head) { /* decoded after head (table order) */
		free(j->worker);
		j->worker = NULL;
	}
}

static void head_timeout_from_body(void *rec, const json_t *body)
{
	struct job *j = rec;
	j->head_timeout_ms = j->head ? jv_int(body, "head_timeout_ms", HEAD_TIMEOUT_MS) : 0;
}

static const struct field_codec head_timeout = {.encode = head_timeout_encode,
                                                .decode = head_timeout_decode,
                                                .show = head_timeout_show,
                                                .from_body = head_timeout_from_body};

/* Settings a job may leave unsaid (-1), so that a default applies: whether
 * it is requeued after a lost node (a boolean when said), and how often. */
static json_t *requeue_encode(const void *rec)
{
	const struct job *j = rec;
	return j->requeue < 0 ? NULL : json_boolean(j->requeue);
}

static json_t *requeue_show(const void *rec)
{
	json_t *v = requeue_encode(rec);
	return v ? v : json_null();
}

static void requeue_decode(void *rec, const json_t *v)
{
	((struct job *)rec)->requeue = json_is_boolean(v) ? json_is_true(v) : -1;
}

static void requeue_from_body(void *rec, const json_t *body)
{
	requeue_decode(rec, json_object_get(body, "requeue"));
}

static const struct field_codec requeue = {.encode = requeue_encode,
                                           .decode = requeue_decode,
                                           .show = requeue_show,
                                           .from_body = requeue_from_body};

static json_t *max_restarts_encode(const void *rec)
{
	const struct job *j = rec;
	return j->max_restarts < 0 ? NULL : json_integer(j->max_restarts);
}

static json_t *max_restarts_show(const void *rec)
{
	json_t *v = max_restarts_encode(rec);
	return v ? v : json_null();
}

static void max_restarts_decode(void *rec, const json_t *v)
{
	((struct job *)rec)->max_restarts = json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

static void max_restarts_from_body(void *rec, const json_t *body)
{
	max_restarts_decode(rec, json_object_get(body, "max_restarts"));
}

static const struct field_codec max_restarts = {.encode = max_restarts_encode,
                                                .decode = max_restarts_decode,
                                                .show = max_restarts_show,
                                                .from_body = max_restarts_from_body};

/* An attempt's stop cause (model.h, enum attempt_stop) is stored as it
 * always was: the `ending` column (any cause), and in extra `preempted`
 * (preempted or requeued: preempted_for tells which) and `command_ended`
 * (rank 0 ended). The columns are decoded before extra, and extra in table
 * order, so each step refines the last: ending, then preempted_for, then
 * preempted, then command_ended (attempt_stop_loaded() says the result; a
 * cause kept in memory only loads as rank_failed, docs/states.md). */
static json_t *ending_encode(const void *rec)
{
	return json_boolean(attempt_ending(rec));
}

static void ending_decode(void *rec, const json_t *v)
{
	struct attempt *a = rec;
	a->stop = attempt_stop_loaded(json_is_true(v) || json_integer_value(v) != 0, 0, 0, 0);
}

static const struct field_codec ending = {
        .encode = ending_encode, .decode = ending_decode, .show = ending_encode};

static json_t *preempted_encode(const void *rec)
{
	return json_boolean(attempt_kept_preempted(rec));
}

static void preempted_decode(void *rec, const json_t *v)
{
	struct attempt *a = rec;
	if (attempt_ending(a))
		a->stop = attempt_stop_loaded(1, json_is_true(v), a->preempted_for, 0);
}

static const struct field_codec preempted = {.encode = preempted_encode,
                                             .decode = preempted_decode};

static json_t *command_ended_encode(const void *rec)
{
	return attempt_kept_rank0_ended(rec) ? json_true() : NULL;
}

static void command_ended_decode(void *rec, const json_t *v)
{
	struct attempt *a = rec;
	if (a->stop == ATTEMPT_STOP_RANK_FAILED)
		a->stop = attempt_stop_loaded(1, 0, 0, json_is_true(v));
}

static const struct field_codec command_ended = {.encode = command_ended_encode,
                                                 .decode = command_ended_decode};

/* preempted_for: shown while the attempt is (or was) preempted */
static json_t *preempted_for_show(const void *rec)
{
	const struct attempt *a = rec;
	return attempt_kept_preempted(a) ? json_integer(a->preempted_for) : NULL;
}

static const struct field_codec preempted_for = {.show = preempted_for_show};

/* s as a JSON string into b: "" when empty (or not UTF-8, which JSON
 * cannot hold). */
static void add_json_str(struct buf *b, const char *s)
{
	json_t *v = *s ? json_string(s) : NULL;
	char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
	buf_adds(b, text ? text : "\"\"");
	free(text);
	json_decref(v);
}

/* An attempt's ranks, as the `ranks` column's JSON text: formatted here
 * rather than built as jansson values and dumped (an attempt is written at
 * each of its job's transitions; that was a fifth of the server's time per
 * short job). */
static char *ranks_text(const void *rec)
{
	const struct attempt *a = rec;
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "[");
	for (int i = 0; i < a->nranks; i++) {
		const struct rank *r = &a->ranks[i];
		buf_printf(&b,
		           "%s{\"rank\":%d,\"node_id\":%lld,\"gpus\":%lld,\"state\":\"%s\","
		           "\"pid\":%d,\"exit_code\":%d,\"signal\":%d,\"error\":",
		           i ? "," : "", r->rank, (long long)r->node_id, (long long)r->gpus,
		           rank_state_name(r->state), r->pid, r->exit_code, r->signal);
		add_json_str(&b, r->error);
		if (r->reason[0]) {
			buf_adds(&b, ",\"reason\":");
			add_json_str(&b, r->reason);
		}
		buf_adds(&b, "}");
	}
	buf_adds(&b, "]");
	return buf_detach(&b);
}

static void ranks_decode(void *rec, const json_t *arr)
{
	struct attempt *a = rec;
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

static const struct field_codec ranks = {.decode = ranks_decode, .text = ranks_text};

/* ---- the tables ---- */

/* In the order they are shown (state_job_json); store/store.c and load.c
 * bind and read the columns by name, so the order of the columns here is
 * no one's business. */
/* One entry a line or two: the table as a table. */
/* clang-format off */
const struct field fields_job[] = {
	{.name = "id", .kind = FIELD_INT64, JOB(id), .column = "id", .flags = FIELD_SHOWN},
	{.name = "name", .kind = FIELD_STR, JOB(name), .column = "name",
	    .flags = FIELD_CLIENT | FIELD_SHOWN, .dflt_str = ""},
	{.name = "queue", .kind = FIELD_STR, JOB(queue), .column = "queue",
	    .flags = FIELD_CLIENT | FIELD_SHOWN, .dflt_str = "default"},
	{.name = "priority", .kind = FIELD_INT, JOB(priority), .column = "priority",
	    .flags = FIELD_CLIENT | FIELD_SHOWN},
	{.name = "state", .kind = FIELD_STATE, JOB(state), .column = "state",
	    .flags = FIELD_SHOWN | FIELD_CHANGES},
	{.name = "gpus", .kind = FIELD_INT, JOB(gpus), .column = "gpus",
	    .flags = FIELD_CLIENT | FIELD_SHOWN, .dflt = 1},
	{.name = "nodes", .kind = FIELD_INT, JOB(nodes), .column = "nodes",
	    .flags = FIELD_CLIENT | FIELD_SHOWN, .dflt = 1},
	{.name = "command", .kind = FIELD_JSON, JOB(command), .column = "command",
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED | FIELD_MEMO | FIELD_SHARED,
	    .dflt_str = "[]"},
	/* the desired entry's env is the rank's (server/ranks.c) */
	{.name = "env", .kind = FIELD_JSON, JOB(env), .column = "env",
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_MEMO | FIELD_SHARED, .dflt_str = "{}",
	    .codec = &env},
	{.name = "cwd", .kind = FIELD_STR, JOB(cwd), .column = "cwd",
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED, .unset = FIELD_SHOW_NULL},
	{.name = "grace_ms", .kind = FIELD_INT64, JOB(grace_ms), .column = "grace_ms",
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED, .dflt = 10000},
	{.name = "submit_ms", .kind = FIELD_INT64, JOB(submit_ms), .column = "submit_ms",
	    .flags = FIELD_SHOWN, .shown = "submit_time_ms"},
	{.name = "start_ms", .kind = FIELD_INT64, JOB(start_ms), .column = "start_ms",
	    .flags = FIELD_SHOWN | FIELD_CHANGES | FIELD_SPARSE, .shown = "start_time_ms",
	    .unset = FIELD_SHOW_NULL},
	{.name = "end_ms", .kind = FIELD_INT64, JOB(end_ms), .column = "end_ms",
	    .flags = FIELD_SHOWN | FIELD_CHANGES | FIELD_SPARSE, .shown = "end_time_ms",
	    .unset = FIELD_SHOW_NULL},
	{.name = "exit_code", .kind = FIELD_NONE, .column = "exit_code",
	    .flags = FIELD_SHOWN | FIELD_CHANGES, .codec = &exit_code},
	{.name = "reason", .kind = FIELD_TEXT, JOB(reason), .column = "reason",
	    .flags = FIELD_SHOWN | FIELD_CHANGES},
	{.name = "cancel_requested", .kind = FIELD_BOOL, JOB(cancel_requested),
	    .column = "cancel_requested", .flags = FIELD_SHOWN | FIELD_CHANGES},
	{.name = "exported", .kind = FIELD_JSON, JOB(exported),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA | FIELD_SPARSE | FIELD_MEMO | FIELD_SHARED,
	    .unset = FIELD_SHOW_ARRAY},
	{.name = "team", .kind = FIELD_STR, JOB(team),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA, .dflt_str = "default"},
	{.name = "time_limit_ms", .kind = FIELD_INT64, JOB(time_limit_ms),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA, .unset = FIELD_SHOW_NULL},
	{.name = "constraints", .kind = FIELD_JSON, JOB(constraints),
	    .flags = FIELD_SHOWN | FIELD_EXTRA, .unset = FIELD_SHOW_OBJECT, .codec = &constraints},
	/* the body's placement fields, made into constraints by its codec */
	{.name = "gpu_type", .kind = FIELD_NONE, .flags = FIELD_CLIENT},
	{.name = "min_gpu_memory_bytes", .kind = FIELD_NONE, .flags = FIELD_CLIENT},
	{.name = "pool", .kind = FIELD_NONE, .flags = FIELD_CLIENT},
	{.name = "selectors", .kind = FIELD_NONE, .flags = FIELD_CLIENT},
	{.name = "cpus", .kind = FIELD_NONE, .flags = FIELD_CLIENT, .codec = &cpus_body},
	{.name = "cpu_millis", .kind = FIELD_INT64, JOB(cpu_millis),
	    .flags = FIELD_SHOWN | FIELD_DESIRED | FIELD_EXTRA | FIELD_SPARSE, .shown = "cpus",
	    .codec = &cpus_shown},
	{.name = "memory_bytes", .kind = FIELD_INT64, JOB(memory_bytes),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED | FIELD_EXTRA | FIELD_SPARSE,
	    .unset = FIELD_SHOW_OMIT},
	{.name = "checkpointing", .kind = FIELD_BOOL, JOB(checkpointing),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA},
	/* a head's fields go into the desired entry by the rank (ranks.c) */
	{.name = "head", .kind = FIELD_STR, JOB(head),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA | FIELD_SPARSE,
	    .unset = FIELD_SHOW_NULL},
	{.name = "worker", .kind = FIELD_STR, JOB(worker),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA | FIELD_SPARSE,
	    .unset = FIELD_SHOW_NULL},
	{.name = "head_timeout_ms", .kind = FIELD_INT64, JOB(head_timeout_ms),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA, .codec = &head_timeout},
	{.name = "session", .kind = FIELD_BOOL, JOB(session),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED | FIELD_EXTRA | FIELD_SPARSE},
	{.name = "mpi", .kind = FIELD_BOOL, JOB(mpi),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED | FIELD_EXTRA | FIELD_SPARSE},
	{.name = "est_start_ms", .kind = FIELD_INT64, JOB(est_start_ms), .flags = FIELD_SHOWN,
	    .shown = "est_start_time_ms", .unset = FIELD_SHOW_NULL},
	{.name = "after", .kind = FIELD_JSON, JOB(after),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA | FIELD_SPARSE,
	    .unset = FIELD_SHOW_ARRAY, .codec = &after},
	{.name = "array", .kind = FIELD_NONE, .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA,
	    .codec = &array},
	/* recovery from a lost node (server/ranks.c); -1: not said */
	{.name = "requeue", .kind = FIELD_INT, JOB(requeue),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA, .codec = &requeue},
	{.name = "max_restarts", .kind = FIELD_INT, JOB(max_restarts),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_EXTRA, .codec = &max_restarts},
	{.name = "hang_timeout_ms", .kind = FIELD_INT64, JOB(hang_timeout_ms),
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED | FIELD_EXTRA | FIELD_SPARSE,
	    .unset = FIELD_SHOW_NULL},
	/* set by the workflow engine; its ranks get it as ANVIL_TASK (ranks.c) */
	{.name = "task", .kind = FIELD_JSON, JOB(task), .flags = FIELD_EXTRA | FIELD_SPARSE},
#ifdef ANVIL_FIELD_PROBE
	/* A field that exists to test this table (test builds only): a
	 * plain client-settable string, stored, shown and carried to the
	 * ranks, described by this entry alone. */
	{.name = "probe", .kind = FIELD_MORE,
	    .flags = FIELD_CLIENT | FIELD_SHOWN | FIELD_DESIRED | FIELD_EXTRA | FIELD_SPARSE,
	    .unset = FIELD_SHOW_OMIT, .type = JV_STRING, .min = 1, .max = 256,
	    .meaning = "a test build's probe: stored, shown and in each rank's desired entry"},
#endif
	{.name = NULL},
};

const struct field fields_attempt[] = {
	{.name = "id", .kind = FIELD_INT64, ATTEMPT(id), .column = "id", .flags = FIELD_SHOWN},
	{.name = "job_id", .kind = FIELD_INT64, ATTEMPT(job_id), .column = "job_id"},
	{.name = "number", .kind = FIELD_INT, ATTEMPT(number), .column = "number",
	    .flags = FIELD_SHOWN},
	{.name = "state", .kind = FIELD_STATE, ATTEMPT(state), .column = "state",
	    .flags = FIELD_SHOWN},
	/* the stop cause, as stored (above) */
	{.name = "ending", .kind = FIELD_NONE, .column = "ending", .flags = FIELD_SHOWN,
	    .codec = &ending},
	{.name = "master_addr", .kind = FIELD_TEXT, ATTEMPT(master_addr), .column = "master_addr",
	    .flags = FIELD_SHOWN},
	{.name = "master_port", .kind = FIELD_INT, ATTEMPT(master_port), .column = "master_port",
	    .flags = FIELD_SHOWN},
	{.name = "start_ms", .kind = FIELD_INT64, ATTEMPT(start_ms), .column = "start_ms",
	    .flags = FIELD_SHOWN | FIELD_SPARSE, .shown = "start_time_ms",
	    .unset = FIELD_SHOW_NULL},
	{.name = "end_ms", .kind = FIELD_INT64, ATTEMPT(end_ms), .column = "end_ms",
	    .flags = FIELD_SHOWN | FIELD_SPARSE, .shown = "end_time_ms", .unset = FIELD_SHOW_NULL},
	/* shown with each rank's node (server/state.c) */
	{.name = "ranks", .kind = FIELD_NONE, .column = "ranks", .codec = &ranks},
	{.name = "borrowed", .kind = FIELD_BOOL, ATTEMPT(borrowed),
	    .flags = FIELD_SHOWN | FIELD_EXTRA},
	{.name = "preempted_for", .kind = FIELD_INT64, ATTEMPT(preempted_for),
	    .flags = FIELD_SHOWN | FIELD_EXTRA, .codec = &preempted_for},
	{.name = "preempted", .kind = FIELD_NONE, .flags = FIELD_EXTRA, .codec = &preempted},
	{.name = "checkpoint_ms", .kind = FIELD_INT64, ATTEMPT(checkpoint_ms),
	    .flags = FIELD_SHOWN | FIELD_EXTRA, .shown = "checkpoint_time_ms",
	    .unset = FIELD_SHOW_NULL},
	{.name = "restart", .kind = FIELD_INT, ATTEMPT(restart),
	    .flags = FIELD_SHOWN | FIELD_EXTRA | FIELD_SPARSE, .unset = FIELD_SHOW_OMIT},
	{.name = "checkpoints", .kind = FIELD_JSON, ATTEMPT(checkpoints),
	    .flags = FIELD_SHOWN | FIELD_EXTRA | FIELD_SPARSE, .unset = FIELD_SHOW_ARRAY},
	{.name = "lease_end_ms", .kind = FIELD_INT64, ATTEMPT(lease_end_ms),
	    .flags = FIELD_SHOWN | FIELD_EXTRA | FIELD_SPARSE, .shown = "lease_end_time_ms",
	    .unset = FIELD_SHOW_OMIT},
	/* shown as head_addr (server/state.c) */
	{.name = "head_port", .kind = FIELD_INT, ATTEMPT(head_port),
	    .flags = FIELD_EXTRA | FIELD_SPARSE},
	{.name = "command_ended", .kind = FIELD_NONE, .flags = FIELD_EXTRA | FIELD_SPARSE,
	    .codec = &command_ended},
	/* never shown: it opens the attempt's ranks to exec */
	{.name = "exec_token", .kind = FIELD_TEXT, ATTEMPT(exec_token),
	    .flags = FIELD_EXTRA | FIELD_SPARSE},
	{.name = "end_reason", .kind = FIELD_TEXT, ATTEMPT(end_reason), .column = "end_reason",
	    .flags = FIELD_SHOWN},
	{.name = NULL},
};
/* clang-format on */

/* ---- copying by kind ---- */

const struct field *fields_find(const struct field *t, const char *name)
{
	for (; t->name; t++)
		if (strcmp(t->name, name) == 0)
			return t;
	return NULL;
}

const char *fields_shown_name(const struct field *f)
{
	return f->shown ? f->shown : f->name;
}

#define AT(rec, f, type)  ((type *)(void *)((char *)(rec) + (f)->offset))
#define CJSON(rec, f)     (*(json_t *const *)(const void *)((const char *)(rec) + (f)->offset))
#define CAT(rec, f, type) ((const type *)(const void *)((const char *)(rec) + (f)->offset))

int fields_unset(const struct field *f, const void *rec)
{
	switch (f->kind) {
	case FIELD_INT:
	case FIELD_BOOL: return *CAT(rec, f, int) == 0;
	case FIELD_INT64: return *CAT(rec, f, int64_t) == 0;
	case FIELD_STR: return *CAT(rec, f, char *) == NULL;
	case FIELD_TEXT: return *CAT(rec, f, char) == '\0';
	case FIELD_JSON: return CJSON(rec, f) == NULL;
	case FIELD_MORE: return json_object_get(((const struct job *)rec)->more, f->name) == NULL;
	case FIELD_STATE: return 0; /* every state is one */
	case FIELD_NONE: break;
	}
	return 1;
}

/* The value by f's kind, a new reference (null for an unset string or
 * JSON value). */
static json_t *kind_value(const struct field *f, const void *rec)
{
	const char *s;
	json_t *v;
	switch (f->kind) {
	case FIELD_INT: return json_integer(*CAT(rec, f, int));
	case FIELD_BOOL: return json_boolean(*CAT(rec, f, int));
	case FIELD_INT64: return json_integer(*CAT(rec, f, int64_t));
	case FIELD_STR: s = *CAT(rec, f, char *); return s ? json_string(s) : json_null();
	case FIELD_TEXT: return json_string(CAT(rec, f, char));
	case FIELD_JSON: v = CJSON(rec, f); return v ? json_incref(v) : json_null();
	case FIELD_MORE:
		v = json_object_get(((const struct job *)rec)->more, f->name);
		return v ? json_incref(v) : json_null();
	case FIELD_STATE: return json_string(job_state_name(*CAT(rec, f, enum job_state)));
	case FIELD_NONE: break;
	}
	return NULL;
}

json_t *fields_value(const struct field *f, const void *rec)
{
	if (f->codec && f->codec->encode)
		return f->codec->encode(rec);
	if ((f->flags & FIELD_SPARSE) && fields_unset(f, rec))
		return NULL;
	return kind_value(f, rec);
}

json_t *fields_show(const struct field *f, const void *rec)
{
	if (!(f->flags & FIELD_SHOWN))
		return NULL;
	if (f->codec && f->codec->show)
		return f->codec->show(rec);
	if (f->kind == FIELD_NONE)
		return NULL;
	if (f->unset != FIELD_SHOW_VALUE && fields_unset(f, rec)) {
		switch (f->unset) {
		case FIELD_SHOW_NULL: return json_null();
		case FIELD_SHOW_ARRAY: return json_array();
		case FIELD_SHOW_OBJECT: return json_object();
		case FIELD_SHOW_OMIT:
		case FIELD_SHOW_VALUE: return NULL;
		}
	}
	return kind_value(f, rec);
}

/* A JSON default as the record holds it: only "{}" and "[]" are used. */
static json_t *json_dflt(const char *text)
{
	if (!text)
		return NULL;
	return strcmp(text, "[]") == 0 ? json_array() : json_object();
}

static char *str_dflt(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

void fields_decode(const struct field *f, void *rec, const json_t *v)
{
	if (f->codec && f->codec->decode) {
		f->codec->decode(rec, v);
		return;
	}
	switch (f->kind) {
	case FIELD_INT:
		*AT(rec, f, int) = json_is_integer(v) ? (int)json_integer_value(v) : (int)f->dflt;
		break;
	case FIELD_BOOL:
		*AT(rec, f, int) = json_is_boolean(v)   ? json_is_true(v)
		                   : json_is_integer(v) ? json_integer_value(v) != 0
		                                        : (int)f->dflt;
		break;
	case FIELD_INT64:
		*AT(rec, f, int64_t) = json_is_integer(v) ? json_integer_value(v) : f->dflt;
		break;
	case FIELD_STR:
		*AT(rec, f, char *) =
		        json_is_string(v) ? xstrdup(json_string_value(v)) : str_dflt(f->dflt_str);
		break;
	case FIELD_TEXT:
		text_printf(AT(rec, f, char), f->size, "%s",
		            json_is_string(v) ? json_string_value(v) : "");
		break;
	case FIELD_JSON:
		/* an empty list is no list; an object is kept as it is */
		*AT(rec, f, json_t *) = json_is_object(v) || json_array_size(v)
		                                ? json_incref((json_t *)(uintptr_t)v)
		                                : json_dflt(f->dflt_str);
		break;
	case FIELD_MORE:
		if (v && !json_is_null(v)) {
			struct job *j = rec;
			if (!j->more)
				j->more = json_object();
			json_object_set(j->more, f->name, (json_t *)(uintptr_t)v);
		}
		break;
	case FIELD_STATE: /* a state this build does not know: the job is lost */
		if (job_state_parse(json_string_value(v), AT(rec, f, enum job_state)))
			*AT(rec, f, enum job_state) = JOB_LOST;
		break;
	case FIELD_NONE: break;
	}
}

/* ---- the body ---- */

void fields_job_from_body(struct job *j, const json_t *body, const struct job *like)
{
	for (const struct field *f = fields_job; f->name; f++) {
		int own = f->codec && f->codec->from_body;
		if (!own && (!(f->flags & FIELD_CLIENT) || f->kind == FIELD_NONE))
			continue; /* the server's, or a part of another field (or the
			           * array's, whose members jobs_build makes) */
		if (own) {
			f->codec->from_body(j, body);
		} else if ((f->flags & FIELD_SHARED) && like) {
			*AT(j, f, json_t *) = json_incref(CJSON(like, f));
		} else if (f->kind == FIELD_JSON) {
			const json_t *v = json_object_get(body, f->name);
			*AT(j, f, json_t *) = json_is_object(v) || json_array_size(v)
			                              ? json_deep_copy(v)
			                              : json_dflt(f->dflt_str);
		} else {
			fields_decode(f, j, json_object_get(body, f->name));
		}
	}
}

void fields_show_all(const struct field *t, const void *rec, json_t *o)
{
	for (const struct field *f = t; f->name; f++) {
		json_t *v = fields_show(f, rec);
		if (v)
			json_object_set_new(o, fields_shown_name(f), v);
	}
}

void fields_desired(const struct job *j, void (*put)(void *ctx, const char *name, json_t *v),
                    void *ctx)
{
	for (const struct field *f = fields_job; f->name; f++) {
		if (!(f->flags & FIELD_DESIRED))
			continue;
		json_t *v = fields_value(f, j);
		if (v)
			put(ctx, f->name, v);
	}
}

/* The submit record's fields and the FIELD_MORE client fields as one jv.h
 * table, made once. */
#define BODY_MAX_FIELDS 64
static struct jv_field body_fields[BODY_MAX_FIELDS + 1];
static pthread_once_t body_once = PTHREAD_ONCE_INIT;

static void body_fields_make(void)
{
	size_t n = 0;
	for (const struct wire_field *w = wire_submit.fields; w->name; w++)
		body_fields[n++] = (struct jv_field){w->name, w->type, w->required, w->min, w->max};
	for (const struct field *f = fields_job; f->name; f++)
		if (f->kind == FIELD_MORE && (f->flags & FIELD_CLIENT) && n < BODY_MAX_FIELDS)
			body_fields[n++] = (struct jv_field){f->name, f->type, 0, f->min, f->max};
	body_fields[n] = (struct jv_field){NULL, 0, 0, 0, 0};
}

const struct jv_field *fields_body(void)
{
	pthread_once(&body_once, body_fields_make);
	return body_fields;
}

const struct jv_field *fields_client(const char *name)
{
	for (const struct jv_field *f = fields_body(); f->name; f++)
		if (strcmp(f->name, name) == 0)
			return f;
	return NULL;
}

/* ---- the extra column ---- */

static void add_value_text(struct buf *b, const json_t *v)
{
	char *text = jv_dump(v);
	buf_adds(b, text);
	free(text);
}

/* Formatted directly rather than built as a jansson object and dumped:
 * an attempt's row is written at each of its job's transitions, and the
 * job's exported environment (kilobytes) comes from the memo. */
char *fields_extra_text(const struct field *t, const void *rec, fields_memo_fn memo, void *ctx)
{
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "{");
	int n = 0;
	for (const struct field *f = t; f->name; f++) {
		if (!(f->flags & FIELD_EXTRA))
			continue;
		int plain = !(f->codec && f->codec->encode);
		if (plain && (f->flags & FIELD_SPARSE) && fields_unset(f, rec))
			continue;
		json_t *v = plain ? NULL : f->codec->encode(rec);
		if (!plain && !v)
			continue;
		buf_printf(&b, "%s\"%s\":", n++ ? "," : "", f->name);
		if (v) {
			add_value_text(&b, v);
			json_decref(v);
			continue;
		}
		switch (f->kind) {
		case FIELD_INT: buf_printf(&b, "%d", *CAT(rec, f, int)); break;
		case FIELD_BOOL: buf_adds(&b, *CAT(rec, f, int) ? "true" : "false"); break;
		case FIELD_INT64: buf_printf(&b, "%lld", (long long)*CAT(rec, f, int64_t)); break;
		case FIELD_STR:
			if (*CAT(rec, f, char *))
				add_json_str(&b, *CAT(rec, f, char *));
			else
				buf_adds(&b, "null");
			break;
		case FIELD_TEXT: add_json_str(&b, CAT(rec, f, char)); break;
		case FIELD_JSON:
			if (!CJSON(rec, f))
				buf_adds(&b, "null");
			else if ((f->flags & FIELD_MEMO) && memo)
				buf_adds(&b, memo(ctx, f, CJSON(rec, f)));
			else
				add_value_text(&b, CJSON(rec, f));
			break;
		case FIELD_MORE:
		case FIELD_STATE:
		case FIELD_NONE:
			v = kind_value(f, rec);
			add_value_text(&b, v ? v : json_null());
			json_decref(v);
			break;
		}
	}
	buf_adds(&b, "}");
	return buf_detach(&b);
}

void fields_extra_decode(const struct field *t, void *rec, const json_t *extra)
{
	for (const struct field *f = t; f->name; f++)
		if (f->flags & FIELD_EXTRA)
			fields_decode(f, rec, json_object_get(extra, f->name));
}
