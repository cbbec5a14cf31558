/* The fleet in the server's state (server/fleet.h), driven as the API and
 * the agents drive it, without HTTP: an apply sends each node its profile in
 * its sync answer; a node is held from new work until its agent reports it
 * converged and its node check passed; a profile change that needs a drain
 * rolls out node by node (cordon, drain, send, converge, check, uncordon),
 * paced by the policy, stopped by the first failure, leaving hand-cordoned
 * nodes cordoned; a restart carries a rollout on; queues, teams, labels and
 * pools as the spec says; removal, rejoin, idempotence, saved plans and
 * rollbacks. A node without a profile is unaffected. */
#include "base/err.h"
#include "base/ydoc.h"
#include "fleet/plan.h"
#include "server/fleet.h"
#include "state_fixture.h"

/* Four nodes, two per block, each a profile with a driver pinned. */
#define SPEC_HEAD                                                                                  \
	"name: t\n"                                                                                \
	"pools: {onprem: , spare: }\n"                                                             \
	"profiles:\n"                                                                              \
	"  p:\n"                                                                                   \
	"    gpu: {model: NVIDIA H200, count: 4}\n"
#define SPEC_GROUPS                                                                                \
	"groups:\n"                                                                                \
	"  a: {pool: onprem, profile: p, nodes: 'node-[1-2]', labels: {gpu: h200},"                \
	" topology: {block: a}}\n"                                                                 \
	"  b: {pool: onprem, profile: p, nodes: 'node-[3-4]', labels: {gpu: h200},"                \
	" topology: {block: b}}\n"                                                                 \
	"queues:\n"                                                                                \
	"  prod: {priority: 10, quotas: {search: 8}}\n"                                            \
	"teams:\n"                                                                                 \
	"  search: {weight: 2}\n"
#define POLICY(max, block)                                                                         \
	"upgrade: {max_unavailable: " #max ", max_unavailable_per_block: " #block                  \
	", validation_timeout: 10s}\n"

#define V1 SPEC_HEAD "    driver: '550.1'\n" SPEC_GROUPS POLICY(2, 1)
#define V2 SPEC_HEAD "    driver: '560.2'\n" SPEC_GROUPS POLICY(2, 1)

/* The spec text as the YAML reads (what the CLI sends as "spec"). */
static json_t *source(const char *yaml)
{
	struct ydoc doc;
	char err[256];
	if (ydoc_parse(yaml, strlen(yaml), &doc, err, sizeof(err)))
		FAIL_AT("bad YAML: %s", err);
	json_t *root = json_incref(doc.root);
	ydoc_free(&doc);
	return root;
}

/* POST /v1/fleet/apply {"spec": yaml, "who"}; the answer. */
static json_t *apply(struct sfx *f, const char *yaml)
{
	json_t *body = json_pack("{s:o,s:s}", "spec", source(yaml), "who", "tester");
	json_t *out = NULL;
	char err[4096] = "";
	int rc = fleet_apply(&f->st, body, &out, err, sizeof(err));
	json_decref(body);
	if (rc)
		FAIL_AT("apply: %s", err);
	sfx_flush(f);
	return out;
}

static int64_t apply_rev(struct sfx *f, const char *yaml)
{
	json_t *out = apply(f, yaml);
	int64_t rev = jv_int(out, "revision", 0);
	json_decref(out);
	return rev;
}

/* A housekeeping tick: the rollout's step (forced), then a cycle. */
static void step_at(struct sfx *f, int64_t now)
{
	fleet_step(&f->st, now, 1);
	state_settle(&f->st);
	sfx_flush(f);
}

static void step(struct sfx *f)
{
	step_at(f, wall_ms());
}

static const char *hash_of(struct sfx *f, int node)
{
	const json_t *p = sfx_node(f, node)->profile;
	CHECK(p != NULL);
	return jv_str(p, "hash", "");
}

/* The node's agent reports on its current profile. */
static void report(struct sfx *f, int node, const char *state, const char *failed_step)
{
	json_t *steps = json_pack(
	        "[{s:s,s:s},{s:s,s:s}]", "name", "driver 550.1", "status", "ok", "name",
	        "mount /mnt/nvme", "status",
	        failed_step ? "failed" : (strcmp(state, "converged") == 0 ? "ok" : "skipped"));
	if (failed_step)
		json_object_set_new(json_array_get(steps, 1), "detail", json_string(failed_step));
	json_t *s = json_pack("{s:s,s:s,s:o,s:I}", "hash", hash_of(f, node), "state", state,
	                      "steps", steps, "time_ms", (json_int_t)wall_ms());
	char err[256] = "";
	if (wire_check(s, &wire_profile_status, err, sizeof(err)))
		FAIL_AT("profile_status: %s", err);
	state_node_profile_status(&f->st, sfx_node(f, node), s);
	json_decref(s);
	state_settle(&f->st);
	sfx_flush(f);
}

/* The server's checker takes the next check: it must be node's; the agent
 * answers ok or not. */
