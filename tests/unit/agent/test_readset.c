/* agent/readset.h: a child under the filter has every path it looks up
 * under the root recorded, as the kernel resolves it (through the tree's
 * links, to the first missing part), whether found or not, and every
 * directory it lists; nothing outside the root; and a set whose filter
 * never arrived is incomplete, saying why. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/readset.h"
#include "base/jv.h"

static char root[64];

static void remove_root(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", root);
}

static void put(const char *rel)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fputs("x\n", f);
	fclose(f);
}

/* A tree: gen.py, train.py, lib/util.py, entry.py -> gen.py. */
static void make_tree(void)
{
	snprintf(root, sizeof(root), "/tmp/anvil-test-readset-XXXXXX");
	CHECK(mkdtemp(root) != NULL);
	atexit(remove_root);
	char path[256];
	snprintf(path, sizeof(path), "%s/lib", root);
	CHECK_INT(mkdir(path, 0755), 0);
	put("gen.py");
	put("train.py");
	put("lib/util.py");
	snprintf(path, sizeof(path), "%s/entry.py", root);
	CHECK_INT(symlink("gen.py", path), 0);
}

/* What the child does under the filter, in the tree. */
static void child_reads(void)
{
	struct stat sb;
	int fd = open("gen.py", O_RDONLY);
	if (fd >= 0)
		close(fd);
	stat("missing.py", &sb);         /* looked for, not there */
	stat("lib/nothere/x.py", &sb);   /* its first missing part */
	stat("lib/../train.py", &sb);    /* ".." as the kernel takes it */
	stat("nosuch/../gen.py", &sb);   /* fails at nosuch */
	fd = open("entry.py", O_RDONLY); /* the link, and where it leads */
	if (fd >= 0)
		close(fd);
	fd = open("/etc/hostname", O_RDONLY); /* outside: not recorded */
	if (fd >= 0)
		close(fd);
	DIR *d = opendir("lib");
	while (d && readdir(d))
		;
	if (d)
		closedir(d);
}

/* Runs child_reads under the filter; the set recorded. */
static struct readset *record_child(int install)
{
	struct readset *rs = readset_new(root);
	CHECK(rs != NULL);
	int sv[2];
	CHECK_INT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		if (chdir(root) != 0)
			_exit(2);
		if (install && readset_install(sv[1]) != 0)
			_exit(3);
		if (!install)
			close(sv[1]);
		child_reads();
		_exit(0);
	}
	close(sv[1]);
	int attached = readset_attach(rs, sv[0]);
	CHECK_INT(attached == 0, install);
	int ws = 0;
	for (;;) {
		if (waitpid(pid, &ws, WNOHANG) == pid)
			break;
		struct pollfd p = {.fd = readset_fd(rs), .events = POLLIN};
		if (p.fd >= 0 && poll(&p, 1, 100) > 0)
			readset_serve(rs);
		else if (p.fd < 0)
			usleep(10000);
	}
	CHECK(WIFEXITED(ws));
	CHECK_INT(WEXITSTATUS(ws), 0);
	return rs;
}

TEST(what_a_child_looks_up_and_lists_under_the_root_is_recorded)
{
	make_tree();
	struct readset *rs = record_child(1);
	char why[300] = "";
	json_t *keys = readset_keys(rs, why, sizeof(why));
	if (!keys)
		FAIL_AT("incomplete: %s", why);
	char *s = json_dumps(keys, JSON_COMPACT);
	CHECK_STR(s, "[\"entry.py\",\"gen.py\",\"lib\",\"lib/\",\"lib/nothere\",\"missing.py\","
	             "\"nosuch\",\"train.py\"]");
	free(s);
	json_decref(keys);
	readset_free(rs);
}

TEST(a_set_whose_filter_never_came_is_incomplete_and_says_why)
{
	make_tree();
	struct readset *rs = record_child(0);
	char why[300] = "";
	CHECK(readset_keys(rs, why, sizeof(why)) == NULL);
	CHECK(strstr(why, "the kernel refused the filter") != NULL);
	readset_free(rs);
}

TEST_MAIN()
