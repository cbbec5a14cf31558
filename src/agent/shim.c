#include "agent/shim.h"

#include "agent/fence.h"
#include "agent/lease.h"
#include "base/sigsafe.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

#define SPARE_MAGIC   0x6c766e61u /* "anvl" */
#define SPARE_FIXED   6           /* strings before argv: see encode_launch */
#define SPARE_FDS     4           /* log_fd, err_fd, record_fd, lease_fd; then the join_fds */
#define SPARE_FDS_MAX (SPARE_FDS + SHIM_JOIN_MAX)
#define SPARE_HEADER  (7 * sizeof(uint32_t))
/* decode_launch's lease_fd when the launch has one, until run_spare puts
 * the received fd there: a launch that has none sends another fd in its
 * slot, which is closed. */
#define SPARE_LEASE_FD INT32_MAX

/* What a shim tells the agent on its socket: one datagram each. */
enum { SHIM_STARTED = 1, SHIM_ENDED = 2 };
struct shim_msg {
	int32_t kind;
	int32_t value; /* STARTED: the command's pid (0: not forked); ENDED: wait status */
};

/* Everything below until shim_spawn runs in a forked child of a process
 * that may have other threads: async-signal-safe calls only (no malloc, no
 * stdio, no locks: base/sigsafe.h). */

/* Appends {KEY,"KEY_A":a[,"KEY_B":b]}\n to the journal in one write(): a
 * reader (or a crash) sees the whole line or none of it. */
static void put_record(int fd, const char *key, const char *key_a, long a, const char *key_b,
                       long b)
{
	char line[256], *end = line + sizeof(line) - 1;
	*end = '\0';
	char *p = end;
	*--p = '\n';
	*--p = '}';
	if (key_b) {
		p = sigsafe_fmt_long(p, b);
		*--p = ':';
		*--p = '"';
		for (size_t n = strlen(key_b); n > 0; n--)
			*--p = key_b[n - 1];
		*--p = '"';
		*--p = ',';
	}
	p = sigsafe_fmt_long(p, a);
	*--p = ':';
	*--p = '"';
	for (size_t n = strlen(key_a); n > 0; n--)
		*--p = key_a[n - 1];
	*--p = '"';
	size_t klen = strlen(key);
	if (klen > (size_t)(p - line) - 2)
		return; /* cannot happen: the key is two integers */
	*--p = ',';
	for (size_t n = klen; n > 0; n--)
		*--p = key[n - 1];
	*--p = '{';
	sigsafe_put(fd, p);
}

