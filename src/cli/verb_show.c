/* verb_show.c - `anvil show JOB`: one job with its attempts and ranks
 * (GET /v1/jobs/ID). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"

static void field(struct buf *out, const char *label, const char *value)
{
	buf_printf(out, "  %-11s", label);
	verb_add_clean(out, *value ? value : "-");
	buf_adds(out, "\n");
}

/* "2026-11-29 22:40:01 (5m03s ago)" or "-". */
static void time_field(struct buf *out, const char *label, int64_t at, int64_t now_ms)
{
	char when[64] = "-", ago[32];
	if (at >= 0) {
		clitable_time(when, sizeof(when), at);
		clitable_duration(ago, sizeof(ago), now_ms > at ? now_ms - at : 0);
		size_t n = strlen(when);
		snprintf(when + n, sizeof(when) - n, " (%s ago)", ago);
	}
	field(out, label, when);
}

static void env_line(const json_t *env, struct buf *out)
{
	const char *key;
	const json_t *val;
	json_object_foreach ((json_t *)env, key, val) {
		if (out->len)
			buf_adds(out, " ");
		buf_printf(out, "%s=%s", key, json_is_string(val) ? json_string_value(val) : "?");
	}
}

/* The names of the variables exported from the submitter's environment
 * (their values are not shown), wrapped under the label's column. */
static void exported_lines(const json_t *names, struct buf *out)
{
	size_t i, col = 0;
	const json_t *name;
	json_array_foreach (names, i, name) {
		const char *s = json_is_string(name) ? json_string_value(name) : "?";
		if (i == 0)
			buf_printf(out, "  %-11s", "exported");
		else if (col + 1 + strlen(s) > 80) {
			buf_printf(out, "\n  %-11s", "");
			col = 0;
		} else
			buf_adds(out, " ");
		verb_add_clean(out, s);
		col += strlen(s) + (col ? 1 : 0);
	}
	if (json_array_size(names))
		buf_adds(out, "\n");
}

/* A job with a head: its head's and worker's command lines, and how long
 * its ranks wait for the head to answer. */
static void head_lines(const json_t *job, struct buf *out)
{
	const char *head = verb_str(job, "head");
	if (!*head)
		return;
	field(out, "head", head);
	const char *worker = verb_str(job, "worker");
	if (*worker)
		field(out, "worker", worker);
	char s[64];
	clitable_duration(s, sizeof(s), verb_int(job, "head_timeout_ms", -1));
	field(out, "head wait", s);
}

static void render_job(const json_t *job, int64_t now_ms, struct buf *out)
{
	char s[256];
	struct buf tmp;
	buf_init(&tmp);
	buf_printf(out, "job %lld%s", (long long)verb_int(job, "id", -1),
	           *verb_str(job, "name") ? ": " : "");
	verb_add_clean(out, verb_str(job, "name"));
	buf_adds(out, "\n");
	field(out, "state", verb_str(job, "state"));
	if (*verb_str(job, "reason"))
		field(out, "reason", verb_str(job, "reason"));
	snprintf(s, sizeof(s), "%s (priority %lld)", verb_str(job, "queue"),
	         (long long)verb_int(job, "priority", 0));
	field(out, "queue", s);
	int64_t nodes = verb_int(job, "nodes", 0), gpus = verb_int(job, "gpus", 0);
	snprintf(s, sizeof(s), "%lld node%s x %lld GPU%s%s", (long long)nodes,
	         nodes == 1 ? "" : "s", (long long)gpus, gpus == 1 ? "" : "s",
	         gpus == 0 ? " (CPU-only)" : "");
	field(out, "size", s);
	verb_command_line(json_object_get(job, "command"), 0, &tmp);
	field(out, "command", tmp.len ? tmp.data : "");
	head_lines(job, out);
	if (json_is_true(json_object_get(job, "mpi")))
		field(out, "mpi", "mpirun on rank 0 over every rank's node (anvil run --mpi)");
	const char *cwd = verb_str(job, "cwd");
	field(out, "cwd", *cwd ? cwd : "(the agent's work dir)");
	buf_reset(&tmp);
	env_line(json_object_get(job, "env"), &tmp);
	if (tmp.len)
		field(out, "env", tmp.data);
	exported_lines(json_object_get(job, "exported"), out);
	clitable_duration(s, sizeof(s), verb_int(job, "grace_ms", -1));
	field(out, "grace", s);
	time_field(out, "submitted", verb_int(job, "submit_time_ms", -1), now_ms);
	time_field(out, "started", verb_int(job, "start_time_ms", -1), now_ms);
	time_field(out, "ended", verb_int(job, "end_time_ms", -1), now_ms);
	int64_t code = verb_int(job, "exit_code", -1);
	snprintf(s, sizeof(s), "%lld", (long long)code);
	field(out, "exit code", code < 0 ? "" : s);
	buf_cleanup(&tmp);
}

static void gpu_list(const json_t *gpus, char *out, size_t n)
{
	size_t i, len = 0;
	const json_t *g;
	out[0] = '\0';
	json_array_foreach (gpus, i, g) {
		int w = snprintf(out + len, n - len, "%s%lld", i ? "," : "",
		                 (long long)json_integer_value(g));
		if (w < 0 || (size_t)w >= n - len)
			break;
		len += (size_t)w;
	}
}

/* Why the attempt ended: "requeued: preempted for job 7 (higher priority)",
 * "ended: rank 0 on node-1 exited non-zero", or while its ranks are being
 * stopped "stopping: ...". Nothing for an attempt that runs undisturbed. */
