#include "base/schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct schema_error *schema_add(struct schema_errors *e, const char *path, const char *fmt, ...)
{
	if (e->n == SCHEMA_MAX_ERRORS) {
		e->dropped++;
		return NULL;
	}
	struct schema_error *x = &e->v[e->n++];
	snprintf(x->path, sizeof(x->path), "%s", path);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->msg, sizeof(x->msg), fmt, ap);
	va_end(ap);
	x->at_key = 0;
	return x;
}

int schema_count(const struct schema_errors *e)
{
	return e->n + e->dropped;
}

void schema_join(char *out, size_t len, const char *path, const char *key)
{
	ydoc_path_join(out, len, path, key, 0);
}

void schema_joini(char *out, size_t len, const char *path, size_t i)
{
	ydoc_path_join(out, len, path, NULL, i);
}

const char *schema_type_name(const json_t *v)
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

int schema_is_name(const char *s)
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

int schema_is_scalar(const json_t *v)
{
	return json_is_string(v) || json_is_number(v) || json_is_boolean(v);
}

/* ---- values of the YAML way ---- */

int schema_size(const json_t *v, int64_t *out)
{
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	const char *s = json_string_value(v);
	if (!s)
		return -1;
	char *end;
	double n = strtod(s, &end);
	static const struct {
		const char *unit;
		double mult;
	} units[] = {{"", 1},           {"K", 1e3},           {"M", 1e6},
	             {"G", 1e9},        {"T", 1e12},          {"Ki", 1024.0},
	             {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
	if (end == s || n < 0 || n > 9e18)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0 && n * units[i].mult <= 9e18) {
			*out = (int64_t)(n * units[i].mult);
			return 0;
		}
	return -1;
}

int schema_duration(const json_t *v, int64_t *out)
{
	if (json_is_number(v)) {
		double s = json_number_value(v);
		if (s < 0 || s > 1e9)
			return -1;
		*out = (int64_t)(s * 1000);
		return 0;
	}
	return json_is_string(v) ? parse_duration_ms(json_string_value(v), out) : -1;
}

void schema_duration_text(int64_t ms, char *out, size_t len)
{
	if (ms % 3600000 == 0 && ms)
		snprintf(out, len, "%lldh", (long long)(ms / 3600000));
	else if (ms % 60000 == 0 && ms)
		snprintf(out, len, "%lldm", (long long)(ms / 60000));
	else if (ms % 1000 == 0)
		snprintf(out, len, "%llds", (long long)(ms / 1000));
	else
		snprintf(out, len, "%lldms", (long long)ms);
}

/* ---- field tables ---- */

static int type_ok(const json_t *v, enum schema_type t)
{
	switch (t) {
	case SCHEMA_STR:
	case SCHEMA_NAME: return json_is_string(v);
	case SCHEMA_INT: return json_is_integer(v);
	case SCHEMA_NUM: return json_is_number(v);
	case SCHEMA_BOOL: return json_is_boolean(v);
	case SCHEMA_OBJ: return json_is_object(v);
	case SCHEMA_ARR: return json_is_array(v);
	case SCHEMA_DURATION: return json_is_number(v) || json_is_string(v);
	case SCHEMA_ANY: return 1;
	}
	return 0;
}

static const char *const want_names[] = {
        "text",      "a name", "an integer", "a number", "a boolean",
        "a mapping", "a list", "a duration", "a value",
};

static void check_duration(const json_t *v, const struct schema_field *f, const char *path,
                           struct schema_errors *e)
{
	int64_t ms;
	char lo[32], hi[32], got[32];
	if (schema_duration(v, &ms)) {
		if (json_is_string(v))
			schema_add(e, path, "'%.64s' is not a duration like 90s, 10m or 2h",
			           json_string_value(v));
		else
			schema_add(e, path,
			           "%g is not a duration: a number of seconds is 0 or more",
			           json_number_value(v));
		return;
	}
	if (ms >= f->min && ms <= f->max)
		return;
	schema_duration_text((int64_t)f->min, lo, sizeof(lo));
	schema_duration_text((int64_t)f->max, hi, sizeof(hi));
	schema_duration_text(ms, got, sizeof(got));
	schema_add(e, path, "%s is out of range: %s to %s", got, lo, hi);
}

void schema_value(const json_t *v, const struct schema_field *f, const char *path,
                  struct schema_errors *e)
{
	if (!type_ok(v, f->type)) {
		schema_add(e, path, "should be %s, not %s", want_names[f->type],
		           schema_type_name(v));
		return;
	}
	if (f->type == SCHEMA_NAME && !schema_is_name(json_string_value(v)))
		schema_add(e, path, "'%.64s' is not a name: 1 to 63 letters, digits, '_' or '-'",
		           json_string_value(v));
	if (f->type == SCHEMA_STR &&
	    (json_string_length(v) < f->min || json_string_length(v) > f->max))
		schema_add(e, path, "should be %g to %g characters long", f->min, f->max);
	if ((f->type == SCHEMA_INT || f->type == SCHEMA_NUM) &&
	    (json_number_value(v) < f->min || json_number_value(v) > f->max))
		schema_add(e, path, "%g is out of range: %g to %g", json_number_value(v), f->min,
		           f->max);
	if (f->type == SCHEMA_DURATION)
		check_duration(v, f, path, e);
}

int schema_fields(const json_t *o, const struct schema_field *fields, const char *path,
                  struct schema_errors *e)
{
	if (!json_is_object(o)) {
		schema_add(e, path, "should be a mapping, not %s", schema_type_name(o));
		return 0;
	}
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		const struct schema_field *f = fields;
		while (f->key && strcmp(f->key, k) != 0)
			f++;
		schema_join(sub, sizeof(sub), path, k);
		if (f->key) {
			schema_value(v, f, sub, e);
			continue;
		}
		struct schema_error *x = schema_add(e, sub, "unknown key '%.64s'", k);
		if (x)
			x->at_key = 1;
	}
	for (const struct schema_field *f = fields; f->key; f++)
		if (f->required && !json_object_get(o, f->key))
			schema_add(e, path, "'%s' is missing", f->key);
	return 1;
}

