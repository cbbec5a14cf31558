/* verb_wf.c - `anvil wf`: workflows. `anvil wf check FILE` compiles a
 * workflow file (flow/spec.h) and reports every error, each as
 * FILE:LINE:COLUMN, before anything runs; with --json it prints the
 * compiled form the API takes. `run` submits it (POST /v1/workflows) and
 * with --wait follows it; `bundle` packs and stores the code bundle alone
 * and prints its key, which is how the Python SDK submits the same bundle
 * as `run` would; `ls`, `show`, `logs`, `cancel` and `recover` act on
 * executions (docs/workflows.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/util.h"
#include "cli/bundle.h"
#include "cli/cli.h"
#include "cli/verb.h"
#include "cli/wflocal.h"
#include "cli/wfshow.h"
#include "flow/spec.h"

#define WF_FILE_MAX (4 << 20) /* a workflow file is text a person wrote */

static const struct cliargs_opt opts[] = {
        {"input", 'i', CLIARGS_KV, "K=V", "override the workflow's input K (repeatable)"},
        {"json", 0, CLIARGS_FLAG, NULL, "print JSON: the compiled workflow, or the server's"},
        {"wait", 'w', CLIARGS_FLAG, NULL, "run: follow the execution until it ends"},
        {"no-cache", 0, CLIARGS_FLAG, NULL, "run: read no cached results (still record them)"},
        {"code", 0, CLIARGS_STR, "DIR",
         "run, bundle: the tree packed as the code bundle (default .)"},
        {"no-code", 0, CLIARGS_FLAG, NULL,
         "run: no code bundle: tasks run in the agent's directory"},
        {"local", 0, CLIARGS_FLAG, NULL, "run: on this machine, without a server"},
        {"limit", 'n', CLIARGS_INT, "N", "ls: at most N executions (default 20)"},
        {"follow", 'f', CLIARGS_FLAG, NULL, "logs: keep printing until the run's job ends"},
        {"tail", 0, CLIARGS_INT, "N", "logs: start with the last N lines of each stream"},
        {"rank", 0, CLIARGS_INT, "R", "logs: only rank R's output"},
        {NULL, 0, 0, NULL, NULL},
};

/* The whole file, NUL-terminated; NULL with a message printed. */
static char *read_wf_file(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "anvil wf: cannot read %s: %s\n", path, strerror(errno));
		return NULL;
	}
	char *text = xmalloc(WF_FILE_MAX + 1);
	*len = fread(text, 1, WF_FILE_MAX + 1, f);
	int bad = ferror(f);
	if (f != stdin)
		fclose(f);
	if (bad || *len > WF_FILE_MAX) {
		fprintf(stderr, "anvil wf: cannot read %s: %s\n", path,
		        bad ? "read error" : "larger than 4 MiB");
		free(text);
		return NULL;
	}
	text[*len] = '\0';
	return text;
}

/* -i K=V options as {K: V}; NULL after a usage error (printed). */
static json_t *overrides(struct verb_ctx *v)
{
	const struct cliargs_value *in = cliargs_get(&v->args, "input");
	json_t *o = json_object();
	for (size_t i = 0; i < in->nlist; i++) {
		const char *eq = strchr(in->list[i], '=');
		char key[64];
		snprintf(key, sizeof(key), "%.*s", eq ? (int)(eq - in->list[i]) : 0, in->list[i]);
		if (!eq || !*key) {
			json_decref(o);
			verb_usage_error(v, "-i %s: write K=V", in->list[i]);
			return NULL;
		}
		json_object_set_new(o, key, json_string(eq + 1));
	}
	return o;
}

/* Compiles FILE; returns it, or NULL with the errors printed. */
static json_t *compile(struct verb_ctx *v, const char *path, int *ret)
{
	json_t *o = overrides(v);
	if (!o) {
		*ret = CLI_EXIT_USAGE;
		return NULL;
	}
	size_t len;
	char *text = read_wf_file(path, &len);
	json_t *wf = NULL;
	*ret = CLI_EXIT_FAILED;
	if (text) {
		char *errs = xmalloc(64 << 10);
		wf = flow_compile_yaml(path, text, len, o, errs, 64 << 10);
		if (!wf)
			fputs(errs, stderr);
		free(errs);
		free(text);
	}
	json_decref(o);
	if (wf)
		*ret = CLI_EXIT_OK;
	return wf;
}

static int check(struct verb_ctx *v, const char *path)
{
	int ret;
	json_t *wf = compile(v, path, &ret);
	if (!wf)
		return ret;
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(wf);
	} else {
		size_t n = json_array_size(json_object_get(wf, "tasks"));
		printf("%s: workflow %s, %zu task%s: ok\n", path,
		       json_string_value(json_object_get(wf, "name")), n, n == 1 ? "" : "s");
	}
	json_decref(wf);
	return CLI_EXIT_OK;
}

