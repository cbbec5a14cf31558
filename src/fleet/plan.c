/* plan.c - the plan of a spec against the observed cluster, the drift
 * report, and the observed state's digest and fingerprint (plan.h). */
#include "fleet/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hash.h"
#include "base/util.h"
#include "fleet/steps.h"

/* ---- canonical JSON and hashes ---- */

static void canonical_hash(const json_t *v, char hex[FLEET_HASH_LEN + 1])
{
	char *text = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
	hash_sha256(text ? text : "", text ? strlen(text) : 0, hex);
	free(text);
}

void fleet_profile_hash(const json_t *profile, char hex[FLEET_HASH_LEN + 1])
{
	canonical_hash(profile, hex);
}

void fleet_fingerprint(const json_t *digest, char hex[FLEET_HASH_LEN + 1])
{
	canonical_hash(digest, hex);
}

static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

/* {name: entry} of a list of entries with a "name"; borrowed entries. */
static json_t *by_name(const json_t *list)
{
	json_t *m = json_object();
	size_t i;
	json_t *e;
	json_array_foreach (list, i, e)
		if (*str(e, "name"))
			json_object_set(m, str(e, "name"), e);
	return m;
}

static json_t *value_or_null(const json_t *v)
{
	return v ? json_incref((json_t *)v) : json_null();
}

/* ---- profiles ---- */

/* The keys of a compiled profile, and whether changing each needs the node
 * drained: what converging changes under running work does. */
static const struct {
	const char *key;
	int drain;
} profile_keys[] = {
        {"driver", 1}, {"cuda", 1},      {"agent", 1},  {"mounts", 1}, {"packages", 1},
        {"gpu", 0},    {"cache_dir", 0}, {"sysctl", 0}, {"name", 0},
};

/* A profile with every key unset: what a node without one is compared as. */
static json_t *empty_profile(void)
{
	return json_pack("{s:n,s:n,s:n,s:n,s:[],s:[],s:{s:n,s:i},s:n,s:{}}", "name", "driver",
	                 "cuda", "agent", "mounts", "packages", "gpu", "model", "count", 0,
	                 "cache_dir", "sysctl");
}

json_t *fleet_profile_diff(const json_t *from, const json_t *to, int *drain)
{
	json_t *empty = empty_profile(), *out = json_array();
	const json_t *a = from ? from : empty;
	*drain = 0;
	for (size_t i = 0; i < sizeof(profile_keys) / sizeof(profile_keys[0]); i++) {
		const char *k = profile_keys[i].key;
		const json_t *x = json_object_get(a, k), *y = json_object_get(to, k);
		json_t *nx = value_or_null(x), *ny = value_or_null(y);
		if (!json_equal(nx, ny)) {
			json_array_append_new(out,
			                      json_pack("{s:s,s:O,s:O,s:b}", "key", k, "from", nx,
			                                "to", ny, "drain", profile_keys[i].drain));
			*drain |= profile_keys[i].drain;
		}
		json_decref(nx);
		json_decref(ny);
	}
	json_decref(empty);
	return out;
}

/* ---- the plan: nodes ---- */

struct plan {
	json_t *add, *remove, *change, *drain;
	int unchanged;
	json_t *profiles; /* {name: {"spec", "hash"}} of the spec's profiles */
};

static json_t *profiles_of(const json_t *spec)
{
	json_t *m = json_object();
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(spec, "profiles"), i, p) {
		char hex[FLEET_HASH_LEN + 1];
		fleet_profile_hash(p, hex);
		json_object_set_new(m, str(p, "name"),
		                    json_pack("{s:O,s:s}", "spec", p, "hash", hex));
	}
	return m;
}

/* {"set": {K: V}, "remove": [K]} turning labels `have` into `want`, or
 * NULL when they are equal. */
static json_t *labels_diff(const json_t *have, const json_t *want)
{
	json_t *set = json_object(), *gone = json_array();
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)want, k, v)
		if (!json_equal(json_object_get(have, k), v))
			json_object_set(set, k, v);
	json_object_foreach ((json_t *)have, k, v)
		if (!json_object_get(want, k))
			json_array_append_new(gone, json_string(k));
	if (json_object_size(set) == 0 && json_array_size(gone) == 0) {
		json_decref(set);
		json_decref(gone);
		return NULL;
	}
	return json_pack("{s:o,s:o}", "set", set, "remove", gone);
}

