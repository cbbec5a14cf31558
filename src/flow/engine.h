/* engine.h - a workflow execution's progress, decided without I/O.
 *
 * An execution is its compiled workflow (spec.h) and one run per task
 * instance: a task without map has one run, a sweep one per parameter set
 * (flow_expand), in task order, children in expansion order. The server's
 * workflow engine (server/flows.c) keeps these records, persists them,
 * turns the starts this file asks for into jobs and tells it how each job
 * ended; everything it decides - which runs may start, when a retry is due,
 * what a failure skips, when the execution is over, what a run's templates
 * render to, what it fetches - is decided here.
 *
 * A run moves:
 *
 *   waiting --start--> running --ok--> succeeded
 *      ^  |               |
 *      |  |               +--failed, retries left--> waiting (due at backoff)
 *      |  |               +--failed, none left-----> failed
 *      |  |               +--cancelled-------------> cancelled
 *      |  +--a cache hit---------------------------> cached
 *      |  +--a task it needs failed or was skipped-> skipped
 *      +--recover (failed, cancelled, skipped)
 *
 * An execution is running until every run is final; then it succeeded
 * (every run succeeded or cached), failed, or cancelled (when asked).
 */
#ifndef ANVIL_FLOW_ENGINE_H
#define ANVIL_FLOW_ENGINE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum flow_state {
	FLOW_WAITING,
	FLOW_RUNNING,
	FLOW_SUCCEEDED,
	FLOW_CACHED,
	FLOW_FAILED,
	FLOW_CANCELLED,
	FLOW_SKIPPED,
	FLOW_NSTATES
};

const char *flow_state_name(enum flow_state s);
int flow_state_parse(const char *s, enum flow_state *out);
int flow_state_final(enum flow_state s);
int flow_state_ok(enum flow_state s); /* succeeded or cached */

struct flow_run {
	int64_t id;     /* the server's; 0 until it gives one */
	int task;       /* index in the spec's tasks */
	int index;      /* the child's index in its sweep; 0 without map */
	json_t *params; /* this child's parameters ({} without map) */
	enum flow_state state;
	int tries;      /* jobs started for it */
	int64_t job_id; /* the newest job; 0 none */
	json_t *jobs;   /* every job's id, oldest first */
	int64_t due_ms; /* waiting: not to start before (a retry's backoff) */
	int64_t start_ms, end_ms;
	json_t *outputs; /* {K: {"kind", "key", "size", "sha256"} | {"kind": "value", "value"}} */
	char cache_key[65];   /* "" when the task is not cached */
	json_t *cache_parts;  /* flow_cache_parts of its last start, or NULL */
	int64_t cached_from;  /* cached: the run whose outputs it reused */
	int64_t cached_exec;  /* ... and that run's execution */
	int64_t dup_of;       /* waiting for an identical run (same key) to end */
	json_t *reads;        /* the bundle's files its running attempt read, as its wrapper
	                       * reported them (codeset.h KEYs), or NULL: not kept */
	char why[256];        /* a failure's or a skip's cause */
	char cache_note[400]; /* "hit" or why the cache missed; "" when not cached */
	int dirty;            /* changed since the server stored it */
};

struct flow_exec {
	int64_t id;
	char name[64];
	json_t *spec;          /* the compiled workflow, inputs resolved */
	char bundle[80];       /* the code bundle's key, "" none */
	json_t *code_index;    /* its index (codeset.h), once the cache needed it; not kept */
	int code_index_failed; /* it could not be made: not tried again */
	int no_cache;          /* read no cached results (still record them) */
	int cancel;            /* cancel asked */
	enum flow_state state; /* running, succeeded, failed or cancelled */
	int64_t submit_ms, end_ms;
	char reason[256];
	int dirty; /* its own fields changed since the server stored it (not its runs') */
	int nruns;
	struct flow_run **runs;
	int *first; /* first[t]: the index of task t's first run */
	int *count; /* count[t]: its runs */
	/* needs[needs_at[t] .. needs_at[t + 1]): the tasks t needs */
	int *needs;
	int *needs_at;
	int ntasks;
};

/* A new execution of a checked spec (flow_check): one waiting run per
 * task instance. NULL when the spec has no tasks. */
struct flow_exec *flow_exec_new(const json_t *spec);
void flow_exec_free(struct flow_exec *x);
/* Rebuilds the task index after runs were loaded (runs in task, index
 * order); -1 when they do not match the spec. */
int flow_exec_index(struct flow_exec *x);

