/* The fleet spec (fleet/spec.h): the YAML compiled to its normalized JSON
 * form, and every class of error found - all of them, each at the line
 * and column where it was written. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "fleet/spec.h"

static char out[32768];

static json_t *compile(const char *yaml)
{
	return fleet_compile_yaml("f.yaml", yaml, strlen(yaml), out, sizeof(out));
}

/* Compiling must fail with exactly the lines want (NULL-ended). */
static void expect_lines(const char *yaml, const char *const *want)
{
	json_t *f = compile(yaml);
	if (f) {
		char *s = json_dumps(f, JSON_COMPACT);
		json_decref(f);
		FAIL_AT("compiled, expected errors: %s", s);
	}
	char all[32768] = "";
	for (; *want; want++) {
		strcat(all, *want);
		strcat(all, "\n");
	}
	CHECK_STR(out, all);
}

/* Compiling must fail, the errors holding each needle (NULL-ended). */
static void expect_errors(const char *yaml, const char *const *needles)
{
	json_t *f = compile(yaml);
	if (f) {
		char *s = json_dumps(f, JSON_COMPACT);
		json_decref(f);
		FAIL_AT("compiled, expected errors: %s", s);
	}
	for (; *needles; needles++)
		if (!strstr(out, *needles))
			FAIL_AT("errors lack \"%s\":\n%s", *needles, out);
}

/* A small correct fleet; tests append to it or change it. */
#define HEAD                                                                                       \
	"name: small\n"                                                                            \
	"pools:\n"                                                                                 \
	"  onprem:\n"                                                                              \
	"profiles:\n"                                                                              \
	"  p:\n"                                                                                   \
	"    gpu: {model: NVIDIA H200, count: 8}\n"
#define GROUP                                                                                      \
	"groups:\n"                                                                                \
	"  g:\n"                                                                                   \
	"    pool: onprem\n"                                                                       \
	"    profile: p\n"                                                                         \
	"    nodes: n-[1-2]\n"

static const json_t *get(const json_t *o, const char *a, size_t i, const char *b)
{
	return json_object_get(json_array_get(json_object_get(o, a), i), b);
}

TEST(a_small_fleet_compiles_with_every_default)
{
	json_t *f = compile(HEAD GROUP);
	if (!f)
		FAIL_AT("errors:\n%s", out);
	CHECK_STR(json_string_value(json_object_get(f, "name")), "small");
	CHECK_STR(json_string_value(get(f, "pools", 0, "kind")), "on-prem");
	CHECK(json_is_null(get(f, "profiles", 0, "driver")));
	CHECK_INT(json_array_size(get(f, "profiles", 0, "mounts")), 0);
	CHECK_INT(json_integer_value(json_object_get(get(f, "profiles", 0, "gpu"), "count")), 8);
	CHECK_INT(json_array_size(json_object_get(f, "nodes")), 2);
	CHECK_STR(json_string_value(get(f, "nodes", 1, "name")), "n-2");
	CHECK(json_is_null(get(f, "nodes", 1, "address")));
	CHECK_STR(json_string_value(get(f, "nodes", 1, "pool")), "onprem");
	CHECK_INT(json_array_size(json_object_get(f, "queues")), 0);
	const json_t *u = json_object_get(f, "upgrade");
	CHECK_INT(json_integer_value(json_object_get(u, "max_unavailable")), 1);
	CHECK_INT(json_integer_value(json_object_get(u, "max_unavailable_per_block")), 1);
	CHECK_INT(json_integer_value(json_object_get(u, "validation_timeout_ms")), 600000);
	json_decref(f);
}