static void tell(int sock, int32_t kind, int32_t value)
{
	struct shim_msg m = {kind, value};
	ssize_t w;
	while ((w = send(sock, &m, sizeof(m), MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
}

static void close_range_from(unsigned lo, unsigned hi)
{
	if (lo > hi)
		return;
	if (syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
	for (unsigned fd = lo; fd <= hi && fd < 65536; fd++)
		close((int)fd);
}

#define KEEP_MAX (5 + SHIM_JOIN_MAX)

/* Closes every fd above 2 except keep[0..n) (n <= KEEP_MAX; -1 for none);
 * sorts keep. */
static void close_others(int *keep, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned from = 3;
	for (int i = 0; i < n; i++) {
		if (keep[i] < (int)from)
			continue;
		close_range_from(from, (unsigned)keep[i] - 1);
		from = (unsigned)keep[i] + 1;
	}
	close_range_from(from, ~0u);
}

/* Writes "0" to a cgroup.procs: the caller joins that cgroup. */
static void join(int fd)
{
	if (write(fd, "0", 1) < 0)
		sigsafe_put_errno(2, "anvil: warning: cannot join the rank's cgroup: ", errno);
	close(fd);
}

static void close_joins(const struct shim_launch *l)
{
	for (int i = 0; i < l->njoin; i++)
		if (l->join_fds[i] >= 0)
			close(l->join_fds[i]);
}

static void reset_signals(void)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < 32; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* The command's pid as the node sees it, written by the command's child
 * (a vfork: it shares our memory) before anything else: in a PID namespace
 * of its own the shim sees it as 2, 3, ..., and the agent signals and
 * records the node's number. 0: not known (the child failed first). */
static volatile pid_t command_node_pid;

/* The node's /proc, opened before a fenced shim mounts its namespace's
 * over it (enter_namespace); -1: /proc is the node's. */
static int node_proc = -1;

/* This process's pid as the node sees it: /proc/self of the node's /proc. */
static pid_t node_pid(void)
{
	char text[24];
	ssize_t n = node_proc >= 0 ? readlinkat(node_proc, "self", text, sizeof(text) - 1)
	                           : readlink("/proc/self", text, sizeof(text) - 1);
	long v = 0;
	for (ssize_t i = 0; i < n && text[i] >= '0' && text[i] <= '9'; i++)
		v = v * 10 + (text[i] - '0');
	return n > 0 && v > 0 ? (pid_t)v : getpid();
}

/* fence_shim_enter's result in this shim: 1 made, -1 failed, 0 not tried
 * (no PID namespace, no fence). A fenced rank's view is made in the
 * shim's mount namespace; never in the node's. */
static int shim_fenced;

static _Noreturn void run_command(const struct shim_launch *l, int sock)
{
	command_node_pid = node_pid();
	reset_signals();
	nofile_restore(); /* the open-file limit the agent found, not its raised one */
	setpgid(0, 0);
	/* Join before exec, so nothing the command forks escapes: the rank's
	 * cgroup first (stopping the rank finds it there), then its limits. */
	if (l->cgroup_fd >= 0)
		join(l->cgroup_fd);
	for (int i = 0; i < l->njoin; i++)
		if (l->join_fds[i] >= 0)
			join(l->join_fds[i]);
	close(sock);
	close(l->record_fd);
	if (l->lease_fd >= 0) /* a rank that could write its lease could keep it */
		close(l->lease_fd);
	if (l->fence && shim_fenced != 1) {
		sigsafe_put(2, "anvil: cannot fence the rank: its shim has no mount namespace of "
		               "its own\n");
		_exit(127);
	}
	if (l->fence && fence_enter(l->fence, 2) != 0)
		_exit(127);
	if (chdir(l->cwd) < 0) {
		sigsafe_put_errno(2, l->msg_cwd, errno);
		_exit(127);
	}
	if (!l->path) {
		sigsafe_put(2, l->msg_notfound);
		_exit(127);
	}
	execve(l->path, l->argv, l->envp);
	sigsafe_put_errno(2, l->msg_exec, errno);
	_exit(127);
}

/* The shim is single-threaded and the child only makes async-signal-safe
 * calls before execve or _exit, so vfork: no copy of the address space
 * (a fork of the agent's), and the shim resumes once the command execs. */
static pid_t spawn_command(const struct shim_launch *l, int sock, pid_t *node)
{
	command_node_pid = 0;
	pid_t pid = vfork();
	if (pid == 0)
		run_command(l, sock);
	*node = command_node_pid > 0 ? command_node_pid : pid;
	return pid;
}

/* Self-fencing (shim.h): what this shim did about the rank's lease. */
struct fencing {
	int fd;           /* the node's lease; -1: none, the rank is not fenced */
	int64_t grace_ms; /* SIGTERM this long before the lease's end */
	int termed;       /* SIGTERM sent: SIGKILL at kill_at, whatever comes */
	int killed;
	int64_t kill_at; /* CLOCK_BOOTTIME ms */
};

/* Everything the rank runs: the shim that is the init of its PID
 * namespace signals every other process in it; else the command's group. */
static void signal_rank(pid_t cmd, int sig)
{
	if (getpid() == 1)
		kill(-1, sig);
	else
		kill(-cmd, sig);
}

static void say_fenced(int64_t len_ms, int64_t grace_ms)
{
	char a[24], b[24];
	a[23] = b[23] = '\0';
	sigsafe_put(2, "anvil: this node has not reached the server for the rank's lease (");
	sigsafe_put(2, sigsafe_fmt_long(a + 23, (long)(len_ms / 1000)));
	sigsafe_put(2, " s): stopping the rank (SIGTERM, SIGKILL in ");
	sigsafe_put(2, sigsafe_fmt_long(b + 23, (long)(grace_ms / 1000)));
	sigsafe_put(2, " s), as the server may start its replacement elsewhere\n");
}

/* Acts on the lease; how long until it must be looked at again (ms). A
 * renewal only moves the end later, so sleeping until the SIGTERM that
 * the end read now would need misses nothing. */
static int64_t lease_step(struct fencing *f, pid_t cmd)
{
	int64_t now = lease_now_ms(), end = 0, len = 0;
	if (!f->termed) {
		int r = lease_read(f->fd, &end, &len);
		if (r <= 0)
			return r < 0 ? 50 : 1000; /* a write raced us; or no lease (yet) */
		/* The server holds a sync up to half the node timeout (the
		 * lease's length), so renewals come that often: SIGTERM no
		 * earlier than three quarters into the lease leaves a quarter
		 * of slack for a busy machine. */
		int64_t grace = f->grace_ms < len / 4 ? f->grace_ms : len / 4;
		if (now < end - grace)
			return end - grace - now;
		f->termed = 1;
		f->kill_at = end > now ? end : now;
		say_fenced(len, f->kill_at - now);
		signal_rank(cmd, f->kill_at > now ? SIGTERM : SIGKILL);
	}
	if (!f->killed && now >= f->kill_at) {
		f->killed = 1;
		signal_rank(cmd, SIGKILL);
	}
	return f->killed ? 1000 : f->kill_at - now;
}

/* Sleeps up to ms, or until a child changes state (SIGCHLD is blocked). */
static void nap(int64_t ms)
{
	if (ms < 1)
		ms = 1;
	if (ms > 60000)
		ms = 60000;
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
	                      .tv_nsec = (long)(ms % 1000) * 1000000};
	sigtimedwait(&chld, NULL, &ts);
}

/* Waits for the command, fencing it by its lease when it has one. A shim
 * that is the init of the rank's PID namespace (agent/fence.h) is also the
 * parent of whatever the command left orphaned there: it reaps those as
 * they come, and once the command has ended it kills the rest (whatever a
 * rank leaves goes with it, as the executor does for its cgroup). */
static int wait_command(pid_t cmd, struct fencing *f)
{
	int status = 127 << 8, st;
	for (;;) {
		pid_t w = waitpid(getpid() == 1 ? -1 : cmd, &st, f->fd >= 0 ? WNOHANG : 0);
		if (w < 0 && errno == EINTR)
			continue;
		if (w == 0) {
			nap(lease_step(f, cmd));
			continue;
		}
		if (w < 0 || w == cmd) {
			if (w == cmd)
				status = st;
			break;
		}
	}
	if (getpid() == 1) {
		kill(-1, SIGKILL);
		while (waitpid(-1, &st, WNOHANG) > 0)
			;
	}
	return status;
}

/* The shim ignores the signals a terminal or a stop sends to its group. */
static void block_signals(void)
{
	sigset_t block;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGQUIT);
	sigaddset(&block, SIGPIPE);
	sigaddset(&block, SIGCHLD); /* taken by nap(), while a fenced rank runs */
	sigprocmask(SIG_BLOCK, &block, NULL);
}

/* Runs one rank: its command with stdout and stderr in their logs, its
 * two journal lines and SHIM_STARTED; returns the command's wait status
 * with the shim's own fds 1 and 2 back on /dev/null (fd 0) and the rank's
 * fds closed. */
static int run_rank(const struct shim_launch *l, int sock)
{
	dup2(l->log_fd, 1);
	dup2(l->err_fd >= 0 ? l->err_fd : l->log_fd, 2);
	int keep[KEEP_MAX] = {l->cgroup_fd, sock, l->record_fd, node_proc, l->lease_fd}, nkeep = 5;
	for (int i = 0; i < l->njoin && i < SHIM_JOIN_MAX; i++)
		keep[nkeep++] = l->join_fds[i];
	close_others(keep, nkeep);
	int status = 127 << 8;
	pid_t node = 0, cmd = spawn_command(l, sock, &node);
	if (l->cgroup_fd >= 0)
		close(l->cgroup_fd);
	close_joins(l);
	if (cmd < 0) {
		sigsafe_put_errno(2, "anvil: cannot fork the command: ", errno);
		tell(sock, SHIM_STARTED, 0); /* "taken, but no command": the record says 127 */
	} else {
		setpgid(cmd, cmd); /* also here: the group exists before we report it */
		put_record(l->record_fd, l->record_key, "shim", (long)node_pid(), "pgid",
		           (long)node);
		tell(sock, SHIM_STARTED, node);
		struct fencing f = {.fd = l->lease_fd, .grace_ms = l->grace_ms};
		status = wait_command(cmd, &f);
	}
	put_record(l->record_fd, l->record_key, "wait_status", (long)status, NULL, 0);
	close(l->record_fd);
	if (l->lease_fd >= 0)
		close(l->lease_fd);
	dup2(0, 1);
	dup2(0, 2);
	return status;
}

/* A shim started for one rank: it exits after it. */
/* A shim that is the init of a PID namespace of its own makes its mount
 * namespace (agent/fence.h): once, for all its ranks. */
static void enter_namespace(void)
{
	if (getpid() != 1)
		return;
	node_proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
	shim_fenced = node_proc >= 0 && fence_shim_enter() == 0 ? 1 : -1;
}

static _Noreturn void run_shim(const struct shim_launch *l, int sock)
{
	block_signals();
	setsid();
	if (l->fence)
		enter_namespace();
	dup2(l->null_fd, 0);
	tell(sock, SHIM_ENDED, run_rank(l, sock));
	_exit(0); /* its mount namespace goes with it */
}

/* Waits for SHIM_STARTED; the command's pid, or -ECHILD when the shim
 * ended without it. */
static int wait_started(int sock, pid_t *pgid)
{
	struct shim_msg m;
	ssize_t r;
	while ((r = recv(sock, &m, sizeof(m), 0)) < 0 && errno == EINTR)
		;
	if (r != (ssize_t)sizeof(m) || m.kind != SHIM_STARTED)
		return -ECHILD;
	*pgid = m.value;
	return 0;
}

/* fork(), or with pidns a clone whose child is the init of a new PID
 * namespace (agent/fence.h). Like fork, the child runs on a copy of our
 * memory; it makes async-signal-safe calls only, so glibc's fork handlers
 * are not needed. */
static pid_t fork_shim(int pidns)
{
	if (pidns) {
		long pid = syscall(SYS_clone, (unsigned long)(SIGCHLD | CLONE_NEWPID), NULL, NULL,
		                   NULL, NULL);
		if (pid >= 0 || (errno != EPERM && errno != EINVAL))
			return (pid_t)pid;
	}
	return fork();
}

int shim_spawn(const struct shim_launch *l, struct shim *out, pid_t *pgid)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	pid_t pid = fork_shim(l->fence != NULL);
	if (pid < 0) {
		int rc = -errno;
		close(sv[0]);
		close(sv[1]);
		return rc;
	}
	if (pid == 0) {
		close(sv[0]);
		run_shim(l, sv[1]);
	}
	close(sv[1]);
	*out = (struct shim){.pid = pid, .sock = sv[0]};
	if (wait_started(sv[0], pgid) != 0)
		*pgid = 0; /* the shim died: the agent finds out from its end */
	return 0;
}

/* Spare shims. From here to shim_spare_fork's fork: the child side. */

/* The next NUL-terminated string at *p before end; NULL when none. */
static char *next_string(char **p, char *end)
{
	char *s = *p, *nul = s < end ? memchr(s, '\0', (size_t)(end - s)) : NULL;
	if (!nul)
		return NULL;
	*p = nul + 1;
	return s;
}

/* Decodes what encode_launch wrote; vec has SHIM_SPARE_MAX_STRINGS slots. */
static int decode_launch(char *buf, size_t len, char **vec, struct shim_launch *l)
{
	uint32_t h[7];
	if (len < SPARE_HEADER)
		return -1;
	memcpy(h, buf, sizeof(h));
	if (h[0] != SPARE_MAGIC || h[1] < 1 ||
	    (uint64_t)h[1] + h[2] + h[4] + 3 > SHIM_SPARE_MAX_STRINGS)
		return -1;
	char *p = buf + SPARE_HEADER, *end = buf + len, *fixed[SPARE_FIXED];
	for (int i = 0; i < SPARE_FIXED; i++)
		if (!(fixed[i] = next_string(&p, end)))
			return -1;
	/* vec: argv, NULL, envp, NULL, the fence's steps, NULL */
	uint32_t argc = h[1], envc = h[2], nfence = h[4];
	uint32_t env_at = argc + 1, fence_at = env_at + envc + 1;
	for (uint32_t i = 0; i < fence_at + nfence; i++)
		if (i != argc && i != fence_at - 1 && !(vec[i] = next_string(&p, end)))
			return -1;
	vec[argc] = NULL;
	vec[fence_at - 1] = NULL;
	vec[fence_at + nfence] = NULL;
	*l = (struct shim_launch){
	        .path = h[3] ? fixed[0] : NULL,
	        .argv = vec,
	        .envp = vec + env_at,
	        .fence = nfence ? vec + fence_at : NULL,
	        .cwd = fixed[1],
	        .log_fd = -1,
	        .err_fd = -1,
	        .null_fd = 0, /* already /dev/null */
	        .cgroup_fd = -1,
	        .njoin = 0,
	        .record_fd = -1,
	        .record_key = fixed[2],
	        .msg_notfound = fixed[3],
	        .msg_exec = fixed[4],
	        .msg_cwd = fixed[5],
	        .lease_fd = h[6] ? SPARE_LEASE_FD : -1, /* the caller puts the fd */
	        .grace_ms = h[5],
	};
	return 0;
}

/* One launch datagram with its fds (logs, record, then the joins); its
 * length with *nfds set, or 0 at EOF or on any error (the caller exits:
 * the agent is gone or sent nonsense). */
static size_t receive_launch(int sock, char *buf, int fds[SPARE_FDS_MAX], int *nfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(SPARE_FDS_MAX * sizeof(int))];
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = SHIM_SPARE_MAX_REQUEST};
	struct msghdr m = {.msg_iov = &iov,
	                   .msg_iovlen = 1,
	                   .msg_control = ctl.space,
	                   .msg_controllen = sizeof(ctl.space)};
	ssize_t n;
	while ((n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
	if (!c || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || c->cmsg_level != SOL_SOCKET ||
	    c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(SPARE_FDS * sizeof(int)) ||
	    c->cmsg_len > CMSG_LEN(SPARE_FDS_MAX * sizeof(int)) ||
	    (c->cmsg_len - CMSG_LEN(0)) % sizeof(int) != 0)
		return 0;
	*nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	memcpy(fds, CMSG_DATA(c), (size_t)*nfds * sizeof(int));
	return (size_t)n;
}

/* A spare: joins its cgroup, then runs one rank per launch until EOF. */
static _Noreturn void run_spare(int sock, int cgroup_fd, int null_fd, char *buf, char **vec)
{
	block_signals();
	setsid();
	dup2(null_fd, 0);
	dup2(null_fd, 1);
	dup2(null_fd, 2);
	int keep[2] = {sock, cgroup_fd};
	close_others(keep, 2);
	enter_namespace(); /* done while nobody waits, as the join below */
	/* The slow step, done while nobody waits: the command inherits it. */
	int join_err = 0;
	if (cgroup_fd >= 0 && write(cgroup_fd, "0", 1) < 0)
		join_err = errno;
	if (cgroup_fd >= 0)
		close(cgroup_fd);
	for (;;) {
		int fds[SPARE_FDS_MAX], nfds = 0;
		size_t n = receive_launch(sock, buf, fds, &nfds);
		struct shim_launch l;
		if (n == 0 || decode_launch(buf, n, vec, &l) != 0)
			_exit(n == 0 ? 0 : 1);
		l.log_fd = fds[0];
		l.err_fd = fds[1];
		l.record_fd = fds[2];
		if (l.lease_fd == SPARE_LEASE_FD)
			l.lease_fd = fds[3];
		else
			close(fds[3]);
		for (int i = SPARE_FDS; i < nfds; i++)
			l.join_fds[l.njoin++] = fds[i];
		if (join_err)
			sigsafe_put_errno(
			        l.err_fd,
			        "anvil: warning: cannot join the rank's cgroup: ", join_err);
		join_err = 0;
		tell(sock, SHIM_ENDED, run_rank(&l, sock));
		/* the rank's processes are gone: its mounts go too, after the
		 * end was told (each unmount waits for the kernel's RCU) */
		if (l.fence && shim_fenced == 1)
			fence_leave(l.fence);
	}
}

int shim_spare_fork(int cgroup_fd, int null_fd, int pidns, struct shim *out)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	/* The child may not malloc: its buffers are made here. */
	char *buf = malloc(SHIM_SPARE_MAX_REQUEST);
	char **vec = calloc(SHIM_SPARE_MAX_STRINGS, sizeof(char *));
	int rc = 0;
	if (!buf || !vec) {
		rc = -ENOMEM;
		goto out;
	}
	pid_t pid = fork_shim(pidns);
	if (pid == 0) {
		close(sv[0]);
		run_spare(sv[1], cgroup_fd, null_fd, buf, vec);
	}
	if (pid < 0) {
		rc = -errno;
		goto out;
	}
	*out = (struct shim){.pid = pid, .sock = sv[0]};
	sv[0] = -1;
out:
	if (sv[0] >= 0)
		close(sv[0]);
	close(sv[1]);
	free(buf);
	free(vec);
	return rc;
}