/* ---- errors written where they were found ---- */

struct located {
	int line, col;
	const struct schema_error *e;
};

/* In the order a reader meets them; qsort is not stable, so ties keep the
 * order the checks found them in. */
static int by_position(const void *a, const void *b)
{
	const struct located *x = a, *y = b;
	if (x->line != y->line)
		return x->line - y->line;
	if (x->col != y->col)
		return x->col - y->col;
	return x->e < y->e ? -1 : x->e > y->e;
}

void schema_write(const char *file, const struct ydoc *doc, const struct schema_errors *e,
                  char *out, size_t len)
{
	struct located lines[SCHEMA_MAX_ERRORS];
	for (int i = 0; i < e->n; i++) {
		const struct ydoc_pos *p = ydoc_where(doc, e->v[i].path);
		int key = p && e->v[i].at_key && p->key_line;
		lines[i].line = !p ? 1 : key ? p->key_line : p->line;
		lines[i].col = !p ? 1 : key ? p->key_col : p->col;
		lines[i].e = &e->v[i];
	}
	qsort(lines, (size_t)e->n, sizeof(lines[0]), by_position);
	size_t used = 0;
	out[0] = '\0';
	for (int i = 0; i < e->n && used < len; i++)
		used += (size_t)snprintf(out + used, len - used, "%s:%d:%d: %s%s%s\n", file,
		                         lines[i].line, lines[i].col, lines[i].e->path,
		                         lines[i].e->path[0] ? ": " : "", lines[i].e->msg);
	if (e->dropped && used < len)
		snprintf(out + used, len - used, "%s: %d more errors not shown\n", file,
		         e->dropped);
}
