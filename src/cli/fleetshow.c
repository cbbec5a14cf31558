/* fleetshow.c - the fleet verbs' human output (fleetshow.h). */
#include "cli/fleetshow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/schema.h"
#include "cli/clitable.h"
#include "cli/verb.h"

static const char *s_of(const json_t *o, const char *key)
{
	return verb_str(o, key);
}

/* A value as a person reads it: text as it is, null as "none", the rest
 * as compact JSON. */
static void value(struct buf *out, const json_t *v)
{
	if (json_is_string(v)) {
		verb_add_clean(out, json_string_value(v));
		return;
	}
	if (!v || json_is_null(v)) {
		buf_adds(out, "none");
		return;
	}
	char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
	verb_add_clean(out, t ? t : "?");
	free(t);
}

static void clean(struct buf *out, const char *s)
{
	verb_add_clean(out, s);
}

/* A text of many lines (a spec's YAML) as it was written: its line ends
 * and tabs kept (a CR before a line end dropped), every other control
 * character '?', so that what the server sends cannot drive the terminal. */
static void clean_lines(struct buf *out, const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '\r' && s[1] == '\n')
			continue;
		buf_add(out, (ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f ? "?" : s, 1);
	}
}

/* "key from -> to" changes, joined by ", ". */
static void changes(struct buf *out, const json_t *list, int with_drain)
{
	size_t i;
	json_t *c;
	json_array_foreach (list, i, c) {
		buf_adds(out, i ? ", " : "");
		clean(out, s_of(c, "key"));
		buf_adds(out, " ");
		value(out, json_object_get(c, "from"));
		buf_adds(out, " -> ");
		value(out, json_object_get(c, "to"));
		if (with_drain && json_is_true(json_object_get(c, "drain")))
			buf_adds(out, " (needs a drain)");
	}
}

/* ---- plan ---- */

static void node_add(struct buf *out, const json_t *a)
{
	buf_adds(out, "  + ");
	clean(out, s_of(a, "name"));
	buf_adds(out, "  group ");
	clean(out, s_of(a, "group"));
	buf_adds(out, ", pool ");
	clean(out, s_of(a, "pool"));
	buf_adds(out, ", profile ");
	clean(out, s_of(a, "profile"));
	if (*s_of(a, "address")) {
		buf_adds(out, ", address ");
		clean(out, s_of(a, "address"));
	}
	buf_adds(out, "\n");
}

static void labels_change(struct buf *out, const json_t *l)
{
	const char *k;
	json_t *v;
	int first = 1;
	buf_adds(out, "labels: ");
	json_object_foreach ((json_t *)json_object_get(l, "set"), k, v) {
		buf_adds(out, first ? "set " : ", set ");
		clean(out, k);
		buf_adds(out, "=");
		value(out, v);
		first = 0;
	}
	size_t i;
	json_array_foreach (json_object_get(l, "remove"), i, v) {
		buf_adds(out, first ? "remove " : ", remove ");
		value(out, v);
		first = 0;
	}
}

static void node_change(struct buf *out, const json_t *c)
{
	const char *pad = "             ";
	buf_adds(out, "  ~ ");
	clean(out, s_of(c, "name"));
	buf_adds(out, "\n");
	if (json_is_true(json_object_get(c, "restore")))
		buf_printf(out, "%sback in the spec: returned to service\n", pad);
	const json_t *again = json_object_get(c, "reconverge");
	if (again) {
		buf_printf(out, "%sconverge again (in place): ", pad);
		clean(out, s_of(again, "why"));
		buf_adds(out, "\n");
	}
	const json_t *pool = json_object_get(c, "pool");
	if (pool) {
		buf_printf(out, "%spool ", pad);
		value(out, json_object_get(pool, "from"));
		buf_adds(out, " -> ");
		value(out, json_object_get(pool, "to"));
		buf_adds(out, "\n");
	}
	if (json_object_get(c, "labels")) {
		buf_adds(out, pad);
		labels_change(out, json_object_get(c, "labels"));
		buf_adds(out, "\n");
	}
	const json_t *p = json_object_get(c, "profile");
	if (!p)
		return;
	buf_printf(out, "%sprofile ", pad);
	value(out, json_object_get(p, "from"));
	buf_adds(out, " -> ");
	value(out, json_object_get(p, "to"));
	buf_adds(out, json_is_true(json_object_get(p, "drain")) ? " (rolled out: needs a drain): "
	                                                        : " (in place): ");
	changes(out, json_object_get(p, "changes"), 1);
	buf_adds(out, "\n");
}

