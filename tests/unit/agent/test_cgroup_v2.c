/* test_cgroup_v2.c - the executor on cgroup v2 (agent/cgroup.h): real
 * processes in real v2 cgroups. The build machines are hybrid: cpu, memory
 * and devices are bound to v1 hierarchies and the v2 one
 * (/sys/fs/cgroup/unified) holds only hugetlb, so here v2 holds the ranks
 * (ANVIL_CGROUP=v2), GPU isolation is an eBPF program on the rank's v2
 * cgroup, CPU and memory limits fall back to the v1 hierarchies, and the
 * delegation of a controller down to the rank cgroups is shown with
 * hugetlb, the one v2 has. Without a cgroup2 mount the tests say so and
 * check nothing. Run as root. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/cgroup.h"
#include "agent/exec.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "exec_fixture.h"

static char work[64];

/* The cgroup2 mount point, or 0 when there is none. */
static int v2_mount(char *out, size_t n)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	if (!f)
		return 0;
	char line[1024], dir[PATH_MAX], type[64];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %4095s %63s", dir, type) == 2 &&
		    strcmp(type, "cgroup2") == 0) {
			snprintf(out, n, "%s", dir);
			found = 1;
		}
	fclose(f);
	return found;
}

static int has_line_word(const char *path, const char *word)
{
	struct buf b;
	buf_init(&b);
	int found = read_file(path, 1 << 16, &b) == 0 && strstr(b.data, word) != NULL;
	buf_cleanup(&b);
	return found;
}

/* In a child that sits in a non-root v2 cgroup of its own (as an agent
 * under systemd would): ROOT is made below it, a controller is enabled
 * from there down to ROOT, and the child leaves for a leaf first (no
 * internal processes). A controller v2 was not given is -ENOTSUP. */
TEST(delegate_moves_the_agent_into_a_leaf)
{
	char mnt[PATH_MAX];
	if (!v2_mount(mnt, sizeof(mnt))) {
		fprintf(stderr, "no cgroup2 mount: not checked\n");
		return;
	}
	/* What the delegator (systemd) does: give TOP hugetlb from the root
	 * cgroup, which may hold processes. Put back as it was at the end. */
	char *rootctl = xasprintf("%s/cgroup.subtree_control", mnt);
	int had = has_line_word(rootctl, "hugetlb");
	if (!had && cgroup_write(mnt, "cgroup.subtree_control", "+hugetlb") != 0) {
		fprintf(stderr, "hugetlb cannot be enabled in %s: not checked\n", mnt);
		free(rootctl);
		return;
	}
	char *top = xasprintf("%s/anvil-test-%d", mnt, (int)getpid());
	CHECK_INT(mkdir(top, 0755), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char me[32];
		snprintf(me, sizeof(me), "%d", (int)getpid());
		char *root = NULL;
		int bad = cgroup_write(top, "cgroup.procs", me) != 0;
		bad = bad * 10 + (cgroup_setup("n/1", CGROUP_V2, &root) != 0);
		bad = bad * 10 + (!root || !cgroup_is_v2(root));
		bad = bad * 10 + (cgroup_v2_delegate(root, "hugetlb") != 0);
		bad = bad * 10 + (cgroup_v2_delegate(root, "hugetlb") != 0); /* from the leaf */
		bad = bad * 10 + (cgroup_v2_delegate(root, "no-such-controller") != -ENOTSUP);
		bad = bad * 10 + (cgroup_v2_delegate("/tmp/anvil/x", "hugetlb") != -EXDEV);
		free(root);
		if (bad)
			fprintf(stderr, "checks failed: %07d (one digit each)\n", bad);
		_exit(bad ? 1 : 0);
	}
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), 0);
	/* The child left for TOP/anvil-agent-<pid>; hugetlb is on from TOP
	 * down to ROOT (TOP/anvil/n_1: '/' in a node name is no level). */
	char *leaf = xasprintf("%s/anvil-agent-%d", top, (int)pid);
	char *anvil = xasprintf("%s/anvil", top);
	char *root = xasprintf("%s/anvil/n_1", top);
	CHECK(access(leaf, F_OK) == 0);
	const char *dirs[] = {top, anvil, root};
	for (int i = 0; i < 3; i++) {
		char *f = xasprintf("%s/cgroup.subtree_control", dirs[i]);
		CHECK(has_line_word(f, "hugetlb"));
		free(f);
	}
	CHECK_INT(rmdir(root), 0);
	CHECK_INT(rmdir(anvil), 0);
	CHECK_INT(rmdir(leaf), 0);
	CHECK_INT(rmdir(top), 0);
	if (!had)
		CHECK_INT(cgroup_write(mnt, "cgroup.subtree_control", "-hugetlb"), 0);
	free(rootctl);
	free(root);
	free(anvil);
	free(leaf);
	free(top);
}

