/* local.h - `anvil run --local`: the job's one rank run on this machine, as
 * a node would run it, without a server.
 *
 * The rank gets what an agent gives it: the server's per-rank variables
 * (proto/wire.h, wire_rank_env_set: CUDA_VISIBLE_DEVICES, MASTER_ADDR,
 * ANVIL_JOB_ID ...; the job id is 0, the node is "local"), the job's own
 * environment (with --export, as anvil run sends it), its working
 * directory, its CPU and memory limits, and the agent's own start: the
 * executor of agent/exec.h, so ANVIL_OUTPUT_DIR, ANVIL_LOG_FILE and the two
 * logs are where an agent puts them, under ANVIL_HOME/local (by default
 * ~/.anvil/local). The logs are printed as they grow (stdout to stdout,
 * stderr to stderr), and anvil exits with the command's status. GPUs are
 * this machine's, found as the agent finds them (NVML, else none); a job
 * that asks for more than it has is refused, unless it did not say: then it
 * runs without. Ctrl-C stops the rank as a cancel does (SIGTERM, SIGKILL
 * after the grace). One rank: --nodes, --head, --after, --array and
 * sessions are refused.
 */
#ifndef ANVIL_CLI_LOCAL_H
#define ANVIL_CLI_LOCAL_H

#include <jansson.h>

#include "cli/verb.h"

/* Runs body (cli/submit.h's) here; returns the exit status (CLI_EXIT_*, or
 * the command's). */
int local_run(struct verb_ctx *v, const json_t *body);
/* The same as job job_id (0 for `anvil run --local`): its rank's
 * ANVIL_JOB_ID is 0 still, but the agent's per-job directories (the
 * checkpoint directory) are job_id's, so a workflow run run locally again
 * finds its checkpoint (cli/wflocal.c). */
int local_run_as(struct verb_ctx *v, const json_t *body, int64_t job_id);

#endif
