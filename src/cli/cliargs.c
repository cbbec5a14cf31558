#include "cli/cliargs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/util.h"

const struct cliargs_opt cliargs_globals[] = {
        {"server", 0, CLIARGS_STR, "URL", "the server (default: $ANVIL_SERVER, then client.json)"},
        {"token", 0, CLIARGS_STR, "TOKEN",
         "the admin token (default: $ANVIL_TOKEN, then client.json)"},
        {"help", 'h', CLIARGS_FLAG, NULL, "show this help and exit"},
        {NULL, 0, 0, NULL, NULL},
};

static size_t count(const struct cliargs_opt *opts)
{
	size_t n = 0;
	while (opts && opts[n].name)
		n++;
	return n;
}

/* The index into a->values of the option called name (len bytes) or with
 * the given letter, or -1. */
static int find(const struct cliargs *a, const char *name, size_t len, char letter)
{
	size_t nverb = count(a->opts);
	for (size_t i = 0; i < nverb + count(cliargs_globals); i++) {
		const struct cliargs_opt *o = i < nverb ? &a->opts[i] : &cliargs_globals[i - nverb];
		if (name && strlen(o->name) == len && strncmp(o->name, name, len) == 0)
			return (int)i;
		if (!name && letter && o->letter == letter)
			return (int)i;
	}
	return -1;
}

static const struct cliargs_opt *opt_at(const struct cliargs *a, int i)
{
	size_t nverb = count(a->opts);
	return (size_t)i < nverb ? &a->opts[i] : &cliargs_globals[(size_t)i - nverb];
}

int cliargs_parse_int(const char *what, const char *s, int64_t *out, char *err, size_t errlen)
{
	int64_t v;
	if (parse_i64(s, INT64_MIN, INT64_MAX, &v) == 0 && s[0] != ' ' && s[0] != '\t') {
		*out = v;
		return 0;
	}
	/* Digits that do not fit are a different mistake from letters. */
	size_t lead = (s[0] == '-' || s[0] == '+') ? 1 : 0;
	int digits = s[lead] != '\0' && strspn(s + lead, "0123456789") == strlen(s + lead);
	snprintf(err, errlen, "%s: \"%s\" %s", what, s,
	         digits ? "is out of range" : "is not a number");
	return ERR_INVALID;
}

static int parse_duration(const char *what, const char *s, int64_t *out, char *err, size_t errlen)
{
	/* A negative grace is a semantic error: keep the sign and let the
	 * server say what the bounds are. */
	int neg = s[0] == '-';
	int64_t ms;
	if (parse_duration_ms(s + neg, &ms) < 0 || s[neg] == '-') {
		snprintf(err, errlen,
		         "%s: \"%s\" is not a duration (examples: 30s, 1.5s, 200ms, 5m, 1h)", what,
		         s);
		return ERR_INVALID;
	}
	*out = neg ? -ms : ms;
	return 0;
}

static double size_unit(char c)
{
	static const char units[] = "kmgtp";
	const char *u = c ? strchr(units, c | 0x20) : NULL;
	return u ? (double)(1LL << (10 * (u - units + 1))) : 0;
}

int cliargs_parse_size(const char *what, const char *s, int64_t *out, char *err, size_t errlen)
{
	/* Digits and a point only: strtod's signs, spaces, hex, "inf" and
	 * exponents are no sizes. */
	size_t n = strspn(s, "0123456789.");
	char *end = NULL;
	double v = n ? strtod(s, &end) : -1;
	const char *u = s + n;
	double mult = size_unit(*u);
	if (mult > 0) {
		u++;
		if (*u == 'i')
			u++;
	} else {
		mult = 1;
	}
	if (*u == 'B')
		u++;
	if (n == 0 || end != s + n || *u) {
		snprintf(err, errlen, "%s: \"%s\" is not a size (examples: 16G, 512M, 1.5T, 4096)",
		         what, s);
		return ERR_INVALID;
	}
	if (v * mult >= 9.2e18) {
		snprintf(err, errlen, "%s: \"%s\" is out of range", what, s);
		return ERR_INVALID;
	}
	*out = (int64_t)(v * mult);
	return 0;
}

static int store(struct cliargs *a, int idx, const char *val, char *err, size_t errlen)
{
	const struct cliargs_opt *o = opt_at(a, idx);
	struct cliargs_value *v = &a->values[idx];
	char what[64];
	snprintf(what, sizeof(what), "--%s", o->name);
	switch (o->type) {
	case CLIARGS_FLAG: break;
	case CLIARGS_STR: break;
	case CLIARGS_INT:
		if (cliargs_parse_int(what, val, &v->num, err, errlen) < 0)
			return ERR_INVALID;
		break;
	case CLIARGS_DURATION:
		if (parse_duration(what, val, &v->num, err, errlen) < 0)
			return ERR_INVALID;
		break;
	case CLIARGS_SIZE:
		if (cliargs_parse_size(what, val, &v->num, err, errlen) < 0)
			return ERR_INVALID;
		break;
	case CLIARGS_KV: {
		const char *eq = strchr(val, '=');
		if (!eq || eq == val) {
			snprintf(err, errlen, "%s: \"%s\" is not %s", what, val,
			         o->metavar ? o->metavar : "KEY=VALUE");
			return ERR_INVALID;
		}
		v->list = xrealloc(v->list, (v->nlist + 1) * sizeof(*v->list));
		v->list[v->nlist++] = val;
		break;
	}
	}
	v->str = val;
	v->set++;
	return 0;
}

