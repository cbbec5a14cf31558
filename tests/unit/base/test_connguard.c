/* The connection guard without a server: sockets are socketpairs, time is
 * given. A shut-down connection is one whose peer reads end-of-file. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "base/buf.h"
#include "base/connguard.h"
#include "base/err.h"

static struct sockaddr_in addr(const char *ip)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(40000)};
	inet_pton(AF_INET, ip, &sa.sin_addr);
	return sa;
}

#define SA(a) ((const struct sockaddr *)&(a)), (socklen_t)sizeof(a)

/* A connection from ip: the guard's end of a socketpair; *peer the client's. */
struct pair {
	struct connguard_conn *c;
	int fd, peer;
};

/* A connection admitted already (connguard_admit said 1). */
static struct pair open_admitted(struct connguard *g, const char *ip, int64_t now)
{
	struct pair p;
	int sv[2];
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	struct sockaddr_in a = addr(ip);
	p.c = connguard_open(g, sv[0], SA(a), now);
	p.fd = sv[0];
	p.peer = sv[1];
	return p;
}

static struct pair open_from(struct connguard *g, const char *ip, int64_t now)
{
	struct sockaddr_in a = addr(ip);
	CHECK_INT(connguard_admit(g, SA(a), now), 1);
	return open_admitted(g, ip, now);
}

/* 1 when the guard shut p's socket down: its peer reads end-of-file. */
static int was_shut(const struct pair *p)
{
	char ch;
	ssize_t n = read(p->peer, &ch, 1);
	CHECK(n == 0 || (n < 0 && errno == EAGAIN));
	return n == 0;
}

static void close_pair(struct connguard *g, struct pair *p)
{
	connguard_close(g, p->c);
	close(p->fd);
	close(p->peer);
}

static struct connguard *guard(int64_t max, int64_t per_address)
{
	struct connguard_limits l;
	connguard_limits_default(&l);
	l.max_connections = max;
	l.max_per_address = per_address;
	return connguard_new(&l);
}

TEST(per_address_limit_refuses_the_next_from_that_address_only)
{
	struct connguard *g = guard(100, 2);
	struct pair a = open_from(g, "127.0.0.2", 0), b = open_from(g, "127.0.0.2", 0);
	struct sockaddr_in same = addr("127.0.0.2"), other = addr("127.0.0.3");
	CHECK_INT(connguard_admit(g, SA(same), 0), 0);
	CHECK_INT(connguard_admit(g, SA(other), 0), 1);
	CHECK_INT(connguard_drops(g, CONNGUARD_PER_ADDRESS), 1);
	close_pair(g, &a); /* one closes: room again */
	CHECK_INT(connguard_admit(g, SA(same), 0), 1);
	CHECK(!was_shut(&b));
	close_pair(g, &b);
	CHECK_INT(connguard_open_count(g), 0);
	connguard_free(g);
}

TEST(no_per_address_limit_at_zero)
{
	struct connguard *g = guard(100, 0);
	struct pair p[5];
	for (int i = 0; i < 5; i++)
		p[i] = open_from(g, "127.0.0.2", 0);
	CHECK_INT(connguard_drops(g, CONNGUARD_PER_ADDRESS), 0);
	for (int i = 0; i < 5; i++)
		close_pair(g, &p[i]);
	connguard_free(g);
}

/* At max_connections a newcomer closes the connection that has waited
 * longest for its request: not a long poll, not an upload, not a stream. */
TEST(total_limit_evicts_the_longest_waiting)
{
	struct connguard *g = guard(4, 0);
	struct pair poll = open_from(g, "10.0.0.1", 0);
	connguard_phase(g, poll.c, CONNGUARD_BUSY, 1);
	struct pair upload = open_from(g, "10.0.0.2", 2);
	connguard_phase(g, upload.c, CONNGUARD_SPOOL, 2);
	struct pair slow = open_from(g, "10.0.0.3", 3);   /* headers since 3 */
	struct pair slower = open_from(g, "10.0.0.4", 4); /* headers since 4 */
	struct sockaddr_in a = addr("10.0.0.5");
	CHECK_INT(connguard_admit(g, SA(a), 5), 1);
	CHECK(was_shut(&slow));
	CHECK(!was_shut(&slower) && !was_shut(&poll) && !was_shut(&upload));
	CHECK_INT(connguard_drops(g, CONNGUARD_EVICTED), 1);
	/* slow is closing (its fd until MHD closes it): the newcomer took its place */
	struct pair fresh = open_admitted(g, "10.0.0.5", 5);
	CHECK_INT(connguard_admit(g, SA(a), 6), 1);
	CHECK(was_shut(&slower));
	close_pair(g, &slow);
	close_pair(g, &slower);
	close_pair(g, &fresh);
	close_pair(g, &poll);
	close_pair(g, &upload);
	connguard_free(g);
}

