#include "flow/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/util.h"
#include "flow/codeset.h"

#define MAP_MAX 10000 /* children of one sweep */

/* ---- field tables (base/schema.h) ---- */

static const struct schema_field wf_fields[] = {
        {"name", SCHEMA_NAME, 1, 0, 0},
        {"inputs", SCHEMA_OBJ, 0, 0, 0},
        {"tasks", SCHEMA_ARR, 1, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field task_fields[] = {
        {"name", SCHEMA_NAME, 1, 0, 0},
        {"command", SCHEMA_ARR, 1, 0, 0},
        {"resources", SCHEMA_OBJ, 0, 0, 0},
        {"queue", SCHEMA_STR, 0, 1, 63},
        {"priority", SCHEMA_INT, 0, -1000, 1000},
        {"needs", SCHEMA_ARR, 0, 0, 0},
        {"inputs", SCHEMA_OBJ, 0, 0, 0},
        {"outputs", SCHEMA_OBJ, 0, 0, 0},
        {"env", SCHEMA_OBJ, 0, 0, 0},
        {"retries", SCHEMA_OBJ, 0, 0, 0},
        {"timeout_ms", SCHEMA_INT, 0, 1000, 366.0 * 24 * 3600 * 1000},
        {"checkpoint", SCHEMA_BOOL, 0, 0, 0},
        {"cache", SCHEMA_OBJ, 0, 0, 0},
        {"map", SCHEMA_OBJ, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field resource_fields[] = {
        {"gpus", SCHEMA_INT, 0, 0, 64},
        {"nodes", SCHEMA_INT, 0, 1, 1024},
        {"cpus", SCHEMA_NUM, 0, 0.01, 1024},
        {"memory_bytes", SCHEMA_INT, 0, 4.0 * (1 << 20), 64.0 * (1ull << 40)},
        {"gpu_type", SCHEMA_STR, 0, 1, 95},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field retry_fields[] = {
        {"count", SCHEMA_INT, 1, 0, 100},
        {"backoff_ms", SCHEMA_INT, 0, 0, 86400000},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field cache_fields[] = {
        {"enabled", SCHEMA_BOOL, 0, 0, 0},
        {"version", SCHEMA_STR, 0, 0, 63},
        {"code", SCHEMA_ANY, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field map_fields[] = {
        {"grid", SCHEMA_OBJ, 0, 0, 0},
        {"list", SCHEMA_ARR, 0, 0, 0},
        {"concurrency", SCHEMA_INT, 0, 1, MAP_MAX},
        {NULL, 0, 0, 0, 0},
};

/* ---- the parts of a task ---- */

/* cache.code: "reads", "bundle", or the bundle's paths the task uses
 * (flow/codeset.h). */
static void check_code(const json_t *code, const char *path, struct schema_errors *e)
{
	char sub[256];
	if (json_is_string(code)) {
		const char *s = json_string_value(code);
		if (strcmp(s, "reads") != 0 && strcmp(s, "bundle") != 0)
			schema_add(e, path,
			           "'%.100s' is not a way to key the code: 'reads' (the files the "
			           "task read, the default), 'bundle' (all of it) or a list of "
			           "paths",
			           s);
		return;
	}
	if (!json_is_array(code)) {
		schema_add(e, path, "should be 'reads', 'bundle' or a list of paths, not %s",
		           schema_type_name(code));
		return;
	}
	if (json_array_size(code) == 0 || json_array_size(code) > CODESET_PATHS_MAX)
		schema_add(e, path, "should list 1 to %d paths of the bundle", CODESET_PATHS_MAX);
	size_t i;
	json_t *p;
	json_array_foreach (code, i, p) {
		schema_joini(sub, sizeof(sub), path, i);
		const char *why = json_is_string(p) ? codeset_path_why(json_string_value(p)) : NULL;
		if (!json_is_string(p))
			schema_add(e, sub, "should be a path (text), not %s", schema_type_name(p));
		else if (why)
			schema_add(e, sub, "'%.200s' is not a path of the bundle: %s",
			           json_string_value(p), why);
	}
}

static void check_cache(const json_t *cache, const char *path, struct schema_errors *e)
{
	char sub[256];
	if (!schema_fields(cache, cache_fields, path, e))
		return;
	const json_t *code = json_object_get(cache, "code");
	if (code) {
		schema_join(sub, sizeof(sub), path, "code");
		check_code(code, sub, e);
	}
}

static void check_command(const json_t *cmd, const char *path, struct schema_errors *e)
{
	char sub[256];
	size_t i;
	json_t *a;
	if (json_array_size(cmd) == 0 || json_array_size(cmd) > 1024)
		schema_add(e, path, "should list 1 to 1024 arguments, the program first");
	json_array_foreach (cmd, i, a) {
		schema_joini(sub, sizeof(sub), path, i);
		if (!json_is_string(a))
			schema_add(e, sub, "should be text, not %s", schema_type_name(a));
		else if (i == 0 && json_string_length(a) == 0)
			schema_add(e, sub, "the program to run must not be empty");
	}
}

/* {K: scalar} with K a name (inputs, params); what = "input", ... */
static void check_scalars(const json_t *o, const char *path, const char *what,
                          struct schema_errors *e)
{
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		schema_join(sub, sizeof(sub), path, k);
		if (!schema_is_name(k))
			schema_add(
			        e, sub,
			        "'%.64s' is not a name for %s: 1 to 63 letters, digits, '_' or '-'",
			        k, what);
		if (!schema_is_scalar(v))
			schema_add(e, sub,
			           "%s '%.64s' should be text, a number or a boolean, not %s", what,
			           k, schema_type_name(v));
	}
}

static void check_outputs(const json_t *o, const char *path, struct schema_errors *e)
{
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		schema_join(sub, sizeof(sub), path, k);
		const char *s = json_string_value(v);
		if (!schema_is_name(k))
			schema_add(e, sub, "'%.64s' is not a name for an output", k);
		if (!s ||
		    (strcmp(s, "file") != 0 && strcmp(s, "dir") != 0 && strcmp(s, "value") != 0))
			schema_add(e, sub, "an output is \"file\", \"dir\" or \"value\"");
	}
}

static void check_env(const json_t *o, const char *path, struct schema_errors *e)
{
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		schema_join(sub, sizeof(sub), path, k);
		if (!*k || strchr(k, '=') || strlen(k) > 255)
			schema_add(e, sub, "'%.64s' is not a variable name", k);
		if (!json_is_string(v))
			schema_add(e, sub, "should be text, not %s", schema_type_name(v));
	}
}

/* The parameter names of a map; NULL (and errors) when it has none. */
static json_t *map_params(const json_t *m, const char *path, struct schema_errors *e)
{
	char sub[256];
	const json_t *grid = json_object_get(m, "grid"), *list = json_object_get(m, "list");
	if (!!grid == !!list) {
		schema_add(e, path, "a map has either 'grid' or 'list'");
		return NULL;
	}
	json_t *params = json_array();
	double size = 1;
	const char *k;
	json_t *v;
	if (grid) {
		schema_join(sub, sizeof(sub), path, "grid");
		if (json_object_size(grid) == 0)
			schema_add(e, sub, "names no parameter");
		json_object_foreach ((json_t *)grid, k, v) {
			char sub2[256];
			schema_join(sub2, sizeof(sub2), sub, k);
			if (!schema_is_name(k))
				schema_add(e, sub2, "'%.64s' is not a name for a parameter", k);
			if (!json_is_array(v) || json_array_size(v) == 0) {
				schema_add(e, sub2, "should list the parameter's values");
				continue;
			}
			size *= (double)json_array_size(v);
			size_t i;
			json_t *x;
			json_array_foreach (v, i, x)
				if (!schema_is_scalar(x)) {
					char sub3[256];
					schema_joini(sub3, sizeof(sub3), sub2, i);
					schema_add(e, sub3,
					           "a value should be text, a number or a boolean");
				}
			json_array_append_new(params, json_string(k));
		}
	} else {
		schema_join(sub, sizeof(sub), path, "list");
		size = (double)json_array_size(list);
		if (size == 0)
			schema_add(e, sub, "lists no parameter set");
		size_t i;
		json_t *set;
		json_array_foreach (list, i, set) {
			char sub2[256];
			schema_joini(sub2, sizeof(sub2), sub, i);
			if (!json_is_object(set)) {
				schema_add(e, sub2, "a parameter set should be a mapping");
				continue;
			}
			check_scalars(set, sub2, "parameter", e);
			json_object_foreach (set, k, v) {
				int seen = 0;
				for (size_t p = 0; p < json_array_size(params); p++)
					seen |= strcmp(json_string_value(json_array_get(params, p)),
					               k) == 0;
				if (!seen)
					json_array_append_new(params, json_string(k));
			}
		}
	}
	if (size > MAP_MAX)
		schema_add(e, path, "expands to %.0f tasks; at most %d", size, MAP_MAX);
	return params;
}

/* ---- templates ---- */

struct scope {
	const json_t *wf, *task, *params; /* params: NULL when the task has no map */
	const json_t *tasks_by_name;      /* {name: task} */
};

static int in_array(const json_t *arr, const char *s)
{
	size_t i;
	json_t *v;
	json_array_foreach (arr, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), s) == 0)
			return 1;
	return 0;
}

/* One reference, "inputs.x" and the like, trimmed. */
static void check_ref(const struct scope *sc, const char *ref, const char *path,
                      struct schema_errors *e)
{
	char a[64] = "", b[64] = "", c[64] = "", d[64] = "";
	int n = sscanf(ref, "%63[^.].%63[^.].%63[^.].%63s", a, b, c, d);
	if (n == 2 && strcmp(a, "inputs") == 0) {
		if (!json_object_get(json_object_get(sc->wf, "inputs"), b))
			schema_add(e, path, "{{ %s }}: the workflow has no input '%s'", ref, b);
	} else if (n == 2 && strcmp(a, "params") == 0) {
		if (!sc->params)
			schema_add(e, path, "{{ %s }}: only a task with a map has params", ref);
		else if (!in_array(sc->params, b))
			schema_add(e, path, "{{ %s }}: the map has no parameter '%s'", ref, b);
	} else if (n == 4 && strcmp(a, "tasks") == 0 && strcmp(c, "outputs") == 0) {
		const json_t *t = json_object_get(sc->tasks_by_name, b);
		const char *self = json_string_value(json_object_get(sc->task, "name"));
		if (!t)
			schema_add(e, path, "{{ %s }}: there is no task '%s'", ref, b);
		else if (self && strcmp(self, b) == 0)
			schema_add(e, path, "{{ %s }}: a task cannot use its own outputs", ref);
		else if (!json_object_get(json_object_get(t, "outputs"), d))
			schema_add(e, path, "{{ %s }}: task '%s' has no output '%s'", ref, b, d);
		else if (!in_array(json_object_get(sc->task, "needs"), b))
			schema_add(e, path, "{{ %s }}: add '%s' to this task's needs", ref, b);
	} else {
		schema_add(e, path,
		           "{{ %s }}: not a reference; use inputs.NAME, params.NAME or "
		           "tasks.TASK.outputs.NAME",
		           ref);
	}
}

int flow_template_next(const char *s, char *ref, size_t len, const char **start, const char **end)
{
	const char *at = strstr(s, "{{");
	if (!at)
		return 0;
	const char *close = strstr(at + 2, "}}");
	if (!close)
		return -1;
	const char *b = at + 2;
	while (b < close && *b == ' ')
		b++;
	size_t n = (size_t)(close - b);
	while (n > 0 && b[n - 1] == ' ')
		n--;
	snprintf(ref, len, "%.*s", (int)(n < len ? n : len - 1), b);
	*start = at;
	*end = close + 2;
	return 1;
}

static void check_templates(const struct scope *sc, const char *s, const char *path,
                            struct schema_errors *e)
{
	char ref[200];
	const char *start, *end;
	int r;
	while ((r = flow_template_next(s, ref, sizeof(ref), &start, &end)) == 1) {
		check_ref(sc, ref, path, e);
		s = end;
	}
	if (r < 0)
		schema_add(e, path, "a template '{{' is not closed with '}}'");
}

/* Every string in v (command, env, inputs), recursively. */
static void check_strings(const struct scope *sc, const json_t *v, const char *path,
                          struct schema_errors *e)
{
	char sub[256];
	if (json_is_string(v)) {
		check_templates(sc, json_string_value(v), path, e);
	} else if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach (v, i, x) {
			schema_joini(sub, sizeof(sub), path, i);
			check_strings(sc, x, sub, e);
		}
	} else if (json_is_object(v)) {
		const char *k;
		json_t *x;
		json_object_foreach ((json_t *)v, k, x) {
			schema_join(sub, sizeof(sub), path, k);
			check_strings(sc, x, sub, e);
		}
	}
}

/* ---- needs and cycles ---- */

static void check_needs(const json_t *task, const json_t *by_name, const char *path,
                        struct schema_errors *e)
{
	char sub[256];
	const json_t *needs = json_object_get(task, "needs");
	const char *self = json_string_value(json_object_get(task, "name"));
	size_t i;
	json_t *n;
	json_array_foreach (needs, i, n) {
		schema_joini(sub, sizeof(sub), path, i);
		const char *s = json_string_value(n);
		if (!s)
			schema_add(e, sub, "should be a task's name, not %s", schema_type_name(n));
		else if (!json_object_get(by_name, s))
			schema_add(e, sub, "there is no task '%.64s'", s);
		else if (self && strcmp(s, self) == 0)
			schema_add(e, sub, "a task cannot need itself");
		else
			for (size_t k = 0; k < i; k++)
				if (json_equal(json_array_get(needs, k), n))
					schema_add(e, sub, "'%.64s' is listed twice", s);
	}
}

/* Depth-first search for a cycle through needs; colour: 0 new, 1 on the
 * path, 2 done. Reports each cycle once, at the task that closes it. */
static void find_cycles(const json_t *tasks, const json_t *by_index, int i, int *colour, int *stack,
                        int depth, struct schema_errors *e)
{
	colour[i] = 1;
	stack[depth] = i;
	const json_t *needs = json_object_get(json_array_get(tasks, (size_t)i), "needs");
	size_t k;
	json_t *n;
	json_array_foreach (needs, k, n) {
		json_t *idx =
		        json_is_string(n) ? json_object_get(by_index, json_string_value(n)) : NULL;
		if (!idx)
			continue;
		int j = (int)json_integer_value(idx);
		if (colour[j] == 1) {
			char cycle[256] = "", path[64];
			int from = depth;
			while (from > 0 && stack[from] != j)
				from--;
			for (int s = from; s <= depth; s++) {
				size_t len = strlen(cycle);
				snprintf(cycle + len, sizeof(cycle) - len, "%s -> ",
				         json_string_value(json_object_get(
				                 json_array_get(tasks, (size_t)stack[s]), "name")));
			}
			size_t len = strlen(cycle);
			snprintf(cycle + len, sizeof(cycle) - len, "%s", json_string_value(n));
			snprintf(path, sizeof(path), "tasks[%d].needs[%zu]", i, k);
			schema_add(e, path, "a cycle: %s", cycle);
		} else if (colour[j] == 0) {
			find_cycles(tasks, by_index, j, colour, stack, depth + 1, e);
		}
	}
	colour[i] = 2;
}

/* ---- the whole ---- */

static void check_task(const json_t *wf, const json_t *t, const json_t *by_name, const char *path,
                       struct schema_errors *e)
{
	char sub[256];
	if (!schema_fields(t, task_fields, path, e))
		return;
	const json_t *v;
#define PART(key, fn)                                                                              \
	if ((v = json_object_get(t, key)) != NULL) {                                               \
		schema_join(sub, sizeof(sub), path, key);                                          \
		fn;                                                                                \
	}
	PART("command", if (json_is_array(v)) check_command(v, sub, e));
	PART("resources", if (json_is_object(v)) schema_fields(v, resource_fields, sub, e));
	PART("needs", if (json_is_array(v)) check_needs(t, by_name, sub, e));
	PART("inputs", if (json_is_object(v)) check_scalars(v, sub, "input", e));
	PART("outputs", if (json_is_object(v)) check_outputs(v, sub, e));
	PART("env", if (json_is_object(v)) check_env(v, sub, e));
	PART("retries", if (json_is_object(v)) schema_fields(v, retry_fields, sub, e));
	PART("cache", if (json_is_object(v)) check_cache(v, sub, e));
	json_t *params = NULL;
	PART("map", if (json_is_object(v) && schema_fields(v, map_fields, sub, e)) params =
	                    map_params(v, sub, e));
#undef PART
	struct scope sc = {.wf = wf, .task = t, .params = params, .tasks_by_name = by_name};
	static const char *const templated[] = {"command", "env", "inputs"};
	for (size_t i = 0; i < sizeof(templated) / sizeof(templated[0]); i++)
		if ((v = json_object_get(t, templated[i])) != NULL) {
			schema_join(sub, sizeof(sub), path, templated[i]);
			check_strings(&sc, v, sub, e);
		}
	json_decref(params);
}

int flow_check(const json_t *wf, struct schema_errors *e)
{
	int before = e->n + e->dropped;
	if (!schema_fields(wf, wf_fields, "", e))
		return e->n + e->dropped - before;
	const json_t *inputs = json_object_get(wf, "inputs");
	if (json_is_object(inputs))
		check_scalars(inputs, "inputs", "input", e);
	const json_t *tasks = json_object_get(wf, "tasks");
	if (!json_is_array(tasks))
		return e->n + e->dropped - before;
	if (json_array_size(tasks) == 0 || json_array_size(tasks) > FLOW_MAX_TASKS)
		schema_add(e, "tasks", "should list 1 to %d tasks", FLOW_MAX_TASKS);
	json_t *by_name = json_object(), *by_index = json_object();
	char sub[256];
	size_t i;
	json_t *t;
	json_array_foreach (tasks, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		if (!name)
			continue;
		if (json_object_get(by_name, name)) {
			char at[256];
			schema_joini(at, sizeof(at), "tasks", i);
			schema_join(sub, sizeof(sub), at, "name");
			schema_add(e, sub, "a task named '%.64s' is already defined", name);
			continue;
		}
		json_object_set(by_name, name, t);
		json_object_set_new(by_index, name, json_integer((json_int_t)i));
	}
	json_array_foreach (tasks, i, t) {
		schema_joini(sub, sizeof(sub), "tasks", i);
		check_task(wf, t, by_name, sub, e);
	}
	size_t n = json_array_size(tasks);
	if (n && n <= FLOW_MAX_TASKS) {
		int *colour = xcalloc(n, sizeof(int)), *stack = xcalloc(n + 1, sizeof(int));
		for (size_t k = 0; k < n; k++)
			if (!colour[k])
				find_cycles(tasks, by_index, (int)k, colour, stack, 0, e);
		free(colour);
		free(stack);
	}
	json_decref(by_name);
	json_decref(by_index);
	return e->n + e->dropped - before;
}
