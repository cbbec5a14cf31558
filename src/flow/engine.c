#include "flow/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "flow/run.h"
#include "flow/spec.h"

static const char *const state_names[FLOW_NSTATES] = {
        "waiting", "running", "succeeded", "cached", "failed", "cancelled", "skipped",
};

const char *flow_state_name(enum flow_state s)
{
	return s < FLOW_NSTATES ? state_names[s] : "?";
}

int flow_state_parse(const char *s, enum flow_state *out)
{
	for (int i = 0; s && i < FLOW_NSTATES; i++)
		if (strcmp(s, state_names[i]) == 0) {
			*out = (enum flow_state)i;
			return 0;
		}
	return -1;
}

int flow_state_final(enum flow_state s)
{
	return s >= FLOW_SUCCEEDED;
}

int flow_state_ok(enum flow_state s)
{
	return s == FLOW_SUCCEEDED || s == FLOW_CACHED;
}

/* ---- the execution and its index ---- */

static struct flow_run *run_new(int task, int index, const json_t *params)
{
	struct flow_run *r = xcalloc(1, sizeof(*r));
	r->task = task;
	r->index = index;
	r->params = json_deep_copy(params);
	r->jobs = json_array();
	r->dirty = 1;
	return r;
}

static void run_free(struct flow_run *r)
{
	if (!r)
		return;
	json_decref(r->params);
	json_decref(r->jobs);
	json_decref(r->outputs);
	json_decref(r->cache_parts);
	json_decref(r->reads);
	free(r);
}

static json_t *tasks_of(const struct flow_exec *x)
{
	return json_object_get(x->spec, "tasks");
}

struct flow_exec *flow_exec_new(const json_t *spec)
{
	const json_t *tasks = json_object_get(spec, "tasks");
	if (!json_array_size(tasks))
		return NULL;
	struct flow_exec *x = xcalloc(1, sizeof(*x));
	x->spec = json_deep_copy(spec);
	text_printf(x->name, sizeof(x->name), "%s", jv_str(spec, "name", "workflow"));
	size_t t;
	json_t *task;
	json_array_foreach (tasks_of(x), t, task) {
		json_t *sets = flow_expand(task);
		size_t i;
		json_t *set;
		x->runs = xrealloc(x->runs, (size_t)(x->nruns + (int)json_array_size(sets)) *
		                                    sizeof(*x->runs));
		json_array_foreach (sets, i, set)
			x->runs[x->nruns++] = run_new((int)t, (int)i, set);
		json_decref(sets);
	}
	x->state = FLOW_RUNNING;
	x->dirty = 1;
	if (flow_exec_index(x) != 0) {
		flow_exec_free(x);
		return NULL;
	}
	return x;
}

void flow_exec_free(struct flow_exec *x)
{
	if (!x)
		return;
	for (int i = 0; i < x->nruns; i++)
		run_free(x->runs[i]);
	free(x->runs);
	free(x->first);
	free(x->count);
	free(x->needs);
	free(x->needs_at);
	json_decref(x->spec);
	json_decref(x->code_index);
	free(x);
}

/* needs/needs_at: each task's needs as task indexes (names the spec check
 * refused are left out). */
static void index_needs(struct flow_exec *x)
{
	free(x->needs);
	free(x->needs_at);
	x->needs_at = xcalloc((size_t)x->ntasks + 1, sizeof(int));
	size_t total = 0;
	for (int t = 0; t < x->ntasks; t++)
		total += json_array_size(json_object_get(flow_task(x, t), "needs"));
	x->needs = xcalloc(total + 1, sizeof(int));
	int n = 0;
	for (int t = 0; t < x->ntasks; t++) {
		x->needs_at[t] = n;
		size_t i;
		json_t *name;
		json_array_foreach (json_object_get(flow_task(x, t), "needs"), i, name) {
			int d = flow_task_find(x, json_string_value(name));
			if (d >= 0)
				x->needs[n++] = d;
		}
	}
	x->needs_at[x->ntasks] = n;
}