static void check(struct sfx *f, int node, int ok)
{
	int64_t id = 0;
	char hash[72];
	json_t *expect = NULL;
	CHECK_INT(state_node_next_check(&f->st, wall_ms(), &id, hash, sizeof(hash), &expect), 0);
	CHECK_INT(id, node + 1);
	CHECK_INT(jv_int(expect, "gpus", -1), 4);
	CHECK_STR(jv_str(expect, "gpu_model", ""), "NVIDIA H200");
	json_decref(expect);
	state_node_checked(&f->st, id, hash, ok, ok ? "9 checks, 0 failed" : "gpu2.health: lost",
	                   1);
	state_settle(&f->st);
	sfx_flush(f);
}

static void no_check_waiting(struct sfx *f)
{
	int64_t id = 0;
	char hash[72];
	json_t *expect = NULL;
	CHECK_INT(state_node_next_check(&f->st, wall_ms(), &id, hash, sizeof(hash), &expect),
	          ERR_NOTFOUND);
}

/* Converged and checked: in service. */
static void converge(struct sfx *f, int node)
{
	report(f, node, "converged", NULL);
	check(f, node, 1);
}

static const char *shown(struct sfx *f, int node)
{
	return node_shown_state(sfx_node(f, node));
}

/* The running (or last) rollout, as GET /v1/fleet/status shows it. */
static json_t *rollout(struct sfx *f)
{
	json_t *s = fleet_status(&f->st);
	json_t *r = json_incref(json_object_get(s, "rollout"));
	json_decref(s);
	return r;
}

static const char *phase(const json_t *ro, int node)
{
	char name[32];
	snprintf(name, sizeof(name), "node-%d", node + 1);
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(ro, "nodes"), i, e)
		if (strcmp(jv_str(e, "name", ""), name) == 0)
			return jv_str(e, "phase", "?");
	return "absent";
}

/* Phase of node in the rollout now (a copy that lives until the next). */
static const char *phase_now(struct sfx *f, int node)
{
	static char out[32];
	json_t *ro = rollout(f);
	snprintf(out, sizeof(out), "%s", phase(ro, node));
	json_decref(ro);
	return out;
}

/* Profiles without a drain: sent at once; held until converged and checked. */
#define NODRAIN SPEC_HEAD "    sysctl: {vm.swappiness: 1}\n" SPEC_GROUPS POLICY(1, 1)

TEST(apply_sends_the_profile_and_holds_until_converged)
{
	struct sfx *f = sfx_open(2, 4);
	json_t *out = apply(f, NODRAIN);
	CHECK_INT(jv_int(out, "revision", 0), 1);
	CHECK(json_is_null(json_object_get(out, "rollout")));
	json_decref(out);
	/* the sync answer carries it, hashed as the protocol says */
	json_t *d = sfx_desired(f, 0);
	const json_t *p = json_object_get(d, "profile");
	char err[256] = "", hex[FLEET_HASH_LEN + 1];
	CHECK_INT(wire_check(p, &wire_profile, err, sizeof(err)), 0);
	CHECK_STR(jv_str(p, "name", ""), "p");
	fleet_profile_hash(json_object_get(p, "spec"), hex);
	CHECK_STR(jv_str(p, "hash", ""), hex);
	CHECK_STR(
	        jv_str(json_object_get(json_object_get(p, "spec"), "sysctl"), "vm.swappiness", ""),
	        "1");
	json_decref(d);
	/* held: no work until converged and checked */
	CHECK_STR(shown(f, 0), "converging");
	CHECK(!node_takes_work(sfx_node(f, 0)));
	struct job *j = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 4}");
	CHECK_INT(j->state, JOB_PENDING);
	report(f, 0, "converging", NULL);
	CHECK_STR(sfx_node(f, 0)->hold, "converging to profile p (step 2 of 2)");
	no_check_waiting(f);
	report(f, 0, "converged", NULL);
	CHECK_STR(sfx_node(f, 0)->hold, "profile p converged; waiting for the node check");
	CHECK_INT(j->state, JOB_PENDING);
	check(f, 0, 1);
	CHECK_STR(shown(f, 0), "ready");
	CHECK_INT(j->state, JOB_SCHEDULED); /* the hold lifted: a cycle placed it */
	CHECK_INT(j->attempts[0]->ranks[0].node_id, 1);
	CHECK_STR(sfx_node(f, 0)->pool, "onprem");
	CHECK_STR(jv_str(sfx_node(f, 0)->labels, "block", ""), "a");
	CHECK_INT(sfx_events(f, "node.profile", 0, "converged and checked: in service"), 1);
	sfx_close(f);
}

TEST(failures_hold_with_their_reason)
{
	struct sfx *f = sfx_open(1, 4);
	json_decref(apply(f, NODRAIN));
	report(f, 0, "failed", "mount: wrong fs type");
	CHECK_STR(shown(f, 0), "held");
	json_t *o = state_node_json(&f->st, sfx_node(f, 0), 1);
	CHECK_STR(jv_str(o, "reason", ""),
	          "profile p failed at step 'mount /mnt/nvme': mount: wrong fs type");
	CHECK_STR(jv_str(json_object_get(o, "profile_status"), "state", ""), "failed");
	CHECK_INT(json_array_size(json_object_get(json_object_get(o, "profile_status"), "steps")),
	          2);
	CHECK_STR(jv_str(json_object_get(o, "profile"), "name", ""), "p");
	json_decref(o);
	report(f, 0, "converged", NULL);
	check(f, 0, 0); /* the check fails: held, retried later */
	CHECK_STR(shown(f, 0), "held");
	CHECK_STR(sfx_node(f, 0)->hold, "profile p: node check failed: gpu2.health: lost");
	no_check_waiting(f); /* not before NODES_CHECK_RETRY_MS */
	sfx_node(f, 0)->check_after_ms = 0;
	check(f, 0, 1);
	CHECK_STR(shown(f, 0), "ready");
	report(f, 0, "drifted", "mounted elsewhere");
	CHECK_STR(shown(f, 0), "held");
	CHECK_CONTAINS(sfx_node(f, 0)->hold, "drifted from profile p at step 'mount /mnt/nvme'");
	sfx_close(f);
}