static void plan_nodes(const json_t *nodes, struct buf *out)
{
	size_t i;
	json_t *e;
	const json_t *add = json_object_get(nodes, "add"), *rm = json_object_get(nodes, "remove");
	const json_t *ch = json_object_get(nodes, "change");
	if (json_array_size(add))
		buf_adds(out, "nodes to add (waiting for their agents to join):\n");
	json_array_foreach (add, i, e)
		node_add(out, e);
	if (json_array_size(rm))
		buf_adds(out, "nodes to remove (drained, then kept drained as not in the spec):\n");
	json_array_foreach (rm, i, e) {
		buf_adds(out, "  - ");
		clean(out, s_of(e, "name"));
		buf_adds(out, "\n");
	}
	if (json_array_size(ch))
		buf_adds(out, "nodes to change:\n");
	json_array_foreach (ch, i, e)
		node_change(out, e);
}

/* A queue's or team's settings as a person reads them: "priority 100,
 * borrowing false, default time limit 24h, quotas search=8". */
static void settings(struct buf *out, const json_t *o)
{
	const char *k;
	json_t *v;
	int first = 1;
	json_object_foreach ((json_t *)o, k, v) {
		if (strcmp(k, "name") == 0)
			continue;
		buf_adds(out, first ? "" : ", ");
		first = 0;
		size_t n = strlen(k);
		int ms = n > 3 && strcmp(k + n - 3, "_ms") == 0 && json_is_integer(v);
		for (size_t i = 0; i < (ms ? n - 3 : n); i++)
			buf_printf(out, "%c", k[i] == '_' ? ' ' : k[i]);
		buf_adds(out, " ");
		if (ms) {
			char t[32];
			schema_duration_text(json_integer_value(v), t, sizeof(t));
			buf_adds(out, t);
		} else if (json_is_object(v)) {
			const char *team;
			json_t *g;
			int one = 1;
			json_object_foreach (v, team, g) {
				buf_adds(out, one ? "" : " ");
				one = 0;
				clean(out, team);
				buf_adds(out, "=");
				value(out, g);
			}
			if (one)
				buf_adds(out, "none");
		} else {
			value(out, v);
		}
	}
}

/* Queues or teams: "+ NAME  settings" and "~ NAME  changes". */
static void plan_section(const char *title, const json_t *s, struct buf *out)
{
	if (!json_array_size(json_object_get(s, "add")) &&
	    !json_array_size(json_object_get(s, "change")))
		return;
	buf_printf(out, "%s:\n", title);
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(s, "add"), i, e) {
		buf_adds(out, "  + ");
		clean(out, s_of(e, "name"));
		buf_adds(out, "  ");
		settings(out, e);
		buf_adds(out, "\n");
	}
	json_array_foreach (json_object_get(s, "change"), i, e) {
		buf_adds(out, "  ~ ");
		clean(out, s_of(e, "name"));
		buf_adds(out, "  ");
		changes(out, json_object_get(e, "changes"), 0);
		buf_adds(out, "\n");
	}
}

static void plan_rollout(const json_t *plan, struct buf *out)
{
	size_t n = json_array_size(json_object_get(plan, "drain"));
	if (!n)
		return;
	const json_t *up = json_object_get(plan, "upgrade");
	char t[32];
	schema_duration_text(verb_int(up, "validation_timeout_ms", 0), t, sizeof(t));
	buf_printf(out,
	           "rolling upgrade: %zu node%s, at most %lld out at once and %lld per block; "
	           "each cordoned, drained, converged, checked within %s, uncordoned\n",
	           n, n == 1 ? "" : "s", (long long)verb_int(up, "max_unavailable", 1),
	           (long long)verb_int(up, "max_unavailable_per_block", 1), t);
}

void fleetshow_plan(const json_t *plan, struct buf *out)
{
	buf_adds(out, "fleet ");
	clean(out, s_of(plan, "fleet"));
	int64_t rev = verb_int(plan, "revision", 0);
	if (rev > 0)
		buf_printf(out, ": planned against revision %lld\n", (long long)rev);
	else
		buf_adds(out, ": planned against a cluster no spec was applied to\n");
	plan_nodes(json_object_get(plan, "nodes"), out);
	plan_section("queues", json_object_get(plan, "queues"), out);
	plan_section("teams", json_object_get(plan, "teams"), out);
	plan_rollout(plan, out);
	int64_t n = verb_int(plan, "changes", 0);
	int spec = json_is_true(json_object_get(plan, "spec_changed"));
	if (n)
		buf_printf(out, "%lld change%s%s.\n", (long long)n, n == 1 ? "" : "s",
		           spec ? "" : " (the spec is the one applied: these undo drift)");
	else if (spec)
		buf_adds(out,
		         "no changes to the cluster; the spec differs from the one applied and "
		         "becomes a new revision.\n");
	else
		buf_adds(out, "no changes: the cluster matches the spec.\n");
}

/* ---- refresh ---- */

