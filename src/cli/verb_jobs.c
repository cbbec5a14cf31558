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
	const json_t *array = json_object_get(job, "array");
	if (json_is_object(array))
		clitable_add(t, "%lld_%lld", (long long)verb_int(array, "id", 0),
		             (long long)verb_int(array, "index", 0));
	else
		clitable_add(t, "%lld", (long long)verb_int(job, "id", -1));
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

/* An array as one row: "12_[0-29%8]", its members counted by state. */
static void add_array_row(struct clitable *t, const json_t *jobs, const json_t *first,
                          int64_t now_ms)
{
	int64_t id = verb_int(json_object_get(first, "array"), "id", 0);
	int64_t lo = INT64_MAX, hi = -1,
	        max = verb_int(json_object_get(first, "array"), "max_running", 0);
	int counts[8] = {0};
	static const char *const states[] = {"running", "scheduled", "pending", "succeeded",
	                                     "failed",  "cancelled", "lost",    NULL};
	const json_t *reason = NULL;
	size_t i;
	const json_t *j;
	json_array_foreach (jobs, i, j) {
		const json_t *a = json_object_get(j, "array");
		if (verb_int(a, "id", 0) != id)
			continue;
		int64_t idx = verb_int(a, "index", 0);
		lo = idx < lo ? idx : lo;
		hi = idx > hi ? idx : hi;
		for (int k = 0; states[k]; k++)
			if (strcmp(verb_str(j, "state"), states[k]) == 0) {
				counts[k]++;
				if (k == 2 && !reason)
					reason = json_object_get(j, "reason");
			}
	}
	char ids[64], max_text[24] = "";
	if (max)
		snprintf(max_text, sizeof(max_text), "%%%lld", (long long)max);
	snprintf(ids, sizeof(ids), "%lld_[%lld-%lld%s]", (long long)id, (long long)lo,
	         (long long)hi, max_text);
	struct buf st;
	buf_init(&st);
	for (int k = 0; states[k]; k++)
		if (counts[k])
			buf_printf(&st, "%s%d %s", st.len ? ", " : "", counts[k], states[k]);
	clitable_add(t, "%s", ids);
	clitable_add(t, "%s", verb_str(first, "name"));
	clitable_add(t, "%s", st.data ? st.data : "");
	clitable_add(t, "-");
	clitable_add(t, "%s", verb_str(first, "queue"));
	clitable_add(t, "%lld", (long long)verb_int(first, "nodes", 0));
	clitable_add(t, "%lld", (long long)verb_int(first, "gpus", 0));
	add_times(t, first, now_ms);
	clitable_add(t, "-");
	struct buf cmd;
	buf_init(&cmd);
	verb_command_line(json_object_get(first, "command"), JOBS_COMMAND_MAX, &cmd);
	clitable_add(t, "%s", cmd.len ? cmd.data : "");
	buf_cleanup(&cmd);
	clitable_add(t, "%s", reason ? json_string_value(reason) : "");
	buf_cleanup(&st);
}

static void render(const json_t *jobs, int64_t now_ms, int expand, struct buf *out);

void verb_jobs_render(const json_t *jobs, int64_t now_ms, struct buf *out)
{
	render(jobs, now_ms, 0, out);
}

void verb_jobs_render_expanded(const json_t *jobs, int64_t now_ms, struct buf *out)
{
	render(jobs, now_ms, 1, out);
}

static void render(const json_t *jobs, int64_t now_ms, int expand, struct buf *out)
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
	int64_t last_array = 0;
	json_array_foreach (jobs, i, job) {
		int64_t array = verb_int(json_object_get(job, "array"), "id", 0);
		if (expand || !array)
			add_row(t, job, now_ms);
		else if (array != last_array) /* members come together: one row for them */
			add_array_row(t, jobs, job, now_ms);
		last_array = array;
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
	buf_adds(&path, "/v1/jobs");
	const char *state = cliargs_str(&v->args, "state");
	const struct cliargs_value *limit = cliargs_get(&v->args, "limit");
	if (state) {
		buf_adds(&path, "?state=");
		cliconn_escape(&path, state);
	}
	if (limit->set)
		buf_printf(&path, "%climit=%lld", state ? '&' : '?', (long long)limit->num);
	const struct cliargs_value *array = cliargs_get(&v->args, "array");
	if (array->set)
		buf_printf(&path, "%carray=%lld", strchr(path.data, '?') ? '&' : '?',
		           (long long)array->num);
	int expand = cliargs_flag(&v->args, "expand") || array->set;
	ret = verb_get_print(v, path.data, "jobs",
	                     expand ? verb_jobs_render_expanded : verb_jobs_render);
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