TEST(nodes_without_a_profile_are_unaffected)
{
	struct sfx *f = sfx_open(1, 4);
	json_t *d = sfx_desired(f, 0);
	CHECK(json_object_get(d, "profile") == NULL);
	json_decref(d);
	CHECK(node_takes_work(sfx_node(f, 0)));
	CHECK_STR(shown(f, 0), "ready");
	struct job *j = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 4}");
	CHECK_INT(j->state, JOB_SCHEDULED);
	no_check_waiting(f);
	json_t *s = fleet_status(&f->st);
	CHECK(json_is_null(json_object_get(s, "revision")));
	json_decref(s);
	sfx_close(f);
}

/* The first apply to joined nodes with work: each node's first profile
 * pins a driver, so all four roll out, two at a time, one per block; a
 * checkpointing job on node-1 is requeued by its drain, and runs on a node
 * still in service meanwhile. */
TEST(rolling_upgrade_drains_converges_validates_uncordons)
{
	struct sfx *f = sfx_open(4, 4);
	struct job *j = sfx_submit_running(
	        f, "{\"command\": [\"train\"], \"gpus\": 4, \"checkpointing\": true}");
	CHECK_INT(sfx_node_of(sfx_attempt(j), 0), 0);
	json_t *out = apply(f, V1);
	const json_t *ro = json_object_get(out, "rollout");
	CHECK_INT(jv_int(ro, "total", 0), 4);
	CHECK_STR(jv_str(ro, "state", ""), "running");
	json_decref(out);
	CHECK(sfx_node(f, 0)->profile == NULL); /* not before its turn */
	step(f);
	/* node-1 (block a) and node-3 (block b) go out; node-3, idle, at once */
	CHECK_STR(phase_now(f, 0), "draining");
	CHECK_STR(phase_now(f, 2), "converging");
	CHECK_STR(phase_now(f, 1), "queued");
	CHECK_STR(shown(f, 0), "draining");
	CHECK_CONTAINS(sfx_node(f, 0)->admin_reason,
	               "rollout of revision 1: upgrading to profile p");
	CHECK(sfx_node(f, 2)->profile != NULL);
	CHECK(sfx_node(f, 0)->profile == NULL); /* still draining */
	/* the job's rank is stopped, the job requeued, and placed on a node
	 * that has not had its turn, node-2: every node in service is one the
	 * rollout will drain, and work runs where it can rather than wait */
	sfx_one_stopped(f, 0);
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_INT(j->nattempts, 2);
	CHECK_INT(sfx_node_of(sfx_attempt(j), 0), 1);
	sfx_start_all(f);
	step(f);
	CHECK_STR(phase_now(f, 0), "converging");
	CHECK(sfx_node(f, 0)->profile != NULL);
	json_t *d = sfx_desired(f, 0);
	CHECK(json_object_get(d, "profile") != NULL);
	json_decref(d);
	report(f, 0, "converged", NULL);
	report(f, 2, "converging", NULL);
	step(f);
	CHECK_STR(phase_now(f, 0), "validating");
	CHECK_STR(phase_now(f, 2), "converging");
	check(f, 0, 1);
	step(f);
	CHECK_STR(phase_now(f, 0), "done");
	CHECK_STR(shown(f, 0), "ready"); /* uncordoned */
	CHECK_STR(sfx_node(f, 0)->admin_reason, "");
	CHECK_STR(phase_now(f, 1), "draining"); /* block a's next: node-2, the job's */
	sfx_one_stopped(f, 1);
	CHECK_INT(j->nattempts, 3);
	CHECK_INT(sfx_node_of(sfx_attempt(j), 0), 0); /* back on the upgraded node */
	sfx_start_all(f);
	converge(f, 2);
	step(f);
	CHECK_STR(phase_now(f, 1), "converging");
	CHECK_STR(phase_now(f, 3), "converging");
	converge(f, 1);
	converge(f, 3);
	step(f);
	json_t *r = rollout(f);
	CHECK_STR(jv_str(r, "state", ""), "done");
	CHECK_INT(jv_int(r, "done", 0), 4);
	json_decref(r);
	json_t *rev = fleet_revision(&f->st, 1);
	CHECK_STR(jv_str(rev, "result", ""), "rolled out to 4 node(s)");
	CHECK_STR(jv_str(rev, "who", ""), "tester");
	json_decref(rev);
	for (int i = 0; i < 4; i++)
		CHECK_STR(shown(f, i), "ready");
	CHECK_INT(j->state, JOB_RUNNING);
	sfx_close(f);
}

/* max_unavailable 1: a node cordoned by hand starts without counting and
 * stays cordoned; the first node that fails validation stops the rollout
 * and stays cordoned with the reason; nothing else starts. */
