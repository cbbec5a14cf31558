/* conf.h - a daemon's config file: YAML whose keys are the daemon's long
 * option names, read as if they came first on its command line.
 *
 * `anvil server` and `anvil agent` read /etc/anvil/server.yaml and
 * /etc/anvil/agent.yaml when the file is there, or the file --config FILE
 * names (--no-config: none). Each key becomes its flag and its value the
 * flag's value, and the daemon's own flag parser checks them, so the file
 * and the command line share one set of types, bounds and messages; the
 * command line is parsed after the file, so a flag given there wins:
 *
 *   listen: 0.0.0.0:7070      ->  --listen 0.0.0.0:7070
 *   node-timeout: 30s         ->  --node-timeout 30s
 *   full-sync: true           ->  --full-sync  (a switch: false leaves it out)
 *
 * A value is one scalar (text, a number, a boolean); each argument keeps
 * where it was written. The keys config, no-config, check-config and help
 * are the command line's alone.
 *
 * Every error of a file is said, in the file's order, as `anvil fleet
 * check` says a spec's: a key that cannot be a flag (a list as its value,
 * a switch that is not true or false, a command-line key) is kept as an
 * error by conf_parse instead of becoming arguments, the daemon's parser
 * checks the arguments that were made and adds what it refuses with
 * conf_error(), and conf_report() writes them all, sorted by position, as
 * "FILE:LINE:COLUMN: KEY: what is wrong". A struct conf owns its strings
 * until conf_free. Single-threaded: a daemon's start.
 */
#ifndef ANVIL_BASE_CONF_H
#define ANVIL_BASE_CONF_H

#include <stddef.h>
#include <stdio.h>

#define CONF_FILE_MAX (1 << 20) /* a config file is a page a person wrote */

struct ydoc;
struct schema_errors;

struct conf {
	char *file;   /* the file read; NULL when none was */
	int argc;     /* argv[0] is the file's name, as a program's is */
	char **argv;  /* NULL-ended: "--key", "value", ... in the file's order */
	char **where; /* where[i]: "FILE:LINE:COLUMN" of argv[i]: a flag's key, a value's value */
	/* conf.c's own: the key argv[i] came from ("" for argv[0]) and whether
	 * argv[i] is a flag (its errors point at the key), the document with
	 * every value's position, and the errors found so far */
	char **key;
	unsigned char *is_flag;
	struct ydoc *doc;
	struct schema_errors *errors;
};

/* The file to read: --config FILE's (or --config=FILE's) in argv; none
 * with --no-config; else dflt when it exists; else none (NULL). */
const char *conf_choose(int argc, char *const *argv, const char *dflt);

/* Parses text (len bytes) as the file named file into out. switches
 * (NULL-ended) are the options that take no value. 0 when the text is a
 * YAML document: each key became its arguments or an error kept in out
 * (conf_errors); else ERR_INVALID with "FILE:LINE:COLUMN: what is wrong"
 * in err and out empty. */
int conf_parse(const char *file, const char *text, size_t len, const char *const *switches,
               struct conf *out, char *err, size_t errlen);

/* conf_choose, then the file read (capped at CONF_FILE_MAX) and parsed:
 * 0 with out empty when there is no file to read; 0 with the file's
 * arguments and errors (conf_parse) when there is; an error when --config
 * lacks its FILE, the file cannot be read ("PROG: cannot read ...") or is
 * no YAML document. err holds the message as lines to print as they are. */
int conf_load(int argc, char *const *argv, const char *prog, const char *dflt,
              const char *const *switches, struct conf *out, char *err, size_t errlen);

/* Records an error about argv[i] of c, a flag (said at its key) or a
 * value (at the value), as "KEY: " and fmt's text. */
void conf_error(struct conf *c, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The errors of c so far (0 for a conf without a file). */
int conf_errors(const struct conf *c);
/* Writes every error of c to f, in the file's order, one line each;
 * returns how many there were. */
int conf_report(const struct conf *c, FILE *f);

/* Where argv[i] of c was written, or NULL when c is NULL or i is not in
 * it: what a parser that reads either a file's or the command line's
 * arguments passes to its messages. */
const char *conf_where(const struct conf *c, int i);

void conf_free(struct conf *c);

#endif
