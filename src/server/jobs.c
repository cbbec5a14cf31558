/* jobs.c - job, attempt and rank transitions; placement through sched/.
 * Every function runs with the state lock held (see state.h). */
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
#include "server/state.h"

/* ---- ordering and indexes ---- */

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

static void pending_insert(struct state *st, struct job *j)
{
	XGROW(st->pending, st->npending, st->cappending);
	int pos = st->npending;
	while (pos > 0 && order(st, j, st->pending[pos - 1]) < 0) {
		st->pending[pos] = st->pending[pos - 1];
		pos--;
	}
	st->pending[pos] = j;
	st->npending++;
}

void state_active_add(struct state *st, struct attempt *a)
{
	XGROW(st->active, st->nactive, st->capactive);
	st->active[st->nactive++] = a;
}

void state_index_job(struct state *st, struct job *j)
{
	XGROW(st->jobs, st->njobs, st->capjobs);
	st->jobs[st->njobs++] = j;
}

/* After loading: rebuild pending, active and GPU allocations. */
void state_restore(struct state *st)
{
	for (int64_t i = 0; i < st->njobs; i++) {
		struct job *j = st->jobs[i];
		if (!j)
			continue;
		state_team(st, j->team, 1);
		state_job_cache(st, j);
		if (j->state == JOB_PENDING)
			pending_insert(st, j);
		for (int k = 0; k < j->nattempts; k++) {
			struct attempt *a = j->attempts[k];
			if (job_state_final(a->state)) {
				state_account(st, j, a);
				continue;
			}
			state_active_add(st, a);
			for (int r = 0; r < a->nranks; r++) {
				struct node *n = state_node(st, a->ranks[r].node_id);
				if (n && !rank_state_final(a->ranks[r].state)) {
					n->gpus_used |= a->ranks[r].gpus;
					a->ranks[r].stop_gen = n->generation;
				}
			}
		}
	}
}

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
	const json_t *cpus = json_object_get(body, "cpus"); /* checked: 0.01-1024 */
	j->cpu_millis = json_is_number(cpus) ? (int64_t)(json_number_value(cpus) * 1000 + 0.5) : 0;
	j->memory_bytes = jv_int(body, "memory_bytes", 0);
	j->state = JOB_PENDING;
	j->submit_ms = wall_ms();
	text_printf(j->reason, sizeof(j->reason), "waiting to be scheduled");
	return j;
}

int state_submit(struct state *st, const json_t *body, struct job **out, char *err, size_t errlen)
{
	int rc = wire_check(body, &wire_submit, err, errlen);
	if (rc == 0)
		rc = check_semantics(st, body, err, errlen);
	if (rc)
		return rc;
	struct job *j = job_from_body(st, body);
	state_team(st, j->team, 1);
	state_job_cache(st, j);
	rc = state_fits_ever(st, j, err, errlen);
	if (rc) {
		state_sched_forget_job(st, j);
		job_free(j);
		return rc;
	}
	/* The job is on disk before it is anywhere else: a submission that
	 * cannot be persisted (a full disk) is refused whole and changes
	 * nothing, so the client may send it again without it running twice;
	 * kept in memory behind an error, it would be scheduled all the same. */
	char *msg = xasprintf("job %lld submitted: %d node(s) x %d GPU(s)", (long long)j->id,
	                      j->nodes, j->gpus);
	rc = store_begin(st->store);
	if (rc == 0)
		rc = store_put_job(st->store, j);
	if (rc == 0)
		rc = store_add_event(st->store, "job.submitted", j->id, 0, msg);
	if (rc == 0)
		rc = store_commit(st->store);
	else
		store_rollback(st->store);
	free(msg);
	if (rc) {
		log_error("cannot persist a new job: %s", store_error(st->store));
		snprintf(err, errlen, "cannot persist the job (%s); nothing was submitted",
		         store_error(st->store));
		state_sched_forget_job(st, j);
		job_free(j);
		return rc;
	}
	state_index_job(st, j);
	pending_insert(st, j);
	st->submitted_total++;
	state_schedule(st);
	if (j->state == JOB_PENDING && strcmp(j->reason, "waiting to be scheduled") == 0)
		text_printf(
		        j->reason, sizeof(j->reason), /* the cycle was skipped: no GPU is free */
		        "needs %d GPU(s) on %d node(s); every GPU is in use", j->gpus, j->nodes);
	*out = j;
	return 0;
}

void state_pending_remove(struct state *st, struct job *j)
{
	for (int i = 0; i < st->npending; i++)
		if (st->pending[i] == j) {
			memmove(&st->pending[i], &st->pending[i + 1],
			        sizeof(*st->pending) * (size_t)(st->npending - i - 1));
			st->npending--;

			return;
		}
}

void state_pending_add(struct state *st, struct job *j)
{
	pending_insert(st, j);
}
