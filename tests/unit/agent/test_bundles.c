/* agent/bundles.h: a sweep removes a bundle unused for keep_ms, keeps one
 * used since, one a process works in, one whose lock is held, and every
 * bundle when keep_ms is 0; leftovers (a killed unpack's scratch, a
 * stopped sweep's tree, a lock file without its bundle) go; a waiter on a
 * lock file the sweep unlinked locks the new file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "agent/bundles.h"
#include "base/util.h"

#define HEX(c)                                                                                     \
	c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c  \
	        c c c c c c c c c c c c c c c c c c c
#define OLD    HEX("a")
#define FRESH  HEX("b")
#define WORKED HEX("c")
#define LOCKED HEX("d")
#define GONE   HEX("e")

static char work[256], dir[300], procs[300];

static void setup(void)
{
	snprintf(work, sizeof(work), "/tmp/anvil-test-bundles-%d", (int)getpid());
	rm_rf(work);
	snprintf(dir, sizeof(dir), "%s/bundles", work);
	snprintf(procs, sizeof(procs), "%s/proc", work);
	CHECK_INT(mkdir_p(dir, 0755), 0);
	CHECK_INT(mkdir_p(procs, 0755), 0);
}

static char *path(const char *name)
{
	static char p[4][400];
	static int k;
	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", dir, name);
	return p[k];
}

/* A bundle tree with a file in it, last used ago_s seconds before now. */
static void bundle(const char *name, time_t now, int ago_s)
{
	char f[500];
	CHECK_INT(mkdir_p(path(name), 0755), 0);
	snprintf(f, sizeof(f), "%s/train.py", path(name));
	FILE *fp = fopen(f, "w");
	CHECK(fp != NULL);
	fputs("print(1)\n", fp);
	fclose(fp);
	struct timespec t[2] = {{now - ago_s, 0}, {now - ago_s, 0}};
	CHECK_INT(utimensat(AT_FDCWD, path(name), t, 0), 0);
}

static int there(const char *name)
{
	struct stat sb;
	return lstat(path(name), &sb) == 0;
}

TEST(a_sweep_removes_only_what_nothing_uses)
{
	setup();
	time_t now = time(NULL);
	int64_t keep = 3600 * 1000;
	bundle(OLD, now, 7200);
	bundle(FRESH, now, 60);
	bundle(WORKED, now, 7200);
	bundle(LOCKED, now, 7200);
	/* a process (pid 4242 in the test's own proc tree) works in WORKED */
	char link[400], target[500];
	snprintf(link, sizeof(link), "%s/4242", procs);
	CHECK_INT(mkdir_p(link, 0755), 0);
	snprintf(link, sizeof(link), "%s/4242/cwd", procs);
	snprintf(target, sizeof(target), "%s/" WORKED "/src", dir);
	CHECK_INT(symlink(target, link), 0);
	int held = bundles_lock(dir, LOCKED, 1); /* a wrapper unpacking or touching it */
	CHECK(held >= 0);
	CHECK_INT(bundles_lock(dir, LOCKED, 1), -EWOULDBLOCK);
	int old_lock = open(path(OLD ".lock"), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	CHECK(old_lock >= 0);

	struct bundles_sweep t;
	CHECK_INT(bundles_sweep(work, keep, (int64_t)now, procs, 1, &t), 0);
	CHECK_INT(t.removed, 1);
	CHECK_INT(t.kept, 1);
	CHECK_INT(t.in_use, 2);
	CHECK(!there(OLD));
	CHECK(!there(".gone-" OLD));
	CHECK(!there(OLD ".lock")); /* with its bundle */
	CHECK(there(FRESH) && there(WORKED) && there(LOCKED));

	/* the lock a waiter opened before the unlink is not the lock now */
	int fd = bundles_lock(dir, OLD, 1);
	CHECK(fd >= 0);
	struct stat a, b;
	CHECK_INT(fstat(fd, &a), 0);
	CHECK_INT(fstat(old_lock, &b), 0);
	CHECK(a.st_ino != b.st_ino);
	close(fd);
	close(old_lock);

	close(held); /* unlocked: LOCKED goes at the next sweep */
	CHECK_INT(bundles_sweep(work, keep, (int64_t)now, procs, 1, &t), 0);
	CHECK_INT(t.removed, 1);
	CHECK(!there(LOCKED));
	CHECK(there(WORKED));
	rm_rf(work);
}

TEST(touching_a_bundle_keeps_it)
{
	setup();
	time_t now = time(NULL);
	bundle(OLD, now, 7200);
	CHECK_INT(bundles_touch(path(OLD)), 0);
	CHECK_INT(bundles_touch(path(FRESH)), -ENOENT);
	struct bundles_sweep t;
	CHECK_INT(bundles_sweep(work, 3600 * 1000, (int64_t)time(NULL), procs, 1, &t), 0);
	CHECK_INT(t.removed, 0);
	CHECK_INT(t.kept, 1);
	CHECK(there(OLD));
	rm_rf(work);
}

TEST(keep_zero_keeps_every_bundle_and_leftovers_go)
{
	setup();
	time_t now = time(NULL);
	bundle(OLD, now, 999999);
	bundle(OLD ".partial", now, 60);   /* an unpack killed midway, its lock free */
	bundle(".gone-" GONE, now, 60);    /* a sweep stopped before removing it */
	bundle(FRESH ".partial", now, 60); /* an unpack still running: its lock held */
	int held = bundles_lock(dir, FRESH, 1);
	CHECK(held >= 0);
	int fd = open(path(LOCKED ".lock"), O_RDWR | O_CREAT | O_CLOEXEC, 0644); /* no bundle */
	CHECK(fd >= 0);
	close(fd);
	bundle("notes", now, 999999); /* not ours: untouched */
	struct bundles_sweep t;
	CHECK_INT(bundles_sweep(work, 0, (int64_t)now, procs, 1, &t), 0);
	CHECK_INT(t.removed, 0);
	CHECK_INT(t.leftovers, 3);
	CHECK(there(OLD) && there("notes") && there(FRESH ".partial") && there(FRESH ".lock"));
	CHECK(!there(OLD ".partial") && !there(".gone-" GONE) && !there(LOCKED ".lock"));
	close(held);
	rm_rf(work);
}

TEST(no_bundles_dir_is_no_error)
{
	struct bundles_sweep t = {.removed = 7};
	CHECK_INT(bundles_sweep("/tmp/anvil-test-bundles-none", 3600 * 1000, 0, "/proc", 1, &t), 0);
	CHECK_INT(t.removed, 0);
}

TEST_MAIN()
