#include "agent/launch.h"

#include "agent/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/desired.h"
#include "agent/exec.h"
#include "base/mem.h"
#include "base/util.h"

/* ---- the supervisor (pure) ---- */

static int status_code(int ws)
{
	return WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : WEXITSTATUS(ws);
}

/* "exited with status 3", "was killed by signal 9 (Killed)". */
static void status_text(int ws, char *out, size_t n)
{
	if (WIFSIGNALED(ws))
		snprintf(out, n, "was killed by signal %d (%s)", WTERMSIG(ws),
		         strsignal(WTERMSIG(ws)));
	else
		snprintf(out, n, "exited with status %d", WEXITSTATUS(ws));
}

static void end(struct launch_sup *s, int code, int sig, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* The outcome is decided: ENDING. fmt NULL: no reason (success, a stop). */
static void end(struct launch_sup *s, int code, int sig, const char *fmt, ...)
{
	s->phase = LAUNCH_ENDING;
	s->exit_code = code;
	s->exit_signal = sig;
	s->reason[0] = '\0';
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->reason, sizeof(s->reason), fmt, ap);
		va_end(ap);
	}
}

void launch_sup_init(struct launch_sup *s, int rank, int has_worker, const char *head_addr,
                     int64_t timeout_ms, int64_t now)
{
	*s = (struct launch_sup){.rank = rank, .has_worker = has_worker, .timeout_ms = timeout_ms};
	snprintf(s->head_addr, sizeof(s->head_addr), "%s", head_addr);
	/* A rank other than 0 without a worker has nothing to wait for. */
	s->phase = rank > 0 && !has_worker ? LAUNCH_RUNNING : LAUNCH_WAITING;
	s->deadline_ms = s->phase == LAUNCH_WAITING ? now + timeout_ms : 0;
}

void launch_sup_answered(struct launch_sup *s)
{
	if (s->phase != LAUNCH_WAITING)
		return;
	s->phase = LAUNCH_RUNNING;
	s->deadline_ms = 0;
}

/* Something ended that the command may have meant to end (launch.h):
 * wait for the command, or the stop. */
static void orphan(struct launch_sup *s, enum launch_child who, int ws, int64_t now)
{
	s->phase = LAUNCH_ORPHANED;
	s->orphan_who = who;
	s->orphan_status = ws;
	s->deadline_ms = now + LAUNCH_ORPHAN_MS;
}

void launch_sup_ended(struct launch_sup *s, enum launch_child who, int ws, int head_answers,
                      int64_t now)
{
	char st[96];
	if (s->phase == LAUNCH_ENDING)
		return; /* we are stopping them */
	status_text(ws, st, sizeof(st));
	int failed = status_code(ws) ? status_code(ws) : 1; /* what ends first fails the job */
	switch (who) {
	case LAUNCH_COMMAND: /* its status is the rank's, a signal included */
		if (WIFSIGNALED(ws))
			end(s, 0, WTERMSIG(ws), "the command %s", st);
		else if (WEXITSTATUS(ws))
			end(s, WEXITSTATUS(ws), 0, "the command %s", st);
		else
			end(s, 0, 0, NULL);
		return;
	case LAUNCH_HEAD:
		if (s->phase == LAUNCH_WAITING || status_code(ws))
			end(s, failed, 0, "the head %s before %s", st,
			    s->phase == LAUNCH_WAITING ? "it answered" : "the command ended");
		else if (s->phase == LAUNCH_RUNNING)
			orphan(s, LAUNCH_HEAD, ws, now); /* shut down, maybe by the command */
		return;
	case LAUNCH_WORKER:
		if (s->phase != LAUNCH_RUNNING)
			return;
		if (head_answers)
			end(s, failed, 0, "the worker %s before the command ended", st);
		else
			orphan(s, LAUNCH_WORKER, ws, now); /* its head went */
		return;
	case LAUNCH_NCHILDREN: break;
	}
}

