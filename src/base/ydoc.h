/* ydoc.h - a YAML document as JSON, with where each value was written.
 *
 * Every YAML file anvil reads goes through here: workflows (flow/spec.h),
 * the fleet spec (fleet/spec.h) and the daemons' config files (conf.h).
 * The document becomes plain JSON, so one validator serves a file and an
 * API body alike; what the YAML adds is the position of every value, kept
 * in a side table keyed by the value's JSON path ("tasks.train.command[1]"),
 * so that an error found on the JSON can name file:line:column (schema.h
 * writes them so).
 *
 * Scalars follow YAML 1.2's core schema: a plain (unquoted) scalar is null
 * (null, ~, empty), a boolean (true, false), an integer, a float, or else a
 * string; a quoted or block scalar is always a string. Anchors, aliases,
 * tags and merge keys are refused (these files are read by people; say
 * it twice), as are duplicate keys and non-scalar keys. Pure: no I/O.
 */
#ifndef ANVIL_BASE_YDOC_H
#define ANVIL_BASE_YDOC_H

#include <jansson.h>
#include <stddef.h>

struct ydoc_pos {
	char *path; /* "" for the document, "a.b[2].c" below it */
	int line;   /* 1-based: where the value starts */
	int col;
	int key_line; /* a mapping's value: where its key starts; else 0 */
	int key_col;
};

struct ydoc {
	json_t *root;
	struct ydoc_pos *pos; /* every value's, in document order */
	int npos, cappos;
};

/* Parses one YAML document. On an error returns ERR_INVALID with
 * "LINE:COL: what is wrong" in err and leaves *doc empty. */
int ydoc_parse(const char *text, size_t len, struct ydoc *doc, char *err, size_t errlen);
void ydoc_free(struct ydoc *doc);
/* The position of the value at path, or of its nearest ancestor written
 * in the document; NULL only for an empty document. */
const struct ydoc_pos *ydoc_where(const struct ydoc *doc, const char *path);
/* Appends ".key" (or "[index]" when key is NULL) to path into out. Keys
 * that are not identifiers ([A-Za-z0-9_-]) are written ["key"]. */
void ydoc_path_join(char *out, size_t len, const char *path, const char *key, size_t index);

#endif
