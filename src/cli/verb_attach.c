/* verb_attach.c - `anvil attach JOB [--rank R]`: back into an interactive
 * session (cli/attach.h), and how a session's end reads for `anvil shell`
 * too (verb_attach_finish). */
#include <stdio.h>
#include <string.h>

#include "cli/attach.h"
#include "cli/cli.h"
#include "cli/verb.h"

static const struct cliargs_opt opts[] = {
        {"rank", 'r', CLIARGS_INT, "R", "the session's rank (default 0)"},
        {NULL, 0, 0, NULL, NULL},
};

/* The session's command exited: when the cluster stopped it (cancelled,
 * out of time, preempted, another rank failed: its attempt is ending for a
 * reason that is not this rank's own exit), say so, as the shell's own
 * exit says nothing. */
static void say_why_stopped(struct verb_ctx *v, int64_t job, int64_t rank)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)job);
	json_t *resp = NULL;
	if (cliconn_call(&v->conn, "GET", path, NULL, &resp) != CLI_EXIT_OK)
		return;
	const json_t *j = json_object_get(resp, "job");
	const json_t *attempts = json_object_get(j, "attempts");
	const json_t *a = json_array_get(attempts, json_array_size(attempts) - 1);
	const char *why = verb_str(a, "end_reason");
	if (!*why)
		why = verb_str(j, "reason");
	char own[32];
	snprintf(own, sizeof(own), "rank %lld ", (long long)rank);
	int stopped =
	        json_is_true(json_object_get(a, "ending")) && strncmp(why, own, strlen(own)) != 0;
	if (stopped &&
	    strncmp(why, "stopped", 7) == 0) /* final already: "stopped at its time limit" */
		fprintf(stderr, "anvil: job %lld %s\n", (long long)job, why);
	else if (stopped)
		fprintf(stderr, "anvil: job %lld was stopped: %s\n", (long long)job, why);
	json_decref(resp);
}

int verb_attach_finish(struct verb_ctx *v, int64_t job, int64_t rank, const struct attach_result *r)
{
	if (r->end == ATTACH_EXITED) {
		if (r->code != 0)
			say_why_stopped(v, job, rank);
		return r->code < 0 || r->code > 255 ? 255 : r->code;
	}
	if (r->end == ATTACH_REFUSED)
		return r->code;
	if (r->end == ATTACH_DETACHED) {
		fprintf(stderr,
		        "anvil: detached from job %lld; the session goes on: `anvil attach %lld`\n",
		        (long long)job, (long long)job);
		return r->code;
	}
	/* Lost: the holder went without an exit (stopped, cancelled, out of
	 * time), or the connection broke. The job says which. */
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)job);
	json_t *resp = NULL;
	if (cliconn_call(&v->conn, "GET", path, NULL, &resp) != CLI_EXIT_OK)
		return CLI_EXIT_FAILED;
	const json_t *j = json_object_get(resp, "job");
	int ret = CLI_EXIT_FAILED;
	if (verb_state_final(verb_str(j, "state"))) {
		verb_report_end(job, j);
		ret = verb_run_exit(j);
	} else {
		fprintf(stderr,
		        "anvil: the connection to job %lld was lost; the session goes on: `anvil "
		        "attach %lld`\n",
		        (long long)job, (long long)job);
	}
	json_decref(resp);
	return ret;
}

static int attach_fn(struct verb_ctx *v)
{
	int64_t id;
	int ret = verb_job_arg(v, v->args.pos[0], &id);
	if (ret != CLI_EXIT_OK || (ret = verb_connect(v)) != CLI_EXIT_OK)
		return ret;
	const struct cliargs_value *rank = cliargs_get(&v->args, "rank");
	struct attach_opts o = {.job = id,
	                        .rank = rank->set ? rank->num : 0,
	                        .tty = 1,
	                        .forward_stdin = 1,
	                        .escape = 1,
	                        /* an agent just restarted adopts its ranks first */
	                        .retry_conflict_ms = 3000};
	fprintf(stderr, "anvil: attaching to job %lld; Ctrl-] detaches\n", (long long)id);
	struct attach_result r = attach_run(v, &o);
	return verb_attach_finish(v, id, o.rank, &r);
}

const struct verb verb_attach = {
        .name = "attach",
        .fn = attach_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 1,
        .usage = "[--rank R] JOB",
        .summary = "attach to an interactive session (anvil shell)",
        .help = "Attaches this terminal to the session of job JOB (one started by `anvil shell`),\n"
                "as `tmux attach` does: the session's recent output (64 KiB) is shown first,\n"
                "then everything typed goes to its terminal. Several clients may be attached at\n"
                "once; all see the output and all may type. The window's size follows this\n"
                "terminal's.\n"
                "\n"
                "Ctrl-] detaches and leaves the session running, as does closing the terminal\n"
                "or stopping anvil. When the session's command exits, anvil exits with its\n"
                "status; when the job ends otherwise (cancelled, out of time), with the job's\n"
                "(see `anvil run --help`).\n",
};
