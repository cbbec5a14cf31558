/* The fleet's plan (fleet/plan.h): every kind of difference between a spec
 * and the observed cluster, whether a profile change needs a drain, the
 * fingerprint of the observed state and what it names when it changed,
 * idempotence, the drift report and the hold reasons. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/hash.h"
#include "fleet/plan.h"
#include "fleet/spec.h"

static char errs[16384];

#define SPEC                                                                                       \
	"name: lab\n"                                                                              \
	"pools: {onprem: , spare: }\n"                                                             \
	"profiles:\n"                                                                              \
	"  h200:\n"                                                                                \
	"    gpu: {model: NVIDIA H200, count: 8}\n"                                                \
	"    driver: '550.127.05'\n"                                                               \
	"    sysctl: {vm.swappiness: 1}\n"                                                         \
	"groups:\n"                                                                                \
	"  h:\n"                                                                                   \
	"    pool: onprem\n"                                                                       \
	"    profile: h200\n"                                                                      \
	"    nodes: h-[1-3]\n"                                                                     \
	"    labels: {gpu: h200}\n"                                                                \
	"    topology: {block: b1}\n"                                                              \
	"queues:\n"                                                                                \
	"  prod: {priority: 100, quotas: {search: 16}}\n"                                          \
	"teams:\n"                                                                                 \
	"  search: {weight: 2}\n"                                                                  \
	"upgrade: {max_unavailable: 1}\n"

static json_t *compile(const char *yaml)
{
	json_t *f = fleet_compile_yaml("f.yaml", yaml, strlen(yaml), errs, sizeof(errs));
	if (!f)
		FAIL_AT("spec does not compile:\n%s", errs);
	return f;
}

/* The spec with `from` replaced by `to` (once). */
static json_t *compile_edit(const char *from, const char *to)
{
	const char *at = strstr(SPEC, from);
	CHECK(at != NULL);
	char text[4096];
	snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - SPEC), SPEC, to, at + strlen(from));
	return compile(text);
}

static const json_t *profile_named(const json_t *spec, const char *name)
{
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(spec, "profiles"), i, p)
		if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0)
			return p;
	FAIL_AT("no profile %s", name);
}

/* What the server would observe once spec is applied and every node has
 * joined: the plan of spec against it is empty. */
static json_t *observed_of(const json_t *spec, int revision)
{
	json_t *nodes = json_array(), *queues = json_array(), *teams = json_array();
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(spec, "nodes"), i, n) {
		const json_t *p =
		        profile_named(spec, json_string_value(json_object_get(n, "profile")));
		char hex[FLEET_HASH_LEN + 1];
		fleet_profile_hash(p, hex);
		json_array_append_new(nodes, json_pack("{s:O,s:O,s:O,s:{s:O,s:s,s:O},s:b}", "name",
		                                       json_object_get(n, "name"), "pool",
		                                       json_object_get(n, "pool"), "labels",
		                                       json_object_get(n, "labels"), "profile",
		                                       "name", json_object_get(p, "name"), "hash",
		                                       hex, "spec", p, "removed", 0));
	}
	json_array_foreach (json_object_get(spec, "queues"), i, n)
		json_array_append_new(queues, json_deep_copy(n));
	json_array_foreach (json_object_get(spec, "teams"), i, n)
		json_array_append_new(teams, json_deep_copy(n));
	char spec_hash[FLEET_HASH_LEN + 1];
	fleet_spec_hash(spec, spec_hash);
	json_t *copy = json_deep_copy(nodes); /* nothing shared with spec */
	json_decref(nodes);
	nodes = copy;
	return json_pack("{s:i,s:s,s:o,s:o,s:o}", "revision", revision, "spec", spec_hash, "nodes",
	                 nodes, "queues", queues, "teams", teams);
}

static json_t *observed_node(json_t *observed, const char *name)
{
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(observed, "nodes"), i, n)
		if (strcmp(json_string_value(json_object_get(n, "name")), name) == 0)
			return n;
	FAIL_AT("no observed node %s", name);
}

static json_int_t count(const json_t *plan)
{
	return json_integer_value(json_object_get(plan, "changes"));
}

