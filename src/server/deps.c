/* deps.c - which pending jobs the scheduler may see: a job waits while a
 * job it comes after (--after) has not ended as it asks, and an array's
 * members wait while as many of them run as the array allows. A job
 * whose dependency can never hold is cancelled, with the reason. Layer 3
 * of the state files (core.h); every function runs with the state lock
 * held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/util.h"
#include "server/records.h"

enum dep { DEP_HOLDS, DEP_WAITS, DEP_NEVER };

/* Whether "after" entry a holds now. */
static enum dep dep_of(struct state *st, const json_t *a, const struct job **on)
{
	const struct job *d = state_job(st, json_integer_value(json_object_get(a, "job")));
	const char *when = json_string_value(json_object_get(a, "when"));
	*on = d;
	if (!d)
		return DEP_NEVER; /* checked at submission: never expected */
	if (!job_state_final(d->state))
		return DEP_WAITS;
	int ok = d->state == JOB_SUCCEEDED;
	if (strcmp(when, "any") == 0 || (strcmp(when, "ok") == 0) == ok)
		return DEP_HOLDS;
	return DEP_NEVER;
}

static const char *want_text(const char *when)
{
	return strcmp(when, "ok") == 0 ? "succeed" : strcmp(when, "failed") == 0 ? "fail" : "end";
}

static void set_reason(struct state *st, struct job *j, const char *text)
{
	if (strcmp(j->reason, text) == 0)
		return;
	text_printf(j->reason, sizeof(j->reason), "%s", text);
	state_mark_job(st, j);
}

/* DEP_HOLDS when every dependency of j holds; else why not, in j's reason
 * (DEP_WAITS) or in never (DEP_NEVER). */
static enum dep deps_of(struct state *st, struct job *j, char *never, size_t len)
{
	size_t i;
	json_t *a;
	json_array_foreach (j->after, i, a) {
		const struct job *d;
		enum dep r = dep_of(st, a, &d);
		const char *when = json_string_value(json_object_get(a, "when"));
		long long id = (long long)json_integer_value(json_object_get(a, "job"));
		if (r == DEP_NEVER) {
			snprintf(never, len,
			         "its dependency can never hold: job %lld %s (--after %lld:%s)", id,
			         d ? job_state_name(d->state) : "does not exist", id, when);
			return r;
		}
		if (r == DEP_WAITS) {
			char why[128];
			snprintf(why, sizeof(why), "waiting for job %lld to %s (--after %lld:%s)",
			         id, want_text(when), id, when);
			set_reason(st, j, why);
			return r;
		}
	}
	return DEP_HOLDS;
}

/* Members of each array that run now, counted once per cycle. */
static json_t *running_by_array(struct state *st)
{
	json_t *by = json_object();
	for (int i = 0; i < st->core->nactive; i++) {
		const struct job *j = state_job(st, st->core->active[i]->job_id);
		if (!j || !j->array_id || !j->array_max_running)
			continue;
		char key[24];
		snprintf(key, sizeof(key), "%lld", (long long)j->array_id);
		json_object_set_new(by, key,
		                    json_integer(json_integer_value(json_object_get(by, key)) + 1));
	}
	return by;
}

static void array_key(const struct job *j, char *key, size_t len)
{
	snprintf(key, len, "%lld", (long long)j->array_id);
}

/* Whether the array of j may start one more member: counts it if so. The
 * count includes the members let through before it this cycle, which may
 * not start (deps_explain says what holds the others then). */
static int array_room(const struct job *j, json_t *by)
{
	if (!j->array_id || !j->array_max_running)
		return 1;
	char key[24];
	array_key(j, key, sizeof(key));
	json_int_t n = json_integer_value(json_object_get(by, key));
	if (n >= j->array_max_running)
		return 0;
	json_object_set_new(by, key, json_integer(n + 1));
	return 1;
}

