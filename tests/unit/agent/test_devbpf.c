/* test_devbpf.c - GPU device isolation on cgroup v2 (agent/devbpf.h): a
 * real eBPF program on a real v2 cgroup, and real opens, by a process in
 * that cgroup, of fake GPU nodes (char 195:M made with mknod, no driver
 * behind them). Opening a node the cgroup allows fails with the driver's
 * error (ENXIO or ENODEV without one) or succeeds; one it denies fails
 * with EPERM. Run as root; where no cgroup2 hierarchy is mounted, or it is
 * not writable, the tests that need one say so and pass. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/devbpf.h"
#include "base/log.h"
#include "base/util.h"

#define NODES_MAX 8

struct node {
	mode_t type; /* S_IFCHR or S_IFBLK */
	unsigned major, minor;
};

static char work[64];              /* the nodes, under /tmp */
static char cg[PATH_MAX * 2 + 64]; /* the test's own v2 cgroup */

/* Field 2 (the mount point) of the first /proc/self/mounts line of type. */
static int find_mount(const char *type, char *out, size_t n)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	CHECK(f != NULL);
	char line[1024], dir[PATH_MAX], fstype[64];
	int found = 0;
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %4095s %63s", dir, fstype) == 2 && strcmp(fstype, type) == 0)
			found = snprintf(out, n, "%s", dir) > 0;
	fclose(f);
	return found;
}

/* This process's v2 cgroup ("0::/path" in /proc/self/cgroup), "" for "/". */
static void find_self(char *out, size_t n)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	CHECK(f != NULL);
	char line[PATH_MAX + 16];
	out[0] = '\0';
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(out, n, "%.*s", PATH_MAX - 1,
			         strcmp(line + 3, "/") == 0 ? "" : line + 3);
		}
	fclose(f);
}

/* The test's cgroup goes with it, even when a CHECK fails. No process is
 * left in it: each child that joined was reaped. */
static void cleanup(void)
{
	for (int i = 0; cg[0] && i < 100; i++) {
		if (rmdir(cg) == 0 || errno != EBUSY)
			cg[0] = '\0';
		else
			sleep_ms(10);
	}
	if (work[0])
		rm_rf(work);
}

/* Creates the test's v2 cgroup (cg) and work dir: 1, or 0 with a notice
 * where this machine has no writable cgroup2 hierarchy. */
static int setup(void)
{
	log_init("test", LOG_WARN);
	char mnt[PATH_MAX], self[PATH_MAX];
	if (!find_mount("cgroup2", mnt, sizeof(mnt))) {
		fprintf(stderr, "no cgroup2 hierarchy mounted: not checked\n");
		return 0;
	}
	find_self(self, sizeof(self));
	snprintf(cg, sizeof(cg), "%s%s/anvil-devbpf-%d", mnt, self, (int)getpid());
	if (mkdir(cg, 0755) != 0) {
		int err = errno;
		cg[0] = '\0';
		if (err == EACCES || err == EPERM || err == EROFS) {
			fprintf(stderr, "cgroup2 at %s not writable (%s): not checked\n", mnt,
			        strerror(err));
			return 0;
		}
		FAIL_AT("mkdir in %s%s: %s", mnt, self, strerror(err));
	}
	atexit(cleanup);
	snprintf(work, sizeof(work), "/tmp/anvil-devbpf-XXXXXX");
	CHECK(mkdtemp(work) != NULL);
	fprintf(stderr, "cgroup %s\n", cg);
	return 1;
}

static void teardown(void)
{
	CHECK_INT(rmdir(cg), 0); /* the attached programs go with it */
	cg[0] = '\0';
	rm_rf(work);
	work[0] = '\0';
}

static void node_path(const struct node *nd, char *out, size_t n)
{
	snprintf(out, n, "%s/%c%u_%u", work, nd->type == S_IFBLK ? 'b' : 'c', nd->major, nd->minor);
}

static void make_nodes(const struct node *nodes, int n)
{
	for (int i = 0; i < n; i++) {
		char p[128];
		node_path(&nodes[i], p, sizeof(p));
		if (mknod(p, nodes[i].type | 0666, makedev(nodes[i].major, nodes[i].minor)) != 0)
			FAIL_AT("mknod %s: %s (the test runs as root)", p, strerror(errno));
	}
}

