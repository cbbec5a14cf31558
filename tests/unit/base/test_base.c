#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/failpoint.h"
#include "base/httpc.h"
#include "base/httpd.h"
#include "base/jv.h"
#include "base/util.h"

TEST(buf_grows_and_formats)
{
	struct buf b;
	buf_init(&b);
	for (int i = 0; i < 1000; i++)
		buf_printf(&b, "%d,", i);
	CHECK(b.len > 3000);
	CHECK(strncmp(b.data, "0,1,2,", 6) == 0);
	buf_cleanup(&b);
}

TEST(err_table_maps_codes)
{
	CHECK_STR(err_name(ERR_INVALID), "invalid");
	CHECK_INT(err_http(ERR_INVALID), 400);
	CHECK_INT(err_http(ERR_NOTFOUND), 404);
	CHECK_INT(err_http(ERR_UNFIT), 422);
	CHECK_INT(err_http(-12345), 500);
	/* a full disk is the server's want of room, not an internal error */
	CHECK_INT(err_http(-ENOSPC), 507);
	CHECK_INT(err_http(-EDQUOT), 507);
	CHECK_STR(err_name(-ENOSPC), "no_space");
}

static const struct jv_field fields[] = {
        {"command", JV_STRINGS, 1, 1, 4},    {"gpus", JV_INT, 0, 0, 64},
        {"name", JV_STRING, 0, 0, 8},        {"env", JV_STRING_MAP, 0, 0, 2},
        {"cpus", JV_NUMBER, 0, 10, 1024000}, {NULL, 0, 0, 0, 0},
};

static const char *check(const char *text)
{
	static char err[256];
	json_t *o = NULL;
	err[0] = '\0';
	if (jv_parse_object(text, strlen(text), &o, err, sizeof(err)) == 0) {
		int rc = jv_check(o, fields, err, sizeof(err));
		json_decref(o);
		if (rc == 0)
			return NULL;
	}
	return err;
}

TEST(jv_accepts_valid_body)
{
	CHECK(check("{\"command\":[\"true\"],\"gpus\":2,\"env\":{\"A\":\"b\"}}") == NULL);
}

TEST(jv_names_field_value_and_reason)
{
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"gpus\":-3}"),
	               "field 'gpus': -3 is below the minimum 0");
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"gpus\":65}"), "above the maximum 64");
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"gpus\":\"2\"}"), "is not an integer");
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"gpu\":1}"), "field 'gpu': unknown field");
	CHECK_CONTAINS(check("{\"gpus\":1}"), "field 'command': required");
	CHECK_CONTAINS(check("{\"command\":[]}"), "at least 1");
	CHECK_CONTAINS(check("{\"command\":[1]}"), "field 'command[0]': 1 is not a string");
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"name\":\"123456789\"}"), "longer than 8");
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"env\":{\"a\":1}}"), "field 'env.a'");
	CHECK_CONTAINS(check("{\"command\":"), "malformed JSON");
	CHECK_CONTAINS(check("[1]"), "expected a JSON object");
	CHECK_CONTAINS(check(""), "empty");
	CHECK_CONTAINS(check("{\"a\":1,\"a\":2}"), "malformed JSON");
}

/* A number's bounds are in thousandths; the message shows both as written. */
TEST(jv_number_takes_integers_and_reals_within_bounds)
{
	CHECK(check("{\"command\":[\"x\"],\"cpus\":0.5}") == NULL);
	CHECK(check("{\"command\":[\"x\"],\"cpus\":1024}") == NULL);
	CHECK(check("{\"command\":[\"x\"],\"cpus\":0.01}") == NULL);
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"cpus\":0.001}"),
	               "field 'cpus': 0.001 is below the minimum 0.01");
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"cpus\":2048}"),
	               "field 'cpus': 2048 is above the maximum 1024");
	CHECK_CONTAINS(check("{\"command\":[\"x\"],\"cpus\":\"2\"}"),
	               "field 'cpus': \"2\" is not a number");
}

