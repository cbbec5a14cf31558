/* fields.h - a job's and an attempt's fields, each described once.
 *
 * struct job and struct attempt (model/model.h) cross many places: the
 * client's body (POST /v1/jobs), the record the server builds from it, the
 * database row (its columns and its `extra` JSON), each rank's desired
 * entry (server/ranks.c) and what `anvil show --json` and GET /v1/jobs/ID
 * show (server/state.c). Each field is one entry of fields_job[] or
 * fields_attempt[] here, which says where it is in each of them:
 *
 *   name     its key in the body, in `extra` and in the desired entry;
 *   kind     the C member that holds it (offset), or FIELD_MORE: no member,
 *            its value is in the job's `more` object under its name (a plain
 *            new field needs no change to model.h), or FIELD_NONE: a part of
 *            the body that another field holds (gpu_type is in constraints);
 *   column   its SQLite column, bound and read by that name (store.c and
 *            load.c make their SQL from the table once, at open and load);
 *            FIELD_EXTRA: a key of the `extra` column instead; neither: not
 *            stored (in memory only);
 *   flags    FIELD_CLIENT: the client may set it, and its JSON type and
 *            bounds are those of the submit record (proto/wire.h,
 *            wire_submit; a FIELD_MORE field has its own here, and the
 *            body is checked with both: fields_body()); FIELD_DESIRED:
 *            copied into each rank's desired entry (what depends on the
 *            rank, its env and a head's fields, ranks.c adds);
 *            FIELD_SHOWN: shown, under `shown` when set, an unset value as
 *            `unset` says; FIELD_CHANGES: written again at each change of
 *            a written job (store_put_job_state);
 *   default  what the record holds when the body or the row lacks it.
 *
 * A field that needs its own codec (the constraints made of four body
 * fields, cpus kept as cpu_millis, an array's member, the exit code and
 * has_exit, an attempt's ranks) names it in its entry; the rest are copied
 * by their kind. The tables are what the store (store.c, load.c), the
 * API's validation and record building (server/jobs.c), the desired
 * entries (server/ranks.c), the shown job and attempt (server/state.c) and
 * `anvil run --field` (cli/submit.c) loop over; what a table cannot say
 * (the queue exists, a cwd is absolute, a head and MPI do not go together)
 * server/jobs.c checks next to it. tests/unit/model/test_fields.c checks
 * the client fields against the submit record both ways, and the columns
 * against the schema, so they cannot drift.
 *
 * Adding a client-settable field: one entry with FIELD_MORE (docs/
 * architecture.md, "Adding a field", walks through the probe field).
 *
 * The tables are constant and fields_body() is made once (pthread_once):
 * every function may be called from any thread; those that fill a record
 * write only the record the caller passes.
 */
#ifndef ANVIL_FIELDS_H
#define ANVIL_FIELDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/jv.h"
#include "model/model.h"

enum field_kind {
	FIELD_INT,   /* int */
	FIELD_INT64, /* int64_t */
	FIELD_BOOL,  /* int, 0 or 1; true or false in JSON */
	FIELD_STR,   /* char *, malloc'd; NULL: unset */
	FIELD_TEXT,  /* char[size]; "": unset */
	FIELD_JSON,  /* json_t *, a reference; NULL: unset */
	FIELD_STATE, /* enum job_state; its name in JSON and in its column */
	FIELD_MORE,  /* no member: the job's `more` object holds it (jobs only) */
	FIELD_NONE,  /* no value of its own (a part of another field's body) */
};

enum field_flag {
	FIELD_CLIENT = 1 << 0,  /* the client may set it in the submit body */
	FIELD_SHOWN = 1 << 1,   /* shown by state_job_json (under `shown`, or name) */
	FIELD_DESIRED = 1 << 2, /* copied into each rank's desired entry */
	FIELD_EXTRA = 1 << 3,   /* stored in the `extra` JSON column under its name */
	FIELD_SPARSE = 1 << 4,  /* in extra and the desired entry only when set */
	FIELD_MEMO = 1 << 5,    /* its stored text is kept by the value's identity */
	FIELD_SHARED = 1 << 6,  /* an array's members share the first one's value */
	/* A column that changes after the job is written (its state, times,
	 * exit, cancel request and reason): store_put_job_state() writes these
	 * again, and nothing else. */
	FIELD_CHANGES = 1 << 7,
};

/* At most this many fields in a table (the store keeps a parameter index
 * for each). */
#define FIELDS_MAX 64

