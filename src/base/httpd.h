/* httpd.h - an HTTP/1.1 server on libmicrohttpd for anvil's daemons.
 *
 * One handler receives every complete request (body capped at max_body;
 * larger bodies get 413 without reaching it). The handler fills req->status,
 * req->out and req->content_type and returns HTTPD_DONE, or calls
 * httpd_suspend() and returns HTTPD_SUSPENDED to answer later: a long poll.
 * Whoever holds a suspended request then fills its response and calls
 * httpd_resume() exactly once, from any thread.
 *
 * A handler may also take the connection over (HTTP/1.1 Upgrade): it calls
 * httpd_upgrade() instead of filling a response; httpd answers 101 and then
 * calls the handler's stream function with the connected socket and the
 * bytes already read past the request, on a thread of its own, until it
 * returns (a long-lived byte stream: anvil shell, exec). httpd_stop() shuts
 * the sockets of running streams down and waits for their functions.
 *
 * Large bodies (uploads of objects) need not fit in memory: a server that
 * sets cfg.spool is asked, once a request's headers are in, whether its
 * body goes to a file (httpd_config.spool); the handler then finds it at
 * req->body_path (req->body is ""), and httpd removes the file when the
 * request ends unless the handler moved it away. An answer can likewise be
 * a file: httpd_send_fd.
 *
 * Slow and many clients: every connection is watched by a guard
 * (base/connguard.h, cfg.limits): per-address and total limits, a
 * deadline for a request's headers and for its body, a keep-alive idle
 * timeout; long polls (suspended requests) and streams are not cut.
 * libmicrohttpd's own messages go to the guard, which logs each kind at
 * most once a minute.
 *
 * A request's path and query arguments arrive decoded, except that an
 * escape of a control byte (%00 to %1F, %7F) is left as written: a NUL
 * would end the C string early and the handler would read another name
 * than the client sent. A handler that finds such an escape refuses it.
 *
 * Handlers run on MHD's thread pool, so they may run concurrently; the
 * handler's owner protects its own state. httpd keeps per-route request
 * counts and latency histograms (set req->route to a static label) and
 * renders them with httpd_metrics().
 */
#ifndef ANVIL_HTTPD_H
#define ANVIL_HTTPD_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/connguard.h"

struct httpd;
struct MHD_Connection;

struct httpd_req {
	const char *method;
	const char *path;
	char *body;
	size_t body_len; /* also of a spooled body */
	int body_too_big;
	char *body_path; /* a spooled body's file (httpd_config.spool), else NULL */
	/* The TCP peer's address as text ("10.0.0.5", "::1"; an IPv4-mapped
	 * IPv6 address as its IPv4 form), "" when it cannot be told. */
	char peer[48];
	/* response */
	int status;
	struct buf out;
	const char *content_type;
	const char *route; /* static label for metrics; "other" when NULL */
	char hdr_name[4][32];
	char hdr_value[4][128];
	int nhdrs;
	/* private */
	struct MHD_Connection *conn;
	struct httpd *server;
	int64_t start_us;
	int state; /* 0 receiving, 1 suspended, 2 resumed */
	void *user;
	int spool_fd;      /* the spooled body's file while it arrives; -1: none */
	int spool_errno;   /* a write to it failed */
	int64_t spool_max; /* its cap */
	int out_fd;        /* httpd_send_fd's file; -1: none */
	uint64_t out_size;
	struct httpd_upgrade *upgrade; /* httpd_upgrade() was called */
};

enum { HTTPD_DONE = 0, HTTPD_SUSPENDED = 1 };

typedef int (*httpd_handler)(struct httpd_req *req, void *ctx);
/* Asked once per request with its method, path and headers (no body yet):
 * the largest body to take into a file, > 0; 0 for the usual in-memory
 * body (under max_body); < 0 to answer at once with the response it
 * filled (an error: 401, 413), without reading the body. */
typedef int64_t (*httpd_spool_fn)(struct httpd_req *req, void *ctx);

struct httpd_config {
	const char *bind; /* "127.0.0.1" by default */
	int port;         /* 0: any free port */
	int threads;      /* pool size; 4 by default */
	size_t max_body;  /* 1 MiB by default */
	/* connections and their deadlines; zeroed: connguard_limits_default.
	 * max_connections is lowered to what the open-file limit leaves. */
	struct connguard_limits limits;
	httpd_handler handler;
	void *ctx;
	httpd_spool_fn spool;  /* NULL: every body in memory */
	const char *spool_dir; /* where spooled bodies go (created if missing; copied) */
};

/* Raises the process's soft limit on open files to the hard one, since a
 * server holds a socket per connection (nofile_raise; a rank's command
 * gets the limit from before), and logs it. Once, at a daemon's start,
 * before httpd_start. */
void httpd_nofile_raise(void);

/* Starts listening; 0 or a negative code. */
int httpd_start(const struct httpd_config *cfg, struct httpd **out);
int httpd_port(const struct httpd *h);
void httpd_stop(struct httpd *h);

const char *httpd_query(struct httpd_req *req, const char *key);
const char *httpd_header(struct httpd_req *req, const char *key);

/* JSON helpers: set status and body. */
void httpd_json(struct httpd_req *req, int status, const char *json);
/* {"error": {"code": name, "message": msg}} with err_http(code). */
void httpd_error(struct httpd_req *req, int code, const char *msg);

/* Answers with status and the size bytes of the open file fd (from its
 * start) as the body, of content type "application/octet-stream"; httpd
 * owns fd from here and closes it. For a HEAD request only the headers
 * (Content-Length: size) are sent. */
void httpd_send_fd(struct httpd_req *req, int status, int fd, uint64_t size);

/* Adds a response header (at most 4; names < 32, values < 128 bytes). */
void httpd_add_header(struct httpd_req *req, const char *name, const char *value);

void httpd_suspend(struct httpd_req *req);
void httpd_resume(struct httpd_req *req);

/* An upgraded connection, as its stream function gets it. */
struct httpd_stream {
	int fd;            /* the client's socket, non-blocking; httpd closes it after fn */
	const char *extra; /* bytes the client sent past the request, already read */
	size_t extra_len;
};

/* Runs on a thread of its own; owns ctx. st is NULL when the connection
 * ended before the upgrade happened: only free ctx then. */
typedef void (*httpd_stream_fn)(const struct httpd_stream *st, void *ctx);

/* Answers 101 Switching Protocols ("Upgrade: proto", "Connection:
 * Upgrade") and hands the connection to fn once the answer is sent. The
 * request must have asked for it (Connection: Upgrade; see
 * httpd_wants_upgrade); the handler then returns HTTPD_DONE and fills
 * nothing else. fn is called exactly once. */
void httpd_upgrade(struct httpd_req *req, const char *proto, httpd_stream_fn fn, void *ctx);
/* 1 when the request carries "Connection: upgrade" and "Upgrade: proto". */
int httpd_wants_upgrade(struct httpd_req *req, const char *proto);

/* Appends Prometheus text for anvil_http_requests_total,
 * anvil_http_request_duration_seconds, the streams (open, opened) and the
 * connections (connguard_metrics) to out. */
void httpd_metrics(struct httpd *h, const char *prefix, struct buf *out);

#endif