/* What a request carried goes into JSON error messages, which must be UTF-8. */
TEST(jv_utf8_fix_replaces_what_is_not_utf8)
{
	CHECK(jv_utf8_fix("plain ascii") == NULL);
	CHECK(jv_utf8_fix("gr\xc3\xbc\xc3\x9f"
	                  "e \xe2\x82\xac \xf0\x9f\x9a\x80") == NULL);
	const char *bad[][2] = {
	        {"attempt '\xff'", "attempt '?'"},
	        {"\xc3", "?"},                /* cut short */
	        {"\xc0\xaf", "??"},           /* overlong '/' */
	        {"\xed\xa0\x80", "???"},      /* a surrogate */
	        {"\xf4\x90\x80\x80", "????"}, /* past U+10FFFF */
	        {"a\x80"
	         "b\xe2\x82\xac"
	         "c",
	         "a?b\xe2\x82\xac"
	         "c"}, /* a stray continuation */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *fixed = jv_utf8_fix(bad[i][0]);
		CHECK(fixed != NULL);
		CHECK_STR(fixed, bad[i][1]);
		json_t *j = json_string(fixed);
		CHECK(j != NULL); /* jansson takes it */
		json_decref(j);
		free(fixed);
	}
}

/* A reason cut short to fit its field must not end in half a character. */
TEST(text_printf_never_cuts_a_character_in_two)
{
	char buf[8];
	CHECK_INT(text_printf(buf, sizeof(buf), "%s", "abc"), 3);
	CHECK_STR(buf, "abc");
	/* "abcdef" + 2-byte e-acute: 8 bytes, 7 fit; the half e-acute goes */
	CHECK_INT(text_printf(buf, sizeof(buf), "abcdef%s", "\xc3\xa9"), 8);
	CHECK_STR(buf, "abcdef");
	/* "abcd" + 3-byte euro sign: 7 bytes, exactly fits */
	text_printf(buf, sizeof(buf), "abcd%s", "\xe2\x82\xac");
	CHECK_STR(buf, "abcd\xe2\x82\xac");
	/* "abcde" + euro: only 2 of its 3 bytes fit */
	text_printf(buf, sizeof(buf), "abcde%s", "\xe2\x82\xac");
	CHECK_STR(buf, "abcde");
	/* "ab" + 4-byte rocket + "x": 7 bytes, then cut at the 'x' */
	text_printf(buf, sizeof(buf), "ab%sxy", "\xf0\x9f\x9a\x80");
	CHECK_STR(buf, "ab\xf0\x9f\x9a\x80x");
	for (size_t size = 1; size <= sizeof(buf); size++) {
		text_printf(buf, size, "%s", "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
		CHECK(jv_utf8_fix(buf) == NULL);
	}
}

TEST(text_last_lines_counts_from_the_end)
{
	const char *s = "a\nbb\nccc\n";
	size_t len = strlen(s);
	CHECK_INT(text_last_lines(s, len, 1), 5);
	CHECK_INT(text_last_lines(s, len, 2), 2);
	CHECK_INT(text_last_lines(s, len, 3), 0);
	CHECK_INT(text_last_lines(s, len, 9), 0);
	CHECK_INT(text_last_lines(s, len, 0), len);
	/* a last line without its newline is a line */
	CHECK_INT(text_last_lines("a\nbb", 4, 1), 2);
	CHECK_INT(text_last_lines("a\nbb", 4, 2), 0);
	/* empty lines count */
	CHECK_INT(text_last_lines("a\n\n\n", 4, 2), 2);
	CHECK_INT(text_last_lines("", 0, 3), 0);
}

static int header_handler(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	httpd_add_header(req, "X-Anvil-Next-Offset", "1234");
	httpd_json(req, 200, "{}");
	return HTTPD_DONE;
}

/* httpc keeps the answer's headers for httpc_header, the last answer's only. */
TEST(httpc_reads_answer_headers)
{
	httpc_global_init();
	struct httpd *h = NULL;
	struct httpd_config cfg = {.bind = "127.0.0.1", .threads = 1, .handler = header_handler};
	CHECK_INT(httpd_start(&cfg, &h), 0);
	char url[64], val[16];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", httpd_port(h));
	struct httpc *c = httpc_new();
	CHECK(httpc_header(c, "X-Anvil-Next-Offset", val, sizeof(val)) == NULL);
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	CHECK_STR(httpc_header(c, "x-anvil-next-offset", val, sizeof(val)), "1234");
	CHECK_STR(httpc_header(c, "X-Anvil-Next-Offset", val, 3), "12");
	CHECK(httpc_header(c, "X-Anvil-Next", val, sizeof(val)) == NULL);
	httpd_stop(h);
	CHECK(httpc_do(c, "GET", url, NULL, NULL, 0, 2000, &status, &out) != 0);
	CHECK(httpc_header(c, "X-Anvil-Next-Offset", val, sizeof(val)) == NULL);
	buf_cleanup(&out);
	httpc_free(c);
}

TEST(parse_helpers)
{
	int64_t v = 0;
	CHECK_INT(parse_i64("42", 0, 100, &v), 0);
	CHECK_INT(v, 42);
	CHECK_INT(parse_i64("101", 0, 100, &v), ERR_INVALID);
	CHECK_INT(parse_i64("4x", 0, 100, &v), ERR_INVALID);
	CHECK_INT(parse_duration_ms("1.5s", &v), 0);
	CHECK_INT(v, 1500);
	CHECK_INT(parse_duration_ms("200ms", &v), 0);
	CHECK_INT(v, 200);
	CHECK_INT(parse_duration_ms("2m", &v), 0);
	CHECK_INT(v, 120000);
	CHECK_INT(parse_duration_ms("xs", &v), ERR_INVALID);
}

TEST(files_round_trip)
{
	char dir[] = "/tmp/anvil-test-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char path[256];
	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	CHECK_INT(mkdir_p(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/a/f", dir);
	CHECK_INT(write_file_atomic(path, "hello", 5, 0600), 0);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file(path, 100, &b), 0);
	CHECK_STR(b.data, "hello");
	buf_reset(&b);
	CHECK_INT(read_file(path, 3, &b), -EFBIG);
	buf_cleanup(&b);
	CHECK_INT(rm_rf(dir), 0);
}

static unsigned mode_of(const char *path)
{
	struct stat sb;
	CHECK_INT(stat(path, &sb), 0);
	return sb.st_mode & 07777;
}

/* A token file is the owner's alone under any umask, and never shows its
 * bytes through a looser file left by a killed writer of the same pid. */
TEST(write_file_atomic_gives_exactly_its_mode_whatever_the_umask)
{
	char dir[] = "/tmp/anvil-test-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char path[256], tmp[300];
	snprintf(path, sizeof(path), "%s/token", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT, 0666); /* left over, world-readable */
	CHECK(fd >= 0);
	CHECK_INT(fchmod(fd, 0666), 0);
	close(fd);
	char peek[300];
	snprintf(peek, sizeof(peek), "%s/peek", dir); /* another name for that file */
	CHECK_INT(link(tmp, peek), 0);
	umask(0);
	CHECK_INT(write_file_atomic(path, "secret", 6, 0600), 0);
	CHECK_INT(mode_of(path), 0600);
	CHECK(access(tmp, F_OK) != 0);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file(peek, 100, &b), 0);
	CHECK_INT(b.len, 0); /* the token went into a file of its own */
	buf_cleanup(&b);
	umask(0777); /* and a umask that takes the owner's bits too */
	CHECK_INT(write_file_atomic(path, "secret", 6, 0600), 0);
	umask(022);
	CHECK_INT(mode_of(path), 0600);
	CHECK_INT(rm_rf(dir), 0);
}

TEST(tighten_mode_only_takes_bits_away)
{
	char dir[] = "/tmp/anvil-test-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	char path[256];
	snprintf(path, sizeof(path), "%s/f", dir);
	CHECK_INT(write_file_atomic(path, "x", 1, 0644), 0);
	unsigned was = 0;
	CHECK_INT(tighten_mode(path, 0600, &was), 1);
	CHECK_INT(was, 0644);
	CHECK_INT(mode_of(path), 0600);
	CHECK_INT(tighten_mode(path, 0600, &was), 0); /* nothing more to take */
	CHECK_INT(chmod(path, 0400), 0);
	CHECK_INT(tighten_mode(path, 0600, NULL), 0);
	CHECK_INT(mode_of(path), 0400); /* stricter stays */
	CHECK_INT(chmod(dir, 0755), 0);
	CHECK_INT(tighten_mode(dir, 0700, NULL), 1);
	CHECK_INT(mode_of(dir), 0700);
	snprintf(path, sizeof(path), "%s/none", dir);
	CHECK_INT(tighten_mode(path, 0600, NULL), -ENOENT);
	CHECK_INT(rm_rf(dir), 0);
}

/* A daemon raises its soft open-file limit to the hard one; a child that
 * runs a user's command gets the limit from before back. */
TEST(nofile_raise_and_restore)
{
	struct rlimit rl;
	CHECK_INT(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max <= 256)
		return; /* no room to tell raised from not */
	struct rlimit low = {.rlim_cur = 256, .rlim_max = rl.rlim_max};
	CHECK_INT(setrlimit(RLIMIT_NOFILE, &low), 0);
	int64_t before = 0, after = 0;
	CHECK_INT(nofile_raise(&before, &after), 0);
	CHECK_INT(before, 256);
	CHECK(after > 256);
	CHECK_INT(getrlimit(RLIMIT_NOFILE, &rl), 0);
	CHECK_INT(rl.rlim_cur, after);
	pid_t pid = fork();
	if (pid == 0) {
		nofile_restore();
		struct rlimit child;
		getrlimit(RLIMIT_NOFILE, &child);
		_exit(child.rlim_cur == 256 ? 0 : 1);
	}
	int status = 0;
	CHECK_INT(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_INT(nofile_raise(&before, &after), 0); /* raised already: nothing to do */
	CHECK_INT(before, after);
}

TEST(random_hex_is_hex_and_distinct)
{
	char a[65], b[65];
	random_hex(a, 32);
	random_hex(b, 32);
	CHECK_INT(strlen(a), 64);
	CHECK(strcmp(a, b) != 0);
	CHECK(strspn(a, "0123456789abcdef") == 64);
}

/* A point fires on its Nth pass only, and only when armed. */
TEST(failpoint_fires_on_its_pass)
{
	setenv(FAILPOINT_ENV, "a.b@2,other", 1);
	CHECK_INT(failpoint_hit("a.b"), 0);
	CHECK_INT(failpoint_hit("a.b"), 1);
	CHECK_INT(failpoint_hit("a.b"), 0);
	CHECK_INT(failpoint_hit("other"), 1);
	CHECK_INT(failpoint_hit("other"), 0);
	CHECK_INT(failpoint_hit("unarmed"), 0);
	failpoint_crash("unarmed"); /* returns */
}

/* failpoint_crash ends the process on its pass, with FAILPOINT_EXIT. */
TEST(failpoint_crash_exits)
{
	setenv(FAILPOINT_ENV, "boom", 1);
	pid_t pid = fork();
	if (pid == 0) {
		failpoint_crash("boom");
		_exit(0);
	}
	int st = 0;
	CHECK_INT(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), FAILPOINT_EXIT);
}

/* A malformed variable arms nothing (it is said on stderr). */
TEST(failpoint_malformed_arms_nothing)
{
	setenv(FAILPOINT_ENV, "x@0,y", 1);
	CHECK_INT(failpoint_hit("x"), 0);
	CHECK_INT(failpoint_hit("y"), 0);
	unsetenv(FAILPOINT_ENV);
}

TEST_MAIN()

TEST(path_within_is_the_directory_or_below_it)
{
	CHECK(path_within("/a/b", "/a"));
	CHECK(path_within("/a", "/a"));
	CHECK(path_within("/a/b", "/a/"));
	CHECK(path_within("/a/b", "/"));
	CHECK(!path_within("/ab", "/a"));
	CHECK(!path_within("/a", "/a/b"));
}

TEST(secret_equal_needs_the_same_bytes_and_length)
{
	CHECK(secret_equal("abc", "abc"));
	CHECK(!secret_equal("abc", "abd"));
	CHECK(!secret_equal("abc", "abcd"));
	CHECK(!secret_equal("abcd", "abc"));
	CHECK(!secret_equal(NULL, "abc"));
	CHECK(!secret_equal("abc", NULL));
}
