/* verb_run.c - `anvil run`: submit a job (POST /v1/jobs), optionally wait
 * for it while streaming its ranks' output (verb_logs.c), and exit with its
 * status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "cli/cli.h"
#include "cli/local.h"
#include "cli/submit.h"
#include "cli/verb.h"

static const struct cliargs_opt opts[] = {
        SUBMIT_JOB_OPTS,
        {"after", 0, CLIARGS_STR, "JOB[:WHEN],...",
         "wait for these jobs to succeed (:ok, the default), fail (:failed) or end (:any)"},
        {"array", 0, CLIARGS_STR, "INDICES",
         "one job per index (0-29, 1,5,9, 0-98:2) with ANVIL_ARRAY_INDEX; %8: 8 at once"},
        {"head", 0, CLIARGS_STR, "CMD",
         "run CMD (sh -c) on rank 0; the command starts once it answers at $ANVIL_HEAD_ADDR"},
        {"worker", 0, CLIARGS_STR, "CMD",
         "with --head: run CMD (sh -c) on every rank once the head answers"},
        {"head-timeout", 0, CLIARGS_DURATION, "DURATION",
         "with --head: how long to wait for it to answer (default 5m)"},
        {"mpi", 0, CLIARGS_FLAG, NULL,
         "an MPI program: rank 0 runs mpirun over every node, no SSH (see MPI below)"},
        {"requeue", 0, CLIARGS_FLAG, NULL,
         "requeue it when a node of its is lost (default: when it is --checkpointing)"},
        {"no-requeue", 0, CLIARGS_FLAG, NULL, "never requeue it when a node of its is lost"},
        {"max-restarts", 0, CLIARGS_INT, "N",
         "requeue it at most N times after lost nodes or hangs, then it ends (default 3)"},
        {"hang-timeout", 0, CLIARGS_DURATION, "DURATION",
         "a rank with no output, heartbeat or GPU work this long is hung: stacks, requeue"},
        {"field", 0, CLIARGS_KV, "NAME=VALUE",
         "set any field of the job the API takes, by its name (repeatable; see docs/cli.md)"},
        {"wait", 'w', CLIARGS_FLAG, NULL,
         "stream the output and exit with the job's status (an array's: the highest)"},
        {"local", 0, CLIARGS_FLAG, NULL,
         "run the job's one rank on this machine as a node would, without a server"},
        {"rank", 'r', CLIARGS_INT, "R", "with --wait: only this rank's output (default: all)"},
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's JSON answer (not with --wait)"},
        {NULL, 0, 0, NULL, NULL},
};

/* The body (cli/submit.h), from the options, the environment and the
 * current directory; what the user should know goes to stderr. */
static int build_body(const struct verb_ctx *v, json_t **body)
{
	char err[512];
	struct buf notes;
	buf_init(&notes);
	char *cwd = get_current_dir_name(); /* $PWD when it is this directory */
	int rc = submit_body(&v->args, environ, cwd, body, &notes, err, sizeof(err));
	free(cwd);
	char *eol;
	for (const char *line = notes.data; line && (eol = strchr(line, '\n')); line = eol + 1)
		fprintf(stderr, "anvil run: %.*s\n", (int)(eol - line), line);
	buf_cleanup(&notes);
	return rc ? verb_usage_error(v, "%s", err) : CLI_EXIT_OK;
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
	if (cliargs_flag(a, "requeue") && cliargs_flag(a, "no-requeue"))
		return verb_usage_error(v, "--requeue and --no-requeue do not go together");
	if (cliargs_get(a, "rank")->set && cliargs_str(a, "array"))
		return verb_usage_error(v, "--rank follows one job's output, not an --array's "
		                           "(anvil logs JOB --rank R reads a member's)");
	return CLI_EXIT_OK;
}

/* Waits (the job long poll, GET /v1/jobs/ID?wait_ms&while) until job id
 * has ended; its last state in *job. CLI_EXIT_OK or the call's failure. */
static int wait_job_end(struct verb_ctx *v, int64_t id, json_t **job)
{
	char path[128];
	const char *state = "";
	json_t *resp = NULL;
	for (;;) {
		snprintf(path, sizeof(path), "/v1/jobs/%lld%s%s", (long long)id,
		         *state ? "?wait_ms=60000&while=" : "", state);
		json_decref(resp);
		resp = NULL;
		int ret = cliconn_call(&v->conn, "GET", path, NULL, &resp);
		if (ret != CLI_EXIT_OK)
			return ret;
		state = verb_str(json_object_get(resp, "job"), "state");
		if (verb_state_final(state))
			break;
	}
	*job = json_incref(json_object_get(resp, "job"));
	json_decref(resp);
	return CLI_EXIT_OK;
}

/* --wait for an --array, as `sbatch --wait --array`: every member's end,
 * then how many ended how (on stderr), and the highest of the members'
 * statuses (verb_run_exit), 0 when all succeeded. No output is streamed:
 * `anvil logs MEMBER` reads a member's. */