TEST(total_limit_refuses_when_none_waits)
{
	struct connguard *g = guard(2, 0);
	struct pair a = open_from(g, "10.0.0.1", 0), b = open_from(g, "10.0.0.2", 0);
	connguard_phase(g, a.c, CONNGUARD_BUSY, 1);
	connguard_phase(g, b.c, CONNGUARD_STREAM, 1);
	struct sockaddr_in c = addr("10.0.0.3");
	CHECK_INT(connguard_admit(g, SA(c), 2), 0);
	CHECK_INT(connguard_drops(g, CONNGUARD_TOTAL), 1);
	CHECK(!was_shut(&a) && !was_shut(&b));
	close_pair(g, &a);
	close_pair(g, &b);
	connguard_free(g);
}

TEST(headers_past_their_deadline_are_cut)
{
	struct connguard *g = guard(100, 0);
	struct pair p = open_from(g, "127.0.0.2", 1000);
	connguard_tick(g, 1000 + CONNGUARD_HEADER_MS - 1);
	CHECK(!was_shut(&p));
	connguard_tick(g, 1000 + CONNGUARD_HEADER_MS);
	CHECK(was_shut(&p));
	CHECK_INT(connguard_drops(g, CONNGUARD_HEADER_DEADLINE), 1);
	connguard_tick(g, 1000 + 10 * CONNGUARD_HEADER_MS); /* counted once */
	CHECK_INT(connguard_drops(g, CONNGUARD_HEADER_DEADLINE), 1);
	close_pair(g, &p);
	connguard_free(g);
}

TEST(a_body_in_memory_has_its_deadline_from_the_headers)
{
	struct connguard *g = guard(100, 0);
	struct pair p = open_from(g, "127.0.0.2", 0);
	connguard_phase(g, p.c, CONNGUARD_BODY, 4000);
	connguard_tick(g, 4000 + CONNGUARD_BODY_MS - 1); /* past the headers' deadline */
	CHECK(!was_shut(&p));
	connguard_tick(g, 4000 + CONNGUARD_BODY_MS);
	CHECK(was_shut(&p));
	CHECK_INT(connguard_drops(g, CONNGUARD_BODY_DEADLINE), 1);
	close_pair(g, &p);
	connguard_free(g);
}

/* Long polls, handlers and streams are never cut, however long. */
TEST(busy_and_streams_have_no_deadline)
{
	struct connguard *g = guard(100, 0);
	struct pair a = open_from(g, "127.0.0.2", 0), b = open_from(g, "127.0.0.2", 0);
	connguard_phase(g, a.c, CONNGUARD_BUSY, 10);
	connguard_phase(g, b.c, CONNGUARD_BUSY, 10);
	connguard_phase(g, b.c, CONNGUARD_STREAM, 20);
	connguard_tick(g, 48LL * 3600 * 1000);
	CHECK(!was_shut(&a) && !was_shut(&b));
	close_pair(g, &a);
	close_pair(g, &b);
	connguard_free(g);
}

/* An upload may take hours as long as it keeps the minimum rate on
 * average past its grace (body_ms). */
TEST(a_spooled_body_keeps_a_minimum_rate)
{
	struct connguard *g = guard(100, 0);
	struct pair p = open_from(g, "127.0.0.2", 0);
	connguard_phase(g, p.c, CONNGUARD_SPOOL, 0);
	int64_t rate = CONNGUARD_BODY_MIN_RATE, t = 0;
	for (int i = 0; i < 3600; i++) { /* an hour at twice the minimum */
		connguard_received(g, p.c, (size_t)(2 * rate));
		t += 1000;
		connguard_tick(g, t);
	}
	CHECK(!was_shut(&p));
	/* then it stalls: cut once it falls behind by more than the grace */
	int64_t due = CONNGUARD_BODY_MS + 3600 * 2 * 1000;
	connguard_tick(g, due - 1);
	CHECK(!was_shut(&p));
	connguard_tick(g, due);
	CHECK(was_shut(&p));
	CHECK_INT(connguard_drops(g, CONNGUARD_BODY_DEADLINE), 1);
	close_pair(g, &p);
	connguard_free(g);
}

