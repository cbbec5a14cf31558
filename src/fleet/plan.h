/* plan.h - the fleet's plan: what would make the cluster match a spec,
 * what drifted, and the fingerprint that ties a saved plan to the cluster
 * it was made against.
 *
 * fleet_plan() compares a compiled spec (spec.h) with what the server
 * observes and lists the changes: nodes to add (in the spec, not joined:
 * waiting for their agents), nodes to remove (joined, not in the spec:
 * drained, and kept drained), nodes whose pool, labels or profile differ
 * (what differs, and whether the node must be drained for it), and the
 * queues and teams to add or change. fleet_drift() reports the nodes that do
 * not stand as their profile says (`anvil fleet refresh`). The observed
 * state's digest names each part a plan depends on; its fingerprint is what
 * `anvil fleet apply PLAN` compares, and fleet_digest_changes() says what
 * changed when the two differ.
 *
 * The observed state, as the server builds it (server/fleet.c):
 *
 *   {"revision": N,                 the applied revision; 0: none yet
 *    "spec": its compiled spec's hash (fleet_spec_hash), or null
 *    "nodes": [{"name", "pool": text or null, "labels": {K: V},
 *               "profile": {"name", "hash", "spec"} or null,
 *                                   what the node is to run: a running
 *                                   rollout's target, else what it was sent
 *               "removed": bool,    drained by an earlier apply as not in
 *                                   its spec (and kept so)
 *               "status": the agent's profile_status, or null,
 *               "facts": {"driver_version", "cuda_version", "gpu_count",
 *                         "gpu_model", "address"}}],      (refresh only)
 *    "queues": [{"name", "priority", "weight", "borrowing",
 *                "default_time_limit_ms", "idle_timeout_ms",
 *                "quotas": {TEAM: GPUS}}],
 *    "teams": [{"name", "weight"}]}
 *
 * The plan:
 *
 *   {"fleet": NAME, "revision": the observed revision,
 *    "spec": the spec's hash, "spec_changed": it is not the applied one,
 *    "nodes": {"add": [{"name", "group", "pool", "profile", "address"}],
 *              "remove": [{"name"}],
 *              "change": [{"name", "pool": {"from", "to"},
 *                          "labels": {"set": {K: V}, "remove": [K]},
 *                          "profile": {"from", "to", "from_hash", "to_hash",
 *                                      "changes": [{"key", "from", "to",
 *                                                   "drain"}],
 *                                      "drain": bool, "spec": compiled},
 *                          "reconverge": {"why"},
 *                          "restore": true}],    each part only when it differs
 *              "unchanged": N},
 *    "queues": {"add": [BODY], "change": [{"name", "changes": [{"key",
 *               "from", "to"}], "body": BODY}], "unchanged": N},
 *    "teams": {"add": [{"name", "weight"}], "change": [{"name", "changes",
 *              "body"}], "unchanged": N},
 *    "drain": [NAME],    the nodes a rolling upgrade takes out, in spec order
 *    "upgrade": the spec's policy,
 *    "changes": N}       what an apply would change; nodes to add do not
 *                        count (their agents join when they do)
 *
 * An apply of a plan without changes and of the applied spec does nothing:
 * the cluster matches the spec.
 *
 * A queue's BODY is what POST /v1/queues takes, its quotas with null for
 * each team the server has a quota for and the spec does not. Queues and
 * teams the spec does not name are left as they are.
 *
 * A node whose profile stays but whose agent reports it failed or drifted
 * from it is a change too ("reconverge"): its agent never fixes that by
 * itself (agent/converge.h), so an apply asks it to run the steps again,
 * in place.
 *
 * Which profile changes need a drain: driver, cuda, agent, mounts and
 * packages (what converging changes under running work); gpu (what the
 * node check expects), cache_dir, sysctl and the profile's name do not. A
 * node without a profile is compared as one with every key unset, so its
 * first profile needs a drain when it pins any of those keys.
 *
 * Pure: no I/O; one thread per call. Results are the caller's
 * (json_decref).
 */
#ifndef ANVIL_FLEET_PLAN_H
#define ANVIL_FLEET_PLAN_H

#include <jansson.h>
#include <stddef.h>

#define FLEET_HASH_LEN 64 /* hex digits of a profile hash or a fingerprint */

/* The SHA-256 (hex) of a compiled profile as canonical JSON (sorted keys,
 * compact): the `hash` of the sync answer's profile (proto/wire.h). */
void fleet_profile_hash(const json_t *profile, char hex[FLEET_HASH_LEN + 1]);

/* The differences between two compiled profiles (from may be NULL: none)
 * as [{"key", "from", "to", "drain"}]; *drain is 1 when one needs it. */
json_t *fleet_profile_diff(const json_t *from, const json_t *to, int *drain);

/* The plan of a compiled spec against the observed state (above). */
json_t *fleet_plan(const json_t *spec, const json_t *observed);
/* The SHA-256 (hex) of a compiled spec as canonical JSON. */
void fleet_spec_hash(const json_t *spec, char hex[FLEET_HASH_LEN + 1]);

/* What a plan depends on, part by part: {"revision", "nodes": {NAME:
 * digest of its pool, labels, profile hash and removal}, "queues": {NAME:
 * settings}, "teams": {NAME: weight}}. */
json_t *fleet_observed_digest(const json_t *observed);
/* The SHA-256 (hex) of a digest as canonical JSON. */
void fleet_fingerprint(const json_t *digest, char hex[FLEET_HASH_LEN + 1]);
/* What changed from digest `before` to `now`, one sentence each ("node
 * h200-03 joined", "queue prod: priority 100 -> 90"); an array of strings,
 * empty when nothing did. A `before` that is not a digest is one change. */
json_t *fleet_digest_changes(const json_t *before, const json_t *now);

/* The nodes with a profile that do not stand as it says: {"nodes":
 * [{"name", "profile", "state", "issues": [text]}], "counts": {"profiled",
 * "converged", "converging", "unreported", "drifted", "failed",
 * "mismatched"}}. A node is listed when its agent reports it failed or
 * drifted, or its facts differ from the profile (driver, CUDA, agent
 * version, GPU count or model, versions compared by the agent's rule,
 * steps.h), or its address differs from an observed node's
 * "spec_address" (the applied spec's, when it gives one); converging and
 * unreported nodes are only counted. */
json_t *fleet_drift(const json_t *observed);

/* How a node stands against its profile (the wire profile {"hash", "name",
 * "spec"}), for the scheduler and for people: FLEET_HOLD_NONE when status
 * says converged for its hash (it may take work once its node check
 * passed); else a reason in out ("converging to profile h200 (step 3 of
 * 7)": the steps done so far of the profile's steps, steps.h; "profile h200
 * failed at step 'mount /mnt/nvme': ...") and whether the node waits
 * (converging, no report for this hash yet) or is stuck (failed, drifted). */
enum fleet_hold { FLEET_HOLD_NONE, FLEET_HOLD_WAIT, FLEET_HOLD_STUCK };
enum fleet_hold fleet_hold_reason(const json_t *profile, const json_t *status, char *out,
                                  size_t len);

/* 1 when s is a profile_status state: converging, converged, failed or
 * drifted. */
int fleet_status_state_ok(const char *s);

#endif
