/* dial.h - where an http:// URL points, and a TCP connection to it with a
 * deadline and a reason.
 *
 * dial_parse reads an http:// URL with libevent's URI parser (base/
 * event_lazy.h; loaded on first use) into the host to connect to (an IPv6
 * literal without its brackets), the port (80 when none), the authority
 * for a Host header ("[::1]:8080") and the request target (path and
 * query, "/" when empty). Only plain http: the cluster's API and the
 * agents speak it; httpc takes https:// URLs to libcurl (base/httpc.h).
 *
 * dial_tcp resolves a host and connects to its addresses in turn until one
 * answers or the deadline passes. httpc's libevent backend calls it to say
 * why a connection failed (libevent 2.1 drops the connect's errno);
 * upgrade_open connects with it. Thread-safe; no state.
 */
#ifndef ANVIL_DIAL_H
#define ANVIL_DIAL_H

#include <stddef.h>

#define DIAL_HOST_MAX   256
#define DIAL_TARGET_MAX 8192

struct dial_url {
	char host[DIAL_HOST_MAX];          /* to resolve: a name or an address, no brackets */
	int port;                          /* 80 when the URL has none */
	char authority[DIAL_HOST_MAX + 8]; /* for Host: as the URL wrote it, with its port */
	char target[DIAL_TARGET_MAX];      /* path?query, "/" at least */
};

/* 0, or ERR_INVALID with why in err: not a URL, not http://, user
 * information in it (never sent), or parts too long for the fields. */
int dial_parse(const char *url, struct dial_url *out, char *err, size_t errlen);

/* A connected TCP socket to host:port (non-blocking, close-on-exec,
 * TCP_NODELAY) that the caller closes; or ERR_UPSTREAM (cannot resolve,
 * refused, unreachable) or ERR_TIMEOUT, with what failed and why in err
 * ("cannot connect to 127.0.0.1 port 1: Connection refused"). */
int dial_tcp(const char *host, int port, long timeout_ms, char *err, size_t errlen);

#endif
