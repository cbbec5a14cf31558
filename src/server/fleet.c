/* fleet.c - revisions, plans and applies, joining and the views (fleet.h);
 * the rolling upgrade's controller is fleet_rollout.c's, above it. Layer 5
 * of the state files (core.h). */
#include "server/fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/schema.h"
#include "base/util.h"
#include "fleet/plan.h"
#include "fleet/rollout.h"
#include "fleet/spec.h"
#include "server/fleet_int.h"
#include "server/glue.h"

/* ---- helpers (fleet_int.h) ---- */

void fleet_touch(struct state *st, int64_t id)
{
	struct fleet *f = fleet_of(st);
	if (id < 1 || id > f->nrevs)
		return;
	f->dirty[id - 1] = 1;
	st->core->fleet_dirty = 1;
}

struct node *fleet_node_named(struct state *st, const char *name)
{
	struct fleet *f = fleet_of(st);
	for (; f->indexed < st->nnodes; f->indexed++) /* names never change */
		json_object_set_new(f->node_ids, st->nodes[f->indexed]->name,
		                    json_integer(st->nodes[f->indexed]->id));
	return state_node(st, json_integer_value(json_object_get(f->node_ids, name)));
}

void fleet_mark_queued(struct state *st)
{
	struct fleet *f = fleet_of(st);
	int changed = 0;
	for (int i = 0; i < st->nnodes; i++) {
		changed |= st->nodes[i]->rollout_queued;
		st->nodes[i]->rollout_queued = 0;
	}
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(rollout_of(f, f->active), "nodes"), i, e) {
		struct node *n =
		        phase_of(e) == FLEET_QUEUED ? fleet_node_named(st, str(e, "name")) : NULL;
		if (n) {
			n->rollout_queued = 1;
			changed = 1;
		}
	}
	if (changed) /* where new work may go differs: a cycle sees it */
		state_want_schedule(st);
}

/* ---- records ---- */

int fleet_flush(struct state *st, struct store *store)
{
	struct fleet *f = fleet_of(st);
	int rc = 0;
	for (int i = 0; rc == 0 && i < f->nrevs; i++)
		if (f->dirty[i] && f->revs[i])
			rc = store_put_fleet_revision(store, i + 1, f->revs[i]);
	return rc;
}

void fleet_flushed(struct state *st)
{
	struct fleet *f = fleet_of(st);
	memset(f->dirty, 0, (size_t)f->nrevs);
}

static void set_spec(struct fleet *f, json_t *spec)
{
	json_decref(f->spec);
	json_object_clear(f->members);
	json_object_clear(f->profiles);
	f->spec = spec;
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(spec, "nodes"), i, e)
		json_object_set(f->members, str(e, "name"), e);
	json_array_foreach (json_object_get(spec, "profiles"), i, e) {
		char hex[FLEET_HASH_LEN + 1];
		fleet_profile_hash(e, hex);
		json_object_set_new(
		        f->profiles, str(e, "name"),
		        json_pack("{s:s,s:s,s:O}", "hash", hex, "name", str(e, "name"), "spec", e));
	}
}

void fleet_close(struct state *st)
{
	struct fleet *f = fleet_of(st);
	if (!f)
		return;
	for (int i = 0; i < f->nrevs; i++)
		json_decref(f->revs[i]);
	free(f->revs);
	free(f->dirty);
	json_decref(f->spec);
	json_decref(f->members);
	json_decref(f->profiles);
	json_decref(f->node_ids);
	free(f->start);
	free(f->work);
	free(f);
	st->core->fleet = NULL;
}

/* Appends doc as revision nrevs + 1 (taken). */
static int64_t add_rev(struct fleet *f, json_t *doc)
{
	XGROW(f->revs, f->nrevs, f->caprevs);
	f->dirty = xrealloc(f->dirty, (size_t)f->caprevs);
	f->revs[f->nrevs] = doc;
	f->dirty[f->nrevs] = 0;
	return ++f->nrevs;
}

/* The spec as the YAML reads, compiled; NULL with every error, joined, in
 * err ("field 'spec': 2 errors: groups.b.pool: there is no pool ...; ..."). */
