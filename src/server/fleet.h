/* fleet.h - the server's side of the fleet as code: plans, applies,
 * revisions, rollbacks and the controller of rolling upgrades.
 *
 * The decisions are pure and live in src/fleet/: what a spec changes
 * (plan.h: fleet_plan, against the observed state this file builds) and
 * which nodes a rollout may take out now (rollout.h). This file carries
 * them out through the state's own paths: queues and teams with
 * state_put_queue and state_put_team; a node's pool and labels with
 * state_node_relabel (the path of POST /v1/nodes/NAME); its profile with
 * nodes_set_profile, which the node's sync answer then carries; drains and
 * cordons with state_node_set_admin. Two state files (core.h) carry it:
 * fleet.c (layer 5: revisions, plans, applies, joining, the views) and,
 * above it, fleet_rollout.c (layer 6: the rollout's controller, fleet_step
 * and fleet_stop); fleet_int.h is what they share. Every function runs
 * with the state lock held.
 *
 * An apply that changes anything records a revision: {"id", "time_ms",
 * "who" (what the client says), "identity" (the credential: "admin"),
 * "fleet", "spec" (the spec as the YAML reads, as JSON), "text", "file",
 * "rollback_of", "plan", "summary", "result", "rollout"}, stored in the
 * state database (schema v5) and written by state_flush with the rest. The
 * newest revision is the cluster's spec: a node that joins later gets its
 * pool, labels and profile from it.
 *
 * What an apply does, by the plan's parts:
 *   teams, queues      set at once (teams first: quotas name them)
 *   pool, labels       set at once: the spec owns a member's labels, so
 *                      labels it does not give are removed
 *   profile, no drain  sent at once; the node takes no new work until its
 *                      agent reports it converged and its check passed
 *   profile, drain     rolled out (below)
 *   remove             drained, its profile withdrawn, and kept drained
 *                      with the reason "not in the fleet spec (revision
 *                      N)": node records are never deleted (ids are dense,
 *                      and every attempt's history names its nodes); a later
 *                      spec that names it again brings it back
 *   add                nothing until its agent joins
 *
 * The rolling upgrade: a revision whose plan drains nodes holds a rollout
 * {"state": running | done | stopped, "policy", "profiles": {NAME: wire
 * profile}, "nodes": [{"name", "block", "profile", "hash", "phase",
 * "was_out", "before": {"admin", "reason", "by_fault"}, "reason",
 * "since_ms", "deadline_ms", "detail"}], "total", "done", "reason",
 * "started_ms", "ended_ms"}, persisted with it, so a restarted server
 * carries on where it was. fleet_step (from the housekeeping loop) moves
 * each node along rollout.h's phases: draining (state_node_set_admin; the
 * drain requeues work, checkpointing jobs first, after their grace),
 * converging (the profile sent once drained), validating (converged; a
 * node check, run by the server's checker thread through
 * state_node_next_check, must pass within the policy's validation_timeout),
 * done (uncordoned, or left as it was before its turn). A node that fails
 * stops the rollout and stays cordoned with the reason. While a rollout
 * runs, an apply that changes a profile or removes a node is refused.
 */
#ifndef ANVIL_SERVER_FLEET_H
#define ANVIL_SERVER_FLEET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "server/state.h"

/* After loading (state_open): the revisions, the current spec, a rollout
 * that was running. */
int fleet_open(struct state *st);

/* The observed state (fleet/plan.h) as it is now. */
json_t *fleet_observed(struct state *st);

/* POST /v1/fleet/plan: body {"spec": the spec as the YAML reads}. *out:
 * {"plan", "fingerprint", "digest", "revision"}. ERR_INVALID with every
 * error of the spec (path: what is wrong; ...) in err. */
int fleet_plan_spec(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen);

/* POST /v1/fleet/apply: body {"spec"} or {"plan": a saved plan {"spec",
 * "fingerprint", "digest", "plan" (the changes reviewed; optional)}}, with
 * "who", "text", "file" (optional). Plans
 * and carries out; *out: {"revision" (null when nothing changed),
 * "changes", "message", "plan", "rollout"}. ERR_CONFLICT when a saved plan
 * no longer matches the cluster (err names what changed) or a rollout
 * runs and the spec would change profiles. */
int fleet_apply(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen);

/* POST /v1/fleet/rollback: body {"revision", "who"}: that revision's spec,
 * applied as any spec is; the new revision says which it rolled back to. */
int fleet_rollback(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen);

/* POST /v1/fleet/stop: body {"who"}: the running rollout stops where it
 * is; nodes still draining go back as they were, nodes that converge or
 * validate stay out. ERR_NOTFOUND when none runs. */
int fleet_stop(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen);

/* The newest revisions first, at most limit, without their specs. */
json_t *fleet_revisions(struct state *st, int limit);
/* One revision in full, or NULL. The caller decrefs it. */
json_t *fleet_revision(struct state *st, int64_t id);

/* GET /v1/fleet/status: {"revision", "rollout" (the newest one), "nodes":
 * each node of the spec with its profile, state and hold}. */
json_t *fleet_status(struct state *st);
/* GET /v1/fleet/refresh: fleet_drift of the observed state, and the
 * revision. Changes nothing. */
json_t *fleet_refresh(struct state *st);

/* A node registered: one the current spec names and that has no profile
 * yet gets its pool, labels and profile. */
void fleet_node_joined(struct state *st, struct node *n);

/* The rollout's controller: moves its nodes along and starts the next
 * ones. Cheap when none runs; at most every 500 ms unless something it
 * waits for happened (core->fleet_kick) or force. now: wall ms. */
void fleet_step(struct state *st, int64_t now, int force);

/* The fleet's part of state_flush (entry.c), while core->fleet_dirty: the
 * revisions changed since the last flush, written into its open
 * transaction; fleet_flushed, after the commit, marks them clean. */
int fleet_flush(struct state *st, struct store *store);
void fleet_flushed(struct state *st);
/* state_close: frees the records (nothing when fleet_open never ran). */
void fleet_close(struct state *st);

#endif