TEST(rollout_stops_at_first_failure_and_leaves_hand_cordons)
{
	struct sfx *f = sfx_open(4, 4);
	sfx_set_admin(f, 1, NODE_CORDONED, "bad fan");
	const char *v = SPEC_HEAD "    driver: '550.1'\n" SPEC_GROUPS POLICY(1, 1);
	json_decref(apply(f, v));
	step(f);
	CHECK_STR(phase_now(f, 0), "converging");
	CHECK_STR(phase_now(f, 1), "converging"); /* out already: costs nothing */
	CHECK_STR(phase_now(f, 2), "queued");
	converge(f, 0);
	step(f);
	CHECK_STR(phase_now(f, 0), "done");
	converge(f, 1);
	step(f);
	CHECK_STR(phase_now(f, 1), "done");
	CHECK_STR(shown(f, 1), "cordoned");
	CHECK_STR(sfx_node(f, 1)->admin_reason, "bad fan");
	CHECK_STR(phase_now(f, 2), "converging");
	report(f, 2, "converged", NULL);
	step(f);
	check(f, 2, 0);
	step(f);
	CHECK_STR(phase_now(f, 2), "validating"); /* retried until the timeout */
	step_at(f, wall_ms() + 11000);
	json_t *ro = rollout(f);
	CHECK_STR(jv_str(ro, "state", ""), "stopped");
	CHECK_CONTAINS(jv_str(ro, "reason", ""), "node node-3: no node check passed within 10s");
	CHECK_STR(phase(ro, 2), "failed");
	CHECK_STR(phase(ro, 3), "queued");
	json_decref(ro);
	CHECK_STR(shown(f, 2), "cordoned");
	CHECK_CONTAINS(sfx_node(f, 2)->admin_reason,
	               "rollout of revision 1 stopped here: no node check passed within 10s: "
	               "gpu2.health: lost");
	CHECK(sfx_node(f, 3)->profile == NULL);
	step(f);
	CHECK_STR(phase_now(f, 3), "queued");
	sfx_close(f);
}

/* V2 fails on node-1: the rollout stops there, node-2 keeps V1 and stays in
 * service; a rollback to revision 1 takes node-1 back to V1, and back to
 * service, as it was before the failed rollout took it. */
TEST(profile_failure_stops_the_rollout_and_a_rollback_repairs)
{
	struct sfx *f = sfx_open(2, 4);
	CHECK_INT(apply_rev(f, V1), 1);
	step(f);
	converge(f, 0);
	step(f);
	converge(f, 1);
	step(f);
	char v1[72];
	snprintf(v1, sizeof(v1), "%s", hash_of(f, 1));
	CHECK_INT(apply_rev(f, V2), 2);
	step(f);
	CHECK_STR(phase_now(f, 0), "converging");
	CHECK_STR(phase_now(f, 1), "queued"); /* one per block */
	report(f, 0, "failed", "E: package not found");
	step(f);
	json_t *ro = rollout(f);
	CHECK_STR(jv_str(ro, "state", ""), "stopped");
	json_decref(ro);
	CHECK_STR(shown(f, 0), "cordoned");
	CHECK_CONTAINS(sfx_node(f, 0)->admin_reason,
	               "stopped here: profile p failed at step 'mount /mnt/nvme': E: package");
	CHECK_STR(phase_now(f, 1), "queued");
	CHECK_STR(hash_of(f, 1), v1);
	CHECK_STR(shown(f, 1), "ready");
	json_t *rev = fleet_revision(&f->st, 2);
	CHECK_CONTAINS(jv_str(rev, "result", ""), "rollout stopped: node node-1: profile p failed");
	json_decref(rev);
	json_t *body = json_pack("{s:I}", "revision", (json_int_t)1);
	json_t *out = NULL;
	char err[1024];
	CHECK_INT(fleet_rollback(&f->st, body, &out, err, sizeof(err)), 0);
	CHECK_INT(jv_int(out, "revision", 0), 3);
	CHECK_INT(jv_int(json_object_get(out, "rollout"), "total", 0), 1); /* node-1 only */
	json_decref(out);
	json_decref(body);
	step(f);
	CHECK_STR(phase_now(f, 0), "converging");
	CHECK_STR(hash_of(f, 0), v1);
	converge(f, 0);
	step(f);
	CHECK_STR(shown(f, 0), "ready");
	CHECK_STR(sfx_node(f, 0)->admin_reason, "");
	sfx_close(f);
}

/* An operator who uncordons a node while the rollout drains it takes it out
 * of the rollout: it stops there, and the node stays as the operator left
 * it, with its old profile. */
TEST(an_operator_taking_a_draining_node_back_stops_the_rollout)
{
	struct sfx *f = sfx_open(2, 4);
	sfx_submit_running(f, "{\"command\": [\"x\"], \"gpus\": 4, \"checkpointing\": true}");
	json_decref(apply(f, SPEC_HEAD "    driver: '550.1'\n" SPEC_GROUPS POLICY(1, 1)));
	step(f);
	CHECK_STR(phase_now(f, 0), "draining");
	sfx_set_admin(f, 0, NODE_READY, "");
	step(f);
	json_t *ro = rollout(f);
	CHECK_STR(jv_str(ro, "state", ""), "stopped");
	CHECK_CONTAINS(jv_str(ro, "reason", ""), "an operator made it ready while it drained");
	json_decref(ro);
	CHECK_STR(shown(f, 0), "ready");
	CHECK(sfx_node(f, 0)->profile == NULL);
	sfx_close(f);
}