/* The strings of l in decode_launch's order. */
static size_t launch_strings(const struct shim_launch *l, const char **out, size_t max)
{
	const char *fixed[SPARE_FIXED] = {l->path ? l->path : "", l->cwd,      l->record_key,
	                                  l->msg_notfound,        l->msg_exec, l->msg_cwd};
	size_t n = 0;
	for (int i = 0; i < SPARE_FIXED; i++)
		if (n < max)
			out[n++] = fixed[i];
	for (size_t i = 0; l->argv[i]; i++)
		if (n < max)
			out[n++] = l->argv[i];
	for (size_t i = 0; l->envp && l->envp[i]; i++)
		if (n < max)
			out[n++] = l->envp[i];
	for (size_t i = 0; l->fence && l->fence[i]; i++)
		if (n < max)
			out[n++] = l->fence[i];
	return n;
}

static size_t count(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

/* The launch as one datagram: header, then NUL-terminated strings; NULL
 * when it does not fit the caps. */
static char *encode_launch(const struct shim_launch *l, size_t *len_out)
{
	size_t argc = count(l->argv), envc = count(l->envp), nfence = count(l->fence);
	if (l->cgroup_fd >= 0 || argc < 1 || argc + envc + nfence + 3 > SHIM_SPARE_MAX_STRINGS)
		return NULL;
	size_t total = SPARE_FIXED + argc + envc + nfence;
	const char **strs = calloc(total, sizeof(char *));
	if (!strs)
		return NULL;
	size_t n = launch_strings(l, strs, total), len = SPARE_HEADER;
	for (size_t i = 0; i < n; i++)
		len += strlen(strs[i]) + 1;
	char *buf = len <= SHIM_SPARE_MAX_REQUEST ? malloc(len) : NULL;
	if (buf) {
		uint32_t grace = l->grace_ms < 0            ? 0
		                 : l->grace_ms > UINT32_MAX ? UINT32_MAX
		                                            : (uint32_t)l->grace_ms;
		uint32_t h[7] = {SPARE_MAGIC,      (uint32_t)argc, (uint32_t)envc,  l->path != NULL,
		                 (uint32_t)nfence, grace,          l->lease_fd >= 0};
		memcpy(buf, h, sizeof(h));
		char *p = buf + SPARE_HEADER;
		for (size_t i = 0; i < n; i++) {
			size_t sl = strlen(strs[i]) + 1;
			memcpy(p, strs[i], sl);
			p += sl;
		}
		*len_out = len;
	}
	free(strs);
	return buf;
}

int shim_spare_fits(const struct shim_launch *l)
{
	size_t len;
	char *buf = encode_launch(l, &len);
	free(buf);
	return buf != NULL;
}

static int send_launch(int sock, const char *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(SPARE_FDS_MAX * sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov,
	                   .msg_iovlen = 1,
	                   .msg_control = ctl.space,
	                   .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	ssize_t w;
	while ((w = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return w == (ssize_t)len ? 0 : w < 0 ? -errno : -EIO;
}

int shim_spare_send(struct shim *s, const struct shim_launch *l)
{
	size_t len;
	char *buf = encode_launch(l, &len);
	if (!buf)
		return -E2BIG;
	int err_fd = l->err_fd >= 0 ? l->err_fd : l->log_fd;
	int lease = l->lease_fd >= 0 ? l->lease_fd : l->log_fd; /* a slot filler: closed */
	int fds[SPARE_FDS_MAX] = {l->log_fd, err_fd, l->record_fd, lease}, nfds = SPARE_FDS;
	for (int i = 0; i < l->njoin && i < SHIM_JOIN_MAX; i++)
		fds[nfds++] = l->join_fds[i];
	int rc = send_launch(s->sock, buf, len, fds, nfds);
	free(buf);
	return rc;
}

int shim_spare_started(struct shim *s, pid_t *pgid)
{
	return wait_started(s->sock, pgid);
}

int shim_ended(struct shim *s, int *wait_status)
{
	struct shim_msg m;
	ssize_t r;
	while ((r = recv(s->sock, &m, sizeof(m), MSG_DONTWAIT)) < 0 && errno == EINTR)
		;
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (r != (ssize_t)sizeof(m) || m.kind != SHIM_ENDED)
		return -ECHILD;
	*wait_status = m.value;
	return 1;
}

void shim_close(struct shim *s)
{
	if (s->sock >= 0)
		close(s->sock);
	s->sock = -1;
}
