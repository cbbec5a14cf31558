/* state.h - the server's in-memory cluster state and its transitions.
 *
 * One struct state per server, guarded by state.mu: every function here is
 * called with the lock held (state_lock/state_unlock), from the HTTP handler
 * threads and the housekeeping thread. Every change marks its records dirty;
 * state_flush() writes them in one SQLite transaction, and a handler calls it
 * before it answers, so an acknowledged change is durable.
 *
 * Jobs live in `jobs` indexed by id - 1 (ids are dense); attempts likewise
 * in `attempts`. `pending` holds pending jobs in scheduling order (queue
 * priority, job priority, then FIFO); `active` holds attempts that are not
 * final. The desired set of a node - what its agent should run - is every
 * non-final rank on it of an active attempt that is not ending; any change
 * to it bumps node->generation, and the flush that writes the change wakes
 * the node's long poll: an agent never acts on a change that is not
 * stored (a flush that fails on a full disk holds it back, and a restart
 * before it is written loses it on both sides alike).
 */
#ifndef ANVIL_STATE_H
#define ANVIL_STATE_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "store/store.h"

struct blob_store;

#define STATE_MAX_QUOTAS 64 /* teams with a quota in one queue */

struct quota {
	char team[64];
	int nominal_gpus;
};

/* A queue's scheduling settings (sched.h explains each). */
struct queue {
	char name[64];
	int priority;
	int weight;
	int borrowing;
	int64_t default_time_limit_ms;
	/* Sessions (jobs with session) whose GPUs have been idle this long are
	 * stopped, warned first (server/ranks.c); 0: never. */
	int64_t idle_timeout_ms;
	/* Its jobs' ranks run as root, not as the agents' rank account
	 * (agent/fence.h): an admin's choice for a queue of trusted work. */
	int run_as_root;
	int nquotas; /* 0: unlimited */
	struct quota quotas[STATE_MAX_QUOTAS];
	uint32_t sched_id;
};

struct team {
	char name[64];
	int weight;
	int configured; /* set through the API (persisted), not just seen on a job */
	double usage;   /* decayed GPU-hours as of usage_ms */
	int64_t usage_ms;
	uint32_t sched_id;
};

/* Settings the server sets after state_open (defaults: state_open). */
struct state_config {
	int64_t node_timeout_ms;
	/* Whether each sync answer gives the node's ranks a lease of the node
	 * timeout (agent/lease.h): they stop by themselves when their agent
	 * has not reached us for that long. On by default (state_open). */
	int rank_lease;
	int64_t usage_half_life_ms;
	int64_t aging_ms;
	int64_t preempt_min_runtime_ms;  /* sched_config.min_runtime_ms */
	int preempt_max_ratio;           /* sched_config.preempt_max_ratio */
	int preempt_loss_pct;            /* sched_config.preempt_loss_pct */
	int64_t preempt_restart_cost_ms; /* sched_config.restart_cost_ms */
	/* How long before a session's time limit or idle timeout its terminal
	 * is warned (at most half of either; server/ranks.c) */
	int64_t session_warning_ms;
	/* How long a create's Idempotency-Key is remembered (server/idem.h) */
	int64_t idem_keep_ms;
};

/* Counters for /metrics. */
struct state_stats {
	uint64_t submitted_total;
	uint64_t placed_total;
	uint64_t sched_passes;
	uint64_t sched_skipped;  /* cycles skipped: nothing could be placed */
	uint64_t refused_moves;  /* state changes the machines refused: a bug if not 0 */
	uint64_t flush_failures; /* flushes that could not write (a full disk): retried */
	int unwritten;           /* the last flush failed: changes wait in memory */
	double sched_seconds;
};

/* What the server's HTTP side reads (lock held); only the state files
 * write it. The rest - indexes, dirty lists, queued events, the scheduler
 * glue's caches - is private to them (server/core.h). */
struct state {
	pthread_mutex_t mu;
	struct node **nodes; /* nodes[id - 1] */
	int nnodes;
	struct job **jobs; /* jobs[id - 1] */
	int64_t njobs;
	struct queue *queues;
	int nqueues;
	struct team *teams;
	int nteams;
	struct state_config config;
	struct state_stats stats;
	/* The object store (objstore/blob.h), set by the server after state_open:
	 * where workflow outputs, checkpoints and code bundles are kept. NULL
	 * in tests without one: a cached result is then trusted unchecked. */
	struct blob_store *objects;
	/* called (lock held) when a change to a node's desired set is written */
	void (*wake)(struct state *st, struct node *n);
	struct state_core *core;
};

/* Opens (creating) the database and loads it; on an error nothing is left
 * open or allocated and the file is not written. The caller may then
 * change st->config and set st->wake. */
int state_open(struct state *st, const char *db_path, int full_sync, int64_t node_timeout_ms);
void state_close(struct state *st);
void state_lock(struct state *st);
void state_unlock(struct state *st);

/* Writes dirty records and queued events in one transaction. A handler
 * calls it before it answers, so an acknowledged change is durable. */
