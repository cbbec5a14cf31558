/* test_agent.c - `anvil agent` as a whole against a small fake server
 * (base/httpd.h) that speaks the agent protocol of docs/api.md. */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/agent.h"
#include "base/httpc.h"
#include "base/httpd.h"
#include "base/jv.h"
#include "base/util.h"
#include "gpu/sim.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static json_t *desired; /* the "ranks" the fake server answers */
static json_t *reports; /* last report per "attempt_id" */
static json_t *facts;
static int64_t generation = 1;
static int registrations;

static void fake_sync(struct httpd_req *req, json_t *body)
{
	if (!httpd_header(req, "Authorization") ||
	    strcmp(httpd_header(req, "Authorization"), "Bearer sec") != 0) {
		httpd_json(req, 401, "{\"error\":{\"code\":\"unauthorized\",\"message\":\"x\"}}");
		return;
	}
	/* Reports are applied on arrival, as the real server does: a poll
	 * held below must not overwrite what a newer request reported. And,
	 * as there (ranks.c), a final state is final: the agent's two
	 * connections can deliver an older "running" after the "exited" that
	 * a newer request carried (and that the agent then saw acknowledged,
	 * so it never sends it again). */
	pthread_mutex_lock(&mu);
	size_t i;
	json_t *r;
	json_array_foreach (json_object_get(body, "ranks"), i, r) {
		char key[32];
		snprintf(key, sizeof(key), "%lld", (long long)jv_int(r, "attempt_id", 0));
		const char *was = jv_str(json_object_get(reports, key), "state", "");
		if (strcmp(was, "exited") == 0 || strcmp(was, "failed_to_start") == 0)
			continue;
		json_object_set(reports, key, r);
	}
	if (json_object_get(body, "facts"))
		json_object_set(facts, "sync", json_object_get(body, "facts"));
	pthread_mutex_unlock(&mu);
	/* A poor man's long poll: hold a little while nothing changes. */
	for (int k = 0; k < 20; k++) {
		pthread_mutex_lock(&mu);
		int same = jv_int(body, "generation", 0) == generation;
		pthread_mutex_unlock(&mu);
		if (!same || jv_int(body, "wait_ms", 0) == 0)
			break;
		sleep_ms(5);
	}
	pthread_mutex_lock(&mu);
	json_t *ans = json_pack("{s:I,s:i,s:O}", "generation", (json_int_t)generation,
	                        "node_timeout_ms", 30000, "ranks", desired);
	pthread_mutex_unlock(&mu);
	char *text = jv_dump(ans);
	httpd_json(req, 200, text);
	free(text);
	json_decref(ans);
}

static int fake_server(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	json_t *body = NULL;
	char err[256];
	if (jv_parse_object(req->body, req->body_len, &body, err, sizeof(err)) != 0) {
		httpd_json(req, 400, "{}");
		return HTTPD_DONE;
	}
	if (strcmp(req->path, "/v1/agent/register") == 0) {
		pthread_mutex_lock(&mu);
		registrations++;
		json_object_set(facts, "register", body);
		pthread_mutex_unlock(&mu);
		httpd_json(req, 200, "{\"node_id\":7,\"secret\":\"sec\"}");
	} else if (strcmp(req->path, "/v1/agent/sync") == 0) {
		fake_sync(req, body);
	} else {
		httpd_json(req, 404, "{}");
	}
	json_decref(body);
	return HTTPD_DONE;
}

static json_t *report_of(int64_t attempt_id)
{
	char key[32];
	snprintf(key, sizeof(key), "%lld", (long long)attempt_id);
	pthread_mutex_lock(&mu);
	json_t *r = json_deep_copy(json_object_get(reports, key));
	pthread_mutex_unlock(&mu);
	return r;
}

/* Waits until attempt's report has state; returns it (caller decrefs). */
static json_t *wait_report(int64_t attempt_id, const char *state)
{
	int64_t end = now_ms() + 10000;
	for (;;) {
		json_t *r = report_of(attempt_id);
		if (r && strcmp(jv_str(r, "state", ""), state) == 0)
			return r;
		json_decref(r);
		if (now_ms() > end)
			FAIL_AT("attempt %lld never reported %s", (long long)attempt_id, state);
		sleep_ms(5);
	}
}

