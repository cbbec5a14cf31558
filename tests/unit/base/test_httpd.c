/* The HTTP server's connection guard on a real server (base/httpd.h,
 * base/connguard.h): slow clients are cut, an address over its limit is
 * refused, a full server makes room, and long polls, streams and uploads
 * that keep their pace are not cut. Deadlines here are 1 s; the clients
 * are raw sockets bound to other loopback addresses (127.0.0.2, ...). The
 * waits below are upper bounds on what must happen, never speed checks. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "base/connguard.h"
#include "base/httpd.h"
#include "base/util.h"

static struct httpd_req *parked; /* the long poll, until resumed */
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;

static int64_t spool(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	return strcmp(req->path, "/upload") == 0 ? 64 << 20 : 0;
}

static int handler(struct httpd_req *req, void *ctx)
{
	(void)ctx;
	if (strcmp(req->path, "/poll") == 0) {
		pthread_mutex_lock(&parked_mu);
		parked = req;
		httpd_suspend(req);
		pthread_mutex_unlock(&parked_mu);
		return HTTPD_SUSPENDED;
	}
	buf_printf(&req->out, "{\"path\":\"%s\",\"size\":%zu}", req->path, req->body_len);
	return HTTPD_DONE;
}

/* deadline_ms: of headers, bodies and idle connections. */
static struct httpd *start(int64_t max, int64_t per_address, int64_t deadline_ms)
{
	struct httpd_config cfg = {.threads = 2, .handler = handler, .spool = spool};
	connguard_limits_default(&cfg.limits);
	cfg.limits.max_connections = max;
	cfg.limits.max_per_address = per_address;
	cfg.limits.header_ms = cfg.limits.body_ms = cfg.limits.idle_ms = deadline_ms;
	cfg.limits.body_min_rate = 1024;
	struct httpd *h = NULL;
	CHECK_INT(httpd_start(&cfg, &h), 0);
	return h;
}

