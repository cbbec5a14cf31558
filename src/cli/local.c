#include "cli/local.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/exec.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/cliconn.h"
#include "gpu/gpu.h"
#include "model/fields.h"
#include "proto/wire.h"

/* A log being printed as it grows. */
struct tail {
	char *path;
	int fd;
	FILE *out;
};

static void tail_pump(struct tail *t)
{
	if (t->fd < 0)
		t->fd = open(t->path, O_RDONLY | O_CLOEXEC);
	if (t->fd < 0)
		return;
	char buf[65536];
	ssize_t n;
	while ((n = read(t->fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, t->out);
	fflush(t->out);
}

/* What a local run cannot be; a usage error printed, or CLI_EXIT_OK. */
static int refuse(struct verb_ctx *v, const json_t *body)
{
	static const char *const not_here[] = {"head", "after", "array", "session"};
	if (jv_int(body, "nodes", 1) != 1)
		return verb_usage_error(v, "--local runs one rank here: no --nodes");
	for (size_t i = 0; i < sizeof(not_here) / sizeof(not_here[0]); i++)
		if (json_object_get(body, not_here[i]))
			return verb_usage_error(v, "--local runs one rank here: no --%s",
			                        not_here[i]);
	char err[256];
	if (jv_check(body, fields_body(), err, sizeof(err)))
		return verb_usage_error(v, "%s", err);
	return CLI_EXIT_OK;
}

/* This machine's GPUs for the job: CUDA_VISIBLE_DEVICES and the UUIDs into
 * cuda and uuids; the count, or -1 (printed) when it asks for more. */
static int local_gpus(const json_t *body, char *cuda, size_t clen, char *uuids, size_t ulen)
{
	struct gpu_backend *g = NULL;
	char err[256];
	if (gpu_open("nvml", &g, err, sizeof(err)) != 0 && gpu_open("none", &g, err, sizeof(err)))
		g = NULL;
	int have = g ? gpu_count(g) : 0, asked = json_object_get(body, "gpus") != NULL;
	int want = (int)jv_int(body, "gpus", 1);
	cuda[0] = uuids[0] = '\0';
	if (want > have && asked) {
		fprintf(stderr,
		        "anvil run --local: the job asks for %d GPU(s); this machine has %d\n",
		        want, have);
		gpu_close(g);
		return -1;
	}
	int n = want < have ? want : have;
	for (int i = 0; i < n; i++) {
		struct gpu_info info;
		if (gpu_info(g, i, &info) != 0)
			continue;
		size_t c = strlen(cuda), u = strlen(uuids);
		snprintf(cuda + c, clen - c, "%s%d", c ? "," : "", info.index);
		snprintf(uuids + u, ulen - u, "%s%s", u ? "," : "", info.uuid);
	}
	static int warned; /* once: `anvil wf run --local` runs many */
	if (n < want && !warned++)
		fprintf(stderr, "anvil run --local: this machine has no GPU; running without\n");
	gpu_close(g);
	return n;
}

/* The rank's environment, NULL-terminated "K=V" strings. */
static char **local_env(const json_t *body, int64_t attempt_id, int ngpus, const char *cuda,
                        const char *uuids)
{
	json_t *env = json_is_object(json_object_get(body, "env"))
	                      ? json_deep_copy(json_object_get(body, "env"))
	                      : json_object();
	struct wire_rank_vars rv = {
	        .cuda = cuda,
	        .uuids = ngpus ? uuids : NULL,
	        .master_addr = "127.0.0.1",
	        .master_port = 20000 + (int)(attempt_id % 20000),
	        .nnodes = 1,
	        .node_rank = 0,
	        .nproc = ngpus > 0 ? ngpus : 1,
	        .job_id = 0,
	        .attempt_id = attempt_id,
	        .attempt = 1,
	        .node = "local",
	        .job_name = jv_str(body, "name", ""),
	        .checkpointing = jv_bool(body, "checkpointing", 0),
	};
	wire_rank_env_set(env, &rv);
	char **envv = xcalloc(json_object_size(env) + 1, sizeof(char *));
	size_t i = 0;
	const char *k;
	json_t *val;
	json_object_foreach (env, k, val)
		envv[i++] = xasprintf("%s=%s", k, json_string_value(val));
	json_decref(env);
	return envv;
}

/* Waits for the rank to end, printing its logs and passing Ctrl-C on as a
 * stop; its status. */
static int follow(struct exec *e, int64_t id, struct tail *t)
{
	int stopping = 0;
	for (;;) {
		struct pollfd p = {.fd = exec_fd(e), .events = POLLIN};
		int64_t due = exec_next_poll_ms(e);
		poll(&p, 1, due >= 0 && due < 50 ? (int)due : 50);
		exec_poll(e);
		tail_pump(&t[0]);
		tail_pump(&t[1]);
		if (stop_signal() && !stopping) {
			stopping = 1;
			fprintf(stderr,
			        "anvil run --local: stopping (SIGTERM, SIGKILL after the grace)\n");
			exec_stop(e, id, 0, -1);
		}
		struct exec_status st;
		if (exec_find(e, id, 0, &st) != 0)
			return CLI_EXIT_FAILED;
		if (st.state == EXEC_FAILED) {
			fprintf(stderr, "anvil run --local: failed to start: %s\n",
			        st.error ? st.error : "?");
			return 127;
		}
		if (st.state == EXEC_EXITED) {
			tail_pump(&t[0]);
			tail_pump(&t[1]);
			return st.exit_code;
		}
	}
}

int local_run(struct verb_ctx *v, const json_t *body)
{
	return local_run_as(v, body, 0);
}

int local_run_as(struct verb_ctx *v, const json_t *body, int64_t job_id)
{
	int ret = refuse(v, body);
	if (ret != CLI_EXIT_OK)
		return ret;
	char cuda[256], uuids[4096];
	int ngpus = local_gpus(body, cuda, sizeof(cuda), uuids, sizeof(uuids));
	if (ngpus < 0)
		return CLI_EXIT_FAILED;
	char *client = cliconn_file_path(); /* ANVIL_HOME/client.json: the work dir beside it */
	char *slash = strrchr(client, '/');
	*slash = '\0';
	char *work = xasprintf("%s/local", client);
	free(client);
	struct exec *e = NULL;
	int rc = exec_new(work, "local", &e);
	if (rc) {
		fprintf(stderr, "anvil run --local: cannot use %s: %s\n", work, strerror(-rc));
		free(work);
		return CLI_EXIT_FAILED;
	}
	exec_set_spares(e, 0); /* one rank: no pool to keep */
	int64_t id = wall_ms();
	json_t *cmd = json_object_get(body, "command");
	const char **argv = xcalloc(json_array_size(cmd) + 1, sizeof(char *));
	for (size_t i = 0; i < json_array_size(cmd); i++)
		argv[i] = json_string_value(json_array_get(cmd, i));
	char **envv = local_env(body, id, ngpus, cuda, uuids);
	const json_t *cpus = json_object_get(body, "cpus");
	struct exec_spec spec = {
	        .attempt_id = id,
	        .rank = 0,
	        .job_id = job_id,
	        .argv = argv,
	        .cwd = jv_str(body, "cwd", NULL),
	        .env = (const char *const *)envv,
	        .grace_ms = jv_int(body, "grace_ms", 10000),
	        .ngpu_minors = -1,
	        .cpu_millis =
	                json_is_number(cpus) ? (int64_t)(json_number_value(cpus) * 1000 + 0.5) : 0,
	        .memory_bytes = jv_int(body, "memory_bytes", 0),
	};
	stop_signals_catch();
	log_set_level(LOG_WARN); /* the executor's notes are an agent's log, not the user's */
	while ((rc = exec_start(e, &spec)) == -EALREADY) /* two runs in one millisecond */
		spec.attempt_id = ++id;
	struct tail t[2] = {{exec_log_path(work, id, 0, EXEC_STDOUT), -1, stdout},
	                    {exec_log_path(work, id, 0, EXEC_STDERR), -1, stderr}};
	ret = rc == 0 ? follow(e, id, t) : CLI_EXIT_FAILED;
	exec_forget(e, id, 0);
	exec_free(e);
	for (int i = 0; i < 2; i++) {
		if (t[i].fd >= 0)
			close(t[i].fd);
		free(t[i].path);
	}
	for (size_t i = 0; envv[i]; i++)
		free(envv[i]);
	free(envv);
	free(argv);
	free(work);
	return ret;
}
