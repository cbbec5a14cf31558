#include "base/jv.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"

static const char *type_word(enum jv_type t)
{
	switch (t) {
	case JV_STRING: return "a string";
	case JV_INT: return "an integer";
	case JV_BOOL: return "true or false";
	case JV_STRINGS: return "an array of strings";
	case JV_OBJECT: return "an object";
	case JV_STRING_MAP: return "an object of strings";
	case JV_ARRAY: return "an array";
	case JV_NUMBER: return "a number";
	}
	return "?";
}

static void show_value(const json_t *v, char *out, size_t n)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!s) {
		snprintf(out, n, "?");
		return;
	}
	if (strlen(s) > 40)
		snprintf(out, n, "%.37s...", s);
	else
		snprintf(out, n, "%s", s);
	free(s);
}

static int check_one(const json_t *v, const struct jv_field *f, char *err, size_t errlen)
{
	/* The value as an error shows it: dumped only for an error (a sync's
	 * answer carries every rank's environment, dumped for nothing else). */
	char shown[64];
	switch (f->type) {
	case JV_STRING:
		if (!json_is_string(v))
			break;
		if (f->min > 0 && json_string_length(v) == 0) {
			snprintf(err, errlen, "field '%s': must not be empty", f->name);
			return ERR_INVALID;
		}
		if (f->max > 0 && (int64_t)json_string_length(v) > f->max) {
			snprintf(err, errlen, "field '%s': longer than %lld characters", f->name,
			         (long long)f->max);
			return ERR_INVALID;
		}
		if (strlen(json_string_value(v)) != json_string_length(v)) {
			snprintf(err, errlen, "field '%s': contains a NUL character", f->name);
			return ERR_INVALID;
		}
		return 0;
	case JV_INT: {
		if (!json_is_integer(v))
			break;
		json_int_t x = json_integer_value(v);
		if (x < f->min) {
			show_value(v, shown, sizeof(shown));
			snprintf(err, errlen, "field '%s': %s is below the minimum %lld", f->name,
			         shown, (long long)f->min);
			return ERR_INVALID;
		}
		if (x > f->max) {
			show_value(v, shown, sizeof(shown));
			snprintf(err, errlen, "field '%s': %s is above the maximum %lld", f->name,
			         shown, (long long)f->max);
			return ERR_INVALID;
		}
		return 0;
	}
	case JV_BOOL:
		if (!json_is_boolean(v))
			break;
		return 0;
	case JV_NUMBER: {
		if (!json_is_number(v))
			break;
		/* As the value was written, not as 17 digits of a double. */
		double x = json_number_value(v), lo = (double)f->min / 1000,
		       hi = (double)f->max / 1000;
		if (x < lo || x > hi) {
			snprintf(err, errlen, "field '%s': %g is %s %g", f->name, x,
			         x < lo ? "below the minimum" : "above the maximum",
			         x < lo ? lo : hi);
			return ERR_INVALID;
		}
		return 0;
	}
	case JV_STRINGS:
	case JV_ARRAY: {
		if (!json_is_array(v))
			break;
		size_t n = json_array_size(v);
		if ((int64_t)n < f->min) {
			snprintf(err, errlen, "field '%s': needs at least %lld element(s), got %zu",
			         f->name, (long long)f->min, n);
			return ERR_INVALID;
		}
		if (f->max > 0 && (int64_t)n > f->max) {
			snprintf(err, errlen, "field '%s': at most %lld elements, got %zu", f->name,
			         (long long)f->max, n);
			return ERR_INVALID;
		}
		if (f->type == JV_ARRAY)
			return 0;
		size_t i;
		json_t *e;
		json_array_foreach (v, i, e) {
			if (!json_is_string(e)) {
				show_value(e, shown, sizeof(shown));
				snprintf(err, errlen, "field '%s[%zu]': %s is not a string",
				         f->name, i, shown);
				return ERR_INVALID;
			}
			if (strlen(json_string_value(e)) != json_string_length(e)) {
				snprintf(err, errlen, "field '%s[%zu]': contains a NUL character",
				         f->name, i);
				return ERR_INVALID;
			}
		}
		return 0;
	}
	case JV_OBJECT:
		if (!json_is_object(v))
			break;
		return 0;
	case JV_STRING_MAP: {
		if (!json_is_object(v))
			break;
		if (f->max > 0 && (int64_t)json_object_size(v) > f->max) {
			snprintf(err, errlen, "field '%s': at most %lld entries", f->name,
			         (long long)f->max);
			return ERR_INVALID;
		}
		const char *k;
		json_t *e;
		json_object_foreach ((json_t *)v, k, e) {
			if (!json_is_string(e) ||
			    strlen(json_string_value(e)) != json_string_length(e)) {
				snprintf(err, errlen, "field '%s.%s': must be a string", f->name,
				         k);
				return ERR_INVALID;
			}
		}
		return 0;
	}
	}
	show_value(v, shown, sizeof(shown));
	snprintf(err, errlen, "field '%s': %s is not %s", f->name, shown, type_word(f->type));
	return ERR_INVALID;
}

