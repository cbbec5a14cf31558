/* exec.h - the executor: runs a node's ranks as process trees.
 *
 * Each rank runs under a small shim process (agent/shim.h): the shim calls
 * setsid() (so it outlives an agent killed with SIGKILL), vforks the rank's
 * command into a new process group (and, where the machine has a writable
 * v1 cgroup hierarchy, a per-rank cgroup: agent/cgroup.h), waits for it,
 * records its wait status and tells the executor on its socket. The shim
 * is usually a spare, forked ahead of time (or left by an earlier rank)
 * and already in a cgroup that becomes the rank's (see "Spare shims"
 * below); else the agent forks one at the start. A rank with CPU or memory
 * limits or GPU isolation also joins cgroups in those hierarchies (see
 * "Limits" below). On disk, under WORK_DIR:
 *
 *   ranks-<seq>.jsonl   the journal (agent/journal.h): one line per event
 *                       of a rank, keyed by attempt id and rank: the
 *                       agent's {job_id, grace_ms, start_time_ms} before
 *                       the shim starts (or with "error" when it cannot
 *                       start); the shim's {shim, pgid} once the command
 *                       runs and {wait_status} when it ends; "forgotten"
 *                       from exec_forget()
 *   logs/<attempt_id>-<rank>.log
 *                       the command's stdout (ANVIL_LOG_FILE); never
 *                       removed: it is also the sign that the rank ran
 *                       here (exec_start refuses to run it again)
 *   logs/<attempt_id>-<rank>.err
 *                       its stderr (ANVIL_ERR_FILE), and the shim's own
 *                       messages (command not found, ...). Ranks started
 *                       by an agent older than the split have none: their
 *                       .log holds both streams
 *   spare-logs/<n>.log  empty logs made ahead by the log pool's thread
 *                       (agent/logpool.h), renamed into logs/ at a start
 *   output/<attempt_id>/
 *                       ANVIL_OUTPUT_DIR, the default working directory
 *
 * A new executor over the same work dir (exec_new) re-adopts the ranks
 * that still run and reads the real exit status of those that ended. The
 * command writes both logs itself (they are its fds 1 and 2, opened
 * O_APPEND), so they keep growing while no agent runs and a new agent
 * serves them by name. Two streams, two files: the kernel cannot mark which
 * stream a write came from, and a copier process in between would be one
 * more thing a rank's output depended on; the price is that the order of
 * stdout lines relative to stderr lines is not kept.
 *
 *   exec_start ──► RUNNING ──(command ends, exec_poll)──────────► EXITED
 *       │             └─exec_stop: TERM to group and cgroup,     ▲
 *       │               KILL at grace (exec_poll)────────────────┘
 *       └─(cannot prepare or fork)──► FAILED          (failed_to_start)
 *   EXITED|FAILED ──exec_ack──► acked ──exec_forget──► gone
 *
 * When a rank ends, whatever it left behind in its group or cgroup is
 * killed. The executor is not thread-safe: one thread owns it. It never
 * installs signal handlers; the owner calls exec_poll() when exec_fd() is
 * readable, on SIGCHLD and when exec_next_poll_ms() says so.
 */
#ifndef ANVIL_AGENT_EXEC_H
#define ANVIL_AGENT_EXEC_H

#include <stddef.h>
#include <stdint.h>

struct exec;

/* A rank's state on its node: created running, then exited or failed
 * (its start failed) once. The moves are a table (model/machine.h,
 * MACHINE_AGENT_RANK), drawn in docs/states.md, "A rank on its node". */
enum exec_state { EXEC_RUNNING, EXEC_EXITED, EXEC_FAILED, EXEC_NSTATES };

