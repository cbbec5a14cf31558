/* verb_fleet.c - `anvil fleet`: the fleet as code (docs/fleet.md).
 *
 *   check [--json] FILE          compile a spec, every error as FILE:LINE:COLUMN;
 *                                no server
 *   plan [--json] [--out PLAN] FILE   POST /v1/fleet/plan: what applying it
 *                                would change; --out saves it for apply
 *   apply FILE | PLAN            POST /v1/fleet/apply: a spec (planned and
 *                                carried out), or a saved plan (carried out
 *                                only if the cluster did not change since);
 *                                then follows the rollout and the nodes
 *   refresh                      GET /v1/fleet/refresh: drift, nothing changed
 *   history [REV]                GET /v1/fleet/revisions[/REV]
 *   rollback REV                 POST /v1/fleet/rollback, followed as apply
 *   status                       GET /v1/fleet/status
 *   stop                         POST /v1/fleet/stop: the running rollout stops
 *   bootstrap FILE | ADDR[=NAME]...   installs and starts the agent on
 *                                machines over SSH (cli/fleetboot.h)
 *
 * A spec is compiled here first (its errors with their positions), then
 * sent as the YAML reads it; the server compiles it again. A saved plan is
 * a JSON file ({"format": "anvil-fleet-plan", ...}) holding the spec, the
 * plan and the fingerprint of the cluster it was made against. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/util.h"
#include "base/ydoc.h"
#include "cli/cli.h"
#include "cli/fleetboot.h"
#include "cli/fleetshow.h"
#include "cli/verb.h"
#include "fleet/spec.h"

#define FLEET_FILE_MAX (4 << 20) /* a spec is text a person wrote */
#define FLEET_ERRS_MAX (64 << 10)
#define PLAN_FORMAT    "anvil-fleet-plan"
#define POLL_MS        500
#define WAIT_DEFAULT   (30 * 60 * 1000) /* --timeout */

static const struct cliargs_opt opts[] = {
        {"json", 0, CLIARGS_FLAG, NULL,
         "print JSON: the compiled spec, the server's answer, or each machine bootstrapped"},
        {"out", 'o', CLIARGS_STR, "PLAN", "plan: save the plan to PLAN for `apply PLAN`"},
        {"who", 0, CLIARGS_STR, "NAME",
         "apply, rollback, stop: who does it, for the history (default $USER)"},
        {"no-wait", 0, CLIARGS_FLAG, NULL,
         "apply, rollback: return once applied; do not follow the rollout"},
        {"timeout", 0, CLIARGS_DURATION, "DUR",
         "apply, rollback: stop following after DUR (default 30m); the rollout goes on; "
         "bootstrap: wait for the nodes to register for DUR (default 2m)"},
        {"agent-server", 0, CLIARGS_STR, "URL",
         "bootstrap: the URL the agents join (default: the server this command uses)"},
        {"join-token-file", 0, CLIARGS_STR, "FILE",
         "bootstrap: the join token (default: the server's, when it runs here)"},
        {"node", 0, CLIARGS_STR, "NAMES",
         "bootstrap: only these nodes of the spec (a,b or a-[01-04])"},
        {"group", 0, CLIARGS_STR, "GROUPS", "bootstrap: only the nodes of these groups (a,b)"},
        {"ssh-user", 0, CLIARGS_STR, "USER", "bootstrap: log in as USER (default: ssh's)"},
        {"ssh-port", 0, CLIARGS_INT, "PORT", "bootstrap: ssh to PORT (default: ssh's, 22)"},
        {"identity", 'i', CLIARGS_STR, "KEY", "bootstrap: ssh's -i: the private key"},
        {"ssh-option", 0, CLIARGS_KV, "KEY=VALUE",
         "bootstrap: passed to ssh as -o KEY=VALUE (repeatable; these come first, so they "
         "win)"},
        {"sudo", 0, CLIARGS_FLAG, NULL, "bootstrap: run the steps with sudo -n (not as root)"},
        {"parallel", 0, CLIARGS_INT, "N", "bootstrap: machines at once (default 10)"},
        {"dry-run", 0, CLIARGS_FLAG, NULL,
         "bootstrap: inspect each machine and say what would change; change nothing"},
        {"binary", 0, CLIARGS_STR, "PATH", "bootstrap: the anvil to install (default: this one)"},
        {"prefix", 0, CLIARGS_STR, "DIR", "bootstrap: the binary's directory (/usr/local/bin)"},
        {"config-dir", 0, CLIARGS_STR, "DIR",
         "bootstrap: agent.yaml and join.token go here (/etc/anvil)"},
        {"unit-dir", 0, CLIARGS_STR, "DIR", "bootstrap: the systemd unit's (/etc/systemd/system)"},
        {"work-dir", 0, CLIARGS_STR, "DIR",
         "bootstrap: the agent's work-dir (/var/lib/anvil/agent)"},
        {"agent-option", 0, CLIARGS_KV, "KEY=VALUE",
         "bootstrap: one more line of agent.yaml (repeatable): log-level=debug, listen=..."},
        {NULL, 0, 0, NULL, NULL},
};

