#include "base/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/mhd_lazy.h"
#include "base/util.h"

#define ROUTES_MAX 64
#define NBUCKETS   12

static const double bucket_le[NBUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                           0.05,   0.1,   0.25,   0.5,   1,    5};

struct route_stat {
	const char *route;
	uint64_t count;
	uint64_t errors;
	double sum;
	uint64_t buckets[NBUCKETS];
};

/* What httpd_upgrade() asked for, kept with the request until MHD has sent
 * the 101 (then a stream takes it) or dropped the connection. */
struct httpd_upgrade {
	httpd_stream_fn fn;
	void *ctx;
	char proto[32];
};

/* A running stream: its thread, between the 101 and the end of fn. */
struct stream {
	struct httpd *h;
	struct MHD_UpgradeResponseHandle *urh;
	struct httpd_upgrade up;
	struct httpd_stream st;
	char *extra;
	struct stream *prev, *next; /* h->streams */
};

struct httpd {
	struct MHD_Daemon *mhd;
	struct httpd_config cfg;
	pthread_mutex_t mu; /* guards stats, streams, nstreams and stopping */
	pthread_cond_t streams_done;
	struct route_stat stats[ROUTES_MAX];
	int nstats;
	struct stream *streams; /* running, for httpd_stop to shut down */
	int nstreams;
	uint64_t streams_total;
	int stopping;
	char *spool_dir; /* cfg.spool_dir, copied */
	struct connguard *guard;
};

static void record(struct httpd *h, const char *route, int status, double secs)
{
	pthread_mutex_lock(&h->mu);
	struct route_stat *s = NULL;
	for (int i = 0; i < h->nstats; i++)
		if (strcmp(h->stats[i].route, route) == 0)
			s = &h->stats[i];
	if (!s && h->nstats < ROUTES_MAX) {
		s = &h->stats[h->nstats++];
		s->route = route;
	}
	if (s) {
		s->count++;
		if (status >= 400)
			s->errors++;
		s->sum += secs;
		for (int b = 0; b < NBUCKETS; b++)
			if (secs <= bucket_le[b])
				s->buckets[b]++;
	}
	pthread_mutex_unlock(&h->mu);
}

/* ---- connection guard (base/connguard.h): MHD's hooks ---- */

static struct connguard_conn *guarded(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void guard_phase(struct httpd *h, struct MHD_Connection *conn, enum connguard_phase p)
{
	struct connguard_conn *c = guarded(conn);
	if (c)
		connguard_phase(h->guard, c, p, now_ms());
}

/* MHD's accept policy. */
static enum MHD_Result admit_cb(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct httpd *h = cls;
	return connguard_admit(h->guard, addr, len, now_ms()) ? MHD_YES : MHD_NO;
}

/* A connection starts (its socket context is the guard's record) or ends:
 * MHD calls this before it closes the socket. */
static void notify_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode code)
{
	struct httpd *h = cls;
	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		connguard_close(h->guard, *socket_context);
		*socket_context = NULL;
		return;
	}
	const union MHD_ConnectionInfo *fd =
	        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	const union MHD_ConnectionInfo *addr =
	        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (!fd || !addr)
		return; /* unguarded: MHD's own timeout still applies */
	*socket_context = connguard_open(h->guard, fd->connect_fd, addr->client_addr,
	                                 sizeof(struct sockaddr_storage), now_ms());
}

/* libmicrohttpd's error log: counted and rate-limited by the guard, not
 * one line per dropped connection. */
static void library_log_cb(void *cls, const char *fmt, va_list ap)
{
	struct httpd *h = cls;
	char text[256];
	vsnprintf(text, sizeof(text), fmt, ap);
	connguard_library_message(h->guard, text, now_ms());
}

/* The limits in force: cfg's (the defaults when unset), with
 * max_connections lowered to what the open-file limit leaves room for
 * (room for its connections, those being closed, and the daemon's files). */
