#include "base/ydoc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/err.h"
#include "base/mem.h"

#define PATH_MAX_LEN 512
#define DEPTH_MAX    64 /* nesting; a workflow needs a handful */

struct parser {
	yaml_parser_t p;
	struct ydoc *doc;
	char *err;
	size_t errlen;
	int failed;
};

static int fail(struct parser *ps, const yaml_mark_t *m, const char *fmt, const char *arg)
{
	if (!ps->failed) {
		int n = snprintf(ps->err, ps->errlen, "%zu:%zu: ", m->line + 1, m->column + 1);
		if (n > 0 && (size_t)n < ps->errlen)
			snprintf(ps->err + n, ps->errlen - (size_t)n, fmt, arg);
	}
	ps->failed = 1;
	return ERR_INVALID;
}

static int next(struct parser *ps, yaml_event_t *ev)
{
	if (yaml_parser_parse(&ps->p, ev))
		return 0;
	const char *problem = ps->p.problem ? ps->p.problem : "not valid YAML";
	return fail(ps, &ps->p.problem_mark, "%s", problem);
}

static void add_pos(struct ydoc *doc, const char *path, const yaml_mark_t *m,
                    const yaml_mark_t *key)
{
	XGROW(doc->pos, doc->npos, doc->cappos);
	doc->pos[doc->npos++] =
	        (struct ydoc_pos){xstrdup(path), (int)m->line + 1, (int)m->column + 1,
	                          key ? (int)key->line + 1 : 0, key ? (int)key->column + 1 : 0};
}

void ydoc_path_join(char *out, size_t len, const char *path, const char *key, size_t index)
{
	if (!key) {
		snprintf(out, len, "%s[%zu]", path, index);
		return;
	}
	int plain = *key != '\0';
	for (const char *c = key; *c && plain; c++)
		plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		        (*c >= '0' && *c <= '9') || *c == '_' || *c == '-';
	if (plain)
		snprintf(out, len, "%s%s%s", path, *path ? "." : "", key);
	else
		snprintf(out, len, "%s[\"%s\"]", path, key);
}

/* YAML 1.2 core schema for a plain scalar; NULL: not a number. */
static json_t *plain_number(const char *s)
{
	const char *c = s + (*s == '-' || *s == '+');
	int digits = 0, dot = 0, exp = 0;
	for (; *c; c++) {
		if (*c >= '0' && *c <= '9')
			digits++;
		else if (*c == '.' && !dot && !exp)
			dot = 1;
		else if ((*c == 'e' || *c == 'E') && digits && !exp) {
			exp = 1;
			if (c[1] == '-' || c[1] == '+')
				c++;
			if (!(c[1] >= '0' && c[1] <= '9'))
				return NULL;
		} else
			return NULL;
	}
	if (!digits)
		return NULL;
	errno = 0;
	if (!dot && !exp) {
		char *end;
		long long v = strtoll(s, &end, 10);
		if (errno == 0 && *end == '\0')
			return json_integer(v);
	}
	double d = strtod(s, NULL);
	return errno == ERANGE ? NULL : json_real(d);
}

static json_t *scalar_value(const yaml_event_t *ev)
{
	const char *s = (const char *)ev->data.scalar.value;
	if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return json_stringn(s, ev->data.scalar.length);
	if (!*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
	    strcmp(s, "NULL") == 0)
		return json_null();
	if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
		return json_true();
	if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
		return json_false();
	json_t *num = plain_number(s);
	return num ? num : json_stringn(s, ev->data.scalar.length);
}

/* Anchors and tags make a document harder to read than to write. */
static int plain_node(struct parser *ps, const yaml_event_t *ev)
{
	const yaml_char_t *anchor = NULL, *tag = NULL;
	if (ev->type == YAML_SCALAR_EVENT) {
		anchor = ev->data.scalar.anchor;
		tag = ev->data.scalar.tag;
	} else if (ev->type == YAML_SEQUENCE_START_EVENT) {
		anchor = ev->data.sequence_start.anchor;
		tag = ev->data.sequence_start.tag;
	} else if (ev->type == YAML_MAPPING_START_EVENT) {
		anchor = ev->data.mapping_start.anchor;
		tag = ev->data.mapping_start.tag;
	}
	if (anchor)
		return fail(ps, &ev->start_mark, "anchors (&%s) are not supported: write it out",
		            (const char *)anchor);
	if (tag)
		return fail(ps, &ev->start_mark, "tags (%s) are not supported", (const char *)tag);
	return 0;
}

static json_t *node(struct parser *ps, yaml_event_t *ev, const char *path, int depth,
                    const yaml_mark_t *key);

