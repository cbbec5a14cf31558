/* test_converge.c - `anvil agent` converging its node to the profile a
 * small fake server (base/httpd.h) sends in its sync answers: the status
 * in the sync requests until one is answered, drift found by the checks
 * and not fixed, a re-run asked of the agent, a failed step with the
 * rest skipped, a malformed profile refused, no profile, and the status
 * kept across a restart and sent with the first sync. Every step is
 * harmless: GPU facts, a directory under the test's own, a kernel setting
 * read and asked for at its current value, an installed package. */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/agent.h"
#include "base/buf.h"
#include "base/httpc.h"
#include "base/httpd.h"
#include "base/jv.h"
#include "base/util.h"
#include "gpu/sim.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static json_t *profile;   /* what the fake answers as "profile"; NULL: none */
static json_t *statuses;  /* every profile_status received, in order */
static json_t *first;     /* the current agent's first sync request with a status */
static int syncs_without; /* sync requests without a status since the last with one */
static char agent_url[256];
/* A slow server: the first request with a status is held this long before
 * it is applied (0: none is); the one applied last, in the server's order;
 * the most requests with a status in the server at once. */
static int slow_first_ms;
static json_t *applied;
static int carrying, max_carrying;

static void fake_sync(struct httpd_req *req, json_t *body)
{
	pthread_mutex_lock(&mu);
	if (!first && json_object_get(body, "profile_status"))
		first = json_incref(body);
	json_t *st = json_object_get(body, "profile_status");
	if (st) {
		json_array_append(statuses, st);
		syncs_without = 0;
	} else {
		syncs_without++;
	}
	const char *url = jv_str(json_object_get(body, "facts"), "agent_url", NULL);
	if (url)
		snprintf(agent_url, sizeof(agent_url), "%s", url);
	int hold = st && slow_first_ms > 0 ? slow_first_ms : 0;
	if (hold)
		slow_first_ms = 0;
	if (st && ++carrying > max_carrying)
		max_carrying = carrying;
	pthread_mutex_unlock(&mu);
	sleep_ms(hold);
	pthread_mutex_lock(&mu);
	if (st) {
		json_decref(applied);
		applied = json_incref(st);
		carrying--;
	}
	pthread_mutex_unlock(&mu);
	if (jv_int(body, "wait_ms", 0) > 0 && !st)
		sleep_ms(100); /* a poor man's long poll */
	pthread_mutex_lock(&mu);
	json_t *ans =
	        json_pack("{s:i,s:i,s:[]}", "generation", 1, "node_timeout_ms", 30000, "ranks");
	if (profile)
		json_object_set(ans, "profile", profile);
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
		const char *url = jv_str(body, "agent_url", "");
		pthread_mutex_lock(&mu);
		snprintf(agent_url, sizeof(agent_url), "%s", url);
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

static char work[64], gpus_file[128];

/* Forks an agent before any thread exists; it waits for the server's port
 * on a pipe, so a second one can be forked ahead and started later. */
static pid_t fork_agent(int *port_w)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test takes its agent along */
		close(fds[1]);
		int port = 0;
		if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port))
			_exit(99);
		char server[64];
		snprintf(server, sizeof(server), "http://127.0.0.1:%d", port);
		char jt[] = "jt"; /* agent_main overwrites the token in argv */
		char *argv[] = {"agent",
		                "--no-config",
		                "--server",
		                server,
		                "--join-token",
		                jt,
		                "--work-dir",
		                work,
		                "--name",
		                "n-1",
		                "--gpus-file",
		                gpus_file,
		                "--wait-ms",
		                "2000",
		                "--log-level",
		                "warn",
		                "--profile-check-interval",
		                "1s",
		                NULL};
		_exit(agent_main(18, argv));
	}
	close(fds[0]);
	*port_w = fds[1];
	return pid;
}

static void release(int port_w, int port)
{
	CHECK(write(port_w, &port, sizeof(port)) == (ssize_t)sizeof(port));
	close(port_w);
}

static void stop_agent(pid_t pid)
{
	kill(pid, SIGTERM);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), 0);
}

/* The profile {hash, name, spec} the fake sends; spec is JSON text with
 * %s for the work dir. */
