/* The upgrade client (base/upgrade.h) against a real httpd taking
 * connections over (httpd_upgrade), and the relay (base/relay.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/httpd.h"
#include "base/relay.h"
#include "base/upgrade.h"
#include "base/util.h"

static atomic_int streams_ended;
static atomic_int freed_unused;
static char extra_seen[64];

/* Echoes what the client sends (extra first) until it closes. */
static void echo(const struct httpd_stream *st, void *ctx)
{
	(void)ctx;
	if (!st) {
		atomic_fetch_add(&freed_unused, 1);
		return;
	}
	snprintf(extra_seen, sizeof(extra_seen), "%.*s", (int)st->extra_len, st->extra);
	if (st->extra_len)
		relay_write_all(st->fd, st->extra, st->extra_len, 1000);
	for (;;) {
		char b[4096];
		ssize_t n = read(st->fd, b, sizeof(b));
		if (n == 0 || (n < 0 && errno != EAGAIN))
			break;
		if (n > 0) {
			relay_write_all(st->fd, b, (size_t)n, 1000);
			continue;
		}
		struct pollfd p = {.fd = st->fd, .events = POLLIN};
		poll(&p, 1, -1);
	}
	atomic_fetch_add(&streams_ended, 1);
}

static int handler(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	const char *auth = httpd_header(req, "Authorization");
	if (!auth || strcmp(auth, "Bearer sesame") != 0) {
		httpd_error(req, ERR_AUTH, "missing or wrong token");
	} else if (!httpd_wants_upgrade(req, "anvil-stream")) {
		httpd_error(req, ERR_INVALID, "this route needs Upgrade: anvil-stream");
	} else {
		httpd_upgrade(req, "anvil-stream", echo, NULL);
	}
	return HTTPD_DONE;
}

/* deadline_s: the keep-alive idle timeout and the headers' and bodies'
 * deadlines (base/connguard.h); 0: the defaults. */
static struct httpd *start(int deadline_s, char *url, size_t len)
{
	struct httpd_config cfg = {.handler = handler, .threads = 2};
	if (deadline_s) {
		connguard_limits_default(&cfg.limits);
		cfg.limits.idle_ms = cfg.limits.header_ms = cfg.limits.body_ms = deadline_s * 1000;
	}
	struct httpd *h = NULL;
	CHECK_INT(httpd_start(&cfg, &h), 0);
	snprintf(url, len, "http://127.0.0.1:%d", httpd_port(h));
	return h;
}

/* Reads exactly n bytes (the fd is non-blocking) within 5 s. */
static void read_exact(int fd, char *out, size_t n)
{
	size_t got = 0;
	int64_t deadline = now_ms() + 5000;
	while (got < n) {
		ssize_t r = read(fd, out + got, n - got);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		CHECK(r < 0 && errno == EAGAIN);
		CHECK(now_ms() < deadline);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		poll(&p, 1, 100);
	}
}

TEST(upgrade_round_trip)
{
	char url[64];
	struct httpd *h = start(0, url, sizeof(url));
	struct upgrade u;
	CHECK_INT(upgrade_open(&u, url, "/stream", "sesame", "anvil-stream", 5000), 0);
	CHECK_INT(u.status, 101);
	CHECK(u.fd >= 0);
	CHECK_INT(relay_write_all(u.fd, "ping", 4, 1000), 0);
	char back[5] = "";
	read_exact(u.fd, back, 4);
	CHECK_STR(back, "ping");
	upgrade_close(&u);
	httpd_stop(h);
	CHECK_INT(atomic_load(&streams_ended), 1);
}

/* A refusal is an ordinary answer: its status and body, no stream. */
TEST(refused_upgrade_keeps_the_answer)
{
	char url[64];
	struct httpd *h = start(0, url, sizeof(url));
	struct upgrade u;
	CHECK_INT(upgrade_open(&u, url, "/stream", "wrong", "anvil-stream", 5000), 0);
	CHECK_INT(u.status, 401);
	CHECK_INT(u.fd, -1);
	CHECK_CONTAINS(u.body.data, "missing or wrong token");
	upgrade_close(&u);
	/* a plain request to the same route is refused by the handler */
	struct httpc *c = httpc_new();
	struct buf out;
	buf_init(&out);
	int status = 0;
	CHECK_INT(httpc_do(c, "POST", url, "sesame", "", 0, 5000, &status, &out), 0);
	CHECK_INT(status, 400);
	CHECK_CONTAINS(out.data, "needs Upgrade");
	buf_cleanup(&out);
	httpc_free(c);
	httpd_stop(h);
}

