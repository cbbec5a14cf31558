/* spec_group.c - a node group: its nodes and their addresses (often
 * ranges, expanded here), pool, profile, labels and topology; and the
 * nodes it adds to the compiled spec, each name and address held once in
 * the whole fleet. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "fleet/hostlist.h"
#include "fleet/spec.h"
#include "fleet/spec_int.h"

static const struct schema_field group_fields[] = {
        {"pool", SCHEMA_NAME, 1, 0, 0},
        {"profile", SCHEMA_NAME, 1, 0, 0},
        {"nodes", SCHEMA_ANY, 1, 0, 0},
        {"addresses", SCHEMA_ANY, 0, 0, 0},
        {"labels", SCHEMA_OBJ, 0, 0, 0},
        {"topology", SCHEMA_OBJ, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const char *const topology_keys[] = {"rack", "switch", "block"};
#define NTOPOLOGY (sizeof(topology_keys) / sizeof(topology_keys[0]))

static const struct schema_field topology_fields[] = {
        {"rack", SCHEMA_ANY, 0, 0, 0},
        {"switch", SCHEMA_ANY, 0, 0, 0},
        {"block", SCHEMA_ANY, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

/* ---- names and addresses ---- */

int spec_is_node_name(const char *s)
{
	size_t n = strlen(s);
	return n >= 1 && n <= 63 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

/* A host name: dot-separated labels of letters, digits and '-' (not at
 * either end), the last not all digits (10.0.1.300 is a typo, not a name). */
static int is_host_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 253)
		return 0;
	const char *label = s;
	for (;;) {
		size_t len = strspn(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		                           "0123456789-");
		if (len == 0 || len > 63 || label[0] == '-' || label[len - 1] == '-')
			return 0;
		if (label[len] == '\0')
			return strspn(label, "0123456789") != len;
		if (label[len] != '.')
			return 0;
		label += len + 1;
	}
}

int spec_is_address(const char *s)
{
	unsigned char buf[16];
	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1 ||
	       is_host_name(s);
}

/* What one list (nodes or addresses) checks on each name it spells. */
struct spelling {
	const char *what;           /* "a node name", "an address" */
	int nodes;                  /* names of nodes, not addresses */
	int (*valid)(const char *); /* what a name of it may be */
	const char *rule;           /* why one is not */
	json_t *at;                 /* {name: whose it is}: ctx's node_at or addr_at */
	const json_t *owners;       /* the names that hold each: group, or the nodes */
	const char *group;          /* the group being read */
};

/* The owner of the i-th name of this group: for a node its group, for an
 * address the node at the same place. */
static const char *owner(const struct spelling *sp, size_t i)
{
	const json_t *o = json_array_get(sp->owners, i);
	return o ? json_string_value(o) : sp->group;
}

/* Checks the names one pattern spelled (names[from..]) and claims them in
 * sp->at; one error per pattern and kind of fault, with a count. */
static void claim(const struct spelling *sp, const json_t *names, size_t from, const char *path,
                  struct schema_errors *e)
{
	const char *bad = NULL, *dup = NULL, *dup_of = NULL;
	size_t nbad = 0, ndup = 0;
	for (size_t i = from; i < json_array_size(names); i++) {
		const char *s = json_string_value(json_array_get(names, i));
		const json_t *had = json_object_get(sp->at, s);
		if (!sp->valid(s) && !nbad++)
			bad = s;
		if (had && !ndup++) {
			dup = s;
			dup_of = json_string_value(had);
		}
		if (!had)
			json_object_set_new(sp->at, s, json_string(owner(sp, i)));
	}
	if (nbad)
		schema_add(e, path, "'%.64s' is not %s: %s%s", bad, sp->what, sp->rule,
		           nbad > 1 ? " (nor are others of this range)" : "");
	if (ndup && sp->nodes)
		schema_add(e, path, "node '%.64s' %s%s%s%s", dup,
		           strcmp(dup_of, sp->group) == 0 ? "is in this group twice"
		                                          : "is also in group '",
		           strcmp(dup_of, sp->group) == 0 ? "" : dup_of,
		           strcmp(dup_of, sp->group) == 0 ? "" : "'",
		           ndup > 1 ? " (and more of this range)" : "");
	else if (ndup)
		schema_add(e, path, "address '%.64s' is also node %.64s's%s", dup, dup_of,
		           ndup > 1 ? " (and more of this range)" : "");
}

