/* model.h - the records of the cluster's state: nodes, jobs, attempts, ranks.
 *
 * The server owns one in-memory copy of these records (guarded by its state
 * lock) and writes every change through store.h in one transaction per
 * request. These are plain records. Their states change only through the
 * server's transition functions (server/transition.c), which check every
 * move against the tables in model/machine.h; docs/states.md draws them.
 * Fields marked "in memory" are not stored but are the server's record
 * state; what the scheduler glue derives from a record (interned ids) lives
 * in the glue's own table (server/schedule.c), not here.
 *
 * In short: a job is pending, scheduled (placed; its ranks starting),
 * running (every rank runs), then succeeded, failed, cancelled or lost; a
 * preempted or requeued attempt ends "preempted" and its job is pending
 * again. A node's state is two things, explained at enum node_state.
 */
#ifndef ANVIL_MODEL_H
#define ANVIL_MODEL_H

#include <jansson.h>
#include <stdint.h>

#define MODEL_MAX_GPUS 64 /* per node; GPU sets are 64-bit masks */

enum job_state {
	JOB_PENDING,
	JOB_SCHEDULED,
	JOB_RUNNING,
	JOB_SUCCEEDED,
	JOB_FAILED,
	JOB_CANCELLED,
	JOB_LOST,
	JOB_PREEMPTED, /* attempts only: stopped for other work; the job is requeued */
	JOB_NSTATES
};

enum rank_state {
	RANK_ASSIGNED, /* placed; the agent has not reported it yet */
	RANK_RUNNING,
	RANK_EXITED, /* final: exit_code/signal valid */
	RANK_FAILED_START,
	RANK_LOST, /* final: its node stopped answering */
	RANK_NSTATES
};

/* A node's state is two things: whether its agent answers (node->state:
 * NODE_READY or NODE_LOST) and what operators or faults decided
 * (node->admin; both machines in model/machine.h). What users see is
 * node_shown_state():
 *
 *   ready --cordon--> cordoned --uncordon--> ready
 *     |                  |
 *     +--drain (operator, or a node-scope fault)--> draining
 *                                                     | its last attempt ends
 *                                                     v
 *                      ready <--uncordon (no fault reported)-- drained
 *
 * and "lost" over all of them while the agent is silent. Cordoned,
 * draining and drained nodes take no new work (server/nodes.c). Nor does a
 * ready node that its fleet profile holds (node->hold: converging, or its
 * node check not passed yet): it is shown "converging", or "held" when its
 * profile failed or drifted. A server run with --approve-nodes creates a
 * new node in NODE_AWAITING ("awaiting_approval"), which takes no work and
 * leaves it only for ready, by `anvil node approve` (nodes_approve). */
enum node_state {
	NODE_READY,
	NODE_LOST,
	NODE_CORDONED,
	NODE_DRAINING,
	NODE_DRAINED,
	NODE_AWAITING,
	NODE_NSTATES
};

/* Fault findings by scope, as the agent's GPU health reports them. */
enum node_fault_scope {
	NODE_FAULT_WARN,
	NODE_FAULT_JOB,
	NODE_FAULT_GPU,
	NODE_FAULT_NODE,
	NODE_FAULT_NSCOPES
};

struct rank {
	int rank;
	int64_t node_id;
	uint64_t gpus; /* mask of GPU indices on node_id */
	enum rank_state state;
	int pid;
	int exit_code;
	int signal;
	int oom_kills; /* in memory: its agent's count of OOM kills at its end */
	char error[128];
	/* A job with a head: why its launcher ended it ("the head exited with
	 * status 1 before the command ended"); "" otherwise. */
	char reason[200];
	int64_t stop_gen; /* in memory: the node generation that dropped it */
	/* in memory: its entry in the node's desired set, rebuilt only when
	 * its attempt's notice changes (a session, server/ranks.c), and the
	 * entry as JSON text (NULL until an answer needs it) */
	json_t *desired;
	char *desired_text;
	/* in memory, a session's rank: how long its GPUs had been idle when
	 * its agent last said (gpu_idle_ms), and when that was (monotonic);
	 * has_gpu_idle: 0 until the agent could tell */
	int has_gpu_idle;
	int64_t gpu_idle_ms, gpu_idle_at;
};

/* Why an attempt is being stopped: the causes of model/machine.h's
 * "attempt stop" table, which also says what each decides (the attempt's
 * final state, whether its job is requeued, its exit status and reason).
 * Each is set at most once, from none. */
