/* wflocal.h - `anvil wf run --local FILE`: a workflow run on this machine,
 * without a server, to debug a pipeline before it is queued.
 *
 * The same engine decides (flow/engine.h: needs, sweeps, retries and their
 * backoff, skips), the same templates render, the same cache keys are
 * looked up, and each run's command runs under the same task wrapper
 * (`anvil _task`, agent/task.h) as on a node, started as `anvil run
 * --local` starts a rank (cli/local.h): ANVIL_OUTPUT_DIR, the checkpoint
 * directory, the inputs fetched and rendered, the outputs stored and
 * reported. What differs, and why:
 *
 *   - runs run one at a time, in the engine's order, in the current
 *     directory (the code is here: no bundle is packed or unpacked; the
 *     tree's bundle hash is still computed, so changed code misses the
 *     cache as it does on the cluster);
 *   - each as one rank, with at most one of this machine's GPUs (none
 *     when it has none): `nodes` and `gpus` are not honoured;
 *   - objects, the cache and the checkpoints are this machine's, under
 *     ANVIL_HOME/local (objects/, flows.db, checkpoints/), apart from
 *     any cluster's: a local result never answers a cluster run.
 *
 * Ctrl-C stops the running command (SIGTERM, SIGKILL after its grace) and
 * cancels the rest.
 */
#ifndef ANVIL_CLI_WFLOCAL_H
#define ANVIL_CLI_WFLOCAL_H

#include <jansson.h>

#include "cli/verb.h"

/* Runs the compiled workflow wf (taken) here; no_cache: read no cached
 * results; code_dir: the tree whose bundle hash is the code's (NULL: no
 * code hash). Prints each run's change, its output, and the execution at
 * the end; returns 0 succeeded, 1 failed, 130 cancelled. */
int wflocal_run(struct verb_ctx *v, json_t *wf, int no_cache, const char *code_dir);

#endif
