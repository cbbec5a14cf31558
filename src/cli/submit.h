/* submit.h - the body `anvil run` sends (POST /v1/jobs).
 *
 * The body is the submit record of proto/wire.h (wire_submit), the table the
 * server validates it with: each option that is one field of the body is
 * copied by that field's type in the table, and wire_set() refuses a field
 * the table does not describe. Two fields come from the client itself, as
 * with sbatch:
 *
 *   cwd       --cwd DIR (relative to the current directory), else the
 *             directory `anvil run` was started in;
 *   env       --export ALL (the default), NONE or VAR[,VAR...]: the client's
 *             variables, less the ones never exported (below); --env K=V
 *             sets one on top. "exported" lists the names that came from
 *             the client's environment, which the server shows by name only.
 *
 * `anvil run --field NAME=VALUE` sets any field a client may set (store/
 * fields.h, fields_client) by its name, the value read as its type; it is
 * applied last, so it wins over an option that sets the same field.
 *
 * Pure: the environment and the current directory are arguments, so tests
 * pass their own. One thread.
 */
#ifndef ANVIL_SUBMIT_H
#define ANVIL_SUBMIT_H

#include <jansson.h>
#include <stddef.h>

#include "base/buf.h"
#include "cli/cliargs.h"

/* The options of a job submission that submit_body() reads: `anvil run`'s
 * and `anvil shell`'s option tables start with them. */
/* clang-format off */
#define SUBMIT_JOB_OPTS                                                                          \
	{"gpus", 0, CLIARGS_INT, "G", "GPUs per node, 0: CPU-only (server default 1)"},         \
	{"nodes", 0, CLIARGS_INT, "N", "nodes, one rank each (default 1)"},                      \
	{"queue", 0, CLIARGS_STR, "Q", "queue (default \"default\")"},                           \
	{"team", 0, CLIARGS_STR, "TEAM", "team whose quota and fair share it counts against"},   \
	{"time", 't', CLIARGS_DURATION, "DURATION",                                              \
	 "time limit: stopped when reached; lets it backfill (default: the queue's)"},           \
	{"gpu-type", 0, CLIARGS_STR, "MODEL", "GPU model, e.g. h200 or a100"},                   \
	{"gpu-mem", 0, CLIARGS_SIZE, "SIZE", "minimum memory per GPU: 80G, 141G, 40960M"},       \
	{"pool", 0, CLIARGS_STR, "POOL", "only nodes of this pool"},                             \
	{"selector", 0, CLIARGS_KV, "K=V", "only nodes with this label (repeatable)"},           \
	{"cpus", 0, CLIARGS_STR, "N", "CPU limit per rank: 0.5, 4 (a CPU-time quota)"},          \
	{"memory", 0, CLIARGS_SIZE, "SIZE", "memory limit per rank: 16G, 512M"},                 \
	{"checkpointing", 0, CLIARGS_FLAG, NULL,                                                 \
	 "the job checkpoints: preferred when preemption must stop something"},                  \
	{"priority", 0, CLIARGS_INT, "P", "priority within the queue, -1000..1000 (default 0)"}, \
	{"name", 0, CLIARGS_STR, "NAME", "a name to show in listings"},                          \
	{"env", 'e', CLIARGS_KV, "K=V",                                                          \
	 "set an environment variable (repeatable; over what --export sends)"},                  \
	{"export", 0, CLIARGS_STR, "WHICH",                                                      \
	 "ALL (default), NONE or VAR[,VAR...]: which variables of this environment go"},         \
	{"cwd", 0, CLIARGS_STR, "DIR", "working directory on the nodes (default: this one)"},    \
	{"grace", 0, CLIARGS_DURATION, "DURATION",                                               \
	 "SIGTERM-to-SIGKILL grace: 30s, 500ms, 2m (default 10s)"}
/* clang-format on */

/* Why the client never exports the variable called name, as the words that
 * follow "NAME is never exported: ", or NULL when it may. Such a variable
 * is per host or per session (HOSTNAME, SSH_*, DISPLAY, ...), configures
 * the client (ANVIL_TOKEN, ANVIL_SERVER: every ANVIL_*), or is one anvil
 * sets for each rank (CUDA_VISIBLE_DEVICES, MASTER_ADDR, ...). --env can
 * still set any of them on purpose. */
const char *submit_never_exported(const char *name);

/* --after JOB[:ok|:any|:failed][,...] as the body's "after"; 0 with *out,
 * or ERR_INVALID with a message naming the option. JOB is read as every
 * verb reads one (verb_job_ref_parse); an entry for a member named as
 * ARRAY_INDEX (12_3) carries "index" beside the array's id in "job", which
 * the server does not take: verb_run resolves it before it sends. */
int submit_after(const char *spec, json_t **out, char *err, size_t errlen);

/* --array 0-29%8, 1,5,9 or 0-98:2 as the body's "array" ({"indices",
 * "max_running"}); 0 with *out, or ERR_INVALID with a message. */
#define SUBMIT_ARRAY_MAX       10000
#define SUBMIT_ARRAY_MAX_INDEX 999999
int submit_array(const char *spec, json_t **out, char *err, size_t errlen);

/* The body for `anvil run` with options a (parsed against verb_run's
 * table), the client's environment envp ("K=V" strings, NULL-terminated)
 * and its working directory cwd (absolute; NULL when it cannot be told).
 * 0 with *out (the caller decrefs it), or ERR_INVALID with a message that
 * names the option in err. What the user should know but does not stop the
 * job (a variable --export names that is not set, one whose value is not
 * UTF-8 and so cannot travel in JSON) is appended to notes, a line each. */
int submit_body(const struct cliargs *a, char *const *envp, const char *cwd, json_t **out,
                struct buf *notes, char *err, size_t errlen);

#endif
