#include "agent/rankexec.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <utmp.h>

#include "agent/cgroup.h"
#include "agent/fence.h"
#include "base/buf.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/relay.h"
#include "base/util.h"
#include "proto/stream.h"
#include "proto/wire.h"

#define READ_CHUNK      16384
#define INPUT_MAX       (256 * 1024)
#define REQUEST_WAIT_MS 10000
#define DRAIN_IDLE_MS   200
#define DRAIN_MAX_MS    2000
#define GOODBYE_MS      10000

/* The command's side: a terminal (in and out the same fd) or pipes. */
enum { OUT, ERR, NOUT };

struct rexec {
	int sock, sigfd;
	struct stream_reader in;
	struct buf out; /* frames for the client: out.data[sent, len) */
	size_t sent;
	int tty;
	int cmd_in;        /* the terminal, or the stdin pipe; -1: none (or closed) */
	int cmd_out[NOUT]; /* the terminal (OUT only), or the pipes; -1: at EOF */
	struct buf to_cmd; /* input not yet written */
	int eof_pending;   /* close cmd_in once to_cmd is written */
	pid_t child, pgid;
	int exited, status;
	int64_t exited_at, quiet_since;
	int client_gone;
	int rank_fd;    /* a pidfd of the rank's command: readable once it ends; -1 */
	int rank_ended; /* it did: the command was killed */
	/* the rank's account, which the command takes (agent/fence.h) */
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[FENCE_GROUPS_MAX];
	int mnt_fd; /* the rank's mount namespace, which the command enters; -1: ours */
	int pid_fd; /* the rank's PID namespace, likewise */
	char cwd[PATH_MAX];
};

/* ---- frames to the client ---- */

static void put(struct rexec *x, int type, const void *data, size_t len)
{
	if (x->sent == x->out.len) {
		buf_reset(&x->out);
		x->sent = 0;
	}
	stream_put(&x->out, type, data, len);
}

