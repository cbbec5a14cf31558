/* api_lineage.c - GET /v1/lineage (docs/api.md, "Lineage"): the lineage
 * graph of workflow runs (flow/lineage.h), built from the workflow
 * engine's records (flows.h) and the jobs that ran them, with each run's
 * attempts: the code, the command as resolved, the environment with its
 * secrets removed, where it ran (nodes, GPU indexes and UUIDs), when, and
 * how it ended.
 *
 * A query reads every run of every execution once (the graph's links
 * cross executions through the cache and shared objects), under the state
 * lock, and details only the runs it answers with. HTTP side of the
 * server's layers (core.h): it reads the state files through their
 * headers and changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/util.h"
#include "flow/lineage.h"
#include "server/flows.h"
#include "server/server.h"

struct query {
	json_t *starts; /* node ids */
	enum lineage_dir dir;
	int64_t depth;             /* < 0: no limit */
	const struct flow_exec *x; /* a whole execution's query: it */
};

/* ---- the query ---- */

static int exec_starts(struct state *st, const json_t *q, struct query *out, char *err,
                       size_t errlen)
{
	const char *exec = jv_str(q, "exec", ""), *task = jv_str(q, "task", NULL),
	           *index = jv_str(q, "index", NULL);
	int64_t id = 0, i = 0;
	if (parse_i64(exec, 1, INT64_MAX, &id) != 0)
		return snprintf(err, errlen, "query 'exec': '%s' is not an execution id", exec),
		       ERR_INVALID;
	const struct flow_exec *x = flows_get(st, id);
	if (!x)
		return snprintf(err, errlen, "query 'exec': no workflow execution %lld",
		                (long long)id),
		       ERR_NOTFOUND;
	out->starts = json_array();
	if (!task) {
		for (int k = 0; k < x->nruns; k++)
			json_array_append_new(out->starts,
			                      json_sprintf("run:%lld", (long long)x->runs[k]->id));
		out->x = x;
		return 0;
	}
	int t = flow_task_find(x, task);
	if (t < 0)
		return snprintf(err, errlen, "query 'task': workflow %lld (%s) has no task '%s'",
		                (long long)x->id, x->name, task),
		       ERR_NOTFOUND;
	if (index && parse_i64(index, 0, x->count[t] - 1, &i) != 0)
		return snprintf(err, errlen,
		                "query 'index': '%s' is not an index of task '%s', which has %d "
		                "run(s): 0 to %d",
		                index, task, x->count[t], x->count[t] - 1),
		       ERR_INVALID;
	json_array_append_new(out->starts,
	                      json_sprintf("run:%lld", (long long)x->runs[x->first[t] + i]->id));
	return 0;
}

static int object_key_ok(const char *key)
{
	if (strncmp(key, "sha256/", 7) != 0 || strlen(key) != 71)
		return 0;
	return strspn(key + 7, "0123456789abcdef") == 64;
}

/* The start: an execution's run (or every run), an object or a URI. */
static int starts(struct state *st, const json_t *q, struct query *out, char *err, size_t errlen)
{
	const char *object = jv_str(q, "object", NULL), *uri = jv_str(q, "uri", NULL);
	int given = !!json_object_get(q, "exec") + !!object + !!uri;
	if (given != 1)
		return snprintf(err, errlen,
		                "query: give one of 'exec' (with 'task' and 'index' for one run), "
		                "'object' or 'uri'"),
		       ERR_INVALID;
	if (!json_object_get(q, "exec") &&
	    (json_object_get(q, "task") || json_object_get(q, "index")))
		return snprintf(err, errlen, "query 'task': goes with 'exec'"), ERR_INVALID;
	if (json_object_get(q, "index") && !json_object_get(q, "task"))
		return snprintf(err, errlen, "query 'index': goes with 'task'"), ERR_INVALID;
	if (json_object_get(q, "exec"))
		return exec_starts(st, q, out, err, errlen);
	if (object && !object_key_ok(object))
		return snprintf(
		               err, errlen,
		               "query 'object': '%s' is not an object key (sha256/<64 hex digits>)",
		               object),
		       ERR_INVALID;
	if (uri && !lineage_is_uri(uri))
		return snprintf(err, errlen, "query 'uri': '%s' is not a URI (scheme://...)", uri),
		       ERR_INVALID;
	out->starts = json_pack("[s+]", object ? "object:" : "input:", object ? object : uri);
	return 0;
}

