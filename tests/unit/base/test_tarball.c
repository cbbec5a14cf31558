/* base/tarball.h: archives are deterministic (same content, same bytes,
 * whatever the times, modes or TAR_OPTIONS), round-trip through unpack
 * with times of their own, and a failure says what and why; what an
 * archive may hold is checked at both ends: a symbolic link inside is
 * kept, one that leads outside (absolute, through "..", through another
 * link) is refused when packed and when unpacked, and so are hard links
 * outside, devices and FIFOs, with nothing unpacked. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "../test.h"
#include "base/err.h"
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
	CHECK_CONTAINS(err, "not a tar archive, or one cut short");
	f = fopen(bad, "w");
	for (int i = 0; i < 100; i++)
		fputs("not a tar archive either\n", f);
	fclose(f);
	CHECK(tarball_unpack(bad, b, err, sizeof(err)) != 0);
	CHECK_CONTAINS(err, "the header at byte 0 has a bad checksum: not a tar archive, or a "
	                    "compressed one");
	unlink(bad);
	CHECK(tarball_pack_dir("/nonexistent/dir", "/tmp/anvil-test-never.tar", err, sizeof(err)) !=
	      0);
	CHECK_CONTAINS(err, "packing /nonexistent/dir");
	unlink("/tmp/anvil-test-never.tar");
}

/* ---- what an archive may hold ---- */

static void link_at(const char *dir, const char *rel, const char *target)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	if (symlink(target, path) != 0)
		FAIL_AT("symlink %s -> %s: %s", path, target, strerror(errno));
}

static int empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	CHECK(d != NULL);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
	closedir(d);
	return n == 0;
}

TEST(links_inside_the_archive_are_kept)
{
	char *a = tmpdir(), *b = tmpdir(), out[128], err[600] = "", got[256];
	put(a, "top.txt", "top", 0644);
	put(a, "sub/deeper/x.txt", "x", 0644);
	link_at(a, "sub/up", "../top.txt"); /* .. from the link's own directory */
	link_at(a, "sub/deeper/far", "../../sub/../top.txt");
	link_at(a, "here", "sub");              /* a directory */
	link_at(a, "via", "here/deeper/x.txt"); /* through another link */
	link_at(a, "self", ".");
	link_at(a, "dangling", "not/there/yet");
	snprintf(out, sizeof(out), "%s.tar", a);
	if (tarball_pack_dir(a, out, err, sizeof(err)))
		FAIL_AT("pack: %s", err);
	if (tarball_unpack(out, b, err, sizeof(err)))
		FAIL_AT("unpack: %s", err);
	char path[256];
	snprintf(path, sizeof(path), "%s/via", b);
	ssize_t n = readlink(path, got, sizeof(got) - 1);
	CHECK(n > 0);
	got[n] = '\0';
	CHECK_STR(got, "here/deeper/x.txt");
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	CHECK(fgets(got, sizeof(got), f) != NULL);
	fclose(f);
	CHECK_STR(got, "x");
	unlink(out);
}

/* Packing dir with one link added refuses it, naming it and its target. */
static void pack_refuses(const char *rel, const char *target, const char *why)
{
	char *a = tmpdir(), out[128], err[600] = "";
	put(a, "sub/file.txt", "f", 0644);
	link_at(a, "up", "."); /* fine alone */
	link_at(a, rel, target);
	snprintf(out, sizeof(out), "%s.tar", a);
	int rc = tarball_pack_dir(a, out, err, sizeof(err));
	unlink(out);
	if (rc == 0)
		FAIL_AT("%s -> %s was packed", rel, target);
	char want[300];
	snprintf(want, sizeof(want), "'%s' is a symbolic link to '%s', %s", rel, target, why);
	CHECK_CONTAINS(err, "packing ");
	CHECK_CONTAINS(err, want);
}

TEST(packing_refuses_links_that_lead_outside)
{
	pack_refuses("abs", "/tmp", "which is absolute: outside the archive");
	pack_refuses("parent", "..", "which leads outside the archive");
	pack_refuses("sub/escape", "../../etc/passwd", "which leads outside the archive");
	pack_refuses("sub/back", "../sub/../../x", "which leads outside the archive");
	/* lexically "up/.." is the root; followed, up is the root, so .. is above it */
	pack_refuses("tricky", "up/..", "which leads outside the archive");
	pack_refuses("sub/loop", "loop", "which goes through more than 40 symbolic links");
	/* a target longer than a tar header holds (GNU's long link record) */
	char longer[400] = "";
	for (int i = 0; i < 60; i++)
		strcat(longer, "./");
	strcat(longer, "../x");
	pack_refuses("long", longer, "which leads outside the archive");
}

