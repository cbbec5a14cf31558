#include "agent/holder.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent/exec.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/relay.h"
#include "base/util.h"
#include "proto/stream.h"

#define READ_CHUNK    16384
#define INPUT_MAX     (256 * 1024) /* keystrokes not yet taken by the terminal */
#define DRAIN_IDLE_MS 200          /* after CMD exits: output ends after this quiet */
#define DRAIN_MAX_MS  2000         /* ... or this long in all */
#define GOODBYE_MS    2000         /* to deliver EXIT to the clients */
/* A command that ends before anyone attached (`anvil shell -- true` on a
 * busy node: the CLI attaches a few ms after the start): the holder waits
 * this long for a first client, which gets the scrollback and the exit
 * status, before it goes. */
#define FIRST_CLIENT_MS 10000

struct client {
	int fd;
	struct stream_reader in;
	struct buf out; /* frames not yet written; out.data[sent, len) */
	size_t sent;
};

struct holder {
	const char *sock;
	int lfd, master, sigfd;
	pid_t child;
	int exited, status; /* CMD's wait status */
	int attached;       /* a client has attached at some point */
	int master_closed;  /* every holder of the terminal is gone */
	int hung_up;
	int64_t exited_at;
	struct client *clients[HOLDER_CLIENTS_MAX];
	int nclients;
	char ring[HOLDER_SCROLLBACK]; /* scrollback: ring[start, start + len) mod size */
	size_t ring_start, ring_len;
	struct buf to_term; /* input for the terminal, not yet written */
};