/* The converge requests the checker threads take, as (node, hash). */
static int next_converge(struct sfx *f)
{
	int64_t id = 0;
	char hash[72];
	if (state_node_next_converge(&f->st, &id, hash, sizeof(hash)))
		return -1;
	CHECK_STR(hash, hash_of(f, (int)id - 1));
	return (int)id - 1;
}

/* A drifted node keeps its profile: the plan asks its agent to converge
 * again (it never does by itself), and it is back in service once it did. */
TEST(an_apply_asks_a_drifted_node_to_converge_again)
{
	struct sfx *f = sfx_open(2, 4);
	CHECK_INT(apply_rev(f, NODRAIN), 1);
	converge(f, 0);
	converge(f, 1);
	report(f, 1, "drifted", "vm.swappiness is 60");
	CHECK_STR(shown(f, 1), "held");
	CHECK_INT(next_converge(f), -1);
	json_t *out = apply(f, NODRAIN);
	CHECK_INT(jv_int(out, "revision", 0), 2);
	const json_t *c = json_array_get(
	        json_object_get(json_object_get(json_object_get(out, "plan"), "nodes"), "change"),
	        0);
	CHECK_STR(jv_str(c, "name", ""), "node-2");
	CHECK_CONTAINS(jv_str(json_object_get(c, "reconverge"), "why", ""),
	               "drifted from profile p at step 'mount /mnt/nvme'");
	json_decref(out);
	CHECK_INT(next_converge(f), 1);
	CHECK_INT(next_converge(f), -1); /* asked once */
	report(f, 1, "converging", NULL);
	report(f, 1, "converged", NULL);
	CHECK_STR(shown(f, 1), "ready"); /* its check passed for this profile already */
	sfx_close(f);
}

/* A node removed and named again gets the profile it had: its agent's last
 * word on it is stale, so it is asked to converge again, and the rollout
 * waits for a fresh report. */
TEST(a_node_back_in_the_spec_converges_afresh)
{
	struct sfx *f = sfx_open(2, 4);
	const char *both = SPEC_HEAD "    driver: '550.1'\n" SPEC_GROUPS POLICY(2, 2);
	CHECK_INT(apply_rev(f, both), 1);
	step(f);
	converge(f, 0);
	converge(f, 1);
	step(f);
	CHECK_STR(shown(f, 1), "ready");
	const char *one = SPEC_HEAD "    driver: '550.1'\n"
	                            "groups:\n"
	                            "  a: {pool: onprem, profile: p, nodes: node-1, labels: {gpu: "
	                            "h200}, topology: {block: a}}\n"
	                            "queues:\n"
	                            "  prod: {priority: 10, quotas: {search: 8}}\n"
	                            "teams:\n"
	                            "  search: {weight: 2}\n" POLICY(2, 2);
	CHECK_INT(apply_rev(f, one), 2);
	CHECK_STR(shown(f, 1), "drained");
	CHECK_INT(apply_rev(f, both), 3); /* back: its first profile again, rolled out */
	step(f);
	CHECK_STR(phase_now(f, 1), "converging");
	CHECK_INT(next_converge(f), 1);
	step(f);
	CHECK_STR(phase_now(f, 1), "converging"); /* its old "converged" is no answer */
	report(f, 1, "converging", NULL);
	report(f, 1, "converged", NULL);
	step(f);
	check(f, 1, 1);
	step(f);
	CHECK_STR(phase_now(f, 1), "done");
	CHECK_STR(shown(f, 1), "ready");
	sfx_close(f);
}

/* Three nodes in one block: node-1 and node-2 of group a, whose driver
 * changes, and node-3 of group c, whose profile does not. */
#define SPEC_AC(driver)                                                                            \
	SPEC_HEAD "    sysctl: {vm.swappiness: 1}\n" driver "  q:\n"                               \
	          "    gpu: {model: NVIDIA H200, count: 4}\n"                                      \
	          "groups:\n"                                                                      \
	          "  a: {pool: onprem, profile: p, nodes: 'node-[1-2]', topology: {block: a}}\n"   \
	          "  c: {pool: onprem, profile: q, nodes: node-3, topology: {block: a}}\n" POLICY( \
	                  1, 1)

/* Work a rollout drains off one node goes to a node the rollout will not
 * touch, not to the next one it drains (where it would be stopped again),
 * while that node has room; the nodes still to drain are marked as such
 * only while the rollout has them queued. */