TEST(a_kept_alive_connection_is_closed_when_idle)
{
	struct connguard *g = guard(100, 0);
	struct pair p = open_from(g, "127.0.0.2", 0);
	connguard_phase(g, p.c, CONNGUARD_BODY, 10);
	connguard_phase(g, p.c, CONNGUARD_BUSY, 11);
	connguard_phase(g, p.c, CONNGUARD_IDLE, 100000); /* a long poll answered late */
	connguard_tick(g, 100000 + CONNGUARD_IDLE_MS - 1);
	CHECK(!was_shut(&p));
	connguard_tick(g, 100000 + CONNGUARD_IDLE_MS);
	CHECK(was_shut(&p));
	CHECK_INT(connguard_drops(g, CONNGUARD_IDLE_TIMEOUT), 1);
	CHECK_INT(connguard_drops(g, CONNGUARD_HEADER_DEADLINE), 0);
	close_pair(g, &p);
	connguard_free(g);
}

/* Reads what fd 2 got since redirect_stderr. */
static char *stderr_text(const char *path)
{
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	static char text[65536];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

static int count_lines(const char *text, const char *needle)
{
	int n = 0;
	for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

static void redirect_stderr(char *path, size_t len)
{
	snprintf(path, len, "/tmp/anvil-test-connguard-XXXXXX");
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	dup2(fd, 2);
	close(fd);
}

/* A thousand drops of one reason: one line at once with its count, none
 * more within the interval, then one with the count since. */
TEST(drops_are_logged_once_per_interval_with_their_count)
{
	char path[64];
	redirect_stderr(path, sizeof(path));
	struct connguard *g = guard(100, 1);
	struct pair p = open_from(g, "127.0.0.9", 0);
	struct sockaddr_in a = addr("127.0.0.9");
	for (int i = 0; i < 1000; i++)
		CHECK_INT(connguard_admit(g, SA(a), 0), 0);
	connguard_tick(g, 1);
	for (int i = 0; i < 500; i++)
		CHECK_INT(connguard_admit(g, SA(a), 0), 0);
	for (int t = 2; t < CONNGUARD_LOG_INTERVAL_MS; t += 1000)
		connguard_tick(g, t);
	char *text = stderr_text(path);
	CHECK_INT(count_lines(text, "http-max-per-address"), 1);
	CHECK_CONTAINS(text, "count=1000 ");
	CHECK_CONTAINS(text, "last_addr=127.0.0.9");
	connguard_tick(g, 1 + CONNGUARD_LOG_INTERVAL_MS);
	text = stderr_text(path);
	CHECK_INT(count_lines(text, "http-max-per-address"), 2);
	CHECK_CONTAINS(text, "count=500 ");
	CHECK_CONTAINS(text, "total=1500 ");
	connguard_tick(g, 10 * CONNGUARD_LOG_INTERVAL_MS); /* nothing new: no line */
	CHECK_INT(count_lines(stderr_text(path), "http-max-per-address"), 2);
	close_pair(g, &p);
	connguard_free(g);
	unlink(path);
}

/* Idle closes are routine: counted, not logged. */
TEST(idle_closes_are_not_logged)
{
	char path[64];
	redirect_stderr(path, sizeof(path));
	struct connguard *g = guard(100, 0);
	struct pair p = open_from(g, "127.0.0.2", 0);
	connguard_phase(g, p.c, CONNGUARD_IDLE, 0);
	connguard_tick(g, CONNGUARD_IDLE_MS);
	CHECK(was_shut(&p));
	close_pair(g, &p);
	connguard_free(g);
	CHECK_STR(stderr_text(path), "");
	unlink(path);
}

/* libmicrohttpd's messages: its limit counts as a refusal, a client's
 * half-way close only as an abort, the rest as library messages, and none
 * of them a line each. */
TEST(library_messages_are_counted_and_rate_limited)
{
	char path[64];
	redirect_stderr(path, sizeof(path));
	struct connguard *g = guard(100, 0);
	for (int i = 0; i < 300; i++) {
		connguard_library_message(
		        g, "Server reached connection limit. Closing inbound connection.\n", 0);
		connguard_library_message(
		        g, "Connection was closed by remote side with incomplete request.\n", 0);
		connguard_library_message(g, "Error accepting connection: Too many open files\n",
		                          0);
		connguard_library_message(g, "Something else went wrong\n", 0);
	}
	connguard_tick(g, 1);
	CHECK_INT(connguard_drops(g, CONNGUARD_TOTAL), 300);
	CHECK_INT(connguard_drops(g, CONNGUARD_ACCEPT_FAILED), 300);
	struct buf m;
	buf_init(&m);
	connguard_metrics(g, "anvil", &m);
	CHECK_CONTAINS(m.data, "anvil_http_client_aborts_total 300\n");
	CHECK_CONTAINS(m.data, "anvil_http_library_messages_total 300\n");
	buf_cleanup(&m);
	char *text = stderr_text(path);
	CHECK_INT(count_lines(text, "\n"), 3); /* total, accept, library: one each */
	CHECK_CONTAINS(text, "\"Error accepting connection: Too many open files\" count=300");
	CHECK_CONTAINS(text, "libmicrohttpd: \"Something else went wrong\" count=300");
	connguard_free(g);
	unlink(path);
}

/* Counts said at free are not lost. */
TEST(free_logs_the_counts_not_logged_yet)
{
	char path[64];
	redirect_stderr(path, sizeof(path));
	struct connguard *g = guard(100, 0);
	struct pair p = open_from(g, "127.0.0.2", 0);
	connguard_tick(g, CONNGUARD_HEADER_MS); /* logs 1 */
	close_pair(g, &p);
	p = open_from(g, "127.0.0.2", CONNGUARD_HEADER_MS);
	connguard_tick(g, 2 * CONNGUARD_HEADER_MS); /* within the interval: pending */
	close_pair(g, &p);
	connguard_free(g);
	CHECK_INT(count_lines(stderr_text(path), "http-header-timeout"), 2);
	unlink(path);
}

TEST(metrics_carry_every_reason)
{
	struct connguard *g = guard(100, 0);
	struct pair p = open_from(g, "127.0.0.2", 0);
	struct buf m;
	buf_init(&m);
	connguard_metrics(g, "anvil_agent", &m);
	CHECK_CONTAINS(m.data, "# TYPE anvil_agent_http_connections gauge\n"
	                       "anvil_agent_http_connections 1\n");
	CHECK_CONTAINS(m.data, "anvil_agent_http_connections_max 100\n");
	const char *reasons[] = {"per_address",   "total",        "evicted",      "header_deadline",
	                         "body_deadline", "idle_timeout", "accept_failed"};
	char line[128];
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
		snprintf(line, sizeof(line),
		         "anvil_agent_http_connection_drops_total{reason=\"%s\"} 0\n", reasons[i]);
		CHECK_CONTAINS(m.data, line);
	}
	buf_cleanup(&m);
	close_pair(g, &p);
	connguard_free(g);
}

TEST(options_parse_within_their_bounds)
{
	struct connguard_limits l;
	connguard_limits_default(&l);
	const char *why = NULL;
	CHECK_INT(connguard_option_set(&l, "http-max-connections", "20000", &why), 0);
	CHECK_INT(l.max_connections, 20000);
	CHECK_INT(connguard_option_set(&l, "http-max-per-address", "0", &why), 0);
	CHECK_INT(l.max_per_address, 0);
	CHECK_INT(connguard_option_set(&l, "http-header-timeout", "2s", &why), 0);
	CHECK_INT(l.header_ms, 2000);
	CHECK_INT(connguard_option_set(&l, "http-body-timeout", "1m", &why), 0);
	CHECK_INT(l.body_ms, 60000);
	CHECK_INT(connguard_option_set(&l, "http-body-min-rate", "64Ki", &why), 0);
	CHECK_INT(l.body_min_rate, 65536);
	CHECK_INT(connguard_option_set(&l, "http-body-min-rate", "1M", &why), 0);
	CHECK_INT(l.body_min_rate, 1000000);
	CHECK_INT(connguard_option_set(&l, "http-idle-timeout", "90", &why), 0);
	CHECK_INT(l.idle_ms, 90000);

	struct {
		const char *name, *value;
	} refused[] = {{"http-max-connections", "15"}, {"http-max-connections", "lots"},
	               {"http-max-per-address", "-1"}, {"http-header-timeout", "500ms"},
	               {"http-header-timeout", "11m"}, {"http-body-timeout", "0"},
	               {"http-body-min-rate", "2Gi"},  {"http-body-min-rate", "16 KiB"},
	               {"http-idle-timeout", "2h"},    {"http-idle-timeout", "soon"}};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct connguard_limits before = l;
		why = NULL;
		CHECK_INT(connguard_option_set(&l, refused[i].name, refused[i].value, &why),
		          ERR_INVALID);
		CHECK(why != NULL);
		CHECK(memcmp(&before, &l, sizeof(l)) == 0);
	}
	CHECK_INT(connguard_option_set(&l, "http-colour", "1", &why), ERR_NOTFOUND);
	char text[512];
	connguard_limits_text(&l, text, sizeof(text));
	CHECK_CONTAINS(text, "http-max-connections=20000 http-max-per-address=0 ");
	CHECK_CONTAINS(text, "http-idle-timeout=90000ms");
}

TEST_MAIN()