/* ---- files ---- */

/* FILE's text ("-": stdin), or NULL with why printed. */
static char *read_text(const char *path, size_t *len)
{
	struct buf text;
	buf_init(&text);
	int rc = read_file(strcmp(path, "-") == 0 ? "/dev/stdin" : path, FLEET_FILE_MAX, &text);
	if (rc) {
		fprintf(stderr, "anvil fleet: cannot read %s: %s\n", path,
		        rc == -EFBIG ? "larger than 4 MiB" : strerror(-rc));
		buf_cleanup(&text);
		return NULL;
	}
	*len = text.len;
	return text.data ? text.data : xstrdup("");
}

/* The spec text compiled (every error printed, then NULL). */
static json_t *compile_text(const char *path, const char *text, size_t len)
{
	char *errs = xmalloc(FLEET_ERRS_MAX);
	json_t *fleet = fleet_compile_yaml(path, text, len, errs, FLEET_ERRS_MAX);
	if (!fleet)
		fputs(errs, stderr);
	free(errs);
	return fleet;
}

/* The spec as the YAML reads it: what the server takes. */
static json_t *source_of(const char *text, size_t len)
{
	struct ydoc doc;
	char err[256];
	if (ydoc_parse(text, len, &doc, err, sizeof(err)))
		return NULL;
	json_t *root = json_incref(doc.root);
	ydoc_free(&doc);
	return root;
}

/* A spec file checked here and ready to send: {"spec", "text", "file"};
 * NULL with why printed. */
static json_t *spec_body(const char *path, const char *text, size_t len)
{
	json_t *compiled = compile_text(path, text, len);
	if (!compiled)
		return NULL;
	json_decref(compiled);
	json_t *src = source_of(text, len);
	if (!src)
		return NULL;
	return json_pack("{s:o,s:s%,s:s}", "spec", src, "text", text, len, "file", path);
}

/* A saved plan, when the file is one; NULL when it is not (a spec). */
static json_t *saved_plan(const char *text, size_t len)
{
	json_t *o = json_loadb(text, len, 0, NULL);
	if (json_is_object(o) && strcmp(verb_str(o, "format"), PLAN_FORMAT) == 0)
		return o;
	json_decref(o);
	return NULL;
}

/* A saved plan's spec as its YAML text reads, in the text's key order:
 * plan files that earlier versions wrote with sorted keys hold the same
 * spec in another order, which compiles to other lists. -1 with why
 * printed when the text is not the spec: one of them was edited. A plan
 * without its text keeps its spec as it is (*out may be NULL: none). */
static int saved_spec(const char *path, const json_t *saved, json_t **out)
{
	const json_t *spec = json_object_get(saved, "spec");
	const char *text = json_string_value(json_object_get(saved, "text"));
	*out = json_incref((json_t *)spec);
	if (!text || !json_is_object(spec))
		return 0;
	json_t *src = source_of(text, strlen(text));
	if (src && json_equal(src, spec)) {
		json_decref(*out);
		*out = src;
		return 0;
	}
	json_decref(src);
	fprintf(stderr,
	        "anvil fleet: %s: field 'spec' is not what field 'text' reads as: the plan "
	        "file was edited; make a new plan and review it\n",
	        path);
	return -1;
}

static void add_who(struct verb_ctx *v, json_t *body)
{
	const char *who = cliargs_str(&v->args, "who");
	if (!who)
		who = getenv("USER");
	if (who && *who)
		json_object_set_new(body, "who", json_string(who));
}

