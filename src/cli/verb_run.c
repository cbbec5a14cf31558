/* verb_run.c - `anvil run`: submit a job (POST /v1/jobs), optionally wait
 * for it while streaming its ranks' output (verb_logs.c), and exit with its
 * status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cli/cli.h"
#include "cli/verb.h"

static const struct cliargs_opt opts[] = {
        {"gpus", 0, CLIARGS_INT, "G", "GPUs per node (server default 1)"},
        {"nodes", 0, CLIARGS_INT, "N", "nodes, one rank each (default 1)"},
        {"queue", 0, CLIARGS_STR, "Q", "queue (default \"default\")"},
        {"team", 0, CLIARGS_STR, "TEAM", "team whose quota and fair share it counts against"},
        {"time", 't', CLIARGS_DURATION, "DURATION",
         "time limit: stopped when reached; lets it backfill (default: the queue's)"},
        {"gpu-type", 0, CLIARGS_STR, "MODEL", "GPU model, e.g. h200 or a100"},
        {"gpu-mem", 0, CLIARGS_SIZE, "SIZE", "minimum memory per GPU: 80G, 141G, 40960M"},
        {"pool", 0, CLIARGS_STR, "POOL", "only nodes of this pool"},
        {"selector", 0, CLIARGS_KV, "K=V", "only nodes with this label (repeatable)"},
        {"cpus", 0, CLIARGS_STR, "N", "CPU limit per rank: 0.5, 4 (a CPU-time quota)"},
        {"memory", 0, CLIARGS_SIZE, "SIZE", "memory limit per rank: 16G, 512M"},
        {"checkpointing", 0, CLIARGS_FLAG, NULL,
         "the job checkpoints: preferred when preemption must stop something"},
        {"priority", 0, CLIARGS_INT, "P", "priority within the queue, -1000..1000 (default 0)"},
        {"name", 0, CLIARGS_STR, "NAME", "a name to show in listings"},
        {"env", 'e', CLIARGS_KV, "K=V", "set an environment variable (repeatable)"},
        {"cwd", 0, CLIARGS_STR, "DIR", "working directory on the node (default: the agent's)"},
        {"grace", 0, CLIARGS_DURATION, "DURATION",
         "SIGTERM-to-SIGKILL grace: 30s, 500ms, 2m (default 10s)"},
        {"wait", 'w', CLIARGS_FLAG, NULL, "stream the output and exit with the job's status"},
        {"rank", 'r', CLIARGS_INT, "R", "with --wait: only this rank's output (default: all)"},
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's JSON answer (not with --wait)"},
        {NULL, 0, 0, NULL, NULL},
};

/* Integer options that go into the body under the same name. */
static const char *const int_fields[] = {"gpus", "nodes", "priority"};
static const char *const str_fields[] = {"queue", "name", "cwd", "team", "pool"};

/* --cpus: a plain decimal number ("0.5", "4"); -1 when it is not one. The
 * server says what the bounds are. */
static double parse_cpus(const char *s)
{
	size_t n = strspn(s, "0123456789.");
	char *end = NULL;
	double v = n ? strtod(s, &end) : -1;
	return n && end == s + n && s[n] == '\0' ? v : -1;
}

static json_t *env_object(const struct cliargs_value *env)
{
	json_t *obj = json_object();
	for (size_t i = 0; i < env->nlist; i++) {
		const char *kv = env->list[i];
		const char *eq = strchr(kv, '=');
		char *key = xstrndup(kv, (size_t)(eq - kv));
		json_object_set_new(obj, key, json_string(eq + 1)); /* the last one wins */
		free(key);
	}
	return obj;
}

/* The POST /v1/jobs body: only what was given, so the server's defaults
 * stay the defaults. */
static json_t *submit_body(const struct verb_ctx *v)
{
	const struct cliargs *a = &v->args;
	json_t *body = json_object();
	json_t *cmd = json_array();
	for (int i = 0; i < a->nrest; i++)
		json_array_append_new(cmd, json_string(a->rest[i]));
	json_object_set_new(body, "command", cmd);
	for (size_t i = 0; i < sizeof(int_fields) / sizeof(int_fields[0]); i++) {
		const struct cliargs_value *val = cliargs_get(a, int_fields[i]);
		if (val->set)
			json_object_set_new(body, int_fields[i], json_integer(val->num));
	}
	for (size_t i = 0; i < sizeof(str_fields) / sizeof(str_fields[0]); i++) {
		const char *s = cliargs_str(a, str_fields[i]);
		if (s)
			json_object_set_new(body, str_fields[i], json_string(s));
	}
	const struct cliargs_value *env = cliargs_get(a, "env");
	if (env->set)
		json_object_set_new(body, "env", env_object(env));
	const struct cliargs_value *grace = cliargs_get(a, "grace");
	if (grace->set)
		json_object_set_new(body, "grace_ms", json_integer(grace->num));
	const struct cliargs_value *limit = cliargs_get(a, "time");
	if (limit->set)
		json_object_set_new(body, "time_limit_ms", json_integer(limit->num));
	const char *model = cliargs_str(a, "gpu-type");
	if (model)
		json_object_set_new(body, "gpu_type", json_string(model));
	const struct cliargs_value *mem = cliargs_get(a, "gpu-mem");
	if (mem->set)
		json_object_set_new(body, "min_gpu_memory_bytes", json_integer(mem->num));
	const struct cliargs_value *limit_mem = cliargs_get(a, "memory");
	if (limit_mem->set)
		json_object_set_new(body, "memory_bytes", json_integer(limit_mem->num));
	const char *cpus = cliargs_str(a, "cpus");
	if (cpus) {
		double n = parse_cpus(cpus);
		int whole = n < 1e15 && n == (double)(int64_t)n;
		json_object_set_new(body, "cpus", whole ? json_integer((int64_t)n) : json_real(n));
	}
	const struct cliargs_value *sel = cliargs_get(a, "selector");
	if (sel->set)
		json_object_set_new(body, "selectors", env_object(sel));
	if (cliargs_flag(a, "checkpointing"))
		json_object_set_new(body, "checkpointing", json_true());
	return body;
}

