/* verb_node.c - `anvil node SUB NODE ...`: one node's lifecycle and health.
 *
 *   show      GET  /v1/nodes/NAME            (as `anvil nodes show`)
 *   cordon    POST /v1/nodes/NAME {"state": "cordoned", "reason"}
 *   drain     POST /v1/nodes/NAME {"state": "draining", "reason"}
 *   uncordon  POST /v1/nodes/NAME {"state": "ready", "reason", "force"}
 *   label     POST /v1/nodes/NAME {"labels", "pool"}
 *   check     POST /v1/nodes/NAME/check {"gpus", "gpu_model", "driver_version"}
 *   fault     POST /v1/nodes/NAME/faults {"gpu", "kind", ...}   (sim only)
 *   reset     POST /v1/nodes/NAME/reset      (its secret revoked; re-admitted once)
 *   approve   POST /v1/nodes/NAME/approve    (a new node may take work)
 *   token     GET  /v1/join-token, or POST /v1/join-token/rotate {"ttl_ms"}
 *             (no NODE: the cluster's join token)
 *
 * One option table serves every subcommand; each subcommand names the
 * options it takes, and any other one is a usage error that says which
 * subcommands take it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"
#include "cli/verb_node.h"

/* ---- node check ---- */

void verb_node_check_render(const json_t *result, int64_t now_ms, struct buf *out)
{
	(void)now_ms;
	struct clitable *t = clitable_new(3, "NAME", "OK", "DETAIL");
	size_t i;
	const json_t *c;
	json_array_foreach (json_object_get(result, "checks"), i, c) {
		clitable_add(t, "%s", verb_str(c, "name"));
		clitable_add(t, "%s", json_is_true(json_object_get(c, "ok")) ? "ok" : "FAILED");
		clitable_add(t, "%s", verb_str(c, "detail"));
	}
	clitable_render(t, out);
	clitable_free(t);
	buf_printf(out,
	           "check %s: ", json_is_true(json_object_get(result, "ok")) ? "passed" : "FAILED");
	verb_add_clean(out, verb_str(result, "summary"));
	buf_adds(out, " (backend ");
	verb_add_clean(out, *verb_str(result, "backend") ? verb_str(result, "backend") : "?");
	buf_adds(out, ")\n");
}

/* ---- node fault ---- */

/* A KEY=VALUE word into obj; 0 or ERR_INVALID with the reason in err. */
static int fault_field(json_t *obj, const char *word, char *err, size_t errlen)
{
	const char *eq = strchr(word, '=');
	if (!eq || eq == word || !eq[1]) {
		snprintf(err, errlen, "\"%.80s\" is not KEY=VALUE (e.g. xid=79)", word);
		return ERR_INVALID;
	}
	char *key = xstrndup(word, (size_t)(eq - word));
	int rc = ERR_INVALID;
	int64_t n;
	if (strcmp(key, "gpu") == 0 || strcmp(key, "kind") == 0)
		snprintf(err, errlen, "\"%.80s\": give the GPU with --gpu and the kind as a word",
		         word);
	else if (json_object_get(obj, key))
		snprintf(err, errlen, "\"%.80s\": %.40s is given twice", word, key);
	else if (json_object_set_new(obj, key,
	                             parse_i64(eq + 1, INT64_MIN, INT64_MAX, &n) == 0
	                                     ? json_integer(n)
	                                     : json_string(eq + 1)) == 0)
		rc = 0;
	else
		snprintf(err, errlen, "\"%.80s\" is not UTF-8 text", word);
	free(key);
	return rc;
}

int verb_node_fault_body(int64_t gpu, const char *kind, char *const *kv, int nkv, json_t **out,
                         char *err, size_t errlen)
{
	if (!kind || !*kind || strchr(kind, '=')) {
		snprintf(err, errlen,
		         "KIND: \"%.80s\" is not a fault kind (xid, ecc, temperature, throttle, "
		         "power, load, lost, remap, recovery_action, clear)",
		         kind ? kind : "");
		return ERR_INVALID;
	}
	json_t *obj = json_pack("{s:I,s:s}", "gpu", (json_int_t)gpu, "kind", kind);
	if (!obj) {
		snprintf(err, errlen, "KIND: \"%.80s\" is not UTF-8 text", kind);
		return ERR_INVALID;
	}
	for (int i = 0; i < nkv; i++) {
		if (fault_field(obj, kv[i], err, errlen)) {
			json_decref(obj);
			return ERR_INVALID;
		}
	}
	*out = obj;
	return 0;
}