/* ---- check, plan ---- */

static int check(struct verb_ctx *v, const char *path)
{
	size_t len;
	char *text = read_text(path, &len);
	json_t *fleet = text ? compile_text(path, text, len) : NULL;
	free(text);
	if (!fleet)
		return CLI_EXIT_FAILED;
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(fleet);
	} else {
		size_t nodes = json_array_size(json_object_get(fleet, "nodes"));
		size_t groups = json_array_size(json_object_get(fleet, "groups"));
		printf("fleet %s: %zu node%s in %zu group%s: ok\n",
		       json_string_value(json_object_get(fleet, "name")), nodes,
		       nodes == 1 ? "" : "s", groups, groups == 1 ? "" : "s");
	}
	json_decref(fleet);
	return CLI_EXIT_OK;
}

static void print_plan(const json_t *plan)
{
	struct buf out;
	buf_init(&out);
	fleetshow_plan(plan, &out);
	fputs(out.data, stdout);
	buf_cleanup(&out);
}

/* Writes the plan file: the spec, its text, the plan and what it was made
 * against. */
static int save_plan(struct verb_ctx *v, const char *out, const json_t *body, const json_t *resp)
{
	json_t *f =
	        json_pack("{s:s,s:i,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:s,s:I}", "format", PLAN_FORMAT,
	                  "version", 1, "file", json_object_get(body, "file"), "text",
	                  json_object_get(body, "text"), "spec", json_object_get(body, "spec"),
	                  "revision", json_object_get(resp, "revision"), "fingerprint",
	                  json_object_get(resp, "fingerprint"), "digest",
	                  json_object_get(resp, "digest"), "plan", json_object_get(resp, "plan"),
	                  "server", v->conn.server, "made_ms", (json_int_t)wall_ms());
	/* Keys stay in the order they came: the spec's are the YAML's, and a
	 * spec compiles to lists in that order (groups, nodes, queues), which
	 * the reviewed plan and the rollout's order follow. Sorted, the same
	 * spec would plan otherwise, and its plan would read as edited. */
	char *text = json_dumps(f, JSON_INDENT(1));
	json_decref(f);
	int rc = text ? write_file_atomic(out, text, strlen(text), 0644) : -ENOMEM;
	free(text);
	if (rc) {
		fprintf(stderr, "anvil fleet: cannot write %s: %s\n", out, strerror(-rc));
		return CLI_EXIT_FAILED;
	}
	if (!cliargs_flag(&v->args, "json"))
		printf("plan saved to %s: apply it with `anvil fleet apply %s`\n", out, out);
	return CLI_EXIT_OK;
}

static int plan(struct verb_ctx *v, const char *path)
{
	size_t len;
	char *text = read_text(path, &len);
	json_t *body = text ? spec_body(path, text, len) : NULL;
	free(text);
	if (!body)
		return CLI_EXIT_FAILED;
	int ret = verb_connect(v);
	json_t *resp = NULL, *req = json_pack("{s:O}", "spec", json_object_get(body, "spec"));
	if (ret == CLI_EXIT_OK)
		ret = cliconn_call(&v->conn, "POST", "/v1/fleet/plan", req, &resp);
	if (ret == CLI_EXIT_OK) {
		if (cliargs_flag(&v->args, "json"))
			verb_print_json(resp);
		else
			print_plan(json_object_get(resp, "plan"));
		if (cliargs_str(&v->args, "out"))
			ret = save_plan(v, cliargs_str(&v->args, "out"), body, resp);
	}
	json_decref(resp);
	json_decref(req);
	json_decref(body);
	return ret;
}

/* ---- apply, rollback: following ---- */

/* The nodes an apply's progress follows: those whose profile it changed or
 * whose agent it asked to converge again. */
static json_t *watched(const json_t *plan)
{
	json_t *w = json_object();
	size_t i;
	json_t *c;
	json_array_foreach (json_object_get(json_object_get(plan, "nodes"), "change"), i, c)
		if (json_object_get(c, "profile") || json_object_get(c, "reconverge"))
			json_object_set_new(w, verb_str(c, "name"), json_true());
	return w;
}

/* Whether the followed apply is over: its rollout (if any) no longer
 * runs, and no watched node converges still. *failed: the rollout stopped,
 * or a watched node is held. */