static void limits_in_force(const struct httpd_config *cfg, struct connguard_limits *l)
{
	if (cfg->limits.max_connections > 0)
		*l = cfg->limits;
	else
		connguard_limits_default(l);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return;
	int64_t room = ((int64_t)rl.rlim_cur - 320) * 8 / 9;
	if (room < 16)
		room = 16;
	if (l->max_connections > room) {
		log_warn("http-max-connections lowered: the open-file limit stays low "
		         "max_connections=%lld asked=%lld nofile=%lld hard=%lld (raise the hard "
		         "limit: ulimit -Hn, systemd's LimitNOFILE=)",
		         (long long)room, (long long)l->max_connections, (long long)rl.rlim_cur,
		         (long long)rl.rlim_max);
		l->max_connections = room;
	}
}

static void upgrade_cb(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock,
                       struct MHD_UpgradeResponseHandle *urh);

/* The 101 answer; MHD calls upgrade_cb once it is sent. */
static enum MHD_Result respond_upgrade(struct httpd_req *req)
{
	struct MHD_Response *r = MHD_create_response_for_upgrade(upgrade_cb, req->server);
	if (!r)
		return MHD_NO;
	enum MHD_Result ret = MHD_NO;
	if (MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, req->upgrade->proto) == MHD_YES &&
	    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "Upgrade") == MHD_YES)
		ret = MHD_queue_response(req->conn, MHD_HTTP_SWITCHING_PROTOCOLS, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result respond(struct httpd_req *req)
{
	if (req->upgrade)
		return respond_upgrade(req);
	struct MHD_Response *r;
	if (req->out_fd >= 0) {
		r = MHD_create_response_from_fd64(req->out_size, req->out_fd);
		if (r)
			req->out_fd = -1; /* MHD's now: it closes it */
	} else {
		const char *body = req->out.data ? req->out.data : "";
		r = MHD_create_response_from_buffer(req->out.len, (void *)body,
		                                    MHD_RESPMEM_MUST_COPY);
	}
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type",
	                        req->content_type ? req->content_type : "application/json");
	for (int i = 0; i < req->nhdrs; i++)
		MHD_add_response_header(r, req->hdr_name[i], req->hdr_value[i]);
	enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned)req->status, r);
	MHD_destroy_response(r);
	return ret;
}

/* A spooled body's file, in cfg.spool_dir; on failure spool_errno says why
 * (answered once the body is in). */
static void spool_open(struct httpd *h, struct httpd_req *req, int64_t max)
{
	req->spool_max = max;
	int rc = mkdir_p(h->spool_dir, 0700);
	if (rc) {
		req->spool_errno = -rc;
		return;
	}
	req->body_path = xasprintf("%s/body-XXXXXX", h->spool_dir);
	req->spool_fd = mkostemp(req->body_path, O_CLOEXEC);
	if (req->spool_fd < 0) {
		req->spool_errno = errno;
		free(req->body_path);
		req->body_path = NULL;
	}
}

/* A chunk of a spooled body: to its file, up to its cap. */
static void spool_write(struct httpd_req *req, const char *data, size_t n)
{
	struct connguard_conn *c = guarded(req->conn);
	if (c)
		connguard_received(req->server->guard, c, n);
	if ((int64_t)(req->body_len + n) > req->spool_max)
		req->body_too_big = 1;
	for (size_t off = 0; !req->body_too_big && !req->spool_errno && off < n;) {
		ssize_t w = write(req->spool_fd, data + off, n - off);
		if (w < 0 && errno != EINTR)
			req->spool_errno = errno;
		off += w > 0 ? (size_t)w : 0;
	}
	req->body_len += n;
}

/* The connection's peer address into out (httpd_req.peer). */
static void peer_text(struct MHD_Connection *conn, char *out, size_t len)
{
	const union MHD_ConnectionInfo *ci =
	        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	out[0] = '\0';
	if (sa && sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out,
		          (socklen_t)len);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct in6_addr *a =
		        &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a))
			inet_ntop(AF_INET, &a->s6_addr[12], out, (socklen_t)len);
		else
			inet_ntop(AF_INET6, a, out, (socklen_t)len);
	}
}