static json_t *compile(const json_t *src, char *err, size_t errlen)
{
	if (!json_is_object(src)) {
		snprintf(err, errlen, "field 'spec': must be the cluster spec as an object");
		return NULL;
	}
	struct schema_errors *e = xcalloc(1, sizeof(*e));
	json_t *spec = fleet_compile(src, e);
	if (!spec) {
		size_t used =
		        (size_t)snprintf(err, errlen, "field 'spec': %d error%s: ", schema_count(e),
		                         schema_count(e) == 1 ? "" : "s");
		for (int i = 0; i < e->n && used < errlen; i++)
			used += (size_t)snprintf(err + used, errlen - used, "%s%s%s%s",
			                         i ? "; " : "", e->v[i].path,
			                         *e->v[i].path ? ": " : "", e->v[i].msg);
	}
	free(e);
	return spec;
}

int fleet_open(struct state *st)
{
	struct fleet *f = xcalloc(1, sizeof(*f));
	f->members = json_object();
	f->profiles = json_object();
	f->node_ids = json_object();
	st->core->fleet = f;
	size_t i;
	json_t *row;
	json_array_foreach (st->core->fleet_loaded, i, row) {
		int64_t id = json_integer_value(json_array_get(row, 0));
		while (f->nrevs + 1 < id) /* a hole would break dense ids: never expected */
			add_rev(f, json_null());
		if (id == f->nrevs + 1)
			add_rev(f, json_incref(json_array_get(row, 1)));
	}
	json_array_clear(st->core->fleet_loaded);
	char err[1024];
	json_t *last = rev(f, f->nrevs);
	json_t *spec = last ? compile(json_object_get(last, "spec"), err, sizeof(err)) : NULL;
	if (last && !spec)
		log_error("fleet revision %d no longer compiles, so nodes that join get nothing "
		          "from it: %s",
		          f->nrevs, err);
	if (spec)
		set_spec(f, spec);
	for (int64_t id = f->nrevs; id >= 1 && !f->active; id--)
		if (strcmp(str(rollout_of(f, id), "state"), "running") == 0)
			f->active = id;
	fleet_mark_queued(st);
	if (f->nrevs)
		log_info("fleet loaded revisions=%d rollout=%lld", f->nrevs, (long long)f->active);
	return 0;
}

/* ---- the observed state ---- */

/* {node name: the wire profile a running rollout will send it} for the
 * nodes it has not sent theirs to yet. */
static json_t *pending_targets(struct fleet *f)
{
	json_t *m = json_object();
	const json_t *ro = rollout_of(f, f->active);
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(ro, "nodes"), i, e) {
		const char *phase = str(e, "phase");
		if (strcmp(phase, "queued") == 0 || strcmp(phase, "draining") == 0)
			json_object_set(m, str(e, "name"),
			                json_object_get(json_object_get(ro, "profiles"),
			                                str(e, "profile")));
	}
	return m;
}

static json_t *facts_of(const struct node *n)
{
	return json_pack("{s:s,s:s,s:s,s:i,s:s,s:s}", "driver_version",
	                 jv_str(n->facts, "driver_version", ""), "cuda_version",
	                 jv_str(n->facts, "cuda_version", ""), "agent_version",
	                 jv_str(n->facts, "agent_version", ""), "gpu_count", n->ngpus, "gpu_model",
	                 n->ngpus ? n->gpus[0].model : "", "address", n->address);
}

static json_t *node_observed(const struct node *n, const json_t *target)
{
	const json_t *profile = target ? target : n->profile;
	json_t *o = json_pack("{s:s,s:o,s:o,s:O,s:b,s:O,s:o}", "name", n->name, "pool",
	                      n->pool ? json_string(n->pool) : json_null(), "labels",
	                      n->labels ? json_deep_copy(n->labels) : json_object(), "profile",
	                      profile ? profile : json_null(), "removed", n->fleet_removed > 0,
	                      "status", n->profile_status ? n->profile_status : json_null(),
	                      "facts", facts_of(n));
	return o;
}