int jv_check(const json_t *obj, const struct jv_field *fields, char *err, size_t errlen)
{
	if (!json_is_object(obj)) {
		snprintf(err, errlen, "body: expected a JSON object");
		return ERR_INVALID;
	}
	const char *key;
	json_t *v;
	json_object_foreach ((json_t *)obj, key, v) {
		const struct jv_field *f = fields;
		while (f->name && strcmp(f->name, key) != 0)
			f++;
		if (!f->name) {
			snprintf(err, errlen, "field '%.64s': unknown field", key);
			return ERR_INVALID;
		}
		if (json_is_null(v) && !f->required)
			continue;
		int rc = check_one(v, f, err, errlen);
		if (rc)
			return rc;
	}
	for (const struct jv_field *f = fields; f->name; f++) {
		if (f->required && !json_object_get(obj, f->name)) {
			snprintf(err, errlen, "field '%s': required", f->name);
			return ERR_INVALID;
		}
	}
	return 0;
}

int jv_parse_object(const char *body, size_t len, json_t **out, char *err, size_t errlen)
{
	json_error_t je;
	if (len == 0) {
		snprintf(err, errlen, "body: empty, expected a JSON object");
		return ERR_INVALID;
	}
	json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!v) {
		snprintf(err, errlen, "body: malformed JSON at line %d column %d: %s", je.line,
		         je.column, je.text);
		return ERR_INVALID;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		snprintf(err, errlen, "body: expected a JSON object");
		return ERR_INVALID;
	}
	*out = v;
	return 0;
}

const char *jv_str(const json_t *obj, const char *name, const char *dflt)
{
	const json_t *v = json_object_get(obj, name);
	return json_is_string(v) ? json_string_value(v) : dflt;
}

int64_t jv_int(const json_t *obj, const char *name, int64_t dflt)
{
	const json_t *v = json_object_get(obj, name);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

int jv_bool(const json_t *obj, const char *name, int dflt)
{
	const json_t *v = json_object_get(obj, name);
	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

char *jv_dump(const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!s) {
		fprintf(stderr, "anvil: json_dumps failed\n");
		abort();
	}
	return s;
}

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing past U+10FFFF), or 0. */
static int utf8_seq(const unsigned char *p)
{
	unsigned c = p[0];
	if (c < 0x80)
		return 1;
	int n;
	unsigned lo = 0x80, hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
	else
		return 0;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (int k = 2; k < n; k++)
		if (p[k] < 0x80 || p[k] > 0xBF)
			return 0;
	return n;
}

char *jv_utf8_fix(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	int n;
	while (p[i] && (n = utf8_seq(p + i)) > 0)
		i += (size_t)n;
	if (!p[i])
		return NULL;
	char *out = xstrdup(s);
	unsigned char *q = (unsigned char *)out;
	while (q[i]) { /* from the first bad byte on */
		n = utf8_seq(q + i);
		if (n > 0) {
			i += (size_t)n;
		} else {
			q[i++] = '?';
		}
	}
	return out;
}

int jv_check_each(const json_t *obj, const char *key, const struct jv_field *fields, char *err,
                  size_t errlen)
{
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(obj, key), i, e) {
		char inner[200];
		if (!json_is_object(e)) {
			snprintf(err, errlen, "%s[%zu]: expected an object", key, i);
			return ERR_INVALID;
		}
		if (jv_check(e, fields, inner, sizeof(inner))) {
			snprintf(err, errlen, "%s[%zu]: %.180s", key, i, inner);
			return ERR_INVALID;
		}
	}
	return 0;
}