static void set_desired(const char *json)
{
	pthread_mutex_lock(&mu);
	json_decref(desired);
	desired = json_loads(json, 0, NULL);
	generation++;
	pthread_mutex_unlock(&mu);
}

static char work[64];

/* Forks the agent before any thread exists; it learns the server's port
 * through a pipe. Returns its pid. */
static pid_t fork_agent(int *port_w, const char *gpus_file)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(fds[1]);
		int port = 0;
		if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port))
			_exit(99);
		char server[64];
		snprintf(server, sizeof(server), "http://127.0.0.1:%d", port);
		char jt[] = "jt"; /* agent_main overwrites the token in argv */
		char *argv[] = {"agent",
		                "--server",
		                server,
		                "--join-token",
		                jt,
		                "--work-dir",
		                work,
		                "--name",
		                "n-1",
		                "--gpus-file",
		                (char *)gpus_file,
		                "--wait-ms",
		                "2000",
		                "--log-level",
		                "warn",
		                NULL};
		_exit(agent_main(15, argv));
	}
	close(fds[0]);
	*port_w = fds[1];
	return pid;
}

TEST(runs_reports_serves_logs_and_stops)
{
	snprintf(work, sizeof(work), "/tmp/anvil-agent-XXXXXX");
	CHECK(mkdtemp(work) != NULL);
	char gpus_file[128];
	snprintf(gpus_file, sizeof(gpus_file), "%s.gpus.json", work);
	CHECK_INT(gpu_sim_write_file(gpus_file, 2, "H200", 0), 0);
	int port_w;
	pid_t agent = fork_agent(&port_w, gpus_file);
	desired = json_array();
	reports = json_object();
	facts = json_object();
	struct httpd *h;
	struct httpd_config cfg = {.handler = fake_server, .threads = 4};
	CHECK_INT(httpd_start(&cfg, &h), 0);
	int port = httpd_port(h);
	CHECK(write(port_w, &port, sizeof(port)) == (ssize_t)sizeof(port));
	close(port_w);

	set_desired("[{\"attempt_id\":3,\"job_id\":2,\"rank\":0,\"command\":[\"sh\",\"-c\","
	            "\"echo out-$MASTER_PORT; exit 3\"],\"cwd\":null,\"gpus\":[0],"
	            "\"grace_ms\":1000,\"env\":{\"MASTER_PORT\":\"29500\"},\"new_field\":1},"
	            "{\"attempt_id\":4,\"job_id\":2,\"rank\":0,\"command\":[\"sleep\",\"100\"],"
	            "\"grace_ms\":1000,\"env\":{}}]");
	json_t *r = wait_report(3, "exited");
	CHECK_INT(jv_int(r, "exit_code", -1), 3);
	CHECK_INT(jv_int(r, "signal", -1), 0);
	json_decref(r);
	r = wait_report(4, "running");
	CHECK(jv_int(r, "pid", 0) > 0);
	json_decref(r);

	/* Facts: registered with the sim GPUs and an agent_url; sent on sync. */
	pthread_mutex_lock(&mu);
	json_t *reg = json_deep_copy(json_object_get(facts, "register"));
	CHECK(json_object_get(facts, "sync") != NULL);
	CHECK_INT(registrations, 1);
	pthread_mutex_unlock(&mu);
	CHECK_STR(jv_str(reg, "backend", ""), "sim");
	CHECK_STR(jv_str(reg, "name", ""), "n-1");
	CHECK_INT(json_array_size(json_object_get(reg, "gpus")), 2);
	CHECK_STR(jv_str(json_array_get(json_object_get(reg, "gpus"), 0), "name", ""),
	          "NVIDIA H200");
	/* The inventory carries the topology; the groups feed the scheduler. */
	CHECK_INT(json_array_size(json_object_get(json_array_get(json_object_get(reg, "gpus"), 1),
	                                          "links")),
	          2);
	CHECK_INT(json_array_size(json_object_get(reg, "gpu_groups")), 1);
	CHECK_STR(jv_str(reg, "driver_version", ""), "sim-550.54.15");

	/* The agent's log endpoint, with the node secret. */
	char url[256];
	snprintf(url, sizeof(url), "%s/v1/logs?attempt=3&rank=0", jv_str(reg, "agent_url", ""));
	httpc_global_init();
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "GET", url, "sec", NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	CHECK_STR(out.data, "out-29500\n");
	buf_reset(&out);
	CHECK_INT(httpc_do(c, "GET", url, "wrong", NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 401);
	/* The held polls are answered with the same text while nothing
	 * changes: each is taken (its acks) without being applied again. */
	snprintf(url, sizeof(url), "%s/metrics", jv_str(reg, "agent_url", ""));
	const char *name = "\nanvil_agent_sync_repeated_total ";
	long long repeats = 0;
	for (int64_t end = now_ms() + 5000; repeats == 0 && now_ms() < end; sleep_ms(20)) {
		buf_reset(&out);
		CHECK_INT(httpc_do(c, "GET", url, "sec", NULL, 0, 5000, &status, &out), 0);
		CHECK_INT(status, 200);
		const char *at = strstr(out.data, name);
		CHECK(at != NULL);
		repeats = atoll(at + strlen(name));
	}
	CHECK(repeats > 0);
	buf_cleanup(&out);
	httpc_free(c);
	json_decref(reg);

	/* Gone from the desired set: stopped (SIGTERM) and reported. */
	set_desired("[]");
	r = wait_report(4, "exited");
	CHECK_INT(jv_int(r, "signal", -1), SIGTERM);
	json_decref(r);

	/* SIGTERM: a clean exit 0. */
	set_desired("[{\"attempt_id\":5,\"job_id\":3,\"rank\":0,\"command\":[\"sleep\",\"100\"],"
	            "\"grace_ms\":1000,\"env\":{}}]");
	json_decref(wait_report(5, "running"));
	kill(agent, SIGTERM);
	int st = 0;
	CHECK(waitpid(agent, &st, 0) == agent);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), 0);
	r = wait_report(5, "exited"); /* the agent's last report before exiting */
	CHECK_INT(jv_int(r, "signal", -1), SIGTERM);
	json_decref(r);
	httpd_stop(h);
	rm_rf(work);
	unlink(gpus_file);
}