TEST(ranges_labels_topology_and_queues_compile_to_the_normal_form)
{
	json_t *f = compile(HEAD "    driver: '550.127.05'\n"
	                         "    cuda: 12\n"
	                         "    mounts: [{path: /mnt/nvme, device: /dev/md0, fs: xfs}]\n"
	                         "    cache_dir: /mnt/nvme/cache\n"
	                         "    sysctl: {vm.swappiness: 1, net.ipv4.tcp_rmem: 4096 87380 "
	                         "16777216}\n"
	                         "groups:\n"
	                         "  g:\n"
	                         "    pool: onprem\n"
	                         "    profile: p\n"
	                         "    nodes: ['h-[08-10]', extra]\n"
	                         "    addresses: ['10.0.0.[1-3]', extra.example.com]\n"
	                         "    labels: {gen: 4, ib: true}\n"
	                         "    topology: {rack: r1, block: b1}\n"
	                         "queues:\n"
	                         "  prod: {priority: 10, default_time_limit: 2h, quotas: {a: 16}}\n"
	                         "  free:\n"
	                         "teams: {a: {weight: 3}}\n");
	if (!f)
		FAIL_AT("errors:\n%s", out);
	const json_t *p = json_array_get(json_object_get(f, "profiles"), 0);
	CHECK_STR(json_string_value(json_object_get(p, "driver")), "550.127.05");
	CHECK_STR(json_string_value(json_object_get(p, "cuda")), "12");
	CHECK_STR(json_string_value(json_object_get(json_object_get(p, "sysctl"), "vm.swappiness")),
	          "1");
	CHECK_INT(json_array_size(json_object_get(f, "nodes")), 4);
	CHECK_STR(json_string_value(get(f, "nodes", 0, "name")), "h-08");
	CHECK_STR(json_string_value(get(f, "nodes", 2, "address")), "10.0.0.3");
	CHECK_STR(json_string_value(get(f, "nodes", 3, "address")), "extra.example.com");
	const json_t *l = get(f, "nodes", 0, "labels");
	CHECK_STR(json_string_value(json_object_get(l, "gen")), "4");
	CHECK_STR(json_string_value(json_object_get(l, "ib")), "true");
	CHECK_STR(json_string_value(json_object_get(l, "rack")), "r1");
	CHECK(json_object_get(l, "switch") == NULL); /* not set: no label */
	CHECK(json_is_null(json_object_get(get(f, "groups", 0, "topology"), "switch")));
	/* a queue is the body POST /v1/queues takes, every default filled in */
	const json_t *q = json_array_get(json_object_get(f, "queues"), 0);
	CHECK_INT(json_integer_value(json_object_get(q, "priority")), 10);
	CHECK_INT(json_integer_value(json_object_get(q, "weight")), 1);
	CHECK(json_is_true(json_object_get(q, "borrowing")));
	CHECK_INT(json_integer_value(json_object_get(q, "default_time_limit_ms")), 7200000);
	CHECK_INT(json_integer_value(json_object_get(q, "idle_timeout_ms")), 0);
	CHECK_INT(json_integer_value(json_object_get(json_object_get(q, "quotas"), "a")), 16);
	CHECK_STR(json_string_value(get(f, "queues", 1, "name")), "free");
	CHECK_INT(json_integer_value(get(f, "teams", 0, "weight")), 3);
	json_decref(f);
}

TEST(every_error_is_reported_in_file_order)
{
	static const char *const want[] = {
	        "f.yaml:1:7: name: 'my fleet' is not a name: 1 to 63 letters, digits, '_' or '-'",
	        "f.yaml:3:11: pools.onprem: should be a mapping, not a list",
	        "f.yaml:7:11: groups.g.pool: there is no pool 'nope' (pools: onprem)",
	        "f.yaml:8:14: groups.g.profile: there is no profile 'q' (profiles: p)",
	        "f.yaml:10:5: groups.g.colour: unknown key 'colour'",
	        "f.yaml:11:1: colour: unknown key 'colour'",
	        NULL,
	};
	expect_lines("name: my fleet\n"
	             "pools:\n"
	             "  onprem: []\n"
	             "profiles: {p: {}}\n"
	             "groups:\n"
	             "  g:\n"
	             "    pool: nope\n"
	             "    profile: q\n"
	             "    nodes: n1\n"
	             "    colour: red\n"
	             "colour: blue\n",
	             want);
}

TEST(missing_and_empty_sections)
{
	static const char *const want[] = {
	        "f.yaml:1:1: 'name' is missing",
	        "f.yaml:1:1: 'profiles' is missing",
	        "f.yaml:1:1: 'groups' is missing",
	        "f.yaml:1:8: pools: is empty: a fleet needs at least one",
	        NULL,
	};
	expect_lines("pools: {}\n", want);
	static const char *const not_a_map[] = {"f.yaml:1:1: should be a mapping, not a list",
	                                        NULL};
	expect_lines("- a\n", not_a_map);
	static const char *const empty[] = {"f.yaml:1:1: should be a mapping, not empty", NULL};
	expect_lines("", empty);
}