/* What differs in the profile of node `want` (a spec's node) from `have`
 * (the observed node), or NULL. */
static json_t *profile_change(struct plan *p, const json_t *have, const json_t *want, int *drain)
{
	const json_t *target = json_object_get(p->profiles, str(want, "profile"));
	const json_t *now = json_object_get(have, "profile");
	*drain = 0;
	if (json_is_object(now) && strcmp(str(now, "hash"), str(target, "hash")) == 0)
		return NULL;
	const json_t *from = json_is_object(now) ? json_object_get(now, "spec") : NULL;
	json_t *changes = fleet_profile_diff(from, json_object_get(target, "spec"), drain);
	return json_pack("{s:O,s:s,s:O,s:s,s:o,s:b,s:O}", "from",
	                 json_is_object(now) ? json_object_get(now, "name") : json_null(), "to",
	                 str(want, "profile"), "from_hash",
	                 json_is_object(now) ? json_object_get(now, "hash") : json_null(),
	                 "to_hash", str(target, "hash"), "changes", changes, "drain", *drain,
	                 "spec", json_object_get(target, "spec"));
}

/* A node that keeps its profile but whose agent reports it failed or
 * drifted from it: the agent does not fix that by itself, an apply asks it
 * to run the steps again. */
static void reconverge(const json_t *have, json_t *c)
{
	char why[512];
	if (fleet_hold_reason(json_object_get(have, "profile"), json_object_get(have, "status"),
	                      why, sizeof(why)) == FLEET_HOLD_STUCK)
		json_object_set_new(c, "reconverge", json_pack("{s:s}", "why", why));
}

static void node_change(struct plan *p, const json_t *have, const json_t *want)
{
	json_t *c = json_pack("{s:s}", "name", str(want, "name"));
	const json_t *pool = json_object_get(have, "pool");
	if (!json_equal(pool ? pool : json_null(), json_object_get(want, "pool")))
		json_object_set_new(c, "pool",
		                    json_pack("{s:O,s:O}", "from", pool ? pool : json_null(), "to",
		                              json_object_get(want, "pool")));
	json_t *labels =
	        labels_diff(json_object_get(have, "labels"), json_object_get(want, "labels"));
	if (labels)
		json_object_set_new(c, "labels", labels);
	int drain = 0;
	json_t *profile = profile_change(p, have, want, &drain);
	if (profile)
		json_object_set_new(c, "profile", profile);
	else
		reconverge(have, c);
	if (drain)
		json_array_append_new(p->drain, json_string(str(want, "name")));
	if (json_is_true(json_object_get(have, "removed")))
		json_object_set_new(c, "restore", json_true());
	if (json_object_size(c) > 1)
		json_array_append(p->change, c);
	else
		p->unchanged++;
	json_decref(c);
}

static void plan_nodes(struct plan *p, const json_t *spec, const json_t *observed)
{
	json_t *seen = by_name(json_object_get(observed, "nodes"));
	json_t *wanted = by_name(json_object_get(spec, "nodes"));
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(spec, "nodes"), i, n) {
		const json_t *have = json_object_get(seen, str(n, "name"));
		if (have)
			node_change(p, have, n);
		else
			json_array_append_new(
			        p->add, json_pack("{s:s,s:s,s:s,s:s,s:o}", "name", str(n, "name"),
			                          "group", str(n, "group"), "pool", str(n, "pool"),
			                          "profile", str(n, "profile"), "address",
			                          value_or_null(json_object_get(n, "address"))));
	}
	json_array_foreach (json_object_get(observed, "nodes"), i, n) {
		if (json_object_get(wanted, str(n, "name")))
			continue;
		if (json_is_true(json_object_get(n, "removed")))
			p->unchanged++; /* taken out by an earlier apply, and kept so */
		else
			json_array_append_new(p->remove,
			                      json_pack("{s:s}", "name", str(n, "name")));
	}
	json_decref(seen);
	json_decref(wanted);
}

/* ---- the plan: queues and teams ---- */

static const char *const queue_keys[] = {"priority",        "weight",
                                         "borrowing",       "default_time_limit_ms",
                                         "idle_timeout_ms", "run_as_root"};

static void add_change(json_t *changes, const char *key, const json_t *from, const json_t *to)
{
	json_array_append_new(changes,
	                      json_pack("{s:s,s:O,s:O}", "key", key, "from",
	                                from ? from : json_null(), "to", to ? to : json_null()));
}