int flow_exec_index(struct flow_exec *x)
{
	x->ntasks = (int)json_array_size(tasks_of(x));
	free(x->first);
	free(x->count);
	x->first = xcalloc((size_t)x->ntasks + 1, sizeof(int));
	x->count = xcalloc((size_t)x->ntasks + 1, sizeof(int));
	index_needs(x);
	int prev = -1;
	for (int i = 0; i < x->nruns; i++) {
		const struct flow_run *r = x->runs[i];
		if (r->task < 0 || r->task >= x->ntasks || r->task < prev)
			return -1;
		if (r->task != prev)
			x->first[r->task] = i;
		if (r->index != x->count[r->task])
			return -1;
		x->count[r->task]++;
		prev = r->task;
	}
	for (int t = 0; t < x->ntasks; t++)
		if (x->count[t] == 0)
			return -1;
	return 0;
}

const json_t *flow_task(const struct flow_exec *x, int task)
{
	return json_array_get(tasks_of(x), (size_t)task);
}

const char *flow_task_name(const struct flow_exec *x, int task)
{
	return jv_str(flow_task(x, task), "name", "?");
}

int flow_task_find(const struct flow_exec *x, const char *name)
{
	for (int t = 0; t < x->ntasks; t++)
		if (strcmp(flow_task_name(x, t), name) == 0)
			return t;
	return -1;
}

void flow_run_label(const struct flow_exec *x, const struct flow_run *r, char *out, size_t len)
{
	if (json_object_get(flow_task(x, r->task), "map"))
		text_printf(out, len, "%s[%d]", flow_task_name(x, r->task), r->index);
	else
		text_printf(out, len, "%s", flow_task_name(x, r->task));
}

enum flow_state flow_task_state(const struct flow_exec *x, int task)
{
	int ok = 0, bad = 0, final = 0, running = 0;
	for (int i = 0; i < x->count[task]; i++) {
		enum flow_state s = x->runs[x->first[task] + i]->state;
		ok += flow_state_ok(s);
		bad += flow_state_final(s) && !flow_state_ok(s);
		final += flow_state_final(s);
		running += s == FLOW_RUNNING;
	}
	if (ok == x->count[task])
		return FLOW_SUCCEEDED;
	if (bad && final == x->count[task])
		return FLOW_FAILED;
	return running || final ? FLOW_RUNNING : FLOW_WAITING;
}

/* ---- what may start ---- */

/* A run changed: the server writes it (the execution's own record only
 * when its own fields change: x->dirty). */
static void mark(struct flow_exec *x, struct flow_run *r)
{
	(void)x;
	r->dirty = 1;
}

/* 1 when every task t needs has succeeded; -1 (name in failed) when one
 * failed for good; 0 while one is still to finish. */
static int needs_state(const struct flow_exec *x, int t, const char **failed)
{
	int all = 1;
	for (int i = x->needs_at[t]; i < x->needs_at[t + 1]; i++) {
		int d = x->needs[i];
		enum flow_state s = flow_task_state(x, d);
		if (s == FLOW_FAILED) {
			*failed = flow_task_name(x, d);
			return -1;
		}
		all &= s == FLOW_SUCCEEDED;
	}
	return all;
}

static int running_of(const struct flow_exec *x, int t)
{
	int n = 0;
	for (int i = 0; i < x->count[t]; i++)
		n += x->runs[x->first[t] + i]->state == FLOW_RUNNING;
	return n;
}

static void skip_task(struct flow_exec *x, int t, const char *failed, int64_t now_ms)
{
	for (int i = 0; i < x->count[t]; i++) {
		struct flow_run *r = x->runs[x->first[t] + i];
		if (r->state != FLOW_WAITING)
			continue;
		r->state = FLOW_SKIPPED;
		r->end_ms = now_ms;
		text_printf(r->why, sizeof(r->why), "needs task '%s', which did not succeed",
		            failed);
		mark(x, r);
	}
}

