/* The head/worker launcher (agent/launch.h): its arguments, its pure
 * supervisor driven event by event, the argv the agent builds, the reason
 * file, and the launcher process itself on small shell commands against a
 * socket this test listens on. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/launch.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "desired_fixture.h"

#define EXITED(code) ((code) << 8)
#define KILLED(sig)  (sig)

/* ---- arguments ---- */

TEST(parse_takes_every_option_and_the_command)
{
	char *argv[] = {"_launch",      "--rank",  "0",          "--head-addr", "10.0.0.1:10007",
	                "--timeout-ms", "5000",    "--grace-ms", "300",         "--reason-file",
	                "/tmp/x.end",   "--head",  "h cmd",      "--worker",    "w cmd",
	                "--",           "python3", "a.py",       NULL};
	struct launch_opts o;
	char err[256] = "";
	CHECK_INT(launch_parse(18, argv, &o, err, sizeof(err)), 0);
	CHECK_INT(o.rank, 0);
	CHECK_STR(o.head_addr, "10.0.0.1:10007");
	CHECK_INT(o.timeout_ms, 5000);
	CHECK_INT(o.grace_ms, 300);
	CHECK_STR(o.reason_file, "/tmp/x.end");
	CHECK_STR(o.head, "h cmd");
	CHECK_STR(o.worker, "w cmd");
	CHECK_STR(o.command[0], "python3");
	CHECK_STR(o.command[1], "a.py");
	CHECK(o.command[2] == NULL);
}

TEST(parse_refuses_what_the_agent_never_sends)
{
	struct launch_opts o;
	char err[256] = "";
	char *no_cmd[] = {"_launch", "--rank", "0", "--head-addr", "h:1", "--head", "x", NULL};
	CHECK_INT(launch_parse(7, no_cmd, &o, err, sizeof(err)), -1);
	CHECK_CONTAINS(err, "rank 0 needs --head and a command");
	char *bad_addr[] = {"_launch", "--rank", "1", "--head-addr", "nohost", NULL};
	CHECK_INT(launch_parse(5, bad_addr, &o, err, sizeof(err)), -1);
	CHECK_CONTAINS(err, "is not host:port");
	char *bad_rank[] = {"_launch", "--rank", "x", "--head-addr", "h:1", NULL};
	CHECK_INT(launch_parse(5, bad_rank, &o, err, sizeof(err)), -1);
	CHECK_CONTAINS(err, "--rank: 'x'");
	char *unknown[] = {"_launch", "--bogus", "1", NULL};
	CHECK_INT(launch_parse(3, unknown, &o, err, sizeof(err)), -1);
	CHECK_CONTAINS(err, "unknown option --bogus");
	char *no_value[] = {"_launch", "--rank", NULL};
	CHECK_INT(launch_parse(2, no_value, &o, err, sizeof(err)), -1);
	CHECK_CONTAINS(err, "--rank needs a value");
	/* a rank other than 0 needs neither head nor command */
	char *worker[] = {"_launch", "--rank", "3", "--head-addr", "[::1]:10007", NULL};
	CHECK_INT(launch_parse(5, worker, &o, err, sizeof(err)), 0);
	CHECK(o.command == NULL && o.head == NULL && o.worker == NULL);
}

TEST(split_addr_takes_host_port_and_bracketed_v6)
{
	char host[64], port[16];
	CHECK_INT(launch_split_addr("10.0.0.1:8786", host, sizeof(host), port, sizeof(port)), 0);
	CHECK_STR(host, "10.0.0.1");
	CHECK_STR(port, "8786");
	CHECK_INT(launch_split_addr("[fe80::1]:80", host, sizeof(host), port, sizeof(port)), 0);
	CHECK_STR(host, "fe80::1");
	CHECK_STR(port, "80");
	const char *bad[] = {"::1:80", "host:", ":80", "host:8x", "[::1]80", "[]:80", "noport"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (launch_split_addr(bad[i], host, sizeof(host), port, sizeof(port)) == 0)
			FAIL_AT("'%s' was taken as host '%s' port '%s'", bad[i], host, port);
	CHECK_INT(launch_split_addr("averyveryverylonghostname:1", host, 8, port, sizeof(port)),
	          -1);
}

/* ---- the supervisor ---- */

static struct launch_sup sup(int rank, int has_worker)
{
	struct launch_sup s;
	launch_sup_init(&s, rank, has_worker, "10.0.0.1:10007", 2000, 1000);
	return s;
}

TEST(a_head_that_never_answers_ends_with_124)
{
	struct launch_sup s = sup(0, 1);
	CHECK_INT(s.phase, LAUNCH_WAITING);
	launch_sup_tick(&s, 2999);
	CHECK_INT(s.phase, LAUNCH_WAITING);
	launch_sup_tick(&s, 3000);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, LAUNCH_TIMEOUT_EXIT);
	CHECK_INT(s.exit_signal, 0);
	CHECK_STR(s.reason, "the head did not answer at 10.0.0.1:10007 within 2 s");
}

