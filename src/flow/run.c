#include "flow/run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hash.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "flow/codeset.h"
#include "flow/spec.h"

/* ---- sweeps ---- */

json_t *flow_expand(const json_t *task)
{
	const json_t *map = json_object_get(task, "map");
	const json_t *grid = json_object_get(map, "grid"), *list = json_object_get(map, "list");
	if (json_is_array(list))
		return json_deep_copy(list);
	json_t *sets = json_array();
	json_array_append_new(sets, json_object());
	const char *p;
	json_t *values;
	json_object_foreach ((json_t *)grid, p, values) {
		json_t *next = json_array();
		size_t i, k;
		json_t *set, *v;
		json_array_foreach (sets, i, set)
			json_array_foreach (values, k, v) {
				json_t *child = json_copy(set);
				json_object_set(child, p, v);
				json_array_append_new(next, child);
			}
		json_decref(sets);
		sets = next;
	}
	return sets;
}

/* ---- templates ---- */

/* A value as text in a command line. */
static void add_value(struct buf *out, const json_t *v)
{
	if (json_is_string(v)) {
		buf_adds(out, json_string_value(v));
	} else if (json_is_integer(v)) {
		buf_printf(out, "%lld", (long long)json_integer_value(v));
	} else if (json_is_real(v)) {
		char tmp[32];
		double d = json_real_value(v);
		for (int prec = 1; prec <= 17; prec++) { /* the shortest that reads back */
			snprintf(tmp, sizeof(tmp), "%.*g", prec, d);
			if (strtod(tmp, NULL) == d)
				break;
		}
		buf_adds(out, tmp);
	} else if (json_is_boolean(v)) {
		buf_adds(out, json_is_true(v) ? "true" : "false");
	} else if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach (v, i, x) {
			if (i)
				buf_adds(out, " ");
			add_value(out, x);
		}
	}
}

/* The value ref ("tasks.prep.outputs.dir") names in ctx, or NULL. */
static const json_t *lookup(const json_t *ctx, const char *ref)
{
	char a[64], b[64], c[64], d[64];
	int n = sscanf(ref, "%63[^.].%63[^.].%63[^.].%63s", a, b, c, d);
	if (n == 2 && (strcmp(a, "inputs") == 0 || strcmp(a, "params") == 0))
		return json_object_get(json_object_get(ctx, a), b);
	if (n == 4 && strcmp(a, "tasks") == 0 && strcmp(c, "outputs") == 0)
		return json_object_get(
		        json_object_get(json_object_get(json_object_get(ctx, "tasks"), b),
		                        "outputs"),
		        d);
	return NULL;
}

static char *render(const char *s, const json_t *ctx, int keep_tasks, char *err, size_t errlen)
{
	struct buf out;
	buf_init(&out);
	char ref[200];
	const char *start, *end;
	int r;
	while ((r = flow_template_next(s, ref, sizeof(ref), &start, &end)) == 1) {
		const json_t *v = lookup(ctx, ref);
		if ((!v || json_is_null(v)) && keep_tasks && strncmp(ref, "tasks.", 6) == 0) {
			buf_add(&out, s, (size_t)(end - s)); /* left for the node to fill */
			s = end;
			continue;
		}
		if (!v || json_is_null(v)) {
			snprintf(err, errlen, "{{ %s }}: no value yet", ref);
			buf_cleanup(&out);
			return NULL;
		}
		buf_add(&out, s, (size_t)(start - s));
		add_value(&out, v);
		s = end;
	}
	if (r < 0) {
		snprintf(err, errlen, "a template '{{' is not closed with '}}'");
		buf_cleanup(&out);
		return NULL;
	}
	buf_adds(&out, s);
	return buf_detach(&out);
}

char *flow_render(const char *s, const json_t *ctx, char *err, size_t errlen)
{
	return render(s, ctx, 0, err, errlen);
}

char *flow_render_known(const char *s, const json_t *ctx, char *err, size_t errlen)
{
	return render(s, ctx, 1, err, errlen);
}

/* ---- cache keys ---- */

#define VALUE_KEPT  256 /* bytes of a value kept as it is in the key's parts */
#define VALUE_SHOWN 60  /* bytes of a value a miss's reason shows */