static json_t *sequence(struct parser *ps, const char *path, int depth)
{
	json_t *arr = json_array();
	char sub[PATH_MAX_LEN];
	for (size_t i = 0; !ps->failed; i++) {
		yaml_event_t ev;
		if (next(ps, &ev))
			break;
		if (ev.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		ydoc_path_join(sub, sizeof(sub), path, NULL, i);
		json_t *v = node(ps, &ev, sub, depth + 1, NULL);
		if (v)
			json_array_append_new(arr, v);
	}
	return arr;
}

static json_t *mapping(struct parser *ps, const char *path, int depth)
{
	json_t *obj = json_object();
	char sub[PATH_MAX_LEN];
	while (!ps->failed) {
		yaml_event_t k;
		if (next(ps, &k))
			break;
		if (k.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&k);
			break;
		}
		const char *key =
		        k.type == YAML_SCALAR_EVENT ? (const char *)k.data.scalar.value : "";
		if (k.type != YAML_SCALAR_EVENT)
			fail(ps, &k.start_mark, "%s",
			     "a key must be plain text, not a list or mapping");
		else if (k.data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(key, "<<") == 0)
			fail(ps, &k.start_mark, "%s",
			     "merge keys (<<) are not supported: write it out");
		else if (json_object_get(obj, key))
			fail(ps, &k.start_mark, "'%s' is given twice", key);
		else
			plain_node(ps, &k);
		yaml_event_t v;
		if (ps->failed || next(ps, &v)) {
			yaml_event_delete(&k);
			break;
		}
		ydoc_path_join(sub, sizeof(sub), path, key, 0);
		json_t *val = node(ps, &v, sub, depth + 1, &k.start_mark);
		if (val)
			json_object_set_new(obj, key, val);
		yaml_event_delete(&k);
	}
	return obj;
}

/* The value that starts with ev (deleted here), a mapping's with its key's
 * mark; NULL on an error. */
static json_t *node(struct parser *ps, yaml_event_t *ev, const char *path, int depth,
                    const yaml_mark_t *key)
{
	json_t *v = NULL;
	if (depth > DEPTH_MAX)
		fail(ps, &ev->start_mark, "%s", "nested too deeply");
	else if (ev->type == YAML_ALIAS_EVENT)
		fail(ps, &ev->start_mark, "aliases (*%s) are not supported: write it out",
		     (const char *)ev->data.alias.anchor);
	else if (plain_node(ps, ev) == 0) {
		add_pos(ps->doc, path, &ev->start_mark, key);
		if (ev->type == YAML_SCALAR_EVENT)
			v = scalar_value(ev);
		else if (ev->type == YAML_SEQUENCE_START_EVENT)
			v = sequence(ps, path, depth);
		else if (ev->type == YAML_MAPPING_START_EVENT)
			v = mapping(ps, path, depth);
	}
	yaml_event_delete(ev);
	if (ps->failed) {
		json_decref(v);
		return NULL;
	}
	return v;
}

/* Skips events up to the document's first node, or its end. */
static int document(struct parser *ps, yaml_event_t *ev)
{
	for (;;) {
		if (next(ps, ev))
			return ERR_INVALID;
		if (ev->type != YAML_STREAM_START_EVENT && ev->type != YAML_DOCUMENT_START_EVENT)
			return 0;
		yaml_event_delete(ev);
	}
}

int ydoc_parse(const char *text, size_t len, struct ydoc *doc, char *err, size_t errlen)
{
	memset(doc, 0, sizeof(*doc));
	struct parser ps = {.doc = doc, .err = err, .errlen = errlen};
	if (!yaml_parser_initialize(&ps.p)) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&ps.p, (const unsigned char *)text, len);
	yaml_event_t ev;
	int ended = 0; /* the stream's end was read: libyaml has nothing after it */
	if (document(&ps, &ev) == 0) {
		ended = ev.type == YAML_STREAM_END_EVENT;
		if (ev.type == YAML_DOCUMENT_END_EVENT || ev.type == YAML_STREAM_END_EVENT) {
			doc->root = json_null(); /* an empty document */
			yaml_event_delete(&ev);
		} else {
			doc->root = node(&ps, &ev, "", 0, NULL);
		}
	}
	/* one document: what follows its end must be the stream's end */
	while (!ended && !ps.failed && next(&ps, &ev) == 0) {
		int type = ev.type;
		yaml_mark_t m = ev.start_mark;
		yaml_event_delete(&ev);
		if (type == YAML_STREAM_END_EVENT)
			break;
		if (type == YAML_DOCUMENT_START_EVENT)
			fail(&ps, &m, "%s", "only one document (---) is read");
	}
	yaml_parser_delete(&ps.p);
	if (ps.failed) {
		ydoc_free(doc);
		return ERR_INVALID;
	}
	return 0;
}

void ydoc_free(struct ydoc *doc)
{
	json_decref(doc->root);
	for (int i = 0; i < doc->npos; i++)
		free(doc->pos[i].path);
	free(doc->pos);
	memset(doc, 0, sizeof(*doc));
}

const struct ydoc_pos *ydoc_where(const struct ydoc *doc, const char *path)
{
	char want[PATH_MAX_LEN];
	snprintf(want, sizeof(want), "%s", path);
	for (;;) {
		for (int i = 0; i < doc->npos; i++)
			if (strcmp(doc->pos[i].path, want) == 0)
				return &doc->pos[i];
		if (!*want)
			return NULL;
		/* the parent: drop the last ".key", "[i]" or "[\"key\"]" */
		size_t n = strlen(want);
		char *cut = want + n - 1;
		if (*cut == ']') {
			while (cut > want && *cut != '[')
				cut--;
		} else {
			while (cut > want && *cut != '.' && *cut != ']')
				cut--;
			if (*cut == ']')
				cut++;
		}
		*cut = '\0';
	}
}
