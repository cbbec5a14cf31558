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

/* "12_3": an array's member by the array's id and its index; else the id. */
static void add_id(struct clitable *t, const json_t *job)
{
	char name[48];
	verb_job_name(job, name, sizeof(name));
	clitable_add(t, "%s", name);
}

static void add_row(struct clitable *t, const json_t *job, int64_t now_ms)
{
	const char *state = verb_str(job, "state");
	add_id(t, job);
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

/* An array as the server lists it grouped (GET /v1/jobs?group=arrays): one
 * row, "12_[0-29%8]", its members counted by state, and the reason of the
 * next member in line. */
static void add_array_row(struct clitable *t, const json_t *entry, int64_t now_ms)
{
	static const char *const states[] = {"running", "scheduled", "pending", "succeeded",
	                                     "failed",  "cancelled", "lost",    NULL};
	const json_t *a = json_object_get(entry, "array"), *counts = json_object_get(a, "states");
	int64_t max = verb_int(a, "max_running", 0);
	char max_text[24] = "";
	if (max)
		snprintf(max_text, sizeof(max_text), "%%%lld", (long long)max);
	clitable_add(t, "%lld_[%lld-%lld%s]", (long long)verb_int(a, "id", 0),
	             (long long)verb_int(a, "first_index", 0),
	             (long long)verb_int(a, "last_index", 0), max_text);
	clitable_add(t, "%s", verb_str(entry, "name"));
	struct buf st;
	buf_init(&st);
	for (int k = 0; states[k]; k++) {
		int64_t n = verb_int(counts, states[k], 0);
		if (n > 0)
			buf_printf(&st, "%s%lld %s", st.len ? ", " : "", (long long)n, states[k]);
	}
	clitable_add(t, "%s", st.len ? st.data : "");
	buf_cleanup(&st);
	clitable_add(t, "-");
	clitable_add(t, "%s", verb_str(entry, "queue"));
	clitable_add(t, "%lld", (long long)verb_int(entry, "nodes", 0));
	clitable_add(t, "%lld", (long long)verb_int(entry, "gpus", 0));
	add_times(t, entry, now_ms);
	clitable_add(t, "-");
	struct buf cmd;
	buf_init(&cmd);
	verb_command_line(json_object_get(entry, "command"), JOBS_COMMAND_MAX, &cmd);
	clitable_add(t, "%s", cmd.len ? cmd.data : "");
	buf_cleanup(&cmd);
	clitable_add(t, "%s", verb_str(entry, "reason"));
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
	json_array_foreach (jobs, i, job) {
		if (json_object_get(json_object_get(job, "array"), "members"))
			add_array_row(t, job, now_ms);
		else
			add_row(t, job, now_ms);
	}
	clitable_render(t, out);
	clitable_free(t);
}

static const struct cliargs_opt opts[] = {
        {"state", 's', CLIARGS_STR, "S",
         "only jobs in state S (pending, running, succeeded, ...; active = not ended)"},
        {"limit", 'n', CLIARGS_INT, "N", "at most N jobs"},
        {"expand", 'a', CLIARGS_FLAG, NULL, "every member of an array on its own line"},
        {"array", 0, CLIARGS_INT, "ID", "only the members of array ID (one line each)"},
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
	const char *state = cliargs_str(&v->args, "state");
	const struct cliargs_value *limit = cliargs_get(&v->args, "limit"),
	                           *array = cliargs_get(&v->args, "array");
	int expand = cliargs_flag(&v->args, "expand") || array->set;
	/* Grouped on the server: a large array is one entry, so the jobs
	 * before it are listed, and its counts are over all its members. */
	buf_printf(&path, "/v1/jobs?group=%s", expand ? "none" : "arrays");
	if (state) {
		buf_adds(&path, "&state=");
		cliconn_escape(&path, state);
	}
	if (limit->set)
		buf_printf(&path, "&limit=%lld", (long long)limit->num);
	if (array->set)
		buf_printf(&path, "&array=%lld", (long long)array->num);
	json_t *resp = NULL;
	ret = cliconn_call(&v->conn, "GET", path.data, NULL, &resp);
	buf_cleanup(&path);
	if (ret != CLI_EXIT_OK)
		return ret;
	verb_print(v, resp, "jobs", verb_jobs_render);
	if (!cliargs_flag(&v->args, "json") && json_is_true(json_object_get(resp, "more")))
		fprintf(stderr,
		        "anvil jobs: the newest %zu shown; more match (--limit N shows more, "
		        "--state S fewer)\n",
		        json_array_size(json_object_get(resp, "jobs")));
	json_decref(resp);
	return CLI_EXIT_OK;
}

const struct verb verb_jobs = {
        .name = "jobs",
        .fn = jobs_fn,
        .opts = opts,
        .usage = "[--state S] [--limit N] [--expand] [--array ID] [--json]",
        .summary = "list jobs, newest first",
        .help = "Lists jobs, newest first: id, name, state (\"(borrowed)\" when admitted on\n"
                "another team's idle quota), where it runs, queue, size, time since submission,\n"
                "run time, exit code, command, and why a pending job waits. An array is one\n"
                "line, 12_[0-29%8], counting one against --limit (100 by default), with all\n"
                "its members counted by state and the reason of the next one to start;\n"
                "--expand lists each member, 12_3, and --array ID only that array's.\n",
};