void fleetshow_refresh(const json_t *d, struct buf *out)
{
	const json_t *c = json_object_get(d, "counts");
	buf_printf(out,
	           "%lld node%s with a profile: %lld converged, %lld converging, %lld unreported, "
	           "%lld drifted, %lld failed; %lld with facts that differ from it\n",
	           (long long)verb_int(c, "profiled", 0),
	           verb_int(c, "profiled", 0) == 1 ? "" : "s",
	           (long long)verb_int(c, "converged", 0), (long long)verb_int(c, "converging", 0),
	           (long long)verb_int(c, "unreported", 0), (long long)verb_int(c, "drifted", 0),
	           (long long)verb_int(c, "failed", 0), (long long)verb_int(c, "mismatched", 0));
	const json_t *nodes = json_object_get(d, "nodes");
	if (!json_array_size(nodes)) {
		buf_adds(out, "no drift.\n");
		return;
	}
	struct clitable *t = clitable_new(3, "NODE", "STATE", "DRIFT");
	size_t i, k;
	json_t *n, *issue;
	json_array_foreach (nodes, i, n)
		json_array_foreach (json_object_get(n, "issues"), k, issue) {
			clitable_add(t, "%s", k ? "" : s_of(n, "name"));
			clitable_add(t, "%s", k ? "" : s_of(n, "state"));
			clitable_add(t, "%s", json_string_value(issue));
		}
	clitable_render(t, out);
	clitable_free(t);
}

/* ---- history ---- */

static void result_text(const json_t *r, char *out, size_t n)
{
	int64_t back = verb_int(r, "rollback_of", 0);
	if (back > 0)
		snprintf(out, n, "%s (rollback to %lld)", s_of(r, "result"), (long long)back);
	else
		snprintf(out, n, "%s", s_of(r, "result"));
}

void fleetshow_history(const json_t *revs, int64_t now_ms, struct buf *out)
{
	(void)now_ms;
	if (!json_array_size(revs)) {
		buf_adds(out, "no revisions: no spec was applied yet (anvil fleet apply FILE)\n");
		return;
	}
	struct clitable *t = clitable_new(5, "REV", "APPLIED", "WHO", "RESULT", "CHANGES");
	clitable_right(t, 0);
	size_t i;
	json_t *r;
	json_array_foreach (revs, i, r) {
		char when[40], result[400];
		clitable_time(when, sizeof(when), verb_int(r, "time_ms", 0));
		result_text(r, result, sizeof(result));
		clitable_add(t, "%lld", (long long)verb_int(r, "id", 0));
		clitable_add(t, "%s", when);
		clitable_add(t, "%s", s_of(r, "who"));
		clitable_add(t, "%s", result);
		clitable_add(t, "%s", s_of(r, "summary"));
	}
	clitable_render(t, out);
	clitable_free(t);
}

void fleetshow_revision(const json_t *r, int64_t now_ms, struct buf *out)
{
	(void)now_ms;
	char when[40], result[400];
	clitable_time(when, sizeof(when), verb_int(r, "time_ms", 0));
	result_text(r, result, sizeof(result));
	buf_printf(out, "revision %lld of fleet ", (long long)verb_int(r, "id", 0));
	clean(out, s_of(r, "fleet"));
	buf_printf(out, "\n  applied    %s by ", when);
	clean(out, s_of(r, "who"));
	buf_adds(out, "\n  file       ");
	clean(out, *s_of(r, "file") ? s_of(r, "file") : "-");
	buf_adds(out, "\n  changes    ");
	clean(out, s_of(r, "summary"));
	buf_adds(out, "\n  result     ");
	clean(out, result);
	buf_adds(out, "\n\n");
	if (*s_of(r, "text")) {
		clean_lines(out, s_of(r, "text"));
		if (out->len && out->data[out->len - 1] != '\n')
			buf_adds(out, "\n");
	} else {
		fleetshow_plan(json_object_get(r, "plan"), out);
	}
}

/* ---- status ---- */

static void rollout_table(const json_t *ro, int64_t now_ms, struct buf *out)
{
	struct clitable *t = clitable_new(4, "NODE", "PHASE", "SINCE", "DETAIL");
	clitable_indent(t, 2);
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(ro, "nodes"), i, e) {
		char since[32] = "";
		int64_t at = verb_int(e, "since_ms", 0);
		if (at > 0)
			clitable_duration(since, sizeof(since), now_ms - at);
		clitable_add(t, "%s", s_of(e, "name"));
		clitable_add(t, "%s", s_of(e, "phase"));
		clitable_add(t, "%s", since);
		clitable_add(t, "%s", s_of(e, "detail"));
	}
	clitable_render(t, out);
	clitable_free(t);
}

