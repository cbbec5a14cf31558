/* flows.c - the workflow engine's records, jobs and cache (flows.h).
 * Layer 5 of the state files (core.h). */
#include "server/flows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "flow/codeset.h"
#include "flow/run.h"
#include "flow/spec.h"
#include "objstore/blob.h"
#include "server/glue.h"
#include "store/flowcache.h"

struct flows {
	struct flow_exec **execs; /* execs[id - 1] */
	int nexecs, capexecs;
	struct flow_run **runs; /* runs[id - 1] */
	int64_t *run_exec;      /* run_exec[id - 1]: its execution's id */
	int64_t nruns, capruns;
	struct flow_exec **active; /* executions still running */
	int nactive, capactive;
	struct flow_exec **touched; /* executions with records to write */
	int ntouched, captouched;
	char *listed;     /* listed[id - 1]: in touched */
	json_t *inflight; /* inflight_key -> the id of the running run that computes it */
	int64_t next_due; /* the earliest retry due; 0 none */
	int kick;         /* something may start: step even without ended jobs */
};

static struct flows *flows_of(struct state *st)
{
	return st->core->flows;
}

/* ---- records and their flush ---- */

static void touch(struct state *st, struct flow_exec *x)
{
	struct flows *f = flows_of(st);
	st->core->flows_dirty = 1;
	if (f->listed[x->id - 1])
		return;
	f->listed[x->id - 1] = 1;
	XGROW(f->touched, f->ntouched, f->captouched);
	f->touched[f->ntouched++] = x;
}

static json_t *exec_doc(const struct flow_exec *x)
{
	json_t *doc = flow_exec_json(x, 0);
	json_object_set(doc, "workflow", x->spec);
	return doc;
}

int flows_flush(struct state *st, struct store *store)
{
	struct flows *f = flows_of(st);
	int rc = 0;
	for (int i = 0; rc == 0 && i < f->ntouched; i++) {
		struct flow_exec *x = f->touched[i];
		if (x->dirty) {
			json_t *doc = exec_doc(x);
			rc = store_put_flow_exec(store, x->id, doc);
			json_decref(doc);
		}
		for (int k = 0; rc == 0 && k < x->nruns; k++) {
			if (!x->runs[k]->dirty)
				continue;
			json_t *doc = flow_run_json(x, x->runs[k]);
			rc = store_put_flow_run(store, x->runs[k]->id, x->id, doc);
			json_decref(doc);
		}
	}
	return rc;
}

void flows_flushed(struct state *st)
{
	struct flows *f = flows_of(st);
	for (int i = 0; i < f->ntouched; i++) {
		struct flow_exec *x = f->touched[i];
		x->dirty = 0;
		for (int k = 0; k < x->nruns; k++)
			x->runs[k]->dirty = 0;
		f->listed[x->id - 1] = 0;
	}
	f->ntouched = 0;
}

void flows_close(struct state *st)
{
	struct flows *f = flows_of(st);
	if (!f)
		return;
	for (int i = 0; i < f->nexecs; i++)
		flow_exec_free(f->execs[i]);
	free(f->execs);
	free(f->runs);
	free(f->run_exec);
	free(f->active);
	free(f->touched);
	free(f->listed);
	json_decref(f->inflight);
	free(f);
	st->core->flows = NULL;
}

/* Gives x the next execution id and its runs the next run ids. */
static void index_exec(struct flows *f, struct flow_exec *x)
{
	XGROW(f->execs, f->nexecs, f->capexecs);
	f->execs[f->nexecs++] = x;
	f->listed = xrealloc(f->listed, (size_t)f->capexecs);
	f->listed[x->id - 1] = 0;
	for (int k = 0; k < x->nruns; k++) {
		struct flow_run *r = x->runs[k];
		if (f->nruns + 1 > f->capruns) {
			f->capruns = f->capruns ? f->capruns * 2 : 256;
			f->runs = xrealloc(f->runs, (size_t)f->capruns * sizeof(*f->runs));
			f->run_exec = xrealloc(f->run_exec, (size_t)f->capruns * sizeof(int64_t));
		}
		f->runs[f->nruns] = r;
		f->run_exec[f->nruns] = x->id;
		f->nruns++;
		if (!r->id)
			r->id = f->nruns;
	}
}

