/* httpc_event.c - httpc's libevent backend: every http:// call (the
 * cluster's API, the agents, the object API), on libevent's evhttp client,
 * loaded on first use (base/event_lazy.h).
 *
 * Each struct httpc has one event_base and at most one keep-alive
 * connection, to the host and port of its last call; a call runs the base
 * until its request ends. What evhttp does not do, done here around it:
 *
 *  - a deadline for the whole call (a timer that cancels the request), and
 *    one for connecting (a timer that cancels it while the socket is still
 *    not connected); evhttp's own timeout is the idle one (no byte moved);
 *  - why a connect failed: evhttp 2.1 reports no errno, so a failure to
 *    connect is diagnosed by connecting once more with dial_tcp, which says
 *    "Connection refused" or "cannot resolve";
 *  - a kept connection that the server has closed meanwhile (its idle
 *    timeout) is noticed before it is used (a peek at the socket), and a
 *    call that fails on a reused connection without any answer is sent once
 *    more on a new one, as libcurl does;
 *  - after an upload that was refused (a non-2xx answer to a PUT of a
 *    file, which may have come before the body was sent: "Expect:
 *    100-continue") the connection is dropped, not reused.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/dial.h"
#include "base/err.h"
#include "base/event_lazy.h"
#include "base/httpc_impl.h"
#include "base/mem.h"

struct httpc_event {
	struct event_base *base;
	struct evhttp_connection *conn; /* to host:port; NULL before the first call */
	char host[DIAL_HOST_MAX];
	int port;
	/* the running call */
	struct httpc *c;
	const struct httpc_call *call;
	struct evhttp_request *req; /* in flight; NULL once it ended */
	struct event *abort_ev;     /* cancels req from outside evhttp's callbacks */
	int done;
	int status;
	int failure;   /* evhttp's enum evhttp_request_error + 1; 0: none */
	int got_body;  /* some of the answer's body arrived */
	int reused;    /* the call went out on a kept connection */
	int why_abort; /* ERR_TIMEOUT (whole call), ERR_UPSTREAM (file), 1 (connect) */
};

enum { ABORT_CONNECT = 1 };

void httpc_event_free(struct httpc_event *e)
{
	if (!e)
		return;
	if (e->conn)
		evhttp_connection_free(e->conn);
	event_free(e->abort_ev);
	event_base_free(e->base);
	free(e);
}

static void on_abort(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct httpc_event *e = arg;
	if (e->req)
		evhttp_cancel_request(e->req);
}

/* Ends the running request soon, for why (the next turn of the loop:
 * evhttp's own callbacks must not cancel the request they run for). */
static void abort_soon(struct httpc_event *e, int why)
{
	if (!e->why_abort)
		e->why_abort = why;
	struct timeval now = {0, 0};
	event_add(e->abort_ev, &now);
}

static struct httpc_event *event_of(struct httpc *c)
{
	if (c->event)
		return c->event;
	event_lazy_load();
	struct httpc_event *e = xcalloc(1, sizeof(*e));
	e->base = event_base_new();
	if (!e->base) {
		fprintf(stderr, "anvil: event_base_new failed: %s\n", strerror(errno));
		abort();
	}
	e->abort_ev = event_new(e->base, -1, 0, on_abort, e);
	return c->event = e;
}

/* The connected socket of the kept connection, or -1. */
static int conn_fd(const struct httpc_event *e)
{
	struct bufferevent *bev = e->conn ? evhttp_connection_get_bufferevent(e->conn) : NULL;
	return bev ? bufferevent_getfd(bev) : -1;
}

/* Whether the kept connection's socket is open with nothing to read (an
 * idle server sends nothing; EOF or bytes mean it closed or is confused). */