static const json_t *at(const json_t *plan, const char *section, const char *kind, size_t i)
{
	return json_array_get(json_object_get(json_object_get(plan, section), kind), i);
}

static const char *s_of(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "(none)";
}

TEST(profile_hash_is_sha256_of_canonical_json)
{
	json_t *a = json_pack("{s:s,s:i,s:[i]}", "zeta", "z", "alpha", 1, "mid", 2);
	char hex[FLEET_HASH_LEN + 1], want[HASH_HEX_LEN + 1];
	fleet_profile_hash(a, hex);
	const char *canon = "{\"alpha\":1,\"mid\":[2],\"zeta\":\"z\"}";
	hash_sha256(canon, strlen(canon), want);
	CHECK_STR(hex, want);
	json_t *b = json_pack("{s:[i],s:i,s:s}", "mid", 2, "alpha", 1, "zeta", "z");
	fleet_profile_hash(b, want);
	CHECK_STR(hex, want); /* key order does not matter */
	json_decref(a);
	json_decref(b);
}

TEST(empty_cluster_adds_everything)
{
	json_t *spec = compile(SPEC);
	json_t *obs = json_pack("{s:i,s:[],s:[],s:[]}", "revision", 0, "nodes", "queues", "teams");
	json_t *plan = fleet_plan(spec, obs);
	CHECK_INT(json_array_size(json_object_get(json_object_get(plan, "nodes"), "add")), 3);
	const json_t *add = at(plan, "nodes", "add", 0);
	CHECK_STR(s_of(add, "name"), "h-1");
	CHECK_STR(s_of(add, "profile"), "h200");
	CHECK_STR(s_of(add, "pool"), "onprem");
	CHECK_STR(s_of(at(plan, "queues", "add", 0), "name"), "prod");
	CHECK_STR(s_of(at(plan, "teams", "add", 0), "name"), "search");
	CHECK_INT(count(plan), 2); /* the nodes wait for their agents */
	CHECK(json_is_true(json_object_get(plan, "spec_changed")));
	CHECK_INT(json_array_size(json_object_get(plan, "drain")), 0); /* nothing joined */
	json_decref(plan);
	json_decref(obs);
	json_decref(spec);
}

TEST(applied_spec_plans_nothing)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_of(spec, 1);
	json_t *plan = fleet_plan(spec, obs);
	CHECK_INT(count(plan), 0);
	CHECK(json_is_false(json_object_get(plan, "spec_changed")));
	CHECK_INT(json_integer_value(json_object_get(json_object_get(plan, "nodes"), "unchanged")),
	          3);
	json_t *again = fleet_plan(spec, obs);
	CHECK(json_equal(plan, again)); /* deterministic: what apply PLAN relies on */
	json_decref(again);
	/* a node of the spec that has not joined: listed, not a change */
	json_array_remove(json_object_get(obs, "nodes"), 2);
	json_t *waiting = fleet_plan(spec, obs);
	CHECK_INT(count(waiting), 0);
	CHECK_STR(s_of(at(waiting, "nodes", "add", 0), "name"), "h-3");
	json_decref(waiting);
	json_decref(plan);
	json_decref(obs);
	json_decref(spec);
}

TEST(node_pool_and_labels_differ)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_of(spec, 1);
	json_t *n = observed_node(obs, "h-2");
	json_object_set_new(n, "pool", json_string("spare"));
	json_t *labels = json_object_get(n, "labels");
	json_object_set_new(labels, "gpu", json_string("old"));
	json_object_set_new(labels, "extra", json_string("x"));
	json_object_del(labels, "block");
	json_t *plan = fleet_plan(spec, obs);
	CHECK_INT(count(plan), 1);
	const json_t *c = at(plan, "nodes", "change", 0);
	CHECK_STR(s_of(c, "name"), "h-2");
	CHECK_STR(s_of(json_object_get(c, "pool"), "from"), "spare");
	CHECK_STR(s_of(json_object_get(c, "pool"), "to"), "onprem");
	const json_t *set = json_object_get(json_object_get(c, "labels"), "set");
	CHECK_STR(s_of(set, "gpu"), "h200");
	CHECK_STR(s_of(set, "block"), "b1");
	CHECK_INT(json_object_size(set), 2);
	const json_t *gone = json_object_get(json_object_get(c, "labels"), "remove");
	CHECK_INT(json_array_size(gone), 1);
	CHECK_STR(json_string_value(json_array_get(gone, 0)), "extra");
	CHECK(json_object_get(c, "profile") == NULL);
	CHECK_INT(json_array_size(json_object_get(plan, "drain")), 0); /* labels, pool: no drain */
	json_decref(plan);
	json_decref(obs);
	json_decref(spec);
}