/* GET /v1/workflows/ID's execution; NULL after printing why. */
static json_t *get_exec(struct verb_ctx *v, int64_t id, int *ret)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/workflows/%lld", (long long)id);
	json_t *resp = NULL;
	*ret = cliconn_call(&v->conn, "GET", path, NULL, &resp);
	json_t *x = resp ? json_incref(json_object_get(resp, "workflow")) : NULL;
	json_decref(resp);
	return x;
}

/* The exit status for a final execution: 0 succeeded, 130 cancelled, 1. */
static int exec_exit(const json_t *x)
{
	const char *state = verb_str(x, "state");
	if (strcmp(state, "succeeded") == 0)
		return CLI_EXIT_OK;
	return strcmp(state, "cancelled") == 0 ? CLI_EXIT_CANCELLED : CLI_EXIT_FAILED;
}

/* Prints each run whose state changed since `seen` ({label: state}). */
static void print_changes(const json_t *x, json_t *seen)
{
	size_t i;
	const json_t *r;
	json_array_foreach (json_object_get(x, "run_list"), i, r) {
		const char *label = verb_str(r, "label"), *state = verb_str(r, "state");
		if (strcmp(verb_str(seen, label), state) == 0)
			continue;
		json_object_set_new(seen, label, json_string(state));
		if (strcmp(state, "waiting") == 0 && verb_int(r, "tries", 0) == 0)
			continue;
		printf("%s %s", label, state);
		if (strcmp(state, "running") == 0)
			printf(" (job %lld)", (long long)verb_int(r, "job_id", 0));
		if (strcmp(state, "cached") == 0)
			printf(" (from execution %lld)", (long long)verb_int(r, "cached_exec", 0));
		if (*verb_str(r, "why") && strcmp(state, "running") != 0)
			printf(": %s", verb_str(r, "why"));
		printf("\n");
	}
	fflush(stdout);
}

/* Follows execution id until it ends, printing run changes. */
static int follow(struct verb_ctx *v, int64_t id)
{
	json_t *seen = json_object();
	int ret = CLI_EXIT_OK;
	int64_t pause = 20;
	for (;;) {
		json_t *x = get_exec(v, id, &ret);
		if (!x)
			break;
		print_changes(x, seen);
		if (strcmp(verb_str(x, "state"), "running") != 0) {
			printf("workflow %lld %s%s%s\n", (long long)id, verb_str(x, "state"),
			       *verb_str(x, "reason") ? ": " : "", verb_str(x, "reason"));
			ret = exec_exit(x);
			json_decref(x);
			break;
		}
		json_decref(x);
		sleep_ms(pause);
		pause = pause * 2 > 500 ? 500 : pause * 2;
	}
	json_decref(seen);
	return ret;
}

/* Packs and stores the tree --code names (default .) as `run` sends it:
 * 0 with its key, or -1 after printing why, with hint after the reason. */
static int store_bundle(struct verb_ctx *v, const char *hint, char key[80])
{
	const struct cliargs_value *code = cliargs_get(&v->args, "code");
	const char *dir = code->set ? code->str : ".";
	char err[1024];
	if (bundle_store(&v->conn, dir, key, err, sizeof(err)) == 0)
		return 0;
	fprintf(stderr, "anvil wf: the code bundle of %s: %s%s\n", dir, err, hint);
	return -1;
}

/* `wf bundle`: the code bundle `wf run` would send, stored, its key printed
 * alone on stdout (or {"bundle": KEY} with --json) for a program to pass as
 * `bundle` in POST /v1/workflows. */
static int bundle(struct verb_ctx *v)
{
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	char key[80];
	if (store_bundle(v, "", key) != 0)
		return CLI_EXIT_FAILED;
	if (cliargs_flag(&v->args, "json")) {
		json_t *o = json_pack("{s:s}", "bundle", key);
		verb_print_json(o);
		json_decref(o);
	} else {
		printf("%s\n", key);
	}
	return CLI_EXIT_OK;
}

