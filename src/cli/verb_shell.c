/* verb_shell.c - `anvil shell [job options] [-- CMD]`: an interactive job
 * (srun --pty): submitted as a session (POST /v1/jobs with "session":
 * true), waited for while it is queued, saying why, then attached to
 * (cli/attach.h) until its shell exits or the user detaches. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/attach.h"
#include "cli/cli.h"
#include "cli/submit.h"
#include "cli/verb.h"

#define SHELL_ATTACH_WAIT_MS 3000
#include "proto/wire.h"

#define WAIT_POLL_MS     250
#define WAIT_POLL_MAX_MS 2000
/* A placed job runs within milliseconds (its agent starts the rank as soon
 * as its long poll is answered): it is asked after about 1, 2, 4, ... ms,
 * then every WAIT_POLL_MS; a pending one from WAIT_POLL_MS up. */
#define WAIT_PLACED_MS 1
/* How long the server may hold the ask while the job stays placed, or
 * queued (a reason that changes while it is queued shows at the next
 * answer). */
#define WAIT_PLACED_HOLD_MS 1000
#define WAIT_QUEUED_HOLD_MS 500

static const struct cliargs_opt opts[] = {
        SUBMIT_JOB_OPTS,
        {NULL, 0, 0, NULL, NULL},
};

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	interrupted = sig;
}

/* The user's $SHELL, else bash, else sh (the holder falls back on the node
 * when the node lacks it: agent/holder.h). */
static const char *default_shell(void)
{
	const char *sh = getenv("SHELL");
	if (sh && *sh)
		return sh;
	return access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
}

/* The submit body: the job options as `anvil run` sends them, the command
 * (or the shell), "session": true, the name "shell" unless --name, and
 * this terminal's TERM (a session is this terminal; --env TERM= wins). */
static int build_body(const struct verb_ctx *v, json_t **out)
{
	char err[512];
	struct buf notes;
	buf_init(&notes);
	char *cwd = get_current_dir_name();
	json_t *body = NULL;
	int rc = submit_body(&v->args, environ, cwd, &body, &notes, err, sizeof(err));
	free(cwd);
	char *eol;
	for (const char *line = notes.data; line && (eol = strchr(line, '\n')); line = eol + 1)
		fprintf(stderr, "anvil shell: %.*s\n", (int)(eol - line), line);
	buf_cleanup(&notes);
	if (rc)
		return verb_usage_error(v, "%s", err);
	const struct wire_record *w = &wire_submit;
	if (v->args.nrest == 0)
		wire_set(body, w, "command", json_pack("[s]", default_shell()));
	if (!cliargs_str(&v->args, "name"))
		wire_set(body, w, "name", json_string("shell"));
	wire_set(body, w, "session", json_true());
	const char *term = getenv("TERM");
	json_t *env = json_object_get(body, "env");
	if (term && *term && !json_object_get(env, "TERM")) {
		if (!env)
			wire_set(body, w, "env", env = json_object());
		json_object_set_new(env, "TERM", json_string(term));
	}
	*out = body;
	return CLI_EXIT_OK;
}

static void cancel(struct verb_ctx *v, int64_t id)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld/cancel", (long long)id);
	json_t *resp = NULL;
	if (cliconn_call(&v->conn, "POST", path, NULL, &resp) == CLI_EXIT_OK)
		fprintf(stderr, "anvil: cancelled job %lld\n", (long long)id);
	json_decref(resp);
}

/* Until the job runs: CLI_EXIT_OK; a final job's status (said on stderr);
 * 130 when interrupted (the job is cancelled: nobody waits for it). */