static json_t *queue_observed(const struct queue *q)
{
	json_t *quotas = json_object();
	for (int k = 0; k < q->nquotas; k++)
		json_object_set_new(quotas, q->quotas[k].team,
		                    json_integer(q->quotas[k].nominal_gpus));
	return json_pack("{s:s,s:i,s:i,s:b,s:I,s:I,s:b,s:o}", "name", q->name, "priority",
	                 q->priority, "weight", q->weight, "borrowing", q->borrowing,
	                 "default_time_limit_ms", (json_int_t)q->default_time_limit_ms,
	                 "idle_timeout_ms", (json_int_t)q->idle_timeout_ms, "run_as_root",
	                 q->run_as_root, "quotas", quotas);
}

json_t *fleet_observed(struct state *st)
{
	struct fleet *f = fleet_of(st);
	json_t *targets = pending_targets(f);
	json_t *nodes = json_array(), *queues = json_array(), *teams = json_array();
	for (int i = 0; i < st->nnodes; i++)
		json_array_append_new(
		        nodes,
		        node_observed(st->nodes[i], json_object_get(targets, st->nodes[i]->name)));
	for (int i = 0; i < st->nqueues; i++)
		json_array_append_new(queues, queue_observed(&st->queues[i]));
	for (int i = 0; i < st->nteams; i++) /* a team only seen on jobs is not set */
		if (st->teams[i].configured)
			json_array_append_new(teams,
			                      json_pack("{s:s,s:i}", "name", st->teams[i].name,
			                                "weight", st->teams[i].weight));
	json_decref(targets);
	char hex[FLEET_HASH_LEN + 1] = "";
	if (f->spec)
		fleet_spec_hash(f->spec, hex);
	return json_pack("{s:I,s:o,s:o,s:o,s:o}", "revision", (json_int_t)f->nrevs, "spec",
	                 f->spec ? json_string(hex) : json_null(), "nodes", nodes, "queues", queues,
	                 "teams", teams);
}

/* ---- plan ---- */

/* The plan of the compiled spec against the cluster now: {"plan",
 * "fingerprint", "digest", "revision"}. */
static json_t *plan_now(struct state *st, const json_t *spec)
{
	json_t *obs = fleet_observed(st);
	json_t *plan = fleet_plan(spec, obs), *digest = fleet_observed_digest(obs);
	char fp[FLEET_HASH_LEN + 1];
	fleet_fingerprint(digest, fp);
	json_t *out = json_pack("{s:o,s:s,s:o,s:O}", "plan", plan, "fingerprint", fp, "digest",
	                        digest, "revision", json_object_get(obs, "revision"));
	json_decref(obs);
	return out;
}

int fleet_plan_spec(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen)
{
	json_t *spec = compile(json_object_get(body, "spec"), err, errlen);
	if (!spec)
		return ERR_INVALID;
	*out = plan_now(st, spec);
	json_decref(spec);
	return 0;
}

/* ---- apply: what refuses it ---- */

static void join_texts(const json_t *texts, char *out, size_t len)
{
	size_t used = strlen(out), i;
	json_t *t;
	json_array_foreach (texts, i, t) {
		if (used + 1 >= len)
			break;
		used += (size_t)snprintf(out + used, len - used, "%s%s", i ? "; " : "",
		                         json_string_value(t));
	}
}

/* A saved plan applies only to the cluster it was made against, and only
 * as it was reviewed: its changes must be what its spec gives now. */
