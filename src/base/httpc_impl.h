/* httpc_impl.h - what httpc.c shares with its two backends; not for
 * callers (they include base/httpc.h).
 *
 * httpc.c turns each public call into one struct httpc_call and hands it
 * to a backend by the URL's scheme: http:// to libevent's evhttp
 * (httpc_event.c), https:// to libcurl (httpc_curl.c). A backend runs the
 * call to its end and leaves in struct httpc what every backend leaves:
 * the answer's header lines, why it failed, and a file's errno.
 */
#ifndef ANVIL_HTTPC_IMPL_H
#define ANVIL_HTTPC_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/httpc.h"

#define HTTPC_ERROR_MAX 512

/* One request, as the backends see it. Every pointer is borrowed for the
 * call. */
struct httpc_call {
	const char *method;
	const char *url;
	const char *token;        /* the bearer token; NULL or "": none */
	const char *extra;        /* httpc_set_header's line, or NULL */
	const char *idem_key;     /* httpc_set_retry's Idempotency-Key, or NULL */
	const char *content_type; /* "application/json", or octet-stream for a file */
	const char *body;         /* httpc_do's body, or NULL */
	size_t body_len;
	int put_fd;       /* httpc_put_file: the body's file from its offset; else -1 */
	int64_t put_size; /* its bytes */
	int get_fd;       /* httpc_get_file: a 2xx answer's body goes here; else -1 */
	long timeout_ms;  /* the whole call; 0: none (file transfers) */
	long connect_ms;  /* connecting */
	long idle_ms;     /* moving nothing this long fails; 0: timeout_ms bounds it */
	struct buf *out;  /* the answer's body (httpc_get_file: a non-2xx one's) */
	size_t out_max;   /* past it: ERR_TOOBIG (httpc_get_file: cut there instead) */
};

struct httpc_curl;
struct httpc_event;

struct httpc {
	struct buf headers;      /* the last answer's header lines, "Name: value\r\n" */
	char *extra;             /* httpc_set_header's line, or NULL */
	char *idem_key;          /* httpc_set_retry's key, or NULL */
	long retry_ms;           /* httpc_set_retry's budget; 0: one try */
	int tries;               /* how many times the last call was sent */
	httpc_retry_fn on_retry; /* httpc_on_retry's */
	void *on_retry_ctx;
	char error[HTTPC_ERROR_MAX];
	int fd_errno;              /* a failed read or write of the call's file */
	int curl_always;           /* $ANVIL_HTTP_CLIENT=curl: libcurl for http:// too */
	struct httpc_curl *curl;   /* made on the first call that goes to libcurl */
	struct httpc_event *event; /* made on the first call that goes to libevent */
};

/* Run call; 0 with *status, or ERR_UPSTREAM, ERR_TIMEOUT or ERR_TOOBIG
 * with the reason in c->error (or c->fd_errno set). c->headers holds the
 * answer's header lines. */
int httpc_curl_run(struct httpc *c, const struct httpc_call *call, int *status);
void httpc_curl_free(struct httpc_curl *h);
int httpc_event_run(struct httpc *c, const struct httpc_call *call, int *status);
void httpc_event_free(struct httpc_event *e);

#endif
