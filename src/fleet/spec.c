/* spec.c - the fleet spec as a whole: its sections, pools, queues, teams
 * and upgrade policy, the references between them, and the YAML front end.
 * Profiles are spec_profile.c's, groups and nodes spec_group.c's. */
#include "fleet/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/ydoc.h"
#include "fleet/spec_int.h"

#define DAY_MS       (24 * 3600 * 1000.0)
#define QUEUE_QUOTAS 64 /* teams with a quota in one queue: the server's STATE_MAX_QUOTAS */

static const struct schema_field top_fields[] = {
        {"name", SCHEMA_NAME, 1, 0, 0},    {"pools", SCHEMA_OBJ, 1, 0, 0},
        {"profiles", SCHEMA_OBJ, 1, 0, 0}, {"groups", SCHEMA_OBJ, 1, 0, 0},
        {"queues", SCHEMA_OBJ, 0, 0, 0},   {"teams", SCHEMA_OBJ, 0, 0, 0},
        {"upgrade", SCHEMA_OBJ, 0, 0, 0},  {NULL, 0, 0, 0, 0},
};

static const struct schema_field pool_fields[] = {
        {"kind", SCHEMA_STR, 0, 1, 16},         {"provider", SCHEMA_STR, 0, 1, 63},
        {"region", SCHEMA_STR, 0, 1, 63},       {"instance_type", SCHEMA_STR, 0, 1, 63},
        {"max_nodes", SCHEMA_INT, 0, 0, 10000}, {"profile", SCHEMA_NAME, 0, 0, 0},
        {"queues", SCHEMA_ARR, 0, 0, 0},        {NULL, 0, 0, 0, 0},
};

/* The bounds of POST /v1/queues (server/api.c), durations as the YAML way
 * writes them. */
