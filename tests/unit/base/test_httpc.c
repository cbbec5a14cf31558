/* The HTTP client (base/httpc.h) against a real httpd: the same contract
 * checked on both backends, libevent (http://, the default) and libcurl
 * ($ANVIL_HTTP_CLIENT=curl, as https:// URLs get): answers, headers,
 * timeouts, failures and their messages, file transfers both ways, an
 * upload refused before its body, a kept connection the server closed,
 * and an IPv6 literal host. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/httpc.h"
#include "base/httpd.h"
#include "base/util.h"

#define BIG (3 * 1024 * 1024 + 17) /* bytes of a file moved both ways */

static atomic_int spooled;   /* requests whose body went to a file */
static atomic_int flaky;     /* requests to /flaky and /upload_flaky so far */
static char flaky_keys[512]; /* their Idempotency-Keys, one a line */
static pthread_mutex_t flaky_mu = PTHREAD_MUTEX_INITIALIZER;

/* The body's SHA-256 and size, for the client to check what arrived. */
static void answer_body_hash(struct httpd_req *req)
{
	char hex[HASH_HEX_LEN + 1];
	int64_t size = 0;
	if (req->body_path)
		hash_file_sha256(req->body_path, hex, &size);
	else {
		hash_sha256(req->body, req->body_len, hex);
		size = (int64_t)req->body_len;
	}
	buf_printf(&req->out, "{\"size\":%lld,\"sha256\":\"%s\"}", (long long)size, hex);
}

/* A file of BIG bytes of a known pattern, from its start. */
static int big_file(void)
{
	char path[] = "/tmp/anvil-httpc-XXXXXX";
	int fd = mkstemp(path);
	unlink(path);
	char block[4096];
	for (size_t i = 0; i < sizeof(block); i++)
		block[i] = (char)(i * 7 + 3);
	for (size_t off = 0; off < BIG; off += sizeof(block))
		CHECK(write(fd, block, BIG - off < sizeof(block) ? BIG - off : sizeof(block)) > 0);
	lseek(fd, 0, SEEK_SET);
	return fd;
}

static int handler(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	const char *auth = httpd_header(req, "Authorization");
	const char *extra = httpd_header(req, "X-Anvil-Attempt");
	if (strcmp(req->path, "/echo") == 0) {
		buf_printf(&req->out,
		           "{\"method\":\"%s\",\"auth\":\"%s\",\"extra\":\"%s\",\"body\":\"%s\"}",
		           req->method, auth ? auth : "", extra ? extra : "",
		           req->body ? req->body : "");
		httpd_add_header(req, "X-Anvil-Next-Offset", "1234");
	} else if (strcmp(req->path, "/slow") == 0) {
		sleep_ms(1500);
		httpd_json(req, 200, "{}");
	} else if (strcmp(req->path, "/file") == 0) {
		int fd = big_file();
		httpd_send_fd(req, 200, fd, BIG);
	} else if (strcmp(req->path, "/upload") == 0) {
		answer_body_hash(req);
	} else if (strcmp(req->path, "/flaky") == 0 || strcmp(req->path, "/upload_flaky") == 0) {
		/* what a restarting server behind a proxy answers: 503 twice */
		const char *key = httpd_header(req, "Idempotency-Key");
		pthread_mutex_lock(&flaky_mu);
		size_t used = strlen(flaky_keys);
		snprintf(flaky_keys + used, sizeof(flaky_keys) - used, "%s\n", key ? key : "-");
		pthread_mutex_unlock(&flaky_mu);
		if (atomic_fetch_add(&flaky, 1) < 2)
			httpd_error(req, ERR_BUSY, "starting");
		else if (req->body_path)
			answer_body_hash(req);
		else
			httpd_json(req, 201, "{\"made\":1}");
	} else {
		httpd_error(req, ERR_NOTFOUND, "no such thing here");
	}
	return HTTPD_DONE;
}

/* Uploads to /upload go to a file; /refused is turned away before its
 * body, as the object API turns away a caller without the right. */
static int64_t spool(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	if (strcmp(req->path, "/refused") == 0) {
		httpd_error(req, ERR_TOOBIG, "body: larger than the limit of 1024 bytes");
		return -1;
	}
	if (strcmp(req->path, "/upload") != 0 && strcmp(req->path, "/upload_flaky") != 0)
		return 0;
	atomic_fetch_add(&spooled, 1);
	return 64 << 20;
}