/* ---- the subcommands ---- */

/* Prints the server's JSON with --json, else "node NAME: STATE (REASON)"
 * and the fault when the node reports one. */
static void print_node_state(const struct verb_ctx *v, const json_t *resp)
{
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(resp);
		return;
	}
	const json_t *node = json_object_get(resp, "node");
	struct buf line;
	buf_init(&line);
	const char *reason = verb_str(node, "reason"), *fault = verb_str(node, "fault");
	buf_printf(&line, "node %s: %s%s", verb_str(node, "name"), verb_str(node, "state"),
	           json_is_true(json_object_get(node, "drained_by_fault")) ? " by a fault" : "");
	if (*reason)
		buf_printf(&line, " (%s)", reason);
	if (*fault && strcmp(fault, reason) != 0)
		buf_printf(&line, "; its agent reports a fault: %s", fault);
	struct buf clean;
	buf_init(&clean);
	verb_add_clean(&clean, line.data);
	printf("%s\n", clean.data);
	buf_cleanup(&clean);
	buf_cleanup(&line);
}

/* POSTs body to /v1/nodes/NAME+tail; the answer in *resp on success. */
static int post(struct verb_ctx *v, const char *name, const char *tail, const json_t *body,
                json_t **resp)
{
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	struct buf path;
	buf_init(&path);
	verb_node_path(&path, name, tail);
	ret = cliconn_call(&v->conn, "POST", path.data, body, resp);
	buf_cleanup(&path);
	return ret;
}

/* POSTs body (consumed) to the node and prints the node's new state. */
static int post_state(struct verb_ctx *v, const char *name, json_t *body)
{
	json_t *resp = NULL;
	int ret = post(v, name, "", body, &resp);
	if (ret == CLI_EXIT_OK)
		print_node_state(v, resp);
	json_decref(body);
	json_decref(resp);
	return ret;
}

static int node_show(struct verb_ctx *v, const char *name)
{
	return verb_node_show(v, name);
}

/* cordon, drain, uncordon: the admin state and its reason. */
static int node_state(struct verb_ctx *v, const char *name)
{
	const char *sub = v->args.pos[0];
	const char *to = strcmp(sub, "cordon") == 0  ? "cordoned"
	                 : strcmp(sub, "drain") == 0 ? "draining"
	                                             : "ready";
	json_t *body = json_pack("{s:s}", "state", to);
	const char *reason = cliargs_str(&v->args, "reason");
	if (reason)
		json_object_set_new(body, "reason", json_string(reason));
	if (cliargs_flag(&v->args, "force"))
		json_object_set_new(body, "force", json_true());
	return post_state(v, name, body);
}

static int node_label(struct verb_ctx *v, const char *name)
{
	json_t *body = json_object(), *labels = json_object();
	json_object_set_new(body, "labels", labels);
	for (int i = 2; i < v->args.npos; i++) {
		const char *kv = v->args.pos[i], *eq = strchr(kv, '=');
		if (!eq || eq == kv) {
			json_decref(body);
			return verb_usage_error(v, "\"%s\" is not KEY=VALUE (KEY= removes)", kv);
		}
		char *key = xstrndup(kv, (size_t)(eq - kv)); /* the server checks its length */
		json_object_set_new(labels, key, eq[1] ? json_string(eq + 1) : json_null());
		free(key);
	}
	const char *pool = cliargs_str(&v->args, "pool");
	if (pool)
		json_object_set_new(body, "pool", json_string(pool));
	return post_state(v, name, body);
}