/* SHA-256 of v as canonical JSON (null for NULL). */
static json_t *hash_of(const json_t *v)
{
	char *text = v ? json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY)
	               : xstrdup("null");
	char hex[HASH_HEX_LEN + 1];
	hash_sha256(text, strlen(text), hex);
	free(text);
	return json_string(hex);
}

int flow_cache_on(const json_t *task)
{
	const json_t *cache = json_object_get(task, "cache");
	const json_t *on = json_object_get(cache, "enabled");
	return json_is_boolean(on) ? json_is_true(on) : json_is_object(cache);
}

enum flow_code flow_cache_code(const json_t *task)
{
	const json_t *code = json_object_get(json_object_get(task, "cache"), "code");
	if (json_is_array(code))
		return FLOW_CODE_PATHS;
	if (json_is_string(code) && strcmp(json_string_value(code), "bundle") == 0)
		return FLOW_CODE_BUNDLE;
	return FLOW_CODE_READS;
}

const char *flow_code_name(enum flow_code c)
{
	static const char *const names[] = {"reads", "bundle", "paths"};
	return names[c];
}

/* A value as the key's parts keep it: itself, or {"sha256": H} when long. */
static json_t *kept_value(const json_t *v)
{
	char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	json_t *kept = text && strlen(text) > VALUE_KEPT ? json_pack("{s:o}", "sha256", hash_of(v))
	                                                 : json_deep_copy(v);
	free(text);
	return kept;
}

/* Each template in v (a text, or the texts in a list or a mapping) whose
 * value ctx has, into values: what the run's command, env and inputs were
 * rendered with. */
static void add_values(const json_t *v, const json_t *ctx, json_t *values)
{
	if (json_is_string(v)) {
		const char *s = json_string_value(v), *start, *end;
		char ref[200];
		while (flow_template_next(s, ref, sizeof(ref), &start, &end) == 1) {
			const json_t *x = lookup(ctx, ref);
			if (x && !json_is_null(x))
				json_object_set_new(values, ref, kept_value(x));
			s = end;
		}
	} else if (json_is_array(v)) {
		size_t i;
		json_t *x;
		json_array_foreach (v, i, x)
			add_values(x, ctx, values);
	} else if (json_is_object(v)) {
		const char *k;
		json_t *x;
		json_object_foreach ((json_t *)v, k, x)
			add_values(x, ctx, values);
	}
}

json_t *flow_cache_parts(const json_t *task, const json_t *ctx, const json_t *input_hashes,
                         const json_t *code)
{
	json_t *parts = json_pack("{s:i}", "form", 2);
	json_object_set_new(parts, "command", hash_of(json_object_get(task, "command")));
	json_object_set_new(parts, "env", hash_of(json_object_get(task, "env")));
	json_object_set_new(parts, "inputs", hash_of(json_object_get(task, "inputs")));
	json_t *values = json_object();
	static const char *const templated[] = {"command", "env", "inputs"};
	for (size_t i = 0; i < sizeof(templated) / sizeof(templated[0]); i++)
		add_values(json_object_get(task, templated[i]), ctx, values);
	json_object_set_new(parts, "values", values);
	json_t *objects = json_object();
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)input_hashes, k, v)
		json_object_set_new(objects, k, hash_of(v));
	json_object_set_new(parts, "objects", objects);
	json_object_set_new(parts, "outputs", hash_of(json_object_get(task, "outputs")));
	json_object_set_new(parts, "code_by", json_string(flow_code_name(flow_cache_code(task))));
	json_object_set_new(parts, "code", hash_of(code));
	const char *version =
	        json_string_value(json_object_get(json_object_get(task, "cache"), "version"));
	json_object_set_new(parts, "version", json_string(version ? version : ""));
	json_object_set_new(parts, "key", hash_of(parts)); /* over the parts above */
	return parts;
}

/* ---- why a miss ---- */