/* A child joins the test's cgroup and opens each node for reading and
 * writing; errs[i] is the errno of the open (0: it opened). */
static void open_in_cgroup(const struct node *nodes, int n, int *errs)
{
	CHECK(n <= NODES_MAX);
	int fds[2];
	CHECK_INT(pipe(fds), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int out[NODES_MAX + 1] = {0}; /* out[0]: the join's errno */
		char procs[sizeof(cg) + 16];
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg);
		int fd = open(procs, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1)
			out[0] = errno;
		for (int i = 0; i < n && !out[0]; i++) {
			char p[128];
			node_path(&nodes[i], p, sizeof(p));
			int dev = open(p, O_RDWR | O_CLOEXEC);
			out[i + 1] = dev < 0 ? errno : 0;
			if (dev >= 0)
				close(dev);
		}
		_exit(write(fds[1], out, sizeof(out)) == (ssize_t)sizeof(out) ? 0 : 1);
	}
	close(fds[1]);
	int in[NODES_MAX + 1];
	ssize_t got = read(fds[0], in, sizeof(in));
	close(fds[0]);
	int st = 0;
	CHECK_INT(waitpid(pid, &st, 0), pid);
	CHECK_INT(got, sizeof(in));
	if (in[0])
		FAIL_AT("joining %s: %s", cg, strerror(in[0]));
	for (int i = 0; i < n; i++)
		errs[i] = in[i + 1];
}

/* Checks one open: want is EPERM for a denied node, else the errno the
 * same node gave before any program was attached. */
static void check_open(const struct node *nd, int got, int want)
{
	if (got != want)
		FAIL_AT("open %c %u:%u: got \"%s\" (%d), want \"%s\" (%d)",
		        nd->type == S_IFBLK ? 'b' : 'c', nd->major, nd->minor, strerror(got), got,
		        strerror(want), want);
}

/* What the nodes give in the cgroup before a program is attached: none may
 * be EPERM already (a v1 devices cgroup of this process, say), or the
 * checks after could not tell our program's denial from it. */
static void baseline(const struct node *nodes, int n, int *errs)
{
	open_in_cgroup(nodes, n, errs);
	for (int i = 0; i < n; i++)
		if (errs[i] == EPERM)
			FAIL_AT("%c %u:%u is denied without a program: cannot test",
			        nodes[i].type == S_IFBLK ? 'b' : 'c', nodes[i].major,
			        nodes[i].minor);
}

/* GPUs 0 and 1, nvidia-modeset, nvidiactl, /dev/null's numbers and a block
 * device with the NVIDIA major (denied only if the type check is broken). */
static const struct node basic[] = {{S_IFCHR, 195, 0},   {S_IFCHR, 195, 1}, {S_IFCHR, 195, 254},
                                    {S_IFCHR, 195, 255}, {S_IFCHR, 1, 3},   {S_IFBLK, 195, 0}};
#define NBASIC ((int)(sizeof(basic) / sizeof(basic[0])))

TEST(only_the_ranks_gpus_open)
{
	if (!setup())
		return;
	make_nodes(basic, NBASIC);
	int before[NBASIC], after[NBASIC];
	baseline(basic, NBASIC, before);
	CHECK_INT(before[4], 0); /* /dev/null's numbers open */
	const int mine[] = {1};
	CHECK_INT(devbpf_limit_gpus(cg, mine, 1), 0);
	open_in_cgroup(basic, NBASIC, after);
	check_open(&basic[0], after[0], EPERM);
	for (int i = 1; i < NBASIC; i++)
		check_open(&basic[i], after[i], before[i]);
	/* Only the cgroup is limited: this process, outside it, is not. */
	char p[128];
	node_path(&basic[0], p, sizeof(p));
	int fd = open(p, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0 || errno != EPERM);
	if (fd >= 0)
		close(fd);
	teardown();
}