TEST(drained_work_goes_where_the_rollout_will_not_drain_it_again)
{
	struct sfx *f = sfx_open(3, 4);
	json_decref(apply(f, SPEC_AC("")));
	for (int i = 0; i < 3; i++)
		converge(f, i);
	/* on node-1 (ties go to the first node), checkpointing */
	struct job *j = sfx_submit_running(
	        f, "{\"command\": [\"train\"], \"gpus\": 4, \"checkpointing\": true}");
	CHECK_INT(sfx_node_of(sfx_attempt(j), 0), 0);
	json_t *out = apply(f, SPEC_AC("    driver: '560.2'\n"));
	CHECK_INT(jv_int(json_object_get(out, "rollout"), "total", 0), 2);
	json_decref(out);
	CHECK(sfx_node(f, 0)->rollout_queued && sfx_node(f, 1)->rollout_queued);
	CHECK(!sfx_node(f, 2)->rollout_queued);
	step(f);
	CHECK_STR(phase_now(f, 0), "draining");
	CHECK_STR(phase_now(f, 1), "queued");
	CHECK(!sfx_node(f, 0)->rollout_queued && sfx_node(f, 1)->rollout_queued);
	/* requeued: node-2 and node-3 are both free; node-2 is next to drain */
	sfx_one_stopped(f, 0);
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_INT(j->nattempts, 2);
	CHECK_INT(sfx_node_of(sfx_attempt(j), 0), 2);
	sfx_start_all(f);
	/* a second such job has no room left but node-2's: it runs there */
	struct job *k = sfx_submit_running(f, "{\"command\": [\"x\"], \"gpus\": 4}");
	CHECK_INT(sfx_node_of(sfx_attempt(k), 0), 1);
	step(f);
	converge(f, 0);
	step(f);
	CHECK_STR(phase_now(f, 0), "done");
	CHECK_STR(phase_now(f, 1), "draining");
	sfx_one_stopped(f, 1); /* k's, requeued: node-1 is done and free */
	CHECK_INT(sfx_node_of(sfx_attempt(k), 0), 0);
	sfx_start_all(f);
	step(f);
	converge(f, 1);
	step(f);
	json_t *ro = rollout(f);
	CHECK_STR(jv_str(ro, "state", ""), "done");
	json_decref(ro);
	for (int i = 0; i < 3; i++)
		CHECK(!sfx_node(f, i)->rollout_queued);
	/* the requeued job was stopped once: by node-1's turn alone */
	CHECK_INT(j->nattempts, 2);
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK_INT(sfx_node_of(sfx_attempt(j), 0), 2);
	sfx_close(f);
}

/* A stopped rollout leaves the nodes it did not start in service, as they
 * were: no longer a last resort for new work; a restart marks a running
 * rollout's queued nodes again. */
TEST(rollout_marks_end_with_it_and_survive_a_restart)
{
	struct sfx *f = sfx_open(3, 4);
	json_decref(apply(f, SPEC_AC("")));
	for (int i = 0; i < 3; i++)
		converge(f, i);
	json_decref(apply(f, SPEC_AC("    driver: '560.2'\n")));
	step(f);
	CHECK(sfx_node(f, 1)->rollout_queued);
	sfx_restart(f);
	CHECK(!sfx_node(f, 0)->rollout_queued && sfx_node(f, 1)->rollout_queued);
	CHECK(!sfx_node(f, 2)->rollout_queued);
	json_t *body = json_pack("{s:s}", "who", "tester"), *stopped = NULL;
	char err[256] = "";
	CHECK_INT(fleet_stop(&f->st, body, &stopped, err, sizeof(err)), 0);
	json_decref(stopped);
	json_decref(body);
	for (int i = 0; i < 3; i++)
		CHECK(!sfx_node(f, i)->rollout_queued);
	sfx_close(f);
}

TEST(restart_continues_the_rollout)
{
	struct sfx *f = sfx_open(2, 4);
	json_decref(apply(f, SPEC_HEAD "    driver: '550.1'\n" SPEC_GROUPS POLICY(1, 1)));
	step(f);
	CHECK_STR(phase_now(f, 0), "converging");
	report(f, 0, "converged", NULL);
	step(f);
	CHECK_STR(phase_now(f, 0), "validating");
	sfx_restart(f);
	CHECK_STR(phase_now(f, 0), "validating");
	CHECK_STR(shown(f, 0), "drained");
	CHECK(sfx_node(f, 0)->profile != NULL);
	check(f, 0, 1); /* the check in flight was lost: it is asked again */
	step(f);
	CHECK_STR(phase_now(f, 0), "done");
	CHECK_STR(phase_now(f, 1), "converging");
	sfx_restart(f);
	converge(f, 1);
	step(f);
	json_t *ro = rollout(f);
	CHECK_STR(jv_str(ro, "state", ""), "done");
	json_decref(ro);
	CHECK_STR(shown(f, 1), "ready");
	sfx_close(f);
}

TEST(apply_is_idempotent_and_sets_queues_teams_labels)
{
	struct sfx *f = sfx_open(4, 4);
	json_t *old = json_pack("{s:s}", "old", "x");
	state_node_relabel(&f->st, sfx_node(f, 0), old, "spare", 1);
	json_decref(old);
	CHECK_INT(apply_rev(f, NODRAIN), 1);
	CHECK_INT(state_queue(&f->st, "prod")->priority, 10);
	CHECK_INT(state_queue(&f->st, "prod")->quotas[0].nominal_gpus, 8);
	CHECK_INT(state_team(&f->st, "search", 0)->weight, 2);
	CHECK_STR(sfx_node(f, 0)->pool, "onprem");
	CHECK(json_object_get(sfx_node(f, 0)->labels, "old") == NULL); /* the spec owns them */
	CHECK_STR(jv_str(sfx_node(f, 0)->labels, "gpu", ""), "h200");
	json_t *out = apply(f, NODRAIN);
	CHECK(json_is_null(json_object_get(out, "revision")));
	CHECK_STR(jv_str(out, "message", ""), "no changes: the cluster already matches this spec");
	json_decref(out);
	json_t *revs = fleet_revisions(&f->st, 10);
	CHECK_INT(json_array_size(revs), 1);
	json_decref(revs);
	/* a quota changed by hand is put back */
	json_t *q = json_pack("{s:s,s:{s:i}}", "name", "prod", "quotas", "search", 2);
	char err[256];
	CHECK_INT(state_put_queue(&f->st, q, err, sizeof(err)), 0);
	json_decref(q);
	CHECK_INT(apply_rev(f, NODRAIN), 2);
	CHECK_INT(state_queue(&f->st, "prod")->quotas[0].nominal_gpus, 8);
	sfx_restart(f); /* and after a restart, still nothing to do */
	out = apply(f, NODRAIN);
	CHECK(json_is_null(json_object_get(out, "revision")));
	json_decref(out);
	sfx_close(f);
}

