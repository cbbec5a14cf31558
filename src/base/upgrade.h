/* upgrade.h - the client side of an HTTP/1.1 Upgrade: a byte stream to a
 * server route.
 *
 * upgrade_open() connects a plain TCP socket (base/dial.h: the URL read
 * by libevent's URI parser, the address resolved with getaddrinfo, the
 * connect bounded by the timeout), then writes the request itself - "POST PATH HTTP/1.1" with the bearer token, "Connection:
 * Upgrade" and "Upgrade: PROTO" - and reads the status line and headers
 * itself (capped at UPGRADE_MAX_HEAD bytes). On 101 the connected socket
 * is the stream's, and any bytes the server sent behind its headers are
 * kept in extra for the caller to use first. On any other status the
 * answer's body (capped at UPGRADE_MAX_BODY, read up to its
 * Content-Length) is kept for the caller's error message.
 *
 * The URL is plain http:// (the cluster's API): the socket is used with
 * read/write directly. No HTTP client library is involved: after the
 * 101 the connection is a byte stream that no client library hands over.
 * Owned by one thread; upgrade_close() closes the socket.
 */
#ifndef ANVIL_UPGRADE_H
#define ANVIL_UPGRADE_H

#include <stddef.h>

#include "base/buf.h"

#define UPGRADE_MAX_HEAD (16 * 1024)
#define UPGRADE_MAX_BODY (64 * 1024)

struct upgrade {
	int fd;           /* the stream (non-blocking); -1 when not upgraded */
	int status;       /* the answer's HTTP status; 0 before one */
	struct buf extra; /* on 101: bytes read past the headers, already the stream's */
	struct buf body;  /* otherwise: the answer's body */
	char error[512];  /* why it failed (transport, or a bad answer) */
	int sock;         /* the connected socket, fd's; -1 when none */
};

/* Connects to base_url (scheme, host and port; "http://h:p") and asks
 * for path to be upgraded to proto, sending token as the bearer (NULL:
 * none). 0 when an answer came: 101 (u->fd is the stream) or another
 * status (u->body holds its body); ERR_UPSTREAM or ERR_TIMEOUT when the
 * server could not be reached or answered nonsense (u->error says why).
 * u needs upgrade_close() either way. */
int upgrade_open(struct upgrade *u, const char *base_url, const char *path, const char *token,
                 const char *proto, long timeout_ms);
void upgrade_close(struct upgrade *u);

#endif
