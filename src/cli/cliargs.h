/* cliargs.h - table-driven command-line parsing for the client verbs.
 *
 * A verb declares its options in a table (long name, optional letter, type,
 * metavariable, help); cliargs_parse() matches argv against that table plus
 * the global options every verb accepts (--server, --token, --help), and
 * collects positionals and the words after "--". It checks syntax only
 * ("--gpus abc" is an error, "--gpus -1" is the number -1: an option that
 * takes a value always consumes the next word, so negative numbers pass
 * through to the server, which owns the semantic limits).
 *
 * Ownership: string values and positionals borrow from argv, which must
 * outlive the struct cliargs; cliargs_cleanup() frees the rest. One thread.
 */
#ifndef ANVIL_CLIARGS_H
#define ANVIL_CLIARGS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

enum cliargs_type {
	CLIARGS_FLAG,     /* no value */
	CLIARGS_STR,      /* any string */
	CLIARGS_INT,      /* a decimal integer, any sign */
	CLIARGS_DURATION, /* "1.5s", "200ms", "3m", "2h", seconds; a leading '-' is kept */
	CLIARGS_KV,       /* KEY=VALUE, repeatable; every value kept in order */
	CLIARGS_SIZE,     /* bytes: "16G", "512M", "1.5TiB", "4096" (see cliargs_parse_size) */
};

struct cliargs_opt {
	const char *name; /* long name without dashes; NULL ends a table */
	char letter;      /* short form ("-f") or 0 */
	enum cliargs_type type;
	const char *metavar;
	const char *help;
};

struct cliargs_value {
	int set;           /* times given */
	const char *str;   /* the last value as written (borrowed from argv) */
	int64_t num;       /* INT: the number; DURATION: milliseconds; SIZE: bytes */
	const char **list; /* KV: every value in order */
	size_t nlist;
};

enum {
	/* The first positional ends option parsing: it and everything after it
	 * land in rest (`anvil run python3 train.py --lr 3`). */
	CLIARGS_STOP_AT_POSITIONAL = 1,
};

struct cliargs {
	const struct cliargs_opt *opts; /* the verb's table */
	struct cliargs_value *values;   /* one per verb option, then one per global */
	char **pos;                     /* positionals (borrowed) */
	int npos;
	char **rest; /* words after "--" (or from the first positional, see above) */
	int nrest;
	int has_rest; /* "--" was given or parsing stopped at a positional */
};

/* The options every verb accepts; ends with a NULL name. */
extern const struct cliargs_opt cliargs_globals[];

/* Parses argv[0..argc) (the words after the verb). 0, or ERR_INVALID with a
 * message naming the option, the value and the reason in err. On failure the
 * struct still needs cliargs_cleanup(). */
int cliargs_parse(struct cliargs *a, const struct cliargs_opt *opts, int flags, int argc,
                  char **argv, char *err, size_t errlen);
void cliargs_cleanup(struct cliargs *a);

/* The value of the verb option or global option called name (never NULL for
 * a name in either table; aborts on a name in neither: a programming error). */
const struct cliargs_value *cliargs_get(const struct cliargs *a, const char *name);
/* Whether the verb's table (or the globals) has the option at all: verbs
 * that share a body builder take different subsets. */
int cliargs_has(const struct cliargs *a, const char *name);
/* Shorthands: the string (NULL when not given), whether a flag was given. */
const char *cliargs_str(const struct cliargs *a, const char *name);
int cliargs_flag(const struct cliargs *a, const char *name);

/* Checks that s is a decimal integer; 0, or ERR_INVALID with
 * `what: "s" is not a number` (or "is out of range") in err. */
int cliargs_parse_int(const char *what, const char *s, int64_t *out, char *err, size_t errlen);

/* Checks that s is a size: a decimal number (fractions allowed) and an
 * optional binary unit K, M, G, T or P (any case, then an optional "i"),
 * then an optional "B": "16G", "512M", "1.5TiB", "4096". 0 with the bytes
 * (rounded down), or ERR_INVALID with `what: "s" is not a size (...)` in
 * err. */
int cliargs_parse_size(const char *what, const char *s, int64_t *out, char *err, size_t errlen);

/* Appends the "Options:" help for a table (and the globals) to out. */
void cliargs_help(const struct cliargs_opt *opts, struct buf *out);

#endif
