/* cli/bundle.h: which files a code bundle holds (a git work tree's tracked
 * files; otherwise the tree minus .anvilignore, never .git), the
 * .anvilignore matcher, and that a bundle is deterministic: packed twice
 * the same bytes, a touched file changes nothing, a changed byte changes
 * the hash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "../test.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/httpc.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/bundle.h"
#include "cli/cliconn.h"
#include "objstore/blob.h"
#include "server/server.h"

/* ---- the matcher ---- */

static void ignored(const char *rules, const char *path, int is_dir, int want)
{
	struct bundle_ignore *ig = bundle_ignore_parse(rules);
	int got = bundle_ignored(ig, path, is_dir);
	bundle_ignore_free(ig);
	if (got != want)
		FAIL_AT("rules \"%s\": %s%s is %s, want %s", rules, path, is_dir ? "/" : "",
		        got ? "ignored" : "kept", want ? "ignored" : "kept");
}

TEST(a_name_pattern_matches_at_any_depth)
{
	ignored("*.log\n", "run.log", 0, 1);
	ignored("*.log\n", "a/b/run.log", 0, 1);
	ignored("*.log\n", "a/b/run.txt", 0, 0);
	ignored("data\n", "x/data/file", 0, 1); /* through its directory */
	ignored("# comment\n\n   \n", "anything", 0, 0);
	ignored("\\#hash\n", "#hash", 0, 1);
}

TEST(a_slash_anchors_a_pattern_to_the_root)
{
	ignored("/build\n", "build", 1, 1);
	ignored("/build\n", "src/build", 1, 0);
	ignored("docs/*.md\n", "docs/a.md", 0, 1);
	ignored("docs/*.md\n", "docs/sub/a.md", 0, 0); /* * stays within a name */
	ignored("docs/*.md\n", "x/docs/a.md", 0, 0);
}

TEST(a_trailing_slash_matches_directories_only)
{
	ignored("out/\n", "out", 1, 1);
	ignored("out/\n", "out", 0, 0);
	ignored("out/\n", "a/out/x.bin", 0, 1);
}

TEST(double_star_crosses_directories)
{
	ignored("**/cache\n", "cache", 1, 1);
	ignored("**/cache\n", "a/b/cache", 1, 1);
	ignored("data/**/*.bin\n", "data/x.bin", 0, 1);
	ignored("data/**/*.bin\n", "data/a/b/x.bin", 0, 1);
	ignored("data/**\n", "data/a/b", 0, 1);
	ignored("data/**\n", "other/a", 0, 0);
}

TEST(the_last_match_decides_and_an_excluded_directory_stays_excluded)
{
	ignored("*.txt\n!keep.txt\n", "keep.txt", 0, 0);
	ignored("*.txt\n!keep.txt\n", "drop.txt", 0, 1);
	ignored("!keep.txt\n*.txt\n", "keep.txt", 0, 1);
	ignored("secret/\n!secret/keep.txt\n", "secret/keep.txt", 0, 1);
	ignored("", "x", 0, 0);
	CHECK_INT(bundle_ignored(NULL, "x", 0), 0);
}

/* ---- listing and packing ---- */

