/* compile.c - the YAML way of writing a workflow, compiled to the JSON form
 * (spec.h), with every error traced back to where the source wrote it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/ydoc.h"
#include "flow/spec.h"

/* Compiled paths that were written elsewhere in the source: errors found
 * on the compiled form are traced back through these, longest prefix
 * first. */
struct renames {
	struct {
		char from[256], to[256];
	} v[FLOW_MAX_TASKS * 4];
	int n;
};

static void rename_add(struct renames *r, const char *from, const char *to)
{
	if (r->n < (int)(sizeof(r->v) / sizeof(r->v[0]))) {
		snprintf(r->v[r->n].from, sizeof(r->v[r->n].from), "%s", from);
		snprintf(r->v[r->n].to, sizeof(r->v[r->n].to), "%s", to);
		r->n++;
	}
}

static void trace_back(const struct renames *r, char *path, size_t len)
{
	int best = -1;
	size_t best_len = 0;
	for (int i = 0; i < r->n; i++) {
		size_t n = strlen(r->v[i].from);
		if (n >= best_len && strncmp(path, r->v[i].from, n) == 0 &&
		    (path[n] == '\0' || path[n] == '.' || path[n] == '[')) {
			best = i;
			best_len = n;
		}
	}
	if (best < 0)
		return;
	struct buf out; /* path may be cut where len ends: error paths, not keys */
	buf_init(&out);
	buf_printf(&out, "%s%s", r->v[best].to, path + best_len);
	size_t n = out.len < len ? out.len : len - 1;
	memcpy(path, out.data, n);
	path[n] = '\0';
	buf_cleanup(&out);
}

static void add_need(json_t *needs, const char *name)
{
	size_t i;
	json_t *v;
	json_array_foreach (needs, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), name) == 0)
			return;
	json_array_append_new(needs, json_string(name));
}

/* Needs implied by {{ tasks.T.outputs.K }} in any string of v. */
static void implied_needs(const json_t *v, json_t *needs)
{
	if (json_is_string(v)) {
		const char *s = json_string_value(v), *start, *end;
		char ref[200], t[64];
		while (flow_template_next(s, ref, sizeof(ref), &start, &end) == 1) {
			if (sscanf(ref, "tasks.%63[^.].outputs.", t) == 1)
				add_need(needs, t);
			s = end;
		}
	} else if (json_is_array(v) || json_is_object(v)) {
		size_t i;
		const char *k;
		json_t *x;
		if (json_is_array(v))
			json_array_foreach (v, i, x)
				implied_needs(x, needs);
		else
			json_object_foreach ((json_t *)v, k, x)
				implied_needs(x, needs);
	}
}

/* Where a task is, in the source and in the compiled form. */
struct at {
	const char *src, *dst;
	struct renames *r;
	struct schema_errors *e;
};

typedef int (*parse_fn)(const json_t *v, int64_t *out);

/* A shorthand key: in the task t (part NULL) or its member part, key
 * `from` becomes `to` holding parse(value); a value parse refuses is an
 * error at the source ("what" says what it should be). */
static void sugar_key(json_t *t, const char *part, const char *from, const char *to, parse_fn parse,
                      const char *what, const struct at *at)
{
	json_t *o = part ? json_object_get(t, part) : t;
	json_t *v = json_object_get(o, from);
	if (!json_is_object(o) || !v)
		return;
	char src[256], dst[256];
	snprintf(src, sizeof(src), "%s%s%s.%s", at->src, part ? "." : "", part ? part : "", from);
	snprintf(dst, sizeof(dst), "%s%s%s.%s", at->dst, part ? "." : "", part ? part : "", to);
	int64_t n;
	int bad = parse(v, &n);
	if (bad)
		schema_add(at->e, src, "%s", what); /* and only that: the key goes */
	if (part)
		o = json_copy(o);
	json_object_del(o, from);
	if (!bad)
		json_object_set_new(o, to, json_integer(n));
	if (part)
		json_object_set_new(t, part, o);
	rename_add(at->r, dst, src);
}

