#include "flow/spec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/util.h"
#include "flow/ydoc.h"

#define MAP_MAX 10000 /* children of one sweep */

static struct flow_error *add(struct flow_errors *e, const char *path, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* The error added, or NULL when there were too many to keep. */
static struct flow_error *add(struct flow_errors *e, const char *path, const char *fmt, ...)
{
	if (e->n == FLOW_MAX_ERRORS) {
		e->dropped++;
		return NULL;
	}
	struct flow_error *x = &e->v[e->n++];
	snprintf(x->path, sizeof(x->path), "%s", path);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->msg, sizeof(x->msg), fmt, ap);
	va_end(ap);
	x->at_key = 0;
	return x;
}

static void join(char *out, size_t len, const char *path, const char *key)
{
	ydoc_path_join(out, len, path, key, 0);
}

static void joini(char *out, size_t len, const char *path, size_t i)
{
	ydoc_path_join(out, len, path, NULL, i);
}

static const char *type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "a mapping";
	case JSON_ARRAY: return "a list";
	case JSON_STRING: return "text";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "empty";
	}
	return "?";
}

/* Letters, digits, '_' and '-', 1 to 63 of them. */
static int is_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

static int is_scalar(const json_t *v)
{
	return json_is_string(v) || json_is_number(v) || json_is_boolean(v);
}

/* ---- field tables ---- */

enum ftype { F_STR, F_NAME, F_INT, F_NUM, F_BOOL, F_OBJ, F_ARR };

struct field {
	const char *key;
	enum ftype type;
	int required;
	double min, max; /* ints and numbers: the range; strings: the length */
};

static int type_ok(const json_t *v, enum ftype t)
{
	switch (t) {
	case F_STR:
	case F_NAME: return json_is_string(v);
	case F_INT: return json_is_integer(v);
	case F_NUM: return json_is_number(v);
	case F_BOOL: return json_is_boolean(v);
	case F_OBJ: return json_is_object(v);
	case F_ARR: return json_is_array(v);
	}
	return 0;
}

static const char *const want_names[] = {"text",      "a name",    "an integer", "a number",
                                         "a boolean", "a mapping", "a list"};

static void check_one(const json_t *v, const struct field *f, const char *path,
                      struct flow_errors *e)
{
	if (!type_ok(v, f->type)) {
		add(e, path, "should be %s, not %s", want_names[f->type], type_name(v));
		return;
	}
	if (f->type == F_NAME && !is_name(json_string_value(v)))
		add(e, path, "'%.64s' is not a name: 1 to 63 letters, digits, '_' or '-'",
		    json_string_value(v));
	if (f->type == F_STR && (json_string_length(v) < f->min || json_string_length(v) > f->max))
		add(e, path, "should be %g to %g characters long", f->min, f->max);
	if ((f->type == F_INT || f->type == F_NUM) &&
	    (json_number_value(v) < f->min || json_number_value(v) > f->max))
		add(e, path, "%g is out of range: %g to %g", json_number_value(v), f->min, f->max);
}

/* Checks o's keys against fields (NULL-key ended): unknown keys, missing
 * required ones, types and ranges. Returns 0 when o is not an object. */
static int check_fields(const json_t *o, const struct field *fields, const char *path,
                        struct flow_errors *e)
{
	if (!json_is_object(o)) {
		add(e, path, "should be a mapping, not %s", type_name(o));
		return 0;
	}
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		const struct field *f = fields;
		while (f->key && strcmp(f->key, k) != 0)
			f++;
		join(sub, sizeof(sub), path, k);
		struct flow_error *x = f->key ? NULL : add(e, sub, "unknown key '%.64s'", k);
		if (x)
			x->at_key = 1;
		if (f->key)
			check_one(v, f, sub, e);
	}
	for (const struct field *f = fields; f->key; f++)
		if (f->required && !json_object_get(o, f->key))
			add(e, path, "'%s' is missing", f->key);
	return 1;
}