TEST(a_head_that_ends_first_fails_with_its_status_at_least_one)
{
	struct launch_sup s = sup(0, 1);
	launch_sup_ended(&s, LAUNCH_HEAD, EXITED(2), 0, 1100);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 2);
	CHECK_STR(s.reason, "the head exited with status 2 before it answered");
	s = sup(0, 1);
	launch_sup_answered(&s);
	CHECK_INT(s.phase, LAUNCH_RUNNING);
	launch_sup_tick(&s, 1000000); /* no deadline while running */
	CHECK_INT(s.phase, LAUNCH_RUNNING);
	launch_sup_ended(&s, LAUNCH_HEAD, EXITED(5), 0, 1200);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 5);
	CHECK_STR(s.reason, "the head exited with status 5 before the command ended");
	s = sup(0, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_HEAD, KILLED(SIGKILL), 0, 1200);
	CHECK_INT(s.exit_code, 137);
	CHECK_CONTAINS(s.reason, "the head was killed by signal 9");
	/* what ends after the decision changes nothing */
	launch_sup_ended(&s, LAUNCH_COMMAND, EXITED(0), 0, 1300);
	CHECK_INT(s.exit_code, 137);
}

/* Dask's client.shutdown(): the scheduler exits 0, the workers follow,
 * then the command ends; a head that returns 0 and no command ending in
 * time is the head's failure. */
TEST(a_head_that_exits_zero_waits_for_the_command)
{
	struct launch_sup s = sup(0, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_HEAD, EXITED(0), 0, 2000);
	CHECK_INT(s.phase, LAUNCH_ORPHANED);
	launch_sup_ended(&s, LAUNCH_WORKER, EXITED(0), 0, 2100); /* its scheduler went */
	CHECK_INT(s.phase, LAUNCH_ORPHANED);
	launch_sup_ended(&s, LAUNCH_COMMAND, EXITED(0), 0, 2200);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 0);
	CHECK_STR(s.reason, "");
	s = sup(0, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_HEAD, EXITED(0), 0, 2000);
	launch_sup_tick(&s, 2000 + LAUNCH_ORPHAN_MS - 1);
	CHECK_INT(s.phase, LAUNCH_ORPHANED);
	launch_sup_tick(&s, 2000 + LAUNCH_ORPHAN_MS);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 1); /* a head that returns is a failure after all */
	CHECK_STR(s.reason, "the head exited with status 0 before the command ended");
	/* an orphaned worker, then a head that fails: the head is blamed */
	s = sup(0, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_WORKER, EXITED(0), 0, 2000);
	launch_sup_ended(&s, LAUNCH_HEAD, KILLED(SIGKILL), 0, 2100);
	CHECK_INT(s.exit_code, 137);
	CHECK_CONTAINS(s.reason, "the head was killed by signal 9");
}

TEST(the_commands_status_is_the_outcome)
{
	struct launch_sup s = sup(0, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_COMMAND, EXITED(0), 0, 1500);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 0);
	CHECK_STR(s.reason, "");
	CHECK(!s.stopped);
	s = sup(0, 0);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_COMMAND, EXITED(3), 0, 1500);
	CHECK_INT(s.exit_code, 3);
	CHECK_STR(s.reason, "the command exited with status 3");
	s = sup(0, 0);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_COMMAND, KILLED(SIGSEGV), 0, 1500);
	CHECK_INT(s.exit_signal, SIGSEGV); /* the launcher dies of it too */
	CHECK_CONTAINS(s.reason, "the command was killed by signal 11");
}

TEST(a_worker_ending_while_the_head_answers_fails)
{
	struct launch_sup s = sup(2, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_WORKER, EXITED(4), 1, 1500);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 4);
	CHECK_STR(s.reason, "the worker exited with status 4 before the command ended");
}

/* A Dask worker exits 0 when its scheduler closes: with the head gone the
 * worker is not blamed; the rank waits to be stopped. */