static void flush(struct rexec *x)
{
	while (x->sent < x->out.len) {
		ssize_t n =
		        send(x->sock, x->out.data + x->sent, x->out.len - x->sent, MSG_NOSIGNAL);
		if (n > 0) {
			x->sent += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		x->client_gone = 1;
		x->sent = x->out.len;
	}
}

/* An ERROR frame, delivered (or given up on) before the helper exits. */
static int fail(struct rexec *x, const char *text)
{
	put(x, STREAM_ERROR, text, strlen(text) > STREAM_TEXT_MAX ? STREAM_TEXT_MAX : strlen(text));
	relay_write_all(x->sock, x->out.data + x->sent, x->out.len - x->sent, 2000);
	return 1;
}

/* ---- the request ---- */

/* Reads frames until the EXEC one: the request, or NULL with err set. */
static json_t *read_request(struct rexec *x, char *err, size_t errlen)
{
	int64_t deadline = now_ms() + REQUEST_WAIT_MS;
	struct stream_frame f;
	for (;;) {
		int rc = stream_reader_next(&x->in, &f, err, errlen);
		if (rc < 0)
			return NULL;
		if (rc == 1 && f.type != STREAM_EXEC) {
			snprintf(err, errlen, "an exec stream starts with the exec request, not %s",
			         stream_type_name(f.type));
			return NULL;
		}
		if (rc == 1)
			break;
		int64_t left = deadline - now_ms();
		struct pollfd p = {.fd = x->sock, .events = POLLIN};
		char b[READ_CHUNK];
		ssize_t n =
		        left > 0 && poll(&p, 1, (int)left) > 0 ? read(x->sock, b, sizeof(b)) : -2;
		if (n == 0 || n == -2 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			snprintf(err, errlen, "no exec request came");
			return NULL;
		}
		if (n > 0)
			stream_reader_feed(&x->in, b, (size_t)n);
	}
	json_t *o = NULL;
	if (jv_parse_object((const char *)f.data, f.len, &o, err, errlen) == 0 &&
	    wire_check(o, &wire_exec, err, errlen) == 0) {
		const char *prog =
		        json_string_value(json_array_get(json_object_get(o, "command"), 0));
		if (prog && *prog)
			return o;
		snprintf(err, errlen, "field 'command[0]': the program is empty");
	}
	json_decref(o);
	return NULL;
}

/* ---- the command ---- */

static char **argv_of(const json_t *cmd)
{
	char **argv = xcalloc(json_array_size(cmd) + 1, sizeof(char *));
	size_t i;
	json_t *v;
	json_array_foreach (cmd, i, v)
		argv[i] = xstrdup(json_string_value(v));
	return argv;
}

/* Whether some directory of PATH that we can search holds cmd. */
static int on_path(const char *cmd)
{
	const char *p = getenv("PATH");
	char cand[PATH_MAX];
	struct stat sb;
	for (; p; p = strchr(p, ':') ? strchr(p, ':') + 1 : NULL) {
		int len = (int)strcspn(p, ":");
		snprintf(cand, sizeof(cand), "%.*s/%s", len, len ? p : ".", cmd);
		if (stat(cand, &sb) == 0)
			return 1;
	}
	return 0;
}

/* In the child: the rank's account, default signals, then CMD; 127 with
 * a message when not. */
/* In the child, for a fenced rank: the command is forked into the rank's
 * PID namespace (setns places the caller's children there, not the caller)
 * and this process waits for it, passes on the hang-ups and stops the
 * helper sends its group to the command's (the command leads a group, or
 * a terminal's session, of its own: in the rank's namespace), and ends as
 * the command did. The helper itself never enters it: a process whose new
 * children land in another PID namespace cannot stop its own threads, and
 * the address sanitizer's exit does that. */
static volatile pid_t forward_to;

static void forward(int sig)
{
	kill(-forward_to, sig);
}

static void fork_into_rank(const struct rexec *x)
{
	if (x->pid_fd < 0)
		return;
	setpgid(0, 0); /* the group the helper signals */
	if (setns(x->pid_fd, CLONE_NEWPID) != 0) {
		dprintf(STDERR_FILENO, "anvil: cannot enter the rank's processes: %s\n",
		        strerror(errno));
		_exit(126);
	}
	pid_t cmd = fork();
	if (cmd == 0)
		return;
	if (cmd < 0)
		_exit(126);
	/* nothing of the command's: its stdin's other end (close-on-exec, and
	 * this process execs nothing) would keep it from ever reading EOF */
	if (syscall(SYS_close_range, 0U, ~0U, 0U) != 0)
		for (int fd = 0; fd < 1024; fd++)
			close(fd);
	forward_to = cmd;
	struct sigaction fwd = {.sa_handler = forward, .sa_flags = SA_RESTART};
	sigaction(SIGHUP, &fwd, NULL);
	sigaction(SIGTERM, &fwd, NULL);
	sigaction(SIGINT, &fwd, NULL);
	int st = 0;
	while (waitpid(cmd, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(st)) {
		signal(WTERMSIG(st), SIG_DFL);
		kill(getpid(), WTERMSIG(st));
	}
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static void child_exec(const struct rexec *x, char **argv)
{
	fork_into_rank(x);
	/* its mount view here too, not in the helper (whose /proc stays its
	 * own, as the sanitizer's exit needs) */
	if (x->mnt_fd >= 0 &&
	    (setns(x->mnt_fd, CLONE_NEWNS) != 0 || (chdir(x->cwd) != 0 && chdir("/") != 0))) {
		dprintf(STDERR_FILENO, "anvil: cannot enter the rank's mounts: %s\n",
		        strerror(errno));
		_exit(126);
	}
	if (x->uid != 0 &&
	    (setgroups((size_t)x->ngroups, x->groups) != 0 || setresgid(x->gid, x->gid, x->gid) ||
	     setresuid(x->uid, x->uid, x->uid) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))) {
		dprintf(STDERR_FILENO, "anvil: cannot become the rank's user (uid %u): %s\n",
		        (unsigned)x->uid, strerror(errno));
		_exit(126);
	}
	fence_env_unstash();
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	execvp(argv[0], argv);
	int err = errno;
	/* execvp says EACCES when a directory of PATH was closed to us (the
	 * client's PATH, exported, may name its home): not there is ENOENT */
	if (err == EACCES && !strchr(argv[0], '/') && !on_path(argv[0]))
		err = ENOENT;
	dprintf(STDERR_FILENO, "anvil: cannot run '%s': %s\n", argv[0], strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

/* The command's side of its terminal (tty: the slave) or of its pipes. */
struct child_io {
	int tty, slave, in, out, err;
	const char *term;
};

/* In the child: into the rank (fenced), its own terminal's session or
 * process group, its fds, then the command. */
static _Noreturn void child_run(const struct rexec *x, const struct child_io *io, char **argv)
{
	fork_into_rank(x);
	if (io->tty && login_tty(io->slave) != 0)
		_exit(126);
	if (!io->tty) {
		setpgid(0, 0);
		dup2(io->in, STDIN_FILENO);
		dup2(io->out, STDOUT_FILENO);
		dup2(io->err, STDERR_FILENO);
	}
	if (io->term)
		setenv("TERM", io->term, 1);
	child_exec(x, argv);
	_exit(127);
}

static int start_tty(struct rexec *x, char **argv, const json_t *req)
{
	struct winsize ws = {.ws_row = (unsigned short)jv_int(req, "rows", 24),
	                     .ws_col = (unsigned short)jv_int(req, "cols", 80)};
	int master = -1, slave = -1;
	if (openpty(&master, &slave, NULL, NULL, &ws) != 0)
		return -errno;
	struct child_io io = {.tty = 1, .slave = slave, .term = jv_str(req, "term", NULL)};
	x->child = fork();
	if (x->child == 0) {
		close(master);
		child_run(x, &io, argv);
	}
	close(slave);
	if (x->child < 0) {
		close(master);
		return -errno;
	}
	if (x->pid_fd >= 0) /* the group it leads, also here; else login_tty's session */
		setpgid(x->child, x->child);
	fcntl(master, F_SETFD, FD_CLOEXEC);
	fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
	x->pgid = x->child;
	x->cmd_in = jv_bool(req, "stdin", 0) ? master : -1;
	x->cmd_out[OUT] = master;
	x->cmd_out[ERR] = -1;
	return 0;
}

static int start_pipes(struct rexec *x, char **argv, const json_t *req)
{
	int in[2] = {-1, -1}, out[2], err[2];
	int with_stdin = jv_bool(req, "stdin", 0);
	if ((with_stdin ? pipe2(in, O_CLOEXEC) : 0) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
	    pipe2(err, O_CLOEXEC) < 0)
		return -errno;
	int null_fd = with_stdin ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct child_io io = {.in = with_stdin ? in[0] : null_fd, .out = out[1], .err = err[1]};
	x->child = fork();
	if (x->child < 0)
		return -errno;
	if (x->child == 0) {
		setpgid(0, 0);
		child_run(x, &io, argv);
	}
	setpgid(x->child, x->child); /* also here: no race with a signal to the group */
	x->pgid = x->child;
	if (null_fd >= 0)
		close(null_fd);
	if (with_stdin)
		close(in[0]);
	close(out[1]);
	close(err[1]);
	x->cmd_in = with_stdin ? in[1] : -1;
	x->cmd_out[OUT] = out[0];
	x->cmd_out[ERR] = err[0];
	for (int i = 0; i < NOUT; i++)
		fcntl(x->cmd_out[i], F_SETFL, O_NONBLOCK);
	if (x->cmd_in >= 0)
		fcntl(x->cmd_in, F_SETFL, O_NONBLOCK);
	return 0;
}

/* ---- the relay ---- */

static void close_input(struct rexec *x)
{
	if (x->cmd_in < 0)
		return;
	if (x->tty) { /* a terminal's EOF is a character; the fd is its output too */
		struct termios t;
		if (tcgetattr(x->cmd_in, &t) == 0 && t.c_cc[VEOF] != _POSIX_VDISABLE)
			if (write(x->cmd_in, &t.c_cc[VEOF], 1) < 0) {
				/* the terminal is gone: so is the command's input */
			}
	} else {
		close(x->cmd_in);
	}
	x->cmd_in = -1;
}

static void write_input(struct rexec *x)
{
	ssize_t n = x->to_cmd.len ? write(x->cmd_in, x->to_cmd.data, x->to_cmd.len) : 0;
	if (n < 0 && errno != EAGAIN && errno != EINTR) {
		x->to_cmd.len = 0; /* the command closed its stdin */
		x->eof_pending = 1;
	} else if (n > 0) {
		memmove(x->to_cmd.data, x->to_cmd.data + n, x->to_cmd.len - (size_t)n);
		x->to_cmd.len -= (size_t)n;
	}
	if (!x->to_cmd.len && x->eof_pending)
		close_input(x);
}

/* One frame from the client; -1 on one a client never sends. */
static int client_frame(struct rexec *x, const struct stream_frame *f)
{
	unsigned rows, cols;
	struct winsize ws = {0};
	switch (f->type) {
	case STREAM_STDIN:
		if (x->cmd_in >= 0 && !x->eof_pending)
			buf_add(&x->to_cmd, f->data, f->len);
		return 0;
	case STREAM_STDIN_EOF:
		x->eof_pending = 1;
		if (x->cmd_in >= 0 && !x->to_cmd.len)
			close_input(x);
		return 0;
	case STREAM_RESIZE:
		stream_resize_of(f, &rows, &cols);
		ws.ws_row = (unsigned short)rows;
		ws.ws_col = (unsigned short)cols;
		if (x->tty && rows && cols)
			ioctl(x->cmd_out[OUT], TIOCSWINSZ, &ws);
		return 0;
	default: return -1;
	}
}

/* The frames read so far (some may have come with the request). */
static void client_frames(struct rexec *x)
{
	struct stream_frame f;
	char err[160];
	int rc;
	while ((rc = stream_reader_next(&x->in, &f, err, sizeof(err))) == 1)
		if (client_frame(x, &f) < 0) {
			rc = -1;
			break;
		}
	if (rc < 0) /* a client that breaks the protocol is gone */
		x->client_gone = 1;
}

static void read_client(struct rexec *x)
{
	char b[READ_CHUNK];
	ssize_t n = read(x->sock, b, sizeof(b));
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		x->client_gone = 1;
		return;
	}
	if (n > 0) {
		stream_reader_feed(&x->in, b, (size_t)n);
		client_frames(x);
	}
}

static void read_output(struct rexec *x, int which)
{
	char b[READ_CHUNK];
	ssize_t n = read(x->cmd_out[which], b, sizeof(b));
	if (n > 0) {
		put(x, which == OUT ? STREAM_STDOUT : STREAM_STDERR, b, (size_t)n);
		x->quiet_since = now_ms();
	} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) { /* a terminal says EIO */
		if (!x->tty || which == OUT)
			close(x->cmd_out[which]);
		x->cmd_out[which] = -1;
		if (x->tty)
			x->cmd_in = -1; /* the same fd */
	}
}

static void read_signals(struct rexec *x)
{
	struct signalfd_siginfo si;
	int st;
	while (read(x->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		if (!x->exited && waitpid(x->child, &st, WNOHANG) == x->child) {
			x->exited = 1;
			x->status = st;
			x->exited_at = x->quiet_since = now_ms();
		}
}

/* Done once the command has exited and its output has ended or gone
 * quiet (a background job may hold the pipes or the terminal open). */
static int done(const struct rexec *x)
{
	if (!x->exited)
		return 0;
	int64_t now = now_ms();
	int open_outs = (x->cmd_out[OUT] >= 0) + (x->cmd_out[ERR] >= 0);
	return !open_outs || now - x->quiet_since >= DRAIN_IDLE_MS ||
	       now - x->exited_at >= DRAIN_MAX_MS;
}

/* The rank's command has ended: the rank is over, and so is what runs in
 * it. With cgroups the executor kills the whole cgroup anyway; without,
 * this is what ends a command still running in the exec. */
static void rank_ended(struct rexec *x)
{
	if (x->rank_ended)
		return;
	x->rank_ended = 1;
	if (!x->exited)
		kill(-x->pgid, SIGKILL);
	close(x->rank_fd);
	x->rank_fd = -1;
}

static void loop(struct rexec *x)
{
	client_frames(x);
	while (!x->client_gone && !done(x)) {
		struct pollfd p[6];
		int backlog = x->out.len - x->sent > RANKEXEC_OUT_MAX;
		p[0] = (struct pollfd){.fd = x->sigfd, .events = POLLIN};
		p[1] = (struct pollfd){.fd = x->sock,
		                       .events = (short)((x->to_cmd.len < INPUT_MAX ? POLLIN : 0) |
		                                         (x->sent < x->out.len ? POLLOUT : 0))};
		for (int i = 0; i < NOUT; i++)
			p[2 + i] = (struct pollfd){.fd = backlog ? -1 : x->cmd_out[i],
			                           .events = POLLIN};
		int wr = x->cmd_in >= 0 && (x->to_cmd.len || x->eof_pending);
		p[4] = (struct pollfd){.fd = wr ? x->cmd_in : -1, .events = POLLOUT};
		if (x->tty && wr) { /* one fd for both: poll it once */
			p[2].events |= POLLOUT;
			p[4].fd = -1;
		}
		p[5] = (struct pollfd){.fd = x->rank_fd, .events = POLLIN};
		if (poll(p, 6, x->exited ? 50 : -1) < 0 && errno != EINTR)
			break;
		if (p[5].revents)
			rank_ended(x);
		if (p[0].revents)
			read_signals(x);
		if ((p[4].revents | (x->tty ? p[2].revents : 0)) & (POLLOUT | POLLERR))
			write_input(x);
		for (int i = 0; i < NOUT; i++)
			if (x->cmd_out[i] >= 0 && (p[2 + i].revents & (POLLIN | POLLHUP | POLLERR)))
				read_output(x, i);
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR))
			read_client(x);
		flush(x);
	}
}

static int parse_args(int argc, char **argv, int *sock, int *procfd, pid_t *pid)
{
	int64_t v;
	*sock = *procfd = -1;
	*pid = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (parse_i64(argv[i + 1], 1, INT32_MAX, &v) != 0)
			return -1;
		if (strcmp(argv[i], "--fd") == 0)
			*sock = (int)v;
		else if (strcmp(argv[i], "--proc") == 0)
			*procfd = (int)v;
		else if (strcmp(argv[i], "--pid") == 0)
			*pid = (pid_t)v;
		else
			return -1;
	}
	return *sock >= 0 && *procfd >= 0 && *pid > 0 ? 0 : -1;
}

/* A pidfd of the rank's command, checked to be the process procfd is: the
 * /proc directory still opens a file after the pidfd was made. */
static int watch_rank(int procfd, pid_t pid)
{
	int fd = pidfd_open(pid, 0);
	int probe = fd >= 0 ? openat(procfd, "stat", O_RDONLY | O_CLOEXEC) : -1;
	if (probe < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(probe);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
}

/* The rank's account: the real ids and the groups of its command (a task
 * wrapper's effective ids may still be root's: agent/fence.h). */
static int read_account(struct rexec *x, int procfd)
{
	int fd = openat(procfd, "status", O_RDONLY | O_CLOEXEC);
	char text[4096];
	ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	text[n] = '\0';
	char *u = strstr(text, "\nUid:"), *g = strstr(text, "\nGid:"),
	     *gs = strstr(text, "\nGroups:");
	if (!u || !g)
		return -1;
	x->uid = (uid_t)strtoul(u + 5, NULL, 10);
	x->gid = (gid_t)strtoul(g + 5, NULL, 10);
	x->ngroups = 0;
	for (char *p = gs ? gs + 8 : NULL;
	     p && *p && *p != '\n' && x->ngroups < FENCE_GROUPS_MAX;) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p)
			break;
		x->groups[x->ngroups++] = (gid_t)v;
		p = end;
		while (*p == ' ' || *p == '\t')
			p++;
	}
	return 0;
}

