/* shim.h - the process that stands between the agent and a rank.
 *
 * shim_spawn() forks the shim from a (possibly multithreaded) agent, so
 * everything the shim and the command need is prepared in struct
 * shim_launch BEFORE the fork: after it, only async-signal-safe calls run.
 * The shim: setsid(); stdin from /dev/null, stdout and stderr appended to
 * the log; closes every other inherited fd; forks the command (new process
 * group, joins the cgroup through cgroup_fd, chdir, execve of the resolved
 * path; on failure a message in the log and exit 127); writes
 * "SHIM COMMAND\n" to pid_file and the command's pid to the agent through
 * a pipe; waits for the command; writes its wait status to exit_file (both
 * files through a temporary name and rename); exits 0.
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
	int log_fd;    /* O_APPEND */
	int null_fd;   /* /dev/null */
	int cgroup_fd; /* cgroup.procs or -1 */
	const char *pid_file, *pid_tmp;
	const char *exit_file, *exit_tmp;
	const char *msg_notfound; /* whole line */
	const char *msg_exec;     /* prefix; the errno text follows */
	const char *msg_cwd;      /* prefix; the errno text follows */
};

/* Forks the shim and waits until it has forked the command. 0 with the
 * shim's pid and the command's pgid (0 if the shim could not fork it: the
 * exit file then says 127), or a negative errno when the shim could not be
 * forked at all. */
int shim_spawn(const struct shim_launch *l, pid_t *shim_pid, pid_t *pgid);

#endif
