/* verb_cancel.c - `anvil cancel JOB...` (POST /v1/jobs/ID/cancel): a job, an
 * array's member (ARRAY_INDEX), or a whole array (its id), one line each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"

/* What happened to one job, from the job the server answers with. */
static void report_job(const json_t *job)
{
	const char *state = verb_str(job, "state");
	char name[48], grace[32];
	verb_job_name(job, name, sizeof(name));
	if (strcmp(state, "cancelled") == 0) {
		printf("cancelled job %s\n", name);
	} else if (verb_state_final(state)) {
		printf("job %s already %s; nothing to cancel\n", name, state);
	} else {
		clitable_duration(grace, sizeof(grace), verb_int(job, "grace_ms", -1));
		printf("cancelling job %s: its ranks get SIGTERM, SIGKILL after %s\n", name, grace);
	}
}

void verb_cancel_report(const json_t *resp, struct buf *out)
{
	const json_t *job = json_object_get(resp, "job"), *a = json_object_get(resp, "array");
	long long id = (long long)verb_int(a, "id", 0),
	          members = (long long)verb_int(a, "members", 0),
	          stopping = (long long)verb_int(a, "stopping", 0),
	          ended = (long long)verb_int(a, "ended", 0),
	          done = (long long)verb_int(a, "cancelled", 0) + stopping;
	if (!done) {
		buf_printf(out,
		           "array %lld: all %lld members had already ended; nothing to cancel\n",
		           id, members);
		return;
	}
	buf_printf(out, "cancelled array %lld: %lld of its %lld members", id, done, members);
	if (ended)
		buf_printf(out, " (%lld had ended)", ended);
	if (stopping) {
		char grace[32];
		clitable_duration(grace, sizeof(grace), verb_int(job, "grace_ms", -1));
		buf_printf(out, "; %lld running get SIGTERM, SIGKILL after %s", stopping, grace);
	}
	buf_adds(out, "\n");
}

/* POST /v1/jobs/ID/cancel; whole: ID names its array when it is one's. */
static int cancel_one(struct verb_ctx *v, int64_t id, int whole)
{
	char path[80];
	snprintf(path, sizeof(path), "/v1/jobs/%lld/cancel%s", (long long)id,
	         whole ? "?array=1" : "");
	json_t *resp = NULL;
	int ret = cliconn_call(&v->conn, "POST", path, NULL, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(resp);
	} else if (json_is_object(json_object_get(resp, "array"))) {
		struct buf out;
		buf_init(&out);
		verb_cancel_report(resp, &out);
		fputs(out.data, stdout);
		buf_cleanup(&out);
	} else {
		report_job(json_object_get(resp, "job"));
	}
	json_decref(resp);
	return CLI_EXIT_OK;
}

static int cancel_fn(struct verb_ctx *v)
{
	int n = v->args.npos, ret = CLI_EXIT_OK;
	struct verb_job_ref *refs = xcalloc((size_t)n, sizeof(*refs));
	int64_t *ids = xcalloc((size_t)n, sizeof(*ids));
	for (int i = 0; i < n && ret == CLI_EXIT_OK; i++) /* all, before anything */
		ret = verb_job_ref(v, v->args.pos[i], &refs[i]);
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	/* Every member named by its index is found before any job is touched. */
	for (int i = 0; i < n && ret == CLI_EXIT_OK; i++)
		ret = verb_job_resolve(v, &refs[i], &ids[i]);
	if (ret != CLI_EXIT_OK)
		goto out;
	/* Go on past a job the server refuses; stop when it cannot be reached. */
	for (int i = 0; i < n; i++) {
		int r = cancel_one(v, ids[i], refs[i].index < 0);
		if (ret == CLI_EXIT_OK || r == CLI_EXIT_UNREACHABLE)
			ret = r;
		if (r == CLI_EXIT_UNREACHABLE)
			break;
	}
out:
	free(ids);
	free(refs);
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
                "that has already ended changes nothing. As with scancel, JOB may be an\n"
                "array (its id: every member, in one call, said on one line) or one member\n"
                "of it, ARRAY_INDEX (12_3).\n",
};