int flow_next(struct flow_exec *x, int64_t now_ms, int *out, int max)
{
	int n = 0;
	for (int t = 0; t < x->ntasks && n < max; t++) {
		const char *failed = NULL;
		int st = needs_state(x, t, &failed);
		if (st < 0)
			skip_task(x, t, failed, now_ms);
		if (st <= 0 || x->cancel)
			continue;
		int limit = (int)jv_int(json_object_get(flow_task(x, t), "map"), "concurrency", 0);
		int room = limit > 0 ? limit - running_of(x, t) : x->count[t];
		for (int i = 0; i < x->count[t] && room > 0 && n < max; i++) {
			struct flow_run *r = x->runs[x->first[t] + i];
			if (r->state != FLOW_WAITING || r->due_ms > now_ms || r->dup_of)
				continue;
			out[n++] = x->first[t] + i;
			room--;
		}
	}
	return n;
}

/* ---- templates ---- */

static const char *output_kind(const struct flow_exec *x, int t, const char *k)
{
	return jv_str(json_object_get(flow_task(x, t), "outputs"), k, NULL);
}

/* Task d's value outputs: {K: value} (a sweep: {K: [values]}). */
static json_t *value_outputs(const struct flow_exec *x, int d)
{
	json_t *outs = json_object();
	const char *k;
	json_t *kind;
	json_object_foreach (json_object_get(flow_task(x, d), "outputs"), k, kind) {
		if (strcmp(json_string_value(kind), "value") != 0)
			continue;
		json_t *list = json_array();
		for (int i = 0; i < x->count[d]; i++) {
			const struct flow_run *c = x->runs[x->first[d] + i];
			json_t *v = json_object_get(json_object_get(c->outputs, k), "value");
			json_array_append(list, v ? v : json_null());
		}
		if (!json_object_get(flow_task(x, d), "map")) {
			json_object_set(outs, k, json_array_get(list, 0));
			json_decref(list);
		} else {
			json_object_set_new(outs, k, list);
		}
	}
	return outs;
}

json_t *flow_context(const struct flow_exec *x, const struct flow_run *r)
{
	json_t *tasks = json_object();
	const json_t *needs = json_object_get(flow_task(x, r->task), "needs");
	size_t i;
	json_t *n;
	json_array_foreach (needs, i, n) {
		int d = flow_task_find(x, json_string_value(n));
		if (d >= 0)
			json_object_set_new(tasks, flow_task_name(x, d),
			                    json_pack("{s:o}", "outputs", value_outputs(x, d)));
	}
	return json_pack("{s:O?,s:O,s:o}", "inputs", json_object_get(x->spec, "inputs"), "params",
	                 r->params, "tasks", tasks);
}

/* The fetch item for "tasks.T.outputs.K" if it names an object output of
 * a task the run needs, else NULL. */
static json_t *fetch_item(const struct flow_exec *x, const char *ref)
{
	char t[64], k[64];
	if (sscanf(ref, "tasks.%63[^.].outputs.%63s", t, k) != 2)
		return NULL;
	int d = flow_task_find(x, t);
	const char *kind = d >= 0 ? output_kind(x, d, k) : NULL;
	if (!kind || strcmp(kind, "value") == 0)
		return NULL;
	json_t *keys = json_array();
	for (int i = 0; i < x->count[d]; i++) {
		const json_t *o = json_object_get(x->runs[x->first[d] + i]->outputs, k);
		json_array_append(keys, json_object_get(o, "key") ? json_object_get(o, "key")
		                                                  : json_null());
	}
	return json_pack("{s:s,s:s,s:o,s:b}", "ref", ref, "kind", kind, "keys", keys, "list",
	                 json_object_get(flow_task(x, d), "map") != NULL);
}

static void fetch_scan(const struct flow_exec *x, const char *s, json_t *items)
{
	char ref[200];
	const char *start, *end;
	while (s && flow_template_next(s, ref, sizeof(ref), &start, &end) == 1) {
		s = end;
		size_t i;
		json_t *it;
		int seen = 0;
		json_array_foreach (items, i, it)
			seen |= strcmp(jv_str(it, "ref", ""), ref) == 0;
		json_t *item = seen ? NULL : fetch_item(x, ref);
		if (item)
			json_array_append_new(items, item);
	}
}