/* Opens the rank's PID and mount namespaces (agent/fence.h), where they
 * are not ours, for the command to enter (child_exec): it is one of the
 * rank's processes and sees the rank's /tmp; the working directory is
 * taken again in that view. */
static int enter_rank(struct rexec *x, int procfd, char *err, size_t errlen)
{
	static const char *const ns[] = {"ns/mnt", "ns/pid"};
	if (!getcwd(x->cwd, sizeof(x->cwd)))
		snprintf(x->cwd, sizeof(x->cwd), "/");
	int fds[2] = {-1, -1}, rc = 0;
	for (int i = 0; i < 2 && rc == 0; i++) {
		char own[32];
		struct stat theirs, ours;
		snprintf(own, sizeof(own), "/proc/self/%s", ns[i]);
		fds[i] = openat(procfd, ns[i], O_RDONLY | O_CLOEXEC);
		if (fds[i] < 0 || fstat(fds[i], &theirs) != 0 || stat(own, &ours) != 0)
			rc = -errno;
		else if (theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev)
			fds[i] = (close(fds[i]), -1); /* not fenced: nothing to enter */
	}
	x->mnt_fd = fds[0];
	x->pid_fd = fds[1];
	if (rc)
		snprintf(err, errlen, "cannot enter the rank's namespaces: %s", strerror(-rc));
	return rc;
}