/* One "--name", "--name=value" or "--name value" at argv[*i]. */
static int parse_long(struct cliargs *a, int argc, char **argv, int *i, char *err, size_t errlen)
{
	const char *name = argv[*i] + 2;
	const char *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	int idx = find(a, name, len, 0);
	if (idx < 0) {
		snprintf(err, errlen, "unknown option --%.*s", (int)len, name);
		return ERR_INVALID;
	}
	const struct cliargs_opt *o = opt_at(a, idx);
	if (o->type == CLIARGS_FLAG) {
		if (eq) {
			snprintf(err, errlen, "--%s takes no value (got \"%s\")", o->name, eq + 1);
			return ERR_INVALID;
		}
		return store(a, idx, NULL, err, errlen);
	}
	if (eq)
		return store(a, idx, eq + 1, err, errlen);
	if (*i + 1 >= argc) {
		snprintf(err, errlen, "--%s needs a value (%s)", o->name, o->metavar);
		return ERR_INVALID;
	}
	return store(a, idx, argv[++*i], err, errlen);
}

/* "-f", "-fh", "-r1" or "-r 1" at argv[*i]. */
static int parse_short(struct cliargs *a, int argc, char **argv, int *i, char *err, size_t errlen)
{
	const char *w = argv[*i];
	for (size_t k = 1; w[k]; k++) {
		int idx = find(a, NULL, 0, w[k]);
		if (idx < 0) {
			snprintf(err, errlen, "unknown option -%c", w[k]);
			return ERR_INVALID;
		}
		const struct cliargs_opt *o = opt_at(a, idx);
		if (o->type == CLIARGS_FLAG) {
			if (store(a, idx, NULL, err, errlen) < 0)
				return ERR_INVALID;
			continue;
		}
		if (w[k + 1])
			return store(a, idx, w + k + 1, err, errlen);
		if (*i + 1 >= argc) {
			snprintf(err, errlen, "-%c needs a value (%s)", w[k], o->metavar);
			return ERR_INVALID;
		}
		return store(a, idx, argv[++*i], err, errlen);
	}
	return 0;
}

int cliargs_parse(struct cliargs *a, const struct cliargs_opt *opts, int flags, int argc,
                  char **argv, char *err, size_t errlen)
{
	memset(a, 0, sizeof(*a));
	a->opts = opts;
	a->values = xcalloc(count(opts) + count(cliargs_globals), sizeof(*a->values));
	a->pos = xcalloc((size_t)argc + 1, sizeof(*a->pos));
	for (int i = 0; i < argc; i++) {
		const char *w = argv[i];
		int rc = 0;
		if (strcmp(w, "--") == 0) {
			a->rest = argv + i + 1;
			a->nrest = argc - i - 1;
			a->has_rest = 1;
			break;
		} else if (w[0] == '-' && w[1] == '-') {
			rc = parse_long(a, argc, argv, &i, err, errlen);
		} else if (w[0] == '-' && w[1] != '\0') {
			rc = parse_short(a, argc, argv, &i, err, errlen);
		} else if (flags & CLIARGS_STOP_AT_POSITIONAL) {
			a->rest = argv + i;
			a->nrest = argc - i;
			a->has_rest = 1;
			break;
		} else {
			a->pos[a->npos++] = argv[i];
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

void cliargs_cleanup(struct cliargs *a)
{
	if (a->values) {
		size_t n = count(a->opts) + count(cliargs_globals);
		for (size_t i = 0; i < n; i++)
			free(a->values[i].list);
	}
	free(a->values);
	free(a->pos);
	memset(a, 0, sizeof(*a));
}

int cliargs_has(const struct cliargs *a, const char *name)
{
	return find(a, name, strlen(name), 0) >= 0;
}

const struct cliargs_value *cliargs_get(const struct cliargs *a, const char *name)
{
	int idx = find(a, name, strlen(name), 0);
	if (idx < 0) {
		fprintf(stderr, "anvil: internal error: no option --%s\n", name);
		abort();
	}
	return &a->values[idx];
}

const char *cliargs_str(const struct cliargs *a, const char *name)
{
	const struct cliargs_value *v = cliargs_get(a, name);
	return v->set ? v->str : NULL;
}

int cliargs_flag(const struct cliargs *a, const char *name)
{
	return cliargs_get(a, name)->set > 0;
}

static void help_one(const struct cliargs_opt *o, struct buf *out)
{
	char left[64];
	const char *mv = o->metavar ? o->metavar : "";
	const char *sep = o->metavar ? " " : "";
	if (o->letter)
		snprintf(left, sizeof(left), "-%c, --%s%s%s", o->letter, o->name, sep, mv);
	else
		snprintf(left, sizeof(left), "    --%s%s%s", o->name, sep, mv);
	if (strlen(left) < 24)
		buf_printf(out, "  %-24s%s\n", left, o->help);
	else
		buf_printf(out, "  %s\n  %-24s%s\n", left, "", o->help);
}

void cliargs_help(const struct cliargs_opt *opts, struct buf *out)
{
	if (count(opts) > 0) {
		buf_adds(out, "Options:\n");
		for (size_t i = 0; opts[i].name; i++)
			help_one(&opts[i], out);
		buf_adds(out, "\n");
	}
	buf_adds(out, "Global options (before or after the command):\n");
	for (size_t i = 0; cliargs_globals[i].name; i++)
		help_one(&cliargs_globals[i], out);
}