static void fetch_scan_all(const struct flow_exec *x, const json_t *v, json_t *items)
{
	size_t i;
	const char *k;
	json_t *e;
	if (json_is_string(v))
		fetch_scan(x, json_string_value(v), items);
	else if (json_is_array(v))
		json_array_foreach (v, i, e)
			fetch_scan_all(x, e, items);
	else if (json_is_object(v))
		json_object_foreach ((json_t *)v, k, e)
			fetch_scan_all(x, e, items);
}

json_t *flow_fetch(const struct flow_exec *x, const struct flow_run *r)
{
	const json_t *task = flow_task(x, r->task);
	json_t *items = json_array();
	fetch_scan_all(x, json_object_get(task, "command"), items);
	fetch_scan_all(x, json_object_get(task, "env"), items);
	fetch_scan_all(x, json_object_get(task, "inputs"), items);
	return items;
}

/* Renders every string in v (a copy) in place; -1 with err. */
static int render_all(json_t *v, const json_t *ctx, char *err, size_t errlen)
{
	size_t i;
	const char *k;
	json_t *e;
	if (json_is_array(v)) {
		json_array_foreach (v, i, e) {
			if (json_is_string(e)) {
				char *s = flow_render_known(json_string_value(e), ctx, err, errlen);
				if (!s)
					return -1;
				json_array_set_new(v, i, json_string(s));
				free(s);
			} else if (render_all(e, ctx, err, errlen) != 0) {
				return -1;
			}
		}
	} else if (json_is_object(v)) {
		json_object_foreach (v, k, e) {
			if (json_is_string(e)) {
				char *s = flow_render_known(json_string_value(e), ctx, err, errlen);
				if (!s)
					return -1;
				json_object_set_new(v, k, json_string(s));
				free(s);
			} else if (render_all(e, ctx, err, errlen) != 0) {
				return -1;
			}
		}
	}
	return 0;
}

json_t *flow_rendered(const struct flow_exec *x, const struct flow_run *r, char *err, size_t errlen)
{
	/* a shallow copy without the sweep (a run is one point of it: copying
	 * a 10,000-point list for each run would cost the square), with deep
	 * copies of the parts rendered */
	json_t *task = json_copy((json_t *)flow_task(x, r->task));
	json_object_del(task, "map");
	json_t *ctx = flow_context(x, r);
	static const char *const parts[] = {"command", "env", "inputs"};
	int rc = 0;
	for (size_t i = 0; i < 3 && rc == 0; i++) {
		json_t *v = json_object_get(task, parts[i]);
		if (!v)
			continue;
		v = json_deep_copy(v);
		json_object_set_new(task, parts[i], v);
		rc = render_all(v, ctx, err, errlen);
	}
	json_decref(ctx);
	if (rc != 0) {
		json_decref(task);
		return NULL;
	}
	json_object_set(task, "params", r->params);
	return task;
}

/* ---- moves ---- */

void flow_started(struct flow_exec *x, struct flow_run *r, int64_t job_id, int64_t now_ms)
{
	r->state = FLOW_RUNNING;
	r->tries++;
	r->job_id = job_id;
	json_array_append_new(r->jobs, json_integer(job_id));
	if (!r->start_ms)
		r->start_ms = now_ms;
	r->end_ms = 0;
	r->due_ms = 0;
	json_decref(r->outputs);
	r->outputs = NULL;
	json_decref(r->reads);
	r->reads = NULL;
	mark(x, r);
}

void flow_cached(struct flow_exec *x, struct flow_run *r, const json_t *outputs, int64_t exec,
                 int64_t from, int64_t now_ms)
{
	r->state = FLOW_CACHED;
	json_decref(r->outputs);
	r->outputs = json_deep_copy(outputs);
	r->cached_exec = exec;
	r->cached_from = from;
	r->dup_of = 0;
	r->start_ms = r->end_ms = now_ms;
	mark(x, r);
}

