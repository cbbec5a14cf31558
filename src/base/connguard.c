#include "base/connguard.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define ADDR_BUCKETS 4096 /* a power of two */
#define TICK_MS      250
#define TEXT_MAX     200

/* A client address: 4 bytes of IPv4 (also when IPv4-mapped), 16 of IPv6. */
struct addr_key {
	uint8_t len;
	uint8_t b[16];
};

struct addr_entry {
	struct addr_key key;
	int64_t count; /* connections open from it; the entry goes at 0 */
	struct addr_entry *next;
};

enum { LIST_TIMED, LIST_UNTIMED, LIST_CLOSING, NLISTS };

struct conn_list {
	struct connguard_conn *head, *tail; /* head: the longest in its list */
	int64_t n;
};

struct connguard_conn {
	struct connguard_conn *prev, *next;
	struct addr_entry *addr;
	int fd;
	int list; /* LIST_*: TIMED while it has a deadline, CLOSING once shut down */
	enum connguard_phase phase;
	int64_t since;     /* the phase's start */
	uint64_t received; /* of a spooled body */
};

/* One reason's drops, and its log line's rate limit. */
struct drop_count {
	uint64_t total;
	uint64_t pending;  /* since the last line */
	int64_t last_line; /* when it was written; INT64_MIN: never */
	struct addr_key last_addr;
};

struct connguard {
	struct connguard_limits lim;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	pthread_t thread;
	int running, stopping;
	struct addr_entry *buckets[ADDR_BUCKETS];
	struct conn_list lists[NLISTS];
	int64_t open; /* in every list */
	int64_t started;
	struct drop_count drops[CONNGUARD_NDROPS];
	struct drop_count library; /* libmicrohttpd's other messages */
	uint64_t aborts;
	char accept_text[TEXT_MAX], library_text[TEXT_MAX];
};

static const char *const drop_names[CONNGUARD_NDROPS] = {
        "per_address",   "total",        "evicted",      "header_deadline",
        "body_deadline", "idle_timeout", "accept_failed"};

/* ---- options ---- */

const struct connguard_option connguard_options[CONNGUARD_NOPTIONS] = {
        {"http-max-connections",
         "HTTP connections open at once, in all (10000; 16 to 1000000; lowered to fit the "
         "open-file limit)"},
        {"http-max-per-address",
         "HTTP connections open at once from one client address (1024; 0: no limit)"},
        {"http-header-timeout", "a request's headers must be in within (5s; 1s to 10m)"},
        {"http-body-timeout",
         "a request body held in memory (up to 1 MiB) must be in within; an upload's grace "
         "(30s; 1s to 1h)"},
        {"http-body-min-rate",
         "bytes/s an upload keeps on average past its grace (16Ki; 0: no minimum)"},
        {"http-idle-timeout",
         "a kept-alive connection's next request must be in within; a connection that "
         "moves no byte this long is closed (30s; 1s to 1h)"},
};

void connguard_limits_default(struct connguard_limits *l)
{
	*l = (struct connguard_limits){.max_connections = CONNGUARD_MAX_CONNECTIONS,
	                               .max_per_address = CONNGUARD_MAX_PER_ADDRESS,
	                               .header_ms = CONNGUARD_HEADER_MS,
	                               .body_ms = CONNGUARD_BODY_MS,
	                               .body_min_rate = CONNGUARD_BODY_MIN_RATE,
	                               .idle_ms = CONNGUARD_IDLE_MS,
	                               .log_interval_ms = CONNGUARD_LOG_INTERVAL_MS};
}

/* "16Ki", "1M", "16384": bytes (K/M powers of 1000, Ki/Mi of 1024) in [0, 1Gi]. */
static int parse_rate(const char *v, int64_t *out)
{
	char *end = NULL;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || n < 0)
		return ERR_INVALID;
	int64_t mult = 1;
	if (strcmp(end, "K") == 0)
		mult = 1000;
	else if (strcmp(end, "Ki") == 0)
		mult = 1024;
	else if (strcmp(end, "M") == 0)
		mult = 1000000;
	else if (strcmp(end, "Mi") == 0)
		mult = 1 << 20;
	else if (*end)
		return ERR_INVALID;
	if (n > (1LL << 30) / mult)
		return ERR_INVALID;
	*out = n * mult;
	return 0;
}

