/* test_exec_limits.c - per-rank CPU and memory limits and GPU device
 * isolation through agent/exec.h ("Limits"): real processes in real v1
 * cgroups. Run as root on a machine with the v1 cpu, memory and devices
 * hierarchies (the build machines); where one is missing its test says so
 * and checks only that the rank still runs. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../test.h"
#include "agent/exec.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "exec_fixture.h"

static char work[64];
static char node[32];

static struct exec *setup(void)
{
	log_init("test", LOG_WARN);
	unsetenv("ANVIL_DEVICE_ISOLATION");
	snprintf(work, sizeof(work), "/tmp/anvil-limits-XXXXXX");
	CHECK(mkdtemp(work) != NULL);
	snprintf(node, sizeof(node), "limits-%d", (int)getpid());
	struct exec *e = NULL;
	CHECK_INT(exec_new(work, node, &e), 0);
	exec_poll(e); /* makes the spares */
	return e;
}

static void teardown(struct exec *e)
{
	exec_free(e);
	rm_rf(work);
}

struct limits {
	const int *minors;
	int nminors;
	int64_t cpu_millis, memory_bytes;
};

static void start(struct exec *e, int64_t attempt, const char *script, struct limits l)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	struct exec_spec s = {.attempt_id = attempt,
	                      .rank = 0,
	                      .job_id = attempt * 10,
	                      .argv = argv,
	                      .grace_ms = 2000,
	                      .gpu_minors = l.minors,
	                      .ngpu_minors = l.nminors,
	                      .cpu_millis = l.cpu_millis,
	                      .memory_bytes = l.memory_bytes};
	CHECK_INT(exec_start(e, &s), 0);
}

static char *run(struct exec *e, int64_t attempt, const char *script, struct limits l)
{
	start(e, attempt, script, l);
	struct exec_status st = exec_fx_wait_final(e, attempt, 5000);
	CHECK_INT(st.state, EXEC_EXITED);
	char *log = exec_fx_log(work, attempt);
	if (st.exit_code != 0)
		FAIL_AT("attempt %lld exited %d: %s", (long long)attempt, st.exit_code, log);
	return log;
}

/* LROOT/<attempt>-0 of a limit; NULL (and a note) without that hierarchy. */
static char *limit_dir(struct exec *e, enum exec_limit which, int64_t attempt)
{
	const char *root = exec_limit_root(e, which);
	if (!root) {
		fprintf(stderr, "no usable v1 hierarchy for limit %d: not checked\n", (int)which);
		return NULL;
	}
	return xasprintf("%s/%lld-0", root, (long long)attempt);
}

/* exec_poll removes a final rank's limits' cgroups; waits for it. */
static void check_removed(struct exec *e, const char *dir)
{
	int64_t end = now_ms() + 3000;
	while (dir && access(dir, F_OK) == 0) {
		if (now_ms() > end)
			FAIL_AT("%s still there", dir);
		exec_poll(e);
		sleep_ms(5);
	}
}

/* The path after "N:controller:" in the rank's /proc/self/cgroup lines. */
static void cgroup_of(const char *log, const char *controller, char *out, size_t n)
{
	char key[64];
	snprintf(key, sizeof(key), ":%s:", controller);
	const char *p = strstr(log, key);
	if (!p)
		FAIL_AT("no %s line in: %s", controller, log);
	p += strlen(key);
	snprintf(out, n, "%.*s", (int)strcspn(p, "\n"), p);
}

TEST(memory_limit_in_the_ranks_own_cgroup)
{
	struct exec *e = setup();
	char *dir = limit_dir(e, EXEC_LIMIT_MEMORY, 1);
	char script[1024];
	snprintf(script, sizeof(script),
	         "grep -E '^[0-9]+:memory:' /proc/self/cgroup; "
	         "p=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); "
	         "cat /sys/fs/cgroup/memory$p/memory.limit_in_bytes 2>/dev/null; echo end");
	int64_t t0 = now_ms();
	char *log = run(e, 1, script, (struct limits){.memory_bytes = 64 << 20});
	fprintf(stderr, "a rank with a memory limit ran in %lld ms\n", (long long)(now_ms() - t0));
	CHECK_INT(exec_started_spare_total(e), 1); /* spares take ranks with limits too */
	if (dir) {
		char path[512];
		cgroup_of(log, "memory", path, sizeof(path));
		CHECK_CONTAINS(path, "/anvil/");
		CHECK_CONTAINS(dir, path); /* LROOT/1-0 is the rank's memory cgroup */
		CHECK_CONTAINS(log, "\n67108864\nend\n");
		struct exec_status st;
		CHECK_INT(exec_find(e, 1, 0, &st), 0);
		CHECK_INT(st.oom_kills, 0); /* within its limit */
		check_removed(e, dir);
	}
	free(log);
	free(dir);
	teardown(e);
}