static int parse_query(struct state *st, const json_t *q, struct query *out, char *err,
                       size_t errlen)
{
	int rc = starts(st, q, out, err, errlen);
	if (rc)
		return rc;
	out->dir = out->x ? LINEAGE_BOTH : LINEAGE_UPSTREAM;
	out->depth = out->x ? 1 : -1;
	const char *dir = jv_str(q, "direction", NULL), *depth = jv_str(q, "depth", NULL);
	if (dir && lineage_dir_parse(dir, &out->dir) != 0)
		return snprintf(err, errlen,
		                "query 'direction': '%s' is not upstream, downstream or both", dir),
		       ERR_INVALID;
	if (depth && parse_i64(depth, 0, 1000000, &out->depth) != 0)
		return snprintf(err, errlen,
		                "query 'depth': '%s' is not a number of edges, 0 to "
		                "1000000",
		                depth),
		       ERR_INVALID;
	return 0;
}

/* ---- the graph's records ---- */

/* The ids of the runs of the tasks r's task needs, in its execution. */
static json_t *needed_runs(const struct flow_exec *x, const struct flow_run *r)
{
	json_t *ids = json_array();
	for (int n = x->needs_at[r->task]; n < x->needs_at[r->task + 1]; n++) {
		int d = x->needs[n];
		for (int i = 0; i < x->count[d]; i++)
			json_array_append_new(ids, json_integer(x->runs[x->first[d] + i]->id));
	}
	return ids;
}

static json_t *run_record(struct state *st, const struct flow_exec *x, const struct flow_run *r)
{
	char label[96];
	flow_run_label(x, r, label, sizeof(label));
	json_t *rec = json_pack("{s:I,s:I,s:s,s:s,s:s,s:i,s:s}", "run", (json_int_t)r->id, "exec",
	                        (json_int_t)x->id, "workflow", x->name, "label", label, "task",
	                        flow_task_name(x, r->task), "index", r->index, "state",
	                        flow_state_name(r->state));
	json_object_set_new(rec, "needs", needed_runs(x, r));
	const struct job *j = r->job_id ? state_job(st, r->job_id) : NULL;
	if (j && json_object_get(j->task, "fetch"))
		json_object_set(rec, "fetch", json_object_get(j->task, "fetch"));
	if (r->outputs)
		json_object_set(rec, "outputs", r->outputs);
	if (r->state == FLOW_CACHED && r->cached_from) {
		json_object_set_new(rec, "cached_from", json_integer(r->cached_from));
		json_object_set_new(rec, "cached_exec", json_integer(r->cached_exec));
	}
	json_object_set_new(rec, "uris",
	                    lineage_input_uris(flow_task(x, r->task),
	                                       json_object_get(x->spec, "inputs"), r->params));
	return rec;
}

static void add_all(struct state *st, struct lineage *g)
{
	char err[128];
	const struct flow_exec *x;
	for (int64_t id = 1; (x = flows_get(st, id)) != NULL; id++)
		for (int k = 0; k < x->nruns; k++) {
			json_t *rec = run_record(st, x, x->runs[k]);
			lineage_add(g, rec, err, sizeof(err)); /* run ids are unique: no error */
			json_decref(rec);
		}
}

/* ---- a run's details ---- */

static json_t *opt_ms(int64_t ms)
{
	return ms > 0 ? json_integer(ms) : json_null();
}

