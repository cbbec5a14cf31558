/* verb_jobs.c - `anvil jobs`: the job list (GET /v1/jobs), newest first. */
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"

#define JOBS_COMMAND_MAX 40
#define JOBS_WHERE_MAX   40

static void add_times(struct clitable *t, const json_t *job, int64_t now_ms)
{
	char age[32], runtime[32];
	int64_t submit = verb_int(job, "submit_time_ms", -1);
	int64_t start = verb_int(job, "start_time_ms", -1);
	int64_t end = verb_int(job, "end_time_ms", -1);
	/* Clocks of client and server may differ a little: never negative. */
	int64_t waited = submit < 0 ? -1 : now_ms > submit ? now_ms - submit : 0;
	int64_t ran = start < 0 ? -1 : (end >= 0 ? end : now_ms) - start;
	clitable_duration(age, sizeof(age), waited);
	clitable_duration(runtime, sizeof(runtime), start >= 0 && ran < 0 ? 0 : ran);
	clitable_add(t, "%s", age);
	clitable_add(t, "%s", runtime);
}

/* WHERE: each rank's node and GPUs, "node-1:0,1 node-2:0,1". */
static void add_placement(struct clitable *t, const json_t *placement)
{
	struct buf b;
	buf_init(&b);
	size_t i;
	const json_t *p;
	json_array_foreach (placement, i, p) {
		if (b.len > JOBS_WHERE_MAX) {
			buf_adds(&b, " ...");
			break;
		}
		buf_printf(&b, "%s%s", i ? " " : "",
		           json_is_string(p) ? json_string_value(p) : "?");
	}
	clitable_add(t, "%s", b.len ? b.data : "-");
	buf_cleanup(&b);
}

static void add_row(struct clitable *t, const json_t *job, int64_t now_ms)
{
	const char *state = verb_str(job, "state");
	clitable_add(t, "%lld", (long long)verb_int(job, "id", -1));
	clitable_add(t, "%s", verb_str(job, "name"));
	clitable_add(t, "%s%s", state,
	             json_is_true(json_object_get(job, "borrowed")) ? " (borrowed)" : "");
	/* A pending job runs nowhere, whatever an older server says of the
	 * attempt it was requeued from. */
	add_placement(t, strcmp(state, "pending") == 0 ? NULL : json_object_get(job, "placement"));
	clitable_add(t, "%s", verb_str(job, "queue"));
	clitable_add(t, "%lld", (long long)verb_int(job, "nodes", 0));
	clitable_add(t, "%lld", (long long)verb_int(job, "gpus", 0));
	add_times(t, job, now_ms);
	int64_t code = verb_int(job, "exit_code", -1);
	if (code < 0)
		clitable_add(t, "-");
	else
		clitable_add(t, "%lld", (long long)code);
	struct buf cmd;
	buf_init(&cmd);
	verb_command_line(json_object_get(job, "command"), JOBS_COMMAND_MAX, &cmd);
	clitable_add(t, "%s", cmd.len ? cmd.data : "");
	buf_cleanup(&cmd);
	clitable_add(t, "%s", verb_str(job, "reason"));
}

void verb_jobs_render(const json_t *jobs, int64_t now_ms, struct buf *out)
{
	if (json_array_size(jobs) == 0) {
		buf_adds(out, "no jobs\n");
		return;
	}
	struct clitable *t =
	        clitable_new(12, "ID", "NAME", "STATE", "WHERE", "QUEUE", "NODES", "GPUS/NODE",
	                     "AGE", "RUNTIME", "EXIT", "COMMAND", "REASON");
	clitable_right(t, 0);
	clitable_right(t, 5);
	clitable_right(t, 6);
	clitable_right(t, 9);
	size_t i;
	const json_t *job;
	json_array_foreach (jobs, i, job)
		add_row(t, job, now_ms);
	clitable_render(t, out);
	clitable_free(t);
}

static const struct cliargs_opt opts[] = {
        {"state", 's', CLIARGS_STR, "S",
         "only jobs in state S (pending, running, succeeded, ...; active = not ended)"},
        {"limit", 'n', CLIARGS_INT, "N", "at most N jobs"},
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's JSON"},
        {NULL, 0, 0, NULL, NULL},
};

static int jobs_fn(struct verb_ctx *v)
{
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	struct buf path;
	buf_init(&path);
	buf_adds(&path, "/v1/jobs");
	const char *state = cliargs_str(&v->args, "state");
	const struct cliargs_value *limit = cliargs_get(&v->args, "limit");
	if (state) {
		buf_adds(&path, "?state=");
		cliconn_escape(&path, state);
	}
	if (limit->set)
		buf_printf(&path, "%climit=%lld", state ? '&' : '?', (long long)limit->num);
	ret = verb_get_print(v, path.data, "jobs", verb_jobs_render);
	buf_cleanup(&path);
	return ret;
}

const struct verb verb_jobs = {
        .name = "jobs",
        .fn = jobs_fn,
        .opts = opts,
        .usage = "[--state S] [--limit N] [--json]",
        .summary = "list jobs, newest first",
        .help = "Lists jobs, newest first: id, name, state (\"(borrowed)\" when admitted on\n"
                "another team's idle quota), where it runs, queue, size, time since submission,\n"
                "run time, exit code, command, and why a pending job waits.\n",
};