/* The profile change of the plan's only node change. */
static const json_t *only_profile_change(const json_t *plan)
{
	CHECK_INT(json_array_size(json_object_get(json_object_get(plan, "nodes"), "change")), 3);
	return json_object_get(at(plan, "nodes", "change", 0), "profile");
}

TEST(sysctl_change_needs_no_drain)
{
	json_t *old = compile(SPEC);
	json_t *obs = observed_of(old, 1);
	json_t *spec = compile_edit("vm.swappiness: 1", "vm.swappiness: 10");
	json_t *plan = fleet_plan(spec, obs);
	const json_t *p = only_profile_change(plan);
	CHECK(json_is_false(json_object_get(p, "drain")));
	const json_t *k = json_array_get(json_object_get(p, "changes"), 0);
	CHECK_STR(s_of(k, "key"), "sysctl");
	CHECK_INT(json_array_size(json_object_get(p, "changes")), 1);
	CHECK(json_is_false(json_object_get(k, "drain")));
	CHECK_INT(json_array_size(json_object_get(plan, "drain")), 0);
	CHECK(strcmp(s_of(p, "from_hash"), s_of(p, "to_hash")) != 0);
	json_decref(plan);
	json_decref(spec);
	json_decref(obs);
	json_decref(old);
}

TEST(driver_change_needs_a_drain)
{
	json_t *old = compile(SPEC);
	json_t *obs = observed_of(old, 1);
	json_t *spec = compile_edit("550.127.05", "560.35.03");
	json_t *plan = fleet_plan(spec, obs);
	const json_t *p = only_profile_change(plan);
	CHECK(json_is_true(json_object_get(p, "drain")));
	const json_t *k = json_array_get(json_object_get(p, "changes"), 0);
	CHECK_STR(s_of(k, "key"), "driver");
	CHECK_STR(s_of(k, "from"), "550.127.05");
	CHECK_STR(s_of(k, "to"), "560.35.03");
	CHECK_STR(s_of(p, "from"), "h200");
	CHECK(json_is_object(json_object_get(p, "spec")));
	const json_t *drain = json_object_get(plan, "drain");
	CHECK_INT(json_array_size(drain), 3);
	CHECK_STR(json_string_value(json_array_get(drain, 0)), "h-1");
	CHECK_INT(count(plan), 3);
	json_decref(plan);
	json_decref(spec);
	json_decref(obs);
	json_decref(old);
}

TEST(which_keys_need_a_drain)
{
	static const struct {
		const char *key;
		const char *value;
		int drain;
	} cases[] = {
	        {"driver", "\"1.2\"", 1},
	        {"cuda", "\"12.4\"", 1},
	        {"agent", "\"0.2.0\"", 1},
	        {"mounts",
	         "[{\"path\":\"/m\",\"device\":\"/dev/x\",\"fs\":\"xfs\",\"options\":[]}]", 1},
	        {"packages", "[\"rdma-core\"]", 1},
	        {"sysctl", "{\"vm.x\":\"1\"}", 0},
	        {"cache_dir", "\"/cache\"", 0},
	        {"gpu", "{\"model\":\"NVIDIA A100\",\"count\":4}", 0},
	};
	json_t *base = json_pack("{s:s,s:n,s:n,s:n,s:[],s:[],s:{},s:n,s:{s:n,s:i}}", "name", "p",
	                         "driver", "cuda", "agent", "mounts", "packages", "sysctl",
	                         "cache_dir", "gpu", "model", "count", 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *to = json_deep_copy(base);
		json_object_set_new(to, cases[i].key,
		                    json_loads(cases[i].value, JSON_DECODE_ANY, NULL));
		int drain = -1;
		json_t *d = fleet_profile_diff(base, to, &drain);
		if (drain != cases[i].drain || json_array_size(d) != 1)
			FAIL_AT("%s: drain %d, %zu changes", cases[i].key, drain,
			        json_array_size(d));
		json_decref(d);
		/* the same change seen from a node without a profile */
		d = fleet_profile_diff(NULL, to, &drain);
		CHECK_INT(drain, cases[i].drain);
		CHECK_INT(json_array_size(d), 2); /* its name too */
		json_decref(d);
		json_decref(to);
	}
	json_decref(base);
}

