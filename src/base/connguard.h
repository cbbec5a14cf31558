/* connguard.h - what the HTTP server (base/httpd.h) lets a connection hold:
 * how many connections one client address and all of them may have open,
 * and how long a request may take to arrive. Slow or many clients must
 * not stop the API.
 *
 * httpd calls it from libmicrohttpd's callbacks: connguard_admit() as the
 * accept policy, connguard_open() and connguard_close() when MHD starts and
 * ends a connection, connguard_phase() as a request moves on. A watchdog
 * thread (connguard_start) calls connguard_tick() four times a second: it
 * shuts the socket of an overdue connection down, which MHD then sees as
 * the client's end and closes, and it writes the drop counts to the log.
 *
 * A connection's phases, each with its deadline:
 *
 *   admit --> HEADERS --headers in--> BODY --body in--> BUSY --request ends--> IDLE
 *               |                  \--> SPOOL --/        |                      |
 *               |                (spooled body)          +--upgrade--> STREAM   |
 *               |                                                               |
 *               +<--------------- next request's headers in: BODY/SPOOL <-------+
 *
 *   HEADERS  open + header_ms           (the request line and headers)
 *   BODY     headers + body_ms          (a body held in memory, <= 1 MiB, or
 *                                        one refused before it is read)
 *   SPOOL    headers + body_ms + received / body_min_rate
 *                                       (an upload written to a file: it
 *                                        may be gigabytes, so it must keep
 *                                        a minimum average rate instead)
 *   BUSY     none                       (the handler, a suspended long
 *                                        poll, the answer being sent)
 *   STREAM   none                       (an upgraded connection: attach, exec)
 *   IDLE     request end + idle_ms      (keep-alive: the next request's
 *                                        headers must be in by then)
 *
 * A connection in HEADERS, BODY or IDLE is "waiting": when a new one comes
 * and max_connections are open, the one that has waited longest is closed
 * to make room (a client that sends its request at once never waits long,
 * so a crowd of slow clients cannot keep it out); with none waiting, the
 * new one is refused. A connection over max_per_address from its address
 * is refused at once.
 *
 * The fd race: a connection's socket is shut down only while it is in the
 * guard's table, under the guard's mutex, and MHD calls connguard_close
 * (notify CLOSED) before it closes the socket (daemon.c,
 * MHD_cleanup_connections), so the fd shut down is never one MHD closed
 * and reused. Shutting a socket down never frees it: MHD still owns it.
 *
 * Every drop is counted by reason (connguard_metrics) and logged at most
 * once per reason per log_interval_ms, with the count since the line
 * before; libmicrohttpd's own messages (connguard_library_message) are
 * counted and rate-limited the same way.
 *
 * Thread-safe: one mutex guards everything; every function may be called
 * from any thread.
 */
#ifndef ANVIL_CONNGUARD_H
#define ANVIL_CONNGUARD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/buf.h"

struct connguard;
struct connguard_conn;

struct connguard_limits {
	int64_t max_connections; /* open at once, in all */
	int64_t max_per_address; /* open at once from one client address; 0: no limit */
	int64_t header_ms;       /* from a connection's start to its request's headers */
	int64_t body_ms;         /* an in-memory body; a spooled body's grace */
	int64_t body_min_rate;   /* bytes/s a spooled body keeps on average; 0: none */
	int64_t idle_ms;         /* keep-alive: from a request's end to the next one's headers */
	int64_t log_interval_ms; /* at most one log line per reason this often */
};

#define CONNGUARD_MAX_CONNECTIONS 10000
#define CONNGUARD_MAX_PER_ADDRESS 1024
#define CONNGUARD_HEADER_MS       5000
#define CONNGUARD_BODY_MS         30000
#define CONNGUARD_BODY_MIN_RATE   (16 << 10)
#define CONNGUARD_IDLE_MS         30000
#define CONNGUARD_LOG_INTERVAL_MS 60000

