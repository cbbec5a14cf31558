#include "base/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/util.h"

/* One direction: bytes read from src, waiting to be written to dst. */
struct pipe_dir {
	int src, dst;
	char *buf;
	size_t cap, head, len; /* buffered bytes are buf[head, head + len) */
	uint64_t moved;
};

static void nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void dir_init(struct pipe_dir *d, int src, int dst, const void *pre, size_t pre_len)
{
	d->src = src;
	d->dst = dst;
	d->cap = pre_len > RELAY_BUF ? pre_len : RELAY_BUF;
	d->buf = xmalloc(d->cap);
	d->head = 0;
	d->len = pre_len;
	d->moved = 0;
	if (pre_len)
		memcpy(d->buf, pre, pre_len);
}

/* Reads what fits: 1 on EOF, 0, or a negative errno. */
static int dir_read(struct pipe_dir *d)
{
	if (d->head && d->len)
		memmove(d->buf, d->buf + d->head, d->len);
	d->head = 0;
	ssize_t n = read(d->src, d->buf + d->len, d->cap - d->len);
	if (n > 0) {
		d->len += (size_t)n;
		return 0;
	}
	if (n == 0)
		return 1;
	return errno == EAGAIN || errno == EINTR ? 0 : -errno;
}

/* Writes what it can: 0, or a negative errno. */
static int dir_write(struct pipe_dir *d)
{
	ssize_t n = send(d->dst, d->buf + d->head, d->len, MSG_NOSIGNAL);
	if (n < 0 && errno == ENOTSOCK)
		n = write(d->dst, d->buf + d->head, d->len);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	d->head += (size_t)n;
	d->len -= (size_t)n;
	d->moved += (uint64_t)n;
	if (!d->len)
		d->head = 0;
	return 0;
}

/* Adds fd's events to the poll set (one entry per fd). */
static void want(struct pollfd *p, int *n, int fd, short ev)
{
	for (int i = 0; i < *n; i++)
		if (p[i].fd == fd) {
			p[i].events |= ev;
			return;
		}
	p[*n] = (struct pollfd){.fd = fd, .events = ev};
	(*n)++;
}

static short revents(const struct pollfd *p, int n, int fd)
{
	for (int i = 0; i < n; i++)
		if (p[i].fd == fd)
			return p[i].revents;
	return 0;
}

int relay_run(int a, int b, const void *to_a, size_t to_a_len, const void *to_b, size_t to_b_len,
              struct relay_stats *stats)
{
	nonblocking(a);
	nonblocking(b);
	struct pipe_dir d[2];
	dir_init(&d[0], a, b, to_b, to_b_len);
	dir_init(&d[1], b, a, to_a, to_a_len);
	int rc = 0;
	int64_t deadline = 0;   /* set once a side has ended: the linger's end */
	int done[2] = {0, 0};   /* a direction whose src ended (EOF or failure) */
	int broken[2] = {0, 0}; /* a direction whose dst failed: drop its bytes */
	int shut[2] = {0, 0};   /* its dst told of the end (shutdown SHUT_WR) */
	for (;;) {
		struct pollfd p[2];
		int n = 0;
		for (int i = 0; i < 2; i++) {
			if (!done[i] && !broken[i] && d[i].len < d[i].cap)
				want(p, &n, d[i].src, POLLIN);
			if (d[i].len && !broken[i])
				want(p, &n, d[i].dst, POLLOUT);
		}
		if (n == 0)
			break; /* both directions ended, everything deliverable delivered */
		int timeout = -1;
		if (deadline) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				break;
			timeout = (int)left;
		}
		if (poll(p, (nfds_t)n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		for (int i = 0; i < 2; i++) {
			short rv = revents(p, n, d[i].src);
			if (!done[i] && !broken[i] && d[i].len < d[i].cap &&
			    (rv & (POLLIN | POLLHUP | POLLERR))) {
				int r = dir_read(&d[i]);
				if (r) {
					done[i] = 1;
					if (!deadline)
						deadline = now_ms() + RELAY_LINGER_MS;
					if (r < 0 && !rc)
						rc = r;
				}
			}
			rv = revents(p, n, d[i].dst);
			if (d[i].len && !broken[i] && (rv & (POLLOUT | POLLHUP | POLLERR))) {
				int w = dir_write(&d[i]);
				if (w < 0) {
					broken[i] = 1;
					if (!deadline)
						deadline = now_ms() + RELAY_LINGER_MS;
					if (!rc)
						rc = w;
				}
			}
			/* the end passed on once delivered: the next hop ends its
			 * side in turn, and its last words still come back */
			if (done[i] && !d[i].len && !broken[i] && !shut[i]) {
				shutdown(d[i].dst, SHUT_WR);
				shut[i] = 1;
			}
		}
	}
	if (stats) {
		stats->a_to_b = d[0].moved;
		stats->b_to_a = d[1].moved;
	}
	free(d[0].buf);
	free(d[1].buf);
	return rc;
}

int relay_write_all(int fd, const void *data, size_t len, int64_t timeout_ms)
{
	const char *p = data;
	int64_t deadline = now_ms() + timeout_ms;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == ENOTSOCK)
			n = write(fd, p, len);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd pf = {.fd = fd, .events = POLLOUT};
		poll(&pf, 1, (int)left);
	}
	return 0;
}