static int run(struct verb_ctx *v, const char *path)
{
	int ret;
	json_t *wf = compile(v, path, &ret);
	if (!wf)
		return ret;
	if (cliargs_flag(&v->args, "local")) {
		const struct cliargs_value *code = cliargs_get(&v->args, "code");
		return wflocal_run(v, wf, cliargs_flag(&v->args, "no-cache"),
		                   cliargs_flag(&v->args, "no-code") ? NULL
		                   : code->set                       ? code->str
		                                                     : ".");
	}
	if ((ret = verb_connect(v)) != CLI_EXIT_OK) {
		json_decref(wf);
		return ret;
	}
	json_t *body = json_pack("{s:o,s:b}", "workflow", wf, "no_cache",
	                         cliargs_flag(&v->args, "no-cache"));
	if (!cliargs_flag(&v->args, "no-code")) {
		char key[80];
		if (store_bundle(v, " (--no-code runs without one)", key) != 0) {
			json_decref(body);
			return CLI_EXIT_FAILED;
		}
		json_object_set_new(body, "bundle", json_string(key));
	}
	json_t *resp = NULL;
	ret = cliconn_create(&v->conn, "POST", "/v1/workflows", body, &resp);
	json_decref(body);
	if (ret != CLI_EXIT_OK)
		return ret;
	const json_t *x = json_object_get(resp, "workflow");
	int64_t id = verb_int(x, "id", 0);
	if (cliargs_flag(&v->args, "json"))
		verb_print_json(resp);
	else
		printf("workflow %lld (%s) submitted: %lld task(s), %lld run(s)\n", (long long)id,
		       verb_str(x, "name"), (long long)verb_int(x, "tasks", 0),
		       (long long)verb_int(x, "runs", 0));
	fflush(stdout);
	json_decref(resp);
	return cliargs_flag(&v->args, "wait") ? follow(v, id) : CLI_EXIT_OK;
}

static int ls(struct verb_ctx *v)
{
	int64_t limit =
	        cliargs_get(&v->args, "limit")->set ? cliargs_get(&v->args, "limit")->num : 20;
	char path[64];
	snprintf(path, sizeof(path), "/v1/workflows?limit=%lld", (long long)limit);
	json_t *resp = NULL;
	int ret = cliconn_call(&v->conn, "GET", path, NULL, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(resp);
	} else {
		struct buf out;
		buf_init(&out);
		wfshow_list(json_object_get(resp, "workflows"), wall_ms(), &out);
		fputs(out.data ? out.data : "", stdout);
		buf_cleanup(&out);
	}
	json_decref(resp);
	return CLI_EXIT_OK;
}

static int show(struct verb_ctx *v, int64_t id)
{
	int ret;
	json_t *x = get_exec(v, id, &ret);
	if (!x)
		return ret;
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(x);
	} else {
		struct buf out;
		buf_init(&out);
		wfshow_exec(x, wall_ms(), &out);
		fputs(out.data ? out.data : "", stdout);
		buf_cleanup(&out);
	}
	json_decref(x);
	return CLI_EXIT_OK;
}

/* POST /v1/workflows/ID/{cancel,recover}. */
static int act(struct verb_ctx *v, int64_t id, const char *what)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/workflows/%lld/%s", (long long)id, what);
	json_t *resp = NULL;
	/* a recover starts runs again: a lost answer's repeat must not */
	int ret = strcmp(what, "recover") == 0 ? cliconn_create(&v->conn, "POST", path, NULL, &resp)
	                                       : cliconn_call(&v->conn, "POST", path, NULL, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	const json_t *x = json_object_get(resp, "workflow");
	if (cliargs_flag(&v->args, "json"))
		verb_print_json(resp);
	else if (strcmp(what, "cancel") == 0)
		printf("workflow %lld: %s%s\n", (long long)id, verb_str(x, "state"),
		       strcmp(verb_str(x, "state"), "running") == 0
		               ? ", cancelling its running tasks"
		               : "");
	else
		printf("workflow %lld recovered: it runs again from where it stopped\n",
		       (long long)id);
	json_decref(resp);
	return cliargs_flag(&v->args, "wait") ? follow(v, id) : CLI_EXIT_OK;
}

/* The run labeled `label` ("train", "train[3]") in x, or NULL. */
static const json_t *find_run(const json_t *x, const char *label)
{
	size_t i;
	const json_t *r;
	json_array_foreach (json_object_get(x, "run_list"), i, r)
		if (strcmp(verb_str(r, "label"), label) == 0)
			return r;
	return NULL;
}

static int logs(struct verb_ctx *v, int64_t id, const char *label)
{
	int ret;
	json_t *x = get_exec(v, id, &ret);
	if (!x)
		return ret;
	const json_t *r = find_run(x, label);
	int64_t job = r ? verb_int(r, "job_id", 0) : 0;
	if (!r)
		fprintf(stderr,
		        "anvil wf: workflow %lld has no run '%s' (see anvil wf show %lld)\n",
		        (long long)id, label, (long long)id);
	else if (!job)
		fprintf(stderr, "anvil wf: %s has run no job%s%s\n", label,
		        *verb_str(r, "state") ? ": it is " : "", verb_str(r, "state"));
	json_decref(x);
	if (!job)
		return CLI_EXIT_FAILED;
	const struct cliargs_value *rank = cliargs_get(&v->args, "rank"),
	                           *tail = cliargs_get(&v->args, "tail");
	struct verb_logs_opts o = {.rank = rank->set ? rank->num : -1,
	                           .follow = cliargs_flag(&v->args, "follow"),
	                           .tail = tail->set ? tail->num : 0};
	return verb_logs_stream(v, job, &o, NULL);
}