enum attempt_stop {
	ATTEMPT_STOP_NONE,        /* it runs undisturbed */
	ATTEMPT_STOP_RANK_FAILED, /* a rank failed or was lost: the gang stops as one */
	ATTEMPT_STOP_CANCELLED,   /* in memory: its job's cancel request */
	ATTEMPT_STOP_PREEMPTED,   /* the scheduler, for job preempted_for */
	ATTEMPT_STOP_REQUEUED,    /* a drain or a quarantined GPU (preempted_for 0) */
	ATTEMPT_STOP_TIME_LIMIT,  /* in memory: it ran past its time limit */
	ATTEMPT_STOP_IDLE,        /* in memory: a session idle past its queue's idle_timeout */
	ATTEMPT_STOP_GPU_FAULT,   /* in memory: an application error on one of its GPUs */
	ATTEMPT_STOP_RANK0_ENDED, /* rank 0 of a job with a head or an MPI job ended by itself */
	ATTEMPT_STOP_NODE_LOST,   /* a rank was lost with its node and the job is requeued */
	ATTEMPT_STOP_HUNG,        /* a rank made no progress for its hang timeout: requeued */
	ATTEMPT_STOP_NSTATES
};

/* A job's cancel request (model/machine.h's "job cancel" table): stored. */
enum job_cancel { JOB_CANCEL_NONE, JOB_CANCEL_REQUESTED, JOB_CANCEL_NSTATES };

struct attempt {
	int64_t id;
	int64_t job_id;
	int number;
	enum job_state state; /* scheduled, running, or a final state */
	/* Why every rank that still runs is being stopped (none: it is not);
	 * set once, only by attempt_stop_to (server/transition.c). Stored as
	 * the `ending` column and, for the causes that are kept, the extra's
	 * "preempted" and "command_ended"; the others are in memory. */
	enum attempt_stop stop;
	int borrowed;          /* admitted on another team's idle quota */
	int64_t preempted_for; /* the job it made room for */
	/* In memory, a session (server/ranks.c): the notice its ranks' desired
	 * entries carry for their terminals ("this session ends in 60 s: ..."),
	 * numbered by the wall-clock ms it was made at (0: none yet), and which
	 * warnings were given: the time limit's, and the idle timeout's for the
	 * idle spell under way (cleared when the GPUs work again). */
	int64_t notice_id;
	char notice[256];
	int limit_warned;
	int idle_warned;
	int64_t checkpoint_ms; /* newest checkpoint any rank reported (wall ms); 0 none */
	/* A rank was lost with its node: when its lease (agent/lease.h) has
	 * surely run out, so that its ranks there have stopped by themselves
	 * (wall ms); the job's next attempt is placed no earlier. 0: none. */
	int64_t lease_end_ms;
	/* Which restart of its job this attempt's failure caused (its node
	 * lost, a rank hung: server/ranks.c), 1 for the first; 0: none. Its
	 * job's restarts are the attempts with one. */
	int restart;
	/* The checkpoints its rank 0's agent uploaded (server/ranks.c), oldest
	 * first, the last RANKS_CHECKPOINTS_KEPT: [{"name", "key", "bytes",
	 * "sent_bytes", "files", "time_ms"}]; NULL: none. */
	json_t *checkpoints;
	/* Why it ended, or why it is being stopped to be requeued ("preempted
	 * for job 7 (higher priority)", "GPU 1 of node node-2 quarantined: ...");
	 * "" while it runs undisturbed. Stored: the job's own reason moves on
	 * (the next wait, the next attempt), this stays with the attempt. */
	char end_reason[256];
	char master_addr[64];
	int master_port;
	int head_port; /* a job with a head: the head's port on master_addr; else 0 */
	/* An MPI job: the secret its ranks hold (ANVIL_EXEC_TOKEN) that lets
	 * them exec into the ranks of this attempt, and nothing else
	 * (docs/cli.md, "MPI"); 64 hex digits, "" for other jobs. Never shown. */
	char exec_token[65];
	int64_t start_ms;
	int64_t end_ms;
	int nranks;
	struct rank *ranks;
};

/* A job as submitted never changes: once it is written, only state,
 * start_ms, end_ms, has_exit/exit_code, cancel_requested and reason (and
 * its attempts) do, and that is all store_put_job_state() writes again
 * (FIELD_CHANGES). Where each field is stored, shown and sent is its entry
 * in model/fields.c. */