static int saved_plan_ok(const json_t *saved, const json_t *now, char *err, size_t errlen)
{
	const char *want = str(saved, "fingerprint");
	const json_t *digest = json_object_get(saved, "digest");
	const json_t *reviewed = json_object_get(saved, "plan");
	if (strcmp(want, str(now, "fingerprint")) == 0) {
		if (!reviewed || json_equal(reviewed, json_object_get(now, "plan")))
			return 0;
		snprintf(err, errlen,
		         "field 'plan': the changes it lists are not what its spec gives against "
		         "this cluster: the plan file was edited, or this server plans otherwise; "
		         "make a new plan");
		return ERR_CONFLICT;
	}
	char check[FLEET_HASH_LEN + 1];
	fleet_fingerprint(digest, check);
	if (!json_is_object(digest) || strcmp(check, want) != 0) {
		snprintf(err, errlen,
		         "field 'plan': its fingerprint is not that of the cluster it says it was "
		         "made against: the plan file was changed; make a new plan");
		return ERR_INVALID;
	}
	json_t *why = fleet_digest_changes(digest, json_object_get(now, "digest"));
	snprintf(err, errlen, "field 'plan': the cluster changed since the plan was made: ");
	join_texts(why, err, errlen);
	size_t used = strlen(err);
	snprintf(err + used, errlen - used, "; make a new plan and review it");
	json_decref(why);
	return ERR_CONFLICT;
}

/* While a rollout runs, no other may start, and no node of it may be
 * removed or sent another profile. */
static int rollout_conflict(struct fleet *f, const json_t *plan, char *err, size_t errlen)
{
	if (!f->active)
		return 0;
	json_t *names = json_array();
	size_t i;
	json_t *c;
	const json_t *nodes = json_object_get(plan, "nodes");
	json_array_foreach (json_object_get(nodes, "change"), i, c)
		if (json_object_get(c, "profile"))
			json_array_append_new(names, json_string(str(c, "name")));
	json_array_foreach (json_object_get(nodes, "remove"), i, c)
		json_array_append_new(names, json_string(str(c, "name")));
	int rc = 0;
	if (json_array_size(names)) {
		const json_t *ro = rollout_of(f, f->active);
		int n = snprintf(
		        err, errlen,
		        "field 'spec': the rollout of revision %lld is running (%lld of %lld "
		        "nodes done), and this spec changes the profile of, or removes, "
		        "%zu node(s): ",
		        (long long)f->active, (long long)jv_int(ro, "done", 0),
		        (long long)jv_int(ro, "total", 0), json_array_size(names));
		if (n > 0 && (size_t)n < errlen)
			join_texts(names, err, errlen > 240 ? errlen - 120 : errlen);
		size_t used = strlen(err);
		snprintf(err + used, errlen - used,
		         ". Wait for the rollout to end, or stop it (anvil fleet stop), then apply "
		         "again");
		rc = ERR_CONFLICT;
	}
	json_decref(names);
	return rc;
}

/* ---- apply: carrying it out ---- */

static void apply_teams(struct state *st, const json_t *teams, json_t *failed)
{
	static const char *const kinds[] = {"add", "change"};
	for (size_t k = 0; k < 2; k++) {
		size_t i;
		json_t *t;
		json_array_foreach (json_object_get(teams, kinds[k]), i, t) {
			const json_t *body =
			        json_object_get(t, "body") ? json_object_get(t, "body") : t;
			if (state_put_team(st, str(body, "name"), (int)jv_int(body, "weight", 1)))
				json_array_append_new(failed,
				                      json_sprintf("team %s: cannot persist it",
				                                   str(body, "name")));
		}
	}
}

static void apply_queues(struct state *st, const json_t *queues, json_t *failed)
{
	static const char *const kinds[] = {"add", "change"};
	char err[256];
	for (size_t k = 0; k < 2; k++) {
		size_t i;
		json_t *q;
		json_array_foreach (json_object_get(queues, kinds[k]), i, q) {
			const json_t *body =
			        json_object_get(q, "body") ? json_object_get(q, "body") : q;
			err[0] = '\0';
			if (state_put_queue(st, body, err, sizeof(err)))
				json_array_append_new(
				        failed, json_sprintf("queue %s: %s", str(body, "name"),
				                             err[0] ? err : "cannot persist it"));
		}
	}
}