static int duration_in(const char *v, int64_t min, int64_t max, int64_t *out)
{
	int64_t ms;
	if (parse_duration_ms(v, &ms) || ms < min || ms > max)
		return ERR_INVALID;
	*out = ms;
	return 0;
}

int connguard_option_set(struct connguard_limits *l, const char *name, const char *value,
                         const char **why)
{
	int i = 0;
	while (i < CONNGUARD_NOPTIONS && strcmp(connguard_options[i].name, name) != 0)
		i++;
	int64_t v = 0;
	int rc;
	switch (i) {
	case 0:
		rc = parse_i64(value, 16, 1000000, &v);
		*why = "is not a number from 16 to 1000000";
		break;
	case 1:
		rc = parse_i64(value, 0, 1000000, &v);
		*why = "is not a number from 0 (no limit) to 1000000";
		break;
	case 2:
		rc = duration_in(value, 1000, 600000, &v);
		*why = "is not a duration from 1s to 10m";
		break;
	case 3:
	case 5:
		rc = duration_in(value, 1000, 3600000, &v);
		*why = "is not a duration from 1s to 1h";
		break;
	case 4:
		rc = parse_rate(value, &v);
		*why = "is not a rate in bytes/s from 0 to 1Gi (16384, 16Ki, 1M)";
		break;
	default: return ERR_NOTFOUND;
	}
	if (rc)
		return ERR_INVALID;
	*why = NULL;
	int64_t *field[CONNGUARD_NOPTIONS] = {&l->max_connections, &l->max_per_address,
	                                      &l->header_ms,       &l->body_ms,
	                                      &l->body_min_rate,   &l->idle_ms};
	*field[i] = v;
	return 0;
}

void connguard_limits_text(const struct connguard_limits *l, char *out, size_t n)
{
	snprintf(out, n,
	         "http-max-connections=%lld http-max-per-address=%lld http-header-timeout=%lldms "
	         "http-body-timeout=%lldms http-body-min-rate=%lld http-idle-timeout=%lldms",
	         (long long)l->max_connections, (long long)l->max_per_address,
	         (long long)l->header_ms, (long long)l->body_ms, (long long)l->body_min_rate,
	         (long long)l->idle_ms);
}

/* ---- addresses ---- */

static void addr_key_of(const struct sockaddr *sa, socklen_t len, struct addr_key *k)
{
	memset(k, 0, sizeof(*k));
	if (sa && sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		k->len = 4;
		memcpy(k->b, &in->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6 &&
	           len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			k->len = 4;
			memcpy(k->b, in6->sin6_addr.s6_addr + 12, 4);
		} else {
			k->len = 16;
			memcpy(k->b, in6->sin6_addr.s6_addr, 16);
		}
	} /* else (a Unix socket): len 0, one address for all */
}

static void addr_text(const struct addr_key *k, char *out, size_t n)
{
	if (k->len == 0 || !inet_ntop(k->len == 4 ? AF_INET : AF_INET6, k->b, out, (socklen_t)n))
		snprintf(out, n, "-");
}

static struct addr_entry **addr_slot(struct connguard *g, const struct addr_key *k)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (int i = 0; i < k->len; i++)
		h = (h ^ k->b[i]) * 16777619u;
	struct addr_entry **p = &g->buckets[h & (ADDR_BUCKETS - 1)];
	while (*p && ((*p)->key.len != k->len || memcmp((*p)->key.b, k->b, k->len) != 0))
		p = &(*p)->next;
	return p;
}

/* ---- lists ---- */

static void list_remove(struct connguard *g, struct connguard_conn *c)
{
	struct conn_list *l = &g->lists[c->list];
	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		l->tail = c->prev;
	c->prev = c->next = NULL;
	l->n--;
}