TEST(yaml_errors_have_their_position)
{
	CHECK(compile("name: a\nname: b\n") == NULL);
	CHECK_STR(out, "f.yaml:2:1: 'name' is given twice\n");
	CHECK(compile("pools: [\n") == NULL);
	CHECK(strncmp(out, "f.yaml:2:1: ", 12) == 0);
}

TEST(wrong_types_and_values_out_of_range)
{
	static const char *const needles[] = {
	        "f.yaml:6:38: profiles.p.gpu.count: 99 is out of range: 0 to 64",
	        "f.yaml:13:17: queues.q.priority: 5000 is out of range: -1000 to 1000",
	        "f.yaml:13:34: queues.q.borrowing: should be a boolean, not text",
	        "f.yaml:13:60: queues.q.default_time_limit: 9000h is out of range: 1s to 8784h",
	        "f.yaml:14:21: queues.r.idle_timeout: 'soon' is not a duration like 90s, 10m or 2h",
	        "f.yaml:15:31: upgrade.validation_timeout: 1s is out of range: 10s to 24h",
	        "f.yaml:16:21: teams.a.weight: should be an integer, not text",
	        NULL,
	};
	expect_errors("name: small\n"
	              "pools:\n"
	              "  onprem:\n"
	              "profiles:\n"
	              "  p:\n"
	              "    gpu: {model: NVIDIA H200, count: 99}\n" GROUP "queues:\n"
	              "  q: {priority: 5000, borrowing: 'no', default_time_limit: 9000h}\n"
	              "  r: {idle_timeout: soon}\n"
	              "upgrade: {validation_timeout: 1}\n"
	              "teams: {a: {weight: many}}\n",
	              needles);
}

TEST(node_names_and_ranges_that_are_wrong)
{
	static const char *const needles[] = {
	        "f.yaml:11:13: groups.g.nodes[0]: 'n-[1-3': a '[' is not closed with ']'",
	        "f.yaml:11:23: groups.g.nodes[1]: 'bad name' is not a node name: 1 to 63 letters, "
	        "digits, '-', '_' or '.'",
	        "f.yaml:11:33: groups.g.nodes[2]: should be text, not an integer",
	        "f.yaml:15:12: groups.h.nodes: should be a range like h200-[01-18] or a list of "
	        "them, not an empty list",
	        NULL,
	};
	expect_errors(HEAD "groups:\n"
	                   "  g:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: ['n-[1-3', bad name, 7]\n"
	                   "  h:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: []\n",
	              needles);
}

TEST(a_node_or_address_held_twice_is_an_error)
{
	static const char *const needles[] = {
	        /* within one group: two ranges that overlap */
	        "f.yaml:11:24: groups.g.nodes[1]: node 'n-3' is in this group twice (and more of "
	        "this range)",
	        /* across groups */
	        "f.yaml:15:12: groups.h.nodes: node 'n-2' is also in group 'g'",
	        NULL,
	};
	expect_errors(HEAD "groups:\n"
	                   "  g:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: ['n-[1-5]', 'n-[3-4]']\n"
	                   "  h:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: n-2\n"
	                   "    addresses: 10.0.0.5\n"
	                   "  i:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: m-[1-2]\n"
	                   "    addresses: '10.0.0.[10-11]'\n",
	              needles);
	/* overlapping address ranges, and a count that does not match */
	static const char *const needles2[] = {
	        "f.yaml:12:16: groups.g.addresses: 3 addresses for 2 nodes: give one per node, in "
	        "the nodes' order",
	        "f.yaml:17:16: groups.h.addresses: address '10.0.0.2' is also node n-2's",
	        "f.yaml:18:56: groups.i.addresses: '10.0.1.300' is not an address: an IPv4 or IPv6 "
	        "address or a host name",
	        NULL,
	};
	expect_errors(HEAD "groups:\n"
	                   "  g:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: n-[1-2]\n"
	                   "    addresses: 10.0.0.[1-3]\n"
	                   "  h:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: m-1\n"
	                   "    addresses: 10.0.0.2\n"
	                   "  i: {pool: onprem, profile: p, nodes: k-1, addresses: 10.0.1.300}\n",
	              needles2);
}

