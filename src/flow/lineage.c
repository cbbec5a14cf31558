/* lineage.c - the lineage graph, its walks, and what a run's record may
 * show (lineage.h). Pure. */
#include "flow/lineage.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "flow/run.h"
#include "flow/spec.h"

enum ntype { N_RUN, N_OBJECT, N_INPUT };
static const char *const type_names[] = {"run", "object", "input"};

struct lnode {
	enum ntype type;
	char *id;
	json_t *doc; /* run: its record; object: {key, kind, size, sha256}; input: {uri} */
	int *out, nout, cap_out; /* indexes of its edges, each way */
	int *in, nin, cap_in;
};

struct ledge {
	int from, to;
	const char *kind; /* one of the static names below: compared by address */
};

static const char E_PRODUCED[] = "produced", E_CONSUMED[] = "consumed", E_INPUT[] = "input",
                  E_CACHED[] = "cached", E_NEEDS[] = "needs";

struct lineage {
	struct lnode *nodes;
	int n, cap;
	struct ledge *edges;
	int nedges, cap_edges;
	json_t *index; /* node id -> its index in nodes */
	int *runs;     /* the run nodes, in the order added */
	int nruns, cap_runs;
	int linked; /* edges made: no more records */
};

const char *lineage_dir_name(enum lineage_dir d)
{
	return d == LINEAGE_DOWNSTREAM ? "downstream" : d == LINEAGE_BOTH ? "both" : "upstream";
}

int lineage_dir_parse(const char *s, enum lineage_dir *out)
{
	static const enum lineage_dir all[] = {LINEAGE_UPSTREAM, LINEAGE_DOWNSTREAM, LINEAGE_BOTH};
	for (size_t i = 0; s && i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(s, lineage_dir_name(all[i])) == 0) {
			*out = all[i];
			return 0;
		}
	return ERR_INVALID;
}

struct lineage *lineage_new(void)
{
	struct lineage *g = xcalloc(1, sizeof(*g));
	g->index = json_object();
	return g;
}

void lineage_free(struct lineage *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->n; i++) {
		free(g->nodes[i].id);
		json_decref(g->nodes[i].doc);
		free(g->nodes[i].out);
		free(g->nodes[i].in);
	}
	free(g->nodes);
	free(g->edges);
	free(g->runs);
	json_decref(g->index);
	free(g);
}

/* ---- nodes and edges ---- */

static int find(const struct lineage *g, const char *id)
{
	const json_t *i = json_object_get(g->index, id);
	return i ? (int)json_integer_value(i) : -1;
}

/* Adds node id (it is not there yet), taking doc. */
static int node_add(struct lineage *g, enum ntype type, const char *id, json_t *doc)
{
	XGROW(g->nodes, g->n, g->cap);
	struct lnode *nd = &g->nodes[g->n];
	memset(nd, 0, sizeof(*nd));
	nd->type = type;
	nd->id = xstrdup(id);
	nd->doc = doc;
	json_object_set_new(g->index, id, json_integer(g->n));
	return g->n++;
}

/* Adds the edge unless it is there: looked for among the shorter of the
 * two nodes' lists (an object a 10,000-way sweep reads has 10,000 out
 * edges, each reader one in edge). */
static void edge_add(struct lineage *g, int from, int to, const char *kind)
{
	struct lnode *f = &g->nodes[from], *t = &g->nodes[to];
	int by_from = f->nout <= t->nin, n = by_from ? f->nout : t->nin;
	for (int i = 0; i < n; i++) {
		const struct ledge *e = &g->edges[by_from ? f->out[i] : t->in[i]];
		if (e->from == from && e->to == to && e->kind == kind)
			return;
	}
	XGROW(g->edges, g->nedges, g->cap_edges);
	g->edges[g->nedges] = (struct ledge){from, to, kind};
	XGROW(f->out, f->nout, f->cap_out);
	f->out[f->nout++] = g->nedges;
	XGROW(t->in, t->nin, t->cap_in);
	t->in[t->nin++] = g->nedges;
	g->nedges++;
}

static int run_node(const struct lineage *g, int64_t run)
{
	char id[40];
	snprintf(id, sizeof(id), "run:%lld", (long long)run);
	return find(g, id);
}