/* idle_s: the keep-alive idle timeout; 0: the default. */
static struct httpd *start(int idle_s)
{
	struct httpd *h = NULL;
	struct httpd_config cfg = {
	        .bind = "127.0.0.1", .threads = 2, .handler = handler, .spool = spool};
	if (idle_s) {
		connguard_limits_default(&cfg.limits);
		cfg.limits.idle_ms = idle_s * 1000;
	}
	CHECK_INT(httpd_start(&cfg, &h), 0);
	return h;
}

static void url_of(char *url, size_t len, struct httpd *h, const char *path)
{
	snprintf(url, len, "http://127.0.0.1:%d%s", httpd_port(h), path);
}

static void use_curl(int yes)
{
	if (yes)
		setenv("ANVIL_HTTP_CLIENT", "curl", 1);
	else
		unsetenv("ANVIL_HTTP_CLIENT");
}

static void answers_and_headers(int curl)
{
	use_curl(curl);
	httpc_global_init();
	struct httpd *h = start(0);
	char url[128], val[16];
	url_of(url, sizeof(url), h, "/echo");
	struct httpc *c = httpc_new();
	CHECK(httpc_header(c, "X-Anvil-Next-Offset", val, sizeof(val)) == NULL);
	struct buf out;
	buf_init(&out);
	int status = 0;
	httpc_set_header(c, "X-Anvil-Attempt: 42");
	CHECK_INT(httpc_do(c, "POST", url, "tok", "hi", 2, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	CHECK_STR(out.data, "{\"method\":\"POST\",\"auth\":\"Bearer tok\",\"extra\":\"42\","
	                    "\"body\":\"hi\"}");
	CHECK_STR(httpc_header(c, "x-anvil-next-offset", val, sizeof(val)), "1234");
	CHECK_STR(httpc_header(c, "X-Anvil-Next-Offset", val, 3), "12");
	CHECK(httpc_header(c, "X-Anvil-Next", val, sizeof(val)) == NULL);
	/* the same connection, another request: no body, no extra header */
	httpc_set_header(c, NULL);
	buf_reset(&out);
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 5000, &status, &out), 0);
	CHECK_STR(out.data, "{\"method\":\"GET\",\"auth\":\"\",\"extra\":\"\",\"body\":\"\"}");
	url_of(url, sizeof(url), h, "/nothing?x=1");
	buf_reset(&out);
	CHECK_INT(httpc_do(c, "DELETE", url, NULL, NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 404);
	CHECK_CONTAINS(out.data, "no such thing here");
	CHECK(httpc_header(c, "X-Anvil-Next-Offset", val, sizeof(val)) == NULL);
	httpd_stop(h);
	/* no answer: no headers, and why */
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 2000, &status, &out), ERR_UPSTREAM);
	CHECK(httpc_header(c, "X-Anvil-Next-Offset", val, sizeof(val)) == NULL);
	buf_cleanup(&out);
	httpc_free(c);
}

/* The keys the flaky routes saw, a line each. */
static void check_keys(const char *want)
{
	pthread_mutex_lock(&flaky_mu);
	CHECK_STR(flaky_keys, want);
	flaky_keys[0] = '\0';
	pthread_mutex_unlock(&flaky_mu);
	atomic_store(&flaky, 0);
}

/* A create with a key is sent again, with the same key, while the answer
 * is 503, and its last answer stands; without a key it is sent once; a
 * file's body is sent whole each time. */