static int node_check(struct verb_ctx *v, const char *name)
{
	json_t *body = json_object(), *resp = NULL;
	const struct cliargs_value *gpus = cliargs_get(&v->args, "gpus");
	if (gpus->set)
		json_object_set_new(body, "gpus", json_integer(gpus->num));
	const char *model = cliargs_str(&v->args, "gpu-model");
	const char *driver = cliargs_str(&v->args, "driver-version");
	if (model)
		json_object_set_new(body, "gpu_model", json_string(model));
	if (driver)
		json_object_set_new(body, "driver_version", json_string(driver));
	int ret = post(v, name, "/check", body, &resp);
	json_decref(body);
	if (ret != CLI_EXIT_OK)
		return ret;
	verb_print(v, resp, NULL, verb_node_check_render);
	ret = json_is_true(json_object_get(resp, "ok")) ? CLI_EXIT_OK : CLI_EXIT_FAILED;
	json_decref(resp);
	return ret;
}

static int node_fault(struct verb_ctx *v, const char *name)
{
	const struct cliargs_value *gpu = cliargs_get(&v->args, "gpu");
	if (!gpu->set)
		return verb_usage_error(v, "fault: --gpu INDEX is required");
	char err[256];
	json_t *body = NULL, *resp = NULL;
	if (verb_node_fault_body(gpu->num, v->args.pos[2], v->args.pos + 3, v->args.npos - 3, &body,
	                         err, sizeof(err)))
		return verb_usage_error(v, "fault: %s", err);
	int ret = post(v, name, "/faults", body, &resp);
	if (ret == CLI_EXIT_OK && cliargs_flag(&v->args, "json")) {
		verb_print_json(resp);
	} else if (ret == CLI_EXIT_OK) {
		struct buf line;
		buf_init(&line);
		buf_printf(&line, "node %s GPU %lld: injected %s", name, (long long)gpu->num,
		           v->args.pos[2]);
		for (int i = 3; i < v->args.npos; i++)
			buf_printf(&line, " %s", v->args.pos[i]);
		struct buf clean;
		buf_init(&clean);
		verb_add_clean(&clean, line.data);
		printf("%s (simulated)\n", clean.data);
		buf_cleanup(&clean);
		buf_cleanup(&line);
	}
	json_decref(body);
	json_decref(resp);
	return ret;
}

/* reset, approve: the node's identity and admission; prints its state. */
static int node_identity(struct verb_ctx *v, const char *name)
{
	const char *sub = v->args.pos[0];
	json_t *resp = NULL;
	int ret = post(v, name, strcmp(sub, "reset") == 0 ? "/reset" : "/approve", NULL, &resp);
	if (ret == CLI_EXIT_OK && cliargs_flag(&v->args, "json")) {
		verb_print_json(resp);
	} else if (ret == CLI_EXIT_OK && strcmp(sub, "reset") == 0) {
		struct buf line;
		buf_init(&line);
		verb_add_clean(&line, name);
		printf("node %s: reset; its secret is revoked and its ranks are lost. Its agent is "
		       "admitted again by its next registration with the join token (an agent "
		       "that was refused retries by itself).\n",
		       line.data);
		buf_cleanup(&line);
	} else if (ret == CLI_EXIT_OK) {
		print_node_state(v, resp);
	}
	json_decref(resp);
	return ret;
}

void verb_node_token_render(const json_t *tok, int64_t now_ms, struct buf *out)
{
	char when[48], left[32];
	int64_t expires = verb_int(tok, "expires_ms", 0);
	verb_add_clean(out, verb_str(tok, "token"));
	buf_adds(out, "\n");
	if (!expires) {
		buf_adds(out, "never expires\n");
		return;
	}
	clitable_time(when, sizeof(when), expires);
	if (expires <= now_ms) {
		buf_printf(out, "expired at %s: `anvil node token --rotate` makes a new one\n",
		           when);
		return;
	}
	clitable_duration(left, sizeof(left), expires - now_ms);
	buf_printf(out, "expires at %s (in %s)\n", when, left);
}