static void end_line(const json_t *a, struct buf *out)
{
	const char *why = verb_str(a, "end_reason");
	const char *state = verb_str(a, "state");
	if (!*why)
		return;
	buf_printf(out, "  %s: ",
	           strcmp(state, "preempted") == 0 ? "requeued"
	           : verb_state_final(state)       ? "ended"
	                                           : "stopping");
	verb_add_clean(out, why);
	buf_adds(out, "\n");
}

/* "1.5 MiB", "12 KiB", "300 B". */
static void say_bytes(char *out, size_t n, int64_t b)
{
	if (b >= (1LL << 30))
		snprintf(out, n, "%.1f GiB", (double)b / (double)(1LL << 30));
	else if (b >= (1LL << 20))
		snprintf(out, n, "%.1f MiB", (double)b / (double)(1LL << 20));
	else if (b >= 1024)
		snprintf(out, n, "%lld KiB", (long long)(b / 1024));
	else
		snprintf(out, n, "%lld B", (long long)b);
}

/* The checkpoints its rank 0's agent uploaded, oldest first:
 * "  checkpoint step-3: 1.0 MiB in 2 files (12 KiB sent), written 14:02:10 UTC". */
static void checkpoint_lines(const json_t *a, struct buf *out)
{
	size_t i;
	const json_t *c;
	json_array_foreach (json_object_get(a, "checkpoints"), i, c) {
		char size[32], sent[32], at[32] = "?";
		say_bytes(size, sizeof(size), verb_int(c, "bytes", 0));
		say_bytes(sent, sizeof(sent), verb_int(c, "sent_bytes", 0));
		time_t t = (time_t)(verb_int(c, "time_ms", 0) / 1000);
		struct tm tm;
		if (gmtime_r(&t, &tm))
			strftime(at, sizeof(at), "%H:%M:%S UTC", &tm);
		buf_adds(out, "  checkpoint ");
		verb_add_clean(out, verb_str(c, "name"));
		buf_printf(out, ": %s in %lld file(s) (%s sent), written %s\n", size,
		           (long long)verb_int(c, "files", 0), sent, at);
	}
}

static void render_attempt(const json_t *a, struct buf *out)
{
	buf_printf(out, "\nattempt %lld (id %lld): %s", (long long)verb_int(a, "number", 0),
	           (long long)verb_int(a, "id", -1), verb_str(a, "state"));
	if (json_is_true(json_object_get(a, "borrowed")))
		buf_adds(out, " on borrowed quota");
	if (*verb_str(a, "master_addr"))
		buf_printf(out, ", master %s:%lld", verb_str(a, "master_addr"),
		           (long long)verb_int(a, "master_port", 0));
	if (*verb_str(a, "head_addr"))
		buf_printf(out, ", head %s", verb_str(a, "head_addr"));
	buf_adds(out, "\n");
	end_line(a, out);
	struct clitable *t =
	        clitable_new(7, "RANK", "NODE", "GPUS", "STATE", "PID", "EXIT", "SIGNAL");
	clitable_indent(t, 2);
	clitable_right(t, 0);
	clitable_right(t, 4);
	clitable_right(t, 5);
	clitable_right(t, 6);
	size_t i;
	const json_t *r;
	json_array_foreach (json_object_get(a, "ranks"), i, r) {
		char gpus[256];
		gpu_list(json_object_get(r, "gpus"), gpus, sizeof(gpus));
		clitable_add(t, "%lld", (long long)verb_int(r, "rank", -1));
		clitable_add(t, "%s", verb_str(r, "node"));
		clitable_add(t, "%s", gpus);
		clitable_add(t, "%s", verb_str(r, "state"));
		const char *keys[] = {"pid", "exit_code", "signal"};
		for (size_t k = 0; k < 3; k++) {
			int64_t n = verb_int(r, keys[k], -1);
			if (n < 0)
				clitable_add(t, "-");
			else
				clitable_add(t, "%lld", (long long)n);
		}
	}
	clitable_render(t, out);
	clitable_free(t);
	checkpoint_lines(a, out);
}

void verb_show_render(const json_t *job, int64_t now_ms, struct buf *out)
{
	render_job(job, now_ms, out);
	const json_t *attempts = json_object_get(job, "attempts");
	if (json_array_size(attempts) == 0) {
		buf_adds(out, "\nno attempts yet\n");
		return;
	}
	size_t i;
	const json_t *a;
	json_array_foreach (attempts, i, a)
		render_attempt(a, out);
}

static int show_fn(struct verb_ctx *v)
{
	return verb_job_print(v, "", verb_show_render);
}

const struct verb verb_show = {
        .name = "show",
        .fn = show_fn,
        .opts = verb_json_opts,
        .min_pos = 1,
        .max_pos = 1,
        .usage = "[--json] JOB",
        .summary = "show one job: its state, attempts and ranks",
        .help = "Shows JOB: state (and why it waits), queue, size, command, working\n"
                "directory, environment (only the names of the variables exported from the\n"
                "submitter's environment), head and worker commands, times, exit code, and\n"
                "each attempt (with its head's address): whether it\n"
                "ran on borrowed quota, why it ended or was requeued, and its ranks: node,\n"
                "GPUs, state, pid, exit code, signal. JOB is a job's id, or an array's member\n"
                "as ARRAY_INDEX (12_3).\n",
};