#define THREE                                                                                      \
	SPEC_HEAD "    sysctl: {vm.swappiness: 1}\n"                                               \
	          "groups:\n"                                                                      \
	          "  a: {pool: onprem, profile: p, nodes: 'node-[1-3]'}\n"

TEST(nodes_removed_and_brought_back)
{
	struct sfx *f = sfx_open(4, 4);
	struct job *j = sfx_submit_running(f, "{\"command\": [\"x\"], \"gpus\": 4}");
	int on = sfx_node_of(sfx_attempt(j), 0);
	CHECK_INT(on, 0);
	json_t *out = apply(
	        f,
	        "name: t\npools: {onprem: }\nprofiles: {p: {gpu: {model: NVIDIA H200, count: 4}}}\n"
	        "groups: {a: {pool: onprem, profile: p, nodes: 'node-[2-4]'}}\n");
	json_t *rm =
	        json_object_get(json_object_get(json_object_get(out, "plan"), "nodes"), "remove");
	CHECK_INT(json_array_size(rm), 1);
	json_decref(out);
	CHECK_STR(shown(f, 0), "draining");
	CHECK_STR(sfx_node(f, 0)->admin_reason, "not in the fleet spec (revision 1)");
	CHECK_INT(sfx_node(f, 0)->fleet_removed, 1);
	CHECK(sfx_node(f, 0)->profile == NULL);
	sfx_one_stopped(f, 0);
	CHECK_STR(shown(f, 0), "drained");
	out = apply(
	        f,
	        "name: t\npools: {onprem: }\nprofiles: {p: {gpu: {model: NVIDIA H200, count: 4}}}\n"
	        "groups: {a: {pool: onprem, profile: p, nodes: 'node-[2-4]'}}\n");
	CHECK(json_is_null(json_object_get(out, "revision"))); /* still removed: nothing to do */
	json_decref(out);
	/* named again: back, with its profile (no drain needed for it) */
	CHECK_INT(apply_rev(f, "name: t\npools: {onprem: }\nprofiles: {p: {gpu: {model: NVIDIA "
	                       "H200, count: 4}}}\n"
	                       "groups: {a: {pool: onprem, profile: p, nodes: 'node-[1-4]'}}\n"),
	          2);
	CHECK_INT(sfx_node(f, 0)->fleet_removed, 0);
	CHECK(sfx_node(f, 0)->profile != NULL);
	CHECK_STR(shown(f, 0), "converging");
	converge(f, 0);
	CHECK_STR(shown(f, 0), "ready");
	sfx_close(f);
}

TEST(a_node_that_joins_later_gets_the_spec)
{
	struct sfx *f = sfx_open(2, 4);
	json_t *out = apply(f, THREE);
	json_t *add =
	        json_object_get(json_object_get(json_object_get(out, "plan"), "nodes"), "add");
	CHECK_INT(json_array_size(add), 1);
	CHECK_STR(jv_str(json_array_get(add, 0), "name", ""), "node-3");
	json_decref(out);
	int n3 = sfx_add_node(f, 4);
	CHECK(sfx_node(f, n3)->profile != NULL);
	CHECK_STR(sfx_node(f, n3)->pool, "onprem");
	CHECK_STR(shown(f, n3), "converging");
	CHECK_INT(sfx_events(f, "fleet.node", 0, "node node-3 joined"), 1);
	/* and the plan has nothing left to do */
	out = apply(f, THREE);
	CHECK(json_is_null(json_object_get(out, "revision")));
	json_decref(out);
	sfx_close(f);
}

