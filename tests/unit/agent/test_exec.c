/* test_exec.c - the executor through agent/exec.h: real processes. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/exec.h"
#include "agent/exec_int.h"
#include "agent/shim.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "exec_fixture.h"
#include "model/machine.h"

static char work[64];
static char node[32];

static struct exec *setup(void)
{
	log_init("test", LOG_WARN);
	snprintf(work, sizeof(work), "/tmp/anvil-exec-XXXXXX");
	CHECK(mkdtemp(work) != NULL);
	snprintf(node, sizeof(node), "test-%d", (int)getpid());
	struct exec *e = NULL;
	CHECK_INT(exec_new(work, node, &e), 0);
	exec_poll(e); /* makes the spares: the first ranks start from them */
	CHECK_INT(exec_spares(e, NULL, 0), EXEC_SPARES_DEFAULT);
	return e;
}

static void teardown(struct exec *e)
{
	exec_free(e);
	rm_rf(work);
}

static void start(struct exec *e, int64_t attempt, const char *script, const char *const *env)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	struct exec_spec s = {.attempt_id = attempt,
	                      .rank = 0,
	                      .job_id = attempt * 10,
	                      .argv = argv,
	                      .env = env,
	                      .grace_ms = 2000};
	CHECK_INT(exec_start(e, &s), 0);
}

/* Alive and not a zombie. */
static int alive(pid_t pid)
{
	if (kill(pid, 0) < 0)
		return 0;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	struct buf b;
	buf_init(&b);
	int z = read_file(path, 4096, &b) == 0 && strstr(b.data, ") Z ") != NULL;
	buf_cleanup(&b);
	return !z;
}

/* The store numbers the agent rank table's states as enum exec_state does
 * (model/machine.h, MACHINE_AGENT_RANK), and the executor's one
 * transition function refuses what the table lacks, keeping the state. */
TEST(rank_states_are_the_agent_rank_table)
{
	static const char *const names[EXEC_NSTATES] = {"running", "exited", "failed"};
	CHECK_INT(machine_nstates(MACHINE_AGENT_RANK), EXEC_NSTATES);
	for (int s = 0; s < EXEC_NSTATES; s++)
		CHECK_STR(machine_state_name(MACHINE_AGENT_RANK, s), names[s]);
	CHECK_INT(machine_initial(MACHINE_AGENT_RANK), EXEC_RUNNING);
	struct exec_rank r = {.attempt_id = 1, .state = EXEC_RUNNING};
	CHECK_INT(exec_rank_move(&r, EXEC_FAILED), 0);
	CHECK_INT(r.state, EXEC_FAILED);
	CHECK_INT(exec_rank_move(&r, EXEC_EXITED), ERR_CONFLICT);
	CHECK_INT(r.state, EXEC_FAILED);
	CHECK_INT(exec_rank_move(&r, EXEC_RUNNING), ERR_CONFLICT);
	r.state = EXEC_EXITED;
	CHECK_INT(exec_rank_move(&r, EXEC_FAILED), ERR_CONFLICT);
	CHECK_INT(r.state, EXEC_EXITED);
}

TEST(exit_status_and_log)
{
	struct exec *e = setup();
	start(e, 1, "echo hello; echo oops >&2; exit 3", NULL);
	struct exec_status st;
	CHECK_INT(exec_find(e, 1, 0, &st), 0);
	CHECK(st.pid > 0);
	CHECK_INT(st.job_id, 10);
	st = exec_fx_wait_final(e, 1, 5000);
	CHECK_INT(st.state, EXEC_EXITED);
	CHECK_INT(st.exit_code, 3);
	CHECK_INT(st.signal, 0);
	/* stdout and stderr each in its own log */
	char *out = exec_fx_stream(work, 1, EXEC_STDOUT);
	char *err = exec_fx_stream(work, 1, EXEC_STDERR);
	CHECK_STR(out, "hello\n");
	CHECK_STR(err, "oops\n");
	free(out);
	free(err);
	CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 1,
	                                            .rank = 0,
	                                            .argv = (const char *const[]){"true", NULL}}),
	          -EEXIST);
	CHECK_INT(exec_running(e), 0);
	CHECK_INT(exec_started_total(e), 1);
	teardown(e);
}

