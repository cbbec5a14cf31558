/* jobs.c - a job's submission (validation, the record, persisting it) and
 * cancellation. Layer 3 of the state files (core.h); every function runs
 * with the state lock held. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/failpoint.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "model/fields.h"
#include "proto/wire.h"
#include "server/records.h"

/* ---- submission ---- */

/* The body's fields, types and bounds are the submit record's
 * (proto/wire.h), which the client builds its body from too. */
_Static_assert(WIRE_MAX_GPUS == MODEL_MAX_GPUS, "a job's GPUs are a node's GPU bit mask");

/* Names a process environment can hold: not empty, no '='. */
static int check_env(const json_t *env, char *err, size_t errlen)
{
	const char *key;
	json_t *v;
	json_object_foreach ((json_t *)env, key, v) {
		if (!*key || strchr(key, '=')) {
			snprintf(err, errlen, "field 'env': '%.64s' is not a valid variable name",
			         key);
			return ERR_INVALID;
		}
	}
	return 0;
}

/* One exec's strings within what Linux takes (proto/wire.h, WIRE_MAX_ARG
 * and WIRE_MAX_EXEC): past them the rank's exec fails with E2BIG ("Argument
 * list too long", exit code 127) on its node, so the job could never run.
 * The variables the agent adds are not counted; the total's bound leaves
 * them room. */
static int check_exec_size(const json_t *body, char *err, size_t errlen)
{
	size_t total = 0, i, n;
	const char *key;
	json_t *v;
	json_array_foreach (json_object_get(body, "command"), i, v) {
		n = json_string_length(v) + 1;
		total += n;
		if (n > WIRE_MAX_ARG) {
			snprintf(err, errlen,
			         "field 'command[%zu]': %zu bytes, over the limit of %d bytes "
			         "for one argument (Linux's MAX_ARG_STRLEN, %d with its NUL)",
			         i, n - 1, WIRE_MAX_ARG - 1, WIRE_MAX_ARG);
			return ERR_INVALID;
		}
	}
	json_object_foreach ((json_t *)json_object_get(body, "env"), key, v) {
		n = strlen(key) + 1 + json_string_length(v) + 1;
		total += n;
		if (n > WIRE_MAX_ARG) {
			snprintf(err, errlen,
			         "field 'env': '%.64s' is %zu bytes as NAME=VALUE, over the "
			         "limit of %d bytes for one environment string (Linux's "
			         "MAX_ARG_STRLEN, %d with its NUL)",
			         key, n - 1, WIRE_MAX_ARG - 1, WIRE_MAX_ARG);
			return ERR_INVALID;
		}
	}
	if (total <= WIRE_MAX_EXEC)
		return 0;
	snprintf(err, errlen,
	         "fields 'command' and 'env': %zu bytes together (each string with its NUL), "
	         "over the limit of %d bytes for one exec",
	         total, WIRE_MAX_EXEC);
	return ERR_INVALID;
}

/* "exported" names variables of "env" (their values are not shown back:
 * state_job_json), once each. */
static int check_exported(const json_t *body, char *err, size_t errlen)
{
	const json_t *env = json_object_get(body, "env");
	const json_t *names = json_object_get(body, "exported");
	size_t i, k;
	json_t *name;
	json_array_foreach (names, i, name) {
		const char *s = json_string_value(name);
		if (!json_object_get(env, s)) {
			snprintf(err, errlen,
			         "field 'exported[%zu]': '%.64s' is not a variable of field 'env'",
			         i, s);
			return ERR_INVALID;
		}
		for (k = 0; k < i; k++)
			if (strcmp(json_string_value(json_array_get(names, k)), s) == 0) {
				snprintf(err, errlen,
				         "field 'exported[%zu]': '%.64s' is listed twice", i, s);
				return ERR_INVALID;
			}
	}
	return 0;
}

/* A head and its workers (docs/cli.md, "Head and workers"): "worker" and
 * "head_timeout_ms" only with "head". (A command line cannot hold a NUL:
 * bodies with \u0000 are refused when parsed.) */