void launch_sup_signal(struct launch_sup *s, int sig)
{
	if (s->phase == LAUNCH_ENDING)
		return; /* our own SIGTERM to the group, or a second stop */
	end(s, 0, sig, NULL);
	s->stopped = 1;
}

void launch_sup_tick(struct launch_sup *s, int64_t now)
{
	if (!s->deadline_ms || now < s->deadline_ms)
		return;
	char st[96];
	status_text(s->orphan_status, st, sizeof(st));
	int code = status_code(s->orphan_status) ? status_code(s->orphan_status) : 1;
	if (s->phase == LAUNCH_WAITING)
		end(s, LAUNCH_TIMEOUT_EXIT, 0, "the head did not answer at %s within %g s",
		    s->head_addr, (double)s->timeout_ms / 1000.0);
	else if (s->phase == LAUNCH_ORPHANED && s->orphan_who == LAUNCH_HEAD)
		end(s, code, 0, "the head %s before the command ended", st);
	else if (s->phase == LAUNCH_ORPHANED)
		end(s, code, 0, "the worker %s and the head at %s stopped answering", st,
		    s->head_addr);
}

/* ---- arguments ---- */

int launch_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || !colon[1] || colon == addr)
		return -1;
	const char *h = addr;
	size_t n = (size_t)(colon - addr);
	if (addr[0] == '[') { /* [v6]:port */
		if (colon[-1] != ']' || n < 3)
			return -1;
		h++;
		n -= 2;
	} else if (memchr(addr, ':', n)) {
		return -1; /* a bare IPv6 address is ambiguous */
	}
	if (n >= hostlen || strlen(colon + 1) >= portlen ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	snprintf(port, portlen, "%s", colon + 1);
	return 0;
}

static int parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* One "--name value" of `anvil _launch`: 0, or -1 with err. */
static int parse_opt(struct launch_opts *o, const char *name, const char *v, char *err,
                     size_t errlen)
{
	int64_t n = 0;
	int rc = 0;
	if (strcmp(name, "--rank") == 0 && (rc = parse_int(v, 0, 1 << 20, &n)) == 0)
		o->rank = (int)n;
	else if (strcmp(name, "--timeout-ms") == 0 && (rc = parse_int(v, 1, INT64_MAX, &n)) == 0)
		o->timeout_ms = n;
	else if (strcmp(name, "--grace-ms") == 0 && (rc = parse_int(v, 0, INT64_MAX, &n)) == 0)
		o->grace_ms = n;
	else if (strcmp(name, "--head-addr") == 0)
		o->head_addr = v;
	else if (strcmp(name, "--head") == 0)
		o->head = v;
	else if (strcmp(name, "--worker") == 0)
		o->worker = v;
	else if (strcmp(name, "--reason-file") == 0)
		o->reason_file = v;
	else if (rc == 0) {
		snprintf(err, errlen, "unknown option %s", name);
		return -1;
	}
	if (rc)
		snprintf(err, errlen, "%s: '%s' is not a number in bounds", name, v);
	return rc;
}

int launch_parse(int argc, char **argv, struct launch_opts *o, char *err, size_t errlen)
{
	*o = (struct launch_opts){.rank = -1, .timeout_ms = 300000, .grace_ms = 10000};
	int i = 1;
	for (; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
		if (i + 1 >= argc) {
			snprintf(err, errlen, "%s needs a value", argv[i]);
			return -1;
		}
		if (parse_opt(o, argv[i], argv[i + 1], err, errlen))
			return -1;
	}
	o->command = i + 1 < argc ? argv + i + 1 : NULL;
	char host[256], port[16];
	if (o->rank < 0 || !o->head_addr) {
		snprintf(err, errlen, "--rank and --head-addr are required");
		return -1;
	}
	if (launch_split_addr(o->head_addr, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen, "--head-addr: '%s' is not host:port", o->head_addr);
		return -1;
	}
	if (o->rank == 0 && (!o->head || !o->command)) {
		snprintf(err, errlen, "rank 0 needs --head and a command after --");
		return -1;
	}
	return 0;
}