struct exec_spec {
	int64_t attempt_id;
	int rank;
	int64_t job_id;
	const char *const *argv; /* NULL-terminated, argv[0] not empty */
	const char *cwd;         /* NULL: the attempt's output directory */
	const char *const *env;  /* "KEY=VALUE", NULL-terminated; may be NULL */
	int64_t grace_ms;        /* SIGTERM-to-SIGKILL grace when stopping */
	/* Limits (see "Limits" below); all 0: none. */
	const int *gpu_minors; /* N of each /dev/nvidiaN the rank may open */
	int ngpu_minors;       /* 0: no GPU; -1: not known, so not isolated */
	int64_t cpu_millis;    /* CPU time in thousandths of a CPU; 0: no limit */
	int64_t memory_bytes;  /* 0: no limit */
	int session;           /* run argv under a session holder (see "Sessions") */
	int task;              /* argv runs the task wrapper (agent/task.h) */
	int as_root;           /* its queue lets the job's ranks run as root */
};

struct exec_status {
	int64_t attempt_id;
	int rank;
	int64_t job_id;
	enum exec_state state;
	int stopping;      /* exec_stop was called */
	int pid;           /* the command's process group id; 0 when unknown */
	int exit_code;     /* EXITED: the exit code, or 128 + signal */
	int signal;        /* EXITED: the signal that ended it, or 0 */
	int oom_kills;     /* EXITED: processes the kernel killed for its memory limit */
	const char *error; /* FAILED: why; borrowed until the next exec_ call */
	int acked;         /* the final state was acknowledged (exec_ack) */
};

/* Opens the executor over work_dir (created if needed), removes the spare
 * shims and cgroups a crashed executor left, and re-adopts the ranks
 * recorded there. node_name names the cgroup folder. */
int exec_new(const char *work_dir, const char *node_name, struct exec **out);
/* WORK_DIR/checkpoints/<job>: ANVIL_CHECKPOINT_DIR of a checkpointing job's
 * ranks (see docs/api.md). The caller frees it. */
char *exec_checkpoint_dir(const char *work_dir, int64_t job_id);
/* Wall-clock ms of the last change in the job's checkpoint dir; 0 if none. */
int64_t exec_checkpoint_ms(const struct exec *e, int64_t job_id);
/* Frees the executor without touching running ranks (they keep running);
 * ends the spare shims and removes the cgroups of finished ones and of the
 * spares (waits up to 100 ms for them). */
void exec_free(struct exec *e);
int exec_uses_cgroups(const struct exec *e);
/* Fences every rank started from now on (agent/fence.h); takes f (NULL:
 * none). Called before the first exec_poll, so that the spare shims are
 * made for it. */
struct fence;
void exec_set_fence(struct exec *e, struct fence *f);
const struct fence *exec_fence(const struct exec *e);
/* WORK_DIR/rank/<attempt_id>-<rank>: the rank's own directory (its /tmp
 * when fenced), where the session holder's socket and the launcher's end
 * line go; removed once the rank is forgotten. free() it. */
char *exec_rank_dir(const char *work_dir, int64_t attempt_id, int rank);
/* ANVIL_HEARTBEAT_FILE of a rank (agent/hang.h): .anvil-heartbeat in its
 * own directory, as the node sees it. free() it. */
char *exec_heartbeat_path(const char *work_dir, int64_t attempt_id, int rank);
/* ROOT of the ranks' cgroups (agent/cgroup.h); NULL without cgroups. */
const char *exec_cgroup_root(const struct exec *e);
/* The work dir the executor was opened over (borrowed for its life). */
const char *exec_work_dir(const struct exec *e);

/* Spare shims (agent/shim.h), each waiting in a cgroup ROOT/spare-*, take
 * the cgroup join and the fork of the shim off a rank's start. A rank's
 * shim that came from the pool goes back to it when the rank ends (its
 * emptied cgroup renamed back to a spare's), up to EXEC_SPARES_MAX; extras
 * above the wanted number end after idling a while. exec_poll makes up the
 * number, so exec_next_poll_ms is 0 while one is missing; a rank that
 * finds none, or whose launch does not fit a spare, starts by the direct
 * path (a shim forked for it, which exits after it). */