/* A shim forked for the rank (no spare) splits the streams too, and its
 * own message (command not found) goes to the rank's stderr. */
TEST(streams_apart_on_the_direct_path)
{
	struct exec *e = setup();
	exec_set_spares(e, 0);
	exec_poll(e);
	start(e, 4, "echo out-line; echo err-line >&2", NULL);
	CHECK_INT(exec_fx_wait_final(e, 4, 5000).exit_code, 0);
	CHECK_INT(exec_started_spare_total(e), 0);
	char *out = exec_fx_stream(work, 4, EXEC_STDOUT);
	char *err = exec_fx_stream(work, 4, EXEC_STDERR);
	CHECK_STR(out, "out-line\n");
	CHECK_STR(err, "err-line\n");
	free(out);
	free(err);
	const char *argv[] = {"no-such-command-anvil", NULL};
	CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 5, .rank = 0, .argv = argv}), 0);
	CHECK_INT(exec_fx_wait_final(e, 5, 5000).exit_code, 127);
	out = exec_fx_stream(work, 5, EXEC_STDOUT);
	err = exec_fx_stream(work, 5, EXEC_STDERR);
	CHECK_STR(out, "");
	CHECK_CONTAINS(err, "command not found");
	free(out);
	free(err);
	teardown(e);
}

TEST(env_and_cwd)
{
	struct exec *e = setup();
	const char *env[] = {"FOO=bar baz", "CUDA_VISIBLE_DEVICES=0,1", NULL};
	start(e, 2,
	      "echo \"foo=$FOO cvd=$CUDA_VISIBLE_DEVICES out=$ANVIL_OUTPUT_DIR\"; "
	      "echo \"log=$ANVIL_LOG_FILE err=$ANVIL_ERR_FILE\"; echo \"pwd=$(pwd)\"; "
	      "echo \"secret=${ANVIL_TEST_SECRET:-unset}\"",
	      env);
	setenv("ANVIL_TEST_SECRET", "leak", 1); /* set after start: must not matter */
	struct exec_status st = exec_fx_wait_final(e, 2, 5000);
	CHECK_INT(st.exit_code, 0);
	char *log = exec_fx_log(work, 2);
	char want[512];
	CHECK_CONTAINS(log, "foo=bar baz cvd=0,1");
	snprintf(want, sizeof(want), "out=%s/output/2\n", work);
	CHECK_CONTAINS(log, want);
	snprintf(want, sizeof(want), "log=%s/logs/2-0.log err=%s/logs/2-0.err\n", work, work);
	CHECK_CONTAINS(log, want);
	snprintf(want, sizeof(want), "pwd=%s/output/2\n", work);
	CHECK_CONTAINS(log, want);
	CHECK_CONTAINS(log, "secret=unset");
	free(log);
	teardown(e);
}

TEST(agent_env_not_inherited)
{
	setenv("ANVIL_TEST_SECRET", "leak", 1);
	struct exec *e = setup();
	start(e, 3, "echo \"secret=${ANVIL_TEST_SECRET:-unset} path=${PATH:+set}\"", NULL);
	exec_fx_wait_final(e, 3, 5000);
	char *log = exec_fx_log(work, 3);
	CHECK_CONTAINS(log, "secret=unset path=set");
	free(log);
	teardown(e);
}

/* Reads up to n pids the command wrote to path, waiting until all are there. */
static int read_pids(const char *path, pid_t *pids, int n)
{
	int64_t end = now_ms() + 5000;
	for (;;) {
		struct buf b;
		buf_init(&b);
		int got = 0;
		if (read_file(path, 4096, &b) == 0) {
			char *p = b.data;
			long v;
			int used;
			while (got < n && sscanf(p, "%ld%n", &v, &used) == 1) {
				pids[got++] = (pid_t)v;
				p += used;
			}
		}
		buf_cleanup(&b);
		if (got == n)
			return n;
		if (now_ms() > end)
			FAIL_AT("only %d of %d pids in %s", got, n, path);
		sleep_ms(10);
	}
}

