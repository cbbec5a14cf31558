/* jv.h - strict validation of JSON request bodies against a field table.
 *
 * A handler declares the fields it accepts; jv_check() rejects unknown
 * fields, missing required ones, wrong types and values out of bounds, and
 * writes one message naming the field, the value and the reason
 * ("field 'gpus': -3 is below the minimum 0"). Pure; thread-safe.
 */
#ifndef ANVIL_JV_H
#define ANVIL_JV_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum jv_type {
	JV_STRING, /* non-empty unless min == 0; max = length cap */
	JV_INT,    /* integer within [min, max] */
	JV_BOOL,
	JV_STRINGS,    /* array of strings; min/max bound the count */
	JV_OBJECT,     /* any object (validated by the caller) */
	JV_STRING_MAP, /* object of string values; max bounds the count */
	JV_ARRAY,      /* any array; min/max bound the count */
	/* A number, integer or real (0.5, 2). The bounds are integers, so they
	 * are in thousandths here: {10, 1024000} is 0.01-1024. */
	JV_NUMBER,
};

struct jv_field {
	const char *name;
	enum jv_type type;
	int required;
	int64_t min;
	int64_t max;
};

/* 0, or ERR_INVALID with a message in err. fields ends with a NULL name. */
int jv_check(const json_t *obj, const struct jv_field *fields, char *err, size_t errlen);

/* jv_check() on every element of the array obj[key] (absent: nothing to
 * check); an element that is not an object, or fails, is named by its index
 * in err ("ranks[3]: ..."). */
int jv_check_each(const json_t *obj, const char *key, const struct jv_field *fields, char *err,
                  size_t errlen);

/* Parses body (len bytes, capped by the caller) as a JSON object. */
int jv_parse_object(const char *body, size_t len, json_t **out, char *err, size_t errlen);

/* Accessors with defaults for fields jv_check has already validated. */
const char *jv_str(const json_t *obj, const char *name, const char *dflt);
int64_t jv_int(const json_t *obj, const char *name, int64_t dflt);
int jv_bool(const json_t *obj, const char *name, int dflt);

/* Serializes v compactly; the caller frees the result. */
char *jv_dump(const json_t *v);

/* JSON strings must be UTF-8: a copy of s with each byte that is not part of
 * a valid UTF-8 sequence replaced by '?' (to free), or NULL when s is valid
 * as it is. For text that echoes what a request carried (a query value, a
 * path), which is not checked the way a parsed JSON body is. */
char *jv_utf8_fix(const char *s);

#endif
