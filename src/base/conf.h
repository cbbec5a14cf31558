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
 * where it was written, so that the parser's message can start with
 * FILE:LINE:COLUMN. The keys config, no-config, check-config and help are
 * the command line's alone. A struct conf owns its strings until
 * conf_free. Single-threaded: a daemon's start.
 */
#ifndef ANVIL_BASE_CONF_H
#define ANVIL_BASE_CONF_H

#include <stddef.h>

#define CONF_FILE_MAX (1 << 20) /* a config file is a page a person wrote */

struct conf {
	char *file;   /* the file read; NULL when none was */
	int argc;     /* argv[0] is the file's name, as a program's is */
	char **argv;  /* NULL-ended: "--key", "value", ... in the file's order */
	char **where; /* where[i]: "FILE:LINE:COLUMN" of argv[i]: a flag's key, a value's value */
};

/* The file to read: --config FILE's (or --config=FILE's) in argv; none
 * with --no-config; else dflt when it exists; else none (NULL). */
const char *conf_choose(int argc, char *const *argv, const char *dflt);

/* Parses text (len bytes) as the file named file into out. switches
 * (NULL-ended) are the options that take no value. 0, or ERR_INVALID with
 * every error as a line "FILE:LINE:COLUMN: KEY: what is wrong" in err and
 * out empty. */
int conf_parse(const char *file, const char *text, size_t len, const char *const *switches,
               struct conf *out, char *err, size_t errlen);

/* conf_choose, then the file read (capped at CONF_FILE_MAX) and parsed:
 * 0 with out empty when there is no file to read; an error when --config
 * lacks its FILE, the file cannot be read ("PROG: cannot read ...") or
 * does not parse (conf_parse's lines). err holds the message as lines to
 * print as they are. */
int conf_load(int argc, char *const *argv, const char *prog, const char *dflt,
              const char *const *switches, struct conf *out, char *err, size_t errlen);

/* Where argv[i] of c was written, or NULL when c is NULL or i is not in
 * it: what a parser that reads either a file's or the command line's
 * arguments passes to its messages. */
const char *conf_where(const struct conf *c, int i);

void conf_free(struct conf *c);

#endif