int lineage_add(struct lineage *g, json_t *rec, char *err, size_t errlen)
{
	int64_t run = jv_int(rec, "run", 0);
	if (g->linked)
		return snprintf(err, errlen, "run %lld: the graph was walked already",
		                (long long)run),
		       ERR_INVALID;
	if (!json_is_object(rec) || run < 1)
		return snprintf(err, errlen, "run: must be a positive run id"), ERR_INVALID;
	if (run_node(g, run) >= 0)
		return snprintf(err, errlen, "run: %lld was added before", (long long)run),
		       ERR_INVALID;
	char id[40];
	snprintf(id, sizeof(id), "run:%lld", (long long)run);
	int i = node_add(g, N_RUN, id, json_incref(rec));
	XGROW(g->runs, g->nruns, g->cap_runs);
	g->runs[g->nruns++] = i;
	return 0;
}

/* The object node of key, made when new; what an output says of it (its
 * kind, size and hash) fills in what is not known yet. */
static int object_node(struct lineage *g, const char *key, const char *kind, const json_t *info)
{
	char *id = xasprintf("object:%s", key);
	int i = find(g, id);
	if (i < 0)
		i = node_add(g, N_OBJECT, id, json_pack("{s:s}", "key", key));
	free(id);
	json_t *doc = g->nodes[i].doc;
	if (kind && !json_object_get(doc, "kind"))
		json_object_set_new(doc, "kind", json_string(kind));
	static const char *const facts[] = {"size", "sha256"};
	for (size_t k = 0; k < 2; k++)
		if (json_object_get(info, facts[k]) && !json_object_get(doc, facts[k]))
			json_object_set(doc, facts[k], json_object_get(info, facts[k]));
	return i;
}

static int input_node(struct lineage *g, const char *uri)
{
	char *id = xasprintf("input:%s", uri);
	int i = find(g, id);
	if (i < 0)
		i = node_add(g, N_INPUT, id, json_pack("{s:s}", "uri", uri));
	free(id);
	return i;
}

/* ---- linking ---- */

/* A cached run's outputs were written by its origin, which the cached
 * edge reaches: an edge from the cached run into them would make it a
 * writer of objects that runs before it read. */
static void link_outputs(struct lineage *g, int r)
{
	const json_t *rec = g->nodes[r].doc;
	if (strcmp(jv_str(rec, "state", ""), "cached") == 0)
		return;
	const char *k;
	json_t *o;
	json_object_foreach ((json_t *)json_object_get(rec, "outputs"), k, o) {
		const char *key = jv_str(o, "key", NULL);
		if (key && *key)
			edge_add(g, r, object_node(g, key, jv_str(o, "kind", NULL), o), E_PRODUCED);
	}
}

static void link_fetch(struct lineage *g, int r)
{
	size_t i, k;
	json_t *item, *key;
	json_array_foreach (json_object_get(g->nodes[r].doc, "fetch"), i, item)
		json_array_foreach (json_object_get(item, "keys"), k, key)
			if (json_string_length(key))
				edge_add(g,
				         object_node(g, json_string_value(key),
				                     jv_str(item, "kind", NULL), NULL),
				         r, E_CONSUMED);
}

static void link_uris(struct lineage *g, int r)
{
	size_t i;
	json_t *u;
	json_array_foreach (json_object_get(g->nodes[r].doc, "uris"), i, u)
		if (json_string_length(u))
			edge_add(g, input_node(g, json_string_value(u)), r, E_INPUT);
}

/* Marks, in mark[] with r + 1, the writers of the objects run r read. */
static void mark_writers(const struct lineage *g, int r, int *mark)
{
	const struct lnode *rn = &g->nodes[r];
	for (int i = 0; i < rn->nin; i++) {
		const struct lnode *obj = &g->nodes[g->edges[rn->in[i]].from];
		for (int k = 0; obj->type == N_OBJECT && k < obj->nin; k++)
			mark[g->edges[obj->in[k]].from] = r + 1;
	}
}

/* A run's cached edge, and a needs edge from each run it needed whose
 * objects it did not read (mark: the writers of what it read). */
static void link_runs(struct lineage *g, int r, int *mark)
{
	const json_t *rec = g->nodes[r].doc;
	mark_writers(g, r, mark);
	int from = run_node(g, jv_int(rec, "cached_from", 0));
	if (from >= 0 && from != r)
		edge_add(g, from, r, E_CACHED);
	size_t i;
	json_t *need;
	json_array_foreach (json_object_get(rec, "needs"), i, need) {
		int n = run_node(g, json_integer_value(need));
		if (n >= 0 && n != r && mark[n] != r + 1)
			edge_add(g, n, r, E_NEEDS);
	}
}

/* Objects first: whether a needed run's objects were read decides its
 * needs edge. */