/* The changes from queue `have` to `want`, and want's body with a null
 * quota for each team only `have` gives one. */
static json_t *queue_changes(const json_t *have, const json_t *want, json_t *body)
{
	json_t *changes = json_array();
	char key[96];
	for (size_t i = 0; i < sizeof(queue_keys) / sizeof(queue_keys[0]); i++)
		if (!json_equal(json_object_get(have, queue_keys[i]),
		                json_object_get(want, queue_keys[i])))
			add_change(changes, queue_keys[i], json_object_get(have, queue_keys[i]),
			           json_object_get(want, queue_keys[i]));
	const json_t *hq = json_object_get(have, "quotas"), *wq = json_object_get(want, "quotas");
	json_t *quotas = json_object_get(body, "quotas");
	const char *team;
	json_t *v;
	json_object_foreach ((json_t *)wq, team, v)
		if (!json_equal(json_object_get(hq, team), v)) {
			snprintf(key, sizeof(key), "quotas.%s", team);
			add_change(changes, key, json_object_get(hq, team), v);
		}
	json_object_foreach ((json_t *)hq, team, v)
		if (!json_object_get(wq, team)) {
			snprintf(key, sizeof(key), "quotas.%s", team);
			add_change(changes, key, v, NULL);
			json_object_set_new(quotas, team, json_null());
		}
	return changes;
}

static json_t *plan_queues(const json_t *spec, const json_t *observed, int *count)
{
	json_t *seen = by_name(json_object_get(observed, "queues"));
	json_t *add = json_array(), *change = json_array();
	int unchanged = 0;
	size_t i;
	json_t *q;
	json_array_foreach (json_object_get(spec, "queues"), i, q) {
		const json_t *have = json_object_get(seen, str(q, "name"));
		json_t *body = json_deep_copy(q);
		if (!json_is_object(json_object_get(body, "quotas")))
			json_object_set_new(body, "quotas", json_object());
		if (!have) {
			json_array_append_new(add, body);
			continue;
		}
		json_t *changes = queue_changes(have, q, body);
		if (json_array_size(changes))
			json_array_append_new(change,
			                      json_pack("{s:s,s:o,s:o}", "name", str(q, "name"),
			                                "changes", changes, "body", body));
		else {
			unchanged++;
			json_decref(changes);
			json_decref(body);
		}
	}
	json_decref(seen);
	*count += (int)(json_array_size(add) + json_array_size(change));
	return json_pack("{s:o,s:o,s:i}", "add", add, "change", change, "unchanged", unchanged);
}

static json_t *plan_teams(const json_t *spec, const json_t *observed, int *count)
{
	json_t *seen = by_name(json_object_get(observed, "teams"));
	json_t *add = json_array(), *change = json_array();
	int unchanged = 0;
	size_t i;
	json_t *t;
	json_array_foreach (json_object_get(spec, "teams"), i, t) {
		const json_t *have = json_object_get(seen, str(t, "name"));
		json_t *body = json_pack("{s:s,s:O}", "name", str(t, "name"), "weight",
		                         json_object_get(t, "weight"));
		if (!have) {
			json_array_append_new(add, body);
		} else if (!json_equal(json_object_get(have, "weight"),
		                       json_object_get(t, "weight"))) {
			json_t *changes = json_array();
			add_change(changes, "weight", json_object_get(have, "weight"),
			           json_object_get(t, "weight"));
			json_array_append_new(change,
			                      json_pack("{s:s,s:o,s:o}", "name", str(t, "name"),
			                                "changes", changes, "body", body));
		} else {
			unchanged++;
			json_decref(body);
		}
	}
	json_decref(seen);
	*count += (int)(json_array_size(add) + json_array_size(change));
	return json_pack("{s:o,s:o,s:i}", "add", add, "change", change, "unchanged", unchanged);
}