/* Expands v (one pattern or a list of them) into names, each pattern
 * checked and claimed at its own path. */
static json_t *spell(struct fleet_ctx *c, const struct spelling *sp, const json_t *v,
                     const char *path)
{
	json_t *names = json_array();
	char sub[256], why[160];
	int one = json_is_string(v);
	if (!one && (!json_is_array(v) || json_array_size(v) == 0)) {
		schema_add(c->e, path,
		           "should be a range like h200-[01-18] or a list of them, not %s",
		           json_is_array(v) ? "an empty list" : schema_type_name(v));
		return names;
	}
	for (size_t i = 0; i < (one ? 1 : json_array_size(v)); i++) {
		const json_t *p = one ? v : json_array_get(v, i);
		if (!one)
			schema_joini(sub, sizeof(sub), path, i);
		else
			snprintf(sub, sizeof(sub), "%s", path);
		size_t from = json_array_size(names);
		if (!json_is_string(p))
			schema_add(c->e, sub, "should be text, not %s", schema_type_name(p));
		else if (hostlist_expand(json_string_value(p), FLEET_MAX_NODES, names, why,
		                         sizeof(why)))
			schema_add(c->e, sub, "'%.64s': %s", json_string_value(p), why);
		else
			claim(sp, names, from, sub, c->e);
	}
	return names;
}

/* ---- labels and topology ---- */

int spec_label_key_ok(const char *k)
{
	size_t n = strlen(k);
	return n >= 1 && n <= 63 && !strchr(k, '=');
}

json_t *spec_label_value(const json_t *v, const char *path, struct schema_errors *e)
{
	char text[64];
	if (json_is_integer(v))
		snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
	else if (json_is_boolean(v))
		snprintf(text, sizeof(text), "%s", json_is_true(v) ? "true" : "false");
	if (json_is_integer(v) || json_is_boolean(v))
		return json_string(text);
	const char *s = json_string_value(v);
	if (s && json_string_length(v) <= 63)
		return json_string(s);
	if (s)
		schema_add(e, path, "'%.64s...' is longer than 63 characters", s);
	else
		schema_add(e, path, "should be text, an integer or a boolean, not %s",
		           schema_type_name(v));
	return NULL;
}

static json_t *labels(const json_t *o, const char *path, struct schema_errors *e)
{
	json_t *out = json_object();
	char sub[256];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		schema_join(sub, sizeof(sub), path, k);
		int topo = strcmp(k, "rack") == 0 || strcmp(k, "switch") == 0 ||
		           strcmp(k, "block") == 0;
		if (!spec_label_key_ok(k))
			schema_add(e, sub, "'%.64s' is not a label: 1 to 63 characters without '='",
			           k);
		else if (topo)
			schema_add(e, sub, "'%s' is topology: set it under the group's topology",
			           k);
		json_t *t = spec_label_value(v, sub, e);
		if (t && spec_label_key_ok(k) && !topo)
			json_object_set(out, k, t);
		json_decref(t);
	}
	return out;
}

static json_t *topology(const json_t *o, const char *path, struct schema_errors *e)
{
	json_t *out = json_pack("{s:n,s:n,s:n}", "rack", "switch", "block");
	char sub[256];
	if (!o || !schema_fields(o, topology_fields, path, e))
		return out;
	for (size_t i = 0; i < NTOPOLOGY; i++) {
		const json_t *v = json_object_get(o, topology_keys[i]);
		schema_join(sub, sizeof(sub), path, topology_keys[i]);
		json_t *t = v ? spec_label_value(v, sub, e) : NULL;
		if (t && json_string_length(t) == 0) {
			schema_add(e, sub, "is empty: name the %s, or leave the key out",
			           topology_keys[i]);
			json_decref(t);
		} else if (t) {
			json_object_set_new(out, topology_keys[i], t);
		}
	}
	return out;
}

/* A node's labels: the group's, then its topology as labels. */
static json_t *node_labels(const json_t *group)
{
	json_t *l = json_copy(json_object_get(group, "labels"));
	const char *k;
	json_t *v;
	json_object_foreach (json_object_get(group, "topology"), k, v)
		if (json_is_string(v))
			json_object_set(l, k, v);
	return l;
}

/* ---- the group ---- */