TEST(bad_flags_exit_2)
{
	char *a1[] = {"agent", "--server", "http://x", NULL};
	CHECK_INT(agent_main(3, a1), 2); /* no --work-dir */
	char *a2[] = {"agent", "--bogus", "1", NULL};
	CHECK_INT(agent_main(3, a2), 2);
	char *a3[] = {"agent",  "--server", "http://x", "--work-dir",
	              "/tmp/x", "--listen", "nope",     NULL};
	CHECK_INT(agent_main(7, a3), 2);
	char *a4[] = {"agent",  "--server",  "http://x", "--work-dir",
	              "/tmp/x", "--wait-ms", "-1",       NULL};
	CHECK_INT(agent_main(7, a4), 2);
	char *a7[] = {"agent",  "--server",      "http://x", "--work-dir",
	              "/tmp/x", "--spare-shims", "9",        NULL};
	CHECK_INT(agent_main(7, a7), 2);
	char *a5[] = {"agent", "--server", NULL};
	CHECK_INT(agent_main(2, a5), 2);
	char *a6[] = {"agent", "--help", NULL};
	CHECK_INT(agent_main(2, a6), 0);
}

TEST(bad_gpus_file_exits_1)
{
	char jt[] = "jt"; /* agent_main overwrites the token in argv */
	char *argv[] = {"agent",
	                "--server",
	                "http://127.0.0.1:1",
	                "--work-dir",
	                "/tmp/anvil-agent-badgpus",
	                "--gpus-file",
	                "/nonexistent.json",
	                "--join-token",
	                jt,
	                NULL};
	CHECK_INT(agent_main(9, argv), 1);
	rm_rf("/tmp/anvil-agent-badgpus");
}

TEST_MAIN()