/* A value of the parts as a reason shows it: its text, cut short. */
static void show_value(struct buf *out, const json_t *v)
{
	if (!v || json_is_null(v)) {
		buf_adds(out, "(none)");
		return;
	}
	if (json_is_object(v)) {
		buf_adds(out, "(a long value)");
		return;
	}
	struct buf text;
	buf_init(&text);
	add_value(&text, v);
	const char *s = text.data ? text.data : "";
	if (text.len > VALUE_SHOWN)
		buf_printf(out, "%.*s...", VALUE_SHOWN, s);
	else
		buf_printf(out, "%s", json_is_string(v) && !text.len ? "''" : s);
	buf_cleanup(&text);
}

static void reason(struct buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reason(struct buf *out, const char *fmt, ...)
{
	if (out->len)
		buf_adds(out, "; ");
	va_list ap;
	va_start(ap, fmt);
	char line[600];
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	buf_adds(out, line);
}

/* "input mult changed: 3 -> 5" for each value that differs (one that only
 * one side has came or went with a template: the command changed). */
static void why_values(struct buf *out, const json_t *was, const json_t *now)
{
	const char *ref;
	json_t *a;
	json_object_foreach ((json_t *)was, ref, a) {
		const json_t *z = json_object_get(now, ref);
		if (!z || json_equal(a, z))
			continue;
		char what[160], t[64], o[64];
		if (strncmp(ref, "inputs.", 7) == 0)
			text_printf(what, sizeof(what), "input %s", ref + 7);
		else if (strncmp(ref, "params.", 7) == 0)
			text_printf(what, sizeof(what), "parameter %s", ref + 7);
		else if (sscanf(ref, "tasks.%63[^.].outputs.%63s", t, o) == 2)
			text_printf(what, sizeof(what), "output %s of task %s", o, t);
		else
			text_printf(what, sizeof(what), "%s", ref);
		struct buf b;
		buf_init(&b);
		show_value(&b, a);
		buf_adds(&b, " -> ");
		show_value(&b, z);
		reason(out, "%s changed: %s", what, b.data);
		buf_cleanup(&b);
	}
}

static int differs(const json_t *was, const json_t *now, const char *part)
{
	return !json_equal(json_object_get(was, part), json_object_get(now, part));
}

static void why_code(struct buf *out, const json_t *was, const json_t *now, const json_t *was_view,
                     const json_t *now_view)
{
	const char *by_was = jv_str(was, "code_by", ""), *by_now = jv_str(now, "code_by", "");
	if (strcmp(by_was, by_now) != 0) {
		reason(out, "cache.code changed: %s -> %s", by_was, by_now);
		return;
	}
	if (was_view && now_view) {
		char files[400];
		if (codeset_diff(was_view, now_view, files, sizeof(files)))
			reason(out, "the code changed: %s", files);
		return;
	}
	if (differs(was, now, "code"))
		reason(out, "the code bundle changed");
}

void flow_cache_why(const json_t *was, const json_t *now, const json_t *was_view,
                    const json_t *now_view, char *out, size_t len)
{
	struct buf b;
	buf_init(&b);
	if (jv_int(was, "form", 1) != jv_int(now, "form", 1)) {
		reason(&b, "the earlier result was keyed by an older version of anvil");
	} else {
		static const char *const parts[] = {"command", "env", "inputs"};
		static const char *const what[] = {"the command changed", "the environment changed",
		                                   "the task's inputs changed"};
		for (size_t i = 0; i < 3; i++)
			if (differs(was, now, parts[i]))
				reason(&b, "%s", what[i]);
		why_values(&b, json_object_get(was, "values"), json_object_get(now, "values"));
		const json_t *ow = json_object_get(was, "objects"),
		             *on = json_object_get(now, "objects");
		json_t *all = json_copy((json_t *)ow);
		json_object_update(all, (json_t *)on);
		const char *ref;
		json_t *ignored;
		json_object_foreach (all, ref, ignored)
			if (differs(ow, on, ref))
				reason(&b, "the objects of %s changed", ref);
		json_decref(all);
		if (differs(was, now, "outputs"))
			reason(&b, "the declared outputs changed");
		why_code(&b, was, now, was_view, now_view);
		if (differs(was, now, "version"))
			reason(&b, "the cache version changed");
	}
	snprintf(out, len, "%s", b.len ? b.data : "nothing changed");
	buf_cleanup(&b);
}