static void retries_keep_the_key(int curl)
{
	use_curl(curl);
	struct httpd *h = start(0);
	char url[128], key[HTTPC_KEY_LEN + 1], other[HTTPC_KEY_LEN + 1], want[256];
	httpc_new_key(key);
	httpc_new_key(other);
	CHECK_INT(strlen(key), HTTPC_KEY_LEN);
	CHECK(strcmp(key, other) != 0);
	url_of(url, sizeof(url), h, "/flaky");
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "POST", url, "tok", "{}", 2, 5000, &status, &out), 0);
	CHECK_INT(status, 503);
	CHECK_INT(httpc_tries(c), 1);
	check_keys("-\n");
	httpc_set_retry(c, key, 30000);
	buf_reset(&out);
	CHECK_INT(httpc_do(c, "POST", url, "tok", "{}", 2, 5000, &status, &out), 0);
	CHECK_INT(status, 201);
	CHECK_STR(out.data, "{\"made\":1}"); /* the 503s' bodies are gone */
	CHECK_INT(httpc_tries(c), 3);
	snprintf(want, sizeof(want), "%s\n%s\n%s\n", key, key, key);
	check_keys(want);
	/* a budget too short for the second try: the 503 stands */
	httpc_set_retry(c, other, 1);
	CHECK_INT(httpc_do(c, "POST", url, "tok", "{}", 2, 5000, &status, &out), 0);
	CHECK_INT(status, 503);
	CHECK(httpc_tries(c) <= 2);
	atomic_store(&flaky, 0);
	pthread_mutex_lock(&flaky_mu);
	flaky_keys[0] = '\0';
	pthread_mutex_unlock(&flaky_mu);
	/* an upload: the body again from its start */
	int fd = big_file();
	char hex[HASH_HEX_LEN + 1];
	CHECK_INT(hash_fd_sha256(fd, hex, NULL), 0);
	lseek(fd, 0, SEEK_SET);
	url_of(url, sizeof(url), h, "/upload_flaky");
	httpc_set_retry(c, key, 30000);
	buf_reset(&out);
	CHECK_INT(httpc_put_file(c, url, "tok", fd, BIG, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	char body[160];
	snprintf(body, sizeof(body), "{\"size\":%d,\"sha256\":\"%s\"}", BIG, hex);
	CHECK_STR(out.data, body);
	check_keys(want);
	close(fd);
	/* ended: the next call carries no key and is sent once */
	httpc_set_retry(c, NULL, 0);
	url_of(url, sizeof(url), h, "/flaky");
	CHECK_INT(httpc_do(c, "POST", url, "tok", "{}", 2, 5000, &status, &out), 0);
	CHECK_INT(status, 503);
	check_keys("-\n");
	buf_cleanup(&out);
	httpc_free(c);
	httpd_stop(h);
}

TEST(retries_keep_the_key_event)
{
	retries_keep_the_key(0);
}

TEST(retries_keep_the_key_curl)
{
	retries_keep_the_key(1);
}

/* Reads one request (headers, then Content-Length bytes) from s into
 * req; its Idempotency-Key into key. */
static void read_request(int s, char *req, size_t len, char *key, size_t keylen)
{
	size_t n = 0;
	req[0] = '\0';
	while (n < len - 1) {
		char *end = strstr(req, "\r\n\r\n");
		const char *cl = strcasestr(req, "Content-Length: ");
		if (end &&
		    (size_t)(end + 4 - req) + (cl ? (size_t)strtoul(cl + 16, NULL, 10) : 0) <= n)
			break;
		ssize_t r = read(s, req + n, len - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		req[n] = '\0';
	}
	const char *k = strcasestr(req, "Idempotency-Key: ");
	snprintf(key, keylen, "%.*s", k ? (int)strcspn(k + 17, "\r") : 1, k ? k + 17 : "-");
}

struct lossy {
	int ls;
	char keys[2][64];
};

/* The first request: read, and its connection closed without an answer,
 * as a server killed after its commit does; the second is answered 201.
 * A connection that brings no request (the libevent backend's probe of
 * whether a connect fails) is closed and not counted. */
static void *lose_first_answer(void *arg)
{
	struct lossy *l = arg;
	char req[4096];
	for (int i = 0; i < 2;) {
		int s = accept(l->ls, NULL, NULL);
		read_request(s, req, sizeof(req), l->keys[i], sizeof(l->keys[i]));
		static const char created[] = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n"
		                              "Connection: close\r\n\r\n{}";
		if (req[0] && i == 1)
			CHECK(write(s, created, sizeof(created) - 1) ==
			      (ssize_t)sizeof(created) - 1);
		close(s);
		i += req[0] != '\0';
	}
	return NULL;
}

/* An answer lost with its connection (reset, EOF): the same request, with
 * the same key, on a new connection. */
static void lost_answer_is_sent_again(int curl)
{
	use_curl(curl);
	struct lossy l = {.ls = socket(AF_INET, SOCK_STREAM, 0)};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	CHECK_INT(bind(l.ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CHECK_INT(listen(l.ls, 2), 0);
	socklen_t salen = sizeof(sa);
	getsockname(l.ls, (struct sockaddr *)&sa, &salen);
	pthread_t t;
	pthread_create(&t, NULL, lose_first_answer, &l);
	char url[128], key[HTTPC_KEY_LEN + 1];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/jobs", ntohs(sa.sin_port));
	httpc_new_key(key);
	struct httpc *c = httpc_new();
	httpc_set_retry(c, key, 30000);
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "POST", url, "tok", "{\"a\":1}", 7, 5000, &status, &out), 0);
	CHECK_INT(status, 201);
	CHECK_STR(out.data, "{}");
	CHECK_INT(httpc_tries(c), 2);
	pthread_join(t, NULL);
	CHECK_STR(l.keys[0], key);
	CHECK_STR(l.keys[1], key);
	close(l.ls);
	buf_cleanup(&out);
	httpc_free(c);
}

TEST(lost_answer_is_sent_again_event)
{
	lost_answer_is_sent_again(0);
}

TEST(lost_answer_is_sent_again_curl)
{
	lost_answer_is_sent_again(1);
}

/* Nobody listening: tried until the budget is spent, then the failure. */
TEST(unreachable_is_tried_until_the_budget)
{
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	CHECK_INT(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	socklen_t salen = sizeof(sa);
	getsockname(ls, (struct sockaddr *)&sa, &salen);
	close(ls); /* a port nobody listens on */
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/jobs", ntohs(sa.sin_port));
	struct httpc *c = httpc_new();
	httpc_set_retry(c, "k", 2000);
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "POST", url, "tok", "{}", 2, 5000, &status, &out), ERR_UPSTREAM);
	CHECK(httpc_tries(c) >= 2); /* at 0, 250, 750 and 1500 ms */
	CHECK(httpc_error(c)[0] != '\0');
	buf_cleanup(&out);
	httpc_free(c);
}

TEST(answers_and_headers_event)
{
	answers_and_headers(0);
}

TEST(answers_and_headers_curl)
{
	answers_and_headers(1);
}

static void deadline_of_the_whole_call(int curl)
{
	use_curl(curl);
	struct httpd *h = start(0);
	char url[128];
	url_of(url, sizeof(url), h, "/slow");
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	int64_t t0 = now_ms();
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 300, &status, &out), ERR_TIMEOUT);
	CHECK(now_ms() - t0 < 1200);
	CHECK(httpc_error(c)[0] != '\0');
	/* and the handle still works afterwards */
	url_of(url, sizeof(url), h, "/echo");
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	buf_cleanup(&out);
	httpc_free(c);
	httpd_stop(h);
}