const json_t *flow_task(const struct flow_exec *x, int task);
const char *flow_task_name(const struct flow_exec *x, int task);
int flow_task_find(const struct flow_exec *x, const char *name);
/* "train" or, in a sweep, "train[3]". */
void flow_run_label(const struct flow_exec *x, const struct flow_run *r, char *out, size_t len);
/* The task's aggregate state: the state its dependents see (succeeded when
 * every run is succeeded or cached; failed when one failed, cancelled or
 * was skipped and the rest are final; else running or waiting). */
enum flow_state flow_task_state(const struct flow_exec *x, int task);

/* The runs that may start now, at most max into out (run indexes):
 * waiting, due, not waiting on a duplicate, every needed task succeeded,
 * within the sweep's concurrency. Also marks skipped every waiting run
 * whose needed task failed (dirty). Returns how many. */
int flow_next(struct flow_exec *x, int64_t now_ms, int *out, int max);

/* The run's template context: {"inputs", "params", "tasks": {T:
 * {"outputs": {K: value}}}} with the value outputs of the tasks it needs
 * (a sweep's as a list, child order). Object outputs are left out: the
 * wrapper on the node fills them in (flow_fetch). */
json_t *flow_context(const struct flow_exec *x, const struct flow_run *r);
/* The objects the run's templates refer to: [{"ref", "kind", "keys",
 * "list"}], one per {{ tasks.T.outputs.K }} of a file or dir output. */
json_t *flow_fetch(const struct flow_exec *x, const struct flow_run *r);
/* The run's task (without its map: the run is one point of it, its
 * parameters are in "params") with command, env and inputs rendered as far as the
 * server can (flow_render_known); NULL with err when a template has no
 * value. The caller decrefs. */
json_t *flow_rendered(const struct flow_exec *x, const struct flow_run *r, char *err,
                      size_t errlen);

/* The body of the run's job (POST /v1/jobs's): name WORKFLOW/LABEL, the
 * rendered command and environment (with ANVIL_WORKFLOW, ANVIL_EXECUTION,
 * ANVIL_TASK_NAME, ANVIL_TASK_INDEX, ANVIL_PARAMS, ANVIL_INPUTS), the
 * task's resources, queue, priority, timeout and checkpointing. */
json_t *flow_job_body(const struct flow_exec *x, const struct flow_run *r, const json_t *rendered);
/* The task wrapper's instructions (agent/task.h, ANVIL_TASK): {"exec",
 * "run", "task", "index", "fetch" (taken), "render_env", "outputs",
 * "bundle", "checkpoint", "wrap"}; "wrap" is false when the wrapper would
 * have nothing to do (no bundle, fetch, rendering, outputs or checkpoint):
 * the rank then runs the command itself. */
json_t *flow_task_doc(const struct flow_exec *x, const struct flow_run *r, const json_t *rendered,
                      json_t *fetch);

/* Moves: each marks the run and the execution dirty. */
void flow_started(struct flow_exec *x, struct flow_run *r, int64_t job_id, int64_t now_ms);
/* A cache hit: outputs reused from run `from` of execution `exec`. */
void flow_cached(struct flow_exec *x, struct flow_run *r, const json_t *outputs, int64_t exec,
                 int64_t from, int64_t now_ms);
/* Its job ended: ok with the outputs it reported (NULL: none), or not ok
 * with why; cancelled when the job was cancelled. A failed run with
 * retries left waits for its backoff. A task that declares outputs and
 * did not report one of them fails. */
void flow_ended(struct flow_exec *x, struct flow_run *r, int ok, int cancelled,
                const json_t *outputs, const char *why, int64_t now_ms);
/* A run that cannot run at all (its command does not render, its job is
 * refused): failed now, without retries. */
void flow_failed(struct flow_exec *x, struct flow_run *r, const char *why, int64_t now_ms);
/* Cancel: every waiting run is cancelled (running ones end through
 * flow_ended when their jobs do). */
void flow_cancel(struct flow_exec *x, int64_t now_ms);
/* Recover: failed, cancelled and skipped runs wait again with their tries
 * reset; the execution runs again. 0, or -1 when it is still running. */
int flow_recover(struct flow_exec *x, int64_t now_ms);
/* Settles the execution's state once every run is final; 1 when it just
 * ended. */
int flow_settle(struct flow_exec *x, int64_t now_ms);

/* JSON of a run and of an execution (with_runs: every run; else counts by
 * state) for the API and the store. flow_run_load/flow_exec_load read
 * them back (the store's form); NULL when malformed. */
json_t *flow_run_json(const struct flow_exec *x, const struct flow_run *r);
json_t *flow_exec_json(const struct flow_exec *x, int with_runs);
struct flow_run *flow_run_load(const json_t *doc);
struct flow_exec *flow_exec_load(const json_t *doc);

#endif
