#include "base/dial.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/err.h"
#include "base/event_lazy.h"
#include "base/util.h"

/* Copies s into out (of outlen bytes): 0, or -1 when it does not fit. */
static int fit(char *out, size_t outlen, const char *s)
{
	return snprintf(out, outlen, "%s", s) < (int)outlen ? 0 : -1;
}

/* The parsed URI's parts into out; 0 or ERR_INVALID with why in err. */
static int take_parts(const struct evhttp_uri *u, const char *url, struct dial_url *out, char *err,
                      size_t errlen)
{
	const char *scheme = evhttp_uri_get_scheme(u), *host = evhttp_uri_get_host(u);
	const char *path = evhttp_uri_get_path(u), *query = evhttp_uri_get_query(u);
	if (!scheme || strcasecmp(scheme, "http") != 0 || !host || !*host) {
		snprintf(err, errlen, "%.200s: expected http://HOST[:PORT][/PATH]", url);
		return ERR_INVALID;
	}
	if (evhttp_uri_get_userinfo(u)) {
		snprintf(err, errlen, "%.200s: user information in a URL is not sent", url);
		return ERR_INVALID;
	}
	int port = evhttp_uri_get_port(u);
	out->port = port > 0 ? port : 80;
	size_t hl = strlen(host);
	int bracketed = host[0] == '[' && hl > 2 && host[hl - 1] == ']';
	int bad = hl >= sizeof(out->host) ||
	          fit(out->host, sizeof(out->host), bracketed ? host + 1 : host);
	if (!bad && bracketed)
		out->host[hl - 2] = '\0';
	if (!bad && port > 0)
		bad = snprintf(out->authority, sizeof(out->authority), "%s:%d", host, port) >=
		      (int)sizeof(out->authority);
	else if (!bad)
		bad = fit(out->authority, sizeof(out->authority), host);
	if (!bad)
		bad = snprintf(out->target, sizeof(out->target), "%s%s%s",
		               path && *path ? path : "/", query ? "?" : "",
		               query ? query : "") >= (int)sizeof(out->target);
	if (bad) {
		snprintf(err, errlen, "%.200s: too long", url);
		return ERR_INVALID;
	}
	return 0;
}

int dial_parse(const char *url, struct dial_url *out, char *err, size_t errlen)
{
	event_lazy_load();
	/* NONCONFORMANT: the path and query as given (callers escape what
	 * they put in a query); the parser still finds scheme, host and port. */
	struct evhttp_uri *u = evhttp_uri_parse_with_flags(url, EVHTTP_URI_NONCONFORMANT);
	if (!u) {
		snprintf(err, errlen, "%.200s: not a URL", url);
		return ERR_INVALID;
	}
	struct dial_url parsed;
	int rc = take_parts(u, url, &parsed, err, errlen);
	evhttp_uri_free(u);
	if (rc == 0)
		*out = parsed;
	return rc;
}

/* Connects the non-blocking fd to ai by the deadline: 0 or an errno. */
static int connect_by(int fd, const struct addrinfo *ai, int64_t deadline)
{
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return errno;
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return ETIMEDOUT;
		int e = 0;
		socklen_t len = sizeof(e);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
			return errno;
		return e;
	}
}

int dial_tcp(const char *host, int port, long timeout_ms, char *err, size_t errlen)
{
	int64_t deadline = now_ms() + timeout_ms;
	struct addrinfo hints = {
	        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char service[16];
	snprintf(service, sizeof(service), "%d", port);
	int g = getaddrinfo(host, service, &hints, &res);
	if (g != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", host,
		         g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
		return ERR_UPSTREAM;
	}
	int e = EHOSTUNREACH;
	for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		                ai->ai_protocol);
		e = fd < 0 ? errno : connect_by(fd, ai, deadline);
		if (e == 0) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			freeaddrinfo(res);
			return fd;
		}
		if (fd >= 0)
			close(fd);
		if (e == ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	if (e == ETIMEDOUT)
		snprintf(err, errlen, "cannot connect to %s port %d: timed out after %ld ms", host,
		         port, timeout_ms);
	else
		snprintf(err, errlen, "cannot connect to %s port %d: %s", host, port, strerror(e));
	return e == ETIMEDOUT ? ERR_TIMEOUT : ERR_UPSTREAM;
}
