/* base/tarball.h: archives are deterministic (same content, same bytes,
 * whatever the times, modes or TAR_OPTIONS), round-trip through unpack
 * with times of their own, and a failure says what and why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "../test.h"
#include "base/hash.h"
#include "base/tarball.h"

static void put(const char *dir, const char *rel, const char *text, int mode)
{
	char path[512], cmd[600];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	CHECK_INT(system(cmd), 0);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
	CHECK_INT(chmod(path, (mode_t)mode), 0);
}

/* A fresh directory under one made for the test (removed at its exit). */
static char root[64];

static void remove_root(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", root);
}

static char *tmpdir(void)
{
	static char dirs[4][96];
	static int n;
	if (!root[0]) {
		snprintf(root, sizeof(root), "/tmp/anvil-test-tar-XXXXXX");
		CHECK(mkdtemp(root) != NULL);
		atexit(remove_root);
	}
	char *d = dirs[n % 4];
	snprintf(d, 96, "%s/%d", root, n++);
	CHECK_INT(mkdir(d, 0755), 0);
	return d;
}

static void pack_hash(const char *dir, char hex[65])
{
	char out[128], err[512] = "";
	snprintf(out, sizeof(out), "%s.tar", dir);
	if (tarball_pack_dir(dir, out, err, sizeof(err)))
		FAIL_AT("pack: %s", err);
	CHECK_INT(hash_file_sha256(out, hex, NULL), 0);
	unlink(out);
}

TEST(the_same_files_make_the_same_bytes)
{
	char *a = tmpdir(), *b = tmpdir(), ha[65], hb[65];
	put(a, "w/model.bin", "weights", 0644);
	put(a, "run.sh", "#!/bin/sh\n", 0755);
	put(b, "run.sh", "#!/bin/sh\n", 0775); /* another umask */
	put(b, "w/model.bin", "weights", 0600);
	char path[128];
	snprintf(path, sizeof(path), "%s/w/model.bin", b);
	struct utimbuf t = {.actime = 1, .modtime = 1};
	CHECK_INT(utime(path, &t), 0);
	pack_hash(a, ha);
	setenv("TAR_OPTIONS", "--format=posix", 1); /* the caller's, ignored */
	pack_hash(b, hb);
	CHECK_STR(ha, hb);
	put(b, "w/model.bin", "weights2", 0644);
	pack_hash(b, hb);
	CHECK(strcmp(ha, hb) != 0);
}

TEST(unpacking_gives_the_files_back_with_times_of_now)
{
	char *a = tmpdir(), *b = tmpdir(), out[128], err[512] = "";
	put(a, "x/y.txt", "hello\n", 0644);
	put(a, "run.sh", "#!/bin/sh\n", 0700);
	snprintf(out, sizeof(out), "%s.tar", a);
	CHECK_INT(tarball_pack_dir(a, out, err, sizeof(err)), 0);
	CHECK_INT(tarball_unpack(out, b, err, sizeof(err)), 0);
	char path[128];
	snprintf(path, sizeof(path), "%s/x/y.txt", b);
	struct stat sb;
	CHECK_INT(stat(path, &sb), 0);
	CHECK_INT(sb.st_size, 6);
	CHECK(sb.st_mtime > time(NULL) - 3600); /* not 1970 */
	snprintf(path, sizeof(path), "%s/run.sh", b);
	CHECK_INT(stat(path, &sb), 0);
	CHECK(sb.st_mode & 0100); /* still executable */
	unlink(out);
}

TEST(a_list_is_packed_in_byte_order_and_only_it)
{
	char *a = tmpdir(), out1[128], out2[128], err[512] = "", h1[65], h2[65];
	put(a, "b.txt", "b", 0644);
	put(a, "a/z.txt", "z", 0644);
	put(a, "left-out.txt", "no", 0644);
	char *one[] = {"b.txt", "a/z.txt"}, *two[] = {"a/z.txt", "b.txt"};
	snprintf(out1, sizeof(out1), "%s.1.tar", a);
	snprintf(out2, sizeof(out2), "%s.2.tar", a);
	CHECK_INT(tarball_pack_list(a, one, 2, out1, err, sizeof(err)), 0);
	CHECK_INT(tarball_pack_list(a, two, 2, out2, err, sizeof(err)), 0);
	CHECK_INT(hash_file_sha256(out1, h1, NULL), 0);
	CHECK_INT(hash_file_sha256(out2, h2, NULL), 0);
	CHECK_STR(h1, h2);
	char *b = tmpdir(), path[128];
	CHECK_INT(tarball_unpack(out1, b, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/left-out.txt", b);
	CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof(path), "%s/a/z.txt", b);
	CHECK_INT(access(path, F_OK), 0);
	unlink(out1);
	unlink(out2);
}

TEST(a_failure_names_the_archive_and_says_why)
{
	char *b = tmpdir(), bad[128], err[512] = "";
	snprintf(bad, sizeof(bad), "%s.notatar", b);
	FILE *f = fopen(bad, "w");
	fputs("this is not a tar archive, not at all, not even close to one\n", f);
	fclose(f);
	CHECK(tarball_unpack(bad, b, err, sizeof(err)) != 0);
	CHECK_CONTAINS(err, bad);
	CHECK_CONTAINS(err, "tar exited with status 2");
	unlink(bad);
	CHECK(tarball_pack_dir("/nonexistent/dir", "/tmp/anvil-test-never.tar", err, sizeof(err)) !=
	      0);
	CHECK_CONTAINS(err, "packing /nonexistent/dir");
	unlink("/tmp/anvil-test-never.tar");
}

TEST_MAIN()