/* The limit holds: a rank that needs more is OOM-killed. */
TEST(memory_limit_is_enforced)
{
	struct exec *e = setup();
	if (!exec_limit_root(e, EXEC_LIMIT_MEMORY)) {
		teardown(e);
		return;
	}
	/* The shell keeps 64 MB in a variable; the limit is 16 MiB. */
	start(e, 11, "x=$(head -c 64000000 /dev/zero | tr '\\0' a); echo survived",
	      (struct limits){.memory_bytes = 16 << 20});
	struct exec_status st;
	int64_t end = now_ms() + 10000;
	do {
		exec_poll(e);
		CHECK_INT(exec_find(e, 11, 0, &st), 0);
		if (now_ms() > end)
			FAIL_AT("still running");
		sleep_ms(10);
	} while (st.state == EXEC_RUNNING);
	CHECK_INT(st.signal, SIGKILL);
	/* read from the rank's memory cgroup before it was removed */
	CHECK(st.oom_kills >= 1);
	char *path = exec_log_path(work, 11, 0, EXEC_STDOUT);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file(path, 1 << 20, &b), 0);
	CHECK(strstr(b.data, "survived") == NULL);
	buf_cleanup(&b);
	free(path);
	teardown(e);
}

TEST(cpu_quota_on_the_direct_path)
{
	struct exec *e = setup();
	exec_set_spares(e, 0);
	exec_poll(e);
	char *dir = limit_dir(e, EXEC_LIMIT_CPU, 2);
	char script[1024];
	snprintf(script, sizeof(script),
	         "grep -E '^[0-9]+:cpu:' /proc/self/cgroup; "
	         "p=$(sed -n 's/^[0-9]*:cpu://p' /proc/self/cgroup); "
	         "echo quota=$(cat /sys/fs/cgroup/cpu$p/cpu.cfs_quota_us) "
	         "period=$(cat /sys/fs/cgroup/cpu$p/cpu.cfs_period_us)");
	char *log = run(e, 2, script, (struct limits){.cpu_millis = 1500});
	CHECK_INT(exec_started_spare_total(e), 0);
	if (dir) {
		char path[512];
		cgroup_of(log, "cpu", path, sizeof(path));
		CHECK_CONTAINS(dir, path);
		CHECK_CONTAINS(log, "quota=150000 period=100000");
		check_removed(e, dir);
	}
	free(log);
	free(dir);
	teardown(e);
}

/* Without limits or isolation a rank stays in the agent's own cpu, memory
 * and devices cgroups: no cgroup work on the fast path. */
TEST(rank_without_limits_gets_no_limit_cgroups)
{
	struct exec *e = setup();
	CHECK_INT(exec_device_isolation(e), access("/dev/nvidiactl", F_OK) == 0);
	exec_set_device_isolation(e, 0);
	char *log = run(e, 3, "cat /proc/self/cgroup", (struct limits){0});
	struct buf mine;
	buf_init(&mine);
	CHECK_INT(read_file("/proc/self/cgroup", 1 << 16, &mine), 0);
	static const char *const ctl[] = {"cpu", "memory", "devices"};
	for (int i = 0; i < 3; i++) {
		char theirs[512], ours[512];
		cgroup_of(log, ctl[i], theirs, sizeof(theirs));
		cgroup_of(mine.data, ctl[i], ours, sizeof(ours));
		CHECK_STR(theirs, ours);
		char *dir = limit_dir(e, (enum exec_limit)i, 3);
		CHECK(!dir || access(dir, F_OK) != 0);
		free(dir);
	}
	buf_cleanup(&mine);
	free(log);
	teardown(e);
}

/* The shell's open of each node, as the rank sees it. */
static char *open_nodes(struct exec *e, int64_t attempt, const char *dev, struct limits l)
{
	char script[1024];
	snprintf(script, sizeof(script),
	         "for n in 0 1 255; do (exec 3<>%s/nv$n) 2>&1 && echo \"nv$n: opened\"; "
	         "echo \"nv$n: done\"; done",
	         dev);
	return run(e, attempt, script, l);
}

static void check_open(const char *log, int minor, int err)
{
	char line[128];
	snprintf(line, sizeof(line), "nv%d: %s\n", minor, strerror(err));
	CHECK_CONTAINS(log, line);
}

TEST(device_isolation_denies_other_gpus)
{
	struct exec *e = setup();
	char *dev = exec_fx_gpu_nodes(work);
	/* Without isolation both GPUs are open to a rank (no driver: ENXIO). */
	exec_set_device_isolation(e, 0);
	char *log = open_nodes(e, 4, dev, (struct limits){0});
	check_open(log, 0, ENXIO);
	check_open(log, 1, ENXIO);
	free(log);
	exec_set_device_isolation(e, 1);
	char *dir = limit_dir(e, EXEC_LIMIT_DEVICES, 5);
	if (!dir) { /* no devices hierarchy: nothing is isolated */
		free(dev);
		teardown(e);
		return;
	}
	/* GPU 0's rank: its own GPU and nvidiactl, not GPU 1. */
	const int mine[] = {0};
	log = open_nodes(e, 5, dev, (struct limits){.minors = mine, .nminors = 1});
	check_open(log, 0, ENXIO);
	check_open(log, 1, EPERM);
	check_open(log, 255, ENXIO);
	free(log);
	check_removed(e, dir);
	free(dir);
	/* A rank without GPUs opens none; with minors unknown, it is not isolated. */
	log = open_nodes(e, 6, dev, (struct limits){0});
	check_open(log, 0, EPERM);
	check_open(log, 1, EPERM);
	check_open(log, 255, ENXIO);
	free(log);
	log = open_nodes(e, 7, dev, (struct limits){.nminors = -1});
	check_open(log, 1, ENXIO);
	free(log);
	dir = limit_dir(e, EXEC_LIMIT_DEVICES, 7);
	CHECK(access(dir, F_OK) != 0);
	free(dir);
	free(dev);
	teardown(e);
}