static void add_active(struct flows *f, struct flow_exec *x)
{
	for (int i = 0; i < f->nactive; i++)
		if (f->active[i] == x)
			return;
	XGROW(f->active, f->nactive, f->capactive);
	f->active[f->nactive++] = x;
}

struct flow_exec *flows_get(struct state *st, int64_t id)
{
	struct flows *f = flows_of(st);
	return f && id >= 1 && id <= f->nexecs ? f->execs[id - 1] : NULL;
}

struct flow_run *flows_run(struct state *st, int64_t run_id, struct flow_exec **x)
{
	struct flows *f = flows_of(st);
	if (!f || run_id < 1 || run_id > f->nruns)
		return NULL;
	if (x)
		*x = flows_get(st, f->run_exec[run_id - 1]);
	return f->runs[run_id - 1];
}

json_t *flows_list(struct state *st, int limit)
{
	struct flows *f = flows_of(st);
	json_t *list = json_array();
	for (int i = f ? f->nexecs - 1 : -1; i >= 0 && (int)json_array_size(list) < limit; i--)
		json_array_append_new(list, flow_exec_json(f->execs[i], 0));
	return list;
}

/* ---- the cache (store/flowcache.h), and runs computing the same ---- */

enum lookup { MISS, HIT, DUPLICATE };

/* Runs compute the same when their keys and their code bundles are the
 * same (a task keyed by what it reads leaves the bundle out of its key). */
static void inflight_key(const struct flow_exec *x, const struct flow_run *r, char out[160])
{
	text_printf(out, 160, "%s@%s", r->cache_key, x->bundle);
}

static int64_t inflight_get(struct state *st, const struct flow_exec *x, const struct flow_run *r)
{
	char k[160];
	inflight_key(x, r, k);
	return jv_int(flows_of(st)->inflight, k, 0);
}

static void inflight_set(struct state *st, const struct flow_exec *x, const struct flow_run *r)
{
	char k[160];
	inflight_key(x, r, k);
	json_object_set_new(flows_of(st)->inflight, k, json_integer(r->id));
}

/* Forgets r as the run that computes its key, if it is. */
static void inflight_drop(struct state *st, const struct flow_exec *x, const struct flow_run *r)
{
	char k[160];
	inflight_key(x, r, k);
	if (r->cache_key[0] && jv_int(flows_of(st)->inflight, k, 0) == r->id)
		json_object_del(flows_of(st)->inflight, k);
}

/* The cache's answer; a miss whose key a running run computes waits for
 * that run instead. */
static enum lookup cache_lookup(struct state *st, struct flow_exec *x, struct flow_run *r,
                                const json_t *rendered, const json_t *fetch)
{
	if (flowcache_lookup(st->core->store, st->objects, x, r, rendered, fetch, wall_ms()))
		return HIT;
	int64_t other = inflight_get(st, x, r);
	if (x->no_cache || !other || other == r->id)
		return MISS;
	r->dup_of = other;
	text_printf(r->cache_note, sizeof(r->cache_note),
	            "waits for run %lld, which computes the same", (long long)other);
	return DUPLICATE;
}

/* Runs waiting for run `id` (same key): cached from it when it succeeded,
 * else free to start on their own. */
static void release_duplicates(struct state *st, const struct flow_exec *from,
                               const struct flow_run *done)
{
	struct flows *f = flows_of(st);
	for (int i = 0; i < f->nactive; i++) {
		struct flow_exec *x = f->active[i];
		for (int k = 0; k < x->nruns; k++) {
			struct flow_run *r = x->runs[k];
			if (r->dup_of != done->id || r->state != FLOW_WAITING)
				continue;
			r->dup_of = 0;
			r->dirty = 1;
			if (done->state == FLOW_SUCCEEDED) {
				text_printf(r->cache_note, sizeof(r->cache_note), "hit");
				flow_cached(x, r, done->outputs, from->id, done->id, wall_ms());
			}
			touch(st, x);
			f->kick = 1;
		}
	}
}

/* ---- starting runs ---- */

/* The runs of one round (flow_next's ready set) whose jobs are built and
 * wait to be admitted together: one transaction for the round, so a sweep
 * of a thousand starts with one commit instead of a thousand, each of which
 * held the state lock (and so every agent's answer) for its fsync-free but
 * page-writing commit. */