static struct exec *setup(const char *node)
{
	log_init("test", LOG_WARN);
	setenv("ANVIL_CGROUP", "v2", 1);
	setenv("ANVIL_DEVICE_ISOLATION", "1", 1);
	snprintf(work, sizeof(work), "/tmp/anvil-v2-XXXXXX");
	CHECK(mkdtemp(work) != NULL);
	struct exec *e = NULL;
	CHECK_INT(exec_new(work, node, &e), 0);
	unsetenv("ANVIL_CGROUP");
	unsetenv("ANVIL_DEVICE_ISOLATION");
	exec_poll(e); /* makes the spares */
	return e;
}

static void teardown(struct exec *e)
{
	exec_free(e);
	rm_rf(work);
}

static void start(struct exec *e, int64_t attempt, const char *script, const int *minors,
                  int nminors, int64_t memory_bytes)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	struct exec_spec s = {.attempt_id = attempt,
	                      .job_id = attempt * 10,
	                      .argv = argv,
	                      .grace_ms = 2000,
	                      .gpu_minors = minors,
	                      .ngpu_minors = nminors,
	                      .memory_bytes = memory_bytes};
	CHECK_INT(exec_start(e, &s), 0);
}

/* A rank sits in its own v2 cgroup under ROOT; GPU isolation is the eBPF
 * program there: its own GPU and nvidiactl open (no driver: ENXIO),
 * another GPU EPERM. Its memory limit comes from the v1 memory hierarchy
 * (v2 was not given memory on this host). */
TEST(rank_in_its_v2_cgroup_is_isolated_and_limited)
{
	char mnt[PATH_MAX];
	if (!v2_mount(mnt, sizeof(mnt))) {
		fprintf(stderr, "no cgroup2 mount: not checked\n");
		return;
	}
	char node[32];
	snprintf(node, sizeof(node), "v2-%d", (int)getpid());
	struct exec *e = setup(node);
	const char *root = exec_cgroup_root(e);
	CHECK(root != NULL);
	CHECK(cgroup_is_v2(root));
	char *dev = exec_fx_gpu_nodes(work);
	char script[1024];
	snprintf(script, sizeof(script),
	         "grep '^0::' /proc/self/cgroup; grep -E '^[0-9]+:memory:' /proc/self/cgroup; "
	         "for n in 0 1 255; do (exec 3<>%s/nv$n) 2>&1 && echo \"nv$n: opened\"; "
	         "echo \"nv$n: done\"; done",
	         dev);
	const int mine[] = {0};
	start(e, 1, script, mine, 1, 64 << 20);
	struct exec_status st = exec_fx_wait_final(e, 1, 10000);
	CHECK_INT(st.state, EXEC_EXITED);
	char *log = exec_fx_log(work, 1);
	char want[PATH_MAX + 64];
	snprintf(want, sizeof(want), "0::%s/1-0\n", root + strlen(mnt));
	CHECK_CONTAINS(log, want);
	/* the memory limit's own v1 cgroup, LROOT/1-0 */
	const char *mem = strstr(log, ":memory:");
	CHECK(mem != NULL);
	char memline[PATH_MAX];
	snprintf(memline, sizeof(memline), "%.*s", (int)strcspn(mem, "\n"), mem);
	CHECK_CONTAINS(memline, "/anvil/");
	CHECK_CONTAINS(memline, "/1-0");
	char line[128];
	snprintf(line, sizeof(line), "nv0: %s\n", strerror(ENXIO));
	CHECK_CONTAINS(log, line);
	snprintf(line, sizeof(line), "nv1: %s\n", strerror(EPERM));
	CHECK_CONTAINS(log, line);
	snprintf(line, sizeof(line), "nv255: %s\n", strerror(ENXIO));
	CHECK_CONTAINS(log, line);
	free(log);
	/* The cgroup that carried the program is not a spare's again: gone. */
	char *dir = xasprintf("%s/1-0", root);
	int64_t end = now_ms() + 3000;
	while (access(dir, F_OK) == 0 && now_ms() < end) {
		exec_poll(e);
		sleep_ms(5);
	}
	CHECK(access(dir, F_OK) != 0);
	free(dir);
	free(dev);
	teardown(e);
}