TEST(references_to_what_is_not_there)
{
	static const char *const needles[] = {
	        "groups.g.pool: 'burst' is a cloud pool: bursting makes its nodes",
	        "pools.burst.profile: there is no profile 'big' (profiles: p)",
	        "pools.burst.queues[0]: there is no queue 'prod': the spec has no queues",
	        NULL,
	};
	expect_errors("name: small\n"
	              "pools:\n"
	              "  burst: {kind: cloud, provider: aws, instance_type: p5.48xlarge,\n"
	              "          max_nodes: 4, profile: big, queues: [prod]}\n"
	              "profiles:\n"
	              "  p: {}\n"
	              "groups:\n"
	              "  g: {pool: burst, profile: p, nodes: n1}\n",
	              needles);
	static const char *const quota[] = {
	        "f.yaml:13:24: queues.q.quotas.ghosts: there is no team 'ghosts' (teams: a)",
	        "f.yaml:13:30: queues.q.quotas.a: -1 is out of range: 0 to 1e+06",
	        NULL,
	};
	expect_errors(HEAD GROUP "queues:\n"
	                         "  q: {quotas: {ghosts: 1, a: -1}}\n"
	                         "teams: {a: }\n",
	              quota);
}

TEST(pools_on_premises_and_in_the_cloud)
{
	static const char *const needles[] = {
	        "f.yaml:3:12: pools.onprem.max_nodes: only a cloud pool has 'max_nodes' (kind: "
	        "cloud)",
	        "f.yaml:4:6: pools.c: 'provider' is missing: a cloud pool says what to start",
	        "f.yaml:4:6: pools.c: 'profile' is missing",
	        "f.yaml:5:13: pools.x.kind: 'rented' is not a kind of pool: on-prem or cloud",
	        NULL,
	};
	expect_errors("name: small\n"
	              "pools:\n"
	              "  onprem: {max_nodes: 3}\n"
	              "  c: {kind: cloud, instance_type: x, max_nodes: 1}\n"
	              "  x: {kind: rented}\n"
	              "profiles:\n"
	              "  p: {}\n" GROUP,
	              needles);
	json_t *f = compile("name: small\n"
	                    "pools:\n"
	                    "  onprem:\n"
	                    "  c: {kind: cloud, provider: gcp, instance_type: a3-highgpu-8g,\n"
	                    "      max_nodes: 2, profile: p}\n"
	                    "profiles:\n"
	                    "  p: {}\n" GROUP "queues: {a: , b: }\n");
	if (!f)
		FAIL_AT("errors:\n%s", out);
	const json_t *c = json_array_get(json_object_get(f, "pools"), 1);
	CHECK_INT(json_integer_value(json_object_get(c, "max_nodes")), 2);
	CHECK(json_is_null(json_object_get(c, "region")));
	CHECK_INT(json_array_size(json_object_get(c, "queues")), 2); /* every queue by default */
	json_decref(f);
}

TEST(profile_versions_paths_mounts_sysctl_and_packages)
{
	static const char *const needles[] = {
	        "profiles.p.driver: was read as the number 550.5: write a version in quotes "
	        "('12.10'), "
	        "or 12.10 becomes 12.1",
	        "profiles.p.cuda: 'twelve' is not a version: numbers and dots, like 550.54.15 or "
	        "12.4",
	        "profiles.p.agent: 'v1' is not a version: a number first",
	        "profiles.p.mounts[0].path: 'mnt/nvme' is not an absolute path",
	        "profiles.p.mounts[0].options[0]: 'noatime,nodiscard' is not one mount option",
	        "profiles.p.mounts[2].path: '/data' is mounted twice in this profile",
	        "profiles.p.mounts[1]: 'device' is missing",
	        "profiles.p.mounts[1].fs: 'X FS' is not a file system type like xfs or ext4",
	        "profiles.p.cache_dir: '/mnt/nvme0/cache' is on none of this profile's mounts (the "
	        "first is mnt/nvme)",
	        "profiles.p.sysctl.swappiness: 'swappiness' is not a sysctl name like "
	        "vm.swappiness",
	        "profiles.p.sysctl[\"vm.dirty_ratio\"]: vm.dirty_ratio should be an integer or one "
	        "line of text, not a boolean",
	        "profiles.p.packages[1]: package 'rdma-core' is listed twice",
	        "profiles.p.packages[2]: 'Bad_Pkg' is not a Debian package",
	        "profiles.p.gpu: 'model' is missing: the GPU model every node must show",
	        NULL,
	};
	expect_errors("name: small\n"
	              "pools: {onprem: }\n"
	              "profiles:\n"
	              "  p:\n"
	              "    gpu: {count: 4}\n"
	              "    driver: 550.5\n"
	              "    cuda: twelve\n"
	              "    agent: v1\n"
	              "    mounts:\n"
	              "      - {path: mnt/nvme, device: /dev/md0, fs: xfs, options: "
	              "['noatime,nodiscard']}\n"
	              "      - {path: /data, fs: X FS}\n"
	              "      - {path: /data, device: /dev/sdb, fs: ext4}\n"
	              "    cache_dir: /mnt/nvme0/cache\n"
	              "    sysctl: {swappiness: 1, vm.dirty_ratio: true}\n"
	              "    packages: [rdma-core, rdma-core=1.2, Bad_Pkg]\n" GROUP,
	              needles);
}

