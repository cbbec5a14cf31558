#include "flow/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/crypto_lazy.h"
#include "base/mem.h"
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

static void sha256_hex(const char *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
	for (unsigned int i = 0; i < n && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	out[64] = '\0';
}

/* SHA-256 of v as canonical JSON (null for NULL). */
static json_t *hash_of(const json_t *v)
{
	char *text = v ? json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY)
	               : xstrdup("null");
	char hex[65];
	sha256_hex(text, strlen(text), hex);
	free(text);
	return json_string(hex);
}

static const char *const part_names[] = {"command", "env", "inputs", "outputs", "code", "version"};

json_t *flow_cache_parts(const json_t *task, const json_t *input_hashes, const char *bundle_hash)
{
	json_t *parts = json_object();
	json_object_set_new(parts, "command", hash_of(json_object_get(task, "command")));
	json_object_set_new(parts, "env", hash_of(json_object_get(task, "env")));
	json_t *inputs = json_pack("{s:O?,s:O?}", "values", json_object_get(task, "inputs"),
	                           "objects", input_hashes);
	json_object_set_new(parts, "inputs", hash_of(inputs));
	json_decref(inputs);
	json_object_set_new(parts, "outputs", hash_of(json_object_get(task, "outputs")));
	json_t *code = json_string(bundle_hash ? bundle_hash : "");
	json_object_set_new(parts, "code", hash_of(code));
	json_decref(code);
	const char *version =
	        json_string_value(json_object_get(json_object_get(task, "cache"), "version"));
	json_object_set_new(parts, "version", json_string(version ? version : ""));
	json_object_set_new(parts, "key", hash_of(parts)); /* over the parts above */
	return parts;
}

void flow_cache_why(const json_t *was, const json_t *now, char *out, size_t len)
{
	static const char *const what[] = {"the command changed",     "the environment changed",
	                                   "an input changed",        "the outputs changed",
	                                   "the code bundle changed", "the cache version changed"};
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(part_names) / sizeof(part_names[0]); i++)
		if (!json_equal(json_object_get(was, part_names[i]),
		                json_object_get(now, part_names[i])) &&
		    used < len)
			used += (size_t)snprintf(out + used, len - used, "%s%s", used ? "; " : "",
			                         what[i]);
	if (!out[0])
		snprintf(out, len, "nothing changed");
}
