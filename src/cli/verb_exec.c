/* verb_exec.c - `anvil exec JOB [--rank R] [-i] [-t] -- CMD`: a command run
 * inside a running rank (cli/attach.h; agent/rankexec.h on the node). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/attach.h"
#include "cli/cli.h"
#include "cli/verb.h"
#include "proto/wire.h"

#define EXEC_EXIT_LOST 255 /* the stream ended before the command's status came */

static const struct cliargs_opt opts[] = {
        {"rank", 'r', CLIARGS_INT, "R", "the rank to run in (default 0)"},
        {"stdin", 'i', CLIARGS_FLAG, NULL, "send this stdin to the command"},
        {"tty", 't', CLIARGS_FLAG, NULL, "run the command in a terminal"},
        {NULL, 0, 0, NULL, NULL},
};

/* The exec request (proto/wire.h wire_exec). */
static json_t *request(const struct verb_ctx *v)
{
	const struct wire_record *w = &wire_exec;
	json_t *req = json_object(), *cmd = json_array();
	for (int i = 0; i < v->args.nrest; i++)
		json_array_append_new(cmd, json_string(v->args.rest[i]));
	wire_set(req, w, "command", cmd);
	int tty = cliargs_flag(&v->args, "tty");
	wire_set(req, w, "tty", json_boolean(tty));
	wire_set(req, w, "stdin", json_boolean(cliargs_flag(&v->args, "stdin")));
	unsigned rows, cols;
	if (tty && attach_window(&rows, &cols)) {
		wire_set(req, w, "rows", json_integer(rows));
		wire_set(req, w, "cols", json_integer(cols));
	}
	const char *term = getenv("TERM");
	if (tty && term && *term && strlen(term) <= 128)
		wire_set(req, w, "term", json_string(term));
	return req;
}

static int exec_fn(struct verb_ctx *v)
{
	int64_t id;
	const struct cliargs *a = &v->args;
	if (a->npos > 1)
		return verb_usage_error(v, "the command goes after --: anvil exec %s -- %s ...",
		                        a->pos[0], a->pos[1]);
	if (a->nrest == 0 || !a->rest[0][0])
		return verb_usage_error(v,
		                        "no command to run (usage: anvil exec JOB -- CMD ARGS...)");
	int ret = verb_job_arg(v, a->pos[0], &id);
	if (ret != CLI_EXIT_OK || (ret = verb_connect(v)) != CLI_EXIT_OK)
		return ret;
	const struct cliargs_value *rank = cliargs_get(a, "rank");
	json_t *req = request(v);
	struct attach_opts o = {.job = id,
	                        .rank = rank->set ? rank->num : 0,
	                        .exec = req,
	                        .tty = cliargs_flag(a, "tty"),
	                        .forward_stdin = cliargs_flag(a, "stdin")};
	struct attach_result r = attach_run(v, &o);
	json_decref(req);
	switch (r.end) {
	case ATTACH_EXITED: return r.code < 0 || r.code > 255 ? EXEC_EXIT_LOST : r.code;
	case ATTACH_REFUSED:
	case ATTACH_DETACHED: return r.code;
	case ATTACH_LOST: break;
	}
	fprintf(stderr, "anvil: the stream to job %lld ended before the command's exit status\n",
	        (long long)id);
	return EXEC_EXIT_LOST;
}

const struct verb verb_exec = {
        .name = "exec",
        .fn = exec_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 64,
        .usage = "[--rank R] [-i] [-t] JOB -- CMD [ARGS...]",
        .summary = "run a command inside a running job's rank",
        .help = "Runs CMD inside rank R (default 0) of the running job JOB, as `kubectl exec`\n"
                "does: on the rank's node, in its cgroups (it counts against the rank's limits\n"
                "and is killed when the rank ends), with its environment (CUDA_VISIBLE_DEVICES,\n"
                "MASTER_ADDR, ...) and working directory. Any running job, not only sessions.\n"
                "\n"
                "Without -t, CMD's stdout and stderr arrive apart, on this stdout and stderr,\n"
                "and its stdin is empty unless -i sends this one. With -t, CMD runs in a\n"
                "terminal the size of this one (-it for an interactive program: `anvil exec -it\n"
                "7 -- bash`). Stopping anvil hangs CMD up (SIGHUP); what CMD left running in the\n"
                "background goes on until the rank ends.\n"
                "\n"
                "anvil exits with CMD's status (128+N when signal N ended it); 1 when the\n"
                "server or the node refused (the job is not running, no such rank), 3 when the\n"
                "server cannot be reached, 255 when the stream broke before CMD's status came.\n",
};