/* token: the join token, or a new one (--rotate [--ttl DUR]). */
static int node_token(struct verb_ctx *v, const char *unused)
{
	(void)unused;
	const struct cliargs_value *ttl = cliargs_get(&v->args, "ttl");
	int rotate = cliargs_flag(&v->args, "rotate");
	if (ttl->set && !rotate)
		return verb_usage_error(v, "--ttl goes with --rotate (a token's life is set when "
		                           "it is made)");
	if (ttl->set && ttl->num < 0)
		return verb_usage_error(v, "--ttl: \"%s\" is not a duration (0: never expires)",
		                        ttl->str);
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	json_t *body = json_object(), *resp = NULL;
	if (ttl->set)
		json_object_set_new(body, "ttl_ms", json_integer(ttl->num));
	ret = rotate ? cliconn_call(&v->conn, "POST", "/v1/join-token/rotate", body, &resp)
	             : cliconn_call(&v->conn, "GET", "/v1/join-token", NULL, &resp);
	if (ret == CLI_EXIT_OK)
		verb_print(v, resp, NULL, verb_node_token_render);
	json_decref(body);
	json_decref(resp);
	return ret;
}

struct node_sub {
	const char *name;
	int (*fn)(struct verb_ctx *v, const char *node);
	int takes_node;           /* its first word is NODE */
	int min_words, max_words; /* after NODE */
	const char *opts;         /* the verb options it takes, each between spaces */
	const char *usage;
};

static const struct node_sub subs[] = {
        {"show", node_show, 1, 0, 0, " json ", "show NODE"},
        {"cordon", node_state, 1, 0, 0, " reason json ", "cordon NODE [--reason TEXT]"},
        {"drain", node_state, 1, 0, 0, " reason json ", "drain NODE [--reason TEXT]"},
        {"uncordon", node_state, 1, 0, 0, " reason force json ",
         "uncordon NODE [--reason TEXT] [--force]"},
        {"label", node_label, 1, 0, 30, " pool json ", "label NODE KEY=VALUE... [--pool POOL]"},
        {"check", node_check, 1, 0, 0, " gpus gpu-model driver-version json ",
         "check NODE [--gpus N] [--gpu-model M] [--driver-version V]"},
        {"fault", node_fault, 1, 1, 30, " gpu json ", "fault NODE --gpu I KIND [KEY=VALUE...]"},
        {"reset", node_identity, 1, 0, 0, " json ", "reset NODE"},
        {"approve", node_identity, 1, 0, 0, " json ", "approve NODE"},
        {"token", node_token, 0, 0, 0, " rotate ttl json ", "token [--rotate [--ttl DUR]]"},
};
#define NSUBS (sizeof(subs) / sizeof(subs[0]))

static const struct cliargs_opt node_opts[] = {
        {"reason", 0, CLIARGS_STR, "TEXT", "cordon, drain, uncordon: why (shown by anvil nodes)"},
        {"force", 0, CLIARGS_FLAG, NULL, "uncordon: even while the agent reports a node fault"},
        {"pool", 0, CLIARGS_STR, "POOL", "label: put the node in this pool"},
        {"gpus", 0, CLIARGS_INT, "N", "check: the GPUs expected (default: those registered)"},
        {"gpu-model", 0, CLIARGS_STR, "M", "check: the model expected (default: the first GPU's)"},
        {"driver-version", 0, CLIARGS_STR, "V", "check: the driver version expected"},
        {"gpu", 0, CLIARGS_INT, "I", "fault: the GPU's index"},
        {"rotate", 0, CLIARGS_FLAG, NULL, "token: make a new join token (the old one is refused)"},
        {"ttl", 0, CLIARGS_DURATION, "DUR",
         "token --rotate: the new token's life (default: the server's --join-token-ttl; 0: "
         "never expires)"},
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's JSON"},
        {NULL, 0, 0, NULL, NULL},
};

/* A usage error for an option sub does not take, naming those that do. */
static int check_opts(struct verb_ctx *v, const struct node_sub *sub)
{
	for (const struct cliargs_opt *o = node_opts; o->name; o++) {
		char word[40];
		snprintf(word, sizeof(word), " %s ", o->name);
		if (!cliargs_get(&v->args, o->name)->set || strstr(sub->opts, word))
			continue;
		char takers[128] = "";
		for (size_t i = 0; i < NSUBS; i++) {
			size_t n = strlen(takers);
			if (strstr(subs[i].opts, word))
				snprintf(takers + n, sizeof(takers) - n, "%s%s", n ? ", " : "",
				         subs[i].name);
		}
		return verb_usage_error(v, "--%s is not an option of `anvil node %s` (only of: %s)",
		                        o->name, sub->name, takers);
	}
	return CLI_EXIT_OK;
}