TEST(first_profile_of_a_joined_node)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_of(spec, 0);
	json_object_set_new(observed_node(obs, "h-3"), "profile", json_null());
	json_t *plan = fleet_plan(spec, obs);
	CHECK_INT(count(plan), 1);
	const json_t *p = json_object_get(at(plan, "nodes", "change", 0), "profile");
	CHECK(json_is_null(json_object_get(p, "from")));
	CHECK_STR(s_of(p, "to"), "h200");
	CHECK(json_is_true(json_object_get(p, "drain"))); /* it pins a driver */
	CHECK_STR(json_string_value(json_array_get(json_object_get(plan, "drain"), 0)), "h-3");
	json_decref(plan);
	json_decref(obs);
	json_decref(spec);
}

TEST(nodes_to_remove_and_restore)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_of(spec, 1);
	json_array_append_new(json_object_get(obs, "nodes"),
	                      json_pack("{s:s,s:n,s:{},s:n,s:b}", "name", "stray", "pool", "labels",
	                                "profile", "removed", 0));
	json_array_append_new(json_object_get(obs, "nodes"),
	                      json_pack("{s:s,s:n,s:{},s:n,s:b}", "name", "gone", "pool", "labels",
	                                "profile", "removed", 1));
	json_object_set_new(observed_node(obs, "h-1"), "removed", json_true());
	json_t *plan = fleet_plan(spec, obs);
	CHECK_INT(count(plan), 2);
	CHECK_INT(json_array_size(json_object_get(json_object_get(plan, "nodes"), "remove")), 1);
	CHECK_STR(s_of(at(plan, "nodes", "remove", 0), "name"), "stray");
	const json_t *c = at(plan, "nodes", "change", 0);
	CHECK_STR(s_of(c, "name"), "h-1");
	CHECK(json_is_true(json_object_get(c, "restore")));
	/* "gone" was removed before and is still not in the spec: unchanged */
	CHECK_INT(json_integer_value(json_object_get(json_object_get(plan, "nodes"), "unchanged")),
	          3);
	json_decref(plan);
	json_decref(obs);
	json_decref(spec);
}

TEST(queue_and_team_changes)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_of(spec, 1);
	json_t *q = json_array_get(json_object_get(obs, "queues"), 0);
	json_object_set_new(q, "priority", json_integer(90));
	json_object_set_new(json_object_get(q, "quotas"), "search", json_integer(8));
	json_object_set_new(json_object_get(q, "quotas"), "ranking", json_integer(4));
	json_object_set_new(json_array_get(json_object_get(obs, "teams"), 0), "weight",
	                    json_integer(1));
	json_array_append_new(json_object_get(obs, "queues"),
	                      json_pack("{s:s,s:i,s:{}}", "name", "default", "priority", 0,
	                                "quotas")); /* not in the spec: left alone */
	json_t *plan = fleet_plan(spec, obs);
	CHECK_INT(count(plan), 2);
	const json_t *c = at(plan, "queues", "change", 0);
	CHECK_STR(s_of(c, "name"), "prod");
	const json_t *changes = json_object_get(c, "changes");
	CHECK_INT(json_array_size(changes), 3);
	CHECK_STR(s_of(json_array_get(changes, 0), "key"), "priority");
	CHECK_INT(json_integer_value(json_object_get(json_array_get(changes, 0), "from")), 90);
	CHECK_STR(s_of(json_array_get(changes, 1), "key"), "quotas.search");
	CHECK_STR(s_of(json_array_get(changes, 2), "key"), "quotas.ranking");
	CHECK(json_is_null(json_object_get(json_array_get(changes, 2), "to")));
	const json_t *body = json_object_get(c, "body");
	CHECK_INT(json_integer_value(json_object_get(body, "priority")), 100);
	const json_t *quotas = json_object_get(body, "quotas");
	CHECK_INT(json_integer_value(json_object_get(quotas, "search")), 16);
	CHECK(json_is_null(json_object_get(quotas, "ranking"))); /* POST /v1/queues removes it */
	const json_t *t = at(plan, "teams", "change", 0);
	CHECK_STR(s_of(t, "name"), "search");
	CHECK_INT(json_integer_value(json_object_get(json_object_get(t, "body"), "weight")), 2);
	json_decref(plan);
	json_decref(obs);
	json_decref(spec);
}

