/* verb_events.c - `anvil events`: the cluster's event log (GET /v1/events),
 * oldest first, as `kubectl get events` shows it: every decision the
 * server took (placements, preemptions, requeues, node states, GPU faults,
 * node checks) with its reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"

void verb_events_render(const json_t *events, int64_t now_ms, struct buf *out)
{
	if (json_array_size(events) == 0) {
		buf_adds(out, "no events\n");
		return;
	}
	struct clitable *t = clitable_new(5, "TIME", "AGE", "KIND", "JOB", "MESSAGE");
	/* the server answers newest first */
	for (size_t i = json_array_size(events); i-- > 0;) {
		const json_t *e = json_array_get(events, i);
		int64_t at = verb_int(e, "time_ms", 0), job = verb_int(e, "job_id", 0);
		char when[32], age[32];
		clitable_time(when, sizeof(when), at);
		clitable_duration(age, sizeof(age), now_ms > at ? now_ms - at : 0);
		clitable_add(t, "%s", when);
		clitable_add(t, "%s", age);
		clitable_add(t, "%s", verb_str(e, "kind"));
		if (job > 0)
			clitable_add(t, "%lld", (long long)job);
		else
			clitable_add(t, "-");
		clitable_add(t, "%s", verb_str(e, "message"));
	}
	clitable_render(t, out);
	clitable_free(t);
}

static const struct cliargs_opt events_opts[] = {
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's JSON"},
        {"job", 0, CLIARGS_STR, "JOB", "only this job's events (JOB, or ARRAY_INDEX: 12_3)"},
        {"limit", 'n', CLIARGS_INT, "N", "the newest N events (default 50, at most 10000)"},
        {NULL, 0, 0, NULL, NULL},
};

static int events_fn(struct verb_ctx *v)
{
	const char *job = cliargs_str(&v->args, "job");
	const struct cliargs_value *limit = cliargs_get(&v->args, "limit");
	int64_t n = limit && limit->set ? limit->num : 50, id = 0;
	struct verb_job_ref ref;
	if (n < 1 || n > 10000)
		return verb_usage_error(v, "--limit %lld: expected 1 to 10000", (long long)n);
	int ret = job ? verb_job_ref(v, job, &ref) : CLI_EXIT_OK;
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	if (ret == CLI_EXIT_OK && job)
		ret = verb_job_resolve(v, &ref, &id);
	if (ret != CLI_EXIT_OK)
		return ret;
	char path[96];
	int len = snprintf(path, sizeof(path), "/v1/events?limit=%lld", (long long)n);
	if (id)
		snprintf(path + len, sizeof(path) - (size_t)len, "&job=%lld", (long long)id);
	return verb_get_print(v, path, "events", verb_events_render);
}

const struct verb verb_events = {
        .name = "events",
        .fn = events_fn,
        .opts = events_opts,
        .usage = "[--json] [--job JOB] [-n N]",
        .summary = "the cluster's event log: what the server decided, and why",
        .help = "Prints the newest events, oldest first: job submissions, placements,\n"
                "preemptions and requeues, cancels, time limits, node registrations and\n"
                "states (cordoned, draining, drained, lost), GPU faults with their scope,\n"
                "GPUs quarantined and back in service, node checks. --job keeps one job's.\n",
};