/* ---- hand-made archives: what tar would never pack ---- */

struct member {
	const char *name;
	char type; /* '0' file, '1' hard link, '2' symbolic link, '3' device, ... */
	const char *link;
	const char *data;
};

static void octal(char *field, size_t n, unsigned long long v)
{
	char text[32];
	snprintf(text, sizeof(text), "%0*llo", (int)n - 1, v);
	memcpy(field, text, n - 1);
	field[n - 1] = '\0';
}

/* A GNU tar archive of the members, written to path. */
static void craft(const char *path, const struct member *m, size_t n)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	for (size_t i = 0; i < n; i++) {
		char h[512];
		memset(h, 0, sizeof(h));
		size_t size = m[i].data ? strlen(m[i].data) : 0;
		snprintf(h, 100, "%s", m[i].name);
		octal(h + 100, 8, m[i].type == '5' ? 0755 : 0644);
		octal(h + 108, 8, 0);
		octal(h + 116, 8, 0);
		octal(h + 124, 12, size);
		octal(h + 136, 12, 0);
		h[156] = m[i].type;
		if (m[i].link)
			snprintf(h + 157, 100, "%s", m[i].link);
		memcpy(h + 257, "ustar  ", 8);
		memset(h + 148, ' ', 8);
		unsigned sum = 0;
		for (int k = 0; k < 512; k++)
			sum += (unsigned char)h[k];
		snprintf(h + 148, 8, "%06o", sum);
		fwrite(h, 1, sizeof(h), f);
		if (size) {
			char pad[512] = {0};
			fwrite(m[i].data, 1, size, f);
			fwrite(pad, 1, (512 - size % 512) % 512, f);
		}
	}
	char end[1024] = {0};
	fwrite(end, 1, sizeof(end), f);
	fclose(f);
}

/* Unpacking the crafted archive is refused with want, and writes nothing. */
static void unpack_refuses(const struct member *m, size_t n, const char *want)
{
	char *dir = tmpdir(), tar[128], err[600] = "";
	snprintf(tar, sizeof(tar), "%s.tar", dir);
	craft(tar, m, n);
	int rc = tarball_unpack(tar, dir, err, sizeof(err));
	unlink(tar);
	if (rc == 0)
		FAIL_AT("unpacked, but wanted \"%s\"", want);
	CHECK_INT(rc, ERR_INVALID);
	CHECK_CONTAINS(err, "unpacking ");
	CHECK_CONTAINS(err, want);
	CHECK(empty_dir(dir));
}

TEST(unpacking_refuses_links_outside_and_other_member_types)
{
	const struct member abs[] = {{"ok.txt", '0', NULL, "ok"}, {"lnk", '2', "/tmp/x", NULL}};
	unpack_refuses(abs, 2, "'lnk' is a symbolic link to '/tmp/x', which is absolute");
	const struct member up[] = {{"a/", '5', NULL, NULL}, {"a/lnk", '2', "../../x", NULL}};
	unpack_refuses(up, 2, "'a/lnk' is a symbolic link to '../../x', which leads outside");
	const struct member via[] = {{"d/", '5', NULL, NULL},
	                             {"d/root", '2', "..", NULL},
	                             {"out", '2', "d/root/..", NULL}};
	unpack_refuses(via, 3, "'out' is a symbolic link to 'd/root/..', which leads outside");
	const struct member hard[] = {{"h", '1', "../etc/passwd", NULL}};
	unpack_refuses(hard, 1, "'h' is a hard link to '../etc/passwd', outside the archive");
	const struct member hard_abs[] = {{"h", '1', "/etc/passwd", NULL}};
	unpack_refuses(hard_abs, 1, "'h' is a hard link to '/etc/passwd', outside the archive");
	const struct member hard_later[] = {{"h", '1', "f", NULL}, {"f", '0', NULL, "f"}};
	unpack_refuses(hard_later, 2, "which is not a regular file before it in the archive");
	const struct member dev[] = {{"tty", '3', NULL, NULL}};
	unpack_refuses(dev, 1,
	               "'tty' is a character device: an archive holds only regular files, "
	               "directories and symbolic links");
	const struct member fifo[] = {{"pipe", '6', NULL, NULL}};
	unpack_refuses(fifo, 1, "'pipe' is a FIFO");
	const struct member blk[] = {{"disk", '4', NULL, NULL}};
	unpack_refuses(blk, 1, "'disk' is a block device");
	const struct member through[] = {
	        {"sub/", '5', NULL, NULL}, {"lnk", '2', "sub", NULL}, {"lnk/f", '0', NULL, "f"}};
	unpack_refuses(through, 3, "'lnk/f' lies under 'lnk', a symbolic link in the archive");
	const struct member dots[] = {{"a/../../f", '0', NULL, "f"}};
	unpack_refuses(dots, 1, "'a/../../f': its name holds '..'");
	const struct member rooted[] = {{"/etc/cron.d/x", '0', NULL, "f"}};
	unpack_refuses(rooted, 1, "'/etc/cron.d/x': its name is absolute");
	const struct member twice[] = {{"f", '0', NULL, "1"}, {"./f", '2', "/etc", NULL}};
	unpack_refuses(twice, 2, "'f' is in it twice");
	const struct member data[] = {{"lnk", '2', "ok", "hidden header"}};
	unpack_refuses(data, 1, "'lnk' is a symbolic link that carries 13 bytes of data");
}

