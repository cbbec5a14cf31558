/* job.c - what a workflow run's job is: its submission body and the task
 * wrapper's instructions (engine.h), for the server's engine and for
 * `anvil wf run --local` alike. */
#include <stdio.h>
#include <string.h>

#include "base/jv.h"
#include "base/util.h"
#include "flow/engine.h"
#include "flow/run.h"

static void set_json_env(json_t *env, const char *k, const json_t *v)
{
	char *s = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT);
	json_object_set_new(env, k, json_string(s ? s : "{}"));
	free(s);
}

/* The run's environment: the task's (rendered), then what says which run
 * it is (docs/workflows.md). */
static json_t *run_env(const struct flow_exec *x, const struct flow_run *r, const json_t *t)
{
	json_t *env = json_deep_copy(json_object_get(t, "env"));
	if (!env)
		env = json_object();
	char num[32];
	json_object_set_new(env, "ANVIL_WORKFLOW", json_string(x->name));
	snprintf(num, sizeof(num), "%lld", (long long)x->id);
	json_object_set_new(env, "ANVIL_EXECUTION", json_string(num));
	json_object_set_new(env, "ANVIL_TASK_NAME", json_string(flow_task_name(x, r->task)));
	snprintf(num, sizeof(num), "%d", r->index);
	json_object_set_new(env, "ANVIL_TASK_INDEX", json_string(num));
	set_json_env(env, "ANVIL_PARAMS", r->params);
	json_t *inputs = json_object_get(t, "inputs");
	if (inputs)
		set_json_env(env, "ANVIL_INPUTS", inputs);
	return env;
}

json_t *flow_job_body(const struct flow_exec *x, const struct flow_run *r, const json_t *t)
{
	const json_t *res = json_object_get(t, "resources");
	char label[96], name[160];
	flow_run_label(x, r, label, sizeof(label));
	text_printf(name, sizeof(name), "%s/%s", x->name, label);
	json_t *b = json_pack("{s:s,s:O,s:o,s:I,s:I,s:s,s:I}", "name", name, "command",
	                      json_object_get(t, "command"), "env", run_env(x, r, t), "gpus",
	                      (json_int_t)jv_int(res, "gpus", 1), "nodes",
	                      (json_int_t)jv_int(res, "nodes", 1), "queue",
	                      jv_str(t, "queue", "default"), "priority",
	                      (json_int_t)jv_int(t, "priority", 0));
	if (json_object_get(res, "cpus"))
		json_object_set(b, "cpus", json_object_get(res, "cpus"));
	if (json_object_get(res, "memory_bytes"))
		json_object_set(b, "memory_bytes", json_object_get(res, "memory_bytes"));
	if (json_object_get(res, "gpu_type"))
		json_object_set(b, "gpu_type", json_object_get(res, "gpu_type"));
	if (json_object_get(t, "timeout_ms"))
		json_object_set(b, "time_limit_ms", json_object_get(t, "timeout_ms"));
	if (jv_bool(t, "checkpoint", 0))
		json_object_set_new(b, "checkpointing", json_true());
	return b;
}

json_t *flow_task_doc(const struct flow_exec *x, const struct flow_run *r, const json_t *t,
                      json_t *fetch)
{
	json_t *render_env = json_array();
	const char *k;
	json_t *v;
	json_object_foreach (json_object_get(t, "env"), k, v)
		if (strstr(json_string_value(v), "{{"))
			json_array_append_new(render_env, json_string(k));
	json_t *outputs = json_object_get(t, "outputs");
	json_t *doc = json_pack("{s:I,s:I,s:s,s:i,s:o,s:o,s:o}", "exec", (json_int_t)x->id, "run",
	                        (json_int_t)r->id, "task", flow_task_name(x, r->task), "index",
	                        r->index, "fetch", fetch, "render_env", render_env, "outputs",
	                        outputs ? json_incref(outputs) : json_object());
	if (x->bundle[0])
		json_object_set_new(doc, "bundle", json_string(x->bundle));
	if (jv_bool(t, "checkpoint", 0)) {
		char key[160];
		text_printf(key, sizeof(key), "ckpt/%lld/%s/%d", (long long)x->id,
		            flow_task_name(x, r->task), r->index);
		json_object_set_new(doc, "checkpoint", json_string(key));
	}
	/* A cached task whose key depends on the files of the bundle it reads
	 * (run.h, FLOW_CODE_READS): its wrapper records them */
	int trace = x->bundle[0] && flow_cache_on(t) && flow_cache_code(t) == FLOW_CODE_READS;
	if (trace)
		json_object_set_new(doc, "trace", json_true());
	/* The wrapper moves data: with none to move (no bundle, nothing to fetch
	 * or render, no outputs, no checkpoint) the command runs as any rank
	 * does, without the cost of a second process start */
	int work = x->bundle[0] || json_array_size(fetch) || json_array_size(render_env) ||
	           json_object_size(json_object_get(doc, "outputs")) || jv_bool(t, "checkpoint", 0);
	json_object_set_new(doc, "wrap", json_boolean(work));
	return doc;
}
