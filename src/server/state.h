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

struct queue {
	char name[64];
	int priority;
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

	struct job **dirty_jobs;
	int ndirty_jobs, capdirty_jobs;
	int nodes_dirty;
	struct event *events;
	int nevents, capevents;
	int need_schedule;

	uint64_t submitted_total;
	uint64_t placed_total;
	uint64_t sched_passes;
	double sched_seconds;
	/* called (lock held) whenever a node's desired set changed */
	void (*wake)(struct state *st, struct node *n);
};

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
int state_put_queue(struct state *st, const char *name, int priority);

/* Validates and enqueues a job from a request body. On failure returns a
 * code and a message naming the field; on success *out is the new job. */
int state_submit(struct state *st, const json_t *body, struct job **out, char *err, size_t errlen);
int state_cancel(struct state *st, struct job *j);
/* Places pending jobs while they fit. */
void state_schedule(struct state *st);

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

/* Internal to the server's state files (state.c, jobs.c, ranks.c). */
void state_mark_job(struct state *st, struct job *j); /* dirty: flush writes it */
void state_bump(struct state *st, struct node *n);    /* its desired set changed */
void state_index_job(struct state *st, struct job *j);
void state_restore(struct state *st); /* rebuild indexes after loading */
json_t *state_gpu_list(uint64_t mask);

json_t *state_job_json(struct state *st, const struct job *j, int with_attempts);
json_t *state_node_json(struct state *st, const struct node *n);

#endif