static json_t *gpus_json(const struct node *n, uint64_t mask)
{
	json_t *gpus = json_array();
	for (int i = 0; i < MODEL_MAX_GPUS; i++) {
		if (!(mask & (1ull << i)))
			continue;
		const char *uuid = NULL;
		for (int k = 0; n && k < n->ngpus; k++)
			if (n->gpus[k].index == i)
				uuid = n->gpus[k].uuid;
		json_array_append_new(gpus, json_pack("{s:i,s:s?}", "index", i, "uuid",
		                                      uuid && *uuid ? uuid : NULL));
	}
	return gpus;
}

static json_t *rank_json(struct state *st, const struct rank *k)
{
	const struct node *n = state_node(st, k->node_id);
	json_t *o = json_pack("{s:i,s:s,s:s,s:o}", "rank", k->rank, "node", n ? n->name : "?",
	                      "state", rank_state_name(k->state), "gpus", gpus_json(n, k->gpus));
	if (k->state == RANK_EXITED) {
		json_object_set_new(o, "exit_code", json_integer(k->exit_code));
		json_object_set_new(o, "signal", json_integer(k->signal));
	}
	return o;
}

/* The first non-zero exit among the ranks, else 0 once every rank
 * exited; null while one runs or when one never ran. */
static json_t *attempt_exit(const struct attempt *a)
{
	int all = a->nranks > 0;
	for (int i = 0; i < a->nranks; i++) {
		const struct rank *k = &a->ranks[i];
		if (k->state == RANK_EXITED && (k->exit_code || k->signal))
			return json_integer(k->exit_code ? k->exit_code : 128 + k->signal);
		all &= k->state == RANK_EXITED;
	}
	return all ? json_integer(0) : json_null();
}

static json_t *attempt_json(struct state *st, const struct flow_exec *x, const struct job *j,
                            const struct attempt *a)
{
	json_t *o =
	        json_pack("{s:I,s:I,s:i,s:s,s:o,s:o,s:o,s:s}", "attempt", (json_int_t)a->id, "job",
	                  (json_int_t)j->id, "number", a->number, "state", job_state_name(a->state),
	                  "start_ms", opt_ms(a->start_ms), "end_ms", opt_ms(a->end_ms), "exit_code",
	                  attempt_exit(a), "reason", a->end_reason);
	const char *code = jv_str(j->task, "bundle", x->bundle);
	json_object_set_new(o, "code", *code ? json_string(code) : json_null());
	json_object_set_new(o, "command",
	                    lineage_resolve_command(j->command, json_object_get(j->task, "fetch")));
	json_object_set_new(o, "env", lineage_redact(j->env));
	json_t *ranks = json_array(), *nodes = json_array();
	for (int i = 0; i < a->nranks; i++) {
		json_t *r = rank_json(st, &a->ranks[i]);
		const char *name = jv_str(r, "node", "?");
		size_t k;
		json_t *seen;
		int dup = 0;
		json_array_foreach (nodes, k, seen)
			dup |= strcmp(json_string_value(seen), name) == 0;
		if (!dup)
			json_array_append_new(nodes, json_string(name));
		json_array_append_new(ranks, r);
	}
	json_object_set_new(o, "nodes", nodes);
	json_object_set_new(o, "ranks", ranks);
	return o;
}

static json_t *attempts_json(struct state *st, const struct flow_exec *x, const struct flow_run *r)
{
	json_t *out = json_array();
	size_t i;
	json_t *id;
	json_array_foreach (r->jobs, i, id) {
		const struct job *j = state_job(st, json_integer_value(id));
		for (int k = 0; j && k < j->nattempts; k++)
			json_array_append_new(out, attempt_json(st, x, j, j->attempts[k]));
	}
	return out;
}

/* The run's inputs: the workflow's, and its task's as its latest job got
 * them (ANVIL_INPUTS); secrets removed by name. */