/* The first call, with the headers: a new request, and where its body goes. */
static enum MHD_Result first_call(struct httpd *h, struct MHD_Connection *conn, const char *url,
                                  const char *method, void **con_cls)
{
	struct httpd_req *req = xcalloc(1, sizeof(*req));
	req->method = method;
	req->path = url;
	req->conn = conn;
	req->server = h;
	req->status = 200;
	peer_text(conn, req->peer, sizeof(req->peer));
	req->start_us = now_us();
	req->spool_fd = req->out_fd = -1;
	buf_init(&req->out);
	*con_cls = req;
	int64_t max = h->cfg.spool ? h->cfg.spool(req, h->cfg.ctx) : 0;
	guard_phase(h, conn, max > 0 ? CONNGUARD_SPOOL : CONNGUARD_BODY);
	if (max < 0) { /* answered: the body is not read */
		req->state = 3;
		return respond(req);
	}
	if (max > 0)
		spool_open(h, req, max);
	return MHD_YES;
}

/* The whole body is in: why it cannot be handled, answered; else 0. */
static int body_refused(struct httpd *h, struct httpd_req *req)
{
	if (req->spool_fd >= 0 && close(req->spool_fd) < 0 && !req->spool_errno)
		req->spool_errno = errno;
	req->spool_fd = -1;
	char msg[160];
	if (req->body_too_big) {
		snprintf(msg, sizeof(msg), "body: larger than the limit of %lld bytes",
		         (long long)(req->body_path ? req->spool_max : (int64_t)h->cfg.max_body));
		httpd_error(req, ERR_TOOBIG, msg);
		return 1;
	}
	if (req->spool_errno) {
		snprintf(msg, sizeof(msg), "body: cannot be stored on the server: %s",
		         strerror(req->spool_errno));
		httpd_error(req, -req->spool_errno, msg);
		return 1;
	}
	return 0;
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_size, void **con_cls)
{
	(void)version;
	struct httpd *h = cls;
	struct httpd_req *req = *con_cls;
	if (!req)
		return first_call(h, conn, url, method, con_cls);
	if (req->state == 3) { /* answered before its body: drop what comes */
		*upload_size = 0;
		return MHD_YES;
	}
	if (req->state == 2)
		return respond(req);
	if (*upload_size) {
		if (req->spool_fd >= 0 || req->spool_errno) {
			spool_write(req, upload_data, *upload_size);
		} else if (req->body_len + *upload_size > h->cfg.max_body) {
			req->body_too_big = 1;
		} else {
			req->body = xrealloc(req->body, req->body_len + *upload_size + 1);
			memcpy(req->body + req->body_len, upload_data, *upload_size);
			req->body_len += *upload_size;
			req->body[req->body_len] = '\0';
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (body_refused(h, req))
		return respond(req);
	if (!req->body) {
		req->body = xstrdup("");
	}
	guard_phase(h, conn, CONNGUARD_BUSY);
	int rc = h->cfg.handler(req, h->cfg.ctx);
	if (rc == HTTPD_SUSPENDED)
		return MHD_YES;
	return respond(req);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	(void)toe;
	struct httpd *h = cls;
	struct httpd_req *req = *con_cls;
	guard_phase(h, conn, CONNGUARD_IDLE); /* kept alive, or closed next */
	if (!req)
		return;
	if (req->upgrade) { /* never upgraded: the stream function only frees */
		req->upgrade->fn(NULL, req->upgrade->ctx);
		free(req->upgrade);
	}
	double secs = (double)(now_us() - req->start_us) / 1e6;
	record(h, req->route ? req->route : "other", req->status, secs);
	buf_cleanup(&req->out);
	free(req->body);
	if (req->spool_fd >= 0)
		close(req->spool_fd);
	if (req->body_path) /* the handler may have moved it: then ENOENT */
		unlink(req->body_path);
	free(req->body_path);
	if (req->out_fd >= 0)
		close(req->out_fd);
	free(req);
	*con_cls = NULL;
}

void httpd_nofile_raise(void)
{
	int64_t before = 0, after = 0;
	int rc = nofile_raise(&before, &after);
	if (rc)
		log_warn("cannot raise the open-file limit nofile=%lld err=\"%s\"",
		         (long long)before, strerror(-rc));
	else if (after != before)
		log_info("open-file limit raised nofile=%lld was=%lld", (long long)after,
		         (long long)before);
}

static int hex_digit(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/* libmicrohttpd's unescaping of the path and of query arguments, except
 * that an escape of a control byte (%00 to %1F, %7F) stays as written:
 * decoded, "/v1/objects/a%00b" would reach a handler as "/v1/objects/a"
 * (a C string ends at the NUL) and name another thing than the client
 * asked for. Left escaped, it is refused where it is read (httpd.h). */
static size_t unescape_cb(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	char *out = s;
	for (const char *in = s; *in;) {
		int hi = in[0] == '%' ? hex_digit(in[1]) : -1;
		int lo = hi >= 0 ? hex_digit(in[2]) : -1;
		int byte = hi * 16 + lo;
		if (lo >= 0 && byte >= 0x20 && byte != 0x7f) {
			*out++ = (char)byte;
			in += 3;
		} else {
			*out++ = *in++;
		}
	}
	*out = '\0';
	return (size_t)(out - s);
}

int httpd_start(const struct httpd_config *cfg, struct httpd **out)
{
	mhd_lazy_load();
	struct httpd *h = xcalloc(1, sizeof(*h));
	h->cfg = *cfg;
	if (!h->cfg.bind)
		h->cfg.bind = "127.0.0.1";
	if (h->cfg.threads <= 0)
		h->cfg.threads = 4;
	if (!h->cfg.max_body)
		h->cfg.max_body = 1 << 20;
	limits_in_force(cfg, &h->cfg.limits);
	h->spool_dir = xstrdup(cfg->spool_dir ? cfg->spool_dir : "/tmp");
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->streams_done, NULL);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
	if (inet_pton(AF_INET, h->cfg.bind, &sa.sin_addr) != 1) {
		log_error("bad bind address addr=%s", h->cfg.bind);
		free(h->spool_dir);
		free(h);
		return ERR_INVALID;
	}
	h->guard = connguard_new(&h->cfg.limits);
	/* The guard enforces the connection limits (admit_cb); MHD's limit,
	 * which it splits evenly between its threads, only has to be above
	 * it whichever thread accepts. MHD's own timeout is the idle one: no
	 * byte moved for idle_ms (an answer the client stopped reading). The
	 * external logger must be the first option. */
	unsigned idle_s = (unsigned)((h->cfg.limits.idle_ms + 999) / 1000);
	h->mhd = MHD_start_daemon(
	        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
	                MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG,
	        0, admit_cb, h, access_cb, h, MHD_OPTION_EXTERNAL_LOGGER, library_log_cb, h,
	        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE,
	        (unsigned)h->cfg.threads, MHD_OPTION_NOTIFY_COMPLETED, completed_cb, h,
	        MHD_OPTION_NOTIFY_CONNECTION, notify_cb, h, MHD_OPTION_CONNECTION_TIMEOUT, idle_s,
	        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * h->cfg.limits.max_connections),
	        MHD_OPTION_UNESCAPE_CALLBACK, unescape_cb, h, MHD_OPTION_END);
	if (!h->mhd || connguard_start(h->guard)) {
		if (h->mhd)
			MHD_stop_daemon(h->mhd);
		connguard_free(h->guard); /* logs what libmicrohttpd said */
		log_error("cannot listen addr=%s port=%d", h->cfg.bind, cfg->port);
		pthread_cond_destroy(&h->streams_done);
		pthread_mutex_destroy(&h->mu);
		free(h->spool_dir);
		free(h);
		return -EADDRINUSE;
	}
	*out = h;
	return 0;
}

int httpd_port(const struct httpd *h)
{
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
	return info ? info->port : -1;
}

/* Streams end before the daemon: MHD must not stop under an upgraded
 * connection whose handle a stream still holds. Shutting a socket down
 * wakes its stream's poll with EOF; a stream function returns soon after
 * (its other side is bounded by timeouts). */
static void streams_stop(struct httpd *h)
{
	pthread_mutex_lock(&h->mu);
	h->stopping = 1;
	for (struct stream *s = h->streams; s; s = s->next)
		shutdown(s->st.fd, SHUT_RDWR);
	int64_t start = now_ms();
	int warned = 0;
	while (h->nstreams > 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&h->streams_done, &h->mu, &ts);
		if (h->nstreams > 0 && !warned && now_ms() - start > 5000) {
			log_warn("waiting for streams to end count=%d", h->nstreams);
			warned = 1;
		}
	}
	pthread_mutex_unlock(&h->mu);
}