json_t *fleet_plan(const json_t *spec, const json_t *observed)
{
	struct plan p = {.add = json_array(),
	                 .remove = json_array(),
	                 .change = json_array(),
	                 .drain = json_array(),
	                 .profiles = profiles_of(spec)};
	plan_nodes(&p, spec, observed);
	/* nodes to add are waiting for their agents: nothing an apply does */
	int count = (int)(json_array_size(p.remove) + json_array_size(p.change));
	json_t *queues = plan_queues(spec, observed, &count);
	json_t *teams = plan_teams(spec, observed, &count);
	json_t *upgrade = json_object_get(spec, "upgrade");
	char hex[FLEET_HASH_LEN + 1];
	canonical_hash(spec, hex);
	int spec_changed = strcmp(hex, str(observed, "spec")) != 0;
	json_t *out = json_pack("{s:s,s:o,s:s,s:b,s:{s:o,s:o,s:o,s:i},s:o,s:o,s:o,s:O,s:i}",
	                        "fleet", str(spec, "name"), "revision",
	                        value_or_null(json_object_get(observed, "revision")), "spec", hex,
	                        "spec_changed", spec_changed, "nodes", "add", p.add, "remove",
	                        p.remove, "change", p.change, "unchanged", p.unchanged, "queues",
	                        queues, "teams", teams, "drain", p.drain, "upgrade",
	                        upgrade ? upgrade : json_null(), "changes", count);
	json_decref(p.profiles);
	return out;
}

void fleet_spec_hash(const json_t *spec, char hex[FLEET_HASH_LEN + 1])
{
	canonical_hash(spec, hex);
}

/* ---- digest ---- */

static json_t *node_digest(const json_t *n)
{
	const json_t *profile = json_object_get(n, "profile");
	json_t *part = json_pack(
	        "{s:O,s:O,s:O,s:b}", "pool",
	        json_object_get(n, "pool") ? json_object_get(n, "pool") : json_null(), "labels",
	        json_object_get(n, "labels") ? json_object_get(n, "labels") : json_null(),
	        "profile", json_is_object(profile) ? json_object_get(profile, "hash") : json_null(),
	        "removed", json_is_true(json_object_get(n, "removed")));
	char hex[FLEET_HASH_LEN + 1];
	canonical_hash(part, hex);
	json_decref(part);
	hex[16] = '\0'; /* enough to tell a change, short enough for 10,000 nodes */
	return json_string(hex);
}

json_t *fleet_observed_digest(const json_t *observed)
{
	json_t *nodes = json_object(), *queues = json_object(), *teams = json_object();
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(observed, "nodes"), i, e)
		json_object_set_new(nodes, str(e, "name"), node_digest(e));
	json_array_foreach (json_object_get(observed, "queues"), i, e) {
		json_t *q = json_copy(e);
		json_object_del(q, "name");
		json_object_set_new(queues, str(e, "name"), q);
	}
	json_array_foreach (json_object_get(observed, "teams"), i, e)
		json_object_set(teams, str(e, "name"), json_object_get(e, "weight"));
	const json_t *rev = json_object_get(observed, "revision");
	return json_pack("{s:O,s:o,s:o,s:o}", "revision", rev ? rev : json_integer(0), "nodes",
	                 nodes, "queues", queues, "teams", teams);
}