TEST(unpacking_keeps_links_inside_and_hard_links_to_earlier_files)
{
	const struct member m[] = {{"./", '5', NULL, NULL},
	                           {"f", '0', NULL, "data"},
	                           {"h", '1', "./f", NULL},
	                           {"sub/", '5', NULL, NULL},
	                           {"sub/up", '2', "../f", NULL}};
	char *dir = tmpdir(), tar[128], err[600] = "", path[256], got[16] = "";
	snprintf(tar, sizeof(tar), "%s.tar", dir);
	craft(tar, m, 5);
	if (tarball_unpack(tar, dir, err, sizeof(err)))
		FAIL_AT("unpack: %s", err);
	snprintf(path, sizeof(path), "%s/sub/up", dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	CHECK(fgets(got, sizeof(got), f) != NULL);
	fclose(f);
	CHECK_STR(got, "data");
	snprintf(path, sizeof(path), "%s/h", dir);
	struct stat sb;
	CHECK_INT(stat(path, &sb), 0);
	CHECK_INT(sb.st_nlink, 2);
	unlink(tar);
}

TEST(an_index_holds_each_file_hash_each_link_and_every_directory)
{
	char *a = tmpdir(), out[128], err[600] = "";
	put(a, "gen.py", "print(1)\n", 0644);
	put(a, "lib/deep/util.py", "x = 1\n", 0755);
	link_at(a, "entry.py", "gen.py");
	snprintf(out, sizeof(out), "%s.tar", a);
	/* a list names files only: their directories are implied */
	char *files[] = {"gen.py", "lib/deep/util.py", "entry.py"};
	if (tarball_pack_list(a, files, 3, out, err, sizeof(err)))
		FAIL_AT("pack: %s", err);
	int fd = open(out, O_RDONLY);
	CHECK(fd >= 0);
	json_t *index = NULL;
	if (tarball_index(fd, &index, err, sizeof(err)))
		FAIL_AT("index: %s", err);
	close(fd);
	char hex[65], want[80];
	hash_sha256("print(1)\n", 9, hex);
	snprintf(want, sizeof(want), "f:%s", hex);
	CHECK_STR(json_string_value(json_object_get(index, "gen.py")), want);
	hash_sha256("x = 1\n", 6, hex);
	snprintf(want, sizeof(want), "f:%s", hex);
	CHECK_STR(json_string_value(json_object_get(index, "lib/deep/util.py")), want);
	CHECK_STR(json_string_value(json_object_get(index, "entry.py")), "l:gen.py");
	CHECK_STR(json_string_value(json_object_get(index, "lib")), "d");
	CHECK_STR(json_string_value(json_object_get(index, "lib/deep")), "d");
	CHECK_STR(json_string_value(json_object_get(index, "")), "d");
	CHECK_INT(json_object_size(index), 6);
	json_decref(index);
	/* what the check refuses is not indexed either */
	FILE *f = fopen(out, "w");
	CHECK(f != NULL);
	fputs("not a tar archive, and not 512 bytes long", f);
	fclose(f);
	fd = open(out, O_RDONLY);
	CHECK(tarball_index(fd, &index, err, sizeof(err)) != 0);
	CHECK_CONTAINS(err, "not a tar archive");
	close(fd);
	unlink(out);
}

TEST_MAIN()