struct job {
	int64_t id;
	char *name;
	char *queue;
	int priority;
	int gpus; /* per node */
	int nodes;
	json_t *command; /* array of strings */
	json_t *env;     /* object of strings */
	/* The names in env the client exported from its own environment (array
	 * of strings), shown by name only; NULL: none. */
	json_t *exported;
	char *cwd; /* NULL: the agent's default */
	int64_t grace_ms;
	char *team;
	int64_t time_limit_ms; /* 0: the queue's default */
	json_t *constraints;   /* {gpu_type, min_gpu_memory_bytes, pool, selectors} */
	int checkpointing;
	/* After a lost node (server/ranks.c): requeue it (1), never (0), or
	 * as its checkpointing says (-1); at most max_restarts times (-1: the
	 * default, RANKS_MAX_RESTARTS_DEFAULT). */
	int requeue;
	int max_restarts;
	int64_t hang_timeout_ms; /* a rank without progress this long is hung; 0: never */
	int64_t cpu_millis;      /* per rank, thousandths of a CPU; 0: no limit */
	int64_t memory_bytes;    /* per rank; 0: no limit */
	/* Dependencies, as `sbatch --dependency`: [{"job": ID, "when": "ok" |
	 * "any" | "failed"}], or NULL. The job waits until each holds. */
	json_t *after;
	/* An array's members (`--array`): array_id is its first member's id
	 * (0: not in an array), array_index the member's index, and at most
	 * array_max_running members run at once (0: no limit). */
	int64_t array_id;
	int64_t array_index;
	int array_max_running;
	int session; /* an interactive session (anvil shell): run under a holder */
	int mpi;     /* an MPI job (anvil run --mpi): rank 0 runs mpirun */
	/* A workflow task's job (server/flows.c): what its ranks' wrapper
	 * (`anvil _task`, agent/task.c) needs, passed to them as ANVIL_TASK;
	 * NULL for other jobs. Set by the workflow engine, never by a client. */
	json_t *task;
	int64_t est_start_ms;    /* from the last scheduling cycle; 0 unknown */
	int64_t preempt_held_ms; /* in memory: when attempts were stopped for it */
	int explained;           /* in memory: a full cycle gave it a reason */
	enum job_state state;
	int64_t submit_ms;
	int64_t start_ms;
	int64_t end_ms;
	int has_exit;
	int exit_code;
	enum job_cancel cancel_requested; /* set only by job_cancel_to (server/transition.c) */
	char reason[256];
	int nattempts;
	struct attempt **attempts; /* the last one is current */
	int dirty;                 /* changed since the last flush */
	/* Head and workers (docs/cli.md): command lines for /bin/sh -c, run by
	 * each rank's launcher around the command; NULL: none (worker is NULL
	 * without a head). head_timeout_ms: 0 without a head. */
	char *head;
	char *worker;
	int64_t head_timeout_ms;
	/* The fields that have no member here (model/fields.h, FIELD_MORE),
	 * by name; NULL: none set. Stored, shown and sent as their entries
	 * say. */
	json_t *more;
};

struct gpu_slot {
	int index;
	char uuid[96];
	char model[96];
	uint64_t memory_bytes;
};

