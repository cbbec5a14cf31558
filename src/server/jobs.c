/* jobs.c - a job's submission (validation, the record, persisting it) and
 * cancellation. Layer 3 of the state files (core.h); every function runs
 * with the state lock held. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
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
	return rc ? rc : check_exported(body, err, errlen);
}

/* The job's placement constraints as stored: only what was asked for. */
static json_t *constraints_of(const json_t *body)
{
	json_t *c = json_object();
	static const char *const keys[] = {"gpu_type", "min_gpu_memory_bytes", "pool", "selectors"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(body, keys[i]);
		if (v && !json_is_null(v))
			json_object_set(c, keys[i], v);
	}
	return c;
}

static struct job *job_from_body(struct state *st, const json_t *body)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->id = st->njobs + 1;
	j->name = xstrdup(jv_str(body, "name", ""));
	j->queue = xstrdup(jv_str(body, "queue", "default"));
	j->team = xstrdup(jv_str(body, "team", "default"));
	j->priority = (int)jv_int(body, "priority", 0);
	j->gpus = (int)jv_int(body, "gpus", 1);
	j->nodes = (int)jv_int(body, "nodes", 1);
	j->command = json_deep_copy(json_object_get(body, "command"));
	const json_t *env = json_object_get(body, "env");
	j->env = json_is_object(env) ? json_deep_copy(env) : json_object();
	const json_t *exported = json_object_get(body, "exported");
	j->exported = json_array_size(exported) ? json_deep_copy(exported) : NULL;
	const char *cwd = jv_str(body, "cwd", NULL);
	j->cwd = cwd ? xstrdup(cwd) : NULL;
	j->grace_ms = jv_int(body, "grace_ms", 10000);
	j->time_limit_ms = jv_int(body, "time_limit_ms", 0);
	j->constraints = constraints_of(body);
	j->checkpointing = jv_bool(body, "checkpointing", 0);
	j->session = jv_bool(body, "session", 0);
	const json_t *cpus = json_object_get(body, "cpus"); /* checked: 0.01-1024 */
	j->cpu_millis = json_is_number(cpus) ? (int64_t)(json_number_value(cpus) * 1000 + 0.5) : 0;
	j->memory_bytes = jv_int(body, "memory_bytes", 0);
	j->state = JOB_PENDING;
	j->submit_ms = wall_ms();
	text_printf(j->reason, sizeof(j->reason), "waiting to be scheduled");
	return j;
}

int jobs_build(struct state *st, const json_t *body, struct job **out, char *err, size_t errlen)
{
	int rc = wire_check(body, &wire_submit, err, errlen);
	if (rc == 0)
		rc = check_semantics(st, body, err, errlen);
	if (rc)
		return rc;
	*out = job_from_body(st, body);
	state_team(st, (*out)->team, 1);
	return 0;
}

int jobs_admit(struct state *st, struct job *j, char *err, size_t errlen)
{
	/* The job is on disk before it is anywhere else: a submission that
	 * cannot be persisted (a full disk) is refused whole and changes
	 * nothing, so the client may send it again without it running twice;
	 * kept in memory behind an error, it would be scheduled all the same. */
	char *msg = xasprintf("job %lld submitted: %d node(s) x %d GPU(s)", (long long)j->id,
	                      j->nodes, j->gpus);
	int rc = store_begin(st->core->store);
	if (rc == 0)
		rc = store_put_job(st->core->store, j);
	if (rc == 0)
		rc = store_add_event(st->core->store, "job.submitted", j->id, 0, msg);
	if (rc == 0)
		rc = store_commit(st->core->store);
	else
		store_rollback(st->core->store);
	free(msg);
	if (rc) {
		log_error("cannot persist a new job: %s", store_error(st->core->store));
		snprintf(err, errlen, "cannot persist the job (%s); nothing was submitted",
		         store_error(st->core->store));
		return rc;
	}
	state_index_job(st, j);
	state_pending_add(st, j);
	st->stats.submitted_total++;
	return 0;
}

int state_cancel(struct state *st, struct job *j)
{
	if (job_state_final(j->state) || j->cancel_requested)
		return 0;
	j->cancel_requested = 1;
	state_mark_job(st, j);
	state_event(st, "job.cancel", j->id, 0, "cancel requested");
	if (j->state == JOB_PENDING) {
		state_pending_remove(st, j);
		text_printf(j->reason, sizeof(j->reason), "cancelled before it started");
		return job_to(st, j, JOB_CANCELLED, "job %lld cancelled before it started",
		              (long long)j->id);
	}
	text_printf(j->reason, sizeof(j->reason), "cancelling: stopping every rank");
	state_attempt_stop(st, j->attempts[j->nattempts - 1]);
	return 0;
}
