/* wfshow.c - the tables of `anvil wf ls` and `anvil wf show` (wfshow.h).
 * Pure: the server's JSON and the clock in, text out. */
#include "cli/wfshow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/clitable.h"
#include "cli/verb.h"

/* "3/4 ok" style progress: runs that succeeded or were cached, of all. */
static void progress(const json_t *x, char *out, size_t n)
{
	const json_t *c = json_object_get(x, "counts");
	int64_t ok = verb_int(c, "succeeded", 0) + verb_int(c, "cached", 0);
	int64_t total = verb_int(x, "runs", 0), failed = verb_int(c, "failed", 0);
	if (failed)
		snprintf(out, n, "%lld/%lld ok, %lld failed", (long long)ok, (long long)total,
		         (long long)failed);
	else
		snprintf(out, n, "%lld/%lld ok", (long long)ok, (long long)total);
}

static void span(const json_t *o, const char *from, const char *to, int64_t now, char *out,
                 size_t n)
{
	int64_t a = verb_int(o, from, 0), b = verb_int(o, to, 0);
	if (!a) {
		snprintf(out, n, "-");
		return;
	}
	clitable_duration(out, n, (b ? b : now) - a);
}

void wfshow_list(const json_t *list, int64_t now_ms, struct buf *out)
{
	struct clitable *t = clitable_new(6, "ID", "NAME", "STATE", "RUNS", "SUBMITTED", "TIME");
	clitable_right(t, 0);
	size_t i;
	const json_t *x;
	json_array_foreach (list, i, x) {
		char prog[64], when[32], dur[32];
		progress(x, prog, sizeof(prog));
		clitable_time(when, sizeof(when), verb_int(x, "submit_ms", 0));
		span(x, "submit_ms", "end_ms", now_ms, dur, sizeof(dur));
		clitable_add(t, "%lld", (long long)verb_int(x, "id", 0));
		clitable_add(t, "%s", verb_str(x, "name"));
		clitable_add(t, "%s", verb_str(x, "state"));
		clitable_add(t, "%s", prog);
		clitable_add(t, "%s", when);
		clitable_add(t, "%s", dur);
	}
	if (clitable_rows(t))
		clitable_render(t, out);
	else
		buf_adds(out, "no workflow executions\n");
	clitable_free(t);
}

/* A run's "cache" column: "hit (run 17)", or why it missed, short. */
static void cache_cell(const json_t *r, char *out, size_t n)
{
	const char *note = verb_str(r, "cache");
	if (strcmp(verb_str(r, "state"), "cached") == 0)
		snprintf(out, n, "hit (exec %lld, run %lld)",
		         (long long)verb_int(r, "cached_exec", 0),
		         (long long)verb_int(r, "cached_from", 0));
	else
		snprintf(out, n, "%s", *note ? note : "-");
}

/* Value outputs as "K=V K=V" (objects as K=<kind>). */
static void outputs_cell(const json_t *r, struct buf *out)
{
	const char *k;
	const json_t *o;
	int first = 1;
	json_object_foreach ((json_t *)json_object_get(r, "outputs"), k, o) {
		buf_printf(out, "%s%s=", first ? "" : " ", k);
		if (strcmp(verb_str(o, "kind"), "value") == 0)
			verb_add_clean(out, verb_str(o, "value"));
		else
			buf_printf(out, "<%s>", verb_str(o, "kind"));
		first = 0;
	}
	if (first)
		buf_adds(out, "-");
}

/* Parameters as "lr=0.1 bs=32". */
static void params_cell(const json_t *r, struct buf *out)
{
	const char *k;
	const json_t *v;
	int first = 1;
	json_object_foreach ((json_t *)json_object_get(r, "params"), k, v) {
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		const char *text = json_is_string(v) ? json_string_value(v) : s;
		buf_printf(out, "%s%s=", first ? "" : " ", k);
		verb_add_clean(out, text ? text : "?");
		free(s);
		first = 0;
	}
	if (first)
		buf_adds(out, "-");
}