/* ---- the agent's side ---- */

static char *fmt_ll(long long v)
{
	return xasprintf("%lld", v);
}

char **launch_argv(const struct desired_rank *d, const char *self, const char *work_dir)
{
	const char *addr = d->head_addr;
	if (!addr)
		return NULL;
	int rank = d->rank;
	const char *head = d->head, *worker = d->worker;
	char **v = xcalloc(20 + d->command.n, sizeof(*v));
	size_t n = 0;
	v[n++] = xstrdup(self ? self : "/proc/self/exe");
	v[n++] = xstrdup("_launch");
	v[n++] = xstrdup("--rank");
	v[n++] = fmt_ll(rank);
	v[n++] = xstrdup("--head-addr");
	v[n++] = xstrdup(addr);
	v[n++] = xstrdup("--timeout-ms");
	v[n++] = fmt_ll(d->head_timeout_ms);
	v[n++] = xstrdup("--grace-ms");
	v[n++] = fmt_ll(d->grace_ms);
	v[n++] = xstrdup("--reason-file");
	v[n++] = launch_reason_path(work_dir, d->attempt_id, rank);
	if (rank == 0 && head) {
		v[n++] = xstrdup("--head");
		v[n++] = xstrdup(head);
	}
	if (worker) {
		v[n++] = xstrdup("--worker");
		v[n++] = xstrdup(worker);
	}
	if (rank == 0) { /* the other ranks run no command */
		v[n++] = xstrdup("--");
		for (size_t i = 0; i < d->command.n; i++)
			v[n++] = xstrdup(d->command.v[i]);
	}
	v[n] = NULL;
	return v;
}

void launch_argv_free(char **argv)
{
	for (size_t i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}

const char *launch_self(void)
{
	static char self[PATH_MAX];
	if (self[0])
		return self;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		self[0] = '\0';
		return NULL;
	}
	self[n] = '\0';
	/* Replaced by an upgrade: the path now holds the new binary. */
	static const char deleted[] = " (deleted)";
	size_t len = (size_t)n, dl = sizeof(deleted) - 1;
	if (len > dl && strcmp(self + len - dl, deleted) == 0)
		self[len - dl] = '\0';
	return self;
}

char *launch_reason_path(const char *work_dir, int64_t attempt_id, int rank)
{
	char *dir = exec_rank_dir(work_dir, attempt_id, rank);
	char *path = xasprintf("%s/.anvil-end", dir);
	free(dir);
	return path;
}

int launch_reason_read(const char *work_dir, int64_t attempt_id, int rank, char *out,
                       size_t out_len)
{
	char *path = launch_reason_path(work_dir, attempt_id, rank);
	/* in the rank's own directory: a link or a pipe there is not followed */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	free(path);
	struct stat sb;
	if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		return 0;
	size_t cap = out_len < 256 ? out_len : 256; /* wire_report's bound: 255 */
	ssize_t n = cap > 1 ? read(fd, out, cap - 1) : 0;
	close(fd);
	if (n <= 0)
		return 0;
	/* The rank could write there too: printable ASCII only, one line. */
	size_t len = 0;
	for (ssize_t i = 0; i < n && out[i] != '\n'; i++)
		out[len++] = out[i] >= 0x20 && out[i] < 0x7f ? out[i] : '?';
	out[len] = '\0';
	return len > 0;
}

/* ---- the launcher process ---- */

struct proc {
	pid_t pid; /* 0: not started */
	int done;
	int ws;
};

static const char *const child_name[LAUNCH_NCHILDREN] = {"head", "worker", "command"};

/* Fork and exec: a command line by /bin/sh -c, else argv; the child gets
 * the signal mask the launcher was started with. -1 when fork fails. */