static int settled(const json_t *status, int64_t revision, const json_t *watch, int *failed)
{
	const json_t *ro = json_object_get(status, "rollout");
	int mine = verb_int(ro, "revision", 0) == revision;
	if (mine && strcmp(verb_str(ro, "state"), "running") == 0)
		return 0;
	*failed = mine && strcmp(verb_str(ro, "state"), "stopped") == 0;
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(status, "nodes"), i, n) {
		if (!json_object_get(watch, verb_str(n, "name")))
			continue;
		const char *st = verb_str(n, "state");
		if (strcmp(st, "converging") == 0)
			return 0;
		*failed |= strcmp(st, "held") == 0;
	}
	return 1;
}

static int follow(struct verb_ctx *v, int64_t revision, const json_t *plan)
{
	const struct cliargs_value *t = cliargs_get(&v->args, "timeout");
	int64_t deadline = now_ms() + (t->set ? t->num : WAIT_DEFAULT);
	json_t *watch = watched(plan), *seen = json_object();
	int ret = CLI_EXIT_OK, failed = 0;
	for (;;) {
		json_t *status = NULL;
		ret = cliconn_call(&v->conn, "GET", "/v1/fleet/status", NULL, &status);
		if (ret != CLI_EXIT_OK)
			break;
		struct buf out;
		buf_init(&out);
		fleetshow_progress(status, revision, watch, seen, &out);
		fputs(out.data ? out.data : "", stdout);
		fflush(stdout);
		buf_cleanup(&out);
		int over = settled(status, revision, watch, &failed);
		const json_t *ro = json_object_get(status, "rollout");
		if (over && verb_int(ro, "revision", 0) == revision)
			printf("rollout of revision %lld: %s%s%s\n", (long long)revision,
			       verb_str(ro, "state"), *verb_str(ro, "reason") ? ": " : "",
			       verb_str(ro, "reason"));
		json_decref(status);
		if (over) {
			ret = failed ? CLI_EXIT_FAILED : CLI_EXIT_OK;
			break;
		}
		if (now_ms() >= deadline) {
			fprintf(stderr,
			        "anvil fleet: still going after --timeout; it goes on without us: "
			        "`anvil fleet status` follows it\n");
			ret = CLI_EXIT_FAILED;
			break;
		}
		sleep_ms(POLL_MS);
	}
	json_decref(watch);
	json_decref(seen);
	return ret;
}

/* POSTs an apply or rollback body and reports it; follows it unless
 * --no-wait or --json. */
static int carry_out(struct verb_ctx *v, const char *path, json_t *body)
{
	add_who(v, body);
	int ret = verb_connect(v);
	json_t *resp = NULL;
	if (ret == CLI_EXIT_OK) /* a revision: made once, however often sent */
		ret = cliconn_create(&v->conn, "POST", path, body, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	int64_t revision = verb_int(resp, "revision", 0);
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(resp);
	} else {
		if (revision > 0) /* what it changed; else the message says there was nothing */
			print_plan(json_object_get(resp, "plan"));
		printf("%s\n", verb_str(resp, "message"));
		size_t i;
		json_t *f;
		json_array_foreach (json_object_get(resp, "failed"), i, f)
			fprintf(stderr, "anvil fleet: %s\n", json_string_value(f));
		if (json_array_size(json_object_get(resp, "failed")))
			ret = CLI_EXIT_FAILED;
	}
	if (ret == CLI_EXIT_OK && revision > 0 && !cliargs_flag(&v->args, "no-wait") &&
	    !cliargs_flag(&v->args, "json"))
		ret = follow(v, revision, json_object_get(resp, "plan"));
	json_decref(resp);
	return ret;
}