struct starts {
	struct start {
		struct flow_run *r;
		int first; /* its first job in jobs */
	} * runs;
	struct job **jobs;
	int nruns, njobs, capruns, capjobs;
};

static void refused(struct flow_exec *x, struct flow_run *r, const char *err)
{
	char why[600];
	text_printf(why, sizeof(why), "its job was refused: %s", err);
	flow_failed(x, r, why, wall_ms());
}

/* Prepares run r: a cache hit, a wait for a duplicate, a failure, or a job
 * built into b, to be admitted with the round's others (admit_starts). */
static void prepare_run(struct state *st, struct flow_exec *x, struct flow_run *r, struct starts *b)
{
	char err[512];
	json_t *t = flow_rendered(x, r, err, sizeof(err));
	if (!t) {
		flow_failed(x, r, err, wall_ms());
		return;
	}
	json_t *fetch = flow_fetch(x, r);
	if (flowcache_enabled(t) && cache_lookup(st, x, r, t, fetch) != MISS) {
		json_decref(fetch);
		json_decref(t);
		return;
	}
	json_t *body = flow_job_body(x, r, t);
	struct job **js = NULL;
	int n = 0;
	int rc = glue_build(st, body, flow_task_doc(x, r, t, fetch), st->njobs + 1 + b->njobs, &js,
	                    &n, err, sizeof(err));
	json_decref(body);
	json_decref(t);
	if (rc) {
		refused(x, r, err);
		return;
	}
	XGROW(b->runs, b->nruns, b->capruns);
	b->runs[b->nruns++] = (struct start){r, b->njobs};
	for (int k = 0; k < n; k++) {
		XGROW(b->jobs, b->njobs, b->capjobs);
		b->jobs[b->njobs++] = js[k];
	}
	free(js);
	/* the round's later runs computing the same wait for this one */
	if (r->cache_key[0] && !x->no_cache)
		inflight_set(st, x, r);
}

/* Admits the round's jobs, all or none, and starts their runs (or fails
 * them with why). How many started. */
static int admit_starts(struct state *st, struct flow_exec *x, struct starts *b)
{
	char err[512] = "";
	int rc = b->njobs ? glue_admit(st, b->jobs, b->njobs, err, sizeof(err)) : 0;
	for (int i = 0; i < b->nruns; i++) {
		struct flow_run *r = b->runs[i].r;
		if (rc == 0) {
			flow_started(x, r, b->jobs[b->runs[i].first]->id, wall_ms());
			continue;
		}
		inflight_drop(st, x, r);
		refused(x, r, err);
	}
	int started = rc ? 0 : b->nruns;
	free(b->runs);
	free(b->jobs);
	*b = (struct starts){0};
	return started;
}

/* ---- jobs that ended ---- */

static void job_ended(struct state *st, int64_t job_id)
{
	struct job *j = state_job(st, job_id);
	struct flow_exec *x = NULL;
	struct flow_run *r = j && j->task ? flows_run(st, jv_int(j->task, "run", 0), &x) : NULL;
	if (!r || !x || r->job_id != j->id || r->state != FLOW_RUNNING)
		return;
	inflight_drop(st, x, r);
	char why[400];
	text_printf(why, sizeof(why), "job %lld %s: %s", (long long)j->id, job_state_name(j->state),
	            j->reason);
	flow_ended(x, r, j->state == JOB_SUCCEEDED, j->state == JOB_CANCELLED, r->outputs, why,
	           wall_ms());
	if (r->state == FLOW_SUCCEEDED && r->cache_key[0])
		flowcache_record(st->core->store, st->objects, x, r, wall_ms());
	if (r->cache_key[0])
		release_duplicates(st, x, r);
	touch(st, x);
	flows_of(st)->kick = 1;
}

/* ---- the step ---- */

static void ended_event(struct state *st, const struct flow_exec *x)
{
	char kind[32];
	text_printf(kind, sizeof(kind), "workflow.%s", flow_state_name(x->state));
	state_event(st, kind, 0, 0, "workflow %lld (%s) %s%s%s", (long long)x->id, x->name,
	            flow_state_name(x->state), x->reason[0] ? ": " : "", x->reason);
}