static void set_profile(const char *hash, const char *spec_fmt)
{
	char spec[2048];
	snprintf(spec, sizeof(spec), spec_fmt, work, work);
	json_t *p = NULL;
	if (hash) {
		json_t *s = json_loads(spec, 0, NULL);
		CHECK(s != NULL);
		p = json_pack("{s:s,s:s,s:o}", "hash", hash, "name", "p", "spec", s);
	}
	pthread_mutex_lock(&mu);
	json_decref(profile);
	profile = p;
	pthread_mutex_unlock(&mu);
}

/* Waits for a status received after the from-th with hash and state;
 * returns it (caller decrefs) and where it was in *at. */
static json_t *wait_status(size_t from, const char *hash, const char *state, size_t *at)
{
	int64_t end = now_ms() + 20000;
	for (;;) {
		pthread_mutex_lock(&mu);
		for (size_t i = from; i < json_array_size(statuses); i++) {
			json_t *s = json_array_get(statuses, i);
			if (strcmp(jv_str(s, "hash", ""), hash) == 0 &&
			    strcmp(jv_str(s, "state", ""), state) == 0) {
				json_t *copy = json_deep_copy(s);
				if (at)
					*at = i + 1;
				pthread_mutex_unlock(&mu);
				return copy;
			}
		}
		size_t n = json_array_size(statuses);
		char *last = n ? jv_dump(json_array_get(statuses, n - 1)) : NULL;
		pthread_mutex_unlock(&mu);
		if (now_ms() > end)
			FAIL_AT("no status %s %s after %zu; the last: %s", hash, state, from,
			        last ? last : "none");
		free(last);
		sleep_ms(20);
	}
}

static size_t received(void)
{
	pthread_mutex_lock(&mu);
	size_t n = json_array_size(statuses);
	pthread_mutex_unlock(&mu);
	return n;
}

static const json_t *step(const json_t *status, size_t i)
{
	return json_array_get(json_object_get(status, "steps"), i);
}

static void check_step(const json_t *status, size_t i, const char *name, const char *st,
                       const char *detail)
{
	const json_t *s = step(status, i);
	if (strncmp(jv_str(s, "name", ""), name, strlen(name)) != 0)
		FAIL_AT("step %zu is '%s', not '%s...'", i, jv_str(s, "name", ""), name);
	CHECK_STR(jv_str(s, "status", ""), st);
	if (detail)
		CHECK_CONTAINS(jv_str(s, "detail", ""), detail);
}

/* A kernel setting asked for at the value it has: ok, never changed. */
static char somaxconn[64];

#define SPEC                                                                                       \
	"{\"name\": \"p\", \"gpu\": {\"model\": \"NVIDIA H200\", \"count\": 2}, "                  \
	"\"cuda\": \"12.4\", \"cache_dir\": \"%s/cache\", "                                        \
	"\"sysctl\": {\"net.core.somaxconn\": \"SOMAXCONN\"}, \"packages\": [\"bash\"]}"

static void spec_text(char *out, size_t len, const char *base)
{
	const char *at = strstr(base, "SOMAXCONN");
	snprintf(out, len, "%.*s%s%s", (int)(at - base), base, somaxconn, at + 9);
}

static int agent_call(const char *method, const char *path, const char *body, struct buf *out)
{
	char url[512];
	pthread_mutex_lock(&mu);
	snprintf(url, sizeof(url), "%s%s", agent_url, path);
	pthread_mutex_unlock(&mu);
	struct httpc *c = httpc_new();
	int status = 0;
	buf_reset(out);
	CHECK_INT(
	        httpc_do(c, method, url, "sec", body, body ? strlen(body) : 0, 5000, &status, out),
	        0);
	httpc_free(c);
	return status;
}

static void setup(void)
{
	snprintf(work, sizeof(work), "/tmp/anvil-converge-XXXXXX");
	CHECK(mkdtemp(work) != NULL);
	snprintf(gpus_file, sizeof(gpus_file), "%s.gpus.json", work);
	CHECK_INT(gpu_sim_write_file(gpus_file, 2, "H200", 0), 0);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file("/proc/sys/net/core/somaxconn", 64, &b), 0);
	snprintf(somaxconn, sizeof(somaxconn), "%.*s", (int)strcspn(b.data, "\n"), b.data);
	buf_cleanup(&b);
	statuses = json_array();
}