TEST(deadline_of_the_whole_call_event)
{
	deadline_of_the_whole_call(0);
}

TEST(deadline_of_the_whole_call_curl)
{
	deadline_of_the_whole_call(1);
}

/* The libevent backend says why it could not connect (libcurl says it in
 * its own words). */
TEST(unreachable_says_why)
{
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "GET", "http://127.0.0.1:1/x", NULL, NULL, 0, 2000, &status, &out),
	          ERR_UPSTREAM);
	CHECK_STR(httpc_error(c), "cannot connect to 127.0.0.1 port 1: Connection refused");
	CHECK_INT(
	        httpc_do(c, "GET", "http://nowhere.invalid/x", NULL, NULL, 0, 2000, &status, &out),
	        ERR_UPSTREAM);
	CHECK_CONTAINS(httpc_error(c), "cannot resolve nowhere.invalid");
	CHECK_INT(httpc_do(c, "GET", "ftp://127.0.0.1/x", NULL, NULL, 0, 2000, &status, &out),
	          ERR_UPSTREAM);
	CHECK_CONTAINS(httpc_error(c), "expected http://");
	/* https goes to libcurl, whatever the variable says */
	CHECK_INT(httpc_do(c, "GET", "https://127.0.0.1:1/x", NULL, NULL, 0, 2000, &status, &out),
	          ERR_UPSTREAM);
	CHECK_CONTAINS(httpc_error(c), "Failed to connect");
	buf_cleanup(&out);
	httpc_free(c);
}