/* A node's labels and pool as a change of the plan says. */
static void relabel(struct state *st, struct node *n, const json_t *c, int64_t id)
{
	const json_t *labels = json_object_get(c, "labels"), *pool = json_object_get(c, "pool");
	if (!labels && !pool)
		return;
	json_t *patch = json_deep_copy(json_object_get(labels, "set"));
	if (!patch)
		patch = json_object();
	size_t i;
	json_t *k;
	json_array_foreach (json_object_get(labels, "remove"), i, k)
		json_object_set_new(patch, json_string_value(k), json_null());
	state_node_relabel(st, n, patch, json_string_value(json_object_get(pool, "to")),
	                   pool != NULL);
	char *text = jv_dump(patch);
	state_event(st, "node.changed", 0, n->id, "node %s: fleet revision %lld: labels %s%s%s",
	            n->name, (long long)id, text, pool ? ", pool " : "",
	            pool ? jv_str(pool, "to", "none") : "");
	free(text);
	json_decref(patch);
}

static void apply_node(struct state *st, const json_t *c, int64_t id)
{
	struct fleet *f = fleet_of(st);
	struct node *n = fleet_node_named(st, str(c, "name"));
	if (!n)
		return;
	relabel(st, n, c, id);
	const json_t *profile = json_object_get(c, "profile");
	int drain = json_is_true(json_object_get(profile, "drain"));
	if (json_is_true(json_object_get(c, "restore"))) {
		n->fleet_removed = 0;
		state_mark_node(st, n);
		if (!drain && removed_by_fleet(n)) /* else its turn in the rollout does it */
			state_node_set_admin(st, n, NODE_READY, "", 0);
	}
	if (profile && !drain)
		nodes_set_profile(st, n, json_object_get(f->profiles, str(profile, "to")));
	if (json_object_get(c, "reconverge"))
		nodes_request_converge(st, n);
}

static void remove_node(struct state *st, const char *name, int64_t id)
{
	struct node *n = fleet_node_named(st, name);
	if (!n)
		return;
	char why[96];
	snprintf(why, sizeof(why), REMOVED_REASON " (revision %lld)", (long long)id);
	n->fleet_removed = id;
	state_mark_node(st, n);
	nodes_set_profile(st, n, NULL);
	state_node_set_admin(st, n, NODE_DRAINING, why, 0);
}

static void apply_nodes(struct state *st, const json_t *plan, int64_t id)
{
	const json_t *nodes = json_object_get(plan, "nodes");
	size_t i;
	json_t *c;
	json_array_foreach (json_object_get(nodes, "change"), i, c)
		apply_node(st, c, id);
	json_array_foreach (json_object_get(nodes, "remove"), i, c)
		remove_node(st, str(c, "name"), id);
}

/* The rollout of a plan's drains: every node queued, in the spec's order. */
static json_t *rollout_new(struct fleet *f, const json_t *plan, int64_t now)
{
	json_t *entries = json_array(), *profiles = json_object();
	size_t i;
	json_t *c;
	json_array_foreach (json_object_get(json_object_get(plan, "nodes"), "change"), i, c) {
		const json_t *p = json_object_get(c, "profile");
		if (!json_is_true(json_object_get(p, "drain")))
			continue;
		const char *name = str(c, "name"), *to = str(p, "to");
		const json_t *member = json_object_get(f->members, name);
		const char *block = jv_str(json_object_get(member, "labels"), "block", NULL);
		json_object_set(profiles, to, json_object_get(f->profiles, to));
		json_array_append_new(
		        entries,
		        json_pack("{s:s,s:o,s:s,s:s,s:s,s:b,s:n,s:s,s:I,s:I,s:s}", "name", name,
		                  "block", block ? json_string(block) : json_null(), "profile", to,
		                  "hash", str(p, "to_hash"), "phase", "queued", "was_out", 0,
		                  "before", "reason", "", "since_ms", (json_int_t)0, "deadline_ms",
		                  (json_int_t)0, "detail", ""));
	}
	const json_t *up = json_object_get(f->spec, "upgrade");
	return json_pack("{s:s,s:{s:I,s:I,s:I},s:o,s:o,s:I,s:i,s:s,s:I,s:n}", "state", "running",
	                 "policy", "max_unavailable", (json_int_t)jv_int(up, "max_unavailable", 1),
	                 "max_unavailable_per_block",
	                 (json_int_t)jv_int(up, "max_unavailable_per_block", 1),
	                 "validation_timeout_ms",
	                 (json_int_t)jv_int(up, "validation_timeout_ms", 600000), "profiles",
	                 profiles, "nodes", entries, "total", (json_int_t)json_array_size(entries),
	                 "done", 0, "reason", "", "started_ms", (json_int_t)now, "ended_ms");
}