TEST(stop_kills_process_tree)
{
	struct exec *e = setup();
	char script[1024], pidfile[128];
	snprintf(pidfile, sizeof(pidfile), "%s/pids", work);
	/* Children, a grandchild, and one that leaves the group with setsid. */
	snprintf(script, sizeof(script),
	         "sleep 100 & echo $! >> %s; sleep 100 & echo $! >> %s; "
	         "sh -c 'sleep 100 & echo $! >> %s; wait' & "
	         "setsid sleep 100 & echo $! >> %s; wait",
	         pidfile, pidfile, pidfile, pidfile);
	start(e, 4, script, NULL);
	pid_t pids[4];
	read_pids(pidfile, pids, 4);
	for (int i = 0; i < 4; i++)
		CHECK(alive(pids[i]));
	CHECK_INT(exec_stop(e, 4, 0, 2000), 0);
	struct exec_status st = exec_fx_wait_final(e, 4, 5000);
	CHECK_INT(st.state, EXEC_EXITED);
	CHECK(st.stopping);
	CHECK_INT(st.signal, SIGTERM);
	CHECK_INT(st.exit_code, 128 + SIGTERM);
	sleep_ms(50);
	/* Without cgroups a setsid() escapee is out of reach of the group. */
	int n = exec_uses_cgroups(e) ? 4 : 3;
	for (int i = 0; i < n; i++)
		if (alive(pids[i]))
			FAIL_AT("pid %d (#%d) survived the stop", (int)pids[i], i);
	if (n == 3)
		kill(pids[3], SIGKILL);
	teardown(e);
}

TEST(stop_escalates_to_kill_after_grace)
{
	struct exec *e = setup();
	const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; sleep 100", NULL};
	struct exec_spec s = {.attempt_id = 5, .argv = argv, .grace_ms = 200};
	CHECK_INT(exec_start(e, &s), 0);
	sleep_ms(100);
	int64_t t0 = now_ms();
	CHECK_INT(exec_stop(e, 5, 0, -1), 0);
	CHECK(exec_next_poll_ms(e) >= 0 && exec_next_poll_ms(e) <= 200);
	struct exec_status st = exec_fx_wait_final(e, 5, 5000);
	int64_t took = now_ms() - t0;
	CHECK_INT(st.signal, SIGKILL);
	CHECK_INT(st.exit_code, 137);
	CHECK(took >= 190);
	CHECK(took < 2000);
	teardown(e);
}

TEST(exec_failure_is_127_with_message)
{
	struct exec *e = setup();
	const char *a1[] = {"no-such-command-anvil", "x", NULL};
	const char *a2[] = {"/nonexistent/anvil-bin", NULL};
	CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 6, .argv = a1}), 0);
	CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 7, .argv = a2}), 0);
	CHECK_INT(exec_fx_wait_final(e, 6, 5000).exit_code, 127);
	CHECK_INT(exec_fx_wait_final(e, 7, 5000).exit_code, 127);
	char *log = exec_fx_log(work, 6);
	CHECK_CONTAINS(log, "cannot run 'no-such-command-anvil': command not found");
	free(log);
	log = exec_fx_log(work, 7);
	CHECK_CONTAINS(log, "cannot execute '/nonexistent/anvil-bin': No such file");
	free(log);
	teardown(e);
}

/* A working directory the node lacks (a job submitted from a directory
 * that only the client has): the rank fails to start, and says why in its
 * error, which becomes the job's reason, and in its log. */