/* The first declared output missing from outputs, or NULL. */
static const char *missing_output(const struct flow_exec *x, const struct flow_run *r,
                                  const json_t *outputs)
{
	const char *k;
	json_t *kind;
	json_object_foreach (json_object_get(flow_task(x, r->task), "outputs"), k, kind)
		if (!json_object_get(outputs, k))
			return k;
	return NULL;
}

void flow_ended(struct flow_exec *x, struct flow_run *r, int ok, int cancelled,
                const json_t *outputs, const char *why, int64_t now_ms)
{
	const char *missing = ok ? missing_output(x, r, outputs) : NULL;
	mark(x, r);
	r->end_ms = now_ms;
	if (ok && !missing) {
		json_t *keep = outputs ? json_deep_copy(outputs) : json_object();
		r->state = FLOW_SUCCEEDED;
		json_decref(r->outputs);
		r->outputs = keep;
		r->why[0] = '\0';
		return;
	}
	if (missing)
		text_printf(r->why, sizeof(r->why), "output '%s' was not reported", missing);
	else
		text_printf(r->why, sizeof(r->why), "%s", why ? why : "its job failed");
	const json_t *retries = json_object_get(flow_task(x, r->task), "retries");
	if (cancelled || x->cancel) {
		r->state = FLOW_CANCELLED;
	} else if (r->tries <= jv_int(retries, "count", 0)) {
		r->state = FLOW_WAITING;
		r->due_ms = now_ms + jv_int(retries, "backoff_ms", 0);
		r->end_ms = 0;
	} else {
		r->state = FLOW_FAILED;
	}
}

void flow_failed(struct flow_exec *x, struct flow_run *r, const char *why, int64_t now_ms)
{
	r->state = FLOW_FAILED;
	r->start_ms = r->start_ms ? r->start_ms : now_ms;
	r->end_ms = now_ms;
	text_printf(r->why, sizeof(r->why), "%s", why);
	mark(x, r);
}

void flow_cancel(struct flow_exec *x, int64_t now_ms)
{
	x->cancel = 1;
	x->dirty = 1;
	for (int i = 0; i < x->nruns; i++) {
		struct flow_run *r = x->runs[i];
		if (r->state != FLOW_WAITING)
			continue;
		r->state = FLOW_CANCELLED;
		r->end_ms = now_ms;
		text_printf(r->why, sizeof(r->why), "the execution was cancelled");
		mark(x, r);
	}
}

int flow_recover(struct flow_exec *x, int64_t now_ms)
{
	if (x->state == FLOW_RUNNING)
		return -1;
	for (int i = 0; i < x->nruns; i++) {
		struct flow_run *r = x->runs[i];
		if (!flow_state_final(r->state) || flow_state_ok(r->state))
			continue;
		r->state = FLOW_WAITING;
		r->tries = 0;
		r->due_ms = 0;
		r->start_ms = r->end_ms = 0;
		r->why[0] = '\0';
		mark(x, r);
	}
	x->cancel = 0;
	x->state = FLOW_RUNNING;
	x->end_ms = 0;
	x->reason[0] = '\0';
	(void)now_ms;
	x->dirty = 1;
	return 0;
}

int flow_settle(struct flow_exec *x, int64_t now_ms)
{
	if (x->state != FLOW_RUNNING)
		return 0;
	int failed = -1;
	for (int i = 0; i < x->nruns; i++) {
		if (!flow_state_final(x->runs[i]->state))
			return 0;
		if (failed < 0 && !flow_state_ok(x->runs[i]->state))
			failed = i;
	}
	x->end_ms = now_ms;
	x->dirty = 1;
	if (x->cancel) {
		x->state = FLOW_CANCELLED;
		text_printf(x->reason, sizeof(x->reason), "cancelled");
	} else if (failed >= 0) {
		const struct flow_run *r = x->runs[failed];
		char label[96];
		flow_run_label(x, r, label, sizeof(label));
		x->state = FLOW_FAILED;
		text_printf(x->reason, sizeof(x->reason), "task %s %s: %s", label,
		            flow_state_name(r->state), r->why);
	} else {
		x->state = FLOW_SUCCEEDED;
	}
	return 1;
}