/* Starts what may start in x; returns the jobs submitted. A pass that
 * ends runs without a job (cache hits, refusals) may free the tasks that
 * need them: passes go on until one starts nothing (each moves at least
 * one run out of waiting, so they end). */
static int advance(struct state *st, struct flow_exec *x, int64_t now)
{
	struct flows *f = flows_of(st);
	int *ready = xcalloc((size_t)x->nruns, sizeof(int));
	int n, started = 0, any = 0;
	while ((n = flow_next(x, now, ready, x->nruns)) > 0) {
		struct starts b = {0};
		for (int i = 0; i < n; i++)
			prepare_run(st, x, x->runs[ready[i]], &b);
		started += admit_starts(st, x, &b);
		any = 1;
	}
	free(ready);
	for (int k = 0; k < x->nruns; k++) {
		const struct flow_run *r = x->runs[k];
		if (r->state == FLOW_WAITING && r->due_ms > now &&
		    (!f->next_due || r->due_ms < f->next_due))
			f->next_due = r->due_ms;
	}
	if (any)
		touch(st, x);
	return started;
}

void flows_step(struct state *st)
{
	struct flows *f = flows_of(st);
	int64_t now = wall_ms();
	if (!f || (!st->core->nflow_done && !f->kick && !(f->next_due && now >= f->next_due)))
		return;
	for (int i = 0; i < st->core->nflow_done; i++)
		job_ended(st, st->core->flow_done[i]);
	st->core->nflow_done = 0;
	f->kick = 0;
	f->next_due = 0;
	int started = 0;
	for (int i = 0; i < f->nactive; i++)
		started += advance(st, f->active[i], now);
	for (int i = 0; i < f->nactive; i++) {
		struct flow_exec *x = f->active[i];
		if (!flow_settle(x, now))
			continue;
		touch(st, x);
		ended_event(st, x);
		f->active[i--] = f->active[--f->nactive];
	}
	if (started)
		state_schedule(st);
}

/* ---- the API's calls ---- */

static int check_body(const json_t *body, char *err, size_t errlen)
{
	const json_t *wf = json_object_get(body, "workflow");
	if (!json_is_object(wf))
		return snprintf(err, errlen, "workflow: must be an object (the compiled workflow)"),
		       ERR_INVALID;
	const char *bundle = jv_str(body, "bundle", NULL);
	const json_t *b = json_object_get(body, "bundle");
	if (b && !json_is_null(b) &&
	    (!bundle || strncmp(bundle, "sha256/", 7) != 0 || strlen(bundle) != 71))
		return snprintf(err, errlen, "bundle: must be a content key \"sha256/<64 hex>\""),
		       ERR_INVALID;
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)body, k, v)
		if (strcmp(k, "workflow") != 0 && strcmp(k, "bundle") != 0 &&
		    strcmp(k, "no_cache") != 0)
			return snprintf(err, errlen, "%s: unknown key", k), ERR_INVALID;
	struct schema_errors errs = {0};
	if (flow_check(wf, &errs) == 0)
		return 0;
	size_t used = 0;
	for (int i = 0; i < errs.n && used < errlen; i++)
		used += (size_t)snprintf(err + used, errlen - used, "%sworkflow%s%s: %s",
		                         i ? "\n" : "", errs.v[i].path[0] ? "." : "",
		                         errs.v[i].path, errs.v[i].msg);
	return ERR_INVALID;
}

int flows_create(struct state *st, const json_t *body, struct flow_exec **out, char *err,
                 size_t errlen)
{
	int rc = check_body(body, err, errlen);
	if (rc)
		return rc;
	const char *bundle = jv_str(body, "bundle", NULL);
	struct blob_info info;
	if (bundle && st->objects && blob_stat(st->objects, bundle, &info) != 0) {
		snprintf(err, errlen, "bundle: %s is not in the object store (upload it first)",
		         bundle);
		return ERR_INVALID;
	}
	struct flow_exec *x = flow_exec_new(json_object_get(body, "workflow"));
	if (!x)
		return snprintf(err, errlen, "workflow: has no tasks"), ERR_INVALID;
	struct flows *f = flows_of(st);
	x->id = f->nexecs + 1;
	x->submit_ms = wall_ms();
	x->no_cache = jv_bool(body, "no_cache", 0);
	text_printf(x->bundle, sizeof(x->bundle), "%s", bundle ? bundle : "");
	index_exec(f, x);
	add_active(f, x);
	touch(st, x);
	state_event(st, "workflow.submitted", 0, 0,
	            "workflow %lld (%s) submitted: %d task(s), %d run(s)", (long long)x->id,
	            x->name, x->ntasks, x->nruns);
	f->kick = 1;
	*out = x;
	return 0;
}

