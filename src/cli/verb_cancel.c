/* verb_cancel.c - `anvil cancel JOB...` (POST /v1/jobs/ID/cancel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"

/* What happened, from the job the server answers with. */
static void report(int64_t id, const json_t *job)
{
	const char *state = verb_str(job, "state");
	char grace[32];
	if (strcmp(state, "cancelled") == 0) {
		printf("cancelled job %lld\n", (long long)id);
	} else if (verb_state_final(state)) {
		printf("job %lld already %s; nothing to cancel\n", (long long)id, state);
	} else {
		clitable_duration(grace, sizeof(grace), verb_int(job, "grace_ms", -1));
		printf("cancelling job %lld: its ranks get SIGTERM, SIGKILL after %s\n",
		       (long long)id, grace);
	}
}

static int cancel_one(struct verb_ctx *v, int64_t id)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld/cancel", (long long)id);
	json_t *resp = NULL;
	int ret = cliconn_call(&v->conn, "POST", path, NULL, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	if (cliargs_flag(&v->args, "json"))
		verb_print_json(resp);
	else
		report(id, json_object_get(resp, "job"));
	json_decref(resp);
	return CLI_EXIT_OK;
}

static int cancel_fn(struct verb_ctx *v)
{
	int n = v->args.npos;
	int64_t *ids = xcalloc((size_t)n, sizeof(*ids));
	int ret = CLI_EXIT_OK;
	/* Every id is checked before any job is touched. */
	for (int i = 0; i < n && ret == CLI_EXIT_OK; i++)
		ret = verb_job_id(v, v->args.pos[i], &ids[i]);
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		goto out;
	/* Go on past a job the server refuses; stop when it cannot be reached. */
	for (int i = 0; i < n; i++) {
		int r = cancel_one(v, ids[i]);
		if (ret == CLI_EXIT_OK || r == CLI_EXIT_UNREACHABLE)
			ret = r;
		if (r == CLI_EXIT_UNREACHABLE)
			break;
	}
out:
	free(ids);
	return ret;
}

const struct verb verb_cancel = {
        .name = "cancel",
        .fn = cancel_fn,
        .opts = verb_json_opts,
        .min_pos = 1,
        .max_pos = 1024,
        .usage = "[--json] JOB...",
        .summary = "cancel jobs",
        .help = "Cancels each JOB: a pending job at once; a running one is stopped (SIGTERM to\n"
                "each rank's process group, SIGKILL after the job's grace). Cancelling a job\n"
                "that has already ended changes nothing.\n",
};