static void link(struct lineage *g)
{
	if (g->linked)
		return;
	g->linked = 1;
	for (int i = 0; i < g->nruns; i++)
		link_outputs(g, g->runs[i]);
	for (int i = 0; i < g->nruns; i++) {
		link_fetch(g, g->runs[i]);
		link_uris(g, g->runs[i]);
	}
	int *mark = xcalloc((size_t)g->n + 1, sizeof(int)); /* no node is made from here */
	for (int i = 0; i < g->nruns; i++)
		link_runs(g, g->runs[i], mark);
	free(mark);
}

int lineage_has(struct lineage *g, const char *id)
{
	link(g);
	return id && find(g, id) >= 0;
}

/* ---- walks ---- */

struct walk {
	char *in_node; /* in_node[i]: node i is in the answer */
	char *in_edge;
	int *order; /* the nodes in the answer, in the order reached */
	int norder;
	int truncated;
	int *dist;  /* this direction's: edges from the nearest start; -1 not reached */
	int *queue; /* of node indexes */
};

/* Puts node i in the answer; 0 when the answer is full. */
static int take(struct walk *w, int i)
{
	if (w->in_node[i])
		return 1;
	if (w->norder >= LINEAGE_MAX_NODES) {
		w->truncated = 1;
		return 0;
	}
	w->in_node[i] = 1;
	w->order[w->norder++] = i;
	return 1;
}

/* One direction's breadth-first walk from the starts. */
static void bfs(const struct lineage *g, struct walk *w, const int *starts, int nstarts, int down,
                int64_t depth)
{
	int head = 0, tail = 0;
	for (int i = 0; i < g->n; i++)
		w->dist[i] = -1;
	for (int i = 0; i < nstarts; i++)
		if (w->dist[starts[i]] < 0 && take(w, starts[i])) {
			w->dist[starts[i]] = 0;
			w->queue[tail++] = starts[i];
		}
	while (head < tail) {
		int u = w->queue[head++];
		if (depth >= 0 && w->dist[u] >= depth)
			continue;
		const struct lnode *nd = &g->nodes[u];
		int ne = down ? nd->nout : nd->nin;
		for (int k = 0; k < ne; k++) {
			int e = down ? nd->out[k] : nd->in[k];
			int v = down ? g->edges[e].to : g->edges[e].from;
			if (w->dist[v] < 0) {
				if (!take(w, v))
					continue;
				w->dist[v] = w->dist[u] + 1;
				w->queue[tail++] = v;
			}
			w->in_edge[e] = 1;
		}
	}
}

/* What run node r read: one entry per key of its fetch list. */
static json_t *run_objects(const struct lineage *g, const json_t *rec)
{
	json_t *objs = json_array();
	size_t i, k;
	json_t *item, *key;
	json_array_foreach (json_object_get(rec, "fetch"), i, item)
		json_array_foreach (json_object_get(item, "keys"), k, key) {
			json_t *o = json_pack("{s:s,s:O,s:s}", "ref", jv_str(item, "ref", ""),
			                      "key", key, "kind", jv_str(item, "kind", ""));
			char *id = json_is_string(key)
			                   ? xasprintf("object:%s", json_string_value(key))
			                   : NULL;
			int n = id ? find(g, id) : -1;
			free(id);
			const json_t *doc = n >= 0 ? g->nodes[n].doc : NULL;
			if (json_object_get(doc, "size"))
				json_object_set(o, "size", json_object_get(doc, "size"));
			if (json_object_get(doc, "sha256"))
				json_object_set(o, "sha256", json_object_get(doc, "sha256"));
			json_array_append_new(objs, o);
		}
	return objs;
}

static json_t *node_json(const struct lineage *g, int i)
{
	const struct lnode *nd = &g->nodes[i];
	json_t *o = json_copy(nd->doc);
	if (nd->type == N_RUN) {
		json_object_set_new(o, "objects", run_objects(g, nd->doc));
		json_object_del(o, "needs");
		json_object_del(o, "fetch");
		json_object_del(o, "uris");
	}
	json_object_set_new(o, "id", json_string(nd->id));
	json_object_set_new(o, "type", json_string(type_names[nd->type]));
	return o;
}

static json_t *walk_json(const struct lineage *g, const struct walk *w)
{
	json_t *nodes = json_array(), *edges = json_array();
	for (int k = 0; k < w->norder; k++)
		json_array_append_new(nodes, node_json(g, w->order[k]));
	for (int e = 0; e < g->nedges; e++) {
		const struct ledge *ed = &g->edges[e];
		if (!w->in_edge[e] || !w->in_node[ed->from] || !w->in_node[ed->to])
			continue;
		json_array_append_new(edges,
		                      json_pack("{s:s,s:s,s:s}", "from", g->nodes[ed->from].id,
		                                "to", g->nodes[ed->to].id, "kind", ed->kind));
	}
	return json_pack("{s:o,s:o,s:b}", "nodes", nodes, "edges", edges, "truncated",
	                 w->truncated);
}