static void list_append(struct connguard *g, struct connguard_conn *c, int list)
{
	struct conn_list *l = &g->lists[list];
	c->list = list;
	c->prev = l->tail;
	c->next = NULL;
	if (l->tail)
		l->tail->next = c;
	else
		l->head = c;
	l->tail = c;
	l->n++;
}

static int has_deadline(enum connguard_phase p)
{
	return p != CONNGUARD_BUSY && p != CONNGUARD_STREAM;
}

/* When c is overdue; INT64_MAX: never. */
static int64_t deadline_of(const struct connguard *g, const struct connguard_conn *c)
{
	const struct connguard_limits *l = &g->lim;
	switch (c->phase) {
	case CONNGUARD_HEADERS: return c->since + l->header_ms;
	case CONNGUARD_BODY: return c->since + l->body_ms;
	case CONNGUARD_IDLE: return c->since + l->idle_ms;
	case CONNGUARD_SPOOL:
		if (l->body_min_rate <= 0)
			return INT64_MAX;
		return c->since + l->body_ms +
		       (int64_t)(c->received * 1000 / (uint64_t)l->body_min_rate);
	default: return INT64_MAX;
	}
}

static void count_drop(struct connguard *g, enum connguard_drop why, const struct addr_key *k)
{
	g->drops[why].total++;
	g->drops[why].pending++;
	if (k)
		g->drops[why].last_addr = *k;
}

/* Shuts c's socket down (MHD sees the client's end and closes it); c
 * stays counted, in CLOSING, until connguard_close. Under g->mu. */
static void shut(struct connguard *g, struct connguard_conn *c, enum connguard_drop why)
{
	assert(c->list != LIST_CLOSING);
	shutdown(c->fd, SHUT_RDWR);
	list_remove(g, c);
	list_append(g, c, LIST_CLOSING);
	count_drop(g, why, &c->addr->key);
}

/* ---- life ---- */

struct connguard *connguard_new(const struct connguard_limits *l)
{
	struct connguard *g = xcalloc(1, sizeof(*g));
	g->lim = *l;
	if (g->lim.log_interval_ms <= 0)
		g->lim.log_interval_ms = CONNGUARD_LOG_INTERVAL_MS;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->wake, NULL);
	g->started = now_ms();
	for (int i = 0; i < CONNGUARD_NDROPS; i++)
		g->drops[i].last_line = INT64_MIN;
	g->library.last_line = INT64_MIN;
	return g;
}