static int node_fn(struct verb_ctx *v)
{
	const struct node_sub *sub = NULL;
	for (size_t i = 0; i < NSUBS && !sub; i++)
		if (strcmp(subs[i].name, v->args.pos[0]) == 0)
			sub = &subs[i];
	if (!sub)
		return verb_usage_error(
		        v,
		        "\"%s\" is not show, cordon, drain, uncordon, label, check, "
		        "fault, reset, approve or token",
		        v->args.pos[0]);
	int first = sub->takes_node ? 2 : 1, words = v->args.npos - first;
	if (v->args.npos < first || words < sub->min_words || words > sub->max_words)
		return verb_usage_error(v, "%s (usage: anvil node %s)",
		                        v->args.npos < first || words < sub->min_words
		                                ? "missing argument"
		                                : "too many arguments",
		                        sub->usage);
	int ret = check_opts(v, sub);
	if (ret != CLI_EXIT_OK)
		return ret;
	return sub->fn(v, sub->takes_node ? v->args.pos[1] : NULL);
}

const struct verb verb_node = {
        .name = "node",
        .fn = node_fn,
        .opts = node_opts,
        .min_pos = 1,
        .max_pos = 32,
        .usage = "show NODE\n"
                 "   or: anvil node cordon|drain NODE [--reason TEXT]\n"
                 "   or: anvil node uncordon NODE [--reason TEXT] [--force]\n"
                 "   or: anvil node check NODE [--gpus N] [--gpu-model M] [--driver-version V]\n"
                 "   or: anvil node fault NODE --gpu I KIND [KEY=VALUE...]\n"
                 "   or: anvil node label NODE KEY=VALUE... [--pool POOL]\n"
                 "   or: anvil node reset|approve NODE\n"
                 "   or: anvil node token [--rotate [--ttl DUR]]",
        .summary = "show, cordon, drain, uncordon, check, label, reset or approve a node; the "
                   "join token",
        .help = "show      one node with every GPU, the topology matrix and RDMA ports\n"
                "          (the same as `anvil nodes show NODE`).\n"
                "cordon    no new work lands on the node; running work goes on.\n"
                "drain     no new work, and its running attempts are stopped after their\n"
                "          grace period (checkpointing ones first) and requeued; the node\n"
                "          turns drained when the last one has ended.\n"
                "uncordon  back to ready. Refused while the node's agent reports a node\n"
                "          fault (a GPU fell off the bus, an NVLink error): reboot or repair\n"
                "          it and run `anvil node check`, or pass --force.\n"
                "          Each prints the node's new state and reason.\n"
                "check     the validation before a node or GPU is trusted again: GPU count and\n"
                "          model, driver version, every GPU's health, no node fault, and a\n"
                "          compute check per GPU where the agent has a check program.\n"
                "          Prints a NAME / OK / DETAIL table and the summary; exits 0 when\n"
                "          every check passed, 1 when one failed.\n"
                "fault     simulated GPUs only (backend sim): inject a fault into GPU I.\n"
                "          KIND is xid, ecc, temperature, throttle, power, load, lost, remap,\n"
                "          recovery_action or clear; KEY=VALUE words are its fields, numbers\n"
                "          sent as integers: `anvil node fault n1 --gpu 2 xid xid=79`,\n"
                "          `... ecc uncorrectable=1`, `... temperature celsius=95`,\n"
                "          `... lost`, `... clear`. Real hardware refuses it (400).\n"
                "label     labels place nodes in the topology (block=, rack=, switch=) and\n"
                "          let jobs select them (anvil run --selector); KEY= removes one.\n"
                "reset     re-admits a node whose agent lost its identity (WORK_DIR/node.json):\n"
                "          its secret is revoked at once, its ranks are lost, and the next\n"
                "          registration of its name with the join token is accepted, once.\n"
                "approve   a new node of a server run with --approve-nodes takes work.\n"
                "token     prints the join token (first line) and when it expires; --rotate\n"
                "          makes a new one and refuses the old one from now on (nodes that\n"
                "          joined are not affected). --ttl sets the new one's life.\n"
                "See docs/gpu.md and docs/operations.md (\"Node identity\").\n",
};