/* "2 queues, 1 team, 3 nodes changed (3 to roll out), 1 node removed, 4
 * nodes waiting to join"; "the spec only" when nothing else. */
static void summary_of(const json_t *plan, char *out, size_t len)
{
	static const struct {
		const char *section, *part, *one, *many;
	} parts[] = {
	        {"queues", NULL, "queue", "queues"},
	        {"teams", NULL, "team", "teams"},
	        {"nodes", "change", "node changed", "nodes changed"},
	        {"nodes", "remove", "node removed", "nodes removed"},
	        {"nodes", "add", "node waiting to join", "nodes waiting to join"},
	};
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		const json_t *s = json_object_get(plan, parts[i].section);
		size_t n = parts[i].part ? json_array_size(json_object_get(s, parts[i].part))
		                         : json_array_size(json_object_get(s, "add")) +
		                                   json_array_size(json_object_get(s, "change"));
		if (n && used < len)
			used += (size_t)snprintf(out + used, len - used, "%s%zu %s",
			                         used ? ", " : "", n,
			                         n == 1 ? parts[i].one : parts[i].many);
	}
	size_t drain = json_array_size(json_object_get(plan, "drain"));
	if (drain && used < len)
		used += (size_t)snprintf(out + used, len - used, " (%zu to roll out)", drain);
	if (!used)
		snprintf(out, len, "the spec only");
}

/* Records revision `id`'s document. */
static void record(struct state *st, const json_t *body, const json_t *src, const json_t *plan,
                   json_t *rollout, int64_t rollback_of)
{
	struct fleet *f = fleet_of(st);
	char summary[256];
	summary_of(plan, summary, sizeof(summary));
	const char *who = jv_str(body, "who", "");
	json_t *doc = json_pack(
	        "{s:I,s:I,s:s,s:s,s:s,s:O,s:o,s:o,s:o,s:O,s:s,s:s,s:o}", "id",
	        (json_int_t)f->nrevs + 1, "time_ms", (json_int_t)wall_ms(), "who",
	        *who ? who : "admin", "identity", "admin", "fleet", str(plan, "fleet"), "spec", src,
	        "text",
	        jv_str(body, "text", NULL) ? json_string(jv_str(body, "text", "")) : json_null(),
	        "file",
	        jv_str(body, "file", NULL) ? json_string(jv_str(body, "file", "")) : json_null(),
	        "rollback_of", rollback_of ? json_integer(rollback_of) : json_null(), "plan", plan,
	        "summary", summary, "result", rollout ? "rolling out" : "applied", "rollout",
	        rollout ? rollout : json_null());
	int64_t id = add_rev(f, doc);
	fleet_touch(st, id);
	if (rollout)
		f->active = id;
	state_event(st, "fleet.applied", 0, 0, "fleet %s revision %lld by %s: %s%s",
	            str(plan, "fleet"), (long long)id, str(doc, "who"), summary,
	            rollback_of ? " (a rollback)" : "");
	log_info("fleet applied revision=%lld who=%s summary=\"%s\"", (long long)id,
	         str(doc, "who"), summary);
}

/* Applies the spec src (the request's, or a revision's); rollback_of: the
 * revision it came from, or 0. */