static int check_head(const json_t *body, char *err, size_t errlen)
{
	if (json_is_string(json_object_get(body, "head")))
		return 0;
	static const char *const need_head[] = {"worker", "head_timeout_ms"};
	for (size_t i = 0; i < sizeof(need_head) / sizeof(need_head[0]); i++) {
		const json_t *v = json_object_get(body, need_head[i]);
		if (v && !json_is_null(v)) {
			snprintf(err, errlen,
			         "field '%s': only with field 'head' (the process that the "
			         "workers and the command connect to)",
			         need_head[i]);
			return ERR_INVALID;
		}
	}
	return 0;
}

/* An MPI job (docs/cli.md, "MPI"): rank 0's command is mpirun, so neither
 * a head (which would run the command itself) nor a session's terminal. */
static int check_mpi(const json_t *body, char *err, size_t errlen)
{
	if (!jv_bool(body, "mpi", 0))
		return 0;
	const char *other = json_is_string(json_object_get(body, "head")) ? "head"
	                    : jv_bool(body, "session", 0)                 ? "session"
	                                                                  : NULL;
	if (!other)
		return 0;
	snprintf(err, errlen,
	         "field 'mpi': not with field '%s' (rank 0 of an MPI job runs mpirun with the "
	         "command)",
	         other);
	return ERR_INVALID;
}

/* A CPU-only job (gpus 0, docs/scheduling.md): the GPU constraints make no
 * sense without a GPU, so they are refused rather than ignored. */
static int check_cpu_only(const json_t *body, char *err, size_t errlen)
{
	if (jv_int(body, "gpus", 1) != 0)
		return 0;
	const char *model = jv_str(body, "gpu_type", NULL);
	json_int_t mem = jv_int(body, "min_gpu_memory_bytes", 0);
	if (model)
		snprintf(err, errlen,
		         "field 'gpu_type': '%.95s' asks for a GPU model, but field 'gpus' is 0 (a "
		         "CPU-only job): ask for 1 GPU or more, or for no model",
		         model);
	else if (mem > 0)
		snprintf(err, errlen,
		         "field 'min_gpu_memory_bytes': %lld asks for GPU memory, but field 'gpus' "
		         "is 0 (a CPU-only job): ask for 1 GPU or more, or for no GPU memory",
		         (long long)mem);
	return model || mem > 0 ? ERR_INVALID : 0;
}

#define ARRAY_MAX       10000
#define ARRAY_INDEX_MAX 999999

/* "after": [{"job": an existing job, "when": "ok" | "failed" | "any"}]. */
static int check_after(struct state *st, const json_t *body, char *err, size_t errlen)
{
	size_t i;
	json_t *a;
	json_array_foreach (json_object_get(body, "after"), i, a) {
		const char *k;
		json_t *v;
		json_object_foreach (a, k, v)
			if (strcmp(k, "job") != 0 && strcmp(k, "when") != 0) {
				snprintf(err, errlen, "field 'after[%zu]': unknown field '%.32s'",
				         i, k);
				return ERR_INVALID;
			}
		json_t *job = json_object_get(a, "job");
		const char *when = jv_str(a, "when", "ok");
		if (!json_is_object(a) || !json_is_integer(job)) {
			snprintf(err, errlen,
			         "field 'after[%zu]': should be {\"job\": ID, \"when\": ...}", i);
			return ERR_INVALID;
		}
		if (!state_job(st, json_integer_value(job))) {
			snprintf(err, errlen, "field 'after[%zu].job': there is no job %lld", i,
			         (long long)json_integer_value(job));
			return ERR_NOTFOUND;
		}
		if (strcmp(when, "ok") != 0 && strcmp(when, "failed") != 0 &&
		    strcmp(when, "any") != 0) {
			snprintf(err, errlen,
			         "field 'after[%zu].when': '%.16s' is not ok, failed or any", i,
			         when);
			return ERR_INVALID;
		}
	}
	return 0;
}