static void status_rollout(const json_t *ro, int64_t now_ms, struct buf *out)
{
	if (!json_is_object(ro))
		return;
	const json_t *pol = json_object_get(ro, "policy");
	char t[32];
	schema_duration_text(verb_int(pol, "validation_timeout_ms", 0), t, sizeof(t));
	buf_printf(out,
	           "rollout of revision %lld: %s, %lld of %lld node%s done (at most %lld out, "
	           "%lld per block; checks within %s)\n",
	           (long long)verb_int(ro, "revision", 0), s_of(ro, "state"),
	           (long long)verb_int(ro, "done", 0), (long long)verb_int(ro, "total", 0),
	           verb_int(ro, "total", 0) == 1 ? "" : "s",
	           (long long)verb_int(pol, "max_unavailable", 1),
	           (long long)verb_int(pol, "max_unavailable_per_block", 1), t);
	if (*s_of(ro, "reason")) {
		buf_adds(out, "  ");
		clean(out, s_of(ro, "reason"));
		buf_adds(out, "\n");
	}
	rollout_table(ro, now_ms, out);
}

static void status_nodes(const json_t *nodes, struct buf *out)
{
	size_t i, ready = 0, joined = 0;
	json_t *n;
	json_array_foreach (nodes, i, n) {
		ready += strcmp(s_of(n, "state"), "ready") == 0;
		joined += json_is_true(json_object_get(n, "joined"));
	}
	buf_printf(out, "nodes: %zu in the spec, %zu joined, %zu ready\n", json_array_size(nodes),
	           joined, ready);
	if (ready == json_array_size(nodes))
		return;
	struct clitable *t = clitable_new(4, "NODE", "PROFILE", "STATE", "REASON");
	clitable_indent(t, 2);
	json_array_foreach (nodes, i, n) {
		if (strcmp(s_of(n, "state"), "ready") == 0)
			continue;
		clitable_add(t, "%s", s_of(n, "name"));
		clitable_add(t, "%s", s_of(n, "profile"));
		clitable_add(t, "%s", s_of(n, "state"));
		clitable_add(t, "%s", s_of(n, "reason"));
	}
	clitable_render(t, out);
	clitable_free(t);
}

void fleetshow_status(const json_t *s, int64_t now_ms, struct buf *out)
{
	const json_t *r = json_object_get(s, "revision");
	if (!json_is_object(r)) {
		buf_adds(out, "no spec applied yet (anvil fleet apply FILE)\n");
		return;
	}
	char when[40], result[400];
	clitable_time(when, sizeof(when), verb_int(r, "time_ms", 0));
	result_text(r, result, sizeof(result));
	buf_adds(out, "fleet ");
	clean(out, s_of(r, "fleet"));
	buf_printf(out, ", revision %lld (%s by ", (long long)verb_int(r, "id", 0), when);
	clean(out, s_of(r, "who"));
	buf_adds(out, "): ");
	clean(out, result);
	buf_adds(out, "\n");
	status_rollout(json_object_get(s, "rollout"), now_ms, out);
	status_nodes(json_object_get(s, "nodes"), out);
}

/* ---- progress ---- */

/* What a node's line says now: its phase in the rollout of revision (with
 * the detail of a failure), else its state and reason. */
static void node_now(const json_t *status, int64_t revision, const char *name, struct buf *out)
{
	size_t i;
	json_t *e;
	const json_t *ro = json_object_get(status, "rollout");
	if (verb_int(ro, "revision", 0) == revision)
		json_array_foreach (json_object_get(ro, "nodes"), i, e) {
			if (strcmp(s_of(e, "name"), name) != 0)
				continue;
			if (strcmp(s_of(e, "phase"), "queued") == 0)
				buf_adds(out, "queued: waiting for its turn");
			else
				buf_printf(out, "%s%s%s", s_of(e, "phase"),
				           *s_of(e, "detail") ? ": " : "", s_of(e, "detail"));
			return;
		}
	json_array_foreach (json_object_get(status, "nodes"), i, e) {
		if (strcmp(s_of(e, "name"), name) != 0)
			continue;
		buf_printf(out, "%s%s%s", s_of(e, "state"), *s_of(e, "reason") ? ": " : "",
		           s_of(e, "reason"));
	}
}

int fleetshow_progress(const json_t *status, int64_t revision, const json_t *watch, json_t *seen,
                       struct buf *out)
{
	int lines = 0;
	const char *name;
	json_t *v;
	json_object_foreach ((json_t *)watch, name, v) {
		struct buf now;
		buf_init(&now);
		node_now(status, revision, name, &now);
		const char *was = json_string_value(json_object_get(seen, name));
		if (now.len && (!was || strcmp(was, now.data) != 0)) {
			buf_adds(out, "  ");
			clean(out, name);
			buf_adds(out, "  ");
			clean(out, now.data);
			buf_adds(out, "\n");
			json_object_set_new(seen, name, json_string(now.data));
			lines++;
		}
		buf_cleanup(&now);
	}
	return lines;
}