static int run(struct rexec *x, int procfd, pid_t rank_pid)
{
	char err[512];
	if (cgroup_join_like(procfd, err, sizeof(err)) != 0)
		return fail(x, err);
	if (read_account(x, procfd) != 0)
		return fail(x, "the rank has ended");
	if (enter_rank(x, procfd, err, sizeof(err)) != 0)
		return fail(x, err);
	x->rank_fd = watch_rank(procfd, rank_pid);
	close(procfd);
	if (x->rank_fd < 0)
		return fail(x, "the rank has ended");
	json_t *req = read_request(x, err, sizeof(err));
	if (!req)
		return fail(x, err);
	char **argv = argv_of(json_object_get(req, "command"));
	x->tty = jv_bool(req, "tty", 0);
	int rc = x->tty ? start_tty(x, argv, req) : start_pipes(x, argv, req);
	for (size_t i = 0; argv[i]; i++)
		free(argv[i]);
	free(argv);
	json_decref(req);
	if (rc) {
		snprintf(err, sizeof(err), "cannot start the command: %s", strerror(-rc));
		return fail(x, err);
	}
	loop(x);
	if (x->client_gone) {
		if (!x->exited)
			kill(-x->pgid, SIGHUP);
		return 0;
	}
	int st = x->status;
	int code = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
	unsigned char p[4] = {(unsigned char)(code >> 24), (unsigned char)(code >> 16),
	                      (unsigned char)(code >> 8), (unsigned char)code};
	put(x, STREAM_EXIT, p, sizeof(p));
	relay_write_all(x->sock, x->out.data + x->sent, x->out.len - x->sent, GOODBYE_MS);
	return 0;
}