json_t *lineage_walk(struct lineage *g, const json_t *starts, enum lineage_dir dir, int64_t depth)
{
	link(g);
	int n = g->n ? g->n : 1;
	struct walk w = {.in_node = xcalloc((size_t)n, 1),
	                 .in_edge = xcalloc((size_t)(g->nedges ? g->nedges : 1), 1),
	                 .order = xcalloc((size_t)n, sizeof(int)),
	                 .dist = xcalloc((size_t)n, sizeof(int)),
	                 .queue = xcalloc((size_t)n, sizeof(int))};
	int *s = xcalloc(json_array_size(starts) + 1, sizeof(int)), ns = 0;
	size_t i;
	json_t *id;
	json_array_foreach (starts, i, id) {
		int k = find(g, json_string_value(id) ? json_string_value(id) : "");
		if (k >= 0)
			s[ns++] = k;
	}
	if (dir != LINEAGE_DOWNSTREAM)
		bfs(g, &w, s, ns, 0, depth);
	if (dir != LINEAGE_UPSTREAM)
		bfs(g, &w, s, ns, 1, depth);
	json_t *out = walk_json(g, &w);
	free(s);
	free(w.in_node);
	free(w.in_edge);
	free(w.order);
	free(w.dist);
	free(w.queue);
	return out;
}

/* ---- what a run's record may show ---- */

/* Variables that hold credentials by the usual names (HF_TOKEN,
 * WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ...), every AWS_*
 * (its configuration names credentials), and ANVIL_TASK, the wrapper's
 * instructions, which are not the user's and are shown by their parts.
 * ANVIL_EXEC_TOKEN, the attempt's own secret, falls under *TOKEN*. */
const char *const lineage_secret_names[] = {
        "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*",   "*CREDENTIAL*", "*PRIVATE*",
        "*_KEY",   "*APIKEY*", "AWS_*",      "ANVIL_TASK", NULL,
};

/* strstr without case. */
static int contains_nocase(const char *hay, const char *needle, size_t n)
{
	for (; *hay; hay++)
		if (strncasecmp(hay, needle, n) == 0)
			return 1;
	return 0;
}

static int pattern_match(const char *p, const char *name)
{
	size_t plen = strlen(p), nlen = strlen(name);
	int lead = p[0] == '*', trail = plen > 1 && p[plen - 1] == '*';
	const char *core = p + lead;
	size_t clen = plen - (size_t)lead - (size_t)trail;
	if (lead && trail)
		return contains_nocase(name, core, clen);
	if (trail)
		return strncasecmp(name, core, clen) == 0;
	if (lead)
		return nlen >= clen && strncasecmp(name + nlen - clen, core, clen) == 0;
	return strcasecmp(name, p) == 0;
}

int lineage_secret_name(const char *name)
{
	for (size_t i = 0; name && lineage_secret_names[i]; i++)
		if (pattern_match(lineage_secret_names[i], name))
			return 1;
	return 0;
}

/* s with the password of each URL in it ("scheme://user:PASS@host")
 * replaced; NULL when it has none. */
static char *redact_urls(const char *s)
{
	struct buf b;
	buf_init(&b);
	const char *p = s, *sep;
	int changed = 0;
	while ((sep = strstr(p, "://")) != NULL) {
		const char *auth = sep + 3, *end = auth + strcspn(auth, "/?# \t\n");
		const char *at = NULL;
		for (const char *q = auth; q < end; q++)
			if (*q == '@')
				at = q;
		const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
		if (colon && colon + 1 < at) {
			buf_add(&b, p, (size_t)(colon + 1 - p));
			buf_adds(&b, "<redacted>");
			p = at;
			changed = 1;
		} else {
			buf_add(&b, p, (size_t)(end - p));
			p = end;
		}
	}
	buf_adds(&b, p);
	if (!changed) {
		buf_cleanup(&b);
		return NULL;
	}
	return buf_detach(&b);
}

json_t *lineage_redact(const json_t *obj)
{
	json_t *out = json_object();
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)obj, k, v) {
		char *fixed = json_is_string(v) ? redact_urls(json_string_value(v)) : NULL;
		if (lineage_secret_name(k))
			json_object_set_new(out, k, json_string("<redacted>"));
		else if (fixed)
			json_object_set_new(out, k, json_string(fixed));
		else
			json_object_set(out, k, v);
		free(fixed);
	}
	return out;
}