enum connguard_phase {
	CONNGUARD_HEADERS,
	CONNGUARD_BODY,
	CONNGUARD_SPOOL,
	CONNGUARD_BUSY,
	CONNGUARD_STREAM,
	CONNGUARD_IDLE,
};

/* Why a connection was refused or closed (anvil_http_connection_drops_total{reason}). */
enum connguard_drop {
	CONNGUARD_PER_ADDRESS,     /* refused: its address had max_per_address open */
	CONNGUARD_TOTAL,           /* refused: max_connections open, none waiting */
	CONNGUARD_EVICTED,         /* closed: the longest-waiting, to make room */
	CONNGUARD_HEADER_DEADLINE, /* closed: headers not in within header_ms */
	CONNGUARD_BODY_DEADLINE,   /* closed: body too slow */
	CONNGUARD_IDLE_TIMEOUT,    /* closed: kept alive idle past idle_ms (routine: not logged) */
	CONNGUARD_ACCEPT_FAILED,   /* not accepted: the system said no (open files) */
	CONNGUARD_NDROPS
};

/* The defaults above. */
void connguard_limits_default(struct connguard_limits *l);

/* The options that set the limits, shared by the daemons' option tables:
 * "http-max-connections", ... with their help lines. */
struct connguard_option {
	const char *name;
	const char *help;
};
#define CONNGUARD_NOPTIONS 6
extern const struct connguard_option connguard_options[CONNGUARD_NOPTIONS];

/* Sets the option name (without dashes) to value: 0; ERR_NOTFOUND when
 * name is none of connguard_options; ERR_INVALID with *why saying what is
 * wrong with value (l untouched). */
int connguard_option_set(struct connguard_limits *l, const char *name, const char *value,
                         const char **why);
/* "http-max-connections=10000 http-max-per-address=1024 ..." (--check-config). */
void connguard_limits_text(const struct connguard_limits *l, char *out, size_t n);

/* A guard with these limits (copied); connguard_free frees it. */
struct connguard *connguard_new(const struct connguard_limits *l);
/* Starts the watchdog thread (connguard_tick every 250 ms); 0 or -errno. */
int connguard_start(struct connguard *g);
/* Stops the watchdog, logs the counts not logged yet, frees. NULL is fine.
 * Every connection must have been closed. */
void connguard_free(struct connguard *g);

/* Accept policy: 1 to take a connection from addr, 0 when it is refused
 * (counted). To make room it may shut the longest-waiting connection's
 * socket down. */
int connguard_admit(struct connguard *g, const struct sockaddr *addr, socklen_t len, int64_t now);
/* A connection MHD took: in HEADERS from now. fd is its socket. */
struct connguard_conn *connguard_open(struct connguard *g, int fd, const struct sockaddr *addr,
                                      socklen_t len, int64_t now);
/* c moves to phase p at now (its deadline restarts from now). */
void connguard_phase(struct connguard *g, struct connguard_conn *c, enum connguard_phase p,
                     int64_t now);
/* n more bytes of c's spooled body arrived (its deadline moves on). */
void connguard_received(struct connguard *g, struct connguard_conn *c, size_t n);
/* MHD ends c (before it closes the socket); c is freed. */
void connguard_close(struct connguard *g, struct connguard_conn *c);

/* Shuts overdue connections down; writes the log lines that are due. */
void connguard_tick(struct connguard *g, int64_t now);

/* A message of libmicrohttpd's error log: counted, classified (a refused
 * or failed accept is a drop; a client that closed half-way is counted
 * alone) and logged at most once per interval. */
void connguard_library_message(struct connguard *g, const char *text, int64_t now);

/* Counts of one reason, and the connections open now (for tests). */
uint64_t connguard_drops(struct connguard *g, enum connguard_drop why);
int64_t connguard_open_count(struct connguard *g);

/* Prometheus text: PREFIX_http_connections, PREFIX_http_connections_max,
 * PREFIX_http_connection_drops_total{reason}, PREFIX_http_client_aborts_total,
 * PREFIX_http_library_messages_total. */
void connguard_metrics(struct connguard *g, const char *prefix, struct buf *out);

#endif
