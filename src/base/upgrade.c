#include "base/upgrade.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/dial.h"
#include "base/err.h"
#include "base/relay.h"
#include "base/util.h"

/* Text that goes into a request line or header: no CR, LF or NUL. */
static int header_safe(const char *s)
{
	return s == NULL || strpbrk(s, "\r\n") == NULL;
}

/* Reads into b (up to cap bytes in all) until until() says enough, EOF or
 * the deadline: 0, 1 on EOF, or ERR_TIMEOUT / a negative errno. */
static int read_some(int fd, struct buf *b, size_t cap, int64_t deadline)
{
	for (;;) {
		char tmp[4096];
		size_t room = cap - b->len < sizeof(tmp) ? cap - b->len : sizeof(tmp);
		if (room == 0)
			return ERR_TOOBIG;
		ssize_t n = read(fd, tmp, room);
		if (n > 0) {
			buf_add(b, tmp, (size_t)n);
			return 0;
		}
		if (n == 0)
			return 1;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return ERR_TIMEOUT;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		poll(&p, 1, (int)left);
	}
}

/* The value of header name in head (the header block), or -1. */
static long long content_length(const char *head)
{
	for (const char *p = strstr(head, "\r\n"); p; p = strstr(p + 2, "\r\n"))
		if (strncasecmp(p + 2, "Content-Length:", 15) == 0)
			return strtoll(p + 17, NULL, 10);
	return -1;
}

/* Reads the answer's head, then (not upgraded) its body. */
static int read_answer(struct upgrade *u, int fd, int64_t deadline)
{
	struct buf in;
	buf_init(&in);
	int rc = 0;
	char *end = NULL;
	while (!(end = in.data ? strstr(in.data, "\r\n\r\n") : NULL)) {
		rc = read_some(fd, &in, UPGRADE_MAX_HEAD, deadline);
		if (rc) {
			snprintf(u->error, sizeof(u->error), "%s before the answer's headers ended",
			         rc == 1             ? "the connection closed"
			         : rc == ERR_TIMEOUT ? "timed out"
			         : rc == ERR_TOOBIG  ? "headers too long"
			                             : strerror(-rc));
			buf_cleanup(&in);
			return rc == ERR_TIMEOUT ? ERR_TIMEOUT : ERR_UPSTREAM;
		}
	}
	size_t head_len = (size_t)(end - in.data) + 4;
	/* "HTTP/1.x NNN ..." */
	int status = 0;
	if (strncmp(in.data, "HTTP/1.", 7) == 0 && in.data[8] == ' ')
		for (int i = 9; i < 12 && in.data[i] >= '0' && in.data[i] <= '9'; i++)
			status = status * 10 + (in.data[i] - '0');
	if (status < 100 || status > 599) {
		snprintf(u->error, sizeof(u->error), "not an HTTP answer: \"%.40s\"", in.data);
		buf_cleanup(&in);
		return ERR_UPSTREAM;
	}
	u->status = status;
	struct buf *rest = status == 101 ? &u->extra : &u->body;
	buf_add(rest, in.data + head_len, in.len - head_len);
	end[2] = '\0';
	long long want = status == 101 ? 0 : content_length(in.data);
	buf_cleanup(&in);
	if (want > UPGRADE_MAX_BODY)
		want = UPGRADE_MAX_BODY;
	/* Without a length, the body ends with the connection. */
	while (status != 101 && (want < 0 || (long long)u->body.len < want))
		if (read_some(fd, &u->body, UPGRADE_MAX_BODY, deadline) != 0)
			break;
	return 0;
}

int upgrade_open(struct upgrade *u, const char *base_url, const char *path, const char *token,
                 const char *proto, long timeout_ms)
{
	memset(u, 0, sizeof(*u));
	u->fd = u->sock = -1;
	buf_init(&u->extra);
	buf_init(&u->body);
	struct dial_url url;
	char why[300];
	if (dial_parse(base_url, &url, why, sizeof(why)) || !header_safe(path) ||
	    !header_safe(token) || !header_safe(proto)) {
		snprintf(u->error, sizeof(u->error), "cannot ask %s for %s", base_url, path);
		return ERR_INVALID;
	}
	int64_t deadline = now_ms() + timeout_ms;
	int sock = dial_tcp(url.host, url.port, timeout_ms, u->error, sizeof(u->error));
	if (sock < 0)
		return sock;
	u->sock = sock;
	struct buf req;
	buf_init(&req);
	buf_printf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, url.authority);
	if (token && *token)
		buf_printf(&req, "Authorization: Bearer %s\r\n", token);
	buf_printf(&req, "Connection: Upgrade\r\nUpgrade: %s\r\nContent-Length: 0\r\n\r\n", proto);
	int rc = relay_write_all(sock, req.data, req.len, deadline - now_ms());
	buf_cleanup(&req);
	if (rc) {
		snprintf(u->error, sizeof(u->error), "cannot send the request: %s", strerror(-rc));
		return rc == -ETIMEDOUT ? ERR_TIMEOUT : ERR_UPSTREAM;
	}
	rc = read_answer(u, sock, deadline);
	if (rc == 0 && u->status == 101)
		u->fd = sock;
	return rc;
}

void upgrade_close(struct upgrade *u)
{
	if (u->sock >= 0)
		close(u->sock);
	u->sock = u->fd = -1;
	buf_cleanup(&u->extra);
	buf_cleanup(&u->body);
}