static pid_t spawn(const char *line, char *const *argv, const sigset_t *mask)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	sigprocmask(SIG_SETMASK, mask, NULL);
	if (line)
		execl("/bin/sh", "sh", "-c", line, (char *)NULL);
	else
		execvp(argv[0], argv);
	dprintf(2, "anvil: cannot run %s: %s\n", line ? "/bin/sh" : argv[0], strerror(errno));
	_exit(127);
}

/* Whether a TCP connection to host:port opens within timeout_ms. */
static int probe(const char *host, const char *port, int timeout_ms)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return 0;
	int ok = 0;
	for (struct addrinfo *p = ai; p && !ok; p = p->ai_next) {
		int fd = socket(p->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, p->ai_addr, p->ai_addrlen) == 0) {
			ok = 1;
		} else if (errno == EINPROGRESS) {
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};
			int err = 0;
			socklen_t len = sizeof(err);
			ok = poll(&pfd, 1, timeout_ms) == 1 &&
			     getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
		}
		close(fd);
	}
	freeaddrinfo(ai);
	return ok;
}

struct launcher {
	struct launch_opts o;
	struct launch_sup s;
	struct proc kids[LAUNCH_NCHILDREN];
	char host[256], port[16];
	sigset_t mask; /* the signals waited for (blocked) */
	sigset_t orig; /* the mask the children get */
	int leader;    /* we lead our process group, as under the agent's shim */
	int64_t ending_at;
	int killed;
};

static void start(struct launcher *l, enum launch_child who, const char *line, char *const *argv)
{
	pid_t pid = spawn(line, argv, &l->orig);
	if (pid < 0) { /* as a command that cannot run */
		fprintf(stderr, "anvil: cannot start the %s: %s\n", child_name[who],
		        strerror(errno));
		launch_sup_ended(&l->s, who, 127 << 8, 1, now_ms());
		return;
	}
	l->kids[who].pid = pid;
}

/* RUNNING: the worker, and on rank 0 the job's command. */
static void start_rest(struct launcher *l)
{
	if (l->o.worker)
		start(l, LAUNCH_WORKER, l->o.worker, NULL);
	if (l->o.rank == 0 && l->s.phase == LAUNCH_RUNNING)
		start(l, LAUNCH_COMMAND, NULL, l->o.command);
}

/* Reaps the children that ended and tells the supervisor, the head first:
 * a worker or command that fails because its head went is the head's
 * failure. */
static void reap(struct launcher *l)
{
	int ws, ended[LAUNCH_NCHILDREN] = {0};
	pid_t pid;
	while ((pid = waitpid(-1, &ws, WNOHANG)) > 0)
		for (int i = 0; i < LAUNCH_NCHILDREN; i++)
			if (l->kids[i].pid == pid && !l->kids[i].done) {
				l->kids[i].done = 1;
				l->kids[i].ws = ws;
				ended[i] = 1;
			}
	for (int i = 0; i < LAUNCH_NCHILDREN; i++) {
		if (!ended[i])
			continue;
		int answers = i == LAUNCH_WORKER && l->s.phase == LAUNCH_RUNNING &&
		              probe(l->host, l->port, 1000);
		launch_sup_ended(&l->s, (enum launch_child)i, l->kids[i].ws, answers, now_ms());
	}
}

static int alive(const struct launcher *l)
{
	for (int i = 0; i < LAUNCH_NCHILDREN; i++)
		if (l->kids[i].pid > 0 && !l->kids[i].done)
			return 1;
	return 0;
}

static void signal_children(struct launcher *l, int sig)
{
	for (int i = 0; i < LAUNCH_NCHILDREN; i++)
		if (l->kids[i].pid > 0 && !l->kids[i].done)
			kill(l->kids[i].pid, sig);
}

