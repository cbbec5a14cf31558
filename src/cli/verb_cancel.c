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

/* The members of array id (its first member's id): ids of those whose
 * index is `index`, or of all when index < 0. NULL: not an array. */
static json_t *array_members(struct verb_ctx *v, int64_t id, int64_t index, int *ret)
{
	char path[96];
	snprintf(path, sizeof(path), "/v1/jobs?array=%lld&limit=100000&state=all", (long long)id);
	json_t *resp = NULL;
	*ret = cliconn_call(&v->conn, "GET", path, NULL, &resp);
	if (*ret != CLI_EXIT_OK)
		return NULL;
	json_t *ids = json_array();
	size_t i;
	const json_t *j;
	json_array_foreach (json_object_get(resp, "jobs"), i, j)
		if (index < 0 || verb_int(json_object_get(j, "array"), "index", -1) == index)
			json_array_append_new(ids, json_integer(verb_int(j, "id", 0)));
	json_decref(resp);
	if (json_array_size(ids) == 0) {
		json_decref(ids);
		return NULL;
	}
	return ids;
}

/* JOB, ARRAY or ARRAY_INDEX: the id, and the index (-1 when not given). */
static int parse_spec(const struct verb_ctx *v, const char *spec, int64_t *id, int64_t *index)
{
	char head[32];
	const char *us = strchr(spec, '_');
	snprintf(head, sizeof(head), "%.*s", us ? (int)(us - spec) : 31, spec);
	*index = -1;
	int ret = verb_job_id(v, head, id);
	if (ret == CLI_EXIT_OK && us)
		ret = verb_job_id(v, us + 1, index);
	if (ret == CLI_EXIT_OK && (*id < 1 || (us && *index < 0)))
		ret = verb_usage_error(v, "%s: write JOB, ARRAY or ARRAY_INDEX (12, 12_3)", spec);
	return ret;
}

/* The ids spec means, appended to ids: an array's members (or one), else
 * the job. */
static int resolve(struct verb_ctx *v, const char *spec, json_t *ids)
{
	int64_t id, index;
	int ret = parse_spec(v, spec, &id, &index);
	if (ret != CLI_EXIT_OK)
		return ret;
	json_t *members = array_members(v, id, index, &ret);
	if (ret != CLI_EXIT_OK)
		return ret;
	if (members) {
		json_array_extend(ids, members);
		json_decref(members);
	} else if (index >= 0) {
		fprintf(stderr, "anvil cancel: %s: no such array member\n", spec);
		return CLI_EXIT_FAILED;
	} else {
		json_array_append_new(ids, json_integer(id));
	}
	return CLI_EXIT_OK;
}

static int cancel_fn(struct verb_ctx *v)
{
	int64_t id, index;
	int ret = CLI_EXIT_OK;
	for (int i = 0; i < v->args.npos && ret == CLI_EXIT_OK; i++) /* all, before anything */
		ret = parse_spec(v, v->args.pos[i], &id, &index);
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	json_t *all = json_array();
	/* Every JOB is resolved before any job is touched. */
	for (int i = 0; i < v->args.npos && ret == CLI_EXIT_OK; i++)
		ret = resolve(v, v->args.pos[i], all);
	int n = (int)json_array_size(all);
	int64_t *ids = xcalloc((size_t)n + 1, sizeof(*ids));
	for (int i = 0; i < n; i++)
		ids[i] = json_integer_value(json_array_get(all, (size_t)i));
	json_decref(all);
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
                "that has already ended changes nothing. As with scancel, JOB may be an\n"
                "array (its id: every member) or one member of it, ARRAY_INDEX (12_3).\n",
};
