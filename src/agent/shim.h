/* shim.h - the process that stands between the agent and a rank.
 *
 * A shim is forked from a (possibly multithreaded) agent, so everything it
 * and the command need is prepared in struct shim_launch BEFORE the fork:
 * after it, only async-signal-safe calls run. The shim: setsid(); stdin
 * from /dev/null; closes every other inherited fd; for a rank: stdout
 * appended to the log, stderr to the error log; vforks the command (new
 * process group, joins the cgroup through cgroup_fd, then the limits'
 * cgroups through join_fds, the rank's fence when it has one (agent/fence.h:
 * its mount view and account), chdir, execve of the resolved path; on
 * failure a message on its stderr and exit 127); appends
 * {KEY,"shim":SHIM,"pgid":COMMAND} to the agent's journal (record_fd,
 * O_APPEND; KEY is l->record_key) and then tells the agent the command's
 * pid (SHIM_STARTED) on its socket; waits for the command; appends
 * {KEY,"wait_status":STATUS} and sends SHIM_ENDED with the status. Each
 * line is one write(), so a reader sees whole lines, and the journal line
 * comes first, so an agent killed in between finds the rank's state there.
 *
 * A fenced rank's shim is the init of a PID namespace of its own (forked
 * by clone(CLONE_NEWPID)): it reaps whatever the command orphans there and,
 * once the command has ended, kills the rest. The pids it records and
 * reports (its own and the command's) are the node's, not the namespace's:
 * the agent signals and adopts by those.
 *
 * A spare shim (shim_spare_fork) is forked ahead of time: it has already
 * called setsid() and joined a cgroup of its own, and waits on its socket
 * for a launch. Joining a cgroup is the slow step (on cgroup v1 a write to
 * cgroup.procs waits for an RCU grace period, 6-16 ms), so the executor
 * renames the spare's cgroup to the rank's and sends the launch: the
 * command is vforked at once and inherits the cgroup. The launch travels
 * as one datagram of at most SHIM_SPARE_MAX_REQUEST bytes, received into a
 * buffer allocated before the fork (no malloc after it), with the logs'
 * and the journal's fds and the join_fds attached (SCM_RIGHTS): the spare itself
 * never joins a limit's cgroup, only the command does, so the shim stays
 * reusable whatever its ranks' limits. After SHIM_ENDED a spare waits for the
 * next launch: the executor renames the finished rank's (now empty) cgroup
 * back to a spare's and reuses the shim, so that a rank costs neither a
 * fork nor the exit of a copy of the agent. A shim whose socket reaches
 * EOF (the agent closed it, exited or was killed) exits; one started
 * directly (shim_spawn) exits after SHIM_ENDED.
 *
 *   shim_spare_fork ──► WAITING ──shim_spare_send──► RUNNING a rank
 *                        ▲  └──shim_close / agent gone: EOF──► exits 0
 *                        └───────(command ended: SHIM_ENDED)──────┘
 *
 * Self-fencing: while the command runs, a shim given the node's lease
 * (lease_fd, agent/lease.h) reads it whenever it could be about to run
 * out; grace_ms before its end (at most a quarter of its length) the shim sends
 * SIGTERM to everything the rank runs (its PID namespace, or its process
 * group), and at its end SIGKILL, and says so on the rank's stderr. It
 * needs no agent for that: a rank whose agent is dead, stopped or cut off
 * from the server has stopped by the lease's end, which is when the
 * server may start its replacement elsewhere (docs/operations.md).
 *
 * Owned by the executor (exec_launch.c, exec_spares.c), which owns the
 * launch strings and fds.
 */
#ifndef ANVIL_AGENT_SHIM_H
#define ANVIL_AGENT_SHIM_H

#include <stdint.h>
#include <sys/types.h>

#define SHIM_JOIN_MAX 3 /* the limits' cgroups: cpu, memory, devices */

struct shim_launch {
	const char *path; /* resolved executable; NULL: not found */
	char *const *argv;
	char *const *envp;
	const char *cwd;
	int log_fd;                  /* O_APPEND: the command's stdout */
	int err_fd;                  /* O_APPEND: its stderr; -1: log_fd too */
	int null_fd;                 /* /dev/null */
	int cgroup_fd;               /* cgroup.procs or -1 */
	int njoin;                   /* how many join_fds */
	int join_fds[SHIM_JOIN_MAX]; /* cgroup.procs of the limits' cgroups (exec.h) */
	int record_fd;               /* the agent's journal, O_APPEND */
	const char *record_key;      /* "\"attempt_id\":A,\"rank\":R" opens each line */
	const char *msg_notfound;    /* whole line */
	const char *msg_exec;        /* prefix; the errno text follows */
	const char *msg_cwd;         /* prefix; the errno text follows */
	char *const *fence;          /* the rank's fence (agent/fence.h); NULL: none */
	int lease_fd;                /* the node's lease (agent/lease.h); -1: none */
	int64_t grace_ms;            /* SIGTERM to SIGKILL when the lease runs out */
};

/* A shim process and the agent's end of its socket. */
struct shim {
	pid_t pid; /* 0: none */
	int sock;  /* the agent's end (SOCK_SEQPACKET, O_CLOEXEC); -1: none */
};

/* Forks the shim and waits until it has forked the command. 0 with the
 * shim and the command's pgid (0 if the shim could not fork it: the record
 * then says 127), or a negative errno when the shim could not be forked
 * at all. It exits after its rank: shim_ended, then shim_close. */
int shim_spawn(const struct shim_launch *l, struct shim *out, pid_t *pgid);

#define SHIM_SPARE_MAX_REQUEST (64 * 1024) /* bytes of one serialized launch */
#define SHIM_SPARE_MAX_STRINGS 8192        /* argv + envp entries */

/* Forks a spare that joins the cgroup through cgroup_fd (-1: none) and
 * waits for its launch; null_fd is /dev/null. With pidns the spare is the
 * init of a PID namespace of its own (its ranks' fences need one). Does
 * not wait for the join. 0, or a negative errno. */
int shim_spare_fork(int cgroup_fd, int null_fd, int pidns, struct shim *out);

/* 1 when l can go to a spare (size and count caps; no cgroup_fd). */
int shim_spare_fits(const struct shim_launch *l);

/* A launch, in two halves, so that the spares of several ranks fork their
 * commands while the next launch is prepared (exec.h, exec_batch).
 * shim_spare_send sends l (with its log_fd, err_fd, record_fd and join_fds;
 * null_fd is unused, cgroup_fd must be -1): 0; -E2BIG: l does not fit,
 * nothing was sent; another negative errno: the launch could not be sent
 * (the spare had died), nothing started. shim_spare_started then waits
 * until the spare has forked the command, as shim_spawn does: 0 with *pgid
 * set as by shim_spawn; -ECHILD: the spare took the launch but ended
 * without a word, so whether the command started is unknown. On any
 * error, close and reap the spare. */
int shim_spare_send(struct shim *s, const struct shim_launch *l);
int shim_spare_started(struct shim *s, pid_t *pgid);

/* Whether the rank's command has ended, without blocking: 1 with its wait
 * status (a spare shim now waits for its next launch), 0 while it runs,
 * -ECHILD when the shim is gone (or said nonsense) without telling. */
int shim_ended(struct shim *s, int *wait_status);

/* Closes the agent's end: a waiting shim exits by itself. */
void shim_close(struct shim *s);

#endif