#define EXEC_SPARES_DEFAULT 2
#define EXEC_SPARES_MAX     8
/* How many spares to keep, 0 to EXEC_SPARES_MAX. */
void exec_set_spares(struct exec *e, int n);
/* The number of spares ready now; up to max of their pids into pids. */
int exec_spares(const struct exec *e, int *pids, int max);
/* Ranks started through a spare. */
uint64_t exec_started_spare_total(const struct exec *e);
/* Shims that went back to the pool after their rank. */
uint64_t exec_reused_total(const struct exec *e);
/* Readable when a shim has something to tell: call exec_poll. */
int exec_fd(const struct exec *e);
/* For tests: roll the journal to a new segment past bytes. */
void exec_set_journal_roll(struct exec *e, int64_t bytes);

/* Limits. A rank with cpu_millis or memory_bytes, or any rank on a node
 * with GPU device isolation (and ngpu_minors >= 0), also runs in cgroups
 * of the v1 "cpu", "memory" and "devices" hierarchies, the ones it needs
 * (agent/cgroup.h says what is written): LROOT/<attempt_id>-<rank>, LROOT
 * being <mount><agent's cgroup>/anvil/<node> in that hierarchy
 * (exec_limit_root). exec_start makes and writes them before the launch;
 * the command joins them itself after the rank's pids cgroup, before exec
 * (a spare shim gets their cgroup.procs fds with the launch and never
 * joins them itself, so it stays reusable); exec_poll removes them once
 * the rank is final and they are empty, a restarted executor finds them
 * by name. Device isolation is on where the node has NVIDIA's device nodes
 * (/dev/nvidiactl exists); ANVIL_DEVICE_ISOLATION=1 (or 0) in the agent's
 * environment, read by exec_new, or exec_set_device_isolation turns it on
 * (or off) whatever the node has: tests use fake device nodes.
 *
 * Cost: each v1 join waits for an RCU grace period (6-16 ms), and
 * exec_start waits for the command's exec, so a rank with limits starts
 * that much later per hierarchy; a rank without limits or isolation
 * touches none of them (the fast path). A hierarchy that is not mounted
 * or not writable is logged once and the ranks run without that limit;
 * a limit the kernel refuses is logged for the rank, which runs without. */
enum exec_limit { EXEC_LIMIT_CPU, EXEC_LIMIT_MEMORY, EXEC_LIMIT_DEVICES, EXEC_LIMITS };
/* LROOT of a limit's hierarchy; NULL where it cannot be used. */
const char *exec_limit_root(const struct exec *e, enum exec_limit which);
void exec_set_device_isolation(struct exec *e, int on);
int exec_device_isolation(const struct exec *e);

/* The node's lease on its ranks (agent/lease.h): renewed to end at end_ms
 * (CLOCK_BOOTTIME, lease_now_ms) and last len_ms; end_ms 0 removes it (the
 * ranks run unfenced). An end before the one written last is ignored. 0,
 * or a negative errno. */
int exec_lease_renew(struct exec *e, int64_t end_ms, int64_t len_ms);

/* Starts a rank: 0 when it runs, or when it could not start (then it is
 * FAILED with the reason); -EEXIST when the executor knows it already;
 * -EALREADY when it ran here before (its log exists): ranks never rerun. */
int exec_start(struct exec *e, const struct exec_spec *spec);
/* Starting several ranks: after exec_batch, a start through a spare shim
 * returns once its launch is sent, and the rank runs with its pid not yet
 * known (0) until exec_settle() reads it, so that the spares fork their
 * commands while the next launch is prepared instead of the agent waiting
 * for each in turn. exec_settle ends the batch; exec_poll, exec_stop and
 * exec_stop_all call it first, and so does exec_free. */