static void files_both_ways(int curl)
{
	use_curl(curl);
	struct httpd *h = start(0);
	char url[128];
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	/* download: the 2xx body to the file */
	char path[] = "/tmp/anvil-httpc-get-XXXXXX";
	int fd = mkstemp(path);
	url_of(url, sizeof(url), h, "/file");
	CHECK_INT(httpc_get_file(c, url, NULL, fd, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	CHECK_INT(out.len, 0);
	struct stat st;
	CHECK_INT(fstat(fd, &st), 0);
	CHECK_INT(st.st_size, BIG);
	char want[HASH_HEX_LEN + 1], got[HASH_HEX_LEN + 1];
	int64_t size = 0;
	int src = big_file();
	CHECK_INT(hash_fd_sha256(src, want, &size), 0);
	CHECK_INT(hash_file_sha256(path, got, &size), 0);
	CHECK_STR(got, want);
	/* a non-2xx body goes to err_body, not to the file */
	url_of(url, sizeof(url), h, "/missing");
	CHECK_INT(httpc_get_file(c, url, NULL, fd, 5000, &status, &out), 0);
	CHECK_INT(status, 404);
	CHECK_CONTAINS(out.data, "no such thing here");
	CHECK_INT(fstat(fd, &st), 0);
	CHECK_INT(st.st_size, BIG);
	close(fd);
	unlink(path);
	/* upload: the file's bytes from its current offset */
	CHECK(lseek(src, 17, SEEK_SET) == 17);
	url_of(url, sizeof(url), h, "/upload");
	buf_reset(&out);
	CHECK_INT(httpc_put_file(c, url, "tok", src, BIG - 17, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	CHECK_CONTAINS(out.data, "\"size\":3145728");
	CHECK(atomic_load(&spooled) == 1);
	close(src);
	buf_cleanup(&out);
	httpc_free(c);
	httpd_stop(h);
}

TEST(files_both_ways_event)
{
	files_both_ways(0);
}

TEST(files_both_ways_curl)
{
	files_both_ways(1);
}

/* An upload the server refuses on its headers gets the server's answer
 * (not a broken pipe), without its body being sent first, and the handle
 * goes on working. */
static void refused_upload(int curl)
{
	use_curl(curl);
	struct httpd *h = start(0);
	char url[128];
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	int src = big_file();
	url_of(url, sizeof(url), h, "/refused");
	int64_t t0 = now_ms();
	CHECK_INT(httpc_put_file(c, url, "tok", src, BIG, 5000, &status, &out), 0);
	CHECK(now_ms() - t0 < 900); /* not libcurl's 1 s wait for a 100 Continue */
	CHECK_INT(status, 413);
	CHECK_CONTAINS(out.data, "larger than the limit of 1024 bytes");
	url_of(url, sizeof(url), h, "/echo");
	buf_reset(&out);
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	close(src);
	buf_cleanup(&out);
	httpc_free(c);
	httpd_stop(h);
}

TEST(refused_upload_event)
{
	refused_upload(0);
}

TEST(refused_upload_curl)
{
	refused_upload(1);
}

/* The server closes an idle kept connection (its timeout, 1 s here): the
 * next call goes out on a new one. */
static void kept_connection_closed(int curl)
{
	use_curl(curl);
	struct httpd *h = start(1);
	char url[128];
	url_of(url, sizeof(url), h, "/echo");
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	for (int i = 0; i < 2; i++) {
		buf_reset(&out);
		CHECK_INT(httpc_do(c, "POST", url, NULL, "x", 1, 5000, &status, &out), 0);
		CHECK_INT(status, 200);
		CHECK_CONTAINS(out.data, "\"body\":\"x\"");
		if (i == 0)
			sleep_ms(2500);
	}
	buf_cleanup(&out);
	httpc_free(c);
	httpd_stop(h);
}

TEST(kept_connection_closed_event)
{
	kept_connection_closed(0);
}

TEST(kept_connection_closed_curl)
{
	kept_connection_closed(1);
}

/* A kept connection idle for longer than its last call's deadline still
 * serves the next call (no stale timer of the last call fires on it). */
TEST(idle_longer_than_the_last_deadline)
{
	struct httpd *h = start(0);
	char url[128];
	url_of(url, sizeof(url), h, "/echo");
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 300, &status, &out), 0);
	sleep_ms(700);
	int64_t t0 = now_ms();
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	CHECK(now_ms() - t0 < 250);
	buf_cleanup(&out);
	httpc_free(c);
	httpd_stop(h);
}

/* One canned answer on [::1] (httpd listens on IPv4 only), saying which
 * Host the request named. */
static void *v6_answer(void *arg)
{
	int ls = *(int *)arg;
	int s = accept(ls, NULL, NULL);
	char req[4096] = "";
	size_t n = 0;
	while (n < sizeof(req) - 1 && !strstr(req, "\r\n\r\n")) {
		ssize_t r = read(s, req + n, sizeof(req) - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		req[n] = '\0';
	}
	const char *host = strstr(req, "Host: ");
	char body[128];
	int len = snprintf(body, sizeof(body), "%.*s", host ? (int)strcspn(host + 6, "\r") : 0,
	                   host ? host + 6 : "");
	char resp[512];
	int rlen = snprintf(resp, sizeof(resp),
	                    "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
	                    len, body);
	CHECK(write(s, resp, (size_t)rlen) == rlen);
	close(s);
	return NULL;
}

static void ipv6_literal(int curl)
{
	use_curl(curl);
	int ls = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	CHECK_INT(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CHECK_INT(listen(ls, 1), 0);
	socklen_t salen = sizeof(sa);
	getsockname(ls, (struct sockaddr *)&sa, &salen);
	pthread_t t;
	pthread_create(&t, NULL, v6_answer, &ls);
	char url[128], want[64];
	snprintf(url, sizeof(url), "http://[::1]:%d/v", ntohs(sa.sin6_port));
	snprintf(want, sizeof(want), "[::1]:%d", ntohs(sa.sin6_port));
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "GET", url, NULL, NULL, 0, 5000, &status, &out), 0);
	CHECK_INT(status, 200);
	CHECK_STR(out.data, want);
	pthread_join(t, NULL);
	close(ls);
	buf_cleanup(&out);
	httpc_free(c);
}

/* Takes one connection, reads a little of the request and hangs up while
 * the client still writes its body: a FIN first (the client's side is
 * then in CLOSE_WAIT), then the close, whose reset makes the client's next
 * write fail with EPIPE, the error that comes with SIGPIPE. */
static void *hang_up(void *arg)
{
	int ls = *(int *)arg;
	int s = accept(ls, NULL, NULL);
	char b[1024];
	CHECK(read(s, b, sizeof(b)) > 0);
	shutdown(s, SHUT_WR);
	sleep_ms(50);
	close(s);
	return NULL;
}

/* A server that hangs up while the body goes out: whether the client
 * sees the FIN on a read first or EPIPE on a write (which raises SIGPIPE,
 * held back during the call), the call fails with an error, the process
 * lives, and its SIGPIPE disposition is what it was. */
static void closed_mid_body(int curl)
{
	use_curl(curl);
	signal(SIGPIPE, SIG_DFL);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	CHECK_INT(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CHECK_INT(listen(ls, 1), 0);
	socklen_t salen = sizeof(sa);
	getsockname(ls, (struct sockaddr *)&sa, &salen);
	pthread_t t;
	pthread_create(&t, NULL, hang_up, &ls);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", ntohs(sa.sin_port));
	size_t len = 32 << 20;
	char *body = calloc(1, len);
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK(httpc_do(c, "POST", url, NULL, body, len, 5000, &status, &out) < 0);
	pthread_join(t, NULL);
	close(ls);
	struct sigaction now;
	sigaction(SIGPIPE, NULL, &now);
	CHECK(now.sa_handler == SIG_DFL);
	free(body);
	buf_cleanup(&out);
	httpc_free(c);
}

TEST(closed_mid_body_event)
{
	closed_mid_body(0);
}

TEST(closed_mid_body_curl)
{
	closed_mid_body(1);
}

TEST(ipv6_literal_event)
{
	ipv6_literal(0);
}

TEST(ipv6_literal_curl)
{
	ipv6_literal(1);
}

TEST_MAIN()