static int check_args(const struct verb_ctx *v)
{
	const struct cliargs *a = &v->args;
	if (a->nrest == 0)
		return verb_usage_error(
		        v, "no command to run (usage: anvil run [options] -- CMD ARGS...)");
	if (a->rest[0][0] == '\0')
		return verb_usage_error(v, "the command is an empty string");
	int wait = cliargs_flag(a, "wait");
	if (wait && cliargs_flag(a, "json"))
		return verb_usage_error(v, "--json and --wait do not go together");
	if (!wait && cliargs_get(a, "rank")->set)
		return verb_usage_error(v, "--rank only applies with --wait");
	const char *cpus = cliargs_str(a, "cpus");
	if (cpus && parse_cpus(cpus) < 0)
		return verb_usage_error(v, "--cpus: \"%s\" is not a number of CPUs like 0.5 or 4",
		                        cpus);
	return CLI_EXIT_OK;
}

/* Says on stderr how a job that did not succeed ended. */
static void report_end(int64_t id, const json_t *job)
{
	const char *state = json_string_value(json_object_get(job, "state"));
	const char *reason = json_string_value(json_object_get(job, "reason"));
	if (!state || strcmp(state, "succeeded") == 0)
		return;
	fprintf(stderr, "anvil: job %lld %s", (long long)id, state);
	int64_t code = verb_int(job, "exit_code", -1);
	if (strcmp(state, "failed") == 0 && code >= 0)
		fprintf(stderr, " with exit code %lld", (long long)code);
	if (reason && *reason)
		fprintf(stderr, ": %s", reason);
	fputc('\n', stderr);
}

static int run_fn(struct verb_ctx *v)
{
	int ret = check_args(v);
	if (ret != CLI_EXIT_OK || (ret = verb_connect(v)) != CLI_EXIT_OK)
		return ret;
	json_t *body = submit_body(v), *resp = NULL, *final = NULL;
	ret = cliconn_call(&v->conn, "POST", "/v1/jobs", body, &resp);
	json_decref(body);
	if (ret != CLI_EXIT_OK)
		return ret;
	int64_t id = verb_int(json_object_get(resp, "job"), "id", -1);
	int wait = cliargs_flag(&v->args, "wait");
	if (cliargs_flag(&v->args, "json"))
		verb_print_json(resp);
	else
		fprintf(wait ? stderr : stdout, "submitted job %lld\n", (long long)id);
	json_decref(resp);
	if (!wait)
		return CLI_EXIT_OK;
	const struct cliargs_value *rank = cliargs_get(&v->args, "rank");
	struct verb_logs_opts lo = {.rank = rank->set ? rank->num : -1, .follow = 1};
	ret = verb_logs_stream(v, id, &lo, &final);
	if (final && verb_state_final(json_string_value(json_object_get(final, "state")))) {
		report_end(id, final);
		verb_logs_failure(v, final, lo.rank);
		ret = verb_run_exit(final);
	}
	json_decref(final);
	return ret;
}

const struct verb verb_run = {
        .name = "run",
        .fn = run_fn,
        .opts = opts,
        .flags = CLIARGS_STOP_AT_POSITIONAL,
        .usage = "[options] [--] CMD [ARGS...]",
        .summary = "submit a job",
        .help = "Submits CMD as a job and prints its id (\"submitted job 7\"). Options end at\n"
                "\"--\" or at the first word that is not an option; everything from there on is\n"
                "the command. Limits (GPUs, nodes, priority, ...) are checked by the server,\n"
                "which says what is wrong.\n"
                "\n"
                "With --wait, the id goes to stderr, the output of every rank (of rank R alone\n"
                "with --rank) streams until the job ends, as `anvil logs -f` prints it (stdout\n"
                "to stdout, stderr to stderr, lines led by \"R: \" when there are several\n"
                "ranks), and anvil exits with the job's status:\n"
                "  0      the job succeeded\n"
                "  N      it failed: the first failing rank's exit code (128+signal if killed)\n"
                "  130    it was cancelled\n"
                "  75     it was lost with its node\n"
                "When the job failed on a rank whose output was not shown, that rank's last\n"
                "lines follow on stderr. Interrupting `anvil run --wait` leaves the job\n"
                "running: `anvil cancel JOB` stops it.\n",
};