static void refs(struct fleet_ctx *c, const json_t *src, const char *path)
{
	char sub[256];
	const char *pool = json_string_value(json_object_get(src, "pool"));
	const char *profile = json_string_value(json_object_get(src, "profile"));
	schema_join(sub, sizeof(sub), path, "pool");
	if (pool && spec_ref(c, "pools", "pool", pool, sub)) {
		const json_t *p = json_object_get(json_object_get(c->src, "pools"), pool);
		const char *kind = json_string_value(json_object_get(p, "kind"));
		if (kind && strcmp(kind, "cloud") == 0)
			schema_add(c->e, sub,
			           "'%s' is a cloud pool: bursting makes its nodes, a group lists "
			           "machines that are there",
			           pool);
	}
	schema_join(sub, sizeof(sub), path, "profile");
	if (profile)
		spec_ref(c, "profiles", "profile", profile, sub);
}

/* Adds the group's nodes to c->nodes. */
static void add_nodes(struct fleet_ctx *c, const json_t *g, const json_t *addrs)
{
	size_t i;
	json_t *name;
	json_array_foreach (json_object_get(g, "nodes"), i, name) {
		json_t *a = json_array_get(addrs, i);
		json_array_append_new(c->nodes, json_pack("{s:O,s:O,s:O,s:O,s:O,s:o}", "name", name,
		                                          "address", a ? a : json_null(), "group",
		                                          json_object_get(g, "name"), "pool",
		                                          json_object_get(g, "pool"), "profile",
		                                          json_object_get(g, "profile"), "labels",
		                                          node_labels(g)));
	}
}

static json_t *addresses(struct fleet_ctx *c, const json_t *src, const json_t *names,
                         const char *name, const char *path)
{
	const json_t *v = json_object_get(src, "addresses");
	char sub[256];
	if (!v)
		return json_array();
	schema_join(sub, sizeof(sub), path, "addresses");
	struct spelling sp = {"an address",
	                      0,
	                      spec_is_address,
	                      "an IPv4 or IPv6 address or a host name",
	                      c->addr_at,
	                      names,
	                      name};
	json_t *addrs = spell(c, &sp, v, sub);
	if (json_array_size(addrs) != json_array_size(names) && json_array_size(names))
		schema_add(c->e, sub,
		           "%zu addresses for %zu nodes: give one per node, in the "
		           "nodes' order",
		           json_array_size(addrs), json_array_size(names));
	return addrs;
}

json_t *spec_group(struct fleet_ctx *c, const char *name, const json_t *src, const char *path)
{
	char sub[256];
	const json_t *pool = json_object_get(src, "pool"),
	             *profile = json_object_get(src, "profile");
	json_t *g = json_pack("{s:s,s:O,s:O}", "name", name, "pool", pool ? pool : json_null(),
	                      "profile", profile ? profile : json_null());
	if (!schema_fields(src, group_fields, path, c->e)) {
		json_object_set_new(g, "nodes", json_array());
		return g;
	}
	refs(c, src, path);
	schema_join(sub, sizeof(sub), path, "labels");
	const json_t *l = json_object_get(src, "labels");
	json_object_set_new(g, "labels", json_is_object(l) ? labels(l, sub, c->e) : json_object());
	schema_join(sub, sizeof(sub), path, "topology");
	const json_t *t = json_object_get(src, "topology");
	json_object_set_new(g, "topology", topology(json_is_object(t) ? t : NULL, sub, c->e));
	json_t *all = node_labels(g);
	if (json_object_size(all) > FLEET_MAX_LABELS)
		schema_add(c->e, path,
		           "its labels and topology give each node %zu labels; at most %d",
		           json_object_size(all), FLEET_MAX_LABELS);
	json_decref(all);
	schema_join(sub, sizeof(sub), path, "nodes");
	struct spelling sp = {"a node name",
	                      1,
	                      spec_is_node_name,
	                      "1 to 63 letters, digits, '-', '_' or '.'",
	                      c->node_at,
	                      NULL,
	                      name};
	json_t *names = json_object_get(src, "nodes")
	                        ? spell(c, &sp, json_object_get(src, "nodes"), sub)
	                        : json_array();
	c->nnodes += (long long)json_array_size(names);
	if (c->nnodes > FLEET_MAX_NODES &&
	    c->nnodes - (long long)json_array_size(names) <= FLEET_MAX_NODES)
		schema_add(c->e, sub, "brings the fleet to %lld nodes; at most %d", c->nnodes,
		           FLEET_MAX_NODES);
	json_object_set_new(g, "nodes", names);
	json_t *addrs = addresses(c, src, names, name, path);
	add_nodes(c, g, addrs);
	json_decref(addrs);
	return g;
}
