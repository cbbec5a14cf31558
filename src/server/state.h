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
 * to it bumps node->generation and wakes the node's long poll.
 */
#ifndef ANVIL_STATE_H
#define ANVIL_STATE_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "store/model.h"
#include "store/store.h"

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

/* Interned strings for the scheduler: id = index + 1; 0 means none. */
struct names {
	char **v;
	int n, cap;
};

struct event {
	char kind[32];
	int64_t job_id;
	int64_t node_id;
	char *message;
};

struct state {
	pthread_mutex_t mu;
	struct store *store;
	int64_t node_timeout_ms;

	struct node **nodes; /* nodes[id - 1] */
	int nnodes;
	struct job **jobs; /* jobs[id - 1] */
	int64_t njobs;
	size_t capjobs;
	struct attempt **attempts; /* attempts[id - 1] */
	int64_t nattempts;
	size_t capattempts;
	struct job **pending;
	int npending, cappending;

	struct attempt **active;
	int nactive, capactive;
	struct queue *queues;
	int nqueues;
	struct team *teams;
	int nteams;
	struct names names;
	int64_t usage_half_life_ms;
	int64_t aging_ms;
	int64_t preempt_min_runtime_ms;  /* sched_config.min_runtime_ms */
	int preempt_max_ratio;           /* sched_config.preempt_max_ratio */
	int preempt_loss_pct;            /* sched_config.preempt_loss_pct */
	int64_t preempt_restart_cost_ms; /* sched_config.restart_cost_ms */
	void *sched;                     /* struct sched *, made by the first cycle (schedule.c) */
	void *scratch;                   /* schedule.c's snapshot buffers and interned-id caches */

	struct job **dirty_jobs;
	int ndirty_jobs, capdirty_jobs;
	int nodes_dirty;
	struct event *events;
	int nevents, capevents;
	int need_schedule;

	uint64_t submitted_total;
	uint64_t placed_total;
	uint64_t sched_passes;
	uint64_t sched_skipped; /* cycles skipped: nothing could be placed */
	int64_t sched_last_ms;  /* monotonic time of the last cycle */
	int64_t sched_full_ms;  /* ... and of the last one that explained every wait */
	double sched_seconds;
	int64_t flush_failed_logged_ms; /* when a failed flush was last logged; 0: none failing */
	int64_t flush_failures;         /* failed flushes since then */
	/* called (lock held) whenever a node's desired set changed */
	void (*wake)(struct state *st, struct node *n);
};

/* Opens (creating) the database and loads it; on an error nothing is left
 * open or allocated and the file is not written. */
int state_open(struct state *st, const char *db_path, int full_sync, int64_t node_timeout_ms);
void state_close(struct state *st);
void state_lock(struct state *st);
void state_unlock(struct state *st);

/* Writes dirty records and queued events in one transaction. */
int state_flush(struct state *st);

struct job *state_job(struct state *st, int64_t id);
struct node *state_node(struct state *st, int64_t id);
struct node *state_node_by_name(struct state *st, const char *name);
struct queue *state_queue(struct state *st, const char *name);
/* Creates or updates a queue from an API body (validated by the caller):
 * fields not given keep their values. */
int state_put_queue(struct state *st, const json_t *body, char *err, size_t errlen);
struct team *state_team(struct state *st, const char *name, int create);
int state_put_team(struct state *st, const char *name, int weight);
uint32_t state_intern(struct state *st, const char *s);
json_t *state_queue_json(struct state *st, const struct queue *q);
json_t *state_team_json(struct state *st, const struct team *t);
/* GPUs a team holds in a queue now (running attempts). */
int state_team_gpus(struct state *st, const char *queue, const char *team);
/* The team's usage decayed to now, running attempts included. */
double state_team_usage(struct state *st, struct team *t, int64_t now_wall_ms);

/* Validates and enqueues a job from a request body. On failure returns a
 * code and a message naming the field; on success *out is the new job. */
