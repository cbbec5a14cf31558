/* launch.h - head and workers: the launcher that every rank of a job with
 * a head runs (`anvil _launch`, a hidden verb of the anvil binary).
 *
 * A job submitted with a `head` command line (and often a `worker` one:
 * docs/cli.md, "Head and workers") runs this launcher as each rank's
 * command. The agent builds its argv from the rank's desired entry
 * (launch_argv); the launcher starts the head, the worker and the job's
 * command as its children, each by fork and exec (the command lines by
 * /bin/sh -c), in the rank's process group and cgroup, so the rank's stop
 * reaches all of them and nothing outlives the rank. Then it supervises
 * them:
 *
 *   rank 0:  head; once the head answers at ANVIL_HEAD_ADDR (a TCP connect
 *            succeeds): the worker and the job's command
 *   rank N:  once the head answers: the worker (no worker: nothing; the
 *            rank waits to be stopped)
 *
 *                 launch_sup_answered
 *     WAITING ─────────────────────────────► RUNNING
 *        │ timeout (124); the head ends         │ the command ends (its status);
 *        │ a stop signal                        │ the head ends non-zero; the worker
 *        ▼                                      │ ends while the head answers;
 *     ENDING ◄──────────────────────────────────┤ a stop signal
 *        ▲                                      │ the head ends with 0, or the worker
 *        │ the command ends; the head ends      │ ends while the head does not answer
 *        │ non-zero; a stop signal;             ▼
 *        └─ LAUNCH_ORPHAN_MS pass ─────────── ORPHANED
 *
 * ORPHANED is there because a cluster may end before the command does,
 * without anything having failed: the command shut it down (Dask's
 * client.shutdown() closes the scheduler, which exits 0, and the workers
 * exit when their scheduler goes), or the command ended and rank 0 is
 * stopping the head (the server then stops this rank). So a head that
 * exits 0, or a worker that ends while its head no longer answers, is not
 * blamed at once: the rank waits for the command to end, or to be
 * stopped, and only after LAUNCH_ORPHAN_MS blames that process.
 *
 * ENDING: the launcher sends SIGTERM to its process group (unless a stop
 * signal already reached it), waits up to the rank's grace for its
 * children, SIGKILLs those left, and exits with the outcome: the command's
 * status, the status of the process that ended first (at least 1), 124
 * when the head never answered, or by the stop signal itself. The reason
 * ("the head exited with status 1 before the command ended") goes to its
 * stderr (the rank's .err log) and to the reason file
 * (launch_reason_path), which the agent sends with the rank's report
 * (launch_reason_read) and the server puts in the job's reason.
 *
 * The supervisor (struct launch_sup) is pure: events in, phase and outcome
 * out, so tests drive it without processes; launch_main is the process.
 * launch_argv and launch_reason_* run in the agent's main thread.
 */
#ifndef ANVIL_AGENT_LAUNCH_H
#define ANVIL_AGENT_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#define LAUNCH_TIMEOUT_EXIT 124   /* the head never answered (as timeout(1)) */
#define LAUNCH_ORPHAN_MS    60000 /* ORPHANED: wait this long for the end */
#define LAUNCH_PROBE_MS     200   /* WAITING: try the head this often */
#define LAUNCH_REASON_MAX   200   /* bytes of a reason, with its NUL */

enum launch_child { LAUNCH_HEAD, LAUNCH_WORKER, LAUNCH_COMMAND, LAUNCH_NCHILDREN };
enum launch_phase { LAUNCH_WAITING, LAUNCH_RUNNING, LAUNCH_ORPHANED, LAUNCH_ENDING };

struct desired_rank;

/* What `anvil _launch` was told (launch_parse). Strings borrowed from argv. */
struct launch_opts {
	int rank;
	const char *head_addr; /* host:port, [v6]:port */
	const char *head;      /* rank 0: the head's command line */
	const char *worker;    /* NULL: none */
	int64_t timeout_ms;    /* for the head to answer */
	int64_t grace_ms;      /* ENDING: for the children to go */
	const char *reason_file;
	char **command; /* rank 0: the job's command, NULL-terminated */
};

/* The supervisor's state. */
struct launch_sup {
	int rank;
	int has_worker;
	char head_addr[300];
	int64_t timeout_ms;
	enum launch_phase phase;
	int64_t deadline_ms;          /* WAITING, ORPHANED: when the phase gives up */
	enum launch_child orphan_who; /* ORPHANED: what ended, the head or the worker */
	int orphan_status;            /* ORPHANED: its wait status */
	/* ENDING: the outcome; exit_signal != 0: die of that signal */
	int exit_code;
	int exit_signal;
	int stopped; /* ENDING because of a stop signal: the children have it too */
	char reason[LAUNCH_REASON_MAX];
};

/* Parses `anvil _launch` arguments (argv[0] is "_launch"): 0, or -1 with
 * a message in err. */
int launch_parse(int argc, char **argv, struct launch_opts *o, char *err, size_t errlen);
/* Splits "host:port" or "[v6]:port": 0, or -1. */
int launch_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen);

/* Starts in WAITING (RUNNING for a rank other than 0 without a worker,
 * which needs no head). now: monotonic ms. */
void launch_sup_init(struct launch_sup *s, int rank, int has_worker, const char *head_addr,
                     int64_t timeout_ms, int64_t now);
/* The head answers: WAITING -> RUNNING (start the worker and the command). */
void launch_sup_answered(struct launch_sup *s);
/* Child who ended with wait status ws; head_answers: whether the head
 * answers now (asked when the worker ended). */
void launch_sup_ended(struct launch_sup *s, enum launch_child who, int ws, int head_answers,
                      int64_t now);
/* A stop signal (SIGTERM, SIGINT, SIGHUP) arrived: ENDING unless already. */
void launch_sup_signal(struct launch_sup *s, int sig);
/* Deadlines: WAITING's timeout, ORPHANED's wait. */
void launch_sup_tick(struct launch_sup *s, int64_t now);

/* The argv (NULL-terminated, free with launch_argv_free) that runs the
 * rank of desired record d (agent/desired.h, deepened) under the
 * launcher at self (the anvil binary), or NULL when d has no head_addr
 * (not a job with a head). The reason file is under work_dir. */
char **launch_argv(const struct desired_rank *d, const char *self, const char *work_dir);
void launch_argv_free(char **argv);
/* The anvil binary this process runs, for launch_argv ("/proc/self/exe"
 * resolved once); NULL when it cannot be told. */
const char *launch_self(void);

/* WORK_DIR/rank/<attempt_id>-<rank>/.anvil-end (agent/exec.h,
 * exec_rank_dir); free() it. */
char *launch_reason_path(const char *work_dir, int64_t attempt_id, int rank);
/* The reason a rank's launcher left, printable ASCII, at most out_len - 1
 * (and at most 255) bytes: 1, or 0 when it left none. */
int launch_reason_read(const char *work_dir, int64_t attempt_id, int rank, char *out,
                       size_t out_len);

/* `anvil _launch ...`: the launcher process; returns its exit status, or
 * does not return (it dies of the signal that stopped it). */
int launch_main(int argc, char **argv);

#endif
