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
#include "server/records.h"

/* ---- submission ---- */

static const struct jv_field job_fields[] = {
        {"command", JV_STRINGS, 1, 1, 1024},
        {"gpus", JV_INT, 0, 1, MODEL_MAX_GPUS}, /* the scheduler places whole GPUs */
        {"nodes", JV_INT, 0, 1, 1024},
        {"queue", JV_STRING, 0, 1, 63},
        {"team", JV_STRING, 0, 1, 63},
        {"priority", JV_INT, 0, -1000, 1000},
        {"name", JV_STRING, 0, 0, 128},
        {"env", JV_STRING_MAP, 0, 0, 256},
        {"cwd", JV_STRING, 0, 1, 4096},
        {"grace_ms", JV_INT, 0, 0, 600000},
        {"time_limit_ms", JV_INT, 0, 1000, 366LL * 24 * 3600 * 1000},
        {"gpu_type", JV_STRING, 0, 1, 95},
        {"min_gpu_memory_bytes", JV_INT, 0, 0, 1LL << 50},
        {"pool", JV_STRING, 0, 1, 63},
        {"selectors", JV_STRING_MAP, 0, 0, 4},
        {"checkpointing", JV_BOOL, 0, 0, 0},
        {"memory_bytes", JV_INT, 0, 4LL << 20, 64LL << 40}, /* per rank */
        {NULL, 0, 0, 0, 0},
};

/* "cpus", per rank: CFS cannot give less than 1 ms per 100 ms period. */
#define CPUS_MIN 0.01
#define CPUS_MAX 1024.0

/* jv_check, and "cpus", a number (0.5, 2) that jv_field cannot describe:
 * the other fields are checked on a copy without it. */
static int check_fields(const json_t *body, char *err, size_t errlen)
{
	const json_t *cpus = json_object_get(body, "cpus");
	if (!cpus)
		return jv_check(body, job_fields, err, errlen);
	json_t *rest = json_copy((json_t *)body);
	json_object_del(rest, "cpus");
	int rc = jv_check(rest, job_fields, err, errlen);
	json_decref(rest);
	if (rc || json_is_null(cpus))
		return rc;
	if (!json_is_number(cpus)) {
		char *shown = json_dumps(cpus, JSON_COMPACT | JSON_ENCODE_ANY);
		snprintf(err, errlen, "field 'cpus': %.40s is not a number", shown ? shown : "?");
		free(shown);
		return ERR_INVALID;
	}
	double v = json_number_value(cpus);
	if (v < CPUS_MIN || v > CPUS_MAX) {
		snprintf(err, errlen, "field 'cpus': %g is %s %g", v,
		         v < CPUS_MIN ? "below the minimum" : "above the maximum",
		         v < CPUS_MIN ? CPUS_MIN : CPUS_MAX);
		return ERR_INVALID;
	}
	return 0;
}

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
	return check_env(json_object_get(body, "env"), err, errlen);
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
	const char *cwd = jv_str(body, "cwd", NULL);
	j->cwd = cwd ? xstrdup(cwd) : NULL;
	j->grace_ms = jv_int(body, "grace_ms", 10000);
	j->time_limit_ms = jv_int(body, "time_limit_ms", 0);
	j->constraints = constraints_of(body);
	j->checkpointing = jv_bool(body, "checkpointing", 0);
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
	int rc = check_fields(body, err, errlen);
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