/* An EXEC positional. */
static int exec_arg(struct verb_ctx *v, int64_t *id)
{
	if (v->args.npos < 2)
		return verb_usage_error(v, "wf %s takes an execution id", v->args.pos[0]);
	char err[256];
	if (cliargs_parse_int("EXEC", v->args.pos[1], id, err, sizeof(err)) < 0)
		return verb_usage_error(v, "%s", err);
	return CLI_EXIT_OK;
}

static int on_exec(struct verb_ctx *v, const char *sub)
{
	int64_t id;
	int ret = exec_arg(v, &id);
	if (ret == CLI_EXIT_OK && strcmp(sub, "logs") != 0 && v->args.npos != 2)
		ret = verb_usage_error(v, "wf %s takes one execution id", sub);
	if (ret == CLI_EXIT_OK && strcmp(sub, "logs") == 0 && v->args.npos != 3)
		ret = verb_usage_error(v, "wf logs takes EXEC TASK (TASK[INDEX] in a sweep)");
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	if (strcmp(sub, "show") == 0)
		return show(v, id);
	if (strcmp(sub, "logs") == 0)
		return logs(v, id, v->args.pos[2]);
	return act(v, id, sub);
}

static int wf_fn(struct verb_ctx *v)
{
	const char *sub = v->args.pos[0];
	if (strcmp(sub, "check") == 0 || strcmp(sub, "run") == 0) {
		if (v->args.npos != 2)
			return verb_usage_error(v, "wf %s takes one FILE", sub);
		return strcmp(sub, "check") == 0 ? check(v, v->args.pos[1])
		                                 : run(v, v->args.pos[1]);
	}
	if (strcmp(sub, "bundle") == 0) {
		if (v->args.npos != 1)
			return verb_usage_error(v, "wf bundle takes no argument (--code DIR)");
		return bundle(v);
	}
	if (strcmp(sub, "ls") == 0) {
		if (v->args.npos != 1)
			return verb_usage_error(v, "wf ls takes no argument");
		int ret = verb_connect(v);
		return ret == CLI_EXIT_OK ? ls(v) : ret;
	}
	if (!strcmp(sub, "show") || !strcmp(sub, "logs") || !strcmp(sub, "cancel") ||
	    !strcmp(sub, "recover"))
		return on_exec(v, sub);
	return verb_usage_error(v,
	                        "unknown subcommand '%s' (check, run, bundle, ls, show, logs, "
	                        "cancel, recover)",
	                        sub);
}

const struct verb verb_wf = {
        .name = "wf",
        .fn = wf_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 3,
        .usage = "check|run [-i K=V]... [--json] FILE | bundle [--code DIR] | ls | "
                 "show|cancel|recover EXEC | logs EXEC TASK",
        .summary = "workflows: check, run, list, show, follow, cancel and recover",
        .help = "check FILE    compiles the workflow FILE (YAML; - reads stdin) and prints\n"
                "              every error as FILE:LINE:COLUMN: PATH: what is wrong, or that\n"
                "              it is ok. -i K=V overrides the workflow's input K; --json\n"
                "              prints the compiled form that POST /v1/workflows takes.\n"
                "run FILE      packs the working tree (--code DIR, default .: git-tracked\n"
                "              files, or all but .anvilignore's) into a code bundle that\n"
                "              the tasks run in, stores it once, compiles FILE and submits\n"
                "              it; --wait follows it to its end (exit 0 succeeded, 1\n"
                "              failed, 130 cancelled); --no-cache reads no cached results;\n"
                "              --no-code sends no bundle. --local runs it on this\n"
                "              machine without a server, one task at a time, with the\n"
                "              same templates, cache and outputs (docs/workflows.md).\n"
                "bundle        packs and stores the code bundle that run would send\n"
                "              (--code DIR, default .) and prints its key (sha256/...),\n"
                "              alone on a line, for POST /v1/workflows's bundle (the\n"
                "              Python SDK's submit uses it); --json: {\"bundle\": KEY}.\n"
                "ls            the newest executions (--limit N).\n"
                "show EXEC     the execution's runs: state, tries, job, node, time,\n"
                "              parameters, outputs, cache status, and why any failed.\n"
                "logs EXEC TASK  the output of the task's latest job (TASK[I] for a sweep's\n"
                "              child I; -f, --tail N, --rank R as anvil logs).\n"
                "cancel EXEC   cancels waiting runs and the jobs of running ones.\n"
                "recover EXEC  runs a failed or cancelled execution again from where it\n"
                "              stopped, reusing what succeeded.\n"
                "\n"
                "The file's reference and how runs work: docs/workflows.md.\n",
};