int state_submit(struct state *st, const json_t *body, struct job **out, char *err, size_t errlen);
int state_cancel(struct state *st, struct job *j);
/* Places pending jobs while they fit. */
void state_schedule(struct state *st);
/* From the housekeeping loop: a full cycle at least once a second while jobs wait. */
void state_schedule_tick(struct state *st, int64_t now_ms);
/* For `anvil why`: a pending job without an estimated start (further back
 * than the estimate's usual window) gets a full cycle whose dry run reaches
 * it (sched_config.est_job_id). Its decisions are applied as any cycle's. */
void state_schedule_estimate(struct state *st, struct job *j);

/* Agent side. */
struct node *state_register(struct state *st, const json_t *facts, const char *name);
void state_node_facts(struct state *st, struct node *n, const json_t *facts);
/* Applies one sync's rank reports; agent_gen is the generation the agent
 * last applied. */
void state_reports(struct state *st, struct node *n, const json_t *ranks, int64_t agent_gen);
json_t *state_desired(struct state *st, struct node *n);
void state_check_nodes(struct state *st, int64_t now);

void state_event(struct state *st, const char *kind, int64_t job_id, int64_t node_id,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Internal to the server's state files (state.c, jobs.c, ranks.c, schedule.c). */
void state_account(struct state *st, const struct job *j, const struct attempt *a);
void state_sched_free(struct state *st);
void state_pending_remove(struct state *st, struct job *j);
/* Stops every rank of a that still runs (the gang ends; see ranks.c). */
void state_attempt_stop(struct state *st, struct attempt *a);
void state_pending_add(struct state *st, struct job *j);
void state_active_add(struct state *st, struct attempt *a);
/* Interns the job's queue, team and constraints for the scheduler, into the
 * glue's own table (schedule.c), not into the record. */
void state_job_cache(struct state *st, struct job *j);
/* The glue keeps its interned copy of what it reads from a record until told
 * to forget it; the next cycle (or state_fits_ever) interns it again.
 * Call state_sched_forget_node when a node's pool, labels or GPUs may have
 * changed (nodes.c and api_nodes.c call it on every change to a node's facts
 * or settings), and state_sched_forget_job when a job's queue, team or
 * constraints change (never, after submission, today) or when a job that was
 * cached is freed without being indexed (a refused submission: its id goes
 * to the next one). */
void state_sched_forget_node(struct state *st, const struct node *n);
void state_sched_forget_job(struct state *st, const struct job *j);
/* 0 if j could ever run on the registered nodes, else ERR_UNFIT + why. */
int state_fits_ever(struct state *st, struct job *j, char *why, size_t whylen);
void state_mark_job(struct state *st, struct job *j); /* dirty: flush writes it */
void state_bump(struct state *st, struct node *n);    /* its desired set changed */
void state_index_job(struct state *st, struct job *j);
void state_restore(struct state *st); /* rebuild indexes after loading */
json_t *state_gpu_list(uint64_t mask);

json_t *state_job_json(struct state *st, const struct job *j, int with_attempts);
/* A node as the API shows it; detail adds the GPU inventory's topology,
 * RDMA devices and versions (server/nodes.c). */
json_t *state_node_json(struct state *st, const struct node *n, int detail);

/* Nodes: admin states, health, drains (server/nodes.c). */
int state_node_set_admin(struct state *st, struct node *n, enum node_state admin,
                         const char *reason, int by_fault);
/* Draining nodes whose last attempt has ended become drained. */
void state_nodes_settle(struct state *st);
/* Applies a sync's health report: findings, GPU states, node fault. */
void state_node_health(struct state *st, struct node *n, const json_t *health);
void state_node_restore(struct state *st, struct node *n);
/* The node fault its agent reports now, or NULL. */
const char *state_node_fault(const struct node *n);
/* Stops a so that its job goes back to its queue (drain, bad GPU). */
void state_attempt_requeue(struct state *st, struct attempt *a, const char *why);

#endif