TEST(missing_cwd_fails_the_start)
{
	struct exec *e = setup();
	const char *argv[] = {"true", NULL};
	char *file = xasprintf("%s/a-file", work);
	CHECK_INT(write_file_atomic(file, "x", 1, 0644), 0);
	CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 8,
	                                            .argv = argv,
	                                            .cwd = "/nonexistent-dir"}),
	          0);
	CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 9, .argv = argv, .cwd = file}),
	          0);
	struct exec_status st = exec_fx_wait_final(e, 8, 5000);
	CHECK_INT(st.state, EXEC_FAILED);
	CHECK_STR(st.error, "working directory /nonexistent-dir does not exist on this node");
	char *log = exec_fx_log(work, 8);
	CHECK_STR(log, "anvil: failed to start: working directory /nonexistent-dir does not exist "
	               "on this node\n");
	free(log);
	st = exec_fx_wait_final(e, 9, 5000);
	CHECK_INT(st.state, EXEC_FAILED);
	CHECK_CONTAINS(st.error, "a-file is not a directory on this node");
	free(file);
	teardown(e);
}

TEST(readopt_after_forgetting)
{
	struct exec *e = setup();
	start(e, 9, "sleep 2; exit 7", NULL); /* still running when re-adopted, even under load */
	start(e, 10, "exit 4", NULL);
	start(e, 11, "sleep 100", NULL);
	struct exec_status st9, st11;
	CHECK_INT(exec_find(e, 9, 0, &st9), 0);
	CHECK_INT(exec_find(e, 11, 0, &st11), 0);
	exec_fx_wait_final(e, 10, 5000);
	exec_free(e); /* the agent "forgets": a new executor over the same dir */
	CHECK_INT(exec_new(work, node, &e), 0);
	CHECK_INT(exec_count(e), 3);
	struct exec_status st;
	CHECK_INT(exec_find(e, 9, 0, &st), 0);
	CHECK_INT(st.state, EXEC_RUNNING);
	CHECK_INT(st.pid, st9.pid);
	CHECK_INT(st.job_id, 90);
	CHECK_INT(exec_find(e, 10, 0, &st), 0);
	CHECK_INT(st.state, EXEC_EXITED);
	CHECK_INT(st.exit_code, 4);
	CHECK(exec_next_poll_ms(e) >= 0); /* adopted ranks are polled */
	st = exec_fx_wait_final(e, 9, 5000);
	CHECK_INT(st.exit_code, 7);
	/* An adopted rank can be stopped. */
	CHECK_INT(exec_stop(e, 11, 0, 1000), 0);
	st = exec_fx_wait_final(e, 11, 5000);
	CHECK_INT(st.signal, SIGTERM);
	CHECK(!alive(st11.pid));
	/* A forgotten rank is not adopted again; an acked one stays acked here. */
	exec_ack(e, 10, 0);
	CHECK_INT(exec_find(e, 10, 0, &st), 0);
	CHECK(st.acked);
	exec_forget(e, 10, 0);
	CHECK_INT(exec_find(e, 10, 0, &st), ERR_NOTFOUND);
	exec_free(e);
	CHECK_INT(exec_new(work, node, &e), 0);
	CHECK_INT(exec_count(e), 2);
	CHECK_INT(exec_find(e, 10, 0, &st), ERR_NOTFOUND);
	teardown(e);
}

TEST(stop_all_with_cap)
{
	struct exec *e = setup();
	const char *argv[] = {"sh", "-c", "trap '' TERM; sleep 100", NULL};
	for (int i = 0; i < 3; i++)
		CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 20 + i,
		                                            .argv = argv,
		                                            .grace_ms = 600000}),
		          0);
	CHECK_INT(exec_running(e), 3);
	sleep_ms(50);
	exec_stop_all(e, 100);
	for (int i = 0; i < 3; i++)
		CHECK_INT(exec_fx_wait_final(e, 20 + i, 3000).signal, SIGKILL);
	CHECK_INT(exec_running(e), 0);
	teardown(e);
}

/* The spare-* cgroups under the executor's cgroup root. */
static int spare_cgroups(const char *root)
{
	DIR *d = root ? opendir(root) : NULL;
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strncmp(de->d_name, "spare-", 6) == 0;
	if (d)
		closedir(d);
	return n;
}