struct node {
	int64_t id;
	char *name;
	char *secret;
	char *hostname;
	char *address;   /* MASTER_ADDR for ranks on this node */
	char *agent_url; /* the agent's HTTP endpoint */
	char *backend;
	json_t *labels; /* operator-set {"key": "value"}: block, rack, switch, ... */
	char *pool;
	int cpus;
	uint64_t memory_bytes;
	enum node_state state; /* NODE_READY or NODE_LOST: does its agent answer */
	enum node_state admin; /* NODE_READY, NODE_CORDONED, NODE_DRAINING, NODE_DRAINED */
	char admin_reason[256];
	int admin_by_fault; /* drained by a node-scope fault, not by an operator */
	json_t *facts;      /* the agent's last facts, as it sent them */
	json_t *health;     /* the agent's last health report: {gpus: [...], node: ...} */
	int ngpus;
	struct gpu_slot *gpus;
	uint64_t gpus_used;      /* mask of allocated GPUs */
	uint64_t gpus_unhealthy; /* quarantined or lost: never assigned */
	uint64_t nvlink[8];      /* GPU groups sharing NVLink / a PCIe switch / NUMA */
	int nnvlink;
	uint64_t near[16]; /* finer: GPUs behind one PCIe switch */
	int nnear;
	int64_t finding_seq;                /* newest fault finding applied */
	int64_t faults[NODE_FAULT_NSCOPES]; /* findings applied, by scope */
	int64_t generation;                 /* bumped when the desired set changes */
	/* Its identity (server/nodes.c, "registration"): the address its agent
	 * registered from (the TCP peer; "" for a node registered before the
	 * server recorded it, filled by its next sync), which its agent_url
	 * points at and the only address its syncs are answered at; and
	 * whether an operator reset it (`anvil node reset`): its secret is
	 * revoked ("") and the next registration under its name with the join
	 * token is accepted, once. */
	char registered_from[48];
	int reset;
	/* The fleet (server/fleet.c, docs/fleet.md): the profile its agent is
	 * to converge to, as the sync answer carries it ({"hash", "name",
	 * "spec"}; NULL: none), what the agent last said of it (its
	 * profile_status; NULL: nothing yet), the profile hash its node check
	 * last passed for ("": none), and the revision that took it out of
	 * service as not in its spec (0: none did). */
	json_t *profile;
	json_t *profile_status;
	char profile_checked[65];
	int64_t fleet_removed;
	/* In memory: why its profile keeps it from new work ("": it does not;
	 * server/nodes.c), and whether that is a failure (stuck) rather than a
	 * wait; the last failed node check of its current profile ("": none),
	 * a check in flight, and when the next one may start (wall ms). */
	char hold[256];
	int hold_stuck;
	char check_failed[200];
	int checking;
	int64_t check_after_ms;
	/* In memory: the profile hash its agent is to be asked to converge to
	 * again (POST /v1/profile/converge: it never fixes a failed or drifted
	 * node by itself); "": nothing asked. */
	char converge_wanted[65];
	int converge_pending; /* asked, and no status since: it waits for one */
	/* In memory: a running rollout has yet to take it out (server/fleet.c,
	 * fleet_mark_queued): new work goes to other nodes while they have
	 * room, so that it is not stopped again by this node's turn
	 * (server/schedule.c). */
	int rollout_queued;
	int64_t changes;      /* in memory: bumped when its facts, pool or labels change */
	int64_t last_seen_ms; /* monotonic */
	int64_t facts_ms;     /* in memory, monotonic: when its agent last sent its facts
	                       * (at its start, and when they change); 0: not since the
	                       * server started */
	int dirty;            /* the row changed since the last flush */
	int gen_dirty;        /* its generation did: alone, flush writes only that */
	int wake_held;        /* its desired set changed and is not written yet: its agent
	                       * is told once it is (state_bump, server/state.c) */
	void *waiter;         /* the suspended long poll, if any (server/agentproto.c) */
	int64_t waiter_deadline_ms;
	int64_t waiter_gen;
};

const char *job_state_name(enum job_state s);
int job_state_parse(const char *s, enum job_state *out);
int job_state_final(enum job_state s);
const char *rank_state_name(enum rank_state s);
int rank_state_parse(const char *s, enum rank_state *out);
int rank_state_final(enum rank_state s);
const char *node_state_name(enum node_state s);
/* "lost" while the agent is silent, else the admin state's name, except a
 * ready node that its profile holds: "converging" or "held". */
const char *node_shown_state(const struct node *n);
/* Whether the scheduler may place work on n: its agent answers, no
 * operator or fault took it out, and its profile does not hold it. */
int node_takes_work(const struct node *n);
const char *node_fault_scope_name(enum node_fault_scope s);
int node_fault_scope_parse(const char *s, enum node_fault_scope *out);
int node_state_parse(const char *s, enum node_state *out);

/* What the store keeps of a's stop cause. attempt_ending: whether a is
 * being stopped, or was before it ended (a->stop is not none), the
 * `ending` column; attempt_kept_preempted: preempted or requeued, the
 * extra's "preempted"; attempt_kept_rank0_ended: the extra's
 * "command_ended". */
int attempt_ending(const struct attempt *a);
int attempt_kept_preempted(const struct attempt *a);
int attempt_kept_rank0_ended(const struct attempt *a);
/* The stop cause of an attempt loaded from the store, from what is stored
 * of it: `ending`, and the extra's "preempted" (with preempted_for: the
 * scheduler's job, or 0 for a requeue) and "command_ended". A cause kept
 * in memory only (cancelled, time limit, idle timeout, GPU fault) loads as
 * rank_failed: its outcome is then its ranks' (model/machine.h). */
enum attempt_stop attempt_stop_loaded(int ending, int preempted, int64_t preempted_for,
                                      int command_ended);

void job_free(struct job *j);
void attempt_free(struct attempt *a);
void node_free(struct node *n);

#endif
