#include "cli/attach.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/relay.h"
#include "base/upgrade.h"
#include "base/util.h"
#include "cli/cli.h"
#include "proto/stream.h"

#define OPEN_TIMEOUT_MS 30000
#define SEND_TIMEOUT_MS 30000

/* ---- the terminal and signals (process-wide, like the terminal) ---- */

static struct termios saved_termios;
static int raw_on;
static int sig_pipe[2] = {-1, -1};

static void restore_terminal(void)
{
	if (raw_on)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_termios);
	raw_on = 0;
}

static int raw_mode(void)
{
	static int registered;
	struct termios t;
	if (tcgetattr(STDIN_FILENO, &saved_termios) < 0)
		return -1;
	t = saved_termios;
	cfmakeraw(&t);
	if (!registered++)
		atexit(restore_terminal);
	if (tcsetattr(STDIN_FILENO, TCSANOW, &t) < 0)
		return -1;
	raw_on = 1;
	return 0;
}

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	if (write(sig_pipe[1], &b, 1) < 0) {
		/* the pipe is full: the loop has signals to read already */
	}
	errno = saved;
}

static const int caught[] = {SIGWINCH, SIGINT, SIGTERM, SIGHUP};
#define NCAUGHT (sizeof(caught) / sizeof(caught[0]))

static int signals_catch(struct sigaction *old)
{
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < NCAUGHT; i++)
		sigaction(caught[i], &sa, &old[i]);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static void signals_release(const struct sigaction *old)
{
	for (size_t i = 0; i < NCAUGHT; i++)
		sigaction(caught[i], &old[i], NULL);
	close(sig_pipe[0]);
	close(sig_pipe[1]);
	sig_pipe[0] = sig_pipe[1] = -1;
}

/* "anvil: ..." on stderr, a whole line also in raw mode. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%sanvil: %s%s", raw_on ? "\r\n" : "", msg, raw_on ? "\r\n" : "\n");
	fflush(stderr);
}

int attach_window(unsigned *rows, unsigned *cols)
{
	struct winsize ws;
	if ((ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row) ||
	    (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row)) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
		return 1;
	}
	*rows = *cols = 0;
	return 0;
}

/* ---- the stream ---- */

struct session {
	const struct attach_opts *o;
	int sock;
	struct stream_reader in;
	struct buf out;
	int stdin_done;
	struct attach_result res;
	int over;
};

static void end(struct session *s, enum attach_end e, int code)
{
	s->res = (struct attach_result){.end = e, .code = code};
	s->over = 1;
}

static void send_out(struct session *s)
{
	if (!s->out.len)
		return;
	if (relay_write_all(s->sock, s->out.data, s->out.len, SEND_TIMEOUT_MS) != 0 && !s->over)
		end(s, ATTACH_LOST, CLI_EXIT_FAILED);
	buf_reset(&s->out);
}

static void write_fd(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			poll(&pf, 1, 100);
		} else {
			return; /* stdout is gone; the stream goes on until it ends */
		}
	}
}

static void send_resize(struct session *s)
{
	unsigned rows, cols;
	if (s->o->tty && attach_window(&rows, &cols))
		stream_put_resize(&s->out, rows, cols);
}

/* Text from the node, shown without control characters. */
static void show_text(const struct stream_frame *f, const char *prefix)
{
	char text[STREAM_TEXT_MAX + 1];
	size_t n = 0;
	for (; n < f->len; n++)
		text[n] = f->data[n] < 0x20 || f->data[n] == 0x7f ? '?' : (char)f->data[n];
	text[n] = '\0';
	say("%s%s", prefix, text);
}

static void on_frame(struct session *s, const struct stream_frame *f)
{
	switch (f->type) {
	case STREAM_STDOUT: write_fd(STDOUT_FILENO, f->data, f->len); break;
	case STREAM_STDERR: write_fd(STDERR_FILENO, f->data, f->len); break;
	case STREAM_EXIT: end(s, ATTACH_EXITED, stream_exit_of(f)); break;
	case STREAM_NOTICE: show_text(f, ""); break;
	case STREAM_ERROR:
		show_text(f, "");
		end(s, ATTACH_REFUSED, CLI_EXIT_FAILED);
		break;
	default:
		say("the stream broke: the node sent a %s frame", stream_type_name(f->type));
		end(s, ATTACH_LOST, CLI_EXIT_FAILED);
	}
}

static void read_stream(struct session *s)
{
	unsigned char b[16384];
	ssize_t n = read(s->sock, b, sizeof(b));
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		end(s, ATTACH_LOST, CLI_EXIT_FAILED);
		return;
	}
	if (n < 0)
		return;
	stream_reader_feed(&s->in, b, (size_t)n);
	struct stream_frame f;
	char err[160];
	int rc;
	while (!s->over && (rc = stream_reader_next(&s->in, &f, err, sizeof(err))) == 1)
		on_frame(s, &f);
	if (!s->over && rc < 0) {
		say("the stream broke: %s", err);
		end(s, ATTACH_LOST, CLI_EXIT_FAILED);
	}
}