static void say(json_t *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(json_t *out, const char *fmt, ...)
{
	char text[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	json_array_append_new(out, json_string(text));
}

/* Compact JSON of v for a sentence ("100", "true", "{\"a\":1}"). */
static void text_of(const json_t *v, char *out, size_t len)
{
	char *t = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS) : NULL;
	snprintf(out, len, "%s", t ? t : "none");
	free(t);
}

/* "priority 100 -> 90, quotas {...} -> {...}": what differs between two
 * objects, key by key. */
static void keys_changed(const json_t *was, const json_t *now, char *out, size_t len)
{
	size_t used = 0;
	const char *k;
	json_t *v;
	char a[160], b[160];
	out[0] = '\0';
	json_object_foreach ((json_t *)now, k, v) {
		if (json_equal(json_object_get(was, k), v) || used + 1 >= len)
			continue;
		text_of(json_object_get(was, k), a, sizeof(a));
		text_of(v, b, sizeof(b));
		used += (size_t)snprintf(out + used, len - used, "%s%s %s -> %s", used ? ", " : "",
		                         k, a, b);
	}
}

static void part_changes(json_t *out, const char *kind, const json_t *before, const json_t *now)
{
	const char *k;
	json_t *v;
	char a[160], b[160], keys[320];
	json_object_foreach ((json_t *)now, k, v) {
		const json_t *was = json_object_get(before, k);
		if (!was) {
			say(out, "%s %s %s", kind, k,
			    strcmp(kind, "node") == 0 ? "joined" : "was added");
		} else if (!json_equal(was, v) && strcmp(kind, "node") == 0) {
			say(out, "node %s changed: its pool, labels or profile", k);
		} else if (!json_equal(was, v) && json_is_object(v) && json_is_object(was)) {
			keys_changed(was, v, keys, sizeof(keys));
			say(out, "%s %s changed: %s", kind, k, keys);
		} else if (!json_equal(was, v)) {
			text_of(was, a, sizeof(a));
			text_of(v, b, sizeof(b));
			say(out, "%s %s changed: %s -> %s", kind, k, a, b);
		}
	}
	json_object_foreach ((json_t *)before, k, v)
		if (!json_object_get(now, k))
			say(out, "%s %s is gone", kind, k);
}

json_t *fleet_digest_changes(const json_t *before, const json_t *now)
{
	json_t *out = json_array();
	if (!json_is_object(before) || !json_is_object(json_object_get(before, "nodes"))) {
		say(out, "the plan holds no record of the cluster it was made against");
		return out;
	}
	const json_t *rb = json_object_get(before, "revision"),
	             *rn = json_object_get(now, "revision");
	if (!json_equal(rb, rn))
		say(out, "revision %lld was applied since the plan was made (at revision %lld)",
		    (long long)json_integer_value(rn), (long long)json_integer_value(rb));
	part_changes(out, "node", json_object_get(before, "nodes"), json_object_get(now, "nodes"));
	part_changes(out, "queue", json_object_get(before, "queues"),
	             json_object_get(now, "queues"));
	part_changes(out, "team", json_object_get(before, "teams"), json_object_get(now, "teams"));
	return out;
}

/* ---- how a node stands against its profile ---- */

int fleet_status_state_ok(const char *s)
{
	return s && (strcmp(s, "converging") == 0 || strcmp(s, "converged") == 0 ||
	             strcmp(s, "failed") == 0 || strcmp(s, "drifted") == 0);
}

/* The first step whose status is none of ok, changed and skipped. */
static const json_t *step_at_fault(const json_t *status)
{
	size_t i;
	json_t *s;
	json_array_foreach (json_object_get(status, "steps"), i, s) {
		const char *st = str(s, "status");
		if (strcmp(st, "ok") != 0 && strcmp(st, "changed") != 0 &&
		    strcmp(st, "skipped") != 0)
			return s;
	}
	return NULL;
}

/* How many steps the profile's spec makes (steps.h), or 0 when it makes
 * none that the agent would run (a malformed profile). */
static size_t steps_of(const json_t *spec)
{
	struct steps *list = NULL;
	char err[256];
	if (!json_is_object(spec) || steps_from_profile(spec, &list, err, sizeof(err)))
		return 0;
	size_t n = list->n;
	steps_free(list);
	return n;
}

/* "converging to profile h200 (step 3 of 7)": the steps so far are done
 * (the agent sends those of a run under way), the total is the profile's. */
static void progress(const json_t *profile, const json_t *status, char *out, size_t len)
{
	const char *name = str(profile, "name");
	size_t n = steps_of(json_object_get(profile, "spec")), done = 0, i;
	json_t *s;
	json_array_foreach (json_object_get(status, "steps"), i, s) {
		const char *st = str(s, "status");
		done += strcmp(st, "ok") == 0 || strcmp(st, "changed") == 0;
	}
	if (n < json_array_size(json_object_get(status, "steps")))
		n = json_array_size(json_object_get(status, "steps"));
	if (n == 0)
		text_printf(out, len, "converging to profile %s", name);
	else
		text_printf(out, len, "converging to profile %s (step %zu of %zu)", name,
		            done < n ? done + 1 : n, n);
}

enum fleet_hold fleet_hold_reason(const json_t *profile, const json_t *status, char *out,
                                  size_t len)
{
	const char *state = str(status, "state"), *name = str(profile, "name");
	out[0] = '\0';
	if (!json_is_object(status) || strcmp(str(status, "hash"), str(profile, "hash")) != 0) {
		text_printf(out, len, "waiting for its agent to converge to profile %s", name);
		return FLEET_HOLD_WAIT;
	}
	if (strcmp(state, "converged") == 0)
		return FLEET_HOLD_NONE;
	const json_t *bad = step_at_fault(status);
	if (strcmp(state, "failed") == 0 || strcmp(state, "drifted") == 0) {
		const char *detail = str(bad, "detail");
		int failed = strcmp(state, "failed") == 0;
		text_printf(out, len,
		            failed ? "profile %s failed at step '%s'%s%s"
		                   : "drifted from profile %s at step '%s'%s%s",
		            name, bad ? str(bad, "name") : "?", *detail ? ": " : "", detail);
		return FLEET_HOLD_STUCK;
	}
	progress(profile, status, out, len);
	return FLEET_HOLD_WAIT;
}

/* ---- drift ---- */

struct drift_counts {
	int profiled, converged, converging, unreported, drifted, failed, mismatched;
};

/* Facts that differ from the profile, one sentence each into issues. */
static void facts_issues(const json_t *spec, const json_t *facts, json_t *issues)
{
	static const struct {
		const char *key, *fact, *what;
	} pins[] = {{"driver", "driver_version", "driver"},
	            {"cuda", "cuda_version", "CUDA"},
	            {"agent", "agent_version", "agent"}};
	for (size_t i = 0; i < sizeof(pins) / sizeof(pins[0]); i++) {
		const char *want = json_string_value(json_object_get(spec, pins[i].key));
		const char *have = str(facts, pins[i].fact);
		if (want && !steps_version_match(want, have)) /* the agent's own rule */
			say(issues, "%s: the profile pins %s, the node reports %s", pins[i].what,
			    want, *have ? have : "none");
	}
	const json_t *gpu = json_object_get(spec, "gpu");
	json_int_t want = json_integer_value(json_object_get(gpu, "count"));
	json_int_t have = json_integer_value(json_object_get(facts, "gpu_count"));
	if (want != have)
		say(issues, "GPUs: the profile expects %lld, the node reports %lld",
		    (long long)want, (long long)have);
	const char *model = json_string_value(json_object_get(gpu, "model"));
	const char *seen = str(facts, "gpu_model");
	if (model && want > 0 && have > 0 && strcasecmp(model, seen) != 0)
		say(issues, "GPU model: the profile expects %s, the node reports %s", model, seen);
}

static json_t *node_drift(const json_t *n, struct drift_counts *c)
{
	const json_t *profile = json_object_get(n, "profile"),
	             *status = json_object_get(n, "status");
	const char *name = str(profile, "name"), *hash = str(profile, "hash");
	json_t *issues = json_array();
	char why[512];
	enum fleet_hold h = fleet_hold_reason(profile, status, why, sizeof(why));
	int current = json_is_object(status) && strcmp(str(status, "hash"), hash) == 0;
	const char *state = current ? str(status, "state") : "unreported";
	c->profiled++;
	if (h == FLEET_HOLD_STUCK) {
		say(issues, "%s", why);
		*(strcmp(state, "failed") == 0 ? &c->failed : &c->drifted) += 1;
	} else if (h == FLEET_HOLD_NONE) {
		c->converged++;
	} else {
		*(current ? &c->converging : &c->unreported) += 1;
	}
	size_t before = json_array_size(issues);
	facts_issues(json_object_get(profile, "spec"), json_object_get(n, "facts"), issues);
	const char *want = str(n, "spec_address"),
	           *have = str(json_object_get(n, "facts"), "address");
	if (*want && strcmp(want, have) != 0)
		say(issues, "address: the spec says %s, the node reports %s", want,
		    *have ? have : "none");
	c->mismatched += json_array_size(issues) > before;
	if (json_array_size(issues) == 0) {
		json_decref(issues);
		return NULL;
	}
	return json_pack("{s:s,s:s,s:s,s:o}", "name", str(n, "name"), "profile", name, "state",
	                 state, "issues", issues);
}

json_t *fleet_drift(const json_t *observed)
{
	struct drift_counts c = {0};
	json_t *nodes = json_array();
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(observed, "nodes"), i, n) {
		if (!json_is_object(json_object_get(n, "profile")))
			continue;
		json_t *d = node_drift(n, &c);
		if (d)
			json_array_append_new(nodes, d);
	}
	return json_pack("{s:o,s:{s:i,s:i,s:i,s:i,s:i,s:i,s:i}}", "nodes", nodes, "counts",
	                 "profiled", c.profiled, "converged", c.converged, "converging",
	                 c.converging, "unreported", c.unreported, "drifted", c.drifted, "failed",
	                 c.failed, "mismatched", c.mismatched);
}
