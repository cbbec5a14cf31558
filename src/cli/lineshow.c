/* lineshow.c - the tree and the Graphviz text of `anvil lineage`
 * (lineshow.h). Pure. */
#include "cli/lineshow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "cli/cliconn.h"
#include "cli/verb.h"
#include "flow/lineage.h"

void lineshow_size(int64_t bytes, char *out, size_t n)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	if (bytes < 1024) {
		snprintf(out, n, "%lld B", (long long)bytes);
		return;
	}
	double v = (double)bytes / 1024;
	size_t u = 0;
	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(out, n, "%.1f %s", v, units[u]);
}

/* "TASK" or "TASK[INDEX]" of EXEC/...: the query's task and index. */
static int task_query(const char *s, struct buf *q)
{
	const char *open = strchr(s, '[');
	size_t len = open ? (size_t)(open - s) : strlen(s);
	char *end = NULL;
	long index = open ? strtol(open + 1, &end, 10) : 0;
	if (!len || (open && (end == open + 1 || index < 0 || strcmp(end, "]") != 0)))
		return ERR_INVALID;
	char *task = xstrndup(s, len);
	buf_adds(q, "&task=");
	cliconn_escape(q, task);
	free(task);
	if (open)
		buf_printf(q, "&index=%ld", index);
	return 0;
}

int lineshow_query(const char *target, struct buf *q, int *whole, char *err, size_t errlen)
{
	*whole = 0;
	const char *key = strncmp(target, "sha256/", 7) == 0 ? "object"
	                  : lineage_is_uri(target)           ? "uri"
	                                                     : NULL;
	if (key) {
		buf_printf(q, "%s=", key);
		cliconn_escape(q, target);
		return 0;
	}
	char *end = NULL;
	long long exec = strtoll(target, &end, 10);
	if (end != target && exec > 0 && (*end == '\0' || *end == '/')) {
		buf_printf(q, "exec=%lld", exec);
		*whole = *end == '\0';
		if (*whole || task_query(end + 1, q) == 0)
			return 0;
	}
	snprintf(err, errlen,
	         "'%s' is not EXEC/TASK, EXEC/TASK[INDEX], EXEC, an object key (sha256/...) or a "
	         "URI (scheme://...)",
	         target);
	return ERR_INVALID;
}

/* "sha256/" and the first 12 hex digits of a content key; else the key. */
static void add_short_key(struct buf *b, const char *key)
{
	if (strncmp(key, "sha256/", 7) == 0 && strlen(key) > 19)
		buf_printf(b, "sha256/%.12s", key + 7);
	else
		verb_add_clean(b, key);
}

/* The latest attempt of a run node, or NULL. */
static const json_t *last_attempt(const json_t *run)
{
	const json_t *a = json_object_get(run, "attempts");
	size_t n = json_array_size(a);
	return n ? json_array_get(a, n - 1) : NULL;
}

static void add_attempt(struct buf *b, const json_t *a)
{
	buf_printf(b, ", job %lld", (long long)verb_int(a, "job", 0));
	size_t i;
	const json_t *name;
	json_array_foreach (json_object_get(a, "nodes"), i, name) {
		buf_adds(b, i ? "," : " on ");
		verb_add_clean(b, json_string_value(name) ? json_string_value(name) : "?");
	}
	if (json_is_integer(json_object_get(a, "exit_code")))
		buf_printf(b, ", exit %lld", (long long)verb_int(a, "exit_code", 0));
}

static void run_text(const json_t *n, struct buf *b)
{
	buf_printf(b, "%lld/", (long long)verb_int(n, "exec", 0));
	verb_add_clean(b, verb_str(n, "label"));
	buf_adds(b, " (");
	verb_add_clean(b, verb_str(n, "workflow"));
	buf_adds(b, "): ");
	verb_add_clean(b, verb_str(n, "state"));
	const json_t *a = last_attempt(n);
	if (a)
		add_attempt(b, a);
	const char *code = a && *verb_str(a, "code") ? verb_str(a, "code") : verb_str(n, "code");
	if (strncmp(code, "sha256/", 7) == 0)
		buf_printf(b, ", code %.12s", code + 7);
}

static void node_text(const json_t *n, struct buf *b)
{
	const char *type = verb_str(n, "type");
	if (strcmp(type, "run") == 0) {
		run_text(n, b);
	} else if (strcmp(type, "object") == 0) {
		buf_adds(b, "object ");
		add_short_key(b, verb_str(n, "key"));
		buf_adds(b, " (");
		verb_add_clean(b, *verb_str(n, "kind") ? verb_str(n, "kind") : "object");
		if (json_is_integer(json_object_get(n, "size"))) {
			char size[32];
			lineshow_size(verb_int(n, "size", 0), size, sizeof(size));
			buf_printf(b, ", %s", size);
		}
		buf_adds(b, ")");
	} else {
		buf_adds(b, "input ");
		verb_add_clean(b, verb_str(n, "uri"));
	}
}

/* ---- the tree ---- */

struct tree {
	json_t *byid; /* node id -> node (borrowed) */
	json_t *kids; /* node id -> [[child id, edge kind]] in this direction */
	json_t *seen; /* node ids written and followed */
	int down;
	struct buf *out;
};