static int conn_idle_open(const struct httpc_event *e)
{
	int fd = conn_fd(e);
	if (fd < 0)
		return 0;
	char b;
	ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static void conn_drop(struct httpc_event *e)
{
	if (e->conn)
		evhttp_connection_free(e->conn);
	e->conn = NULL;
}

/* The connection for host:port: the kept one when it still serves, else
 * a new one. *reused says which. */
static void conn_for(struct httpc_event *e, const struct dial_url *u, int *reused)
{
	*reused = 0;
	if (e->conn && (e->port != u->port || strcmp(e->host, u->host) != 0 || !conn_idle_open(e)))
		conn_drop(e);
	if (e->conn) {
		*reused = 1;
		return;
	}
	e->conn = evhttp_connection_base_new(e->base, NULL, u->host, (ev_uint16_t)u->port);
	if (!e->conn) {
		fprintf(stderr, "anvil: evhttp_connection_base_new failed\n");
		abort();
	}
	snprintf(e->host, sizeof(e->host), "%s", u->host);
	e->port = u->port;
	/* A server that answers an upload early (401, 413) and closes: read
	 * its answer rather than fail on the write. */
	evhttp_connection_set_flags(e->conn, EVHTTP_CON_READ_ON_WRITE_ERROR);
	evhttp_connection_set_max_headers_size(e->conn, HTTPC_MAX_HEADERS);
}

static enum evhttp_cmd_type method_of(const char *m, int *ok)
{
	static const struct {
		const char *name;
		enum evhttp_cmd_type type;
	} methods[] = {
	        {"GET", EVHTTP_REQ_GET},         {"POST", EVHTTP_REQ_POST},
	        {"PUT", EVHTTP_REQ_PUT},         {"DELETE", EVHTTP_REQ_DELETE},
	        {"PATCH", EVHTTP_REQ_PATCH},     {"HEAD", EVHTTP_REQ_HEAD},
	        {"OPTIONS", EVHTTP_REQ_OPTIONS},
	};
	*ok = 1;
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (strcmp(m, methods[i].name) == 0)
			return methods[i].type;
	*ok = 0;
	return EVHTTP_REQ_GET;
}

/* The answer's header lines into c->headers, as libcurl's backend keeps
 * them ("Name: value\r\n"), up to HTTPC_MAX_HEADERS. */
static void keep_headers(struct httpc_event *e, struct evhttp_request *req)
{
	struct buf *h = &e->c->headers;
	const struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	for (const struct evkeyval *kv = in->tqh_first; kv; kv = kv->next.tqe_next) {
		size_t n = strlen(kv->key) + strlen(kv->value) + 4;
		if (h->len + n > HTTPC_MAX_HEADERS)
			break;
		buf_printf(h, "%s: %s\r\n", kv->key, kv->value);
	}
}

/* Moves what has arrived of the body: a 2xx answer of a file GET to the
 * file, anything else into call->out up to its cap. */
static void take_body(struct httpc_event *e, struct evhttp_request *req)
{
	const struct httpc_call *call = e->call;
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	int code = evhttp_request_get_response_code(req);
	if (call->get_fd >= 0 && code >= 200 && code <= 299) {
		while (!e->c->fd_errno && evbuffer_get_length(in) > 0)
			if (evbuffer_write(in, call->get_fd) < 0 && errno != EINTR) {
				e->c->fd_errno = errno;
				abort_soon(e, ERR_UPSTREAM);
			}
		return;
	}
	size_t n = evbuffer_get_length(in);
	size_t room = call->out->len < call->out_max ? call->out_max - call->out->len : 0;
	char tmp[16384];
	while (n > 0) {
		size_t take = n < sizeof(tmp) ? n : sizeof(tmp);
		int got = evbuffer_remove(in, tmp, take);
		if (got <= 0)
			break;
		n -= (size_t)got;
		size_t keep = (size_t)got < room ? (size_t)got : room;
		buf_add(call->out, tmp, keep);
		room -= keep;
	}
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
	struct httpc_event *e = arg;
	e->got_body = 1;
	take_body(e, req);
}

static void on_done(struct evhttp_request *req, void *arg)
{
	struct httpc_event *e = arg;
	e->done = 1;
	e->req = NULL;
	if (!req) {
		if (!e->failure)
			e->failure = EVREQ_HTTP_EOF + 1;
		return;
	}
	e->status = evhttp_request_get_response_code(req);
	if (e->status == 0)
		return; /* never connected (evhttp's connect failure) */
	keep_headers(e, req);
	take_body(e, req);
}

static void on_error(enum evhttp_request_error err, void *arg)
{
	struct httpc_event *e = arg;
	e->failure = (int)err + 1;
	e->done = 1;
	e->req = NULL;
}

/* The connect deadline: cancel while the socket is still not connected. */
static void on_connect_deadline(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct httpc_event *e = arg;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int s = conn_fd(e);
	if (e->req && (s < 0 || getpeername(s, (struct sockaddr *)&ss, &len) < 0))
		abort_soon(e, ABORT_CONNECT);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	abort_soon(arg, ERR_TIMEOUT);
}

/* The request's headers and body. 0, or ERR_UPSTREAM with c->error set. */
static int fill_request(struct httpc_event *e, struct evhttp_request *req, const struct dial_url *u)
{
	const struct httpc_call *call = e->call;
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	char line[600];
	evhttp_add_header(h, "Host", u->authority);
	if (call->token && *call->token) {
		snprintf(line, sizeof(line), "Bearer %s", call->token);
		evhttp_add_header(h, "Authorization", line);
	}
	evhttp_add_header(h, "Content-Type", call->content_type);
	if (call->idem_key)
		evhttp_add_header(h, "Idempotency-Key", call->idem_key);
	const char *colon = call->extra ? strchr(call->extra, ':') : NULL;
	if (colon && (size_t)(colon - call->extra) < sizeof(line)) {
		snprintf(line, sizeof(line), "%.*s", (int)(colon - call->extra), call->extra);
		evhttp_add_header(h, line, colon + 1 + strspn(colon + 1, " \t"));
	}
	struct evbuffer *out = evhttp_request_get_output_buffer(req);
	if (call->put_fd >= 0) {
		/* The body goes out from a read-only mapping of the file
		 * (evbuffer_add_file), not a copy in memory; the server may refuse
		 * it on its headers, before it is sent. */
		evhttp_add_header(h, "Expect", "100-continue");
		snprintf(line, sizeof(line), "%lld", (long long)call->put_size);
		evhttp_add_header(h, "Content-Length", line);
		errno = 0;
		off_t at = lseek(call->put_fd, 0, SEEK_CUR);
		int fd = at < 0 || call->put_size == 0 ? -1 : dup(call->put_fd);
		/* evbuffer owns fd from here and closes it once sent or dropped */
		if (at < 0 || (call->put_size > 0 &&
		               (fd < 0 || evbuffer_add_file(out, fd, at, call->put_size) != 0))) {
			e->c->fd_errno = errno ? errno : EIO;
			return ERR_UPSTREAM;
		}
	} else if (call->body) {
		snprintf(line, sizeof(line), "%zu", call->body_len);
		evhttp_add_header(h, "Content-Length", line);
		evbuffer_add(out, call->body, call->body_len);
	}
	return 0;
}

/* The call's deadlines on the kept connection and as timers. */
static void set_deadlines(struct httpc_event *e, struct event *timers[2])
{
	const struct httpc_call *call = e->call;
	long idle = call->idle_ms > 0 ? call->idle_ms : call->timeout_ms;
	struct timeval tv = {idle / 1000, (idle % 1000) * 1000};
	if (idle > 0)
		evhttp_connection_set_timeout_tv(e->conn, &tv);
	/* httpc_get_file cuts a non-2xx body itself; its 2xx body is unbounded. */
	evhttp_connection_set_max_body_size(e->conn, call->get_fd >= 0 ? (ev_ssize_t)-1
	                                                               : (ev_ssize_t)call->out_max);
	timers[0] = timers[1] = NULL;
	if (call->timeout_ms > 0) {
		timers[0] = event_new(e->base, -1, 0, on_deadline, e);
		struct timeval t = {call->timeout_ms / 1000, (call->timeout_ms % 1000) * 1000};
		event_add(timers[0], &t);
	}
	if (call->connect_ms > 0 &&
	    (call->timeout_ms <= 0 || call->connect_ms < call->timeout_ms)) {
		timers[1] = event_new(e->base, -1, 0, on_connect_deadline, e);
		struct timeval t = {call->connect_ms / 1000, (call->connect_ms % 1000) * 1000};
		event_add(timers[1], &t);
	}
}

/* A new request for the call, its headers and body filled; NULL with
 * c->error (or c->fd_errno) set. */
static struct evhttp_request *new_request(struct httpc_event *e, const struct dial_url *u)
{
	struct evhttp_request *req = evhttp_request_new(on_done, e);
	evhttp_request_set_error_cb(req, on_error);
	if (e->call->get_fd >= 0)
		evhttp_request_set_chunked_cb(req, on_chunk);
	if (fill_request(e, req, u) != 0) {
		evhttp_request_free(req);
		return NULL;
	}
	return req;
}

/* libevent writes with writev and sendfile, which raise SIGPIPE when the
 * server has closed the connection; the signal is held back while a call
 * runs and one it raised is dropped after, so the process's own
 * disposition (a CLI dies of SIGPIPE on a closed stdout) is left as it
 * was. *pending says whether one was pending before (then it stays). */
static void sigpipe_hold(sigset_t *old, int *pending)
{
	sigset_t pipe_set, now;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, old);
	sigpending(&now);
	*pending = sigismember(&now, SIGPIPE);
}