/* Runs "echo ppid=$PPID", the command's cgroup lines and its open fds. */
static char *run_whoami(struct exec *e, int64_t attempt)
{
	start(e, attempt,
	      "echo ppid=$PPID; grep -E ':(pids|freezer):' /proc/self/cgroup; "
	      "echo fds:; ls /proc/$$/fd; echo end",
	      NULL);
	struct exec_status st = exec_fx_wait_final(e, attempt, 5000);
	CHECK_INT(st.exit_code, 0);
	char *log = exec_fx_log(work, attempt);
	/* Nothing of the agent's or the shim's leaks in. */
	CHECK_CONTAINS(log, "fds:\n0\n1\n2\nend\n");
	return log;
}

/* The rank ran in its own cgroup ROOT/<attempt>-0 (when there are cgroups). */
static void check_rank_cgroup(struct exec *e, const char *log, int64_t attempt)
{
	if (!exec_uses_cgroups(e))
		return;
	char want[64];
	snprintf(want, sizeof(want), "/%lld-0\n", (long long)attempt);
	CHECK_CONTAINS(log, want);
}

TEST(spare_runs_the_rank_in_its_cgroup)
{
	struct exec *e = setup();
	int pids[EXEC_SPARES_MAX];
	CHECK_INT(exec_spares(e, pids, EXEC_SPARES_MAX), EXEC_SPARES_DEFAULT);
	CHECK_INT(spare_cgroups(exec_cgroup_root(e)),
	          exec_uses_cgroups(e) ? EXEC_SPARES_DEFAULT : 0);
	char *log = run_whoami(e, 30);
	/* The oldest spare became the rank's shim: the command's parent. */
	char want[64];
	snprintf(want, sizeof(want), "ppid=%d\n", pids[0]);
	CHECK_CONTAINS(log, want);
	check_rank_cgroup(e, log, 30);
	free(log);
	CHECK_INT(exec_started_spare_total(e), 1);
	/* The used one went back to the pool, last, in a spare cgroup again;
	 * none was made while it ran (it counted as one of the pool's). */
	int now[EXEC_SPARES_MAX];
	CHECK_INT(exec_spares(e, now, EXEC_SPARES_MAX), EXEC_SPARES_DEFAULT);
	CHECK_INT(now[EXEC_SPARES_DEFAULT - 1], pids[0]);
	CHECK_INT(now[0], pids[1]);
	CHECK_INT(exec_reused_total(e), 1);
	CHECK_INT(spare_cgroups(exec_cgroup_root(e)),
	          exec_uses_cgroups(e) ? EXEC_SPARES_DEFAULT : 0);
	teardown(e);
}

/* A shim runs rank after rank: each in its own cgroup, with its own log,
 * nothing of the one before left open, and stopping one kills its tree. */
TEST(reused_shim_runs_the_next_rank)
{
	struct exec *e = setup();
	exec_set_spares(e, 1);
	exec_poll(e);
	int first[1];
	CHECK_INT(exec_spares(e, first, 1), 1);
	for (int64_t a = 50; a < 53; a++) {
		/* The pool's oldest is used: end the others so it is our shim. */
		int pids[EXEC_SPARES_MAX];
		int n = exec_spares(e, pids, EXEC_SPARES_MAX);
		CHECK(n >= 1);
		char *log = run_whoami(e, a);
		char want[64];
		snprintf(want, sizeof(want), "ppid=%d\n", pids[0]);
		CHECK_CONTAINS(log, want);
		check_rank_cgroup(e, log, a);
		free(log);
		exec_ack(e, a, 0);
		exec_forget(e, a, 0);
	}
	CHECK(exec_reused_total(e) >= 2);
	/* A reused shim's rank is stopped with its whole tree. */
	char script[512], pidfile[128];
	snprintf(pidfile, sizeof(pidfile), "%s/pids", work);
	snprintf(script, sizeof(script), "setsid sleep 100 & echo $! >> %s; wait", pidfile);
	start(e, 54, script, NULL);
	pid_t pid;
	read_pids(pidfile, &pid, 1);
	CHECK_INT(exec_stop(e, 54, 0, 1000), 0);
	CHECK_INT(exec_fx_wait_final(e, 54, 5000).signal, SIGTERM);
	sleep_ms(50);
	if (exec_uses_cgroups(e))
		CHECK(!alive(pid));
	else
		kill(pid, SIGKILL);
	CHECK_INT(exec_started_spare_total(e), 4);
	teardown(e);
}