void httpd_stop(struct httpd *h)
{
	if (!h)
		return;
	streams_stop(h);
	MHD_stop_daemon(h->mhd);
	connguard_free(h->guard); /* after MHD: every connection closed */
	pthread_cond_destroy(&h->streams_done);
	pthread_mutex_destroy(&h->mu);
	free(h->spool_dir);
	free(h);
}

const char *httpd_query(struct httpd_req *req, const char *key)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *httpd_header(struct httpd_req *req, const char *key)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, key);
}

void httpd_json(struct httpd_req *req, int status, const char *json)
{
	req->status = status;
	buf_reset(&req->out);
	buf_adds(&req->out, json);
	req->content_type = "application/json";
}

void httpd_error(struct httpd_req *req, int code, const char *msg)
{
	/* the message may quote what the request carried, in any bytes */
	char *fixed = msg ? jv_utf8_fix(msg) : NULL;
	const char *text = fixed ? fixed : msg ? msg : err_msg(code);
	json_t *o = json_pack("{s:{s:s,s:s}}", "error", "code", err_name(code), "message", text);
	char *s = jv_dump(o);
	httpd_json(req, err_http(code), s);
	free(s);
	json_decref(o);
	free(fixed);
}

void httpd_send_fd(struct httpd_req *req, int status, int fd, uint64_t size)
{
	if (req->out_fd >= 0)
		close(req->out_fd);
	req->status = status;
	req->out_fd = fd;
	req->out_size = size;
	buf_reset(&req->out);
	req->content_type = "application/octet-stream";
}

