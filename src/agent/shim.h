/* shim.h - the process that stands between the agent and a rank.
 *
 * shim_spawn() forks the shim from a (possibly multithreaded) agent, so
 * everything the shim and the command need is prepared in struct
 * shim_launch BEFORE the fork: after it, only async-signal-safe calls run.
 * The shim: setsid(); stdin from /dev/null, stdout and stderr appended to
 * the log; closes every other inherited fd; vforks the command (new
 * process group, joins the cgroup through cgroup_fd, chdir, execve of the
 * resolved path; on failure a message in the log and exit 127); appends
 * {"shim":SHIM,"pgid":COMMAND} to the rank's record (record_fd, O_APPEND)
 * and sends the command's pid to the agent through a pipe; waits for the
 * command; appends {"wait_status":STATUS}; exits 0. Each line is one
 * write(), so a reader sees whole lines.
 *
 * A spare shim (shim_spare_fork) is the same process forked ahead of time:
 * it has already called setsid() and joined a cgroup of its own, and waits
 * on a socket for its launch. Joining a cgroup is the slow step (on cgroup
 * v1 a write to cgroup.procs waits for an RCU grace period, 6-16 ms), so
 * the executor renames the spare's cgroup to the rank's and sends the
 * launch: the command is vforked at once and inherits the cgroup. The
 * launch travels as one datagram of at most SHIM_SPARE_MAX_REQUEST bytes,
 * received into a buffer allocated before the fork (no malloc after it),
 * with the log and record fds attached (SCM_RIGHTS). A spare whose socket reaches EOF
 * (the agent closed it, exited or was killed) exits at once.
 *
 *   shim_spare_fork ──► WAITING ──shim_spare_launch──► a rank's shim (as above)
 *                          └──shim_spare_close / agent gone: EOF──► exits 0
 *
 * Owned by exec.c, which owns the launch strings and fds.
 */
#ifndef ANVIL_AGENT_SHIM_H
#define ANVIL_AGENT_SHIM_H

#include <sys/types.h>

struct shim_launch {
	const char *path; /* resolved executable; NULL: not found */
	char *const *argv;
	char *const *envp;
	const char *cwd;
	int log_fd;               /* O_APPEND */
	int null_fd;              /* /dev/null */
	int cgroup_fd;            /* cgroup.procs or -1 */
	int record_fd;            /* the rank's record, O_APPEND */
	const char *msg_notfound; /* whole line */
	const char *msg_exec;     /* prefix; the errno text follows */
	const char *msg_cwd;      /* prefix; the errno text follows */
};

/* Forks the shim and waits until it has forked the command. 0 with the
 * shim's pid and the command's pgid (0 if the shim could not fork it: the
 * record then says 127), or a negative errno when the shim could not be
 * forked at all. */
int shim_spawn(const struct shim_launch *l, pid_t *shim_pid, pid_t *pgid);

#define SHIM_SPARE_MAX_REQUEST (64 * 1024) /* bytes of one serialized launch */
#define SHIM_SPARE_MAX_STRINGS 8192        /* argv + envp entries */

struct shim_spare {
	pid_t pid; /* 0: none */
	int sock;  /* the agent's end; -1: none */
};

/* Forks a spare that joins the cgroup through cgroup_fd (-1: none) and
 * waits for its launch; null_fd is /dev/null. Does not wait for the join.
 * 0, or a negative errno. */
int shim_spare_fork(int cgroup_fd, int null_fd, struct shim_spare *out);

/* 1 when l can go to a spare (size and count caps; no cgroup_fd). */
int shim_spare_fits(const struct shim_launch *l);

/* Sends l (with its log_fd and record_fd; null_fd is unused, cgroup_fd must
 * be -1) and waits
 * until the spare has forked the command, as shim_spawn does. 0: the spare
 * is now the rank's shim (s->pid) and *pgid is set as by shim_spawn; s->sock
 * is closed. -E2BIG: l does not fit, nothing was sent. -ECHILD: the spare
 * took the launch but ended without a word, so whether the command started
 * is unknown. Another negative errno: the launch could not be sent (the
 * spare had died): nothing started. On any error, close and reap the spare. */
int shim_spare_launch(struct shim_spare *s, const struct shim_launch *l, pid_t *pgid);

/* Closes the agent's end: a waiting spare exits by itself. */
void shim_spare_close(struct shim_spare *s);

#endif