/* What the run's task needs, "a,b" ("-": nothing), from the compiled
 * workflow. */
static void needs_cell(const json_t *x, const json_t *r, struct buf *out)
{
	const json_t *task =
	        json_array_get(json_object_get(json_object_get(x, "workflow"), "tasks"),
	                       (size_t)verb_int(r, "task_index", 0));
	const json_t *needs = json_object_get(task, "needs");
	size_t i;
	const json_t *n;
	json_array_foreach (needs, i, n)
		buf_printf(out, "%s%s", i ? "," : "", json_string_value(n));
	if (!json_array_size(needs))
		buf_adds(out, "-");
}

static void run_row(struct clitable *t, const json_t *x, const json_t *r, int64_t now_ms)
{
	char dur[32], cache[220], job[32];
	span(r, "start_ms", "end_ms", now_ms, dur, sizeof(dur));
	cache_cell(r, cache, sizeof(cache));
	int64_t jid = verb_int(r, "job_id", 0);
	snprintf(job, sizeof(job), jid ? "%lld" : "-", (long long)jid);
	struct buf params, outs, needs;
	buf_init(&params);
	buf_init(&outs);
	buf_init(&needs);
	params_cell(r, &params);
	outputs_cell(r, &outs);
	needs_cell(x, r, &needs);
	clitable_add(t, "%s", verb_str(r, "label"));
	clitable_add(t, "%s", needs.data ? needs.data : "");
	clitable_add(t, "%s", verb_str(r, "state"));
	clitable_add(t, "%lld", (long long)verb_int(r, "tries", 0));
	clitable_add(t, "%s", job);
	clitable_add(t, "%s", *verb_str(r, "node") ? verb_str(r, "node") : "-");
	clitable_add(t, "%s", dur);
	clitable_add(t, "%s", params.data ? params.data : "-");
	clitable_add(t, "%s", outs.data ? outs.data : "-");
	clitable_add(t, "%s", cache);
	buf_cleanup(&params);
	buf_cleanup(&outs);
	buf_cleanup(&needs);
}

void wfshow_exec(const json_t *x, int64_t now_ms, struct buf *out)
{
	char prog[64], when[32], dur[32];
	progress(x, prog, sizeof(prog));
	clitable_time(when, sizeof(when), verb_int(x, "submit_ms", 0));
	span(x, "submit_ms", "end_ms", now_ms, dur, sizeof(dur));
	buf_printf(out, "workflow %lld (%s): %s, %s\n", (long long)verb_int(x, "id", 0),
	           verb_str(x, "name"), verb_str(x, "state"), prog);
	buf_printf(out, "submitted %s, ran %s", when, dur);
	if (*verb_str(x, "bundle"))
		buf_printf(out, ", code %.19s", verb_str(x, "bundle"));
	buf_adds(out, "\n");
	if (*verb_str(x, "reason")) {
		buf_adds(out, "reason: ");
		verb_add_clean(out, verb_str(x, "reason"));
		buf_adds(out, "\n");
	}
	buf_adds(out, "\n");
	struct clitable *t = clitable_new(10, "TASK", "NEEDS", "STATE", "TRIES", "JOB", "NODE",
	                                  "TIME", "PARAMS", "OUTPUTS", "CACHE");
	clitable_right(t, 3);
	size_t i;
	const json_t *r;
	json_array_foreach (json_object_get(x, "run_list"), i, r)
		run_row(t, x, r, now_ms);
	clitable_render(t, out);
	clitable_free(t);
	json_array_foreach (json_object_get(x, "run_list"), i, r) {
		const char *why = verb_str(r, "why");
		if (!*why || !strcmp(verb_str(r, "state"), "succeeded"))
			continue;
		buf_printf(out, "%s: ", verb_str(r, "label"));
		verb_add_clean(out, why);
		buf_adds(out, "\n");
	}
}