static struct httpd *serve(int port_w)
{
	struct httpd *h;
	struct httpd_config cfg = {.handler = fake_server, .threads = 4};
	CHECK_INT(httpd_start(&cfg, &h), 0);
	release(port_w, httpd_port(h));
	httpc_global_init();
	return h;
}

TEST(converges_reports_checks_drift_and_reruns)
{
	setup();
	int port_w;
	pid_t agent = fork_agent(&port_w);
	char spec[2048], cache[128];
	spec_text(spec, sizeof(spec), SPEC);
	snprintf(cache, sizeof(cache), "%s/cache", work);
	set_profile("h1", spec);
	struct httpd *h = serve(port_w);

	/* converged: the checks only held, the directory was made */
	size_t at = 0;
	json_t *st = wait_status(0, "h1", "converged", &at);
	check_step(st, 0, "gpu", "ok", "2 GPUs, each NVIDIA H200");
	check_step(st, 1, "cuda", "ok", "12.4");
	check_step(st, 2, "cache_dir", "changed", "does not exist; made");
	check_step(st, 3, "sysctl net.core.somaxconn", "ok", somaxconn);
	check_step(st, 4, "packages", "ok", "bash ");
	CHECK(jv_int(st, "time_ms", 0) > 0);
	json_decref(st);
	struct stat sb;
	CHECK(stat(cache, &sb) == 0 && S_ISDIR(sb.st_mode));

	/* acknowledged: the status is no longer sent */
	int64_t end = now_ms() + 10000;
	for (;;) {
		pthread_mutex_lock(&mu);
		int quiet = syncs_without >= 3;
		pthread_mutex_unlock(&mu);
		if (quiet)
			break;
		if (now_ms() > end)
			FAIL_AT("the status is still sent after it was answered");
		sleep_ms(20);
	}

	/* drift: found by the checks (interval 1 s), reported, not fixed */
	CHECK(rmdir(cache) == 0);
	st = wait_status(at, "h1", "drifted", &at);
	check_step(st, 2, "cache_dir", "failed", "does not exist");
	check_step(st, 4, "packages", "ok", NULL); /* every check runs */
	json_decref(st);
	sleep_ms(1500); /* another check or two: still not there */
	CHECK(stat(cache, &sb) != 0);

	/* the agent's endpoints: the status, and a re-run that fixes it */
	struct buf out;
	buf_init(&out);
	CHECK_INT(agent_call("GET", "/v1/profile", NULL, &out), 200);
	CHECK_CONTAINS(out.data, "\"state\":\"drifted\"");
	CHECK_CONTAINS(out.data, "\"check_interval_ms\":1000");
	CHECK_INT(agent_call("POST", "/v1/profile/converge", "{\"hash\":\"other\"}", &out), 409);
	CHECK_CONTAINS(out.data, "this node's profile is h1");
	CHECK_INT(agent_call("POST", "/v1/profile/converge", "{\"hash\":\"h1\"}", &out), 202);
	st = wait_status(at, "h1", "converged", &at);
	check_step(st, 2, "cache_dir", "changed", NULL);
	json_decref(st);
	CHECK(stat(cache, &sb) == 0);

	/* a new profile whose first step fails: the rest is skipped */
	const char *a100 = "{\"gpu\": {\"model\": \"NVIDIA A100\", \"count\": 2}, "
	                   "\"cache_dir\": \"%s/cache2\", \"packages\": [\"bash\"]}";
	set_profile("h2", a100);
	st = wait_status(at, "h2", "failed", &at);
	check_step(st, 0, "gpu", "failed", "GPU 0 is NVIDIA H200, the profile wants NVIDIA A100");
	check_step(st, 1, "cache_dir", "skipped", NULL);
	check_step(st, 2, "packages", "skipped", NULL);
	json_decref(st);
	snprintf(cache, sizeof(cache), "%s/cache2", work);
	CHECK(stat(cache, &sb) != 0);

	/* a malformed one: refused with the reason, the agent lives on */
	set_profile("h3", "{\"sysctl\": {\"net./../../x\": \"1\"}}");
	st = wait_status(at, "h3", "failed", &at);
	check_step(st, 0, "profile", "failed", "spec.sysctl.net./../../x");
	json_decref(st);
	CHECK_INT(agent_call("POST", "/v1/profile/converge", NULL, &out), 409);

	/* no profile: nothing kept, nothing reported */
	set_profile(NULL, "");
	char file[128];
	snprintf(file, sizeof(file), "%s/profile.json", work);
	end = now_ms() + 10000;
	while (access(file, F_OK) == 0 && now_ms() < end)
		sleep_ms(20);
	CHECK(access(file, F_OK) != 0);
	CHECK_INT(agent_call("GET", "/v1/profile", NULL, &out), 200);
	CHECK_CONTAINS(out.data, "\"profile\":null");
	buf_cleanup(&out);

	stop_agent(agent);
	httpd_stop(h);
	rm_rf(work);
	unlink(gpus_file);
}

