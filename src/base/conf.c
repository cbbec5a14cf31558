#include "base/conf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/schema.h"
#include "base/util.h"
#include "base/ydoc.h"

/* Options that act on the command line itself, never set in a file. */
static const char *const command_line_only[] = {"config", "no-config", "check-config", "help"};

/* The file named on the command line: 1 with *file set (NULL for
 * --no-config), 0 when none is named, -1 when --config lacks its FILE. */
static int named(int argc, char *const *argv, const char **file)
{
	int found = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--no-config") == 0) {
			*file = NULL;
			found = 1;
		} else if (strncmp(argv[i], "--config=", 9) == 0) {
			*file = argv[i] + 9;
			found = 1;
		} else if (strcmp(argv[i], "--config") == 0) {
			if (i + 1 >= argc || !*argv[i + 1])
				return -1;
			*file = argv[++i];
			found = 1;
		}
	}
	return found;
}

const char *conf_choose(int argc, char *const *argv, const char *dflt)
{
	const char *file = NULL;
	int n = named(argc, argv, &file);
	if (n)
		return n > 0 ? file : NULL;
	return dflt && access(dflt, F_OK) == 0 ? dflt : NULL;
}

/* Appends arg, written at line:col under the key path (a flag: is_flag). */
static void add_arg(struct conf *c, const char *arg, const char *path, int is_flag, int line,
                    int col)
{
	size_t n = (size_t)c->argc + 2;
	c->argv = xrealloc(c->argv, sizeof(char *) * n);
	c->where = xrealloc(c->where, sizeof(char *) * n);
	c->key = xrealloc(c->key, sizeof(char *) * n);
	c->is_flag = xrealloc(c->is_flag, n);
	c->argv[c->argc] = xstrdup(arg);
	c->where[c->argc] = xasprintf("%s:%d:%d", c->file, line, col);
	c->key[c->argc] = xstrdup(path);
	c->is_flag[c->argc] = (unsigned char)is_flag;
	c->argc++;
	c->argv[c->argc] = NULL;
	c->where[c->argc] = NULL;
	c->key[c->argc] = NULL;
}

static int is_switch(const char *const *switches, const char *k)
{
	for (; switches && *switches; switches++)
		if (strcmp(*switches, k) == 0)
			return 1;
	return 0;
}

/* The value as the flag's text; NULL with an error when it is none. */
static char *value_text(const json_t *v, const char *k, struct schema_errors *e)
{
	if (json_is_string(v))
		return xstrdup(json_string_value(v));
	if (json_is_integer(v))
		return xasprintf("%lld", (long long)json_integer_value(v));
	if (json_is_real(v))
		return xasprintf("%.15g", json_real_value(v));
	if (json_is_boolean(v))
		return xstrdup(json_is_true(v) ? "true" : "false");
	schema_add(e, k, "should be one value (text, a number or a boolean), not %s",
	           schema_type_name(v));
	return NULL;
}

/* Refuses what the command line alone may say; 1 when k is fine. */
static int key_ok(const char *k, const char *path, struct schema_errors *e)
{
	const char *why = NULL;
	for (size_t i = 0; i < sizeof(command_line_only) / sizeof(command_line_only[0]); i++)
		if (strcmp(k, command_line_only[i]) == 0)
			why = "is given on the command line only";
	if (k[0] == '-')
		why = "is an option's name with its dashes: write the name alone";
	struct schema_error *x = why ? schema_add(e, path, "%s", why) : NULL;
	if (x)
		x->at_key = 1;
	return why == NULL;
}

/* One key of the file and its value, as arguments, or as an error. */
static void one(const char *k, const json_t *v, const char *const *switches, struct conf *c)
{
	char path[256], flag[300];
	struct schema_errors *e = c->errors;
	schema_join(path, sizeof(path), "", k);
	if (!key_ok(k, path, e))
		return;
	const struct ydoc_pos *p = ydoc_where(c->doc, path); /* there: k is in the document */
	snprintf(flag, sizeof(flag), "--%s", k);
	if (is_switch(switches, k)) {
		if (!json_is_boolean(v))
			schema_add(e, path, "is a switch: true or false, not %s",
			           schema_type_name(v));
		else if (json_is_true(v))
			add_arg(c, flag, path, 1, p->key_line, p->key_col);
		return;
	}
	char *text = value_text(v, path, e);
	if (!text)
		return;
	add_arg(c, flag, path, 1, p->key_line, p->key_col);
	add_arg(c, text, path, 0, p->line, p->col);
	free(text);
}

int conf_parse(const char *file, const char *text, size_t len, const char *const *switches,
               struct conf *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	struct ydoc *doc = xcalloc(1, sizeof(*doc));
	char perr[256];
	if (ydoc_parse(text, len, doc, perr, sizeof(perr))) {
		snprintf(err, errlen, "%s:%s\n", file, perr);
		free(doc);
		return ERR_INVALID;
	}
	out->file = xstrdup(file);
	out->doc = doc;
	out->errors = xcalloc(1, sizeof(*out->errors));
	add_arg(out, file, "", 0, 1, 1);
	if (json_is_object(doc->root)) {
		const char *k;
		json_t *v;
		json_object_foreach (doc->root, k, v)
			one(k, v, switches, out);
	} else if (!json_is_null(doc->root)) {
		schema_add(out->errors, "", "should be a mapping of option names to values, not %s",
		           schema_type_name(doc->root));
	}
	return 0;
}

int conf_load(int argc, char *const *argv, const char *prog, const char *dflt,
              const char *const *switches, struct conf *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	const char *file = NULL;
	if (named(argc, argv, &file) < 0) {
		snprintf(err, errlen, "%s: --config needs a FILE (--no-config reads none)\n", prog);
		return ERR_INVALID;
	}
	file = conf_choose(argc, argv, dflt);
	if (!file)
		return 0;
	struct buf b;
	buf_init(&b);
	int rc = read_file(file, CONF_FILE_MAX, &b);
	if (rc)
		snprintf(err, errlen, "%s: cannot read the config file %s: %s\n", prog, file,
		         rc == -EFBIG ? "larger than 1 MiB" : strerror(-rc));
	else
		rc = conf_parse(file, b.data, b.len, switches, out, err, errlen);
	buf_cleanup(&b);
	return rc;
}

const char *conf_where(const struct conf *c, int i)
{
	return c && i >= 0 && i < c->argc ? c->where[i] : NULL;
}

void conf_error(struct conf *c, int i, const char *fmt, ...)
{
	if (!c->errors || i < 0 || i >= c->argc)
		return;
	char msg[sizeof(c->errors->v[0].msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct schema_error *x = schema_add(c->errors, c->key[i], "%s", msg);
	if (x)
		x->at_key = c->is_flag[i];
}

int conf_errors(const struct conf *c)
{
	return c->errors ? schema_count(c->errors) : 0;
}

int conf_report(const struct conf *c, FILE *f)
{
	int n = conf_errors(c);
	if (!n)
		return 0;
	size_t len = (size_t)SCHEMA_MAX_ERRORS * 640 + 256;
	char *text = xmalloc(len);
	schema_write(c->file, c->doc, c->errors, text, len);
	fputs(text, f);
	free(text);
	return n;
}

void conf_free(struct conf *c)
{
	for (int i = 0; i < c->argc; i++) {
		free(c->argv[i]);
		free(c->where[i]);
		free(c->key[i]);
	}
	free(c->argv);
	free(c->where);
	free(c->key);
	free(c->is_flag);
	free(c->file);
	if (c->doc)
		ydoc_free(c->doc);
	free(c->doc);
	free(c->errors);
	memset(c, 0, sizeof(*c));
}