TEST(device_isolation_follows_the_environment)
{
	setenv("ANVIL_DEVICE_ISOLATION", "1", 1);
	struct exec *e = NULL;
	log_init("test", LOG_WARN);
	snprintf(work, sizeof(work), "/tmp/anvil-limits-XXXXXX");
	CHECK(mkdtemp(work) != NULL);
	CHECK_INT(exec_new(work, "env-on", &e), 0);
	CHECK_INT(exec_device_isolation(e), 1);
	exec_free(e);
	setenv("ANVIL_DEVICE_ISOLATION", "0", 1);
	CHECK_INT(exec_new(work, "env-off", &e), 0);
	CHECK_INT(exec_device_isolation(e), 0);
	teardown(e);
}

/* Everything at once; stopped while its children run: the whole tree dies
 * and every limit's cgroup goes. A shim that ran it is reused for a rank
 * without limits, which then runs in none of them. */
TEST(stopped_rank_leaves_no_limit_cgroups_and_its_shim_is_reused)
{
	struct exec *e = setup();
	exec_set_spares(e, 1);
	exec_set_device_isolation(e, 1);
	exec_poll(e);
	char *dirs[EXEC_LIMITS];
	for (int i = 0; i < EXEC_LIMITS; i++)
		dirs[i] = limit_dir(e, (enum exec_limit)i, 8);
	char pidfile[128], script[512];
	snprintf(pidfile, sizeof(pidfile), "%s/pids", work);
	snprintf(script, sizeof(script), "setsid sleep 100 & echo $! > %s; wait", pidfile);
	const int mine[] = {3};
	start(e, 8, script,
	      (struct limits){
	              .minors = mine, .nminors = 1, .cpu_millis = 250, .memory_bytes = 256 << 20});
	for (int i = 0; i < EXEC_LIMITS; i++)
		CHECK(!dirs[i] || access(dirs[i], F_OK) == 0);
	int64_t end = now_ms() + 5000;
	struct buf b;
	buf_init(&b);
	while (read_file(pidfile, 64, &b) != 0 || b.len == 0) {
		if (now_ms() > end)
			FAIL_AT("no pid in %s", pidfile);
		sleep_ms(10);
	}
	pid_t child = (pid_t)strtol(b.data, NULL, 10);
	buf_cleanup(&b);
	CHECK_INT(exec_stop(e, 8, 0, 1000), 0);
	struct exec_status st;
	end = now_ms() + 5000;
	do {
		exec_poll(e);
		CHECK_INT(exec_find(e, 8, 0, &st), 0);
		if (now_ms() > end)
			FAIL_AT("still running");
		sleep_ms(5);
	} while (st.state == EXEC_RUNNING);
	for (int i = 0; i < EXEC_LIMITS; i++) {
		check_removed(e, dirs[i]);
		free(dirs[i]);
	}
	end = now_ms() + 3000;
	while (kill(child, 0) == 0 && now_ms() < end)
		sleep_ms(5);
	if (exec_uses_cgroups(e))
		CHECK(kill(child, 0) < 0);
	else
		kill(child, SIGKILL);
	exec_set_device_isolation(e, 0);
	char *log = run(e, 9, "cat /proc/self/cgroup", (struct limits){0});
	CHECK(exec_reused_total(e) >= 1);
	CHECK_INT(exec_started_spare_total(e), 2);
	char path[512];
	cgroup_of(log, "memory", path, sizeof(path));
	CHECK(strstr(path, "/anvil/") == NULL);
	free(log);
	teardown(e);
}

/* A new executor over the same work dir finds a running rank's limits'
 * cgroups by name and removes them when the rank ends. */
TEST(adopted_rank_limits_are_removed)
{
	struct exec *e = setup();
	char *dir = limit_dir(e, EXEC_LIMIT_MEMORY, 10);
	start(e, 10, "sleep 0.3", (struct limits){.memory_bytes = 32 << 20});
	exec_free(e);
	CHECK(!dir || access(dir, F_OK) == 0);
	CHECK_INT(exec_new(work, node, &e), 0);
	struct exec_status st;
	int64_t end = now_ms() + 5000;
	do {
		exec_poll(e);
		CHECK_INT(exec_find(e, 10, 0, &st), 0);
		if (now_ms() > end)
			FAIL_AT("still running");
		sleep_ms(10);
	} while (st.state == EXEC_RUNNING);
	CHECK_INT(st.exit_code, 0);
	check_removed(e, dir);
	free(dir);
	teardown(e);
}

TEST_MAIN()