static void cancel_never(struct state *st, struct job *j, const char *why)
{
	state_pending_remove(st, j);
	text_printf(j->reason, sizeof(j->reason), "cancelled: %s", why);
	job_to(st, j, JOB_CANCELLED, "job %lld cancelled: %s", (long long)j->id, why);
}

/* Whether j waits for the lease of its lost attempt (ranks.c): its ranks
 * on the lost node may still run until it ends, and its next attempt must
 * not overlap them. Its reason, given at the requeue, says until when. */
static int lease_holds(struct state *st, const struct job *j, int64_t now)
{
	const struct attempt *last = j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
	if (!last || last->state != JOB_LOST || last->lease_end_ms <= now)
		return 0;
	state_hold_until(st, last->lease_end_ms);
	return 1;
}

int deps_ready(struct state *st, struct job **out, struct job **held, int *nheld)
{
	/* Cancelling one job may make another's dependency impossible: go on
	 * until a pass cancels nothing (a chain settles in one call). */
	for (int cancelled = 1; cancelled;) {
		cancelled = 0;
		for (int i = st->core->npending - 1; i >= 0; i--) {
			struct job *j = st->core->pending[i];
			char never[200];
			if (j->after && deps_of(st, j, never, sizeof(never)) == DEP_NEVER) {
				cancel_never(st, j, never);
				cancelled = 1;
			}
		}
	}
	json_t *by = running_by_array(st);
	int n = 0;
	int64_t now = wall_ms();
	*nheld = 0;
	for (int i = 0; i < st->core->npending; i++) {
		struct job *j = st->core->pending[i];
		char never[200];
		if (j->after && deps_of(st, j, never, sizeof(never)) != DEP_HOLDS)
			continue;
		if (lease_holds(st, j, now))
			continue;
		if (!array_room(j, by))
			held[(*nheld)++] = j;
		else
			out[n++] = j;
	}
	json_decref(by);
	return n;
}

/* Why held member j waits, once the cycle is over: n of its array's
 * members run, and next (NULL: none) is the first let through that is
 * still pending. The text names no member: it stays the same while the
 * count does, so a large array's held members are not written again each
 * time one of them starts. */
static void held_text(const struct job *j, json_int_t n, const struct job *next, char *why,
                      size_t len)
{
	long long id = (long long)j->array_id;
	int max = j->array_max_running;
	if (n >= max) /* the limit holds it, truly */
		snprintf(why, len, "array %lld: %lld of its jobs run, its limit (%%%d)", id,
		         (long long)n, max);
	else if (next && next->reason[0] && strncmp(next->reason, "array ", 6) != 0)
		snprintf(why, len,
		         "array %lld: %lld of its jobs run (limit %%%d); the next in line waits: "
		         "%.140s",
		         id, (long long)n, max, next->reason);
	else
		snprintf(why, len,
		         "array %lld: %lld of its jobs run (limit %%%d); the members ahead of it "
		         "wait to start",
		         id, (long long)n, max);
}

void deps_explain(struct state *st, struct job *const *ready, int nready, struct job *const *held,
                  int nheld)
{
	if (!nheld)
		return;
	json_t *by = running_by_array(st), *next = json_object();
	char key[24], why[sizeof(held[0]->reason)];
	for (int i = 0; i < nready; i++) {
		const struct job *j = ready[i];
		if (!j->array_id || !j->array_max_running || j->state != JOB_PENDING)
			continue;
		array_key(j, key, sizeof(key));
		if (!json_object_get(next, key))
			json_object_set_new(next, key, json_integer(j->id));
	}
	for (int i = 0; i < nheld; i++) {
		struct job *j = held[i];
		if (j->state != JOB_PENDING)
			continue;
		array_key(j, key, sizeof(key));
		held_text(j, json_integer_value(json_object_get(by, key)),
		          state_job(st, json_integer_value(json_object_get(next, key))), why,
		          sizeof(why));
		set_reason(st, j, why);
	}
	json_decref(next);
	json_decref(by);
}