void httpd_add_header(struct httpd_req *req, const char *name, const char *value)
{
	if (req->nhdrs >= 4)
		return;
	snprintf(req->hdr_name[req->nhdrs], sizeof(req->hdr_name[0]), "%s", name);
	snprintf(req->hdr_value[req->nhdrs], sizeof(req->hdr_value[0]), "%s", value);
	req->nhdrs++;
}

void httpd_suspend(struct httpd_req *req)
{
	req->state = 1;
	MHD_suspend_connection(req->conn);
}

void httpd_resume(struct httpd_req *req)
{
	req->state = 2;
	MHD_resume_connection(req->conn);
}

void httpd_upgrade(struct httpd_req *req, const char *proto, httpd_stream_fn fn, void *ctx)
{
	struct httpd_upgrade *up = xcalloc(1, sizeof(*up));
	up->fn = fn;
	up->ctx = ctx;
	snprintf(up->proto, sizeof(up->proto), "%s", proto);
	req->upgrade = up;
	req->status = MHD_HTTP_SWITCHING_PROTOCOLS;
}

/* 1 when the comma-separated header value has token (any case). */
static int has_token(const char *value, const char *token)
{
	size_t n = strlen(token);
	for (const char *p = value; p && *p;) {
		p += strspn(p, " \t,");
		size_t len = strcspn(p, ",");
		size_t end = len;
		while (end && (p[end - 1] == ' ' || p[end - 1] == '\t'))
			end--;
		if (end == n && strncasecmp(p, token, n) == 0)
			return 1;
		p += len;
	}
	return 0;
}

int httpd_wants_upgrade(struct httpd_req *req, const char *proto)
{
	return has_token(httpd_header(req, MHD_HTTP_HEADER_CONNECTION), "upgrade") &&
	       has_token(httpd_header(req, MHD_HTTP_HEADER_UPGRADE), proto);
}

static void *stream_main(void *arg)
{
	struct stream *s = arg;
	struct httpd *h = s->h;
	s->up.fn(&s->st, s->up.ctx);
	pthread_mutex_lock(&h->mu);
	if (s->prev)
		s->prev->next = s->next;
	else
		h->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&h->mu);
	/* Off the list first: httpd_stop never shuts down a closed fd's number. */
	MHD_upgrade_action(s->urh, MHD_UPGRADE_ACTION_CLOSE);
	pthread_mutex_lock(&h->mu);
	h->nstreams--;
	pthread_cond_broadcast(&h->streams_done);
	pthread_mutex_unlock(&h->mu);
	free(s->extra);
	free(s);
	return NULL;
}

