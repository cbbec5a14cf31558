/* verb_wf.c - `anvil wf`: workflows. `anvil wf check FILE` compiles a
 * workflow file (flow/spec.h) and reports every error, each as
 * FILE:LINE:COLUMN, before anything runs; with --json it prints the
 * compiled form the API takes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cli/cli.h"
#include "cli/verb.h"
#include "flow/spec.h"

#define WF_FILE_MAX (4 << 20) /* a workflow file is text a person wrote */

static const struct cliargs_opt opts[] = {
        {"input", 'i', CLIARGS_KV, "K=V", "override the workflow's input K (repeatable)"},
        {"json", 0, CLIARGS_FLAG, NULL, "print the compiled workflow as JSON"},
        {NULL, 0, 0, NULL, NULL},
};

/* The whole file, NUL-terminated; NULL with a message printed. */
static char *read_file(const char *path, size_t *len)
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
	char *text = read_file(path, &len);
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

static int wf_fn(struct verb_ctx *v)
{
	const char *sub = v->args.pos[0];
	if (strcmp(sub, "check") == 0) {
		if (v->args.npos != 2)
			return verb_usage_error(v, "wf check takes one FILE");
		return check(v, v->args.pos[1]);
	}
	return verb_usage_error(v, "unknown subcommand '%s' (check)", sub);
}

const struct verb verb_wf = {
        .name = "wf",
        .fn = wf_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 2,
        .usage = "check [-i K=V]... [--json] FILE",
        .summary = "workflows: check a workflow file",
        .help = "check FILE  compiles the workflow FILE (YAML; - reads stdin) and prints every\n"
                "            error as FILE:LINE:COLUMN: PATH: what is wrong, or that it is ok.\n"
                "            -i K=V overrides the workflow's input K; --json prints the\n"
                "            compiled form that POST /v1/workflows will take.\n"
                "\n"
                "The file's reference is docs/workflows.md.\n",
};