TEST(no_minors_denies_every_gpu)
{
	if (!setup())
		return;
	make_nodes(basic, NBASIC);
	int before[NBASIC], after[NBASIC];
	baseline(basic, NBASIC, before);
	CHECK_INT(devbpf_limit_gpus(cg, NULL, 0), 0);
	open_in_cgroup(basic, NBASIC, after);
	check_open(&basic[0], after[0], EPERM);
	check_open(&basic[1], after[1], EPERM);
	for (int i = 2; i < NBASIC; i++)
		check_open(&basic[i], after[i], before[i]);
	teardown();
}

/* The longest program: 64 compares, the jumps of the first reach past all. */
TEST(sixty_four_minors)
{
	if (!setup())
		return;
	static const struct node gpus[] = {{S_IFCHR, 195, 9},  {S_IFCHR, 195, 10},
	                                   {S_IFCHR, 195, 41}, {S_IFCHR, 195, 73},
	                                   {S_IFCHR, 195, 74}, {S_IFCHR, 195, 253}};
	make_nodes(gpus, 6);
	int before[6], after[6];
	baseline(gpus, 6, before);
	int mine[DEVBPF_MAX_MINORS];
	for (int i = 0; i < DEVBPF_MAX_MINORS; i++)
		mine[i] = 73 - i; /* 73 down to 10 */
	CHECK_INT(devbpf_limit_gpus(cg, mine, DEVBPF_MAX_MINORS), 0);
	open_in_cgroup(gpus, 6, after);
	check_open(&gpus[0], after[0], EPERM);
	check_open(&gpus[1], after[1], before[1]);
	check_open(&gpus[2], after[2], before[2]);
	check_open(&gpus[3], after[3], before[3]);
	check_open(&gpus[4], after[4], EPERM);
	check_open(&gpus[5], after[5], EPERM);
	teardown();
}

/* A second program on the same cgroup adds to the first: both must allow. */
TEST(a_second_call_only_narrows)
{
	if (!setup())
		return;
	make_nodes(basic, 2);
	int before[2], after[2];
	baseline(basic, 2, before);
	const int both[] = {0, 1}, one[] = {1}, other[] = {0};
	CHECK_INT(devbpf_limit_gpus(cg, both, 2), 0);
	open_in_cgroup(basic, 2, after);
	check_open(&basic[0], after[0], before[0]);
	check_open(&basic[1], after[1], before[1]);
	CHECK_INT(devbpf_limit_gpus(cg, one, 1), 0);
	open_in_cgroup(basic, 2, after);
	check_open(&basic[0], after[0], EPERM);
	check_open(&basic[1], after[1], before[1]);
	CHECK_INT(devbpf_limit_gpus(cg, other, 1), 0); /* cannot open GPU 0 again */
	open_in_cgroup(basic, 2, after);
	check_open(&basic[0], after[0], EPERM);
	check_open(&basic[1], after[1], EPERM);
	teardown();
}

TEST(bad_arguments)
{
	log_init("test", LOG_WARN);
	int many[DEVBPF_MAX_MINORS + 1] = {0};
	const int negative[] = {0, -1};
	CHECK_INT(devbpf_limit_gpus("/tmp", many, DEVBPF_MAX_MINORS + 1), -EINVAL);
	CHECK_INT(devbpf_limit_gpus("/tmp", many, -1), -EINVAL);
	CHECK_INT(devbpf_limit_gpus("/tmp", negative, 2), -EINVAL);
	CHECK_INT(devbpf_limit_gpus("/tmp", NULL, 1), -EINVAL);
	CHECK_INT(devbpf_limit_gpus(NULL, many, 1), -EINVAL);
	CHECK_INT(devbpf_limit_gpus("/nonexistent/anvil-devbpf", many, 1), -ENOENT);
	CHECK_INT(devbpf_limit_gpus("/proc/self/status", many, 1), -ENOTDIR);
	/* Directories that are not v2 cgroups: the kernel refuses the attach. */
	char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/anvil-devbpf-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	int rc = devbpf_limit_gpus(dir, many, 1);
	rmdir(dir);
	CHECK_INT(rc, -EBADF);
	char v1[PATH_MAX];
	if (find_mount("cgroup", v1, sizeof(v1)))
		CHECK_INT(devbpf_limit_gpus(v1, many, 1), -EBADF);
}

TEST_MAIN()