static int apply_src(struct state *st, const json_t *body, const json_t *src, int64_t rollback_of,
                     json_t **out, char *err, size_t errlen)
{
	struct fleet *f = fleet_of(st);
	json_t *spec = compile(src, err, errlen);
	if (!spec)
		return ERR_INVALID;
	json_t *now = plan_now(st, spec), *plan = json_object_get(now, "plan");
	const json_t *saved = json_object_get(body, "plan");
	int rc = saved ? saved_plan_ok(saved, now, err, errlen) : 0;
	int nothing = !json_integer_value(json_object_get(plan, "changes")) &&
	              !json_is_true(json_object_get(plan, "spec_changed"));
	if (rc == 0 && !nothing)
		rc = rollout_conflict(f, plan, err, errlen);
	if (rc || nothing) {
		if (rc == 0)
			*out = json_pack("{s:n,s:i,s:s,s:O,s:n}", "revision", "changes", 0,
			                 "message",
			                 "no changes: the cluster already matches this spec",
			                 "plan", plan, "rollout");
		json_decref(now);
		json_decref(spec);
		return rc;
	}
	set_spec(f, spec); /* the new revision's: its profiles are what is sent */
	json_t *failed = json_array();
	apply_teams(st, json_object_get(plan, "teams"), failed);
	apply_queues(st, json_object_get(plan, "queues"), failed);
	json_t *rollout = json_array_size(json_object_get(plan, "drain"))
	                          ? rollout_new(f, plan, wall_ms())
	                          : NULL;
	apply_nodes(st, plan, f->nrevs + 1);
	record(st, body, src, plan, rollout, rollback_of);
	fleet_mark_queued(st);
	json_t *doc = rev(f, f->nrevs);
	char message[512];
	snprintf(message, sizeof(message), "revision %d applied: %s%s", f->nrevs,
	         str(doc, "summary"), rollout ? "; the rolling upgrade has started" : "");
	*out = json_pack("{s:I,s:O,s:s,s:O,s:O,s:o}", "revision", (json_int_t)f->nrevs, "changes",
	                 json_object_get(plan, "changes"), "message", message, "plan", plan,
	                 "rollout", rollout ? rollout : json_null(), "failed", failed);
	json_decref(now);
	st->core->fleet_kick = 1;
	state_want_schedule(st);
	return 0;
}

int fleet_apply(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen)
{
	const json_t *saved = json_object_get(body, "plan");
	const json_t *src = saved ? json_object_get(saved, "spec") : json_object_get(body, "spec");
	if ((saved != NULL) == (json_object_get(body, "spec") != NULL)) {
		snprintf(err, errlen,
		         "fields 'spec' and 'plan': give one of them: a spec to plan "
		         "and apply, or a saved plan");
		return ERR_INVALID;
	}
	return apply_src(st, body, src, 0, out, err, errlen);
}

int fleet_rollback(struct state *st, const json_t *body, json_t **out, char *err, size_t errlen)
{
	struct fleet *f = fleet_of(st);
	int64_t id = jv_int(body, "revision", 0);
	const json_t *doc = rev(f, id);
	if (!json_is_object(doc)) {
		snprintf(err, errlen,
		         "field 'revision': there is no revision %lld (revisions: 1 to %d)",
		         (long long)id, f->nrevs);
		return ERR_NOTFOUND;
	}
	return apply_src(st, body, json_object_get(doc, "spec"), id, out, err, errlen);
}

/* ---- joining ---- */

/* Whether the running rollout has n still to upgrade. */
static int in_rollout(struct fleet *f, const char *name)
{
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(rollout_of(f, f->active), "nodes"), i, e)
		if (strcmp(str(e, "name"), name) == 0)
			return phase_of(e) != FLEET_DONE;
	return 0;
}

void fleet_node_joined(struct state *st, struct node *n)
{
	struct fleet *f = fleet_of(st);
	const json_t *member = f ? json_object_get(f->members, n->name) : NULL;
	if (!member || n->profile || n->fleet_removed || in_rollout(f, n->name))
		return;
	json_t *patch = json_deep_copy(json_object_get(member, "labels"));
	const char *k;
	json_t *v;
	json_object_foreach (n->labels, k, v)
		if (!json_object_get(patch, k))
			json_object_set_new(patch, k, json_null());
	state_node_relabel(st, n, patch, str(member, "pool"), 1);
	json_decref(patch);
	state_event(st, "fleet.node", 0, n->id,
	            "node %s joined: fleet revision %d gives it pool %s, its labels and profile %s",
	            n->name, f->nrevs, str(member, "pool"), str(member, "profile"));
	nodes_set_profile(st, n, json_object_get(f->profiles, str(member, "profile")));
}

/* ---- views ---- */