static int wait_array(struct verb_ctx *v, int64_t array_id, const json_t *members)
{
	static const char *const states[] = {"succeeded", "failed", "cancelled", "lost"};
	int count[4] = {0, 0, 0, 0}, worst = CLI_EXIT_OK;
	int64_t first_bad = 0;
	json_t *bad = NULL;
	size_t i;
	const json_t *m;
	json_array_foreach (members, i, m) {
		json_t *job = NULL;
		int64_t id = (int64_t)json_integer_value(m);
		int ret = wait_job_end(v, id, &job);
		if (ret != CLI_EXIT_OK)
			return ret;
		const char *state = verb_str(job, "state");
		for (int k = 0; k < 4; k++)
			count[k] += strcmp(state, states[k]) == 0;
		int code = verb_run_exit(job);
		if (code != CLI_EXIT_OK && !first_bad) {
			first_bad = id;
			bad = json_incref(job);
		}
		worst = code > worst ? code : worst;
		json_decref(job);
	}
	fprintf(stderr, "anvil: array %lld: %d succeeded", (long long)array_id, count[0]);
	for (int k = 1; k < 4; k++)
		if (count[k])
			fprintf(stderr, ", %d %s", count[k], states[k]);
	fputc('\n', stderr);
	if (bad) /* the first member that did not succeed, and why */
		verb_report_end(first_bad, bad);
	json_decref(bad);
	return worst;
}

/* --after entries that name a member as ARRAY_INDEX (submit_after keeps
 * its index): each becomes that member's job id, as the server takes. */
static int resolve_after(struct verb_ctx *v, json_t *body)
{
	size_t i;
	json_t *a;
	json_array_foreach (json_object_get(body, "after"), i, a) {
		const json_t *index = json_object_get(a, "index");
		if (!index)
			continue;
		struct verb_job_ref ref = {.id = json_integer_value(json_object_get(a, "job")),
		                           .index = json_integer_value(index)};
		int64_t id;
		int ret = verb_job_resolve(v, &ref, &id);
		if (ret != CLI_EXIT_OK)
			return ret;
		json_object_set_new(a, "job", json_integer(id));
		json_object_del(a, "index");
	}
	return CLI_EXIT_OK;
}

static int run_fn(struct verb_ctx *v)
{
	json_t *body = NULL, *resp = NULL, *final = NULL;
	int ret = check_args(v);
	if (ret == CLI_EXIT_OK)
		ret = build_body(v, &body);
	if (ret == CLI_EXIT_OK && cliargs_flag(&v->args, "local")) {
		ret = local_run(v, body);
		json_decref(body);
		return ret;
	}
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	if (ret == CLI_EXIT_OK)
		ret = resolve_after(v, body);
	if (ret != CLI_EXIT_OK) {
		json_decref(body);
		return ret;
	}
	ret = cliconn_create(&v->conn, "POST", "/v1/jobs", body, &resp);
	json_decref(body);
	if (ret != CLI_EXIT_OK)
		return ret;
	int64_t id = verb_int(json_object_get(resp, "job"), "id", -1);
	int wait = cliargs_flag(&v->args, "wait");
	const json_t *members = json_object_get(resp, "array_job_ids");
	if (cliargs_flag(&v->args, "json"))
		verb_print_json(resp);
	else if (members)
		fprintf(wait ? stderr : stdout,
		        "submitted array %lld: %zu jobs (ids %lld to %lld; "
		        "anvil jobs shows them as %lld_[...])\n",
		        (long long)id, json_array_size(members), (long long)id,
		        (long long)json_integer_value(
		                json_array_get(members, json_array_size(members) - 1)),
		        (long long)id);
	else
		fprintf(wait ? stderr : stdout, "submitted job %lld\n", (long long)id);
	if (wait && members) {
		ret = wait_array(v, id, members);
		json_decref(resp);
		return ret;
	}
	json_decref(resp);
	if (!wait)
		return CLI_EXIT_OK;
	const struct cliargs_value *rank = cliargs_get(&v->args, "rank");
	struct verb_logs_opts lo = {.rank = rank->set ? rank->num : -1, .follow = 1};
	ret = verb_logs_stream(v, id, &lo, &final);
	if (final && verb_state_final(json_string_value(json_object_get(final, "state")))) {
		verb_report_end(id, final);
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
                "As with sbatch, the job runs in the current directory (or --cwd DIR), which\n"
                "must exist on the nodes, with this environment (--export ALL; NONE or a list\n"
                "of names send less; --env K=V sets one on top). The token, ANVIL_*, and\n"
                "variables of this host or session (HOSTNAME, SSH_*, DISPLAY, ...) never go;\n"
                "`anvil show` lists the exported names, never their values.\n"
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
                "running: `anvil cancel JOB` stops it. With --array, --wait streams nothing:\n"
                "as `sbatch --wait --array`, it waits for every member, says on stderr how\n"
                "many ended how (and why the first that did not succeed), and exits with the\n"
                "highest of the members' statuses, 0 when all succeeded.\n"
                "\n"
                "Head and workers, the way Ray and Dask start a cluster: --head CMD runs on\n"
                "rank 0, --worker CMD on every rank once the head answers at $ANVIL_HEAD_ADDR\n"
                "(host:port; the head listens on $ANVIL_HEAD_PORT), then the command on rank 0.\n"
                "The job ends with the command, and its status is the command's; the head and\n"
                "workers are stopped. If the head or a worker ends first, the job fails saying\n"
                "which. Example:\n"
                "  anvil run --nodes 4 --head 'dask-scheduler --port $ANVIL_HEAD_PORT' \\\n"
                "      --worker 'dask-worker $ANVIL_HEAD_ADDR' -- python3 analyze.py\n"
                "\n"
                "MPI: --mpi runs mpirun on rank 0 with a hostfile of the job's nodes\n"
                "($ANVIL_MPI_HOSTFILE, --gpus slots each) and anvil, not SSH, starting its\n"
                "daemons in the other ranks. The job ends with mpirun, with its status. Open\n"
                "MPI's settings go in OMPI_MCA_* variables (--env). Example:\n"
                "  anvil run --mpi --nodes 2 --gpus 8 -- python3 allreduce.py\n",
};