TEST(fingerprint_covers_what_a_plan_depends_on)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_of(spec, 1);
	json_t *d0 = fleet_observed_digest(obs);
	char f0[FLEET_HASH_LEN + 1], f1[FLEET_HASH_LEN + 1];
	fleet_fingerprint(d0, f0);
	/* what the agents report is not part of it */
	json_t *n = observed_node(obs, "h-1");
	json_object_set_new(n, "status", json_pack("{s:s}", "state", "failed"));
	json_object_set_new(n, "facts", json_pack("{s:s}", "driver_version", "1"));
	json_t *d1 = fleet_observed_digest(obs);
	fleet_fingerprint(d1, f1);
	CHECK_STR(f0, f1);
	json_decref(d1);
	/* a label is */
	json_object_set_new(json_object_get(n, "labels"), "gpu", json_string("x"));
	json_object_set_new(json_array_get(json_object_get(obs, "queues"), 0), "weight",
	                    json_integer(3));
	json_array_append_new(
	        json_object_get(obs, "nodes"),
	        json_pack("{s:s,s:n,s:{},s:n}", "name", "new", "pool", "labels", "profile"));
	json_object_set_new(obs, "revision", json_integer(2));
	d1 = fleet_observed_digest(obs);
	fleet_fingerprint(d1, f1);
	CHECK(strcmp(f0, f1) != 0);
	json_t *why = fleet_digest_changes(d0, d1);
	char *text = json_dumps(why, JSON_COMPACT);
	CHECK_CONTAINS(text, "revision 2 was applied since the plan was made (at revision 1)");
	CHECK_CONTAINS(text, "node h-1 changed: its pool, labels or profile");
	CHECK_CONTAINS(text, "node new joined");
	CHECK_CONTAINS(text, "queue prod changed");
	CHECK_INT(json_array_size(why), 4);
	free(text);
	json_decref(why);
	why = fleet_digest_changes(d0, d0);
	CHECK_INT(json_array_size(why), 0);
	json_decref(why);
	json_t *junk = json_string("junk");
	why = fleet_digest_changes(junk, d0);
	CHECK_INT(json_array_size(why), 1);
	json_decref(why);
	json_decref(junk);
	json_decref(d0);
	json_decref(d1);
	json_decref(obs);
	json_decref(spec);
}

static json_t *status(const char *hash, const char *state, const char *steps)
{
	json_t *s = json_pack("{s:s,s:s,s:i}", "hash", hash, "state", state, "time_ms", 1);
	json_object_set_new(s, "steps", json_loads(steps, 0, NULL));
	return s;
}