static void put(const char *dir, const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
	CHECK_INT(system(cmd), 0);
	*slash = '/';
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static void sh(const char *dir, const char *cmd)
{
	char line[1024];
	snprintf(line, sizeof(line), "cd '%s' && %s >/dev/null 2>&1", dir, cmd);
	if (system(line) != 0)
		FAIL_AT("failed: %s", line);
}

static void make_dir(char *dir, size_t len)
{
	snprintf(dir, len, "/tmp/anvil-test-bundle-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
}

static void drop_dir(const char *dir)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_INT(system(cmd), 0);
}

static char *joined(const struct bundle_files *f)
{
	static char out[4096];
	out[0] = '\0';
	for (size_t i = 0; i < f->n; i++) {
		strcat(out, i ? " " : "");
		strcat(out, f->v[i]);
	}
	return out;
}

TEST(outside_git_every_file_but_the_ignored_and_git)
{
	char dir[64], err[512] = "";
	make_dir(dir, sizeof(dir));
	put(dir, "train.py", "print(1)\n");
	put(dir, "lib/util.py", "x = 1\n");
	put(dir, "data/big.bin", "0000");
	put(dir, "logs/run.log", "log\n");
	put(dir, "sub/.git/config", "[core]\n"); /* a nested repository's own files */
	put(dir, ".anvilignore", "data/\n*.log\n");
	sh(dir, "ln -s train.py link.py");
	struct bundle_files f;
	CHECK_INT(bundle_list(dir, &f, err, sizeof(err)), 0);
	CHECK_INT(f.from_git, 0);
	CHECK_STR(joined(&f), ".anvilignore lib/util.py link.py train.py");
	bundle_files_free(&f);
	drop_dir(dir);
}

TEST(in_git_the_tracked_files_as_on_disk)
{
	char dir[64], err[512] = "";
	make_dir(dir, sizeof(dir));
	put(dir, "train.py", "print(1)\n");
	put(dir, "gone.py", "x\n");
	put(dir, "big.bin", "0000");
	put(dir, "notes/todo.txt", "later\n");
	sh(dir, "git init -q . && git add train.py gone.py big.bin notes/todo.txt && "
	        "git -c user.name=t -c user.email=t@t commit -qm one");
	put(dir, "untracked.py", "new\n");
	put(dir, "train.py", "print(2)\n");  /* modified: as on disk */
	sh(dir, "rm gone.py");               /* deleted, still tracked */
	put(dir, ".anvilignore", "*.bin\n"); /* itself untracked: not bundled */
	struct bundle_files f;
	CHECK_INT(bundle_list(dir, &f, err, sizeof(err)), 0);
	CHECK_INT(f.from_git, 1);
	CHECK_STR(joined(&f), "notes/todo.txt train.py");
	bundle_files_free(&f);
	/* a subdirectory of the work tree bundles its own tracked files */
	char sub[128];
	snprintf(sub, sizeof(sub), "%s/notes", dir);
	CHECK_INT(bundle_list(sub, &f, err, sizeof(err)), 0);
	CHECK_STR(joined(&f), "todo.txt");
	bundle_files_free(&f);
	drop_dir(dir);
}

static void pack_hash(const char *dir, char hex[65])
{
	char out[128], err[512] = "";
	snprintf(out, sizeof(out), "%s.tar", dir);
	if (bundle_pack(dir, out, err, sizeof(err)) != 0)
		FAIL_AT("bundle_pack: %s", err);
	CHECK_INT(hash_file_sha256(out, hex, NULL), 0);
	unlink(out);
}

TEST(a_bundle_is_the_same_bytes_for_the_same_content)
{
	char dir[64], a[65], b[65], c[65], d[65];
	make_dir(dir, sizeof(dir));
	put(dir, "train.py", "print(1)\n");
	put(dir, "lib/util.py", "x = 1\n");
	pack_hash(dir, a);
	pack_hash(dir, b);
	CHECK_STR(a, b);
	char path[128];
	snprintf(path, sizeof(path), "%s/lib/util.py", dir);
	struct utimbuf t = {.actime = 12345, .modtime = 12345};
	CHECK_INT(utime(path, &t), 0);   /* touched */
	CHECK_INT(chmod(path, 0600), 0); /* another umask */
	pack_hash(dir, c);
	CHECK_STR(a, c);
	put(dir, "lib/util.py", "x = 2\n");
	pack_hash(dir, d);
	CHECK(strcmp(a, d) != 0);
	drop_dir(dir);
}

/* A bundle packed into bundle_tmp's file: the same bytes as into a named
 * file; nothing of it in $TMPDIR while it exists (it has no name there),
 * and gone once closed. */
TEST(a_temporary_bundle_has_no_name_and_goes_with_its_descriptor)
{
	char dir[64], tmp[64], want[65], got[65];
	make_dir(dir, sizeof(dir));
	make_dir(tmp, sizeof(tmp));
	put(dir, "train.py", "print(1)\n");
	pack_hash(dir, want);
	const char *old = getenv("TMPDIR");
	char *keep = old ? xstrdup(old) : NULL;
	setenv("TMPDIR", tmp, 1);
	struct bundle_tmp t;
	char err[512] = "";
	CHECK_INT(bundle_tmp_open(&t, err, sizeof(err)), 0);
	CHECK_INT(t.named, 0); /* ext4 and tmpfs have unnamed files */
	CHECK_INT(bundle_pack(dir, t.path, err, sizeof(err)), 0);
	CHECK_INT(hash_file_sha256(t.path, got, NULL), 0);
	CHECK_STR(got, want);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A %s)\"", tmp);
	CHECK_INT(system(cmd), 0); /* no entry in TMPDIR */
	char path[sizeof(t.path)];
	snprintf(path, sizeof(path), "%s", t.path);
	bundle_tmp_close(&t);
	CHECK(access(path, F_OK) != 0);
	if (keep)
		setenv("TMPDIR", keep, 1);
	else
		unsetenv("TMPDIR");
	free(keep);
	drop_dir(tmp);
	drop_dir(dir);
}

