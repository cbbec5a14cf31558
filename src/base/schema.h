/* schema.h - typed checks of a JSON document, every error kept with the
 * path of the value at fault, and the errors written as FILE:LINE:COLUMN.
 *
 * What the workflow spec (flow/spec.h), the fleet spec (fleet/spec.h) and
 * the daemons' config files (conf.h) share: a list of errors that a check
 * appends to rather than stopping at the first; field tables (key, type,
 * required, bounds) that find unknown keys, missing ones, wrong types and
 * values out of range; the value parsers of the YAML way of writing
 * (sizes like 8Gi, durations like 90s); and the writing of the errors in
 * the order a reader meets them, each at the line and column that the YAML
 * document (ydoc.h) says its value, or for an unknown key the key, was
 * written. Paths are ydoc's ("tasks.train.command[1]", "sysctl[\"vm.x\"]").
 *
 * Pure: no I/O. A struct schema_errors is the caller's (about 50 KiB: put
 * it on the heap or zero it in place); nothing here allocates it.
 */
#ifndef ANVIL_BASE_SCHEMA_H
#define ANVIL_BASE_SCHEMA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/ydoc.h"

#define SCHEMA_MAX_ERRORS 100

struct schema_error {
	char path[256]; /* JSON path of the value at fault: "tasks[2].needs[0]" */
	char msg[256];
	int at_key; /* about the key itself (unknown key): point at the key */
};

struct schema_errors {
	struct schema_error v[SCHEMA_MAX_ERRORS];
	int n;
	int dropped; /* errors beyond SCHEMA_MAX_ERRORS */
};

/* Appends an error at path; returns it, or NULL when there were already
 * SCHEMA_MAX_ERRORS (then it is only counted in dropped). */
struct schema_error *schema_add(struct schema_errors *e, const char *path, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Errors found so far, kept or dropped. */
int schema_count(const struct schema_errors *e);

enum schema_type {
	SCHEMA_STR,      /* text; min/max bound its length */
	SCHEMA_NAME,     /* 1 to 63 letters, digits, '_' or '-' (schema_is_name) */
	SCHEMA_INT,      /* an integer in [min, max] */
	SCHEMA_NUM,      /* a number in [min, max] */
	SCHEMA_BOOL,     /* true or false */
	SCHEMA_OBJ,      /* a mapping, checked by the caller */
	SCHEMA_ARR,      /* a list, checked by the caller */
	SCHEMA_DURATION, /* "90s", "10m", "2h", "500ms" or seconds; [min, max] ms */
	SCHEMA_ANY,      /* a known key whose value the caller checks */
};

struct schema_field {
	const char *key;
	enum schema_type type;
	int required;
	double min, max; /* INT, NUM: the range; STR: the length; DURATION: ms */
};

/* Checks o's keys against fields (ended by a NULL key): unknown keys (an
 * error at the key), missing required ones, types and bounds. Returns 0
 * (and an error) when o is not a mapping, else 1. */
int schema_fields(const json_t *o, const struct schema_field *fields, const char *path,
                  struct schema_errors *e);
/* Checks one value against one field's type and bounds. */
void schema_value(const json_t *v, const struct schema_field *f, const char *path,
                  struct schema_errors *e);

/* "a mapping", "a list", "text", "an integer", ... for messages. */
const char *schema_type_name(const json_t *v);
/* 1 to 63 letters, digits, '_' and '-'. */
int schema_is_name(const char *s);
/* Text, a number or a boolean. */
int schema_is_scalar(const json_t *v);
/* path + ".key" (or ["key"] when key is not an identifier), path + "[i]". */
void schema_join(char *out, size_t len, const char *path, const char *key);
void schema_joini(char *out, size_t len, const char *path, size_t i);

/* Bytes: an integer, or "512Mi", "8Gi", "16G" (Ki = 1024, K = 1000). */
int schema_size(const json_t *v, int64_t *out);
/* Milliseconds: a number of seconds, or "90s", "10m", "2h", "500ms". */
int schema_duration(const json_t *v, int64_t *out);
/* ms written the way a duration is read back: "500ms", "90s", "10m", "2h". */
void schema_duration_text(int64_t ms, char *out, size_t len);

/* Writes every error of e as a line "FILE:LINE:COLUMN: PATH: what is
 * wrong" (PATH and its ": " left out for the document itself), sorted by
 * where doc says it was written, then a line counting the dropped ones.
 * out (len bytes) is NUL-terminated; lines past its end are cut. */
void schema_write(const char *file, const struct ydoc *doc, const struct schema_errors *e,
                  char *out, size_t len);

#endif
