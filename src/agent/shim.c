#include "agent/shim.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Everything below until shim_spawn runs in a forked child of a process
 * that may have other threads: async-signal-safe calls only (no malloc, no
 * stdio, no locks). strerrordesc_np is a lookup in a constant table. */

static void put(int fd, const char *s)
{
	size_t len = strlen(s);
	while (len > 0) {
		ssize_t w = write(fd, s, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		len -= (size_t)w;
	}
}

static void put_errno(int fd, const char *prefix, int err)
{
	const char *why = strerrordesc_np(err);
	put(fd, prefix);
	put(fd, why ? why : "unknown error");
	put(fd, "\n");
}

/* Decimal text of v ending just before end; returns its start. */
static char *fmt_long(char *end, long v)
{
	unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
	do {
		*--end = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--end = '-';
	return end;
}

/* Writes text to tmp, then renames it over path. */
static void put_file(const char *tmp, const char *path, const char *text)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	put(fd, text);
	close(fd);
	rename(tmp, path);
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

/* Closes every fd above 2 except keep_a and keep_b (-1 for none). */
static void close_others(int keep_a, int keep_b)
{
	int lo = keep_a < keep_b ? keep_a : keep_b;
	int hi = keep_a < keep_b ? keep_b : keep_a;
	unsigned from = 3;
	if (lo >= 3) {
		close_range_from(from, (unsigned)lo - 1);
		from = (unsigned)lo + 1;
	}
	if (hi >= 3) {
		close_range_from(from, (unsigned)hi - 1);
		from = (unsigned)hi + 1;
	}
	close_range_from(from, ~0u);
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

static _Noreturn void run_command(const struct shim_launch *l, int pipe_w)
{
	reset_signals();
	setpgid(0, 0);
	if (l->cgroup_fd >= 0) {
		/* Join before exec, so nothing the command forks escapes. */
		if (write(l->cgroup_fd, "0", 1) < 0)
			put_errno(2, "anvil: warning: cannot join the rank's cgroup: ", errno);
		close(l->cgroup_fd);
	}
	close(pipe_w);
	if (chdir(l->cwd) < 0) {
		put_errno(2, l->msg_cwd, errno);
		_exit(127);
	}
	if (!l->path) {
		put(2, l->msg_notfound);
		_exit(127);
	}
	execve(l->path, l->argv, l->envp);
	put_errno(2, l->msg_exec, errno);
	_exit(127);
}

static _Noreturn void run_shim(const struct shim_launch *l, int pipe_w)
{
	sigset_t block;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGHUP);
	sigaddset(&block, SIGQUIT);
	sigaddset(&block, SIGPIPE);
	sigprocmask(SIG_BLOCK, &block, NULL);
	setsid();
	dup2(l->null_fd, 0);
	dup2(l->log_fd, 1);
	dup2(l->log_fd, 2);
	close_others(l->cgroup_fd, pipe_w);
	int status = 127 << 8;
	pid_t cmd = fork();
	if (cmd == 0)
		run_command(l, pipe_w);
	if (l->cgroup_fd >= 0)
		close(l->cgroup_fd);
	if (cmd < 0) {
		put_errno(2, "anvil: cannot fork the command: ", errno);
		close(pipe_w);
	} else {
		setpgid(cmd, cmd); /* also here: the group exists before we report it */
		char text[64], *end = text + sizeof(text) - 1;
		*end = '\0';
		*--end = '\n';
		char *p = fmt_long(end, (long)cmd);
		*--p = ' ';
		p = fmt_long(p, (long)getpid());
		put_file(l->pid_tmp, l->pid_file, p);
		ssize_t w = write(pipe_w, &cmd, sizeof(cmd));
		(void)w;
		close(pipe_w);
		while (waitpid(cmd, &status, 0) < 0 && errno == EINTR)
			;
	}
	char text[32], *end = text + sizeof(text) - 1;
	*end = '\0';
	*--end = '\n';
	put_file(l->exit_tmp, l->exit_file, fmt_long(end, (long)status));
	_exit(0);
}

int shim_spawn(const struct shim_launch *l, pid_t *shim_pid, pid_t *pgid)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int rc = -errno;
		close(fds[0]);
		close(fds[1]);
		return rc;
	}
	if (pid == 0) {
		close(fds[0]);
		run_shim(l, fds[1]);
	}
	close(fds[1]);
	pid_t cmd = 0;
	ssize_t r;
	while ((r = read(fds[0], &cmd, sizeof(cmd))) < 0 && errno == EINTR)
		;
	close(fds[0]);
	*shim_pid = pid;
	*pgid = r == (ssize_t)sizeof(cmd) ? cmd : 0;
	return 0;
}