TEST(unreachable_server_is_upstream)
{
	struct upgrade u;
	int rc = upgrade_open(&u, "http://127.0.0.1:1", "/x", NULL, "anvil-stream", 2000);
	CHECK_INT(rc, ERR_UPSTREAM);
	CHECK(u.error[0] != '\0');
	upgrade_close(&u);
}

static int raw_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	CHECK_INT(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Bytes a client sends right behind its request reach the stream first. */
TEST(bytes_behind_the_request_reach_the_stream)
{
	char url[64];
	struct httpd *h = start(0, url, sizeof(url));
	int fd = raw_connect(httpd_port(h));
	const char req[] = "POST /stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\n"
	                   "Connection: Upgrade\r\nUpgrade: anvil-stream\r\nContent-Length: 0\r\n"
	                   "\r\nearly";
	CHECK_INT(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
	char in[512] = "";
	size_t got = 0;
	while (!strstr(in, "\r\n\r\nearly") && got < sizeof(in) - 1) {
		ssize_t n = read(fd, in + got, sizeof(in) - 1 - got);
		CHECK(n > 0);
		got += (size_t)n;
	}
	CHECK(strncmp(in, "HTTP/1.1 101", 12) == 0);
	CHECK_CONTAINS(in, "Upgrade: anvil-stream");
	CHECK_STR(extra_seen, "early");
	close(fd);
	httpd_stop(h);
}

/* A stream is not an idle or slow HTTP connection: neither the
 * connection timeout nor a request's deadlines end it. */
TEST(stream_outlives_the_connection_timeout)
{
	char url[64];
	struct httpd *h = start(1, url, sizeof(url));
	struct upgrade u;
	CHECK_INT(upgrade_open(&u, url, "/stream", "sesame", "anvil-stream", 5000), 0);
	CHECK_INT(u.status, 101);
	sleep_ms(2500);
	CHECK_INT(relay_write_all(u.fd, "late", 4, 1000), 0);
	char back[5] = "";
	read_exact(u.fd, back, 4);
	CHECK_STR(back, "late");
	upgrade_close(&u);
	httpd_stop(h);
}

/* httpd_stop ends open streams (their sockets shut down) and waits. */
TEST(stop_ends_open_streams)
{
	char url[64];
	struct httpd *h = start(0, url, sizeof(url));
	struct upgrade u;
	CHECK_INT(upgrade_open(&u, url, "/stream", "sesame", "anvil-stream", 5000), 0);
	CHECK_INT(u.status, 101);
	/* the 101 may arrive before the stream's thread runs: wait for an echo */
	CHECK_INT(relay_write_all(u.fd, "up", 2, 1000), 0);
	char up[3] = "";
	read_exact(u.fd, up, 2);
	httpd_stop(h);
	CHECK_INT(atomic_load(&streams_ended), 1);
	char b[8];
	int64_t deadline = now_ms() + 5000;
	ssize_t n;
	while ((n = read(u.fd, b, sizeof(b))) < 0 && errno == EAGAIN && now_ms() < deadline) {
		struct pollfd p = {.fd = u.fd, .events = POLLIN};
		poll(&p, 1, 100);
	}
	CHECK(n <= 0); /* closed */
	upgrade_close(&u);
}

struct relay_args {
	int a, b, rc;
	struct relay_stats stats;
};

static void *relay_thread(void *arg)
{
	struct relay_args *r = arg;
	r->rc = relay_run(r->a, r->b, "A0", 2, "B0", 2, &r->stats);
	return NULL;
}

/* Bytes go both ways (pre-read bytes first); when one side closes, what
 * was on its way to the other is still delivered. */
TEST(relay_splices_both_ways)
{
	int x[2], y[2];
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, x), 0);
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, y), 0);
	struct relay_args r = {.a = x[1], .b = y[1]};
	pthread_t t;
	pthread_create(&t, NULL, relay_thread, &r);
	char b[16] = "";
	CHECK_INT(read(x[0], b, 2), 2);
	CHECK(memcmp(b, "A0", 2) == 0);
	CHECK_INT(read(y[0], b, 2), 2);
	CHECK(memcmp(b, "B0", 2) == 0);
	CHECK_INT(write(x[0], "to-b", 4), 4);
	CHECK_INT(read(y[0], b, 4), 4);
	CHECK(memcmp(b, "to-b", 4) == 0);
	CHECK_INT(write(y[0], "last", 4), 4);
	close(y[0]);
	pthread_join(t, NULL);
	CHECK_INT(r.rc, 0);
	CHECK_INT(read(x[0], b, 4), 4);
	CHECK(memcmp(b, "last", 4) == 0);
	CHECK_INT(r.stats.a_to_b, 6);
	CHECK_INT(r.stats.b_to_a, 6);
	close(x[0]);
	close(x[1]);
	close(y[1]);
}

TEST_MAIN()
