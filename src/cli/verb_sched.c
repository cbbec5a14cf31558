/* verb_sched.c - the scheduler's verbs: `anvil why JOB` (why a job waits and
 * when it should start), `anvil queue ls|set` and `anvil team set`. The
 * `node` verb is in verb_node.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"

void verb_why_render(const json_t *job, int64_t now_ms, struct buf *out)
{
	const char *state = verb_str(job, "state");
	buf_printf(out, "job %lld (%s) is %s", (long long)verb_int(job, "id", -1),
	           verb_str(job, "name")[0] ? verb_str(job, "name") : "unnamed", state);
	buf_printf(out, ": %s\n", verb_str(job, "reason"));
	int64_t gpus = verb_int(job, "gpus", 0);
	if (gpus == 0)
		buf_printf(out,
		           "  asks for  %lld node(s), CPU-only (0 GPUs), in queue %s, team %s\n",
		           (long long)verb_int(job, "nodes", 0), verb_str(job, "queue"),
		           verb_str(job, "team"));
	else
		buf_printf(out, "  asks for  %lld node(s) x %lld GPU(s) in queue %s, team %s\n",
		           (long long)verb_int(job, "nodes", 0), (long long)gpus,
		           verb_str(job, "queue"), verb_str(job, "team"));
	int64_t est = verb_int(job, "est_start_time_ms", -1);
	const char *reason = verb_str(job, "reason");
	if (strcmp(state, "pending") == 0) {
		char d[32];
		if (strncmp(reason, "waiting for job ", 16) == 0) {
			buf_adds(out,
			         "  estimated start: once its dependencies hold (until then the "
			         "scheduler does not consider it)\n");
		} else if (strncmp(reason, "array ", 6) == 0 && strstr(reason, ", its limit (%")) {
			buf_adds(out,
			         "  estimated start: when a running member of its array ends\n");
		} else if (gpus == 0) {
			buf_adds(out,
			         "  estimated start: unknown (a CPU-only job starts when a node "
			         "has room for its ranks; no estimate is made)\n");
		} else if (est > 0) {
			clitable_duration(d, sizeof(d), est > now_ms ? est - now_ms : 0);
			buf_printf(out,
			           "  estimated start in %s (from the running jobs' time limits)\n",
			           d);
		} else {
			buf_adds(out, "  estimated start: unknown (no running job's end in sight "
			              "frees enough, or more than 4096 jobs wait ahead of it)\n");
		}
	}
}

static int why_fn(struct verb_ctx *v)
{
	return verb_job_print(v, "/why", verb_why_render);
}

const struct verb verb_why = {
        .name = "why",
        .fn = why_fn,
        .opts = verb_json_opts,
        .min_pos = 1,
        .max_pos = 1,
        .usage = "[--json] JOB",
        .summary = "say why a job waits, and when it should start",
        .help = "Says in plain words why JOB is pending (GPUs, topology, quota, a reservation\n"
                "for a higher job) and its estimated start from a dry run of the scheduler\n"
                "over the running jobs' time limits. JOB is a job's id, or an array's member\n"
                "as ARRAY_INDEX (12_3).\n",
};

void verb_queues_render(const json_t *resp, int64_t now_ms, struct buf *out)
{
	(void)now_ms;
	struct clitable *t =
	        clitable_new(10, "QUEUE", "PRIORITY", "WEIGHT", "BORROW", "LIMIT", "IDLE",
	                     "PENDING", "RUNNING", "GPUS", "QUOTAS (used/nominal)");
	size_t i, k;
	const json_t *q, *quota;
	json_array_foreach (json_object_get(resp, "queues"), i, q) {
		char limit[32], idle[32];
		clitable_duration(limit, sizeof(limit), verb_int(q, "default_time_limit_ms", -1));
		int64_t idle_ms = verb_int(q, "idle_timeout_ms", 0);
		clitable_duration(idle, sizeof(idle), idle_ms > 0 ? idle_ms : -1);
		struct buf quotas;
		buf_init(&quotas);
		json_array_foreach (json_object_get(q, "quotas"), k, quota)
			buf_printf(&quotas, "%s%s %lld/%lld", k ? ", " : "",
			           verb_str(quota, "team"),
			           (long long)verb_int(quota, "used_gpus", 0),
			           (long long)verb_int(quota, "nominal_gpus", 0));
		clitable_add(t, "%s", verb_str(q, "name"));
		clitable_add(t, "%lld", (long long)verb_int(q, "priority", 0));
		clitable_add(t, "%lld", (long long)verb_int(q, "weight", 1));
		clitable_add(t, "%s", json_is_true(json_object_get(q, "borrowing")) ? "yes" : "no");
		clitable_add(t, "%s", limit);
		clitable_add(t, "%s", idle);
		clitable_add(t, "%lld", (long long)verb_int(q, "pending_jobs", 0));
		clitable_add(t, "%lld", (long long)verb_int(q, "running_jobs", 0));
		clitable_add(t, "%lld", (long long)verb_int(q, "used_gpus", 0));
		clitable_add(t, "%s", quotas.len ? quotas.data : "unlimited");
		buf_cleanup(&quotas);
	}
	clitable_render(t, out);
	clitable_free(t);
	buf_adds(out, "\n");
	t = clitable_new(4, "TEAM", "WEIGHT", "GPUS", "FAIR SHARE (decayed GPU-hours / weight)");
	json_array_foreach (json_object_get(resp, "teams"), i, q) {
		clitable_add(t, "%s", verb_str(q, "name"));
		clitable_add(t, "%lld", (long long)verb_int(q, "weight", 1));
		clitable_add(t, "%lld", (long long)verb_int(q, "used_gpus", 0));
		clitable_add(t, "%.3f", json_real_value(json_object_get(q, "fair_share_score")));
	}
	clitable_render(t, out);
	clitable_free(t);
}

static const struct cliargs_opt queue_opts[] = {
        {"priority", 0, CLIARGS_INT, "P", "queue priority, -1000..1000 (higher first)"},
        {"weight", 0, CLIARGS_INT, "W", "share against queues of the same priority"},
        {"borrowing", 0, CLIARGS_STR, "yes|no", "may its teams use others' idle quota"},
        {"default-time-limit", 0, CLIARGS_DURATION, "DURATION", "time limit of jobs that set none"},
        {"idle-timeout", 0, CLIARGS_DURATION, "DURATION",
         "end sessions whose GPUs are idle this long (0: never)"},
        {"run-as-root", 0, CLIARGS_STR, "yes|no",
         "its jobs' ranks run as root, not as the nodes' rank account"},
        {"quota", 0, CLIARGS_KV, "TEAM=GPUS",
         "a team's nominal GPUs here (repeatable; TEAM= removes)"},
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's JSON"},
        {NULL, 0, 0, NULL, NULL},
};

static json_t *queue_body(struct verb_ctx *v, const char *name, int *bad)
{
	const struct cliargs *a = &v->args;
	json_t *body = json_pack("{s:s}", "name", name);
	const struct cliargs_value *x;
	if ((x = cliargs_get(a, "priority"))->set)
		json_object_set_new(body, "priority", json_integer(x->num));
	if ((x = cliargs_get(a, "weight"))->set)
		json_object_set_new(body, "weight", json_integer(x->num));
	if ((x = cliargs_get(a, "default-time-limit"))->set)
		json_object_set_new(body, "default_time_limit_ms", json_integer(x->num));
	if ((x = cliargs_get(a, "idle-timeout"))->set)
		json_object_set_new(body, "idle_timeout_ms", json_integer(x->num));
	const char *b = cliargs_str(a, "borrowing");
	if (b && strcmp(b, "yes") != 0 && strcmp(b, "no") != 0)
		*bad = verb_usage_error(v, "--borrowing: \"%s\" is not yes or no", b);
	if (b)
		json_object_set_new(body, "borrowing", json_boolean(strcmp(b, "yes") == 0));
	const char *root = cliargs_str(a, "run-as-root");
	if (root && strcmp(root, "yes") != 0 && strcmp(root, "no") != 0)
		*bad = verb_usage_error(v, "--run-as-root: \"%s\" is not yes or no", root);
	if (root)
		json_object_set_new(body, "run_as_root", json_boolean(strcmp(root, "yes") == 0));
	x = cliargs_get(a, "quota");
	json_t *quotas = json_object();
	for (size_t i = 0; i < x->nlist; i++) {
		const char *eq = strchr(x->list[i], '=');
		char team[64];
		snprintf(team, sizeof(team), "%.*s", (int)(eq - x->list[i]), x->list[i]);
		int64_t n;
		if (!eq[1])
			json_object_set_new(quotas, team, json_null());
		else if (parse_i64(eq + 1, INT64_MIN, INT64_MAX, &n) == 0)
			json_object_set_new(quotas, team, json_integer(n));
		else
			*bad = verb_usage_error(v, "--quota: \"%s\" is not TEAM=GPUS", x->list[i]);
	}
	if (json_object_size(quotas))
		json_object_set(body, "quotas", quotas);
	json_decref(quotas);
	return body;
}

static int queue_fn(struct verb_ctx *v)
{
	const char *sub = v->args.pos[0];
	int ls = strcmp(sub, "ls") == 0 || strcmp(sub, "list") == 0;
	if (!ls && strcmp(sub, "set") != 0)
		return verb_usage_error(v, "\"%s\" is not ls or set", sub);
	if (ls && v->args.npos != 1)
		return verb_usage_error(v, "usage: anvil queue ls [--json]");
	if (!ls && v->args.npos != 2)
		return verb_usage_error(v, "usage: anvil queue set NAME [options]");
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	if (ls)
		return verb_get_print(v, "/v1/queues", NULL, verb_queues_render);
	int bad = CLI_EXIT_OK;
	json_t *body = queue_body(v, v->args.pos[1], &bad), *resp = NULL;
	if (bad == CLI_EXIT_OK)
		ret = cliconn_call(&v->conn, "POST", "/v1/queues", body, &resp);
	json_decref(body);
	if (bad != CLI_EXIT_OK)
		return bad;
	if (ret == CLI_EXIT_OK)
		printf("queue %s updated\n", v->args.pos[1]);
	json_decref(resp);
	return ret;
}

const struct verb verb_queue = {
        .name = "queue",
        .fn = queue_fn,
        .opts = queue_opts,
        .min_pos = 1,
        .max_pos = 2,
        .usage = "ls [--json] | set NAME [--priority P] [--weight W] [--borrowing yes|no] "
                 "[--default-time-limit DUR] [--idle-timeout DUR] [--quota TEAM=GPUS]...",
        .summary = "list queues (usage against quota, fair share) or create/change one",
        .help = "`anvil queue ls` shows each queue's priority, weight, borrowing, default time\n"
                "limit, idle timeout, jobs and GPUs, each team's quota used/nominal, and the\n"
                "teams' fair-share standing. `anvil queue set NAME ...` creates or changes a\n"
                "queue at run time; every change is recorded as an event. --idle-timeout ends\n"
                "the queue's sessions (anvil shell) whose GPUs have been idle that long, with\n"
                "a warning on their terminal first; 0 turns it off.\n",
};

static const struct cliargs_opt team_opts[] = {
        {"weight", 0, CLIARGS_INT, "W", "fair-share weight (higher: a bigger share)"},
        {NULL, 0, 0, NULL, NULL},
};

static int team_fn(struct verb_ctx *v)
{
	if (strcmp(v->args.pos[0], "set") != 0 || v->args.npos != 2)
		return verb_usage_error(v, "usage: anvil team set NAME --weight W");
	const struct cliargs_value *w = cliargs_get(&v->args, "weight");
	if (!w->set)
		return verb_usage_error(v, "--weight is required");
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	json_t *body = json_pack("{s:s,s:I}", "name", v->args.pos[1], "weight", (json_int_t)w->num);
	json_t *resp = NULL;
	ret = cliconn_call(&v->conn, "POST", "/v1/teams", body, &resp);
	if (ret == CLI_EXIT_OK)
		printf("team %s: weight %lld\n", v->args.pos[1], (long long)w->num);
	json_decref(body);
	json_decref(resp);
	return ret;
}

const struct verb verb_team = {
        .name = "team",
        .fn = team_fn,
        .opts = team_opts,
        .min_pos = 2,
        .max_pos = 2,
        .usage = "set NAME --weight W",
        .summary = "set a team's fair-share weight",
        .help = "Teams are named on jobs (anvil run --team) and in queue quotas; a team's\n"
                "weight divides its recent usage when the scheduler orders teams.\n",
};