TEST(saved_plan_refused_when_the_cluster_changed)
{
	struct sfx *f = sfx_open(2, 4);
	json_t *body = json_pack("{s:o}", "spec", source(NODRAIN));
	json_t *planned = NULL;
	char err[4096] = "";
	CHECK_INT(fleet_plan_spec(&f->st, body, &planned, err, sizeof(err)), 0);
	json_t *saved = json_pack("{s:O,s:O,s:O}", "spec", json_object_get(body, "spec"),
	                          "fingerprint", json_object_get(planned, "fingerprint"), "digest",
	                          json_object_get(planned, "digest"));
	json_t *apply_body = json_pack("{s:O}", "plan", saved);
	json_t *rack = json_pack("{s:s}", "rack", "r9");
	state_node_relabel(&f->st, sfx_node(f, 1), rack, NULL, 0);
	json_decref(rack);
	json_t *out = NULL;
	CHECK_INT(fleet_apply(&f->st, apply_body, &out, err, sizeof(err)), ERR_CONFLICT);
	CHECK_CONTAINS(err, "the cluster changed since the plan was made: node node-2 changed");
	/* an edited plan file is refused as such */
	json_object_set_new(json_object_get(saved, "digest"), "revision", json_integer(7));
	json_object_set(apply_body, "plan", saved);
	CHECK_INT(fleet_apply(&f->st, apply_body, &out, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "the plan file was changed");
	/* a fresh plan applies, but only with the spec it was made from */
	json_decref(planned);
	CHECK_INT(fleet_plan_spec(&f->st, body, &planned, err, sizeof(err)), 0);
	json_object_set(saved, "fingerprint", json_object_get(planned, "fingerprint"));
	json_object_set(saved, "digest", json_object_get(planned, "digest"));
	json_object_set(saved, "plan", json_object_get(planned, "plan"));
	json_t *edited = json_deep_copy(saved);
	json_t *prod =
	        json_object_get(json_object_get(json_object_get(edited, "spec"), "queues"), "prod");
	json_object_set_new(prod, "priority", json_integer(99));
	json_object_set(apply_body, "plan", edited);
	CHECK_INT(fleet_apply(&f->st, apply_body, &out, err, sizeof(err)), ERR_CONFLICT);
	CHECK_CONTAINS(err, "the changes it lists are not what its spec gives");
	json_decref(edited);
	json_object_set(apply_body, "plan", saved);
	CHECK_INT(fleet_apply(&f->st, apply_body, &out, err, sizeof(err)), 0);
	CHECK_INT(jv_int(out, "revision", 0), 1);
	json_decref(out);
	json_decref(planned);
	json_decref(saved);
	json_decref(apply_body);
	json_decref(body);
	sfx_close(f);
}

TEST(rollback_applies_an_earlier_spec)
{
	struct sfx *f = sfx_open(1, 4);
	CHECK_INT(apply_rev(f, NODRAIN), 1);
	char h1[72];
	snprintf(h1, sizeof(h1), "%s", hash_of(f, 0));
	const char *v2 = SPEC_HEAD "    sysctl: {vm.swappiness: 60}\n" SPEC_GROUPS POLICY(1, 1);
	CHECK_INT(apply_rev(f, v2), 2);
	CHECK(strcmp(hash_of(f, 0), h1) != 0);
	json_t *body = json_pack("{s:I,s:s}", "revision", (json_int_t)1, "who", "ops");
	json_t *out = NULL;
	char err[1024];
	CHECK_INT(fleet_rollback(&f->st, body, &out, err, sizeof(err)), 0);
	CHECK_INT(jv_int(out, "revision", 0), 3);
	json_decref(out);
	CHECK_STR(hash_of(f, 0), h1);
	json_t *rev = fleet_revision(&f->st, 3);
	CHECK_INT(jv_int(rev, "rollback_of", 0), 1);
	CHECK_STR(jv_str(rev, "who", ""), "ops");
	json_decref(rev);
	json_object_set_new(body, "revision", json_integer(9));
	CHECK_INT(fleet_rollback(&f->st, body, &out, err, sizeof(err)), ERR_NOTFOUND);
	CHECK_CONTAINS(err, "there is no revision 9");
	json_decref(body);
	sfx_close(f);
}

TEST(a_running_rollout_refuses_other_profile_changes)
{
	struct sfx *f = sfx_open(2, 4);
	json_decref(apply(f, SPEC_HEAD "    driver: '550.1'\n" SPEC_GROUPS POLICY(1, 1)));
	step(f);
	json_t *body = json_pack("{s:o}", "spec", source(V2));
	json_t *out = NULL;
	char err[4096];
	CHECK_INT(fleet_apply(&f->st, body, &out, err, sizeof(err)), ERR_CONFLICT);
	CHECK_CONTAINS(err, "the rollout of revision 1 is running (0 of 2 nodes done)");
	CHECK_CONTAINS(err, "node-1");
	json_decref(body);
	/* the same spec again: the rollout's targets are what is planned */
	out = apply(f, SPEC_HEAD "    driver: '550.1'\n" SPEC_GROUPS POLICY(1, 1));
	CHECK(json_is_null(json_object_get(out, "revision")));
	json_decref(out);
	/* stop it: node-1, converging, stays out; then V2 may be applied */
	body = json_pack("{s:s}", "who", "ops");
	CHECK_INT(fleet_stop(&f->st, body, &out, err, sizeof(err)), 0);
	json_decref(out);
	CHECK_INT(fleet_stop(&f->st, body, &out, err, sizeof(err)), ERR_NOTFOUND);
	json_decref(body);
	json_t *ro = rollout(f);
	CHECK_STR(jv_str(ro, "state", ""), "stopped");
	CHECK_STR(jv_str(ro, "reason", ""), "stopped by ops");
	json_decref(ro);
	CHECK_STR(shown(f, 0), "drained");
	CHECK_INT(apply_rev(f, V2), 2);
	step(f);
	/* node-1, left out by the stopped rollout, is returned to service
	 * after this one: it counted as in service before it */
	CHECK_STR(phase_now(f, 0), "converging");
	converge(f, 0);
	step(f);
	CHECK_STR(shown(f, 0), "ready");
	sfx_close(f);
}

TEST_MAIN()