static const json_t *fetch_item(const json_t *fetch, const char *ref)
{
	size_t i;
	const json_t *it;
	json_array_foreach (fetch, i, it)
		if (strcmp(jv_str(it, "ref", ""), ref) == 0)
			return it;
	return NULL;
}

static void add_keys(struct buf *b, const json_t *item)
{
	const json_t *keys = json_object_get(item, "keys");
	size_t n = jv_bool(item, "list", 0) ? json_array_size(keys) : 1;
	for (size_t i = 0; i < n; i++) {
		const char *key = json_string_value(json_array_get(keys, i));
		buf_printf(b, "%s%s", i ? " " : "", key ? key : "<missing>");
	}
}

static char *resolve_text(const char *s, const json_t *fetch)
{
	struct buf b;
	buf_init(&b);
	char ref[200];
	const char *start, *end;
	while (flow_template_next(s, ref, sizeof(ref), &start, &end) == 1) {
		const json_t *item = fetch_item(fetch, ref);
		buf_add(&b, s, (size_t)((item ? start : end) - s));
		if (item)
			add_keys(&b, item);
		s = end;
	}
	buf_adds(&b, s);
	char *out = buf_detach(&b);
	return out ? out : xstrdup("");
}

json_t *lineage_resolve_command(const json_t *command, const json_t *fetch)
{
	json_t *out = json_array();
	size_t i;
	const json_t *arg;
	json_array_foreach (command, i, arg) {
		if (!json_is_string(arg)) {
			json_array_append(out, (json_t *)arg);
			continue;
		}
		char *s = resolve_text(json_string_value(arg), fetch);
		json_array_append_new(out, json_string(s));
		free(s);
	}
	return out;
}

int lineage_is_uri(const char *s)
{
	if (!s || !isalpha((unsigned char)s[0]))
		return 0;
	const char *p = s;
	while (isalnum((unsigned char)*p) || *p == '+' || *p == '-' || *p == '.')
		p++;
	if (strncmp(p, "://", 3) != 0 || !p[3])
		return 0;
	for (p += 3; *p; p++)
		if (isspace((unsigned char)*p))
			return 0;
	return 1;
}

static void add_uri(json_t *uris, const json_t *v)
{
	const char *s = json_string_value(v);
	if (!lineage_is_uri(s))
		return;
	size_t i;
	const json_t *u;
	json_array_foreach (uris, i, u)
		if (strcmp(json_string_value(u), s) == 0)
			return;
	json_array_append_new(uris, json_string(s));
}

/* The URIs that the templates in v (a string, or an array or object of
 * them) take from the workflow's inputs and the run's params. */
static void scan_refs(const json_t *v, const json_t *wf_inputs, const json_t *params, json_t *uris)
{
	size_t i;
	const char *k;
	json_t *e;
	if (json_is_array(v)) {
		json_array_foreach (v, i, e)
			scan_refs(e, wf_inputs, params, uris);
	} else if (json_is_object(v)) {
		json_object_foreach ((json_t *)v, k, e)
			scan_refs(e, wf_inputs, params, uris);
	}
	const char *s = json_string_value(v), *start, *end;
	char ref[200];
	while (s && flow_template_next(s, ref, sizeof(ref), &start, &end) == 1) {
		if (strncmp(ref, "inputs.", 7) == 0)
			add_uri(uris, json_object_get(wf_inputs, ref + 7));
		else if (strncmp(ref, "params.", 7) == 0)
			add_uri(uris, json_object_get(params, ref + 7));
		s = end;
	}
}

json_t *lineage_input_uris(const json_t *task, const json_t *wf_inputs, const json_t *params)
{
	json_t *uris = json_array();
	scan_refs(json_object_get(task, "command"), wf_inputs, params, uris);
	scan_refs(json_object_get(task, "env"), wf_inputs, params, uris);
	scan_refs(json_object_get(task, "inputs"), wf_inputs, params, uris);
	json_t *ctx = json_pack("{s:O?,s:O?,s:{}}", "inputs", wf_inputs, "params", params, "tasks");
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)json_object_get(task, "inputs"), k, v) {
		char err[64];
		char *s = json_is_string(v)
		                  ? flow_render_known(json_string_value(v), ctx, err, sizeof(err))
		                  : NULL;
		json_t *r = s && !strstr(s, "{{") ? json_string(s) : NULL;
		add_uri(uris, r);
		json_decref(r);
		free(s);
	}
	json_decref(ctx);
	return uris;
}