TEST(hold_reasons)
{
	char why[300];
	json_t *spec = compile(SPEC);
	json_t *p = json_pack("{s:s,s:s,s:O}", "name", "h200", "hash", "abc", "spec",
	                      profile_named(spec, "h200"));
	CHECK_INT(fleet_hold_reason(p, NULL, why, sizeof(why)), FLEET_HOLD_WAIT);
	CHECK_STR(why, "waiting for its agent to converge to profile h200");
	/* the steps so far of a run under way, out of the profile's three
	 * (gpu, driver, sysctl vm.swappiness: fleet/steps.h) */
	json_t *s = status("abc", "converging",
	                   "[{\"name\":\"gpu\",\"status\":\"ok\"},{\"name\":\"driver\","
	                   "\"status\":\"ok\"}]");
	CHECK_INT(fleet_hold_reason(p, s, why, sizeof(why)), FLEET_HOLD_WAIT);
	CHECK_STR(why, "converging to profile h200 (step 3 of 3)");
	json_object_set_new(p, "hash", json_string("other"));
	CHECK_INT(fleet_hold_reason(p, s, why, sizeof(why)), FLEET_HOLD_WAIT);
	CHECK_STR(why, "waiting for its agent to converge to profile h200");
	json_object_set_new(p, "hash", json_string("abc"));
	json_decref(s);
	s = status("abc", "failed",
	           "[{\"name\":\"a\",\"status\":\"ok\"},{\"name\":\"mount /mnt/nvme\",\"status\":"
	           "\"failed\",\"detail\":\"mount: wrong fs type\"}]");
	CHECK_INT(fleet_hold_reason(p, s, why, sizeof(why)), FLEET_HOLD_STUCK);
	CHECK_STR(why, "profile h200 failed at step 'mount /mnt/nvme': mount: wrong fs type");
	json_decref(s);
	s = status("abc", "drifted", "[{\"name\":\"sysctl vm.swappiness\",\"status\":\"failed\"}]");
	CHECK_INT(fleet_hold_reason(p, s, why, sizeof(why)), FLEET_HOLD_STUCK);
	CHECK_STR(why, "drifted from profile h200 at step 'sysctl vm.swappiness'");
	json_decref(s);
	s = status("abc", "converged", "[]");
	CHECK_INT(fleet_hold_reason(p, s, why, sizeof(why)), FLEET_HOLD_NONE);
	json_decref(s);
	CHECK(fleet_status_state_ok("drifted"));
	CHECK(!fleet_status_state_ok("done"));
	json_decref(p);
	json_decref(spec);
}

/* A node that keeps its profile but failed or drifted from it: an apply of
 * the same spec asks its agent to converge again. */
TEST(failed_or_drifted_nodes_converge_again)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_of(spec, 1);
	json_t *n = observed_node(obs, "h-2");
	const char *hash =
	        json_string_value(json_object_get(json_object_get(n, "profile"), "hash"));
	json_object_set_new(n, "status",
	                    status(hash, "drifted",
	                           "[{\"name\":\"sysctl vm.swappiness\",\"status\":\"failed\","
	                           "\"detail\":\"60\"}]"));
	json_t *plan = fleet_plan(spec, obs);
	CHECK_INT(count(plan), 1);
	const json_t *c = at(plan, "nodes", "change", 0);
	CHECK_STR(s_of(c, "name"), "h-2");
	CHECK_STR(s_of(json_object_get(c, "reconverge"), "why"),
	          "drifted from profile h200 at step 'sysctl vm.swappiness': 60");
	CHECK(json_object_get(c, "profile") == NULL);
	CHECK_INT(json_array_size(json_object_get(plan, "drain")), 0);
	json_decref(plan);
	/* a status for another profile is no reason: the new one is being sent */
	json_object_set_new(json_object_get(n, "status"), "hash", json_string("old"));
	plan = fleet_plan(spec, obs);
	CHECK_INT(count(plan), 0);
	json_decref(plan);
	json_decref(obs);
	json_decref(spec);
}

/* Node i of spec's observed cluster with the status state(i) for its
 * profile and the facts facts(i) (an H200 node of driver sim-550.127.05, CUDA
 * 12.4, 8 GPUs, by default). */
static json_t *observed_as(const json_t *spec, const char *(*state)(size_t),
                           void (*facts)(size_t, json_t *))
{
	json_t *obs = observed_of(spec, 1);
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(obs, "nodes"), i, n) {
		const char *hash =
		        json_string_value(json_object_get(json_object_get(n, "profile"), "hash"));
		json_object_set_new(n, "status",
		                    status(hash, state ? state(i) : "converged", "[]"));
		json_t *f = json_pack("{s:s,s:s,s:i,s:s}", "driver_version", "sim-550.127.05",
		                      "cuda_version", "12.4", "gpu_count", 8, "gpu_model",
		                      "nvidia h200");
		if (facts)
			facts(i, f);
		json_object_set_new(n, "facts", f);
	}
	return obs;
}