/* Stopping a rank stops everything in its v2 cgroup, a child that left the
 * process group (setsid) too. */
TEST(stop_reaches_what_left_the_process_group)
{
	char mnt[PATH_MAX];
	if (!v2_mount(mnt, sizeof(mnt))) {
		fprintf(stderr, "no cgroup2 mount: not checked\n");
		return;
	}
	char node[32];
	snprintf(node, sizeof(node), "v2s-%d", (int)getpid());
	struct exec *e = setup(node);
	char pidfile[128];
	snprintf(pidfile, sizeof(pidfile), "%s/escaped.pid", work);
	char script[512];
	snprintf(script, sizeof(script), "setsid sh -c 'echo $$ > %s; exec sleep 100' & sleep 100",
	         pidfile);
	start(e, 2, script, NULL, -1, 0);
	struct buf b;
	buf_init(&b);
	int64_t end = now_ms() + 5000;
	while (read_file(pidfile, 64, &b) != 0 || b.len == 0) {
		if (now_ms() > end)
			FAIL_AT("the escaped child never wrote its pid");
		exec_poll(e);
		sleep_ms(5);
	}
	pid_t escaped = (pid_t)strtol(b.data, NULL, 10);
	buf_cleanup(&b);
	CHECK(escaped > 0 && kill(escaped, 0) == 0);
	CHECK_INT(exec_stop(e, 2, 0, -1), 0);
	struct exec_status st = exec_fx_wait_final(e, 2, 10000);
	CHECK_INT(st.state, EXEC_EXITED);
	end = now_ms() + 5000;
	while (kill(escaped, 0) == 0) {
		if (now_ms() > end)
			FAIL_AT("pid %d outlived its rank", (int)escaped);
		exec_poll(e);
		sleep_ms(5);
	}
	teardown(e);
}

/* A rank whose command ends while a child it left (setsid, deaf to
 * SIGTERM) runs on: the child is killed (on v2 by cgroup.kill once the
 * shim is gone) and the rank's cgroup removed. */
TEST(leftovers_of_an_ended_rank_are_killed)
{
	char mnt[PATH_MAX];
	if (!v2_mount(mnt, sizeof(mnt))) {
		fprintf(stderr, "no cgroup2 mount: not checked\n");
		return;
	}
	char node[32];
	snprintf(node, sizeof(node), "v2k-%d", (int)getpid());
	struct exec *e = setup(node);
	exec_set_spares(e, 0);
	char pidfile[128];
	snprintf(pidfile, sizeof(pidfile), "%s/left.pid", work);
	char script[1024];
	snprintf(script, sizeof(script),
	         "setsid sh -c 'trap \"\" TERM; echo $$ > %s.tmp; mv %s.tmp %s; "
	         "while :; do sleep 1; done' & "
	         "while [ ! -s %s ]; do sleep 0.01; done",
	         pidfile, pidfile, pidfile, pidfile);
	start(e, 3, script, NULL, -1, 0);
	struct exec_status st = exec_fx_wait_final(e, 3, 10000);
	CHECK_INT(st.state, EXEC_EXITED);
	CHECK_INT(st.exit_code, 0);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file(pidfile, 64, &b), 0);
	pid_t left = (pid_t)strtol(b.data, NULL, 10);
	buf_cleanup(&b);
	CHECK(left > 0);
	char *dir = xasprintf("%s/3-0", exec_cgroup_root(e));
	int64_t end = now_ms() + 5000;
	while (kill(left, 0) == 0 || access(dir, F_OK) == 0) {
		if (now_ms() > end)
			FAIL_AT("pid %d or %s outlived the rank", (int)left, dir);
		exec_poll(e);
		sleep_ms(5);
	}
	free(dir);
	teardown(e);
}

TEST_MAIN()