static void note(const char *fmt, const char *arg)
{
	fprintf(stderr, "anvil session: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
}

/* ---- clients ---- */

static void client_drop(struct holder *h, int i, const char *why)
{
	struct client *c = h->clients[i];
	if (why)
		note("client dropped: %s", why);
	close(c->fd);
	stream_reader_cleanup(&c->in);
	buf_cleanup(&c->out);
	free(c);
	h->clients[i] = h->clients[--h->nclients];
}

/* Queues a frame for client i; drops it when it is too far behind. */
static int client_put(struct holder *h, int i, int type, const void *data, size_t len)
{
	struct client *c = h->clients[i];
	if (c->out.len - c->sent > HOLDER_CLIENT_BACKLOG) {
		client_drop(h, i, "it did not keep up with the output");
		return -1;
	}
	if (c->sent == c->out.len) {
		buf_reset(&c->out);
		c->sent = 0;
	}
	stream_put(&c->out, type, data, len);
	return 0;
}

/* Writes what client i's socket takes now; -1 when it was dropped. */
static int client_flush(struct holder *h, int i)
{
	struct client *c = h->clients[i];
	while (c->sent < c->out.len) {
		ssize_t n = send(c->fd, c->out.data + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
		if (n > 0) {
			c->sent += (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			return 0;
		} else {
			client_drop(h, i, NULL); /* gone: detached */
			return -1;
		}
	}
	return 0;
}

/* The scrollback, oldest first, so a new client sees where the session is. */
static void send_scrollback(struct holder *h, int i)
{
	size_t first = h->ring_len;
	if (h->ring_start + first > sizeof(h->ring))
		first = sizeof(h->ring) - h->ring_start;
	if (first && client_put(h, i, STREAM_STDOUT, h->ring + h->ring_start, first))
		return;
	if (h->ring_len > first)
		client_put(h, i, STREAM_STDOUT, h->ring, h->ring_len - first);
}

static void accept_client(struct holder *h)
{
	int fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (h->nclients == HOLDER_CLIENTS_MAX) {
		struct buf b;
		buf_init(&b);
		stream_put_text(&b, STREAM_ERROR, "too many clients attached to this session");
		relay_write_all(fd, b.data, b.len, 100);
		buf_cleanup(&b);
		close(fd);
		return;
	}
	struct client *c = xcalloc(1, sizeof(*c));
	c->fd = fd;
	stream_reader_init(&c->in);
	buf_init(&c->out);
	h->clients[h->nclients++] = c;
	h->attached = 1;
	send_scrollback(h, h->nclients - 1);
}

/* ---- the terminal ---- */

static void ring_add(struct holder *h, const char *p, size_t n)
{
	if (n >= sizeof(h->ring)) {
		p += n - sizeof(h->ring);
		n = sizeof(h->ring);
	}
	for (size_t k = 0; k < n; k++) {
		size_t at = (h->ring_start + h->ring_len) % sizeof(h->ring);
		h->ring[at] = p[k];
		if (h->ring_len < sizeof(h->ring))
			h->ring_len++;
		else
			h->ring_start = (h->ring_start + 1) % sizeof(h->ring);
	}
}

/* To the rank's log (the holder's stdout) and the scrollback. */
static void record(struct holder *h, const char *p, size_t n)
{
	ring_add(h, p, n);
	for (size_t off = 0; off < n;) {
		ssize_t w = write(STDOUT_FILENO, p + off, n - off);
		if (w <= 0 && errno != EINTR)
			break; /* the log is lost; the session goes on */
		off += w > 0 ? (size_t)w : 0;
	}
}

/* Output of the terminal: to the log, the scrollback and every client. */
static void output(struct holder *h, const char *p, size_t n)
{
	record(h, p, n);
	for (int i = h->nclients; i-- > 0;)
		client_put(h, i, STREAM_STDOUT, p, n);
}

/* A notice from client i, the agent (agent/streams.h: the session's time
 * limit or idle timeout is near): to every other client as NOTICE, which
 * the CLI prints on a line of its own, and to the log and the scrollback
 * as such a line, so `anvil logs` and a client attaching later see it.
 * Then client i is dropped: a notice comes on a connection of its own,
 * which waits for that. */
static void notice(struct holder *h, int i, const struct stream_frame *f)
{
	char text[STREAM_TEXT_MAX];
	size_t n = f->len < sizeof(text) ? f->len : sizeof(text);
	for (size_t k = 0; k < n; k++) /* one line, no terminal controls */
		text[k] = f->data[k] < 0x20 || f->data[k] == 0x7f ? '?' : (char)f->data[k];
	client_drop(h, i, NULL);
	char line[sizeof(text) + 16];
	int len = snprintf(line, sizeof(line), "\r\nanvil: %.*s\r\n", (int)n, text);
	record(h, line, (size_t)len < sizeof(line) ? (size_t)len : sizeof(line) - 1);
	for (int k = h->nclients; k-- > 0;)
		client_put(h, k, STREAM_NOTICE, text, n);
}

static int read_terminal(struct holder *h)
{
	char b[READ_CHUNK];
	ssize_t n = read(h->master, b, sizeof(b));
	if (n > 0) {
		output(h, b, (size_t)n);
		return 1;
	}
	if (n == 0 || (errno != EAGAIN && errno != EINTR))
		h->master_closed = 1; /* EIO: no one has the terminal open */
	return 0;
}

static void write_terminal(struct holder *h)
{
	ssize_t n = write(h->master, h->to_term.data, h->to_term.len);
	if (n <= 0)
		return;
	memmove(h->to_term.data, h->to_term.data + n, h->to_term.len - (size_t)n);
	h->to_term.len -= (size_t)n;
}

/* One client frame; -1 when the client was dropped. */
static int client_frame(struct holder *h, int i, const struct stream_frame *f)
{
	struct winsize ws = {0};
	struct termios t;
	unsigned rows, cols;
	switch (f->type) {
	case STREAM_STDIN:
		if (h->to_term.len + f->len > INPUT_MAX) {
			client_drop(h, i, "its input is more than the terminal takes");
			return -1;
		}
		buf_add(&h->to_term, f->data, f->len);
		return 0;
	case STREAM_STDIN_EOF: /* as if the user typed ^D */
		if (tcgetattr(h->master, &t) == 0 && t.c_cc[VEOF] != _POSIX_VDISABLE)
			buf_add(&h->to_term, &t.c_cc[VEOF], 1);
		return 0;
	case STREAM_RESIZE:
		stream_resize_of(f, &rows, &cols);
		ws.ws_row = (unsigned short)rows;
		ws.ws_col = (unsigned short)cols;
		if (rows && cols)
			ioctl(h->master, TIOCSWINSZ, &ws); /* the kernel sends SIGWINCH */
		return 0;
	case STREAM_NOTICE: notice(h, i, f); return -1; /* its sender is gone */
	default: break;
	}
	client_drop(h, i, "it sent a frame a client does not send");
	return -1;
}

static void read_client(struct holder *h, int i)
{
	struct client *c = h->clients[i];
	char b[READ_CHUNK];
	ssize_t n = read(c->fd, b, sizeof(b));
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		client_drop(h, i, NULL); /* detached */
		return;
	}
	if (n < 0)
		return;
	stream_reader_feed(&c->in, b, (size_t)n);
	struct stream_frame f;
	char err[160];
	int rc;
	while ((rc = stream_reader_next(&c->in, &f, err, sizeof(err))) == 1)
		if (client_frame(h, i, &f))
			return;
	if (rc < 0)
		client_drop(h, i, err);
}

/* ---- the command ---- */

static void hang_up(struct holder *h)
{
	if (h->hung_up || h->exited)
		return;
	h->hung_up = 1;
	pid_t fg = tcgetpgrp(h->master);
	if (fg > 0)
		kill(-fg, SIGHUP);
	kill(-h->child, SIGHUP);
}

static void read_signals(struct holder *h)
{
	struct signalfd_siginfo si;
	while (read(h->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo != SIGCHLD) {
			hang_up(h);
			continue;
		}
		int st;
		if (!h->exited && waitpid(h->child, &st, WNOHANG) == h->child) {
			h->exited = 1;
			h->status = st;
			h->exited_at = now_ms();
		}
	}
}

/* In the child, on the terminal: CMD, or for a one-word CMD the node does
 * not have, the shells every node has. */
static void run_command(char **argv, int argc)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	execvp(argv[0], argv);
	int err = errno;
	static const char *const shells[] = {"/bin/bash", "/bin/sh"};
	for (size_t i = 0; err == ENOENT && argc == 1 && i < 2; i++) {
		fprintf(stderr, "anvil: %s is not on this node; running %s\r\n", argv[0],
		        shells[i]);
		char *alt[] = {(char *)shells[i], NULL};
		execv(shells[i], alt);
	}
	fprintf(stderr, "anvil: cannot run '%s': %s\r\n", argv[0], strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

static int listen_on(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 ||
	    listen(fd, 8) < 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

static int setup(struct holder *h, int argc, char **argv)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL); /* before the fork: no SIGCHLD is missed */
	signal(SIGPIPE, SIG_IGN);
	h->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	h->lfd = listen_on(h->sock);
	if (h->sigfd < 0 || h->lfd < 0) {
		note("cannot listen on %s", h->sock);
		return -1;
	}
	struct winsize ws = {.ws_row = 24, .ws_col = 80};
	h->child = forkpty(&h->master, NULL, NULL, &ws);
	if (h->child < 0) {
		note("cannot open a terminal: %s", strerror(errno));
		return -1;
	}
	if (h->child == 0)
		run_command(argv, argc);
	fcntl(h->master, F_SETFD, FD_CLOEXEC);
	fcntl(h->master, F_SETFL, fcntl(h->master, F_GETFL) | O_NONBLOCK);
	return 0;
}

/* Poll set: signals, the socket, the terminal, the clients. */
static int poll_set(struct holder *h, struct pollfd *p)
{
	int n = 0;
	p[n++] = (struct pollfd){.fd = h->sigfd, .events = POLLIN};
	p[n++] = (struct pollfd){.fd = h->exited && h->attached ? -1 : h->lfd, .events = POLLIN};
	short ev = (short)((h->master_closed ? 0 : POLLIN) | (h->to_term.len ? POLLOUT : 0));
	p[n++] = (struct pollfd){.fd = ev ? h->master : -1, .events = ev};
	for (int i = 0; i < h->nclients; i++) {
		struct client *c = h->clients[i];
		p[n++] = (struct pollfd){
		        .fd = c->fd,
		        .events = (short)(POLLIN | (c->sent < c->out.len ? POLLOUT : 0))};
	}
	return n;
}

/* Once CMD has exited: EXIT to every client, delivered within GOODBYE_MS. */
static void goodbye(struct holder *h, int code)
{
	for (int i = h->nclients; i-- > 0;) {
		unsigned char p[4] = {(unsigned char)(code >> 24), (unsigned char)(code >> 16),
		                      (unsigned char)(code >> 8), (unsigned char)code};
		client_put(h, i, STREAM_EXIT, p, sizeof(p));
	}
	int64_t deadline = now_ms() + GOODBYE_MS;
	while (h->nclients && now_ms() < deadline) {
		struct pollfd p[HOLDER_CLIENTS_MAX];
		int n = 0;
		for (int i = h->nclients; i-- > 0;)
			if (client_flush(h, i) == 0 &&
			    h->clients[i]->sent == h->clients[i]->out.len)
				client_drop(h, i, NULL);
		for (int i = 0; i < h->nclients; i++)
			p[n++] = (struct pollfd){.fd = h->clients[i]->fd, .events = POLLOUT};
		if (n)
			poll(p, (nfds_t)n, 50);
	}
	while (h->nclients)
		client_drop(h, 0, NULL);
}

static void loop(struct holder *h)
{
	struct pollfd p[3 + HOLDER_CLIENTS_MAX];
	int64_t quiet_since = 0;
	for (;;) {
		if (h->exited) {
			int64_t now = now_ms();
			int drained = h->master_closed || now - quiet_since >= DRAIN_IDLE_MS ||
			              now - h->exited_at >= DRAIN_MAX_MS;
			if (drained && (h->attached || now - h->exited_at >= FIRST_CLIENT_MS))
				return;
		}
		int n = poll_set(h, p);
		if (poll(p, (nfds_t)n, h->exited ? 50 : -1) < 0 && errno != EINTR)
			return;
		if (p[0].revents)
			read_signals(h);
		if (p[1].revents & POLLIN)
			accept_client(h);
		if (p[2].revents & POLLOUT)
			write_terminal(h);
		if ((p[2].revents & (POLLIN | POLLHUP | POLLERR)) && read_terminal(h))
			quiet_since = now_ms();
		if (h->exited && quiet_since < h->exited_at)
			quiet_since = h->exited_at; /* quiet counts from the exit */
		/* Clients from the back: a drop moves the last one into its slot. */
		for (int i = n - 3; i-- > 0;) {
			if (i >= h->nclients)
				continue;
			if ((p[3 + i].revents & POLLOUT) && client_flush(h, i))
				continue;
			if (p[3 + i].revents & (POLLIN | POLLHUP | POLLERR))
				read_client(h, i);
		}
		for (int i = h->nclients; i-- > 0;)
			client_flush(h, i);
	}
}

int holder_main(int argc, char **argv)
{
	int first = argc > 1 && strcmp(argv[1], "--") == 0 ? 2 : 1;
	struct holder h = {.lfd = -1, .master = -1, .sigfd = -1};
	h.sock = getenv(EXEC_SESSION_ENV);
	if (first >= argc || !h.sock || !*h.sock) {
		fprintf(stderr,
		        "usage: %s=PATH anvil _session -- CMD [ARGS...] (the agent runs "
		        "it for anvil shell)\n",
		        EXEC_SESSION_ENV);
		return 2;
	}
	buf_init(&h.to_term);
	if (setup(&h, argc - first, argv + first) != 0)
		return 1;
	loop(&h);
	int st = h.status;
	int code = !h.exited ? 1 : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
	goodbye(&h, code);
	unlink(h.sock);
	buf_cleanup(&h.to_term);
	return code;
}