static json_t *revision_brief(const json_t *doc)
{
	json_t *o = json_pack(
	        "{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "id", json_object_get(doc, "id"), "time_ms",
	        json_object_get(doc, "time_ms"), "who", json_object_get(doc, "who"), "fleet",
	        json_object_get(doc, "fleet"), "summary", json_object_get(doc, "summary"), "result",
	        json_object_get(doc, "result"), "rollback_of", json_object_get(doc, "rollback_of"),
	        "file", json_object_get(doc, "file") ? json_object_get(doc, "file") : json_null());
	const json_t *ro = json_object_get(doc, "rollout");
	json_object_set_new(o, "rollout",
	                    json_is_object(ro) ? json_pack("{s:O,s:O,s:O}", "state",
	                                                   json_object_get(ro, "state"), "done",
	                                                   json_object_get(ro, "done"), "total",
	                                                   json_object_get(ro, "total"))
	                                       : json_null());
	return o;
}

json_t *fleet_revisions(struct state *st, int limit)
{
	struct fleet *f = fleet_of(st);
	json_t *arr = json_array();
	for (int64_t id = f->nrevs; id >= 1 && (int)json_array_size(arr) < limit; id--)
		if (json_is_object(rev(f, id)))
			json_array_append_new(arr, revision_brief(rev(f, id)));
	return arr;
}

json_t *fleet_revision(struct state *st, int64_t id)
{
	const json_t *doc = rev(fleet_of(st), id);
	return json_is_object(doc) ? json_deep_copy(doc) : NULL;
}

static json_t *member_status(struct state *st, const json_t *member)
{
	struct node *n = fleet_node_named(st, str(member, "name"));
	if (!n)
		return json_pack("{s:s,s:b,s:s,s:s,s:s}", "name", str(member, "name"), "joined", 0,
		                 "profile", str(member, "profile"), "state", "not joined", "reason",
		                 "waiting for its agent to join");
	return json_pack("{s:s,s:b,s:s,s:s,s:s,s:o}", "name", n->name, "joined", 1, "profile",
	                 jv_str(n->profile, "name", ""), "state", node_shown_state(n), "reason",
	                 n->hold[0] && n->admin == NODE_READY ? n->hold : n->admin_reason,
	                 "profile_state",
	                 n->profile_status ? json_string(jv_str(n->profile_status, "state", ""))
	                                   : json_null());
}

json_t *fleet_status(struct state *st)
{
	struct fleet *f = fleet_of(st);
	json_t *nodes = json_array();
	size_t i;
	json_t *m;
	json_array_foreach (json_object_get(f->spec, "nodes"), i, m)
		json_array_append_new(nodes, member_status(st, m));
	json_t *rollout = json_null();
	for (int64_t id = f->nrevs; id >= 1 && json_is_null(rollout); id--)
		if (rollout_of(f, id)) {
			rollout = json_deep_copy(rollout_of(f, id));
			json_object_del(rollout, "profiles");
			json_object_set_new(rollout, "revision", json_integer(id));
		}
	const json_t *cur = rev(f, f->nrevs);
	return json_pack("{s:o,s:o,s:o}", "revision",
	                 json_is_object(cur) ? revision_brief(cur) : json_null(), "rollout",
	                 rollout, "nodes", nodes);
}

/* Each observed node's address in the applied spec, as "spec_address". */
static void spec_addresses(const struct fleet *f, json_t *obs)
{
	size_t i, k;
	json_t *n, *m;
	json_array_foreach (json_object_get(obs, "nodes"), i, n)
		json_array_foreach (json_object_get(f->spec, "nodes"), k, m)
			if (strcmp(str(m, "name"), str(n, "name")) == 0 && *str(m, "address")) {
				json_object_set(n, "spec_address", json_object_get(m, "address"));
				break;
			}
}

json_t *fleet_refresh(struct state *st)
{
	json_t *obs = fleet_observed(st);
	spec_addresses(fleet_of(st), obs);
	json_t *drift = fleet_drift(obs);
	json_object_set(drift, "revision", json_object_get(obs, "revision"));
	json_decref(obs);
	return drift;
}