static void *watchdog(void *arg)
{
	struct connguard *g = arg;
	pthread_mutex_lock(&g->mu);
	while (!g->stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += TICK_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&g->wake, &g->mu, &ts);
		if (g->stopping)
			break;
		pthread_mutex_unlock(&g->mu);
		connguard_tick(g, now_ms());
		pthread_mutex_lock(&g->mu);
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

int connguard_start(struct connguard *g)
{
	int rc = pthread_create(&g->thread, NULL, watchdog, g);
	if (rc)
		return -rc;
	g->running = 1;
	return 0;
}

static void flush_lines(struct connguard *g, int64_t now, int all);

void connguard_free(struct connguard *g)
{
	if (!g)
		return;
	if (g->running) {
		pthread_mutex_lock(&g->mu);
		g->stopping = 1;
		pthread_cond_signal(&g->wake);
		pthread_mutex_unlock(&g->mu);
		pthread_join(g->thread, NULL);
	}
	flush_lines(g, now_ms(), 1);
	for (int l = 0; l < NLISTS; l++)
		while (g->lists[l].head) { /* none, when MHD closed every connection */
			struct connguard_conn *c = g->lists[l].head;
			list_remove(g, c);
			free(c);
		}
	for (int b = 0; b < ADDR_BUCKETS; b++)
		while (g->buckets[b]) {
			struct addr_entry *e = g->buckets[b];
			g->buckets[b] = e->next;
			free(e);
		}
	pthread_cond_destroy(&g->wake);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

/* ---- connections ---- */

/* The longest-waiting connection that may make room (HEADERS, BODY or
 * IDLE: never an upload, a long poll or a stream); NULL if none. */
static struct connguard_conn *longest_waiting(struct connguard *g)
{
	for (struct connguard_conn *c = g->lists[LIST_TIMED].head; c; c = c->next)
		if (c->phase != CONNGUARD_SPOOL)
			return c;
	return NULL;
}

int connguard_admit(struct connguard *g, const struct sockaddr *addr, socklen_t len, int64_t now)
{
	(void)now;
	struct addr_key k;
	addr_key_of(addr, len, &k);
	int ok = 1;
	pthread_mutex_lock(&g->mu);
	struct addr_entry *e = *addr_slot(g, &k);
	if (g->lim.max_per_address > 0 && e && e->count >= g->lim.max_per_address) {
		count_drop(g, CONNGUARD_PER_ADDRESS, &k);
		ok = 0;
	} else if (g->open - g->lists[LIST_CLOSING].n >= g->lim.max_connections) {
		/* Room is made one connection at a time, and only while the
		 * ones shut down before are few: they hold their fds until
		 * their MHD thread gets to them. */
		struct connguard_conn *victim = longest_waiting(g);
		if (victim && g->lists[LIST_CLOSING].n < g->lim.max_connections / 8 + 64) {
			shut(g, victim, CONNGUARD_EVICTED);
		} else {
			count_drop(g, CONNGUARD_TOTAL, &k);
			ok = 0;
		}
	}
	pthread_mutex_unlock(&g->mu);
	return ok;
}

struct connguard_conn *connguard_open(struct connguard *g, int fd, const struct sockaddr *addr,
                                      socklen_t len, int64_t now)
{
	struct connguard_conn *c = xcalloc(1, sizeof(*c));
	struct addr_key k;
	addr_key_of(addr, len, &k);
	c->fd = fd;
	c->phase = CONNGUARD_HEADERS;
	c->since = now;
	pthread_mutex_lock(&g->mu);
	struct addr_entry **slot = addr_slot(g, &k);
	if (!*slot) {
		*slot = xcalloc(1, sizeof(**slot));
		(*slot)->key = k;
	}
	c->addr = *slot;
	c->addr->count++;
	g->open++;
	list_append(g, c, LIST_TIMED);
	pthread_mutex_unlock(&g->mu);
	return c;
}

void connguard_phase(struct connguard *g, struct connguard_conn *c, enum connguard_phase p,
                     int64_t now)
{
	pthread_mutex_lock(&g->mu);
	c->phase = p;
	c->since = now;
	c->received = 0;
	if (c->list != LIST_CLOSING) { /* to its list's end: the lists stay in order of since */
		list_remove(g, c);
		list_append(g, c, has_deadline(p) ? LIST_TIMED : LIST_UNTIMED);
	}
	pthread_mutex_unlock(&g->mu);
}

void connguard_received(struct connguard *g, struct connguard_conn *c, size_t n)
{
	pthread_mutex_lock(&g->mu);
	c->received += n;
	pthread_mutex_unlock(&g->mu);
}

void connguard_close(struct connguard *g, struct connguard_conn *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&g->mu);
	list_remove(g, c);
	g->open--;
	if (--c->addr->count == 0) {
		struct addr_entry **slot = addr_slot(g, &c->addr->key);
		assert(*slot == c->addr);
		*slot = c->addr->next;
		free(c->addr);
	}
	pthread_mutex_unlock(&g->mu);
	free(c);
}

/* ---- the watchdog ---- */

static enum connguard_drop overdue_reason(enum connguard_phase p)
{
	if (p == CONNGUARD_HEADERS)
		return CONNGUARD_HEADER_DEADLINE;
	return p == CONNGUARD_IDLE ? CONNGUARD_IDLE_TIMEOUT : CONNGUARD_BODY_DEADLINE;
}

/* What each reason's log line says; NULL: counted, never logged. */
static const char *drop_text(const struct connguard *g, enum connguard_drop why, char *out,
                             size_t n)
{
	const struct connguard_limits *l = &g->lim;
	switch (why) {
	case CONNGUARD_PER_ADDRESS:
		snprintf(out, n,
		         "connections refused: their address had http-max-per-address open "
		         "limit=%lld",
		         (long long)l->max_per_address);
		break;
	case CONNGUARD_TOTAL:
		snprintf(out, n,
		         "connections refused: http-max-connections open, none of them waiting "
		         "limit=%lld",
		         (long long)l->max_connections);
		break;
	case CONNGUARD_EVICTED:
		snprintf(out, n,
		         "connections closed to make room: http-max-connections open, the one "
		         "waiting longest for its request went limit=%lld",
		         (long long)l->max_connections);
		break;
	case CONNGUARD_HEADER_DEADLINE:
		snprintf(out, n,
		         "connections closed: request headers not in within http-header-timeout "
		         "timeout_ms=%lld",
		         (long long)l->header_ms);
		break;
	case CONNGUARD_BODY_DEADLINE:
		snprintf(out, n,
		         "connections closed: request body too slow (http-body-timeout, "
		         "http-body-min-rate) timeout_ms=%lld min_rate=%lld",
		         (long long)l->body_ms, (long long)l->body_min_rate);
		break;
	case CONNGUARD_ACCEPT_FAILED:
		snprintf(out, n, "connections not accepted: \"%s\"", g->accept_text);
		break;
	default: return NULL;
	}
	return out;
}

/* One line for d when due (all: every pending count, due or not), into
 * lines; under g->mu. */
static void line_for(struct connguard *g, struct drop_count *d, const char *what, int64_t now,
                     int all, struct buf *lines)
{
	if (!d->pending || !what)
		return;
	if (!all && d->last_line != INT64_MIN && now - d->last_line < g->lim.log_interval_ms)
		return;
	int64_t from = d->last_line == INT64_MIN ? g->started : d->last_line;
	char addr[80] = "";
	if (d->last_addr.len) {
		memcpy(addr, " last_addr=", 12);
		addr_text(&d->last_addr, addr + 11, sizeof(addr) - 11);
	}
	buf_printf(lines, "%s count=%llu since_s=%lld total=%llu%s", what,
	           (unsigned long long)d->pending, (long long)((now - from + 999) / 1000),
	           (unsigned long long)d->total, addr);
	buf_add(lines, "", 1); /* lines are NUL-separated */
	d->pending = 0;
	d->last_line = now;
}

/* Writes the log lines that are due, outside g->mu: a log write may block
 * (a full pipe) and must never hold up an accept. */
static void flush_lines(struct connguard *g, int64_t now, int all)
{
	struct buf lines;
	buf_init(&lines);
	char text[TEXT_MAX + 160];
	pthread_mutex_lock(&g->mu);
	for (int i = 0; i < CONNGUARD_NDROPS; i++)
		line_for(g, &g->drops[i], drop_text(g, (enum connguard_drop)i, text, sizeof(text)),
		         now, all, &lines);
	snprintf(text, sizeof(text), "libmicrohttpd: \"%s\"", g->library_text);
	line_for(g, &g->library, text, now, all, &lines);
	pthread_mutex_unlock(&g->mu);
	for (size_t off = 0; off < lines.len; off += strlen(lines.data + off) + 1)
		log_warn("%s", lines.data + off);
	buf_cleanup(&lines);
}

void connguard_tick(struct connguard *g, int64_t now)
{
	pthread_mutex_lock(&g->mu);
	struct connguard_conn *next;
	for (struct connguard_conn *c = g->lists[LIST_TIMED].head; c; c = next) {
		next = c->next;
		if (now >= deadline_of(g, c))
			shut(g, c, overdue_reason(c->phase));
	}
	pthread_mutex_unlock(&g->mu);
	flush_lines(g, now, 0);
}

/* ---- libmicrohttpd's messages ---- */

enum { LIB_TOTAL, LIB_ACCEPT, LIB_ABORT };

static const struct {
	const char *needle;
	int kind;
} library_kinds[] = {
        {"reached connection limit", LIB_TOTAL},
        {"Error accepting connection", LIB_ACCEPT},
        {"resource limit", LIB_ACCEPT},
        {"incomplete request", LIB_ABORT},
        {"disconnected when reading request", LIB_ABORT},
        {"closed when reading request", LIB_ABORT},
        {"Failed to send", LIB_ABORT},
};

void connguard_library_message(struct connguard *g, const char *text, int64_t now)
{
	(void)now;
	char msg[TEXT_MAX];
	snprintf(msg, sizeof(msg), "%s", text);
	msg[strcspn(msg, "\r\n")] = '\0';
	int kind = -1;
	for (size_t i = 0; i < sizeof(library_kinds) / sizeof(library_kinds[0]) && kind < 0; i++)
		if (strstr(msg, library_kinds[i].needle))
			kind = library_kinds[i].kind;
	pthread_mutex_lock(&g->mu);
	if (kind == LIB_TOTAL) {
		count_drop(g, CONNGUARD_TOTAL, NULL);
	} else if (kind == LIB_ACCEPT) {
		count_drop(g, CONNGUARD_ACCEPT_FAILED, NULL);
		memcpy(g->accept_text, msg, sizeof(msg));
	} else if (kind == LIB_ABORT) {
		g->aborts++;
	} else {
		g->library.total++;
		g->library.pending++;
		memcpy(g->library_text, msg, sizeof(msg));
	}
	pthread_mutex_unlock(&g->mu);
}

/* ---- reading ---- */

uint64_t connguard_drops(struct connguard *g, enum connguard_drop why)
{
	pthread_mutex_lock(&g->mu);
	uint64_t n = g->drops[why].total;
	pthread_mutex_unlock(&g->mu);
	return n;
}

int64_t connguard_open_count(struct connguard *g)
{
	pthread_mutex_lock(&g->mu);
	int64_t n = g->open;
	pthread_mutex_unlock(&g->mu);
	return n;
}

void connguard_metrics(struct connguard *g, const char *prefix, struct buf *out)
{
	pthread_mutex_lock(&g->mu);
	buf_printf(out, "# HELP %s_http_connections HTTP connections open now.\n", prefix);
	buf_printf(out, "# TYPE %s_http_connections gauge\n%s_http_connections %lld\n", prefix,
	           prefix, (long long)g->open);
	buf_printf(out,
	           "# HELP %s_http_connections_max HTTP connections open at once at most "
	           "(http-max-connections).\n",
	           prefix);
	buf_printf(out, "# TYPE %s_http_connections_max gauge\n%s_http_connections_max %lld\n",
	           prefix, prefix, (long long)g->lim.max_connections);
	buf_printf(out,
	           "# HELP %s_http_connection_drops_total HTTP connections refused or closed by "
	           "the server, by reason.\n",
	           prefix);
	buf_printf(out, "# TYPE %s_http_connection_drops_total counter\n", prefix);
	for (int i = 0; i < CONNGUARD_NDROPS; i++)
		buf_printf(out, "%s_http_connection_drops_total{reason=\"%s\"} %llu\n", prefix,
		           drop_names[i], (unsigned long long)g->drops[i].total);
	buf_printf(out,
	           "# HELP %s_http_client_aborts_total Requests their client closed before they "
	           "were complete (libmicrohttpd's word; also those the server closed).\n",
	           prefix);
	buf_printf(out,
	           "# TYPE %s_http_client_aborts_total counter\n%s_http_client_aborts_total %llu\n",
	           prefix, prefix, (unsigned long long)g->aborts);
	buf_printf(out,
	           "# HELP %s_http_library_messages_total Other messages of libmicrohttpd (logged "
	           "at most once a minute).\n",
	           prefix);
	buf_printf(out,
	           "# TYPE %s_http_library_messages_total counter\n%s_http_library_messages_total "
	           "%llu\n",
	           prefix, prefix, (unsigned long long)g->library.total);
	pthread_mutex_unlock(&g->mu);
}
