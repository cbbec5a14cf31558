/* record.c - a workflow execution and its runs as JSON: what the API
 * shows and what the store keeps (engine.h). */
#include <string.h>

#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "flow/engine.h"

static void set_int_if(json_t *o, const char *k, int64_t v)
{
	if (v)
		json_object_set_new(o, k, json_integer(v));
}

json_t *flow_run_json(const struct flow_exec *x, const struct flow_run *r)
{
	char label[96];
	flow_run_label(x, r, label, sizeof(label));
	json_t *o = json_pack("{s:I,s:s,s:s,s:i,s:O,s:s,s:i,s:O}", "id", (json_int_t)r->id, "label",
	                      label, "task", flow_task_name(x, r->task), "index", r->index,
	                      "params", r->params, "state", flow_state_name(r->state), "tries",
	                      r->tries, "jobs", r->jobs);
	json_object_set_new(o, "task_index", json_integer(r->task));
	set_int_if(o, "job_id", r->job_id);
	set_int_if(o, "due_ms", r->due_ms);
	set_int_if(o, "start_ms", r->start_ms);
	set_int_if(o, "end_ms", r->end_ms);
	if (r->outputs)
		json_object_set(o, "outputs", r->outputs);
	if (r->cache_key[0])
		json_object_set_new(o, "cache_key", json_string(r->cache_key));
	if (r->cache_parts)
		json_object_set(o, "cache_parts", r->cache_parts);
	set_int_if(o, "cached_from", r->cached_from);
	set_int_if(o, "cached_exec", r->cached_exec);
	set_int_if(o, "dup_of", r->dup_of);
	if (r->why[0])
		json_object_set_new(o, "why", json_string(r->why));
	if (r->cache_note[0])
		json_object_set_new(o, "cache", json_string(r->cache_note));
	return o;
}

static json_t *counts(const struct flow_exec *x)
{
	int n[FLOW_NSTATES] = {0};
	for (int i = 0; i < x->nruns; i++)
		n[x->runs[i]->state]++;
	json_t *o = json_object();
	for (int s = 0; s < FLOW_NSTATES; s++)
		if (n[s])
			json_object_set_new(o, flow_state_name((enum flow_state)s),
			                    json_integer(n[s]));
	return o;
}

json_t *flow_exec_json(const struct flow_exec *x, int with_runs)
{
	json_t *o =
	        json_pack("{s:I,s:s,s:s,s:I,s:i,s:i,s:o}", "id", (json_int_t)x->id, "name", x->name,
	                  "state", flow_state_name(x->state), "submit_ms", (json_int_t)x->submit_ms,
	                  "tasks", x->ntasks, "runs", x->nruns, "counts", counts(x));
	set_int_if(o, "end_ms", x->end_ms);
	if (x->bundle[0])
		json_object_set_new(o, "bundle", json_string(x->bundle));
	if (x->no_cache)
		json_object_set_new(o, "no_cache", json_true());
	if (x->cancel)
		json_object_set_new(o, "cancel_requested", json_true());
	if (x->reason[0])
		json_object_set_new(o, "reason", json_string(x->reason));
	if (!with_runs)
		return o;
	json_object_set(o, "workflow", x->spec);
	json_t *runs = json_array();
	for (int i = 0; i < x->nruns; i++)
		json_array_append_new(runs, flow_run_json(x, x->runs[i]));
	json_object_set_new(o, "run_list", runs);
	return o;
}

struct flow_run *flow_run_load(const json_t *doc)
{
	enum flow_state s;
	if (!json_is_object(doc) || flow_state_parse(jv_str(doc, "state", ""), &s) != 0)
		return NULL;
	struct flow_run *r = xcalloc(1, sizeof(*r));
	r->id = jv_int(doc, "id", 0);
	r->task = (int)jv_int(doc, "task_index", -1);
	r->index = (int)jv_int(doc, "index", 0);
	json_t *p = json_object_get(doc, "params");
	r->params = json_is_object(p) ? json_deep_copy(p) : json_object();
	r->state = s;
	r->tries = (int)jv_int(doc, "tries", 0);
	r->job_id = jv_int(doc, "job_id", 0);
	json_t *jobs = json_object_get(doc, "jobs");
	r->jobs = json_is_array(jobs) ? json_deep_copy(jobs) : json_array();
	r->due_ms = jv_int(doc, "due_ms", 0);
	r->start_ms = jv_int(doc, "start_ms", 0);
	r->end_ms = jv_int(doc, "end_ms", 0);
	json_t *o = json_object_get(doc, "outputs");
	r->outputs = json_is_object(o) ? json_deep_copy(o) : NULL;
	text_printf(r->cache_key, sizeof(r->cache_key), "%s", jv_str(doc, "cache_key", ""));
	json_t *cp = json_object_get(doc, "cache_parts");
	r->cache_parts = json_is_object(cp) ? json_deep_copy(cp) : NULL;
	r->cached_from = jv_int(doc, "cached_from", 0);
	r->cached_exec = jv_int(doc, "cached_exec", 0);
	r->dup_of = jv_int(doc, "dup_of", 0);
	text_printf(r->why, sizeof(r->why), "%s", jv_str(doc, "why", ""));
	text_printf(r->cache_note, sizeof(r->cache_note), "%s", jv_str(doc, "cache", ""));
	return r;
}

struct flow_exec *flow_exec_load(const json_t *doc)
{
	enum flow_state s;
	const json_t *spec = json_object_get(doc, "workflow");
	if (!json_is_object(spec) || flow_state_parse(jv_str(doc, "state", ""), &s) != 0)
		return NULL;
	struct flow_exec *x = xcalloc(1, sizeof(*x));
	x->id = jv_int(doc, "id", 0);
	x->spec = json_deep_copy(spec);
	text_printf(x->name, sizeof(x->name), "%s", jv_str(doc, "name", "workflow"));
	text_printf(x->bundle, sizeof(x->bundle), "%s", jv_str(doc, "bundle", ""));
	x->no_cache = jv_bool(doc, "no_cache", 0);
	x->cancel = jv_bool(doc, "cancel_requested", 0);
	x->state = s;
	x->submit_ms = jv_int(doc, "submit_ms", 0);
	x->end_ms = jv_int(doc, "end_ms", 0);
	text_printf(x->reason, sizeof(x->reason), "%s", jv_str(doc, "reason", ""));
	return x;
}