static json_t *kids_of(const json_t *graph, int down)
{
	json_t *m = json_object();
	size_t i;
	const json_t *e;
	json_array_foreach (json_object_get(graph, "edges"), i, e) {
		const char *parent = verb_str(e, down ? "from" : "to");
		json_t *list = json_object_get(m, parent);
		if (!list)
			json_object_set_new(m, parent, list = json_array());
		json_array_append_new(list, json_pack("[s,s]", verb_str(e, down ? "to" : "from"),
		                                      verb_str(e, "kind")));
	}
	return m;
}

static void tree_node(struct tree *t, const char *id, const char *kind, const char *lead,
                      struct buf *prefix)
{
	struct buf *b = t->out;
	buf_adds(b, prefix->data ? prefix->data : "");
	buf_adds(b, lead);
	if (strcmp(kind, "cached") == 0)
		buf_adds(b, t->down ? "cached as " : "cached from ");
	const json_t *n = json_object_get(t->byid, id);
	if (n)
		node_text(n, b);
	else
		verb_add_clean(b, id);
	if (json_object_get(t->seen, id)) {
		buf_adds(b, " (above)\n");
		return;
	}
	buf_adds(b, "\n");
	json_object_set_new(t->seen, id, json_true());
	const json_t *kids = json_object_get(t->kids, id);
	size_t len = prefix->len, i;
	const json_t *k;
	if (*lead)
		buf_adds(prefix, strcmp(lead, "`-- ") == 0 ? "    " : "|   ");
	json_array_foreach (kids, i, k)
		tree_node(t, json_string_value(json_array_get(k, 0)),
		          json_string_value(json_array_get(k, 1)),
		          i + 1 == json_array_size(kids) ? "`-- " : "|-- ", prefix);
	prefix->len = len;
	if (prefix->data)
		prefix->data[len] = '\0';
}

static void tree_dir(const json_t *graph, json_t *byid, int down, struct buf *out)
{
	struct tree t = {.byid = byid,
	                 .kids = kids_of(graph, down),
	                 .seen = json_object(),
	                 .down = down,
	                 .out = out};
	struct buf prefix;
	buf_init(&prefix);
	size_t i;
	const json_t *s;
	json_array_foreach (json_object_get(graph, "starts"), i, s)
		tree_node(&t, json_string_value(s) ? json_string_value(s) : "", "", "", &prefix);
	buf_cleanup(&prefix);
	json_decref(t.kids);
	json_decref(t.seen);
}

void lineshow_tree(const json_t *graph, struct buf *out)
{
	json_t *byid = json_object();
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(graph, "nodes"), i, n)
		json_object_set(byid, verb_str(n, "id"), n);
	const char *dir = verb_str(graph, "direction");
	int both = strcmp(dir, "both") == 0;
	if (both)
		buf_adds(out, "upstream:\n");
	if (both || strcmp(dir, "downstream") != 0)
		tree_dir(graph, byid, 0, out);
	if (both)
		buf_adds(out, "downstream:\n");
	if (both || strcmp(dir, "downstream") == 0)
		tree_dir(graph, byid, 1, out);
	if (json_is_true(json_object_get(graph, "truncated")))
		buf_adds(out, "(cut short: the graph is larger than the server answers with; "
		              "ask for less with --depth)\n");
	json_decref(byid);
}

/* ---- DOT ---- */

/* s as the inside of a DOT string. */
static void dot_text(struct buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			buf_printf(b, "\\%c", *s);
		else
			buf_add(b, ((unsigned char)*s < 0x20 || *s == 0x7f) ? "?" : s, 1);
	}
}

static void dot_node(struct buf *b, const json_t *n)
{
	const char *type = verb_str(n, "type");
	buf_adds(b, "  \"");
	dot_text(b, verb_str(n, "id"));
	buf_printf(b, "\" [shape=%s, label=\"",
	           !strcmp(type, "run")      ? "box"
	           : !strcmp(type, "object") ? "note"
	                                     : "ellipse");
	if (strcmp(type, "run") == 0) {
		buf_printf(b, "%lld/", (long long)verb_int(n, "exec", 0));
		dot_text(b, verb_str(n, "label"));
		buf_adds(b, " (");
		dot_text(b, verb_str(n, "workflow"));
		buf_adds(b, ")\\n");
		dot_text(b, verb_str(n, "state"));
	} else {
		struct buf t;
		buf_init(&t);
		node_text(n, &t);
		dot_text(b, t.data ? t.data : "");
		buf_cleanup(&t);
	}
	buf_adds(b, "\"];\n");
}

void lineshow_dot(const json_t *graph, struct buf *out)
{
	buf_adds(out, "digraph lineage {\n  rankdir=LR;\n");
	size_t i;
	const json_t *v;
	json_array_foreach (json_object_get(graph, "nodes"), i, v)
		dot_node(out, v);
	json_array_foreach (json_object_get(graph, "edges"), i, v) {
		buf_adds(out, "  \"");
		dot_text(out, verb_str(v, "from"));
		buf_adds(out, "\" -> \"");
		dot_text(out, verb_str(v, "to"));
		buf_adds(out, "\" [label=\"");
		dot_text(out, verb_str(v, "kind"));
		buf_adds(out, "\"];\n");
	}
	buf_adds(out, "}\n");
}