static void write_reason(const struct launcher *l)
{
	if (!l->s.reason[0])
		return;
	fprintf(stderr, "anvil: %s\n", l->s.reason);
	if (!l->o.reason_file)
		return;
	int fd = open(l->o.reason_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	dprintf(fd, "%s\n", l->s.reason);
	close(fd);
}

/* ENDING's first step: say why, and stop what still runs. A stop signal
 * reached the whole group already; else the group (the head's and the
 * workers' own children too) gets SIGTERM, ourselves included: the
 * supervisor ignores it in ENDING. */
static void begin_end(struct launcher *l)
{
	l->ending_at = now_ms();
	write_reason(l);
	if (l->s.stopped && l->leader)
		return;
	if (l->leader)
		kill(0, SIGTERM);
	else
		signal_children(l, SIGTERM);
}

/* How long to wait for the next signal, in ms. */
static int64_t wait_ms(const struct launcher *l, int64_t now)
{
	int64_t w = 1000;
	if (l->s.phase == LAUNCH_WAITING)
		w = LAUNCH_PROBE_MS;
	else if (l->s.phase == LAUNCH_ORPHANED)
		w = l->s.deadline_ms - now;
	else if (l->s.phase == LAUNCH_ENDING)
		w = l->killed ? 100 : l->ending_at + l->o.grace_ms - now;
	return w < 0 ? 0 : w > 1000 ? 1000 : w;
}

/* Waits up to ms for a signal, then takes every pending one. */
static void wait_signals(struct launcher *l, int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	for (;;) {
		int sig = sigtimedwait(&l->mask, NULL, &ts);
		if (sig < 0)
			return;
		if (sig != SIGCHLD)
			launch_sup_signal(&l->s, sig);
		ts = (struct timespec){0, 0};
	}
}

static void run(struct launcher *l)
{
	if (l->o.rank == 0)
		start(l, LAUNCH_HEAD, l->o.head, NULL);
	if (l->s.phase == LAUNCH_RUNNING)
		start_rest(l);
	for (;;) {
		reap(l);
		if (l->s.phase == LAUNCH_WAITING && probe(l->host, l->port, 500)) {
			launch_sup_answered(&l->s);
			fprintf(stderr, "anvil: the head answers at %s\n", l->o.head_addr);
			start_rest(l);
		}
		int64_t now = now_ms();
		launch_sup_tick(&l->s, now);
		if (l->s.phase == LAUNCH_ENDING) {
			if (!l->ending_at)
				begin_end(l);
			if (!alive(l))
				return;
			if (!l->killed && now >= l->ending_at + l->o.grace_ms) {
				signal_children(l, SIGKILL); /* the agent kills what is left */
				l->killed = 1;
			}
		}
		wait_signals(l, wait_ms(l, now));
	}
}

/* Dies of sig as the command did, or as the stop asked; no core file. */
static int die_of(int sig)
{
	struct rlimit none = {0, 0};
	setrlimit(RLIMIT_CORE, &none);
	signal(sig, SIG_DFL);
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	sigprocmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	return 128 + sig; /* a signal that does not kill */
}

int launch_main(int argc, char **argv)
{
	struct launcher l = {0};
	char err[256];
	if (launch_parse(argc, argv, &l.o, err, sizeof(err)) ||
	    launch_split_addr(l.o.head_addr, l.host, sizeof(l.host), l.port, sizeof(l.port))) {
		fprintf(stderr, "anvil _launch: %s (it is run by the agent: docs/cli.md)\n", err);
		return 2;
	}
	sigemptyset(&l.mask);
	sigaddset(&l.mask, SIGCHLD);
	sigaddset(&l.mask, SIGTERM);
	sigaddset(&l.mask, SIGINT);
	sigaddset(&l.mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &l.mask, &l.orig);
	l.leader = getpgrp() == getpid();
	launch_sup_init(&l.s, l.o.rank, l.o.worker != NULL, l.o.head_addr, l.o.timeout_ms,
	                now_ms());
	run(&l);
	return l.s.exit_signal ? die_of(l.s.exit_signal) : l.s.exit_code;
}