/* The agent's two connections may reach the server's threads in either
 * order: a status sent while an older one is still in the server must not
 * overtake it, or the server would keep the older ("converging") for ever.
 * The fake holds the first status it gets while the steps go on. */
TEST(a_newer_status_waits_for_the_request_that_carries_the_older)
{
	setup();
	int port_w;
	pid_t agent = fork_agent(&port_w);
	char spec[2048];
	spec_text(spec, sizeof(spec), SPEC);
	set_profile("h1", spec);
	slow_first_ms = 600;
	struct httpd *h = serve(port_w);
	json_t *st = wait_status(0, "h1", "converged", NULL);
	json_decref(st);
	int64_t end = now_ms() + 10000;
	for (;;) { /* the converged status, applied last */
		pthread_mutex_lock(&mu);
		int done = slow_first_ms == 0 && carrying == 0 &&
		           strcmp(jv_str(applied, "state", ""), "converged") == 0;
		char *last = applied ? jv_dump(applied) : NULL;
		size_t n = json_array_size(statuses);
		pthread_mutex_unlock(&mu);
		if (done) {
			free(last);
			break;
		}
		if (now_ms() > end)
			FAIL_AT("the server applied last (of %zu): %s", n, last ? last : "none");
		free(last);
		sleep_ms(20);
	}
	pthread_mutex_lock(&mu);
	CHECK_INT(max_carrying, 1);
	pthread_mutex_unlock(&mu);
	stop_agent(agent);
	httpd_stop(h);
	rm_rf(work);
	unlink(gpus_file);
}

TEST(a_restarted_agent_reports_the_kept_status_at_once_then_runs_again)
{
	setup();
	int port_w, port_w2;
	pid_t agent = fork_agent(&port_w);
	pid_t again = fork_agent(&port_w2); /* started after the first stops */
	char spec[2048];
	spec_text(spec, sizeof(spec), SPEC);
	set_profile("h1", spec);
	struct httpd *h = serve(port_w);
	size_t at = 0;
	json_t *kept = wait_status(0, "h1", "converged", &at);
	json_decref(kept);
	stop_agent(agent);
	/* a request the stopped agent sent before it went may still be in the
	 * fake server's handler: let it land before the next agent's first */
	sleep_ms(300);

	pthread_mutex_lock(&mu);
	json_decref(first);
	first = NULL;
	pthread_mutex_unlock(&mu);
	at = received();
	release(port_w2, httpd_port(h));
	/* the first status the new agent sends is the one the first agent kept,
	 * before any run of its own (a sync already in flight may go first) */
	int64_t end = now_ms() + 10000;
	json_t *f = NULL;
	while (!f && now_ms() < end) {
		pthread_mutex_lock(&mu);
		f = json_incref(first);
		pthread_mutex_unlock(&mu);
		sleep_ms(20);
	}
	CHECK(f != NULL);
	const json_t *st = json_object_get(f, "profile_status");
	CHECK(st != NULL);
	CHECK_STR(jv_str(st, "hash", ""), "h1");
	CHECK_STR(jv_str(st, "state", ""), "converged");
	check_step(st, 2, "cache_dir", "changed", NULL);
	int64_t kept_ms = jv_int(st, "time_ms", 0);
	json_decref(f);
	/* the first profile after a start runs, same hash or not: all ok now */
	for (;;) {
		json_t *s = wait_status(at, "h1", "converged", &at);
		int fresh = jv_int(s, "time_ms", 0) > kept_ms;
		if (fresh)
			check_step(s, 2, "cache_dir", "ok", "is a directory");
		json_decref(s);
		if (fresh)
			break;
	}
	stop_agent(again);
	httpd_stop(h);
	rm_rf(work);
	unlink(gpus_file);
}

TEST_MAIN()