/* bundle_pack of dir is refused, its message naming the link and its
 * target and saying what to do. */
static void pack_refused(const char *dir, const char *want)
{
	char out[128], err[1024] = "";
	snprintf(out, sizeof(out), "%s.tar", dir);
	int rc = bundle_pack(dir, out, err, sizeof(err));
	unlink(out);
	if (rc == 0)
		FAIL_AT("%s was packed; wanted \"%s\"", dir, want);
	CHECK_INT(rc, ERR_INVALID);
	CHECK_CONTAINS(err, dir);
	CHECK_CONTAINS(err, want);
	CHECK_CONTAINS(err, "leave it out with .anvilignore");
}

TEST(links_inside_the_tree_are_bundled_and_links_outside_refused)
{
	char dir[64], hex[65];
	make_dir(dir, sizeof(dir));
	put(dir, "train.py", "print(1)\n");
	put(dir, "lib/util.py", "x = 1\n");
	sh(dir, "ln -s ../train.py lib/entry.py && ln -s lib code && ln -s code/util.py u.py");
	pack_hash(dir, hex); /* every link stays inside */
	sh(dir, "ln -s /tmp/anvil-elsewhere out");
	pack_refused(dir, "'out' is a symbolic link to '/tmp/anvil-elsewhere', which is absolute");
	put(dir, ".anvilignore", "out\n");
	pack_hash(dir, hex); /* left out: fine again */
	sh(dir, "ln -s ../../etc/passwd lib/pw");
	pack_refused(dir, "'lib/pw' is a symbolic link to '../../etc/passwd', which leads outside");
	/* code/.. is lib/..: the root; but here/.. is above it */
	sh(dir, "rm lib/pw && ln -s code/.. root && ln -s . here && ln -s here/.. up");
	pack_refused(dir, "'up' is a symbolic link to 'here/..', which leads outside");
	/* git's tracked links are judged the same way */
	sh(dir, "rm up && git init -q . && ln -s /etc/hostname host && git add -A && "
	        "git -c user.name=t -c user.email=t@t commit -qm one");
	pack_refused(dir, "'host' is a symbolic link to '/etc/hostname', which is absolute");
	drop_dir(dir);
}

TEST(a_missing_directory_is_an_error_that_names_it)
{
	struct bundle_files f;
	char err[512] = "";
	CHECK(bundle_list("/nonexistent/anvil-bundle", &f, err, sizeof(err)) != 0);
	CHECK_CONTAINS(err, "/nonexistent/anvil-bundle");
}

/* ---- storing, through a server of our own ---- */

/* The server's object API on a port of its own, over a fresh state and
 * store in dir: what `anvil server` runs for /v1/objects. */
static struct server *serve_objects(const char *dir)
{
	struct server *s = xcalloc(1, sizeof(*s));
	char *db = xasprintf("%s/state.db", dir), *uri = xasprintf("file://%s/objects", dir);
	char *uploads = xasprintf("%s/uploads", dir), err[256];
	CHECK_INT(state_open(&s->state, db, 0, 30000), 0);
	snprintf(s->admin_token, sizeof(s->admin_token), "%s",
	         "admin-token-0123456789abcdef0123456789");
	CHECK_INT(blob_open(uri, &s->state.objects, err, sizeof(err)), 0);
	s->object_max = 64 << 20;
	pthread_mutex_init(&s->objects_mu, NULL);
	struct httpd_config hc = {.port = 0,
	                          .handler = server_handle,
	                          .ctx = s,
	                          .spool = api_objects_spool,
	                          .spool_dir = uploads};
	CHECK_INT(httpd_start(&hc, &s->http), 0);
	snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", httpd_port(s->http));
	free(db);
	free(uri);
	free(uploads);
	return s;
}

static void stop_objects(struct server *s)
{
	httpd_stop(s->http);
	state_close(&s->state);
	blob_close(s->state.objects);
	pthread_mutex_destroy(&s->objects_mu);
	free(s);
}