static const struct schema_field queue_fields[] = {
        {"priority", SCHEMA_INT, 0, -1000, 1000},
        {"weight", SCHEMA_INT, 0, 1, 1000},
        {"borrowing", SCHEMA_BOOL, 0, 0, 0},
        {"default_time_limit", SCHEMA_DURATION, 0, 1000, 366 * DAY_MS},
        {"idle_timeout", SCHEMA_DURATION, 0, 0, 366 * DAY_MS},
        {"run_as_root", SCHEMA_BOOL, 0, 0, 0},
        {"quotas", SCHEMA_OBJ, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field team_fields[] = {
        {"weight", SCHEMA_INT, 0, 1, 1000},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field upgrade_fields[] = {
        {"max_unavailable", SCHEMA_INT, 0, 1, FLEET_MAX_NODES},
        {"max_unavailable_per_block", SCHEMA_INT, 0, 1, FLEET_MAX_NODES},
        {"validation_timeout", SCHEMA_DURATION, 0, 10000, DAY_MS},
        {NULL, 0, 0, 0, 0},
};

/* ---- references ---- */

/* "a, b, c" of the section's names, cut short with "...". */
static void names_of(const json_t *section, char *out, size_t len)
{
	size_t used = 0;
	const char *k;
	json_t *v;
	out[0] = '\0';
	json_object_foreach ((json_t *)section, k, v) {
		int n = snprintf(out + used, len - used, "%s%s", used ? ", " : "", k);
		if (n < 0 || (size_t)n >= len - used) {
			snprintf(out + (used < len - 4 ? used : len - 4), 4, "...");
			return;
		}
		used += (size_t)n;
	}
}

int spec_ref(struct fleet_ctx *c, const char *section, const char *kind, const char *name,
             const char *path)
{
	const json_t *s = json_object_get(c->src, section);
	if (json_object_get(s, name))
		return 1;
	char known[160];
	names_of(s, known, sizeof(known));
	if (known[0])
		schema_add(c->e, path, "there is no %s '%.64s' (%s: %s)", kind, name, section,
		           known);
	else
		schema_add(c->e, path, "there is no %s '%.64s': the spec has no %s", kind, name,
		           section);
	return 0;
}

/* ---- pools ---- */

static const char *const cloud_keys[] = {"provider",  "region",  "instance_type",
                                         "max_nodes", "profile", "queues"};
#define NCLOUD (sizeof(cloud_keys) / sizeof(cloud_keys[0]))

static int listed(const json_t *list, const json_t *v)
{
	size_t i;
	json_t *x;
	json_array_foreach (list, i, x)
		if (json_equal(x, v))
			return 1;
	return 0;
}

static json_t *pool_queues(struct fleet_ctx *c, const json_t *list, const char *path)
{
	json_t *out = json_array();
	char sub[256];
	size_t i;
	json_t *q;
	if (!list) { /* every queue may burst */
		const char *k;
		json_t *v;
		json_object_foreach (json_object_get(c->src, "queues"), k, v)
			json_array_append_new(out, json_string(k));
		return out;
	}
	json_array_foreach (list, i, q) {
		schema_joini(sub, sizeof(sub), path, i);
		if (!json_is_string(q))
			schema_add(c->e, sub, "should be a queue's name, not %s",
			           schema_type_name(q));
		else if (!spec_ref(c, "queues", "queue", json_string_value(q), sub))
			continue;
		else if (listed(out, q))
			schema_add(c->e, sub, "queue '%s' is listed twice", json_string_value(q));
		else
			json_array_append(out, q);
	}
	return out;
}

static json_t *cloud_pool(struct fleet_ctx *c, const json_t *src, json_t *out, const char *path)
{
	static const char *const required[] = {"provider", "instance_type", "max_nodes", "profile"};
	char sub[256];
	for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
		if (!json_object_get(src, required[i]))
			schema_add(c->e, path,
			           "'%s' is missing: a cloud pool says what to start "
			           "(provider, instance_type, profile) and how many "
			           "(max_nodes)",
			           required[i]);
	for (size_t i = 0; i + 1 < NCLOUD; i++) {
		const json_t *v = json_object_get(src, cloud_keys[i]);
		json_object_set(out, cloud_keys[i], v ? (json_t *)v : json_null());
	}
	const char *profile = json_string_value(json_object_get(src, "profile"));
	schema_join(sub, sizeof(sub), path, "profile");
	if (profile)
		spec_ref(c, "profiles", "profile", profile, sub);
	schema_join(sub, sizeof(sub), path, "queues");
	const json_t *qs = json_object_get(src, "queues");
	json_object_set_new(out, "queues", pool_queues(c, json_is_array(qs) ? qs : NULL, sub));
	return out;
}

static json_t *pool(struct fleet_ctx *c, const char *name, const json_t *src, const char *path)
{
	char sub[256];
	const char *kind = json_string_value(json_object_get(src, "kind"));
	json_t *out = json_pack("{s:s,s:s}", "name", name, "kind", kind ? kind : "on-prem");
	if (!schema_fields(src, pool_fields, path, c->e))
		return out;
	schema_join(sub, sizeof(sub), path, "kind");
	if (kind && strcmp(kind, "on-prem") != 0 && strcmp(kind, "cloud") != 0) {
		schema_add(c->e, sub, "'%.16s' is not a kind of pool: on-prem or cloud", kind);
		return out;
	}
	if (kind && strcmp(kind, "cloud") == 0)
		return cloud_pool(c, src, out, path);
	for (size_t i = 0; i < NCLOUD; i++) {
		schema_join(sub, sizeof(sub), path, cloud_keys[i]);
		struct schema_error *x =
		        json_object_get(src, cloud_keys[i])
		                ? schema_add(c->e, sub, "only a cloud pool has '%s' (kind: cloud)",
		                             cloud_keys[i])
		                : NULL;
		if (x)
			x->at_key = 1;
	}
	return out;
}

/* ---- queues, teams, upgrade ---- */

static json_t *quotas(struct fleet_ctx *c, const json_t *o, const char *path)
{
	static const struct schema_field gpus = {"", SCHEMA_INT, 0, 0, 1000000};
	json_t *out = json_object();
	char sub[256];
	const char *team;
	json_t *v;
	if (json_object_size(o) > QUEUE_QUOTAS)
		schema_add(c->e, path, "gives %zu teams a quota; at most %d per queue",
		           json_object_size(o), QUEUE_QUOTAS);
	json_object_foreach ((json_t *)o, team, v) {
		schema_join(sub, sizeof(sub), path, team);
		int before = schema_count(c->e);
		spec_ref(c, "teams", "team", team, sub);
		schema_value(v, &gpus, sub, c->e);
		if (schema_count(c->e) == before)
			json_object_set(out, team, v);
	}
	return out;
}

static int64_t duration_or(const json_t *src, const char *key, int64_t dflt)
{
	int64_t ms;
	return schema_duration(json_object_get(src, key), &ms) ? dflt : ms;
}

static json_t *queue(struct fleet_ctx *c, const char *name, const json_t *src, const char *path)
{
	char sub[256];
	int ok = schema_fields(src, queue_fields, path, c->e);
	const json_t *b = json_object_get(src, "borrowing"), *q = json_object_get(src, "quotas");
	schema_join(sub, sizeof(sub), path, "quotas");
	return json_pack(
	        "{s:s,s:I,s:I,s:b,s:I,s:I,s:b,s:o}", "name", name, "priority",
	        json_integer_value(json_object_get(src, "priority")), "weight",
	        json_object_get(src, "weight") ? json_integer_value(json_object_get(src, "weight"))
	                                       : 1,
	        "borrowing", json_is_boolean(b) ? json_is_true(b) : 1, "default_time_limit_ms",
	        (json_int_t)duration_or(src, "default_time_limit", 86400000), "idle_timeout_ms",
	        (json_int_t)duration_or(src, "idle_timeout", 0), "run_as_root",
	        json_is_true(json_object_get(src, "run_as_root")), "quotas",
	        ok && json_is_object(q) ? quotas(c, q, sub) : json_object());
}

static json_t *team(struct fleet_ctx *c, const char *name, const json_t *src, const char *path)
{
	schema_fields(src, team_fields, path, c->e);
	const json_t *w = json_object_get(src, "weight");
	return json_pack("{s:s,s:I}", "name", name, "weight",
	                 json_is_integer(w) ? json_integer_value(w) : 1);
}

static json_t *upgrade(struct fleet_ctx *c, const json_t *src)
{
	const json_t *all = json_object_get(src, "max_unavailable");
	const json_t *block = json_object_get(src, "max_unavailable_per_block");
	if (src && schema_fields(src, upgrade_fields, "upgrade", c->e) && json_is_integer(all) &&
	    json_is_integer(block) && json_integer_value(block) > json_integer_value(all))
		schema_add(c->e, "upgrade.max_unavailable_per_block",
		           "%lld is more than max_unavailable (%lld), which bounds the whole fleet",
		           (long long)json_integer_value(block),
		           (long long)json_integer_value(all));
	return json_pack(
	        "{s:I,s:I,s:I}", "max_unavailable",
	        json_is_integer(all) ? json_integer_value(all) : 1, "max_unavailable_per_block",
	        json_is_integer(block) ? json_integer_value(block) : 1, "validation_timeout_ms",
	        (json_int_t)duration_or(src, "validation_timeout", 600000));
}

/* ---- sections ---- */

typedef json_t *(*entry_fn)(struct fleet_ctx *c, const char *name, const json_t *src,
                            const char *path);

static json_t *profile(struct fleet_ctx *c, const char *name, const json_t *src, const char *path)
{
	return spec_profile(name, src, path, c->e);
}

/* One mapping by name (pools, groups, ...) as a list of compiled entries;
 * an empty entry (`onprem:`) takes every default where null_ok. */
static json_t *section(struct fleet_ctx *c, const char *key, int needed, int null_ok, entry_fn fn)
{
	json_t *out = json_array();
	const json_t *s = json_object_get(c->src, key);
	if (!json_is_object(s))
		return out;
	if (needed && json_object_size(s) == 0)
		schema_add(c->e, key, "is empty: a fleet needs at least one");
	char sub[256];
	const char *name;
	json_t *v;
	json_object_foreach ((json_t *)s, name, v) {
		schema_join(sub, sizeof(sub), key, name);
		if (!schema_is_name(name)) {
			struct schema_error *x =
			        schema_add(c->e, sub,
			                   "'%.64s' is not a name: 1 to 63 letters, "
			                   "digits, '_' or '-'",
			                   name);
			if (x)
				x->at_key = 1;
		}
		json_t *empty = json_object();
		json_array_append_new(out,
		                      fn(c, name, null_ok && json_is_null(v) ? empty : v, sub));
		json_decref(empty);
	}
	return out;
}

json_t *fleet_compile(const json_t *src, struct schema_errors *e)
{
	int before = schema_count(e);
	if (!schema_fields(src, top_fields, "", e))
		return NULL;
	struct fleet_ctx c = {.src = src,
	                      .e = e,
	                      .node_at = json_object(),
	                      .addr_at = json_object(),
	                      .nodes = json_array()};
	const json_t *name = json_object_get(src, "name");
	json_t *out = json_pack("{s:O}", "name", name ? name : json_null());
	json_object_set_new(out, "pools", section(&c, "pools", 1, 1, pool));
	json_object_set_new(out, "profiles", section(&c, "profiles", 1, 0, profile));
	json_object_set_new(out, "groups", section(&c, "groups", 1, 0, spec_group));
	json_object_set_new(out, "nodes", json_incref(c.nodes));
	json_object_set_new(out, "queues", section(&c, "queues", 0, 1, queue));
	json_object_set_new(out, "teams", section(&c, "teams", 0, 1, team));
	json_object_set_new(out, "upgrade", upgrade(&c, json_object_get(src, "upgrade")));
	json_decref(c.node_at);
	json_decref(c.addr_at);
	json_decref(c.nodes);
	if (schema_count(e) > before) {
		json_decref(out);
		return NULL;
	}
	return out;
}

json_t *fleet_compile_yaml(const char *file, const char *text, size_t len, char *out,
                           size_t len_out)
{
	struct ydoc doc;
	char perr[256];
	out[0] = '\0';
	if (ydoc_parse(text, len, &doc, perr, sizeof(perr))) {
		snprintf(out, len_out, "%s:%s\n", file, perr);
		return NULL;
	}
	struct schema_errors *e = xcalloc(1, sizeof(*e));
	json_t *fleet = fleet_compile(doc.root, e);
	schema_write(file, &doc, e, out, len_out);
	free(e);
	ydoc_free(&doc);
	return fleet;
}