/* How an unset value (0, NULL, "") is shown; FIELD_SHOW_VALUE: as it is. */
enum field_unset {
	FIELD_SHOW_VALUE,
	FIELD_SHOW_NULL,
	FIELD_SHOW_ARRAY,  /* [] */
	FIELD_SHOW_OBJECT, /* {} */
	FIELD_SHOW_OMIT,   /* not shown */
};

/* A field that its kind cannot copy. Each function may be NULL (then the
 * kind's copy is used). rec is a struct job or struct attempt. */
struct field_codec {
	/* The stored value (its column's or its key's in extra): a new
	 * reference, or NULL for none (left out of extra, NULL in a column). */
	json_t *(*encode)(const void *rec);
	/* From the stored value v (NULL: absent) into rec. */
	void (*decode)(void *rec, const json_t *v);
	/* The shown value, a new reference; NULL: not shown. */
	json_t *(*show)(const void *rec);
	/* From the submit body (already checked) into rec. */
	void (*from_body)(void *rec, const json_t *body);
	/* A column's value as JSON text (malloc'd), formatted without jansson
	 * where that was the hot path (an attempt's ranks). */
	char *(*text)(const void *rec);
};

struct field {
	const char *name;
	enum field_kind kind;
	size_t offset; /* of the member; FIELD_TEXT: size is its array's */
	size_t size;
	const char *column; /* its column in the record's table; NULL: none */
	unsigned flags;
	int64_t dflt;         /* an integer's or a boolean's default */
	const char *dflt_str; /* a string's; a JSON value's, as JSON text */
	const char *shown;    /* its key when shown; NULL: name */
	enum field_unset unset;
	const struct field_codec *codec;
	/* FIELD_MORE only: its type and bounds in the body (as jv.h), and a
	 * line for docs/api.md; the others' are the submit record's. */
	enum jv_type type;
	int64_t min, max;
	const char *meaning;
};

/* The job's and the attempt's fields; each ends with a NULL name. */
extern const struct field fields_job[];
extern const struct field fields_attempt[];

/* The field of t called name, or NULL. */
const struct field *fields_find(const struct field *t, const char *name);

/* Whether f's member in rec holds nothing: 0, NULL or "". */
int fields_unset(const struct field *f, const void *rec);

/* The value of f in rec as JSON, a new reference: as stored (FIELD_SHOW_
 * rules aside), or NULL when f is FIELD_SPARSE and unset, or has no value
 * of its own. What the desired entry and extra carry. */
json_t *fields_value(const struct field *f, const void *rec);
/* As shown: under fields_shown_name(f), or NULL when not shown. */
json_t *fields_show(const struct field *f, const void *rec);
const char *fields_shown_name(const struct field *f);

/* Sets f in rec from v (NULL: absent: the default), as decoding a row
 * does. rec owns what it gets. */
void fields_decode(const struct field *f, void *rec, const json_t *v);

/* What a submit body may hold, as jv.h fields for jv_check(): the submit
 * record's (proto/wire.h, wire_submit) and the client-settable FIELD_MORE
 * fields'; ends with a NULL name. Made once; then constant. */
const struct jv_field *fields_body(void);
/* The entry of fields_body() called name, or NULL: not a field the client
 * may set. */
const struct jv_field *fields_client(const char *name);

/* The `extra` column of rec: its FIELD_EXTRA fields of table t as JSON
 * text (malloc'd), the sparse ones only when set. memo, when not NULL,
 * gives the text of a FIELD_MEMO value (the store keeps the last one by
 * its identity). */
typedef const char *(*fields_memo_fn)(void *ctx, const struct field *f, const json_t *v);
char *fields_extra_text(const struct field *t, const void *rec, fields_memo_fn memo, void *ctx);
/* Each FIELD_EXTRA field of t into rec from extra (NULL: every default). */
void fields_extra_decode(const struct field *t, void *rec, const json_t *extra);

/* The shown fields of rec (a record of table t), in table order, into o:
 * state_job_json adds what needs the server (a job's placement and
 * attempts, an attempt's ranks with their nodes, its head's address). */
void fields_show_all(const struct field *t, const void *rec, json_t *o);

/* Fills j's fields from the submit body (checked by the caller): every
 * FIELD_CLIENT field by its kind or its codec, the rest to their default;
 * like: an array's first member, whose FIELD_SHARED values j shares
 * (never changed: model.h), or NULL. */
void fields_job_from_body(struct job *j, const json_t *body, const struct job *like);

/* Puts each FIELD_DESIRED field of j that is set into d through put (the
 * caller checks the name against its record); v is a new reference. */
void fields_desired(const struct job *j, void (*put)(void *ctx, const char *name, json_t *v),
                    void *ctx);

#endif