/* "array": {"indices": [distinct integers 0-999999], "max_running": N}. */
static int check_array(const json_t *body, char *err, size_t errlen)
{
	const json_t *arr = json_object_get(body, "array");
	if (!arr)
		return 0;
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)arr, k, v)
		if (strcmp(k, "indices") != 0 && strcmp(k, "max_running") != 0) {
			snprintf(err, errlen, "field 'array': unknown field '%.32s'", k);
			return ERR_INVALID;
		}
	const json_t *idx = json_object_get(arr, "indices");
	size_t n = json_array_size(idx);
	if (!json_is_array(idx) || n == 0 || n > ARRAY_MAX) {
		snprintf(err, errlen, "field 'array.indices': should list 1 to %d indices",
		         ARRAY_MAX);
		return ERR_INVALID;
	}
	char *seen = xcalloc(ARRAY_INDEX_MAX + 1, 1);
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		json_t *x = json_array_get(idx, i);
		json_int_t val = json_integer_value(x);
		if (!json_is_integer(x) || val < 0 || val > ARRAY_INDEX_MAX) {
			snprintf(err, errlen, "field 'array.indices[%zu]': should be 0 to %d", i,
			         ARRAY_INDEX_MAX);
			rc = ERR_INVALID;
		} else if (seen[val]++) {
			snprintf(err, errlen, "field 'array.indices[%zu]': %lld is listed twice", i,
			         (long long)val);
			rc = ERR_INVALID;
		}
	}
	free(seen);
	json_t *max = json_object_get(arr, "max_running");
	if (rc == 0 && max &&
	    (!json_is_integer(max) || json_integer_value(max) < 0 ||
	     json_integer_value(max) > ARRAY_MAX)) {
		snprintf(err, errlen, "field 'array.max_running': should be 0 (no limit) to %d",
		         ARRAY_MAX);
		rc = ERR_INVALID;
	}
	return rc;
}

static int check_semantics(struct state *st, const json_t *body, char *err, size_t errlen)
{
	const json_t *cmd = json_object_get(body, "command");
	if (json_string_length(json_array_get(cmd, 0)) == 0) {
		snprintf(err, errlen, "field 'command[0]': the program to run must not be empty");
		return ERR_INVALID;
	}
	const char *queue = jv_str(body, "queue", "default");
	if (!state_queue(st, queue)) {
		snprintf(err, errlen, "field 'queue': no queue named '%.63s'", queue);
		return ERR_INVALID;
	}
	const char *cwd = jv_str(body, "cwd", NULL);
	if (cwd && cwd[0] != '/') {
		snprintf(err, errlen, "field 'cwd': '%.64s' is not an absolute path", cwd);
		return ERR_INVALID;
	}
	const char *key;
	json_t *v;
	json_object_foreach ((json_t *)json_object_get(body, "selectors"), key, v) {
		if (!*key || strchr(key, '=') || json_string_length(v) == 0) {
			snprintf(err, errlen,
			         "field 'selectors': '%.64s' needs a non-empty key without '=' and "
			         "a "
			         "non-empty value",
			         key);
			return ERR_INVALID;
		}
	}
	int rc = check_env(json_object_get(body, "env"), err, errlen);
	if (rc == 0)
		rc = check_exec_size(body, err, errlen);
	if (rc == 0)
		rc = check_exported(body, err, errlen);
	if (rc == 0)
		rc = check_head(body, err, errlen);
	if (rc == 0)
		rc = check_mpi(body, err, errlen);
	if (rc == 0)
		rc = check_cpu_only(body, err, errlen);
	if (rc == 0)
		rc = check_after(st, body, err, errlen);
	return rc ? rc : check_array(body, err, errlen);
}

/* like: an array's first member, whose command, environment and exported
 * names the others share (never changed: model/model.h), or NULL. Every
 * field the client may set is copied as its entry in model/fields.h says. */
static struct job *job_from_body(struct state *st, const json_t *body, const struct job *like)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->id = st->njobs + 1;
	fields_job_from_body(j, body, like);
	j->state = JOB_PENDING;
	j->submit_ms = wall_ms();
	text_printf(j->reason, sizeof(j->reason), "waiting to be scheduled");
	return j;
}