/* The text of the first issue of the k-th node in drift report d. */
static const char *first_issue(const json_t *d, size_t k)
{
	const json_t *n = json_array_get(json_object_get(d, "nodes"), k);
	return json_string_value(json_array_get(json_object_get(n, "issues"), 0));
}

static const char *second_drifted(size_t i)
{
	return i == 1 ? "drifted" : "converged";
}

static void third_on_another_driver(size_t i, json_t *f)
{
	if (i == 2)
		json_object_set_new(f, "driver_version", json_string("535.1"));
}

TEST(drift_report)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_as(spec, second_drifted, third_on_another_driver);
	json_t *d = fleet_drift(obs);
	const json_t *nodes = json_object_get(d, "nodes");
	CHECK_INT(json_array_size(nodes), 2);
	CHECK_STR(s_of(json_array_get(nodes, 0), "name"), "h-2");
	CHECK_STR(s_of(json_array_get(nodes, 0), "state"), "drifted");
	CHECK_STR(first_issue(d, 1), "driver: the profile pins 550.127.05, the node reports 535.1");
	const json_t *c = json_object_get(d, "counts");
	CHECK_INT(json_integer_value(json_object_get(c, "profiled")), 3);
	CHECK_INT(json_integer_value(json_object_get(c, "converged")), 2);
	CHECK_INT(json_integer_value(json_object_get(c, "drifted")), 1);
	CHECK_INT(json_integer_value(json_object_get(c, "mismatched")), 1);
	json_decref(d);
	json_decref(obs);
	json_decref(spec);
}

static void agents_of_two_versions(size_t i, json_t *f)
{
	static const char *const seen[] = {"0.2.1", "0.1.0"};
	if (i < 2)
		json_object_set_new(f, "agent_version", json_string(seen[i]));
}

/* A profile's agent pin is compared with the version each agent reports,
 * by the converging steps' rule: 0.2 holds 0.2.1, not 0.1.0 nor nothing. */
TEST(drift_report_compares_the_agent_version)
{
	json_t *spec = compile_edit("    sysctl:", "    agent: '0.2'\n    sysctl:");
	json_t *obs = observed_as(spec, NULL, agents_of_two_versions);
	json_t *d = fleet_drift(obs);
	const json_t *nodes = json_object_get(d, "nodes");
	CHECK_INT(json_array_size(nodes), 2);
	CHECK_STR(s_of(json_array_get(nodes, 0), "name"), "h-2");
	CHECK_STR(first_issue(d, 0), "agent: the profile pins 0.2, the node reports 0.1.0");
	CHECK_STR(s_of(json_array_get(nodes, 1), "name"), "h-3");
	CHECK_STR(first_issue(d, 1), "agent: the profile pins 0.2, the node reports none");
	json_decref(d);
	json_decref(obs);
	json_decref(spec);
}

static void first_elsewhere(size_t i, json_t *f)
{
	json_object_set_new(f, "address", json_string(i == 0 ? "10.0.0.9" : "10.0.0.1"));
}

/* An address the applied spec gives a node, against the one it reports. */
TEST(drift_report_compares_the_spec_address)
{
	json_t *spec = compile(SPEC);
	json_t *obs = observed_as(spec, NULL, first_elsewhere);
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(obs, "nodes"), i, n)
		if (i < 2)
			json_object_set_new(n, "spec_address", json_string("10.0.0.1"));
	json_t *d = fleet_drift(obs);
	CHECK_INT(json_array_size(json_object_get(d, "nodes")), 1);
	CHECK_STR(s_of(json_array_get(json_object_get(d, "nodes"), 0), "name"), "h-1");
	CHECK_STR(first_issue(d, 0), "address: the spec says 10.0.0.1, the node reports 10.0.0.9");
	json_decref(d);
	json_decref(obs);
	json_decref(spec);
}

TEST_MAIN()