int flows_submit(struct state *st, const json_t *body, struct flow_exec **out, char *err,
                 size_t errlen)
{
	int rc = flows_create(st, body, out, err, errlen);
	if (rc == 0)
		flows_step(st);
	return rc;
}

int flows_cancel(struct state *st, struct flow_exec *x)
{
	if (x->state != FLOW_RUNNING || x->cancel)
		return 0;
	flow_cancel(x, wall_ms());
	for (int k = 0; k < x->nruns; k++) {
		struct job *j = x->runs[k]->state == FLOW_RUNNING
		                        ? state_job(st, x->runs[k]->job_id)
		                        : NULL;
		if (j)
			state_cancel(st, j);
	}
	touch(st, x);
	flows_of(st)->kick = 1;
	flows_step(st);
	return 0;
}

int flows_recover(struct state *st, struct flow_exec *x, char *err, size_t errlen)
{
	if (flow_recover(x, wall_ms()) != 0) {
		snprintf(err, errlen, "workflow %lld is still running: nothing to recover",
		         (long long)x->id);
		return ERR_CONFLICT;
	}
	add_active(flows_of(st), x);
	touch(st, x);
	state_event(st, "workflow.recovered", 0, 0, "workflow %lld (%s) recovered",
	            (long long)x->id, x->name);
	flows_of(st)->kick = 1;
	return 0;
}

/* One reported output against the task's declaration: 0 or ERR_INVALID. */
static int check_output(struct state *st, const char *k, const char *kind, const json_t *o,
                        char *err, size_t errlen)
{
	if (!kind)
		return snprintf(err, errlen, "outputs.%s: the task declares no such output", k),
		       ERR_INVALID;
	if (!json_is_object(o) || strcmp(jv_str(o, "kind", ""), kind) != 0)
		return snprintf(err, errlen, "outputs.%s: must be an object of kind '%s'", k, kind),
		       ERR_INVALID;
	if (strcmp(kind, "value") == 0) {
		const char *v = jv_str(o, "value", NULL);
		if (!v || strlen(v) > 65536)
			return snprintf(err, errlen,
			                "outputs.%s.value: must be text of at most 64 KiB", k),
			       ERR_INVALID;
		return 0;
	}
	const char *key = jv_str(o, "key", "");
	struct blob_info info;
	if (strncmp(key, "sha256/", 7) != 0 ||
	    (st->objects && blob_stat(st->objects, key, &info) != 0))
		return snprintf(err, errlen, "outputs.%s.key: '%s' is not a stored object", k, key),
		       ERR_INVALID;
	return 0;
}

/* The wrapper's list of the files of the bundle its command read. */
static int check_reads(const json_t *reads, char *err, size_t errlen)
{
	if (!json_is_array(reads) || json_array_size(reads) > CODESET_KEYS_MAX)
		return snprintf(err, errlen,
		                "reads: must be a list of at most %d paths of the code bundle",
		                CODESET_KEYS_MAX),
		       ERR_INVALID;
	size_t i;
	json_t *k;
	json_array_foreach (reads, i, k) {
		const char *why = codeset_key_why(json_string_value(k));
		if (why)
			return snprintf(err, errlen,
			                "reads[%zu]: '%.200s' is not a path of the bundle: %s", i,
			                json_is_string(k) ? json_string_value(k) : "(not text)",
			                why),
			       ERR_INVALID;
	}
	return 0;
}