static const struct field wf_fields[] = {
        {"name", F_NAME, 1, 0, 0},
        {"inputs", F_OBJ, 0, 0, 0},
        {"tasks", F_ARR, 1, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct field task_fields[] = {
        {"name", F_NAME, 1, 0, 0},
        {"command", F_ARR, 1, 0, 0},
        {"resources", F_OBJ, 0, 0, 0},
        {"queue", F_STR, 0, 1, 63},
        {"priority", F_INT, 0, -1000, 1000},
        {"needs", F_ARR, 0, 0, 0},
        {"inputs", F_OBJ, 0, 0, 0},
        {"outputs", F_OBJ, 0, 0, 0},
        {"env", F_OBJ, 0, 0, 0},
        {"retries", F_OBJ, 0, 0, 0},
        {"timeout_ms", F_INT, 0, 1000, 366.0 * 24 * 3600 * 1000},
        {"checkpoint", F_BOOL, 0, 0, 0},
        {"cache", F_OBJ, 0, 0, 0},
        {"map", F_OBJ, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct field resource_fields[] = {
        {"gpus", F_INT, 0, 0, 64},
        {"nodes", F_INT, 0, 1, 1024},
        {"cpus", F_NUM, 0, 0.01, 1024},
        {"memory_bytes", F_INT, 0, 4.0 * (1 << 20), 64.0 * (1ull << 40)},
        {"gpu_type", F_STR, 0, 1, 95},
        {NULL, 0, 0, 0, 0},
};

static const struct field retry_fields[] = {
        {"count", F_INT, 1, 0, 100},
        {"backoff_ms", F_INT, 0, 0, 86400000},
        {NULL, 0, 0, 0, 0},
};

static const struct field cache_fields[] = {
        {"enabled", F_BOOL, 0, 0, 0},
        {"version", F_STR, 0, 0, 63},
        {NULL, 0, 0, 0, 0},
};

static const struct field map_fields[] = {
        {"grid", F_OBJ, 0, 0, 0},
        {"list", F_ARR, 0, 0, 0},
        {"concurrency", F_INT, 0, 1, MAP_MAX},
        {NULL, 0, 0, 0, 0},
};

/* ---- the parts of a task ---- */

static void check_command(const json_t *cmd, const char *path, struct flow_errors *e)
{
	char sub[256];
	size_t i;
	json_t *a;
	if (json_array_size(cmd) == 0 || json_array_size(cmd) > 1024)
		add(e, path, "should list 1 to 1024 arguments, the program first");
	json_array_foreach (cmd, i, a) {
		joini(sub, sizeof(sub), path, i);
		if (!json_is_string(a))
			add(e, sub, "should be text, not %s", type_name(a));
		else if (i == 0 && json_string_length(a) == 0)
			add(e, sub, "the program to run must not be empty");
	}
}

/* {K: scalar} with K a name (inputs, params); what = "input", ... */
static void check_scalars(const json_t *o, const char *path, const char *what,
                          struct flow_errors *e)
{
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		join(sub, sizeof(sub), path, k);
		if (!is_name(k))
			add(e, sub,
			    "'%.64s' is not a name for %s: 1 to 63 letters, digits, '_' or '-'", k,
			    what);
		if (!is_scalar(v))
			add(e, sub, "%s '%.64s' should be text, a number or a boolean, not %s",
			    what, k, type_name(v));
	}
}

static void check_outputs(const json_t *o, const char *path, struct flow_errors *e)
{
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		join(sub, sizeof(sub), path, k);
		const char *s = json_string_value(v);
		if (!is_name(k))
			add(e, sub, "'%.64s' is not a name for an output", k);
		if (!s ||
		    (strcmp(s, "file") != 0 && strcmp(s, "dir") != 0 && strcmp(s, "value") != 0))
			add(e, sub, "an output is \"file\", \"dir\" or \"value\"");
	}
}

static void check_env(const json_t *o, const char *path, struct flow_errors *e)
{
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		join(sub, sizeof(sub), path, k);
		if (!*k || strchr(k, '=') || strlen(k) > 255)
			add(e, sub, "'%.64s' is not a variable name", k);
		if (!json_is_string(v))
			add(e, sub, "should be text, not %s", type_name(v));
	}
}

/* The parameter names of a map; NULL (and errors) when it has none. */
static json_t *map_params(const json_t *m, const char *path, struct flow_errors *e)
{
	char sub[256];
	const json_t *grid = json_object_get(m, "grid"), *list = json_object_get(m, "list");
	if (!!grid == !!list) {
		add(e, path, "a map has either 'grid' or 'list'");
		return NULL;
	}
	json_t *params = json_array();
	double size = 1;
	const char *k;
	json_t *v;
	if (grid) {
		join(sub, sizeof(sub), path, "grid");
		if (json_object_size(grid) == 0)
			add(e, sub, "names no parameter");
		json_object_foreach ((json_t *)grid, k, v) {
			char sub2[256];
			join(sub2, sizeof(sub2), sub, k);
			if (!is_name(k))
				add(e, sub2, "'%.64s' is not a name for a parameter", k);
			if (!json_is_array(v) || json_array_size(v) == 0) {
				add(e, sub2, "should list the parameter's values");
				continue;
			}
			size *= (double)json_array_size(v);
			size_t i;
			json_t *x;
			json_array_foreach (v, i, x)
				if (!is_scalar(x)) {
					char sub3[256];
					joini(sub3, sizeof(sub3), sub2, i);
					add(e, sub3,
					    "a value should be text, a number or a boolean");
				}
			json_array_append_new(params, json_string(k));
		}
	} else {
		join(sub, sizeof(sub), path, "list");
		size = (double)json_array_size(list);
		if (size == 0)
			add(e, sub, "lists no parameter set");
		size_t i;
		json_t *set;
		json_array_foreach (list, i, set) {
			char sub2[256];
			joini(sub2, sizeof(sub2), sub, i);
			if (!json_is_object(set)) {
				add(e, sub2, "a parameter set should be a mapping");
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
		add(e, path, "expands to %.0f tasks; at most %d", size, MAP_MAX);
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
                      struct flow_errors *e)
{
	char a[64] = "", b[64] = "", c[64] = "", d[64] = "";
	int n = sscanf(ref, "%63[^.].%63[^.].%63[^.].%63s", a, b, c, d);
	if (n == 2 && strcmp(a, "inputs") == 0) {
		if (!json_object_get(json_object_get(sc->wf, "inputs"), b))
			add(e, path, "{{ %s }}: the workflow has no input '%s'", ref, b);
	} else if (n == 2 && strcmp(a, "params") == 0) {
		if (!sc->params)
			add(e, path, "{{ %s }}: only a task with a map has params", ref);
		else if (!in_array(sc->params, b))
			add(e, path, "{{ %s }}: the map has no parameter '%s'", ref, b);
	} else if (n == 4 && strcmp(a, "tasks") == 0 && strcmp(c, "outputs") == 0) {
		const json_t *t = json_object_get(sc->tasks_by_name, b);
		const char *self = json_string_value(json_object_get(sc->task, "name"));
		if (!t)
			add(e, path, "{{ %s }}: there is no task '%s'", ref, b);
		else if (self && strcmp(self, b) == 0)
			add(e, path, "{{ %s }}: a task cannot use its own outputs", ref);
		else if (!json_object_get(json_object_get(t, "outputs"), d))
			add(e, path, "{{ %s }}: task '%s' has no output '%s'", ref, b, d);
		else if (!in_array(json_object_get(sc->task, "needs"), b))
			add(e, path, "{{ %s }}: add '%s' to this task's needs", ref, b);
	} else {
		add(e, path,
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
                            struct flow_errors *e)
{
	char ref[200];
	const char *start, *end;
	int r;
	while ((r = flow_template_next(s, ref, sizeof(ref), &start, &end)) == 1) {
		check_ref(sc, ref, path, e);
		s = end;
	}
	if (r < 0)
		add(e, path, "a template '{{' is not closed with '}}'");
}

/* Every string in v (command, env, inputs), recursively. */
static void check_strings(const struct scope *sc, const json_t *v, const char *path,
                          struct flow_errors *e)
{
	char sub[256];
	if (json_is_string(v)) {
		check_templates(sc, json_string_value(v), path, e);
	} else if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach (v, i, x) {
			joini(sub, sizeof(sub), path, i);
			check_strings(sc, x, sub, e);
		}
	} else if (json_is_object(v)) {
		const char *k;
		json_t *x;
		json_object_foreach ((json_t *)v, k, x) {
			join(sub, sizeof(sub), path, k);
			check_strings(sc, x, sub, e);
		}
	}
}

/* ---- needs and cycles ---- */

static void check_needs(const json_t *task, const json_t *by_name, const char *path,
                        struct flow_errors *e)
{
	char sub[256];
	const json_t *needs = json_object_get(task, "needs");
	const char *self = json_string_value(json_object_get(task, "name"));
	size_t i;
	json_t *n;
	json_array_foreach (needs, i, n) {
		joini(sub, sizeof(sub), path, i);
		const char *s = json_string_value(n);
		if (!s)
			add(e, sub, "should be a task's name, not %s", type_name(n));
		else if (!json_object_get(by_name, s))
			add(e, sub, "there is no task '%.64s'", s);
		else if (self && strcmp(s, self) == 0)
			add(e, sub, "a task cannot need itself");
		else
			for (size_t k = 0; k < i; k++)
				if (json_equal(json_array_get(needs, k), n))
					add(e, sub, "'%.64s' is listed twice", s);
	}
}

/* Depth-first search for a cycle through needs; colour: 0 new, 1 on the
 * path, 2 done. Reports each cycle once, at the task that closes it. */
static void find_cycles(const json_t *tasks, const json_t *by_index, int i, int *colour, int *stack,
                        int depth, struct flow_errors *e)
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
			add(e, path, "a cycle: %s", cycle);
		} else if (colour[j] == 0) {
			find_cycles(tasks, by_index, j, colour, stack, depth + 1, e);
		}
	}
	colour[i] = 2;
}

/* ---- the whole ---- */

static void check_task(const json_t *wf, const json_t *t, const json_t *by_name, const char *path,
                       struct flow_errors *e)
{
	char sub[256];
	if (!check_fields(t, task_fields, path, e))
		return;
	const json_t *v;
#define PART(key, fn)                                                                              \
	if ((v = json_object_get(t, key)) != NULL) {                                               \
		join(sub, sizeof(sub), path, key);                                                 \
		fn;                                                                                \
	}
	PART("command", if (json_is_array(v)) check_command(v, sub, e));
	PART("resources", if (json_is_object(v)) check_fields(v, resource_fields, sub, e));
	PART("needs", if (json_is_array(v)) check_needs(t, by_name, sub, e));
	PART("inputs", if (json_is_object(v)) check_scalars(v, sub, "input", e));
	PART("outputs", if (json_is_object(v)) check_outputs(v, sub, e));
	PART("env", if (json_is_object(v)) check_env(v, sub, e));
	PART("retries", if (json_is_object(v)) check_fields(v, retry_fields, sub, e));
	PART("cache", if (json_is_object(v)) check_fields(v, cache_fields, sub, e));
	json_t *params = NULL;
	PART("map", if (json_is_object(v) && check_fields(v, map_fields, sub, e)) params =
	                    map_params(v, sub, e));
#undef PART
	struct scope sc = {.wf = wf, .task = t, .params = params, .tasks_by_name = by_name};
	static const char *const templated[] = {"command", "env", "inputs"};
	for (size_t i = 0; i < sizeof(templated) / sizeof(templated[0]); i++)
		if ((v = json_object_get(t, templated[i])) != NULL) {
			join(sub, sizeof(sub), path, templated[i]);
			check_strings(&sc, v, sub, e);
		}
	json_decref(params);
}

int flow_check(const json_t *wf, struct flow_errors *e)
{
	int before = e->n + e->dropped;
	if (!check_fields(wf, wf_fields, "", e))
		return e->n + e->dropped - before;
	const json_t *inputs = json_object_get(wf, "inputs");
	if (json_is_object(inputs))
		check_scalars(inputs, "inputs", "input", e);
	const json_t *tasks = json_object_get(wf, "tasks");
	if (!json_is_array(tasks))
		return e->n + e->dropped - before;
	if (json_array_size(tasks) == 0 || json_array_size(tasks) > FLOW_MAX_TASKS)
		add(e, "tasks", "should list 1 to %d tasks", FLOW_MAX_TASKS);
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
			joini(at, sizeof(at), "tasks", i);
			join(sub, sizeof(sub), at, "name");
			add(e, sub, "a task named '%.64s' is already defined", name);
			continue;
		}
		json_object_set(by_name, name, t);
		json_object_set_new(by_index, name, json_integer((json_int_t)i));
	}
	json_array_foreach (tasks, i, t) {
		joini(sub, sizeof(sub), "tasks", i);
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