TEST(a_worker_ending_after_its_head_waits_to_be_stopped)
{
	struct launch_sup s = sup(1, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_WORKER, EXITED(0), 0, 5000);
	CHECK_INT(s.phase, LAUNCH_ORPHANED);
	launch_sup_tick(&s, 5000 + LAUNCH_ORPHAN_MS - 1);
	CHECK_INT(s.phase, LAUNCH_ORPHANED);
	launch_sup_signal(&s, SIGTERM);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK(s.stopped);
	CHECK_INT(s.exit_signal, SIGTERM);
	CHECK_STR(s.reason, "");
	/* not stopped in time: the worker's end is the reason after all */
	s = sup(1, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_WORKER, EXITED(0), 0, 5000);
	launch_sup_tick(&s, 5000 + LAUNCH_ORPHAN_MS);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 1);
	CHECK_STR(s.reason, "the worker exited with status 0 and the head at 10.0.0.1:10007 "
	                    "stopped answering");
	/* on rank 0 the command still decides */
	s = sup(0, 1);
	launch_sup_answered(&s);
	launch_sup_ended(&s, LAUNCH_WORKER, EXITED(0), 0, 5000);
	launch_sup_ended(&s, LAUNCH_COMMAND, EXITED(0), 0, 5100);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_code, 0);
}

TEST(a_stop_signal_ends_any_phase_once)
{
	struct launch_sup s = sup(0, 1);
	launch_sup_signal(&s, SIGINT);
	CHECK_INT(s.phase, LAUNCH_ENDING);
	CHECK_INT(s.exit_signal, SIGINT);
	launch_sup_signal(&s, SIGTERM); /* our own SIGTERM to the group */
	CHECK_INT(s.exit_signal, SIGINT);
	/* a rank other than 0 without a worker needs no head at all */
	s = sup(3, 0);
	CHECK_INT(s.phase, LAUNCH_RUNNING);
	launch_sup_tick(&s, 1000000);
	CHECK_INT(s.phase, LAUNCH_RUNNING);
}

/* ---- the agent's side ---- */

static json_t *json_of(const char *text)
{
	json_t *o = NULL;
	char err[256];
	if (jv_parse_object(text, strlen(text), &o, err, sizeof(err)))
		FAIL_AT("bad fixture: %s", err);
	return o;
}

static char *joined(char **argv)
{
	size_t n = 1;
	for (size_t i = 0; argv[i]; i++)
		n += strlen(argv[i]) + 1;
	char *s = xcalloc(n, 1);
	for (size_t i = 0; argv[i]; i++) {
		if (i)
			strcat(s, "|");
		strcat(s, argv[i]);
	}
	return s;
}

TEST(the_agent_runs_ranks_of_head_jobs_under_the_launcher)
{
	json_t *d = json_of("{\"attempt_id\": 9, \"rank\": 0, \"command\": [\"python3\", \"a.py\"],"
	                    " \"grace_ms\": 5000, \"head_addr\": \"10.0.0.1:10009\","
	                    " \"head\": \"h\", \"worker\": \"w\", \"head_timeout_ms\": 60000}");
	char **argv = launch_argv(desired_fx(d), "/usr/bin/anvil", "/work");
	char *s = joined(argv);
	CHECK_STR(s,
	          "/usr/bin/anvil|_launch|--rank|0|--head-addr|10.0.0.1:10009|--timeout-ms|60000|"
	          "--grace-ms|5000|--reason-file|/work/rank/9-0/.anvil-end|--head|h|--worker|w|--|"
	          "python3|a.py");
	/* the argv parses back */
	int argc = 0;
	while (argv[argc])
		argc++;
	struct launch_opts o;
	char err[256] = "";
	CHECK_INT(launch_parse(argc - 1, argv + 1, &o, err, sizeof(err)), 0);
	CHECK_STR(o.command[1], "a.py");
	free(s);
	launch_argv_free(argv);
	json_decref(d);
	/* rank 1: no head, no command */
	d = json_of("{\"attempt_id\": 9, \"rank\": 1, \"command\": [\"python3\", \"a.py\"],"
	            " \"head_addr\": \"10.0.0.1:10009\", \"worker\": \"w\"}");
	argv = launch_argv(desired_fx(d), "/usr/bin/anvil", "/work");
	s = joined(argv);
	CHECK_STR(s, "/usr/bin/anvil|_launch|--rank|1|--head-addr|10.0.0.1:10009|--timeout-ms|"
	             "300000|--grace-ms|10000|--reason-file|/work/rank/9-1/.anvil-end|--worker|w");
	free(s);
	launch_argv_free(argv);
	json_decref(d);
	/* without a head: the command as it is */
	d = json_of("{\"attempt_id\": 9, \"rank\": 0, \"command\": [\"true\"]}");
	CHECK(launch_argv(desired_fx(d), "/usr/bin/anvil", "/work") == NULL);
	json_decref(d);
	CHECK(launch_self() != NULL && launch_self()[0] == '/');
}