int state_flush(struct state *st);
/* The newest `limit` events, of one job when job_id > 0 (flush first). */
json_t *state_events(struct state *st, int limit, int64_t job_id);

struct job *state_job(struct state *st, int64_t id);
/* The attempt with that id (any job's), or NULL. */
struct attempt *state_attempt(struct state *st, int64_t id);
struct node *state_node(struct state *st, int64_t id);
struct node *state_node_by_name(struct state *st, const char *name);
struct queue *state_queue(struct state *st, const char *name);
/* Creates or updates a queue from an API body (validated by the caller):
 * fields not given keep their values. */
int state_put_queue(struct state *st, const json_t *body, char *err, size_t errlen);
struct team *state_team(struct state *st, const char *name, int create);
int state_put_team(struct state *st, const char *name, int weight);
json_t *state_queue_json(struct state *st, const struct queue *q);
json_t *state_team_json(struct state *st, const struct team *t);
/* GPUs a team holds in a queue now (running attempts). */
int state_team_gpus(struct state *st, const char *queue, const char *team);
/* The team's usage decayed to now, running attempts included. */
double state_team_usage(struct state *st, struct team *t, int64_t now_wall_ms);
void state_event(struct state *st, const char *kind, int64_t job_id, int64_t node_id,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- Idempotency-Keys (server/idem.h) ---- */

/* The record of scope and key, unexpired: 0 with *out (free out->body);
 * ERR_NOTFOUND; -EIO. */
int state_idem_find(struct state *st, const char *scope, const char *key, struct store_idem *out);
/* Remembers r (copied; its created_ms set to now when 0): the next flush
 * writes it with whatever else changed, in one transaction. */
void state_idem_add(struct state *st, const struct store_idem *r);
/* From the housekeeping: the expired records go (now and then). */
void state_idem_prune(struct state *st);

/* ---- jobs ---- */

/* Validates and enqueues a job from a request body, then runs a cycle. On
 * failure returns a code and a message naming the field; on success *out
 * is the new job. */
int state_submit(struct state *st, const json_t *body, struct job **out, char *err, size_t errlen);
/* The same, for a submission that carries an Idempotency-Key (key: its
 * scope, key and digest; NULL: none): the key is written in the
 * transaction that writes the new jobs, naming the first ("job:ID"), so
 * that a repeat after a crash finds them (server/idem.h). */
int state_submit_keyed(struct state *st, const json_t *body, const struct store_idem *key,
                       struct job **out, char *err, size_t errlen);
int state_cancel(struct state *st, struct job *j);
/* What cancelling an array did to its members. */
struct state_array_cancel {
	int64_t members;   /* all of them */
	int64_t cancelled; /* pending: cancelled now */
	int64_t stopping;  /* placed or running: their ranks are being stopped */
	int64_t ended;     /* had ended already: unchanged */
};
/* Cancels every member of the array whose first member (and id) is first,
 * as state_cancel does each; ERR_INVALID when first is not that. */
int state_cancel_array(struct state *st, struct job *first, struct state_array_cancel *out);
json_t *state_job_json(struct state *st, const struct job *j, int with_attempts);

/* What GET /v1/jobs lists (api.c reads it from the query). */
struct state_jobs_query {
	const char *state; /* NULL, "all", "active", "done" or a job state's name */
	int64_t limit;     /* at most this many entries */
	int64_t array;     /* > 0: only the members of the array with this id */
	int64_t index;     /* >= 0: only the array members with this index */
	int group;         /* each array as one entry (docs/api.md, GET /v1/jobs) */
};
/* Whether a job in state s passes the filter f (state_jobs_query.state). */
int state_jobs_filter(const char *f, enum job_state s);
/* {"jobs": [...], "more": bool}: the entries q asks for, newest first, and
 * whether more matched past the limit. Grouped, an array is one entry at
 * its members' place, counting as one, with its members counted by state
 * (those q's state filter passes) and the reason of the next in line. */
json_t *state_jobs_json(struct state *st, const struct state_jobs_query *q);

/* ---- scheduling (server/schedule.c) ---- */

/* Places pending jobs while they fit. */
void state_schedule(struct state *st);
/* When something changed that may let work start or a drain end (a rank
 * ended, a node came back or changed): drained nodes settle and a cycle
 * runs. Cheap when nothing changed. */
void state_settle(struct state *st);
/* From the housekeeping loop: a full cycle at least once a second while jobs wait. */
void state_schedule_tick(struct state *st, int64_t now_ms);
/* For `anvil why`: a pending job without an estimated start (further back
 * than the estimate's usual window) gets a full cycle whose dry run reaches
 * it (sched_config.est_job_id). Its decisions are applied as any cycle's. */
void state_schedule_estimate(struct state *st, struct job *j);

/* ---- agents ---- */

/* What a registration presents, as the HTTP side judged it
 * (server/agentproto.c), and the server's settings that decide it. */
struct node_admission {
	const char *peer;     /* the address it comes from */
	int join_ok;          /* it presented the valid join token */
	const char *join_why; /* else why that was refused: the 401's message */
	int own_secret;       /* it presented the named node's current secret */
	int approve;          /* --approve-nodes: a new node awaits approval */
	int bind_address;     /* --bind-node-address: a secret is good from its address only */
};
/* Registers the node name with facts (server/nodes.c, "registration"): a
 * new name with the join token (awaiting approval when adm->approve); a
 * registered one with its own secret (bound to its address when
 * adm->bind_address), or with the join token once after a reset. 0 with
 * the node in *out; ERR_AUTH (credentials) or ERR_CONFLICT (the join token
 * for a registered name) with why in err, nothing changed. */
int state_register(struct state *st, const json_t *facts, const char *name,
                   const struct node_admission *adm, struct node **out, char *err, size_t errlen);
/* Whether a sync of n with its secret from peer is answered: 0 (and the
 * address recorded, for a node registered before addresses were), or
 * ERR_AUTH with why in err: it registered from another address. */
int state_node_sync_from(struct state *st, struct node *n, const char *peer, int bind_address,
                         char *err, size_t errlen);
/* `anvil node reset`: n's secret is revoked now, its ranks are lost with
 * it (it is lost until its agent registers and syncs again), and the next
 * registration of its name with the join token is accepted, once. */
void state_node_reset(struct state *st, struct node *n);
/* `anvil node approve`: a node awaiting approval becomes ready (and may
 * take work); ERR_CONFLICT with why in err when it is not awaiting. */
int state_node_approve(struct state *st, struct node *n, char *err, size_t errlen);
void state_node_facts(struct state *st, struct node *n, const json_t *facts);
/* Applies one sync's rank reports (agent_gen: the generation the agent
 * last applied), then settles. */
void state_reports(struct state *st, struct node *n, const json_t *ranks, int64_t agent_gen);
/* The node's desired set, as the sync answer (proto/wire.h); and the same
 * as JSON text, each rank's entry dumped once in its life, not once per
 * answer (to free). */
json_t *state_desired(struct state *st, struct node *n);
char *state_desired_text(struct state *st, struct node *n);
/* Housekeeping: time limits, sessions' warnings and idle timeouts, silent
 * nodes, then settles. */
void state_check_nodes(struct state *st, int64_t now);

/* ---- nodes (server/nodes.c) ---- */

/* A node as the API shows it; detail adds the GPU inventory's topology,
 * RDMA devices and versions. */
json_t *state_node_json(struct state *st, const struct node *n, int detail);
/* Cordon, drain (its attempts are requeued), uncordon. */
int state_node_set_admin(struct state *st, struct node *n, enum node_state admin,
                         const char *reason, int by_fault);
/* After an operator changed a node's pool or labels: it is written and the
 * scheduler re-reads it. */
void state_node_changed(struct state *st, struct node *n);
/* Changes n's labels ({key: value}, null removes one; validated by the
 * caller) and, when set_pool, its pool (NULL or "": none). */
void state_node_relabel(struct state *st, struct node *n, const json_t *labels, const char *pool,
                        int set_pool);
/* A sync's profile_status (proto/wire.h, validated): kept, and the node's
 * hold recomputed (server/nodes.c). */
void state_node_profile_status(struct state *st, struct node *n, const json_t *status);
/* What a node check of n's profile expects ({"gpus", "gpu_model",
 * "driver_version"}, for POST /v1/check), or NULL when n has no profile. */
json_t *state_node_expectations(const struct node *n);
/* The next node check its profile waits for (converged, not yet checked
 * for that hash, its agent answering, no check running or waiting to
 * retry): 0 with the node, the hash and the check's expectations (the
 * caller's), and the check is in flight until state_node_checked; else
 * ERR_NOTFOUND. now: wall ms. */
int state_node_next_check(struct state *st, int64_t now, int64_t *node_id, char *hash,
                          size_t hashlen, json_t **expect);
/* A node check's verdict for profile hash (ok, the agent's summary): a
 * pass lets the node take work once converged; a failure holds it and is
 * retried after NODES_CHECK_RETRY_MS. ran: it was one state_node_next_check
 * gave (0: an operator's `anvil node check`). Ignored when the node's
 * profile changed since. */
void state_node_checked(struct state *st, int64_t node_id, const char *hash, int ok,
                        const char *summary, int ran);
/* The next node whose agent is to be asked to converge to its profile again
 * (POST /v1/profile/converge {"hash"}): 0 with the node and the hash, the
 * request taken; ERR_NOTFOUND when none waits. Its agent answering, the
 * result comes as a profile_status; state_node_converge_asked records a
 * refusal (rc, why). */
int state_node_next_converge(struct state *st, int64_t *node_id, char *hash, size_t hashlen);
void state_node_converge_asked(struct state *st, int64_t node_id, const char *hash, int rc,
                               const char *why);
/* Applies a sync's health report: findings, GPU states, node fault. */
void state_node_health(struct state *st, struct node *n, const json_t *health);
/* The node fault its agent reports now, or NULL. */
const char *state_node_fault(const struct node *n);

#endif