/* In a batch, starts through spares return before the commands' pids are
 * known; exec_settle reads them, and the ranks run and end as any other. */
TEST(batched_starts_settle_with_their_pids)
{
	struct exec *e = setup();
	exec_batch(e);
	start(e, 60, "exit 3", NULL);
	start(e, 61, "echo hi", NULL);
	struct exec_status st;
	CHECK_INT(exec_find(e, 60, 0, &st), 0);
	CHECK_INT(st.state, EXEC_RUNNING);
	CHECK_INT(st.pid, 0); /* not read yet */
	exec_settle(e);
	CHECK_INT(exec_find(e, 60, 0, &st), 0);
	CHECK(st.pid > 0);
	CHECK_INT(exec_find(e, 61, 0, &st), 0);
	CHECK(st.pid > 0);
	CHECK_INT(exec_started_spare_total(e), 2);
	CHECK_INT(exec_fx_wait_final(e, 60, 5000).exit_code, 3);
	CHECK_INT(exec_fx_wait_final(e, 61, 5000).exit_code, 0);
	char *log = exec_fx_log(work, 61);
	CHECK_STR(log, "hi\n");
	free(log);
	/* Outside a batch a start waits for its pid again. */
	start(e, 62, "exit 0", NULL);
	CHECK_INT(exec_find(e, 62, 0, &st), 0);
	CHECK(st.state != EXEC_RUNNING || st.pid > 0);
	exec_fx_wait_final(e, 62, 5000);
	teardown(e);
}

/* A batched start whose spare dies with the launch unread fails to start,
 * saying so, when the batch settles; the executor goes on. */
TEST(batched_start_on_a_dead_spare_fails_at_settle)
{
	struct exec *e = setup();
	int pids[EXEC_SPARES_MAX];
	CHECK_INT(exec_spares(e, pids, EXEC_SPARES_MAX), EXEC_SPARES_DEFAULT);
	kill(pids[0], SIGSTOP); /* the oldest: the next start's */
	exec_batch(e);
	start(e, 70, "exit 0", NULL);
	kill(pids[0], SIGKILL); /* the launch is never read */
	exec_settle(e);
	struct exec_status st;
	CHECK_INT(exec_find(e, 70, 0, &st), 0);
	CHECK_INT(st.state, EXEC_FAILED);
	CHECK_CONTAINS(st.error, "spare shim ended before reporting the command");
	start(e, 71, "exit 5", NULL);
	CHECK_INT(exec_fx_wait_final(e, 71, 5000).exit_code, 5);
	teardown(e);
}

TEST(no_spare_left_starts_directly)
{
	struct exec *e = setup();
	exec_set_spares(e, 1);
	CHECK_INT(exec_next_poll_ms(e), 0); /* one too many */
	exec_poll(e);
	CHECK_INT(exec_spares(e, NULL, 0), 1);
	/* Two ranks before the next exec_poll: the second finds no spare. */
	const char *script = "echo ppid=$PPID; grep -E ':(pids|freezer):' /proc/self/cgroup";
	start(e, 31, script, NULL);
	start(e, 32, script, NULL);
	CHECK_INT(exec_started_spare_total(e), 1);
	CHECK_INT(exec_spares(e, NULL, 0), 0);
	/* rank 31's shim is the pool's and comes back: no refill is due */
	CHECK(exec_next_poll_ms(e) != 0);
	for (int64_t a = 31; a <= 32; a++) {
		CHECK_INT(exec_fx_wait_final(e, a, 5000).exit_code, 0);
		char *log = exec_fx_log(work, a);
		check_rank_cgroup(e, log, a);
		free(log);
	}
	/* At least the refill; finished ranks' shims may also have come back
	 * to the pool (they leave it after 5 s idle), so it may hold more. */
	CHECK(exec_spares(e, NULL, 0) >= 1);
	/* Without spares at all, every rank starts directly. */
	exec_set_spares(e, 0);
	exec_poll(e);
	CHECK_INT(exec_spares(e, NULL, 0), 0);
	CHECK_INT(spare_cgroups(exec_cgroup_root(e)), 0);
	char *log = run_whoami(e, 33);
	check_rank_cgroup(e, log, 33);
	free(log);
	CHECK_INT(exec_started_spare_total(e), 1);
	teardown(e);
}