TEST(labels_and_topology)
{
	static const char *const needles[] = {
	        "groups.g.labels.rack: 'rack' is topology: set it under the group's topology",
	        "groups.g.labels.k: should be text, an integer or a boolean, not a list",
	        "groups.g.topology.block: is empty: name the block, or leave the key out",
	        "groups.g.topology.row: unknown key 'row'",
	        NULL,
	};
	expect_errors(HEAD "groups:\n"
	                   "  g:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: n1\n"
	                   "    labels: {rack: r1, k: [1]}\n"
	                   "    topology: {block: '', row: 3}\n",
	              needles);
	static const char *const many[] = {
	        "f.yaml:9:5: groups.g: its labels and topology give each node 9 labels; at most 8",
	        NULL,
	};
	expect_errors(HEAD "groups:\n"
	                   "  g:\n"
	                   "    pool: onprem\n"
	                   "    profile: p\n"
	                   "    nodes: n1\n"
	                   "    labels: {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6}\n"
	                   "    topology: {rack: r, switch: s, block: b}\n",
	              many);
}

TEST(upgrade_policy_bounds)
{
	static const char *const needles[] = {
	        "f.yaml:12:58: upgrade.max_unavailable_per_block: 3 is more than max_unavailable "
	        "(2), which bounds the whole fleet",
	        NULL,
	};
	expect_errors(HEAD GROUP "upgrade: {max_unavailable: 2, max_unavailable_per_block: 3}\n",
	              needles);
	static const char *const unknown[] = {
	        "f.yaml:12:11: upgrade.max_unavailabel: unknown key 'max_unavailabel'",
	        NULL,
	};
	expect_errors(HEAD GROUP "upgrade: {max_unavailabel: 2}\n", unknown);
}

TEST(the_whole_fleet_is_bounded)
{
	static const char *const needles[] = {
	        "groups.b.nodes: brings the fleet to 12000 nodes; at most 10000",
	        NULL,
	};
	expect_errors(HEAD "groups:\n"
	                   "  a: {pool: onprem, profile: p, nodes: 'a[1-6000]'}\n"
	                   "  b: {pool: onprem, profile: p, nodes: 'b[1-6000]'}\n",
	              needles);
	static const char *const one[] = {
	        "groups.a.nodes: 'a[1-20000]': more than 10000 names",
	        NULL,
	};
	expect_errors(HEAD "groups:\n"
	                   "  a: {pool: onprem, profile: p, nodes: 'a[1-20000]'}\n",
	              one);
}

TEST(errors_past_the_cap_are_counted)
{
	char yaml[16384] = HEAD "groups:\n";
	for (int i = 0; i < 120; i++) {
		size_t n = strlen(yaml);
		snprintf(yaml + n, sizeof(yaml) - n,
		         "  g%d: {pool: nope, profile: p, nodes: n%d}\n", i, i);
	}
	CHECK(compile(yaml) == NULL);
	CHECK_CONTAINS(out, "f.yaml: 20 more errors not shown\n");
}

TEST_MAIN()
