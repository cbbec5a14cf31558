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
 * Pure: the environment and the current directory are arguments, so tests
 * pass their own. One thread.
 */
#ifndef ANVIL_SUBMIT_H
#define ANVIL_SUBMIT_H

#include <jansson.h>
#include <stddef.h>

#include "base/buf.h"
#include "cli/cliargs.h"

/* Why the client never exports the variable called name, as the words that
 * follow "NAME is never exported: ", or NULL when it may. Such a variable
 * is per host or per session (HOSTNAME, SSH_*, DISPLAY, ...), configures
 * the client (ANVIL_TOKEN, ANVIL_SERVER: every ANVIL_*), or is one anvil
 * sets for each rank (CUDA_VISIBLE_DEVICES, MASTER_ADDR, ...). --env can
 * still set any of them on purpose. */
const char *submit_never_exported(const char *name);

/* --after JOB[:ok|:any|:failed][,...] as the body's "after"; 0 with *out,
 * or ERR_INVALID with a message naming the option. */
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