int flows_outputs(struct state *st, int64_t run_id, int64_t attempt_id, const json_t *outputs,
                  const json_t *reads, char *err, size_t errlen)
{
	struct flow_exec *x = NULL;
	struct flow_run *r = flows_run(st, run_id, &x);
	struct job *j = r ? state_job(st, r->job_id) : NULL;
	if (!r || !j)
		return snprintf(err, errlen, "run %lld: no such run", (long long)run_id),
		       ERR_NOTFOUND;
	const struct attempt *a = j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
	if (r->state != FLOW_RUNNING || !a || a->id != attempt_id)
		return snprintf(err, errlen,
		                "attempt_id: %lld is not the running attempt of run %lld",
		                (long long)attempt_id, (long long)run_id),
		       ERR_CONFLICT;
	if (!json_is_object(outputs))
		return snprintf(err, errlen, "outputs: must be an object"), ERR_INVALID;
	int has_reads = reads && !json_is_null(reads);
	int rc = has_reads ? check_reads(reads, err, errlen) : 0;
	if (rc)
		return rc;
	const json_t *decl = json_object_get(flow_task(x, r->task), "outputs");
	const char *k;
	json_t *o;
	json_object_foreach ((json_t *)outputs, k, o) {
		rc = check_output(st, k, jv_str(decl, k, NULL), o, err, errlen);
		if (rc)
			return rc;
	}
	json_decref(r->outputs);
	r->outputs = json_deep_copy(outputs);
	json_decref(r->reads);
	r->reads = has_reads ? json_deep_copy(reads) : NULL;
	r->dirty = 1;
	touch(st, x);
	return 0;
}

/* ---- loading ---- */

/* A job submitted for a run whose record did not get written before the
 * server stopped: the run takes it. */
static void adopt_job(struct state *st, struct job *j)
{
	struct flow_exec *x = NULL;
	struct flow_run *r = flows_run(st, jv_int(j->task, "run", 0), &x);
	if (!r || !x || j->id <= r->job_id || r->state != FLOW_WAITING)
		return;
	flow_started(x, r, j->id, j->submit_ms);
	touch(st, x);
}

static void load_exec(struct state *st, const json_t *doc, const json_t *runs)
{
	struct flows *f = flows_of(st);
	struct flow_exec *x = flow_exec_load(doc);
	if (!x || x->id != f->nexecs + 1) {
		log_error("a workflow record could not be read; its runs are ignored id=%lld",
		          (long long)jv_int(doc, "id", 0));
		flow_exec_free(x);
		return;
	}
	size_t i;
	json_t *row;
	json_array_foreach (runs, i, row) {
		if (json_integer_value(json_array_get(row, 0)) != x->id)
			continue;
		struct flow_run *r = flow_run_load(json_array_get(row, 1));
		if (!r)
			continue;
		x->runs = xrealloc(x->runs, (size_t)(x->nruns + 1) * sizeof(*x->runs));
		x->runs[x->nruns++] = r;
	}
	if (flow_exec_index(x) != 0) {
		log_error("a workflow's runs do not match its tasks; it is not loaded id=%lld",
		          (long long)x->id);
		flow_exec_free(x);
		return;
	}
	index_exec(f, x);
	if (x->state == FLOW_RUNNING)
		add_active(f, x);
}

int flows_open(struct state *st)
{
	struct flows *f = xcalloc(1, sizeof(*f));
	f->inflight = json_object();
	st->core->flows = f;
	json_t *loaded = st->core->flow_loaded;
	size_t i;
	json_t *doc;
	json_array_foreach (json_object_get(loaded, "execs"), i, doc)
		load_exec(st, doc, json_object_get(loaded, "runs"));
	json_object_clear(loaded);
	for (int64_t id = 1; id <= st->njobs; id++) {
		struct job *j = st->jobs[id - 1];
		if (j && j->task)
			adopt_job(st, j);
	}
	for (int64_t k = 0; k < f->nruns; k++) {
		const struct flow_run *r = f->runs[k];
		const struct job *j = r->state == FLOW_RUNNING ? state_job(st, r->job_id) : NULL;
		if (j && job_state_final(j->state)) { /* it ended while the server was down */
			XGROW(st->core->flow_done, st->core->nflow_done, st->core->capflow_done);
			st->core->flow_done[st->core->nflow_done++] = j->id;
		}
		if (r->state == FLOW_RUNNING && r->cache_key[0])
			inflight_set(st, flows_get(st, f->run_exec[k]), r);
	}
	f->kick = f->nactive > 0;
	flows_step(st);
	log_info("workflows loaded executions=%d running=%d runs=%lld", f->nexecs, f->nactive,
	         (long long)f->nruns);
	return 0;
}