/* One task of the source; src and dst are its paths there and here. */
static json_t *sugar_task(const json_t *st, const char *name, const char *src, const char *dst,
                          struct renames *r, struct schema_errors *e)
{
	json_t *t = json_copy((json_t *)st);
	char from[256], to[256];
	rename_add(r, dst, src);
	if (name) {
		if (json_object_get(t, "name")) {
			snprintf(to, sizeof(to), "%s.name", src);
			schema_add(e, to, "a task's name is its key; drop 'name'");
		}
		json_object_set_new(t, "name", json_string(name));
	}
	json_t *cmd = json_object_get(t, "command");
	if (json_is_string(cmd))
		json_object_set_new(t, "command", json_pack("[s,s,O]", "/bin/sh", "-c", cmd));
	json_t *needs = json_object_get(t, "needs");
	if (json_is_string(needs))
		json_object_set_new(t, "needs", json_pack("[O]", needs));
	json_t *cache = json_object_get(t, "cache");
	if (json_is_boolean(cache))
		json_object_set_new(t, "cache", json_pack("{s:O}", "enabled", cache));
	json_t *retries = json_object_get(t, "retries");
	if (json_is_integer(retries)) {
		json_object_set_new(t, "retries", json_pack("{s:O}", "count", retries));
		snprintf(from, sizeof(from), "%s.retries", dst);
		snprintf(to, sizeof(to), "%s.retries", src);
		rename_add(r, from, to);
	}
	const struct at at = {src, dst, r, e};
	sugar_key(t, NULL, "timeout", "timeout_ms", schema_duration,
	          "timeout is a duration like 90s, 2h or a number of seconds", &at);
	sugar_key(t, "resources", "memory", "memory_bytes", schema_size,
	          "memory is bytes or a size like 512Mi, 8Gi, 16G", &at);
	sugar_key(t, "retries", "backoff", "backoff_ms", schema_duration,
	          "backoff is a duration like 30s or 2m", &at);
	json_t *implied = json_array();
	static const char *const templated[] = {"command", "env", "inputs"};
	for (size_t i = 0; i < sizeof(templated) / sizeof(templated[0]); i++)
		implied_needs(json_object_get(t, templated[i]), implied);
	if (json_array_size(implied)) {
		json_t *all = json_is_array(json_object_get(t, "needs"))
		                      ? json_copy(json_object_get(t, "needs"))
		                      : json_array();
		size_t i;
		json_t *v;
		json_array_foreach (implied, i, v)
			add_need(all, json_string_value(v));
		if (json_is_array(json_object_get(t, "needs")) || !json_object_get(t, "needs"))
			json_object_set_new(t, "needs", all);
		else
			json_decref(all);
	}
	json_decref(implied);
	return t;
}

static json_t *sugar_tasks(const json_t *tasks, struct renames *r, struct schema_errors *e)
{
	json_t *out = json_array();
	char src[256], dst[256];
	if (json_is_object(tasks)) {
		const char *k;
		json_t *t;
		json_object_foreach ((json_t *)tasks, k, t) {
			ydoc_path_join(src, sizeof(src), "tasks", k, 0);
			ydoc_path_join(dst, sizeof(dst), "tasks", NULL, json_array_size(out));
			json_array_append_new(out, json_is_object(t)
			                                   ? sugar_task(t, k, src, dst, r, e)
			                                   : json_incref(t));
			if (!json_is_object(t))
				rename_add(r, dst, src);
		}
	} else {
		size_t i;
		json_t *t;
		json_array_foreach (tasks, i, t) {
			ydoc_path_join(src, sizeof(src), "tasks", NULL, i);
			json_array_append_new(out, json_is_object(t)
			                                   ? sugar_task(t, NULL, src, src, r, e)
			                                   : json_incref(t));
		}
	}
	return out;
}

json_t *flow_compile(const json_t *src, const json_t *overrides, struct schema_errors *e)
{
	int before = e->n + e->dropped;
	if (!json_is_object(src)) {
		schema_add(e, "", "a workflow is a mapping with name, inputs and tasks");
		return NULL;
	}
	struct renames *r = xcalloc(1, sizeof(*r));
	json_t *wf = json_copy((json_t *)src);
	const json_t *tasks = json_object_get(src, "tasks");
	if (json_is_object(tasks) || json_is_array(tasks))
		json_object_set_new(wf, "tasks", sugar_tasks(tasks, r, e));
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)overrides, k, v) {
		json_t *inputs = json_object_get(wf, "inputs");
		if (!json_object_get(inputs, k)) {
			schema_add(e, "inputs", "-i %s: the workflow has no such input", k);
			continue;
		}
		inputs = json_copy(inputs);
		json_object_set(inputs, k, v);
		json_object_set_new(wf, "inputs", inputs);
	}
	int first = e->n;
	flow_check(wf, e);
	for (int i = first; i < e->n; i++)
		trace_back(r, e->v[i].path, sizeof(e->v[i].path));
	free(r);
	if (e->n + e->dropped > before) {
		json_decref(wf);
		return NULL;
	}
	return wf;
}

/* "train.yaml" -> "train": a workflow's default name. */
static void default_name(const char *file, char *out, size_t len)
{
	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	size_t n = 0;
	for (; base[n] && base[n] != '.' && n + 1 < len && n < 63; n++) {
		char c = base[n];
		out[n] = ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		          (c >= '0' && c <= '9') || c == '-' || c == '_')
		                 ? c
		                 : '-';
	}
	out[n] = '\0';
	if (!n)
		snprintf(out, len, "workflow");
}

json_t *flow_compile_yaml(const char *file, const char *text, size_t len, const json_t *overrides,
                          char *out, size_t len_out)
{
	struct ydoc doc;
	char perr[256];
	out[0] = '\0';
	if (ydoc_parse(text, len, &doc, perr, sizeof(perr))) {
		snprintf(out, len_out, "%s:%s\n", file, perr);
		return NULL;
	}
	if (json_is_object(doc.root) && !json_object_get(doc.root, "name")) {
		char name[64];
		default_name(file, name, sizeof(name));
		json_object_set_new(doc.root, "name", json_string(name));
	}
	struct schema_errors *e = xcalloc(1, sizeof(*e));
	json_t *wf = flow_compile(doc.root, overrides, e);
	schema_write(file, &doc, e, out, len_out);
	free(e);
	ydoc_free(&doc);
	return wf;
}