void exec_batch(struct exec *e);
void exec_settle(struct exec *e);
/* SIGTERM now, SIGKILL after the rank's grace (at most cap_ms if cap_ms is
 * >= 0). 0, or ERR_NOTFOUND. A rank that is not RUNNING is left alone. */
int exec_stop(struct exec *e, int64_t attempt_id, int rank, int64_t cap_ms);
void exec_stop_all(struct exec *e, int64_t cap_ms);

/* Reaps shims, reads their records, sends due SIGKILLs, cleans cgroups
 * and makes up the spare shims; returns how many ranks reached a final
 * state. */
int exec_poll(struct exec *e);
/* Milliseconds until exec_poll is next due (besides SIGCHLD); -1: never. */
int64_t exec_next_poll_ms(const struct exec *e);

size_t exec_count(const struct exec *e);
int exec_running(const struct exec *e);
uint64_t exec_started_total(const struct exec *e);
/* The i-th rank (0 <= i < exec_count). */
void exec_get(const struct exec *e, size_t i, struct exec_status *out);
/* 0, or ERR_NOTFOUND. */
int exec_find(const struct exec *e, int64_t attempt_id, int rank, struct exec_status *out);

/* The server has recorded the rank's final state: stop reporting it. */
void exec_ack(struct exec *e, int64_t attempt_id, int rank);
/* Drops a final rank and its record (its log and output stay). */
void exec_forget(struct exec *e, int64_t attempt_id, int rank);

/* Sessions. A rank of a session job (anvil shell) runs its command under
 * the session holder (agent/holder.h): the executor starts "SELF _session
 * -- ARGV..." (SELF: this binary, /proc/self/exe at exec_new) with
 * ANVIL_SESSION_SOCKET=WORK_DIR/rank/<attempt_id>-<rank>/.anvil-session.sock in its
 * environment, where the holder listens; the agent's attach endpoint
 * connects there. The holder is the rank's command, so the rank keeps its
 * cgroup, GPUs, environment, time limit and stop. The socket is removed
 * when the rank ends. A path that would not fit a Unix socket's 108 bytes
 * fails the rank's start, saying so. */
#define EXEC_SESSION_ENV "ANVIL_SESSION_SOCKET"
/* The holder's socket of rank (attempt_id, rank); free() it. */
char *exec_session_socket(const struct exec *e, int64_t attempt_id, int rank);

/* Exec into a rank (agent/rankexec.h) needs what the rank's command was
 * started with: its process, environment and working directory. The
 * executor keeps them for every RUNNING rank it started, and for an
 * adopted one (a restarted agent) once exec_describe has rebuilt them from
 * the rank's desired entry, as its start would have. Borrowed until the
 * next exec_ call that changes ranks. */
struct exec_context {
	int64_t attempt_id;
	int rank;
	int pid;                /* the command's pid, also its process group */
	const char *const *env; /* NULL-terminated "KEY=VALUE" */
	const char *cwd;
};
/* The i-th rank's context: 0, or ERR_NOTFOUND when it is not RUNNING or
 * its environment is not known (yet). */
int exec_context(const struct exec *e, size_t i, struct exec_context *out);
/* Changes whenever a context appears or goes: republish then. */
uint64_t exec_context_version(const struct exec *e);
/* Whether the rank (attempt_id, rank) has a context or is not running. */
int exec_described(const struct exec *e, int64_t attempt_id, int rank);
/* An adopted RUNNING rank without an environment gets the one spec (its
 * desired entry) would have given it at its start; others are left. */
void exec_describe(struct exec *e, const struct exec_spec *spec);

/* A rank's two logs. */
enum exec_stream { EXEC_STDOUT, EXEC_STDERR };
/* WORK_DIR/logs/<attempt_id>-<rank>.log (stdout) or .err (stderr); free() it. */
char *exec_log_path(const char *work_dir, int64_t attempt_id, int rank, enum exec_stream stream);

#endif