static int wait_running(struct verb_ctx *v, int64_t id)
{
	char path[64], said[512] = "";
	snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)id);
	int64_t idle = 0;
	int was_placed = 0;
	struct sigaction sa = {.sa_handler = on_interrupt}, old[3];
	sigemptyset(&sa.sa_mask);
	const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);
	int ret = -1;
	char waiting[128] = "";
	while (ret < 0) {
		json_t *resp = NULL;
		/* the server holds the request while the job stays in the state
		 * last seen (api_wait.c); one that does not answers at once */
		char ask[200];
		snprintf(ask, sizeof(ask), "%s%s", path, waiting);
		if ((ret = cliconn_call(&v->conn, "GET", ask, NULL, &resp)) != CLI_EXIT_OK)
			break;
		ret = -1;
		const json_t *j = json_object_get(resp, "job");
		const char *state = verb_str(j, "state");
		char now[512];
		snprintf(now, sizeof(now), "%s: %s", state, verb_str(j, "reason"));
		if (strcmp(state, "running") == 0) {
			ret = CLI_EXIT_OK;
		} else if (verb_state_final(state)) {
			verb_report_end(id, j);
			ret = verb_run_exit(j);
		} else if (strcmp(now, said) != 0) {
			fprintf(stderr, "anvil: job %lld %s\n", (long long)id, now);
			snprintf(said, sizeof(said), "%s", now);
		}
		int placed = strcmp(state, "scheduled") == 0;
		snprintf(waiting, sizeof(waiting), "?wait_ms=%d&while=%s",
		         placed ? WAIT_PLACED_HOLD_MS : WAIT_QUEUED_HOLD_MS,
		         placed ? "scheduled" : "pending");
		json_decref(resp);
		if (ret < 0 && !interrupted) {
			int64_t cap = placed ? WAIT_POLL_MS : WAIT_POLL_MAX_MS;
			if (placed != was_placed)
				idle = 0; /* placed now (or back in the queue): start over */
			was_placed = placed;
			idle = idle == 0        ? (placed ? WAIT_PLACED_MS : WAIT_POLL_MS)
			       : idle * 2 > cap ? cap
			                        : idle * 2;
			sleep_ms(idle);
		}
		if (ret < 0 && interrupted) {
			cancel(v, id);
			ret = CLI_EXIT_CANCELLED;
		}
	}
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &old[i], NULL);
	return ret;
}

static int shell_fn(struct verb_ctx *v)
{
	json_t *body = NULL, *resp = NULL;
	int ret = build_body(v, &body);
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	if (ret == CLI_EXIT_OK)
		ret = cliconn_create(&v->conn, "POST", "/v1/jobs", body, &resp);
	json_decref(body);
	if (ret != CLI_EXIT_OK)
		return ret;
	int64_t id = verb_int(json_object_get(resp, "job"), "id", -1);
	json_decref(resp);
	fprintf(stderr, "anvil: submitted job %lld\n", (long long)id);
	if ((ret = wait_running(v, id)) != CLI_EXIT_OK)
		return ret;
	fprintf(stderr,
	        "anvil: job %lld is running; Ctrl-] detaches (`anvil attach %lld` returns)\n",
	        (long long)id, (long long)id);
	/* The server says "running" once the agent reported the rank; the agent's
	 * stream route may not know it for a moment more (409): wait that out. */
	struct attach_opts o = {.job = id,
	                        .tty = 1,
	                        .forward_stdin = 1,
	                        .escape = 1,
	                        .retry_conflict_ms = SHELL_ATTACH_WAIT_MS};
	struct attach_result r = attach_run(v, &o);
	return verb_attach_finish(v, id, 0, &r);
}

const struct verb verb_shell = {
        .name = "shell",
        .fn = shell_fn,
        .opts = opts,
        .flags = CLIARGS_STOP_AT_POSITIONAL,
        .usage = "[options] [--] [CMD [ARGS...]]",
        .summary = "an interactive shell on a node, as a job",
        .help = "Queues an interactive job (a session) and, once it runs, opens a shell in a real\n"
                "terminal on its (first) node, as `srun --pty` does: $SHELL (else /bin/bash,\n"
                "else /bin/sh), or CMD. The job options are `anvil run`'s (--gpus, --nodes,\n"
                "--time, --queue, ...; see `anvil run --help`); the job is named \"shell\" unless\n"
                "--name says otherwise, and is an ordinary job: queued, counted against quotas,\n"
                "preemptible, stopped at its time limit, listed by `anvil jobs`.\n"
                "\n"
                "While it waits, anvil says why; Ctrl-C then cancels it. Once it runs, keys,\n"
                "Ctrl-C, Ctrl-D and window-size changes act as in a local terminal. Ctrl-]\n"
                "detaches and leaves the session running, as does closing the terminal;\n"
                "`anvil attach JOB` returns to it (with its recent output), and `anvil exec JOB\n"
                "-- CMD` runs more commands beside it. When the shell exits, the job ends and\n"
                "anvil exits with the shell's status.\n",
};