static void connect_to(struct cliconn *c, const struct server *s)
{
	memset(c, 0, sizeof(*c));
	c->server = xstrdup(s->url);
	c->token = xstrdup(s->admin_token);
	c->http = httpc_new();
}

TEST(a_bundle_is_stored_once_under_its_content_key)
{
	char dir[64], tree[96], err[512] = "", key[OBJECTS_KEY_MAX], again[OBJECTS_KEY_MAX];
	make_dir(dir, sizeof(dir));
	snprintf(tree, sizeof(tree), "%s/tree", dir);
	put(tree, "train.py", "print(1)\n");
	put(tree, "lib/util.py", "x = 1\n");
	struct server *s = serve_objects(dir);
	struct cliconn c;
	connect_to(&c, s);
	if (bundle_store(&c, tree, key, err, sizeof(err)))
		FAIL_AT("bundle_store: %s", err);
	CHECK_INT(strlen(key), 71); /* sha256/<64 hex> */
	struct blob_info info;
	CHECK_INT(blob_stat(s->state.objects, key, &info), 0);
	/* the stored bytes are the bundle's: the key names them */
	char packed[128], hex[65];
	snprintf(packed, sizeof(packed), "%s/b.tar", dir);
	CHECK_INT(bundle_pack(tree, packed, err, sizeof(err)), 0);
	CHECK_INT(hash_file_sha256(packed, hex, NULL), 0);
	CHECK_STR(info.sha256, hex);
	/* a second upload asks first and sends nothing */
	struct objects_info oi;
	CHECK_INT(bundle_upload(&c, packed, again, &oi, err, sizeof(err)), 0);
	CHECK_STR(again, key);
	CHECK_INT(oi.uploaded, 0);
	/* and comes back whole */
	struct objects o = {.server = s->url, .token = s->admin_token, .http = c.http};
	char back[128], back_hex[65];
	snprintf(back, sizeof(back), "%s/back.tar", dir);
	CHECK_INT(objects_get(&o, key, back, &oi), 0);
	CHECK_INT(hash_file_sha256(back, back_hex, NULL), 0);
	CHECK_STR(back_hex, hex);
	cliconn_cleanup(&c);
	stop_objects(s);
	drop_dir(dir);
}

TEST(the_object_client_says_what_went_wrong)
{
	char dir[64], path[128];
	make_dir(dir, sizeof(dir));
	struct server *s = serve_objects(dir);
	struct httpc *h = httpc_new();
	struct objects o = {.server = s->url, .token = s->admin_token, .http = h};
	struct objects_info info;
	snprintf(path, sizeof(path), "%s/got", dir);
	CHECK_INT(objects_get(&o, "ckpt/none", path, &info), ERR_NOTFOUND);
	CHECK_CONTAINS(o.error, "no object ckpt/none");
	CHECK(access(path, F_OK) != 0);
	/* a named object round-trips; its hash is checked on the way */
	put(dir, "in.bin", "checkpoint");
	snprintf(path, sizeof(path), "%s/in.bin", dir);
	CHECK_INT(objects_put_named(&o, "ckpt/1/a", path, &info), 0);
	CHECK_INT(info.size, 10);
	char got[128];
	put(dir, "objects/ckpt/1/a", "checkpoinX"); /* same size, other bytes */
	snprintf(got, sizeof(got), "%s/got", dir);
	CHECK_INT(objects_get(&o, "ckpt/1/a", got, &info), ERR_UPSTREAM);
	CHECK_CONTAINS(o.error, "the download is corrupt");
	CHECK(access(got, F_OK) != 0);
	/* a token that is no one's: 401, said */
	struct objects bad = {.server = s->url, .token = "nobody", .attempt_id = 7, .http = h};
	CHECK_INT(objects_stat(&bad, "ckpt/1/a", &info), ERR_AUTH);
	CHECK_CONTAINS(bad.error, "answered 401");
	/* a server that is not there */
	struct objects gone = {.server = "http://127.0.0.1:1", .token = "t", .http = h};
	CHECK_INT(objects_stat(&gone, "ckpt/1/a", &info), ERR_UPSTREAM);
	CHECK_CONTAINS(gone.error, "http://127.0.0.1:1");
	httpc_free(h);
	stop_objects(s);
	drop_dir(dir);
}

TEST_MAIN()