int rankexec_main(int argc, char **argv)
{
	struct rexec x = {
	        .cmd_in = -1,
	        .cmd_out = {-1, -1},
	        .sigfd = -1,
	        .rank_fd = -1,
	        .mnt_fd = -1,
	        .pid_fd = -1,
	};
	int procfd;
	pid_t rank_pid;
	if (parse_args(argc, argv, &x.sock, &procfd, &rank_pid) != 0) {
		fprintf(stderr, "usage: anvil _exec --fd SOCKET --proc DIRFD --pid PID (the agent "
		                "runs it for anvil exec)\n");
		return 2;
	}
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	x.sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	fcntl(x.sock, F_SETFD, FD_CLOEXEC);
	fcntl(procfd, F_SETFD, FD_CLOEXEC);
	fcntl(x.sock, F_SETFL, fcntl(x.sock, F_GETFL) | O_NONBLOCK);
	stream_reader_init(&x.in);
	buf_init(&x.out);
	buf_init(&x.to_cmd);
	int rc = run(&x, procfd, rank_pid);
	if (x.rank_fd >= 0)
		close(x.rank_fd);
	if (x.mnt_fd >= 0)
		close(x.mnt_fd);
	if (x.pid_fd >= 0)
		close(x.pid_fd);
	stream_reader_cleanup(&x.in);
	buf_cleanup(&x.out);
	buf_cleanup(&x.to_cmd);
	return rc;
}