TEST(big_launch_starts_directly)
{
	struct exec *e = setup();
	char *big = xmalloc(SHIM_SPARE_MAX_REQUEST + 100);
	memset(big, 'x', SHIM_SPARE_MAX_REQUEST + 99);
	memcpy(big, "BIG=", 4);
	big[SHIM_SPARE_MAX_REQUEST + 99] = '\0';
	const char *env[] = {big, NULL};
	start(e, 34, "echo len=${#BIG}", env);
	CHECK_INT(exec_fx_wait_final(e, 34, 5000).exit_code, 0);
	free(big);
	char *log = exec_fx_log(work, 34);
	char want[64];
	snprintf(want, sizeof(want), "len=%d\n", SHIM_SPARE_MAX_REQUEST + 95);
	CHECK_CONTAINS(log, want);
	free(log);
	CHECK_INT(exec_started_spare_total(e), 0);
	CHECK_INT(exec_spares(e, NULL, 0), EXEC_SPARES_DEFAULT);
	teardown(e);
}

static void wait_gone(pid_t pid)
{
	int64_t end = now_ms() + 3000;
	while (alive(pid)) {
		if (now_ms() > end)
			FAIL_AT("spare %d still alive", (int)pid);
		sleep_ms(5);
	}
}

TEST(spares_end_with_the_executor)
{
	struct exec *e = setup();
	int pids[EXEC_SPARES_MAX];
	int n = exec_spares(e, pids, EXEC_SPARES_MAX);
	char *root = exec_cgroup_root(e) ? xstrdup(exec_cgroup_root(e)) : NULL;
	exec_free(e);
	for (int i = 0; i < n; i++)
		CHECK(kill(pids[i], 0) < 0 && errno == ESRCH); /* killed and reaped */
	CHECK_INT(spare_cgroups(root), 0);
	free(root);
	rm_rf(work);
}

/* An agent killed with SIGKILL: its spares exit by themselves, a new
 * executor removes their cgroups and re-adopts the rank a spare ran. */
TEST(crash_leaves_no_spare_and_rank_is_adopted)
{
	struct exec *e = setup();
	exec_free(e);
	int fds[2];
	CHECK(pipe(fds) == 0);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		struct exec *c = NULL;
		if (exec_new(work, node, &c) != 0)
			_exit(2);
		exec_poll(c);
		start(c, 40, "sleep 0.5; exit 7", NULL);
		int pids[EXEC_SPARES_MAX + 1];
		pids[0] = exec_spares(c, pids + 1, EXEC_SPARES_MAX);
		pids[0] = (int)exec_started_spare_total(c) == 1 ? pids[0] : -1;
		if (write(fds[1], pids, sizeof(pids)) != (ssize_t)sizeof(pids))
			_exit(3);
		raise(SIGKILL);
	}
	close(fds[1]);
	int pids[EXEC_SPARES_MAX + 1];
	CHECK(read(fds[0], pids, sizeof(pids)) == (ssize_t)sizeof(pids));
	close(fds[0]);
	int st;
	CHECK(waitpid(child, &st, 0) == child);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK_INT(pids[0], EXEC_SPARES_DEFAULT - 1); /* one was used for the rank */
	for (int i = 0; i < pids[0]; i++)
		wait_gone(pids[1 + i]); /* EOF on their socket */
	CHECK_INT(exec_new(work, node, &e), 0);
	CHECK_INT(spare_cgroups(exec_cgroup_root(e)), 0);
	struct exec_status s;
	CHECK_INT(exec_find(e, 40, 0, &s), 0);
	CHECK_INT(s.state, EXEC_RUNNING);
	s = exec_fx_wait_final(e, 40, 5000);
	CHECK_INT(s.state, EXEC_EXITED);
	CHECK_INT(s.exit_code, 7);
	teardown(e);
}