static int apply(struct verb_ctx *v, const char *path)
{
	size_t len;
	char *text = read_text(path, &len);
	if (!text)
		return CLI_EXIT_FAILED;
	json_t *saved = saved_plan(text, len), *body = NULL, *spec = NULL;
	if (saved && saved_spec(path, saved, &spec) == 0) {
		/* the reviewed changes go too: the server applies them only if its
		 * spec still gives exactly these */
		body = json_pack("{s:{s:O?,s:O?,s:O?,s:O?},s:O?,s:O?}", "plan", "spec", spec,
		                 "fingerprint", json_object_get(saved, "fingerprint"), "digest",
		                 json_object_get(saved, "digest"), "plan",
		                 json_object_get(saved, "plan"), "text",
		                 json_object_get(saved, "text"), "file",
		                 json_object_get(saved, "file"));
		static const char *const optional[] = {"text", "file"};
		for (size_t i = 0; body && i < 2; i++)
			if (!json_is_string(json_object_get(body, optional[i])))
				json_object_del(body, optional[i]);
		if (!body)
			fprintf(stderr, "anvil fleet: %s is not a plan file anvil made\n", path);
	}
	if (saved) {
		json_decref(spec);
		json_decref(saved);
	} else {
		body = spec_body(path, text, len);
	}
	free(text);
	if (!body)
		return CLI_EXIT_FAILED;
	int ret = carry_out(v, "/v1/fleet/apply", body);
	json_decref(body);
	return ret;
}

static int rollback(struct verb_ctx *v, const char *rev)
{
	int64_t id;
	if (parse_i64(rev, 1, INT64_MAX, &id))
		return verb_usage_error(v, "rollback: '%s' is not a revision number", rev);
	json_t *body = json_pack("{s:I}", "revision", (json_int_t)id);
	int ret = carry_out(v, "/v1/fleet/rollback", body);
	json_decref(body);
	return ret;
}

/* ---- views ---- */

static void print_history(const json_t *revs, int64_t now_ms, struct buf *out)
{
	fleetshow_history(revs, now_ms, out);
}

static int history(struct verb_ctx *v, const char *rev)
{
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	if (!rev)
		return verb_get_print(v, "/v1/fleet/revisions", "revisions", print_history);
	int64_t id;
	if (parse_i64(rev, 1, INT64_MAX, &id))
		return verb_usage_error(v, "history: '%s' is not a revision number", rev);
	char path[64];
	snprintf(path, sizeof(path), "/v1/fleet/revisions/%lld", (long long)id);
	return verb_get_print(v, path, "revision", fleetshow_revision);
}

static void print_refresh(const json_t *d, int64_t now_ms, struct buf *out)
{
	(void)now_ms;
	fleetshow_refresh(d, out);
}

static int view(struct verb_ctx *v, const char *path, verb_render_fn render)
{
	int ret = verb_connect(v);
	return ret == CLI_EXIT_OK ? verb_get_print(v, path, NULL, render) : ret;
}

static int stop(struct verb_ctx *v)
{
	json_t *body = json_object(), *resp = NULL;
	add_who(v, body);
	int ret = verb_connect(v);
	if (ret == CLI_EXIT_OK)
		ret = cliconn_call(&v->conn, "POST", "/v1/fleet/stop", body, &resp);
	if (ret == CLI_EXIT_OK && cliargs_flag(&v->args, "json"))
		verb_print_json(resp);
	else if (ret == CLI_EXIT_OK)
		printf("rollout of revision %lld stopped: nodes it had out stay out (anvil fleet "
		       "status)\n",
		       (long long)verb_int(resp, "revision", 0));
	json_decref(resp);
	json_decref(body);
	return ret;
}

/* ---- dispatch ---- */

struct sub {
	const char *name;
	int npos; /* positionals after the subcommand: 1, 0, -1 (0 or 1), or -2 (1 or more) */
	const char *usage;
};

static const struct sub subs[] = {
        {"check", 1, "FILE"}, {"plan", 1, "FILE"},      {"apply", 1, "FILE or PLAN"},
        {"refresh", 0, ""},   {"history", -1, "[REV]"}, {"rollback", 1, "REV"},
        {"status", 0, ""},    {"stop", 0, ""},          {"bootstrap", -2, "FILE or ADDR..."},
};