static json_t *inputs_json(struct state *st, const struct flow_exec *x, const struct flow_run *r)
{
	const struct job *j = r->job_id ? state_job(st, r->job_id) : NULL;
	const char *text = jv_str(j ? j->env : NULL, "ANVIL_INPUTS", NULL);
	json_t *task = text ? json_loads(text, 0, NULL) : NULL;
	json_t *o = json_pack("{s:o,s:o}", "workflow",
	                      lineage_redact(json_object_get(x->spec, "inputs")), "task",
	                      json_is_object(task) ? lineage_redact(task) : json_null());
	json_decref(task);
	return o;
}

static void detail_run(struct state *st, json_t *node)
{
	struct flow_exec *x = NULL;
	const struct flow_run *r = flows_run(st, jv_int(node, "run", 0), &x);
	if (!r || !x)
		return;
	json_object_set(node, "params", r->params);
	json_object_set_new(node, "code", x->bundle[0] ? json_string(x->bundle) : json_null());
	json_object_set_new(node, "inputs", inputs_json(st, x, r));
	json_object_set_new(node, "start_ms", opt_ms(r->start_ms));
	json_object_set_new(node, "end_ms", opt_ms(r->end_ms));
	json_object_set_new(node, "tries", json_integer(r->tries));
	json_object_set_new(node, "cache", json_string(r->cache_note));
	json_object_set_new(node, "why", json_string(r->why));
	json_object_set_new(node, "attempts", attempts_json(st, x, r));
}

/* ---- the answer ---- */

int api_lineage_query(struct state *st, const json_t *q, json_t **out, char *err, size_t errlen)
{
	struct query qu = {0};
	int rc = parse_query(st, q, &qu, err, errlen);
	struct lineage *g = lineage_new();
	if (rc)
		goto done;
	add_all(st, g);
	size_t i;
	json_t *id;
	json_array_foreach (qu.starts, i, id)
		if (!lineage_has(g, json_string_value(id))) {
			const char *s = json_string_value(id);
			rc = ERR_NOTFOUND;
			snprintf(err, errlen,
			         "query '%s': no workflow run wrote, read or was given %s",
			         strncmp(s, "object:", 7) == 0 ? "object" : "uri",
			         strchr(s, ':') + 1);
			goto done;
		}
	json_t *graph = lineage_walk(g, qu.starts, qu.dir, qu.depth);
	json_t *node;
	json_array_foreach (json_object_get(graph, "nodes"), i, node)
		if (strcmp(jv_str(node, "type", ""), "run") == 0)
			detail_run(st, node);
	json_object_set_new(graph, "query", json_deep_copy(q));
	json_object_set(graph, "starts", qu.starts);
	json_object_set_new(graph, "direction", json_string(lineage_dir_name(qu.dir)));
	json_object_set_new(graph, "depth", qu.depth < 0 ? json_null() : json_integer(qu.depth));
	if (qu.x)
		json_object_set_new(graph, "execution", flow_exec_json(qu.x, 0));
	*out = graph;
done:
	lineage_free(g);
	json_decref(qu.starts);
	return rc;
}

void api_lineage(struct server *s, struct httpd_req *req)
{
	static const char *const keys[] = {"exec", "task",      "index", "object",
	                                   "uri",  "direction", "depth"};
	req->route = "lineage";
	json_t *q = json_object();
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *v = httpd_query(req, keys[i]);
		char *fixed = v ? jv_utf8_fix(v) : NULL;
		if (v)
			json_object_set_new(q, keys[i], json_string(fixed ? fixed : v));
		free(fixed);
	}
	char err[512];
	json_t *out = NULL;
	/* The answer shares values with the engine's records (outputs,
	 * params): it is written out before the lock is let go. */
	state_lock(&s->state);
	int rc = api_lineage_query(&s->state, q, &out, err, sizeof(err));
	if (rc)
		httpd_error(req, rc, err);
	else
		api_send_json(req, 200, out);
	state_unlock(&s->state);
	json_decref(q);
}