/* A TCP connection to the server from ip (a loopback address). */
static int connect_from(const char *ip, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, ip, &a.sin_addr);
	CHECK_INT(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	a.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	CHECK_INT(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
	CHECK_INT(send(fd, s, n, MSG_NOSIGNAL), (long long)n);
}

/* 1 when the server closed fd within ms (end of file or reset); what it
 * sent before is skipped. */
static int closed_within(int fd, int ms)
{
	int64_t end = now_ms() + ms;
	while (now_ms() < end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		char tmp[4096];
		ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 1;
	}
	return 0;
}

/* GET path from ip with Connection: close: the status (0: none) and body. */
static int get(int port, const char *ip, const char *path, char *body, size_t len)
{
	int fd = connect_from(ip, port);
	char req[256];
	int n = snprintf(req, sizeof(req),
	                 "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
	send_all(fd, req, (size_t)n);
	char all[8192];
	size_t got = 0;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		CHECK(poll(&p, 1, 20000) == 1);
		ssize_t r = recv(fd, all + got, sizeof(all) - 1 - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	all[got] = '\0';
	close(fd);
	int status = strncmp(all, "HTTP/1.1 ", 9) == 0 ? (int)strtol(all + 9, NULL, 10) : 0;
	const char *b = strstr(all, "\r\n\r\n");
	snprintf(body, len, "%s", b ? b + 4 : "");
	return status;
}

/* The value of the sample key ("name{labels} ") in the server's metrics. */
static uint64_t sample(struct httpd *h, const char *key)
{
	struct buf m;
	buf_init(&m);
	httpd_metrics(h, "t", &m);
	const char *p = strstr(m.data, key);
	unsigned long long v = p ? strtoull(p + strlen(key), NULL, 10) : 0;
	buf_cleanup(&m);
	return v;
}

static uint64_t metric(struct httpd *h, const char *reason)
{
	char key[96];
	snprintf(key, sizeof(key), "t_http_connection_drops_total{reason=\"%s\"} ", reason);
	return sample(h, key);
}

/* Waits until the server has taken n connections (they are counted once
 * its threads accept them, after the client's connect returned). */
static void wait_open(struct httpd *h, uint64_t n)
{
	int64_t end = now_ms() + 20000;
	while (sample(h, "\nt_http_connections ") != n) {
		CHECK(now_ms() < end);
		sleep_ms(10);
	}
}

/* A client sending a header byte every 200 ms never lets MHD's idle
 * timeout fire; the header deadline cuts it, and others are served
 * meanwhile. */
TEST(slow_headers_are_cut_while_others_are_served)
{
	struct httpd *h = start(1000, 0, 1000);
	int port = httpd_port(h);
	int fd = connect_from("127.0.0.2", port);
	char line[160] = "GET /slow HTTP/1.1\r\nX-Slow: ";
	memset(line + strlen(line), 'a', sizeof(line) - 1 - strlen(line));
	int cut = 0; /* within the trickle: 30 s of it */
	for (size_t i = 0; i < strlen(line) && !cut; i++)
		cut = send(fd, line + i, 1, MSG_NOSIGNAL) != 1 || closed_within(fd, 200);
	CHECK(cut);
	close(fd);
	CHECK_INT(metric(h, "header_deadline"), 1);
	char body[256];
	CHECK_INT(get(port, "127.0.0.3", "/fast", body, sizeof(body)), 200);
	CHECK_CONTAINS(body, "\"path\":\"/fast\"");
	httpd_stop(h);
}

/* A body held in memory that trickles is cut past its deadline. */
TEST(slow_bodies_are_cut)
{
	struct httpd *h = start(1000, 0, 1000);
	int fd = connect_from("127.0.0.2", httpd_port(h));
	const char *head = "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
	send_all(fd, head, strlen(head));
	int cut = 0; /* within the trickle: 200 s of it */
	for (int i = 0; i < 1000 && !cut; i++)
		cut = send(fd, "a", 1, MSG_NOSIGNAL) != 1 || closed_within(fd, 200);
	CHECK(cut);
	close(fd);
	CHECK_INT(metric(h, "body_deadline"), 1);
	httpd_stop(h);
}

/* The limit per address refuses that address's next connection at once;
 * another address is served. */
TEST(an_address_over_its_limit_is_refused)
{
	struct httpd *h = start(1000, 3, 60000);
	int port = httpd_port(h);
	int held[3];
	for (int i = 0; i < 3; i++)
		held[i] = connect_from("127.0.0.2", port);
	wait_open(h, 3);
	int over = connect_from("127.0.0.2", port); /* the kernel accepts; the server closes */
	CHECK(closed_within(over, 20000));
	close(over);
	CHECK_INT(metric(h, "per_address"), 1);
	char body[256];
	CHECK_INT(get(port, "127.0.0.3", "/other", body, sizeof(body)), 200);
	for (int i = 0; i < 3; i++)
		close(held[i]);
	httpd_stop(h);
}

/* A full server closes the connection that waited longest for its
 * request and serves the newcomer. */
TEST(a_full_server_makes_room)
{
	struct httpd *h = start(16, 0, 60000);
	int port = httpd_port(h);
	int held[16];
	for (int i = 0; i < 16; i++) {
		held[i] = connect_from("127.0.0.2", port);
		wait_open(h, (uint64_t)i + 1); /* in order: held[0] waits longest */
	}
	char body[256];
	CHECK_INT(get(port, "127.0.0.3", "/new", body, sizeof(body)), 200);
	CHECK(closed_within(held[0], 20000));
	CHECK(metric(h, "evicted") >= 1);
	for (int i = 0; i < 16; i++)
		close(held[i]);
	httpd_stop(h);
}

static void *resume_later(void *arg)
{
	(void)arg;
	sleep_ms(3000); /* past every 1 s deadline */
	pthread_mutex_lock(&parked_mu);
	httpd_json(parked, 200, "{\"late\":true}");
	httpd_resume(parked);
	pthread_mutex_unlock(&parked_mu);
	return NULL;
}

/* A long poll is not a slow client. */
TEST(a_long_poll_outlives_every_deadline)
{
	struct httpd *h = start(1000, 0, 1000);
	pthread_t t;
	pthread_create(&t, NULL, resume_later, NULL);
	char body[256];
	CHECK_INT(get(httpd_port(h), "127.0.0.2", "/poll", body, sizeof(body)), 200);
	CHECK_CONTAINS(body, "\"late\":true");
	pthread_join(t, NULL);
	CHECK_INT(metric(h, "header_deadline") + metric(h, "body_deadline"), 0);
	httpd_stop(h);
}

/* An upload that keeps the minimum rate (1 KiB/s here) may take longer
 * than the body's deadline: 8 KiB at about 4 KiB/s. */
TEST(an_upload_keeping_its_rate_is_not_cut)
{
	struct httpd *h = start(1000, 0, 1000);
	int fd = connect_from("127.0.0.2", httpd_port(h));
	const char *head = "PUT /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	                   "Content-Length: 8192\r\n\r\n";
	send_all(fd, head, strlen(head));
	char chunk[512];
	memset(chunk, 'u', sizeof(chunk));
	for (int i = 0; i < 16; i++) {
		send_all(fd, chunk, sizeof(chunk));
		sleep_ms(125);
	}
	char all[1024];
	size_t got = 0;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		CHECK(poll(&p, 1, 20000) == 1);
		ssize_t r = recv(fd, all + got, sizeof(all) - 1 - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	all[got] = '\0';
	close(fd);
	CHECK_CONTAINS(all, "HTTP/1.1 200");
	CHECK_CONTAINS(all, "\"size\":8192");
	CHECK_INT(metric(h, "body_deadline"), 0);
	httpd_stop(h);
}

TEST_MAIN()