static int fleet_fn(struct verb_ctx *v)
{
	const char *sub = v->args.pos[0], *arg = v->args.npos > 1 ? v->args.pos[1] : NULL;
	const struct sub *s = NULL;
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (strcmp(sub, subs[i].name) == 0)
			s = &subs[i];
	if (!s)
		return verb_usage_error(v,
		                        "unknown subcommand '%s' (check, plan, apply, refresh, "
		                        "history, rollback, status, stop, bootstrap)",
		                        sub);
	if (s->npos == -2)
		return arg ? fleetboot_run(v)
		           : verb_usage_error(
		                     v, "fleet bootstrap takes a spec FILE or ADDR[=NAME]...");
	if (v->args.npos > 2)
		return verb_usage_error(v, "unexpected argument \"%s\"", v->args.pos[2]);
	if ((s->npos == 1 && !arg) || (s->npos == 0 && arg))
		return verb_usage_error(
		        v, "fleet %s takes %s", sub,
		        s->npos ? (strcmp(sub, "rollback") == 0 ? "one REV" : "one FILE")
		                : "no argument");
	if (strcmp(sub, "check") == 0)
		return check(v, arg);
	if (strcmp(sub, "plan") == 0)
		return plan(v, arg);
	if (strcmp(sub, "apply") == 0)
		return apply(v, arg);
	if (strcmp(sub, "rollback") == 0)
		return rollback(v, arg);
	if (strcmp(sub, "history") == 0)
		return history(v, arg);
	if (strcmp(sub, "refresh") == 0)
		return view(v, "/v1/fleet/refresh", print_refresh);
	if (strcmp(sub, "status") == 0)
		return view(v, "/v1/fleet/status", fleetshow_status);
	return stop(v);
}

const struct verb verb_fleet = {
        .name = "fleet",
        .fn = fleet_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 1 + FLEET_MAX_NODES, /* bootstrap ADDR...; the others take at most 1 */
        .usage = "check [--json] FILE\n"
                 "   or: anvil fleet plan [--json] [--out PLAN] FILE\n"
                 "   or: anvil fleet apply [--who NAME] [--no-wait] [--timeout DUR] FILE|PLAN\n"
                 "   or: anvil fleet rollback [--who NAME] [--no-wait] REV\n"
                 "   or: anvil fleet refresh | status | history [REV] | stop\n"
                 "   or: anvil fleet bootstrap [options] FILE | ADDR[=NAME]...",
        .summary = "the fleet as code: check, plan, apply, roll back a cluster spec; bootstrap "
                   "nodes over SSH",
        .help = "check FILE     compiles the cluster spec FILE (YAML; - reads stdin) and prints\n"
                "               every error as FILE:LINE:COLUMN: PATH: what is wrong, or\n"
                "               \"fleet NAME: N nodes in M groups: ok\"; --json prints the\n"
                "               compiled form. Needs no server.\n"
                "plan FILE      what applying FILE would change: nodes to add (waiting for\n"
                "               their agents), to remove (drained, kept drained), to change\n"
                "               (pool, labels, profile; whether it needs a drain), queues and\n"
                "               teams. --out PLAN saves it for review and `apply PLAN`.\n"
                "apply FILE     plans and carries it out, records a revision, then follows the\n"
                "               rolling upgrade and the nodes node by node. apply PLAN carries\n"
                "               out a saved plan, and refuses, naming what changed, when the\n"
                "               cluster changed since it was made. The same spec twice: no\n"
                "               changes. Exit 1 when a rollout stops or a node is held.\n"
                "refresh        nodes whose agent reports their profile failed or drifted,\n"
                "               or whose facts differ from it; changes nothing.\n"
                "history [REV]  the revisions: when, who, what changed, how it went; REV shows\n"
                "               one with the spec as it was applied.\n"
                "rollback REV   applies revision REV's spec again, as apply does.\n"
                "status         the revision, its rollout node by node, nodes not ready.\n"
                "stop           stops the running rollout where it is.\n"
                "bootstrap FILE installs and starts the agent over SSH on every node of the\n"
                "               spec FILE (its groups' addresses; --node, --group pick some),\n"
                "               or on each ADDR[=NAME]: the binary, agent.yaml, the join token\n"
                "               (0600, sent on ssh's stdin) and the systemd unit, then\n"
                "               `anvil agent --check-config` and systemctl enable --now (no\n"
                "               systemd there: the agent detached). A rerun changes what\n"
                "               differs only. Each machine's steps: ok, changed or failed with\n"
                "               why; then each node as it registers. Exit 1 when one failed.\n"
                "\n"
                "The file's reference and the workflow (edit, plan, review, apply) are in\n"
                "docs/fleet.md; examples/fleet/reference.yaml is the reference fleet.\n",
};