static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void forget(struct exec *e, int64_t attempt)
{
	exec_ack(e, attempt, 0);
	exec_forget(e, attempt, 0);
}

/* An output directory left empty is reused for a later attempt; one with
 * files stays. */
TEST(empty_output_dir_is_reused)
{
	struct exec *e = setup();
	char path[256], spares[256];
	snprintf(spares, sizeof(spares), "%s/spare-output", work);
	start(e, 60, "true", NULL);
	start(e, 61, "echo hi > \"$ANVIL_OUTPUT_DIR/x\"", NULL);
	CHECK_INT(exec_fx_wait_final(e, 60, 5000).exit_code, 0);
	CHECK_INT(exec_fx_wait_final(e, 61, 5000).exit_code, 0);
	forget(e, 60);
	forget(e, 61);
	snprintf(path, sizeof(path), "%s/output/60", work);
	CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof(path), "%s/output/61/x", work);
	CHECK(access(path, F_OK) == 0);
	CHECK_INT(entries(spares), 1);
	start(e, 62, "ls -A \"$ANVIL_OUTPUT_DIR\"; echo end; pwd", NULL);
	CHECK_INT(exec_fx_wait_final(e, 62, 5000).exit_code, 0);
	CHECK_INT(entries(spares), 0);
	char *log = exec_fx_log(work, 62);
	char want[256];
	snprintf(want, sizeof(want), "end\n%s/output/62\n", work);
	CHECK_CONTAINS(log, want);
	CHECK(strncmp(log, "end\n", 4) == 0);
	free(log);
	/* The log is the tombstone: a forgotten rank never runs again. */
	forget(e, 62);
	const char *argv[] = {"true", NULL};
	CHECK_INT(exec_start(e, &(struct exec_spec){.attempt_id = 62, .argv = argv}), -EALREADY);
	teardown(e);
}

/* The journal rolls into new segments; an old one goes once no running
 * rank's shim writes to it, and what it knew of unforgotten ranks lives on:
 * a new executor finds every final rank's exit code and the running one. */
TEST(journal_rolls_and_keeps_unforgotten_ranks)
{
	struct exec *e = setup();
	exec_set_journal_roll(e, 200); /* about one rank's lines */
	start(e, 70, "sleep 0.6; exit 5", NULL);
	for (int64_t a = 71; a < 76; a++) {
		start(e, a, "exit 3", NULL);
		CHECK_INT(exec_fx_wait_final(e, a, 5000).exit_code, 3);
		if (a % 2)
			forget(e, a); /* 71, 73, 75 */
	}
	/* 70 still runs: its segment (the first) stays. */
	char first[256];
	snprintf(first, sizeof(first), "%s/ranks-1.jsonl", work);
	CHECK(access(first, F_OK) == 0);
	CHECK_INT(exec_fx_wait_final(e, 70, 5000).exit_code, 5);
	exec_poll(e);
	CHECK(access(first, F_OK) != 0);
	exec_free(e);
	CHECK_INT(exec_new(work, node, &e), 0);
	CHECK_INT(exec_count(e), 3);
	int64_t want[3][2] = {{70, 5}, {72, 3}, {74, 3}};
	for (int i = 0; i < 3; i++) {
		struct exec_status st;
		CHECK_INT(exec_find(e, want[i][0], 0, &st), 0);
		CHECK_INT(st.state, EXEC_EXITED);
		CHECK_INT(st.exit_code, (int)want[i][1]);
		CHECK_INT(st.job_id, want[i][0] * 10);
	}
	teardown(e);
}

TEST_MAIN()
