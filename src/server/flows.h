/* flows.h - the server's workflow engine: executions of compiled workflows
 * (flow/spec.h) whose task runs are ordinary jobs.
 *
 * The decisions are flow/engine.h's; this file keeps the records (in the
 * state's database, written by state_flush with everything else, so an
 * acknowledged change is durable and a server killed mid-workflow loses
 * nothing), submits a job for each run the engine starts, looks up the
 * task cache first, and feeds every workflow job's end back to the engine.
 * Layer 5 of the state files (core.h). Every function runs with the state
 * lock held.
 *
 * A run's job carries the wrapper's instructions (job->task, ANVIL_TASK on
 * the node, agent/task.h): {"exec", "run", "task", "index", "bundle",
 * "fetch", "render_env", "outputs", "checkpoint", "trace"}. The wrapper
 * reports the run's outputs, and with "trace" the files of the bundle
 * the command read (flows_outputs), before its job ends; the job's
 * success then makes the run succeed with them.
 *
 * The task cache (store/flowcache.h): a run of a task with cache enabled
 * has a key (flow_cache_parts: its definition as written and the values
 * it was rendered with, the hashes of the objects it fetches, the code as
 * its cache.code says, the cache version). A success records its outputs
 * under the key, with the files of the bundle it read; a later run with
 * the same key whose bundle has those files unchanged reuses them without
 * running, unless one of them is gone from the object store (then it
 * runs). A run whose key and bundle equal a running run's waits for it.
 * Each task instance's last key is kept too, so a miss says what changed.
 */
#ifndef ANVIL_SERVER_FLOWS_H
#define ANVIL_SERVER_FLOWS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "flow/engine.h"
#include "server/state.h"

/* Rebuilds the executions loaded with the state (state_open calls it);
 * runs whose jobs ended while the server was down are settled. */
int flows_open(struct state *st);
/* Frees the engine's records (state_close; nothing when it was never
 * opened). */
void flows_close(struct state *st);

/* Its part of a flush (state_flush, entry.c, while flows_dirty): writes
 * the executions and runs changed since the last one into the open
 * transaction; after the commit, flows_flushed forgets that they were. */
int flows_flush(struct state *st, struct store *store);
void flows_flushed(struct state *st);

/* A new execution from an API body {"workflow": compiled, "bundle": key,
 * "no_cache": bool}: checked (every error, joined) and stored (flows_create),
 * and its first runs started (flows_submit). A caller that must write the
 * execution before its first jobs (which jobs_admit commits on their own:
 * the API, with the submission's Idempotency-Key) creates, flushes, then
 * steps the engine (flows_step). */
int flows_create(struct state *st, const json_t *body, struct flow_exec **out, char *err,
                 size_t errlen);
int flows_submit(struct state *st, const json_t *body, struct flow_exec **out, char *err,
                 size_t errlen);
struct flow_exec *flows_get(struct state *st, int64_t id);
/* The newest executions first, at most limit. */
json_t *flows_list(struct state *st, int limit);
/* Cancels waiting runs and the jobs of running ones. */
int flows_cancel(struct state *st, struct flow_exec *x);
/* Marks a failed or cancelled execution to run again from where it
 * stopped; the next flows_step starts its runs (the caller flushes first,
 * as after flows_create). */
int flows_recover(struct state *st, struct flow_exec *x, char *err, size_t errlen);
/* The wrapper's report of run `run_id`'s outputs from attempt `attempt_id`
 * (the run's current job's current attempt, else ERR_CONFLICT), and of
 * the files of the bundle its command read (reads: an array of codeset.h
 * KEYs; NULL or null: not recorded). */
int flows_outputs(struct state *st, int64_t run_id, int64_t attempt_id, const json_t *outputs,
                  const json_t *reads, char *err, size_t errlen);
/* The run and its execution by run id; NULL when none. */
struct flow_run *flows_run(struct state *st, int64_t run_id, struct flow_exec **x);

/* Feeds ended workflow jobs to the engine, starts what may start (retries
 * whose backoff passed included) and settles executions. Cheap when
 * nothing changed; entry.c calls it wherever jobs may have ended. */
void flows_step(struct state *st);

#endif
