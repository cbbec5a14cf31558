/* The object store (objstore/blob.h) on file://: content addressing, atomic
 * named puts, reads that check size and hash, key rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "objstore/blob.h"

struct fx {
	char dir[64];
	struct blob_store *s;
};

static void fx_open(struct fx *f)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/anvil-test-blob-XXXXXX");
	CHECK(mkdtemp(f->dir) != NULL);
	char uri[128], err[256];
	snprintf(uri, sizeof(uri), "file://%s/objects", f->dir);
	CHECK_INT(blob_open(uri, &f->s, err, sizeof(err)), 0);
}

static void fx_close(struct fx *f)
{
	blob_close(f->s);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	CHECK_INT(system(cmd), 0);
}

static void write_text(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");
	CHECK(fp != NULL);
	fputs(text, fp);
	fclose(fp);
}

static char *read_text(const char *path)
{
	static char buf[4096];
	FILE *fp = fopen(path, "r");
	CHECK(fp != NULL);
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	return buf;
}

TEST(the_same_content_is_stored_once_under_its_hash)
{
	struct fx f;
	fx_open(&f);
	char in[128], out[128], key[80], key2[80];
	snprintf(in, sizeof(in), "%s/in.txt", f.dir);
	write_text(in, "hello\n");
	struct blob_info info, info2;
	CHECK_INT(blob_put_file(f.s, in, key, &info), 0);
	/* sha256("hello\n") */
	CHECK_STR(info.sha256, "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
	CHECK_STR(key, "sha256/5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
	/* its file sits in a directory of its first two digits, a name it also goes by */
	char file[200];
	snprintf(file, sizeof(file),
	         "%s/objects/sha256/58/91b5b522d5df086d0ff0b110fbd9d21bb4fc716"
	         "3af34d08286a2e846f6be03",
	         f.dir);
	CHECK_INT(access(file, F_OK), 0);
	CHECK_INT(blob_stat(f.s,
	                    "sha256/58/91b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e8"
	                    "46f6be03",
	                    &info2),
	          0);
	CHECK_INT(info.size, 6);
	CHECK_INT(blob_put_file(f.s, in, key2, &info2), 0);
	CHECK_STR(key, key2);
	snprintf(out, sizeof(out), "%s/out.txt", f.dir);
	CHECK_INT(blob_get_file(f.s, key, out, &info2), 0);
	CHECK_STR(read_text(out), "hello\n");
	CHECK_INT(blob_stat(f.s, key, &info2), 0);
	CHECK_INT(info2.size, 6);
	fx_close(&f);
}

TEST(named_objects_are_replaced_whole_and_deleted)
{
	struct fx f;
	fx_open(&f);
	struct blob_info info;
	CHECK_INT(blob_put_named(f.s, "ckpt/7/1/state.pt", "one", 3, &info), 0);
	CHECK_INT(blob_put_named(f.s, "ckpt/7/1/state.pt", "second", 6, &info), 0);
	char out[128];
	snprintf(out, sizeof(out), "%s/got", f.dir);
	CHECK_INT(blob_get_file(f.s, "ckpt/7/1/state.pt", out, &info), 0);
	CHECK_STR(read_text(out), "second");
	CHECK_INT(blob_delete(f.s, "ckpt/7/1/state.pt"), 0);
	CHECK_INT(blob_delete(f.s, "ckpt/7/1/state.pt"), 0);
	CHECK_INT(blob_stat(f.s, "ckpt/7/1/state.pt", &info), ERR_NOTFOUND);
	CHECK_INT(blob_get_file(f.s, "ckpt/7/1/state.pt", out, &info), ERR_NOTFOUND);
	fx_close(&f);
}

/* A read never hands out bytes other than those written. */
TEST(a_corrupt_object_is_an_error_not_its_bytes)
{
	struct fx f;
	fx_open(&f);
	struct blob_info info;
	CHECK_INT(blob_put_named(f.s, "out/a", "precious", 8, &info), 0);
	char obj[160], out[128];
	snprintf(obj, sizeof(obj), "%s/objects/out/a", f.dir);
	write_text(obj, "precioux"); /* same size, other bytes */
	snprintf(out, sizeof(out), "%s/got", f.dir);
	CHECK_INT(blob_get_file(f.s, "out/a", out, &info), ERR_UPSTREAM);
	CHECK(access(out, F_OK) != 0);
	fx_close(&f);
}

TEST(keys_and_uris_are_checked)
{
	char err[256];
	static const char *const bad[] = {"",       "/abs",   "a//b",      "a/../b",   "x.meta",
	                                  "a/b/",   "sp ace", "a.tmp.1",   "sha256/x", "staging/y",
	                                  "sha256", "a\nb",   "tab\there", "del\x7f",  NULL};
	for (int i = 0; bad[i]; i++)
		if (blob_key_check(bad[i], err, sizeof(err)) != ERR_INVALID)
			FAIL_AT("key '%s' was accepted", bad[i]);
	CHECK_INT(blob_key_check("bundles/ab-12_3.tar", err, sizeof(err)), 0);
	struct blob_store *s = NULL;
	CHECK_INT(blob_open("s3://bucket/x", &s, err, sizeof(err)), ERR_INVALID);
	CHECK(strstr(err, "only file:///ABSOLUTE/DIR") != NULL);
	CHECK_INT(blob_open("file://relative", &s, err, sizeof(err)), ERR_INVALID);
	struct fx f;
	fx_open(&f);
	struct blob_info info;
	CHECK_INT(blob_put_named(f.s, "../escape", "x", 1, &info), ERR_INVALID);
	fx_close(&f);
}

/* A key is an object or a prefix of objects, never both: a then a/b (or
 * a/b then a) is a conflict that names the other key, not an error of the
 * file system ("Not a directory"), and neither object is touched. */
TEST(a_key_and_a_key_under_it_conflict)
{
	struct fx f;
	fx_open(&f);
	struct blob_info info;
	char other[128] = "";
	CHECK_INT(blob_put_named(f.s, "out/a", "one", 3, &info), 0);
	CHECK_INT(blob_put_named(f.s, "out/a/b", "two", 3, &info), ERR_CONFLICT);
	CHECK_INT(blob_key_conflict(f.s, "out/a/b/c", other, sizeof(other)), ERR_CONFLICT);
	CHECK_STR(other, "out/a");
	CHECK_INT(blob_put_named(f.s, "out/x/y", "three", 5, &info), 0);
	CHECK_INT(blob_put_named(f.s, "out/x", "four", 4, &info), ERR_CONFLICT);
	CHECK_INT(blob_key_conflict(f.s, "out/x", other, sizeof(other)), ERR_CONFLICT);
	CHECK_STR(other, "out/x/");
	CHECK_INT(blob_stat(f.s, "out/a", &info), 0);
	CHECK_INT(info.size, 3);
	CHECK_INT(blob_stat(f.s, "out/x/y", &info), 0);
	CHECK_INT(info.size, 5);
	/* once what was under it is deleted, the key is free again */
	CHECK_INT(blob_delete(f.s, "out/x/y"), 0);
	CHECK_INT(blob_put_named(f.s, "out/x", "four", 4, &info), 0);
	CHECK_INT(blob_key_conflict(f.s, "out/ab", other, sizeof(other)), 0);
	fx_close(&f);
}

/* A named put from a file, and a read that hands out the stored file:
 * its size is checked against the record, the hash left to the reader. */
TEST(a_named_put_from_a_file_and_a_read_by_descriptor)
{
	struct fx f;
	fx_open(&f);
	char in[128];
	snprintf(in, sizeof(in), "%s/in.tar", f.dir);
	write_text(in, "checkpoint bytes");
	struct blob_info info, got;
	CHECK_INT(blob_put_named_file(f.s, "ckpt/1/train/0", in, &info), 0);
	CHECK_INT(info.size, 16);
	int fd = -1;
	CHECK_INT(blob_read_fd(f.s, "ckpt/1/train/0", &fd, &got), 0);
	char buf[64] = "";
	CHECK_INT(read(fd, buf, sizeof(buf) - 1), 16);
	close(fd);
	CHECK_STR(buf, "checkpoint bytes");
	CHECK_STR(got.sha256, info.sha256);
	CHECK_INT(blob_read_fd(f.s, "ckpt/none", &fd, &got), ERR_NOTFOUND);
	CHECK_INT(blob_put_named_file(f.s, "sha256/ab/cd", in, &info), ERR_INVALID);
	char obj[160];
	snprintf(obj, sizeof(obj), "%s/objects/ckpt/1/train/0", f.dir);
	write_text(obj, "short"); /* another size than recorded */
	CHECK_INT(blob_read_fd(f.s, "ckpt/1/train/0", &fd, &got), ERR_UPSTREAM);
	fx_close(&f);
}

TEST_MAIN()