static char *tmpdir(void)
{
	char tmpl[] = "/tmp/anvil-test-launch-XXXXXX";
	CHECK(mkdtemp(tmpl) != NULL);
	char *logs = xasprintf("%s/logs", tmpl), *rank = xasprintf("%s/rank/3-1", tmpl);
	CHECK_INT(mkdir(logs, 0755), 0);
	CHECK_INT(mkdir_p(rank, 0755), 0); /* the rank's own directory (agent/exec.h) */
	free(logs);
	free(rank);
	return xstrdup(tmpl);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

TEST(the_reason_file_is_read_as_one_printable_line)
{
	char *dir = tmpdir();
	char out[256];
	CHECK_INT(launch_reason_read(dir, 3, 1, out, sizeof(out)), 0); /* none */
	char *path = launch_reason_path(dir, 3, 1);
	write_file(path, "the head exited with status 1\tbefore\x01 the command ended\nmore\n");
	CHECK_INT(launch_reason_read(dir, 3, 1, out, sizeof(out)), 1);
	CHECK_STR(out, "the head exited with status 1?before? the command ended");
	char *big = xcalloc(1000, 1);
	memset(big, 'x', 999);
	write_file(path, big);
	CHECK_INT(launch_reason_read(dir, 3, 1, out, sizeof(out)), 1);
	CHECK_INT(strlen(out), 255); /* wire_report's bound */
	char small[8];
	CHECK_INT(launch_reason_read(dir, 3, 1, small, sizeof(small)), 1);
	CHECK_STR(small, "xxxxxxx");
	write_file(path, "\n");
	CHECK_INT(launch_reason_read(dir, 3, 1, out, sizeof(out)), 0);
	free(big);
	unlink(path);
	free(path);
	char *logs = xasprintf("%s/logs", dir);
	rmdir(logs);
	rmdir(dir);
	free(logs);
	free(dir);
}

/* ---- the process ---- */

/* A socket listening on an ephemeral loopback port: the head's address. */
static int listener(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	CHECK(fd >= 0);
	CHECK_INT(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_INT(listen(fd, 16), 0);
	CHECK_INT(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* Runs `anvil _launch` with args in a child that leads its own process
 * group, as the agent's shim makes it; the child does not keep the test's
 * listening socket `keep_out` (-1: none) open. */
static pid_t launch(char **args, int keep_out)
{
	int argc = 0;
	while (args[argc])
		argc++;
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (keep_out >= 0)
			close(keep_out);
		setpgid(0, 0);
		_exit(launch_main(argc, args));
	}
	return pid;
}

static int wait_status(pid_t pid)
{
	int ws = 0;
	CHECK_INT(waitpid(pid, &ws, 0), pid);
	return ws;
}

static char *reason_of(const char *path)
{
	char buf[512] = "";
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = '\0';
	return xstrdup(buf);
}

TEST(process_the_head_never_answers_and_is_stopped)
{
	char *dir = tmpdir();
	char *why = xasprintf("%s/why", dir);
	char *args[] = {"_launch",
	                "--rank",
	                "0",
	                "--head-addr",
	                "127.0.0.1:1",
	                "--timeout-ms",
	                "300",
	                "--grace-ms",
	                "5000",
	                "--reason-file",
	                why,
	                "--head",
	                "exec sleep 30",
	                "--worker",
	                "exec sleep 30",
	                "--",
	                "sh",
	                "-c",
	                "echo the command ran; exit 9",
	                NULL};
	int64_t t0 = now_ms();
	int ws = wait_status(launch(args, -1));
	CHECK(WIFEXITED(ws));
	CHECK_INT(WEXITSTATUS(ws), LAUNCH_TIMEOUT_EXIT);
	CHECK(now_ms() - t0 < 4000); /* the head went at SIGTERM, not after 30 s */
	char *r = reason_of(why);
	CHECK_STR(r, "the head did not answer at 127.0.0.1:1 within 0.3 s");
	free(r);
	unlink(why);
	free(why);
	char *logs = xasprintf("%s/logs", dir);
	rmdir(logs);
	rmdir(dir);
	free(logs);
	free(dir);
}

TEST(process_the_command_ends_the_rank_with_its_status)
{
	int port;
	int fd = listener(&port);
	char addr[32], marker[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	char *dir = tmpdir();
	char *why = xasprintf("%s/why", dir);
	/* the worker leaves a file once started: it ran after the head answered */
	char *worker = xasprintf("touch %s/worker-ran; exec sleep 30", dir);
	snprintf(marker, sizeof(marker), "%s/worker-ran", dir);
	char *args[] = {"_launch",
	                "--rank",
	                "0",
	                "--head-addr",
	                addr,
	                "--grace-ms",
	                "5000",
	                "--reason-file",
	                why,
	                "--head",
	                "exec sleep 30",
	                "--worker",
	                worker,
	                "--",
	                "sh",
	                "-c",
	                "sleep 0.3; exit 3",
	                NULL};
	int64_t t0 = now_ms();
	int ws = wait_status(launch(args, fd));
	CHECK(WIFEXITED(ws));
	CHECK_INT(WEXITSTATUS(ws), 3);
	CHECK(now_ms() - t0 < 4000); /* head and worker went at SIGTERM */
	CHECK_INT(access(marker, F_OK), 0);
	char *r = reason_of(why);
	CHECK_STR(r, "the command exited with status 3");
	free(r);
	close(fd);
	unlink(marker);
	unlink(why);
	free(why);
	free(worker);
	char *logs = xasprintf("%s/logs", dir);
	rmdir(logs);
	rmdir(dir);
	free(logs);
	free(dir);
}

TEST(process_a_worker_that_fails_while_the_head_answers)
{
	int port;
	int fd = listener(&port);
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	char *dir = tmpdir();
	char *why = xasprintf("%s/why", dir);
	char *args[] = {"_launch",       "--rank", "1",        "--head-addr", addr,
	                "--reason-file", why,      "--worker", "exit 4",      NULL};
	int ws = wait_status(launch(args, fd));
	CHECK(WIFEXITED(ws));
	CHECK_INT(WEXITSTATUS(ws), 4);
	char *r = reason_of(why);
	CHECK_STR(r, "the worker exited with status 4 before the command ended");
	free(r);
	close(fd);
	unlink(why);
	free(why);
	char *logs = xasprintf("%s/logs", dir);
	rmdir(logs);
	rmdir(dir);
	free(logs);
	free(dir);
}

/* The head answers, then goes; the worker ends after it: the rank waits
 * to be stopped, and then dies of the stop signal, blaming nobody. */
TEST(process_a_worker_orphaned_by_its_head_waits_for_the_stop)
{
	int port;
	int fd = listener(&port);
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	char *dir = tmpdir();
	char *why = xasprintf("%s/why", dir);
	char *started = xasprintf("%s/worker-started", dir),
	     *gone = xasprintf("%s/worker-gone", dir);
	char *worker = xasprintf("touch %s; sleep 0.5; touch %s", started, gone);
	char *args[] = {"_launch",       "--rank", "1",        "--head-addr", addr,
	                "--reason-file", why,      "--worker", worker,        NULL};
	pid_t pid = launch(args, fd);
	/* the worker runs: the head answered; then the head goes */
	for (int i = 0; i < 200 && access(started, F_OK) != 0; i++)
		usleep(50000);
	CHECK_INT(access(started, F_OK), 0);
	close(fd);
	for (int i = 0; i < 200 && access(gone, F_OK) != 0; i++)
		usleep(50000);
	CHECK_INT(access(gone, F_OK), 0);
	usleep(500000);
	int ws = 0;
	CHECK_INT(waitpid(pid, &ws, WNOHANG), 0); /* still there: ORPHANED */
	CHECK_INT(kill(pid, SIGTERM), 0);
	ws = wait_status(pid);
	CHECK(WIFSIGNALED(ws));
	CHECK_INT(WTERMSIG(ws), SIGTERM);
	CHECK_INT(access(why, F_OK), -1); /* no reason: nothing failed */
	unlink(gone);
	unlink(started);
	free(gone);
	free(started);
	free(worker);
	free(why);
	char *logs = xasprintf("%s/logs", dir);
	rmdir(logs);
	rmdir(dir);
	free(logs);
	free(dir);
}

TEST_MAIN()
