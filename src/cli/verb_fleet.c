/* verb_fleet.c - `anvil fleet`: the fleet as code. `anvil fleet check FILE`
 * compiles a cluster spec (fleet/spec.h) and reports every error, each as
 * FILE:LINE:COLUMN, without a server; with --json it prints the compiled
 * form. plan, apply, history and rollback are still to come (docs/fleet.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/verb.h"
#include "fleet/spec.h"

#define FLEET_FILE_MAX (4 << 20) /* a spec is text a person wrote */
#define FLEET_ERRS_MAX (64 << 10)

static const struct cliargs_opt opts[] = {
        {"json", 0, CLIARGS_FLAG, NULL, "print the compiled spec as JSON"},
        {NULL, 0, 0, NULL, NULL},
};

/* Compiles FILE ("-": stdin); returns it, or NULL with why printed. */
static json_t *compile(const char *path)
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
	char *errs = xmalloc(FLEET_ERRS_MAX);
	json_t *fleet = fleet_compile_yaml(path, text.data, text.len, errs, FLEET_ERRS_MAX);
	if (!fleet)
		fputs(errs, stderr);
	free(errs);
	buf_cleanup(&text);
	return fleet;
}

static int check(struct verb_ctx *v, const char *path)
{
	json_t *fleet = compile(path);
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

static int fleet_fn(struct verb_ctx *v)
{
	const char *sub = v->args.pos[0];
	if (strcmp(sub, "check") == 0) {
		if (v->args.npos != 2)
			return verb_usage_error(v, "fleet check takes one FILE");
		return check(v, v->args.pos[1]);
	}
	return verb_usage_error(v,
	                        "unknown subcommand '%s' (check; plan, apply, refresh, history "
	                        "and rollback are not built yet)",
	                        sub);
}

const struct verb verb_fleet = {
        .name = "fleet",
        .fn = fleet_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 2,
        .usage = "check [--json] FILE",
        .summary = "the fleet as code: check a cluster spec",
        .help = "check FILE  compiles the cluster spec FILE (YAML; - reads stdin) and prints\n"
                "            every error as FILE:LINE:COLUMN: PATH: what is wrong, or\n"
                "            \"fleet NAME: N nodes in M groups: ok\". --json prints the\n"
                "            compiled form: every default filled in, every range expanded,\n"
                "            one entry per node. Needs no server.\n"
                "\n"
                "The file's reference is docs/fleet.md; examples/fleet/reference.yaml is the\n"
                "reference fleet. plan, apply, refresh, history and rollback are not built yet.\n",
};