static void sigpipe_release(const sigset_t *old, int pending)
{
	sigset_t pipe_set, now;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&now);
	struct timespec zero = {0, 0};
	if (!pending && sigismember(&now, SIGPIPE))
		sigtimedwait(&pipe_set, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Sends req and runs the loop until it ended: 0, or ERR_UPSTREAM when it
 * could not be started or the loop failed (c->error says why). */
static int send_and_wait(struct httpc_event *e, struct evhttp_request *req,
                         enum evhttp_cmd_type type, const struct dial_url *u)
{
	struct event *timers[2];
	set_deadlines(e, timers);
	e->req = req;
	int rc = 0;
	/* evhttp frees the request when it ends (and when it fails to start,
	 * once it has called back). */
	if (evhttp_make_request(e->conn, req, type, u->target) != 0 && !e->done) {
		snprintf(e->c->error, sizeof(e->c->error), "cannot send the request to %s",
		         u->authority);
		e->req = NULL;
		rc = ERR_UPSTREAM;
	}
	while (rc == 0 && !e->done)
		if (event_base_loop(e->base, EVLOOP_ONCE) != 0 && !e->done) {
			snprintf(e->c->error, sizeof(e->c->error), "the event loop ended early");
			rc = ERR_UPSTREAM;
		}
	if (e->req) { /* the loop failed under it */
		evhttp_cancel_request(e->req);
		e->req = NULL;
		conn_drop(e);
	}
	for (int i = 0; i < 2; i++)
		if (timers[i])
			event_free(timers[i]);
	event_del(e->abort_ev);
	return rc;
}

/* Whether a connect of our own to u fails, and why (into c->error):
 * evhttp 2.1 reports a failed connect or lookup without its errno. */
static int connect_fails(struct httpc_event *e, const struct dial_url *u)
{
	long ms =
	        e->call->connect_ms > 0 && e->call->connect_ms < 2000 ? e->call->connect_ms : 2000;
	int fd = dial_tcp(u->host, u->port, ms, e->c->error, sizeof(e->c->error));
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

/* What the ended call comes to: 0 with *status, or a failure with
 * c->error set. */
static int outcome(struct httpc_event *e, const struct dial_url *u, int *status)
{
	const struct httpc_call *call = e->call;
	char *msg = e->c->error;
	size_t len = sizeof(e->c->error);
	if (e->why_abort == ERR_TIMEOUT) {
		snprintf(msg, len, "%s %s: no answer within %ld ms", call->method, u->authority,
		         call->timeout_ms);
		return ERR_TIMEOUT;
	}
	if (e->why_abort == ABORT_CONNECT) {
		snprintf(msg, len, "cannot connect to %s port %d: timed out after %ld ms", u->host,
		         u->port, call->connect_ms);
		return ERR_TIMEOUT;
	}
	if (e->why_abort == ERR_UPSTREAM) /* the file failed; run() says how */
		return ERR_UPSTREAM;
	switch (e->failure - 1) {
	case -1: break;
	case EVREQ_HTTP_TIMEOUT:
		snprintf(msg, len, "%s %s: nothing moved for %ld ms", call->method, u->authority,
		         call->idle_ms > 0 ? call->idle_ms : call->timeout_ms);
		return ERR_TIMEOUT;
	case EVREQ_HTTP_DATA_TOO_LONG:
		snprintf(msg, len, "the answer is larger than %zu bytes", call->out_max);
		return ERR_TOOBIG;
	case EVREQ_HTTP_INVALID_HEADER:
		snprintf(msg, len, "%s %s: the answer is not HTTP or its headers are too long",
		         call->method, u->authority);
		return ERR_UPSTREAM;
	default: {
		/* On a new connection, this may be a failed lookup or connect. */
		int rc = e->reused || e->got_body ? 0 : connect_fails(e, u);
		if (rc == 0)
			snprintf(msg, len,
			         "%s %s: the connection closed before the answer was complete",
			         call->method, u->authority);
		return rc ? rc : ERR_UPSTREAM;
	}
	}
	if (e->status == 0) { /* evhttp's failed connect */
		int rc = connect_fails(e, u);
		if (rc == 0)
			snprintf(msg, len, "cannot connect to %s port %d (it answers now)", u->host,
			         u->port);
		return rc ? rc : ERR_UPSTREAM;
	}
	*status = e->status;
	return 0;
}

/* One try of the call on the connection conn_for gives. */
static int try_once(struct httpc_event *e, const struct dial_url *u, int *reused, int *status)
{
	e->done = e->status = e->failure = e->got_body = e->why_abort = 0;
	e->req = NULL;
	buf_reset(&e->c->headers);
	int ok = 0;
	enum evhttp_cmd_type type = method_of(e->call->method, &ok);
	if (!ok) {
		snprintf(e->c->error, sizeof(e->c->error), "method %.20s: not supported",
		         e->call->method);
		return ERR_UPSTREAM;
	}
	conn_for(e, u, reused);
	e->reused = *reused;
	struct evhttp_request *req = new_request(e, u);
	if (!req)
		return ERR_UPSTREAM;
	sigset_t old;
	int pending = 0;
	sigpipe_hold(&old, &pending);
	int rc = send_and_wait(e, req, type, u);
	sigpipe_release(&old, pending);
	if (rc == 0)
		rc = outcome(e, u, status);
	if (rc < 0 || e->failure)
		conn_drop(e); /* its state is unknown: never reuse it */
	return rc;
}

int httpc_event_run(struct httpc *c, const struct httpc_call *call, int *status)
{
	struct dial_url u;
	if (dial_parse(call->url, &u, c->error, sizeof(c->error)) != 0)
		return ERR_UPSTREAM;
	struct httpc_event *e = event_of(c);
	e->c = c;
	e->call = call;
	size_t out_len = call->out ? call->out->len : 0;
	int reused = 0;
	int rc = try_once(e, &u, &reused, status);
	/* A kept connection the server closed as the request went out: once
	 * more on a new one, when nothing at all came back (as libcurl does). */
	if (rc == ERR_UPSTREAM && reused && e->failure == EVREQ_HTTP_EOF + 1 && !e->got_body &&
	    !c->fd_errno) {
		if (call->out && call->out->data) {
			call->out->len = out_len;
			call->out->data[out_len] = '\0';
		}
		rc = try_once(e, &u, &reused, status);
	}
	if (rc == 0 && call->put_fd >= 0 && (*status < 200 || *status > 299))
		conn_drop(e); /* refused, maybe before the body: do not reuse */
	e->call = NULL;
	return rc;
}