/* MHD sent the 101: the connection is the stream's, on a thread of its own
 * (this runs on MHD's event loop, which must not block). */
static void upgrade_cb(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct httpd *h = cls;
	struct httpd_req *req = con_cls;
	guard_phase(h, conn, CONNGUARD_STREAM);
	struct stream *s = xcalloc(1, sizeof(*s));
	s->h = h;
	s->urh = urh;
	s->up = *req->upgrade;
	free(req->upgrade);
	req->upgrade = NULL;
	s->extra = xmalloc(extra_in_size + 1);
	if (extra_in_size)
		memcpy(s->extra, extra_in, extra_in_size);
	s->st = (struct httpd_stream){.fd = sock, .extra = s->extra, .extra_len = extra_in_size};
	int fl = fcntl(sock, F_GETFL);
	if (fl >= 0)
		fcntl(sock, F_SETFL, fl | O_NONBLOCK);
	pthread_mutex_lock(&h->mu);
	int ok = !h->stopping;
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (ok && pthread_create(&t, &attr, stream_main, s) == 0) {
		s->next = h->streams;
		if (s->next)
			s->next->prev = s;
		h->streams = s;
		h->nstreams++;
		h->streams_total++;
	} else {
		ok = 0;
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_unlock(&h->mu);
	if (!ok) {
		s->up.fn(NULL, s->up.ctx);
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		free(s->extra);
		free(s);
	}
}

void httpd_metrics(struct httpd *h, const char *prefix, struct buf *out)
{
	pthread_mutex_lock(&h->mu);
	buf_printf(out, "# HELP %s_http_requests_total HTTP requests served, by route.\n", prefix);
	buf_printf(out, "# TYPE %s_http_requests_total counter\n", prefix);
	for (int i = 0; i < h->nstats; i++)
		buf_printf(out, "%s_http_requests_total{route=\"%s\"} %llu\n", prefix,
		           h->stats[i].route, (unsigned long long)h->stats[i].count);
	buf_printf(out, "# HELP %s_http_request_errors_total HTTP requests answered 4xx/5xx.\n",
	           prefix);
	buf_printf(out, "# TYPE %s_http_request_errors_total counter\n", prefix);
	for (int i = 0; i < h->nstats; i++)
		buf_printf(out, "%s_http_request_errors_total{route=\"%s\"} %llu\n", prefix,
		           h->stats[i].route, (unsigned long long)h->stats[i].errors);
	buf_printf(out, "# HELP %s_http_streams Upgraded connections (streams) open now.\n",
	           prefix);
	buf_printf(out, "# TYPE %s_http_streams gauge\n%s_http_streams %d\n", prefix, prefix,
	           h->nstreams);
	buf_printf(out, "# HELP %s_http_streams_total Upgraded connections (streams) opened.\n",
	           prefix);
	buf_printf(out, "# TYPE %s_http_streams_total counter\n%s_http_streams_total %llu\n",
	           prefix, prefix, (unsigned long long)h->streams_total);
	buf_printf(out, "# HELP %s_http_request_duration_seconds HTTP request latency.\n", prefix);
	buf_printf(out, "# TYPE %s_http_request_duration_seconds histogram\n", prefix);
	for (int i = 0; i < h->nstats; i++) {
		struct route_stat *s = &h->stats[i];
		for (int b = 0; b < NBUCKETS; b++)
			buf_printf(
			        out,
			        "%s_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} "
			        "%llu\n",
			        prefix, s->route, bucket_le[b], (unsigned long long)s->buckets[b]);
		buf_printf(
		        out,
		        "%s_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n",
		        prefix, s->route, (unsigned long long)s->count);
		buf_printf(out, "%s_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", prefix,
		           s->route, s->sum);
		buf_printf(out, "%s_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
		           prefix, s->route, (unsigned long long)s->count);
	}
	pthread_mutex_unlock(&h->mu);
	connguard_metrics(h->guard, prefix, out);
}
