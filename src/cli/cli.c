/* cli.c - the entry of the client verbs: global options, the verb table,
 * help and version. The verbs themselves live in verb_*.c. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/httpc.h"
#include "base/jv.h"
#include "base/version.h"
#include "cli/cliargs.h"
#include "cli/verb.h"

static const struct verb *const verbs[] = {
        &verb_run,  &verb_shell,  &verb_attach, &verb_exec,    &verb_jobs,  &verb_show,
        &verb_logs, &verb_cancel, &verb_nodes,  &verb_why,     &verb_queue, &verb_team,
        &verb_node, &verb_events, &verb_wf,     &verb_lineage, &verb_fleet,
};
#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

/* Roles that main.c dispatches itself when they come first. */
static const char *const roles[][2] = {
        {"up", "a whole local cluster (server + agents with simulated GPUs) in the foreground"},
        {"server", "the control plane"},
        {"agent", "a node agent"},
};

static const char exit_help[] = "Exit status:\n"
                                "  0    ok\n"
                                "  1    the server rejected the request, or the thing failed (the "
                                "server's message is shown)\n"
                                "  2    usage error: unknown option, missing argument, bad number\n"
                                "  3    no server configured, or the server could not be reached\n";

static const struct verb *find_verb(const char *name)
{
	for (size_t i = 0; i < NVERBS; i++)
		if (strcmp(verbs[i]->name, name) == 0)
			return verbs[i];
	return NULL;
}

static void general_help(FILE *f)
{
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "anvil - a shared GPU training cluster\n\n"
	             "Usage: anvil [--server URL] [--token TOKEN] COMMAND [options] [args]\n\n"
	             "Commands:\n");
	for (size_t i = 0; i < NVERBS; i++)
		buf_printf(&b, "  %-9s%s\n", verbs[i]->name, verbs[i]->summary);
	buf_printf(&b, "  %-9s%s\n  %-9s%s\n\nCluster roles (each takes --help):\n", "help",
	           "show help: anvil help COMMAND", "version", "print the version");
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		buf_printf(&b, "  %-9s%s\n", roles[i][0], roles[i][1]);
	buf_adds(&b, "\nServer and token: --server/--token, else $ANVIL_SERVER/$ANVIL_TOKEN, else\n"
	             "$ANVIL_HOME/client.json (ANVIL_HOME defaults to ~/.anvil), which `anvil up`\n"
	             "and `anvil server` write. Every listing takes --json.\n\n");
	buf_adds(&b, exit_help);
	buf_adds(&b,
	         "  run --wait exits with the job's own status instead (see anvil run --help)\n");
	fputs(b.data, f);
	buf_cleanup(&b);
}

static void verb_help(const struct verb *v)
{
	struct buf b;
	buf_init(&b);
	buf_printf(&b, "Usage: anvil %s %s\n\n%s\n", v->name, v->usage, v->help);
	cliargs_help(v->opts, &b);
	buf_printf(&b, "\n%s", exit_help);
	fputs(b.data, stdout);
	buf_cleanup(&b);
}

static int run_verb(const struct verb *verb, int argc, char **argv, const struct cliargs *pre)
{
	struct verb_ctx v;
	memset(&v, 0, sizeof(v));
	v.verb = verb;
	char err[512];
	int ret;
	if (cliargs_parse(&v.args, verb->opts, verb->flags, argc, argv, err, sizeof(err)) < 0) {
		ret = verb_usage_error(&v, "%s", err);
		goto out;
	}
	if (cliargs_flag(&v.args, "help")) {
		verb_help(verb);
		ret = CLI_EXIT_OK;
		goto out;
	}
	if (v.args.npos < verb->min_pos) {
		ret = verb_usage_error(&v, "missing argument (usage: anvil %s %s)", verb->name,
		                       verb->usage);
		goto out;
	}
	if (v.args.npos > verb->max_pos) {
		ret = verb_usage_error(&v, "unexpected argument \"%s\"", v.args.pos[verb->max_pos]);
		goto out;
	}
	v.server_flag = cliargs_str(&v.args, "server");
	v.token_flag = cliargs_str(&v.args, "token");
	if (!v.server_flag)
		v.server_flag = cliargs_str(pre, "server");
	if (!v.token_flag)
		v.token_flag = cliargs_str(pre, "token");
	ret = verb->fn(&v);
out:
	verb_cleanup(&v);
	return ret;
}

static int help_cmd(int argc, char **argv)
{
	if (argc < 1) {
		general_help(stdout);
		return CLI_EXIT_OK;
	}
	const struct verb *v = find_verb(argv[0]);
	if (!v) {
		fprintf(stderr, "anvil help: no command \"%s\" (see `anvil help`)\n", argv[0]);
		return CLI_EXIT_USAGE;
	}
	verb_help(v);
	return CLI_EXIT_OK;
}

static int version_cmd(void)
{
	printf("anvil %s\n", ANVIL_VERSION);
	return CLI_EXIT_OK;
}

static const struct cliargs_opt pre_opts[] = {
        {"version", 0, CLIARGS_FLAG, NULL, "print the version"},
        {NULL, 0, 0, NULL, NULL},
};

/* Picks the verb after the global options. */
static int dispatch(int argc, char **argv, const struct cliargs *pre)
{
	const char *name = argv[0];
	const struct verb *verb = find_verb(name);
	if (verb)
		return run_verb(verb, argc - 1, argv + 1, pre);
	if (strcmp(name, "help") == 0)
		return help_cmd(argc - 1, argv + 1);
	if (strcmp(name, "version") == 0)
		return version_cmd();
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
		if (strcmp(name, roles[i][0]) == 0) {
			fprintf(stderr, "anvil: put \"%s\" first: anvil %s [options]\n", name,
			        name);
			return CLI_EXIT_USAGE;
		}
	}
	fprintf(stderr, "anvil: unknown command \"%s\" (see `anvil help`)\n", name);
	return CLI_EXIT_USAGE;
}

/* What the CLI sends goes as JSON, whose strings hold UTF-8 only: an
 * argument in any other bytes is refused here, by its position, rather
 * than dropped or mangled on the way. */
static int args_are_utf8(int argc, char **argv)
{
	static const char why[] =
	        "is not UTF-8 text: anvil sends it as JSON, which holds UTF-8 only";
	for (int i = 1; i < argc; i++) {
		char *fixed = jv_utf8_fix(argv[i]);
		if (!fixed)
			continue;
		fprintf(stderr, "anvil: argument %d, '%s' ('?' for each byte in question), %s\n", i,
		        fixed, why);
		free(fixed);
		return 0;
	}
	return 1;
}

int cli_main(int argc, char **argv)
{
	if (!args_are_utf8(argc, argv))
		return CLI_EXIT_USAGE;
	struct cliargs pre;
	char err[512];
	int ret;
	if (cliargs_parse(&pre, pre_opts, CLIARGS_STOP_AT_POSITIONAL, argc - 1, argv + 1, err,
	                  sizeof(err)) < 0) {
		fprintf(stderr, "anvil: %s\n(see `anvil help`)\n", err);
		ret = CLI_EXIT_USAGE;
	} else if (cliargs_flag(&pre, "help")) {
		ret = help_cmd(pre.nrest, pre.rest);
	} else if (cliargs_flag(&pre, "version")) {
		ret = version_cmd();
	} else if (pre.nrest == 0) {
		general_help(stderr);
		ret = CLI_EXIT_USAGE;
	} else {
		ret = dispatch(pre.nrest, pre.rest, &pre);
	}
	cliargs_cleanup(&pre);
	return ret;
}