int jobs_build(struct state *st, const json_t *body, int64_t first_id, struct job ***out, int *n,
               char *err, size_t errlen)
{
	/* the submit record's fields and the table's own (model/fields.h) */
	int rc = jv_check(body, fields_body(), err, errlen);
	if (rc == 0)
		rc = check_semantics(st, body, err, errlen);
	if (rc)
		return rc;
	const json_t *arr = json_object_get(body, "array");
	const json_t *idx = json_object_get(arr, "indices");
	*n = arr ? (int)json_array_size(idx) : 1;
	*out = xcalloc((size_t)*n, sizeof(**out));
	for (int k = 0; k < *n; k++) {
		struct job *j = job_from_body(st, body, k ? (*out)[0] : NULL);
		j->id = first_id + k;
		if (arr) {
			j->array_id = first_id;
			j->array_index = json_integer_value(json_array_get(idx, (size_t)k));
			j->array_max_running = (int)jv_int(arr, "max_running", 0);
		}
		(*out)[k] = j;
	}
	state_team(st, (*out)[0]->team, 1);
	return 0;
}

int jobs_admit(struct state *st, struct job **js, int n, char *err, size_t errlen)
{
	/* The jobs are on disk before they are anywhere else: a submission that
	 * cannot be persisted (a full disk) is refused whole and changes
	 * nothing, so the client may send it again without it running twice;
	 * kept in memory behind an error, it would be scheduled all the same.
	 * An array's members are written in one transaction: all or none. */
	int rc = store_begin(st->core->store);
	if (rc == 0 && st->core->admit_key && n > 0) {
		/* the submission's key with its jobs: a repeat after a crash
		 * finds them (idem.h); the handler's flush adds the answer */
		struct store_idem key = *st->core->admit_key;
		key.body = NULL;
		key.created_ms = wall_ms();
		snprintf(key.ref, sizeof(key.ref), "job:%lld", (long long)js[0]->id);
		rc = store_put_idem(st->core->store, &key);
	}
	for (int k = 0; rc == 0 && k < n; k++) {
		const struct job *j = js[k];
		char *msg = xasprintf("job %lld submitted: %d node(s) x %d GPU(s)",
		                      (long long)j->id, j->nodes, j->gpus);
		rc = store_put_job(st->core->store, j);
		if (rc == 0)
			rc = store_add_event(st->core->store, "job.submitted", j->id, 0, msg);
		free(msg);
	}
	if (rc == 0)
		rc = store_commit(st->core->store);
	else
		store_rollback(st->core->store);
	if (rc) {
		log_error("cannot persist a new job: %s", store_error(st->core->store));
		snprintf(err, errlen, "cannot persist the job (%s); nothing was submitted",
		         store_error(st->core->store));
		return rc;
	}
	failpoint_crash("jobs.admitted");
	for (int k = 0; k < n; k++) {
		state_index_job(st, js[k]);
		state_pending_add(st, js[k]);
		st->stats.submitted_total++;
	}
	return 0;
}

int state_cancel(struct state *st, struct job *j)
{
	if (job_state_final(j->state) || j->cancel_requested)
		return 0;
	int rc = job_cancel_to(st, j, JOB_CANCEL_REQUESTED, "cancel requested");
	if (rc)
		return rc;
	if (j->state == JOB_PENDING) {
		state_pending_remove(st, j);
		text_printf(j->reason, sizeof(j->reason), "cancelled before it started");
		return job_to(st, j, JOB_CANCELLED, "job %lld cancelled before it started",
		              (long long)j->id);
	}
	text_printf(j->reason, sizeof(j->reason), "cancelling: stopping every rank");
	/* An attempt another cause stops already keeps it; the request decides
	 * its outcome all the same (model/machine.h). */
	struct attempt *a = j->attempts[j->nattempts - 1];
	if (!attempt_ending(a))
		attempt_stop_to(st, a, ATTEMPT_STOP_CANCELLED, 0, "job %lld cancelled",
		                (long long)j->id);
	return 0;
}

int state_cancel_array(struct state *st, struct job *first, struct state_array_cancel *out)
{
	struct state_array_cancel c = {0};
	if (!first->array_id || first->array_id != first->id)
		return ERR_INVALID;
	/* Members have consecutive ids from the array's. */
	for (int64_t id = first->id;; id++) {
		struct job *m = state_job(st, id);
		if (!m || m->array_id != first->id)
			break;
		c.members++;
		if (job_state_final(m->state)) {
			c.ended++;
			continue;
		}
		int pending = m->state == JOB_PENDING && !m->cancel_requested;
		int rc = state_cancel(st, m);
		if (rc)
			return rc;
		if (pending)
			c.cancelled++;
		else
			c.stopping++;
	}
	*out = c;
	return 0;
}