static void read_stdin(struct session *s)
{
	unsigned char b[4096];
	ssize_t n = read(STDIN_FILENO, b, sizeof(b));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		stream_put(&s->out, STREAM_STDIN_EOF, NULL, 0);
		s->stdin_done = 1;
		return;
	}
	size_t len = (size_t)n;
	unsigned char *esc = s->o->escape && raw_on ? memchr(b, ATTACH_ESCAPE, len) : NULL;
	if (esc)
		len = (size_t)(esc - b);
	if (len)
		stream_put(&s->out, STREAM_STDIN, b, len);
	if (esc)
		end(s, ATTACH_DETACHED, 0);
}

static void read_signals(struct session *s)
{
	unsigned char b[16];
	ssize_t n = read(sig_pipe[0], b, sizeof(b));
	for (ssize_t i = 0; i < n; i++) {
		if (b[i] == SIGWINCH)
			send_resize(s);
		else if (!s->over)
			end(s, ATTACH_DETACHED, 128 + b[i]);
	}
}

static void loop(struct session *s)
{
	while (!s->over) {
		struct pollfd p[3] = {
		        {.fd = s->sock, .events = POLLIN},
		        {.fd = sig_pipe[0], .events = POLLIN},
		        {.fd = s->o->forward_stdin && !s->stdin_done ? STDIN_FILENO : -1,
		         .events = POLLIN},
		};
		if (poll(p, 3, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			read_signals(s);
		if (!s->over && p[2].revents)
			read_stdin(s);
		send_out(s);
		if (!s->over && p[0].revents)
			read_stream(s);
	}
	send_out(s); /* the last keystrokes before a detach */
}

/* Opens the stream; an error (printed) ends the session as refused. */
static int open_stream(struct verb_ctx *v, const struct attach_opts *o, struct upgrade *u,
                       struct session *s)
{
	char path[128];
	snprintf(path, sizeof(path), "/v1/jobs/%lld/%s?rank=%lld", (long long)o->job,
	         o->exec ? "exec" : "attach", (long long)o->rank);
	int64_t give_up = now_ms() + o->retry_conflict_ms, pause_ms = 50;
	int rc = upgrade_open(u, v->conn.server, path, v->conn.token, STREAM_UPGRADE,
	                      OPEN_TIMEOUT_MS);
	while (rc == 0 && u->status == 409 && now_ms() + pause_ms < give_up) {
		upgrade_close(u);
		sleep_ms(pause_ms);
		pause_ms = pause_ms < 1000 ? pause_ms * 2 : 1000;
		rc = upgrade_open(u, v->conn.server, path, v->conn.token, STREAM_UPGRADE,
		                  OPEN_TIMEOUT_MS);
	}
	if (rc) {
		say("cannot reach the server at %s (from %s): %s", v->conn.server,
		    v->conn.server_from, u->error);
		end(s, ATTACH_REFUSED, CLI_EXIT_UNREACHABLE);
		return -1;
	}
	if (u->status != 101) {
		cliconn_describe(&v->conn, u->status, &u->body);
		say("%s", v->conn.error);
		end(s, ATTACH_REFUSED, CLI_EXIT_FAILED);
		return -1;
	}
	s->sock = u->fd;
	stream_reader_feed(&s->in, u->extra.data, u->extra.len);
	return 0;
}

struct attach_result attach_run(struct verb_ctx *v, const struct attach_opts *o)
{
	struct session s = {.o = o, .sock = -1};
	stream_reader_init(&s.in);
	buf_init(&s.out);
	struct upgrade u;
	struct sigaction old[NCAUGHT];
	if (open_stream(v, o, &u, &s) == 0) {
		if (o->exec) {
			char *req = json_dumps(o->exec, JSON_COMPACT);
			stream_put(&s.out, STREAM_EXEC, req, strlen(req));
			free(req);
		} else {
			send_resize(&s);
		}
		int catching = signals_catch(old) == 0;
		if (o->tty && o->forward_stdin && isatty(STDIN_FILENO))
			raw_mode();
		send_out(&s);
		/* frames that came with the 101 */
		struct stream_frame f;
		char err[160];
		while (!s.over && stream_reader_next(&s.in, &f, err, sizeof(err)) == 1)
			on_frame(&s, &f);
		loop(&s);
		restore_terminal();
		if (catching)
			signals_release(old);
	}
	upgrade_close(&u);
	stream_reader_cleanup(&s.in);
	buf_cleanup(&s.out);
	return s.res;
}
