/* hang.h - hang detection for the ranks of jobs with a hang timeout
 * (`anvil run --hang-timeout DUR`, docs/operations.md, "Hung ranks").
 *
 * A rank makes progress when its stdout or stderr log grows, when it
 * touches ANVIL_HEARTBEAT_FILE (exec_heartbeat_path: in the rank's own
 * directory, which is also its /tmp inside its fence), or when the GPU
 * backend says one of its GPUs is busy. The agent's loop calls hang_check
 * (at most once a second does any work): a rank that made no progress for
 * its timeout is declared hung once. Its stacks are recorded first, by
 * `anvil _stacks` (spawned, so the agent never waits on a stuck process's
 * /proc files or on py-spy), appended to the rank's stderr log: py-spy's
 * dump for each process where py-spy is installed, else each process's
 * /proc/PID/stack (the kernel's), its wait channel and its command line.
 * Once that has ended (or after HANG_STACKS_MAX_MS), hang_ms gives how
 * long the rank made no progress, which its report carries; the server
 * stops the gang and requeues it (server/ranks.c).
 *
 * One thread (the agent's) calls all of these. */
#ifndef ANVIL_AGENT_HANG_H
#define ANVIL_AGENT_HANG_H

#include <stddef.h>
#include <stdint.h>

#include "agent/desired.h"

#define HANG_CHECK_MS      1000
#define HANG_STACKS_MAX_MS 20000 /* an _stacks still running then is not waited for */

struct hang;
struct exec;

/* How long every GPU of mask has been idle (agent/gpuwatch.h), -1: unknown. */
typedef int64_t (*hang_gpu_idle_fn)(void *ctx, uint64_t gpus);

struct hang *hang_new(struct exec *e, const char *self, hang_gpu_idle_fn idle, void *ctx);
void hang_free(struct hang *h);
/* The desired ranks (agent/desired.h's held fields): those with a
 * hang_timeout_ms are watched, the others forgotten. */
void hang_set(struct hang *h, const struct desired_rank *ranks, size_t n);
/* Looks at the watched ranks (now: monotonic ms); 1 when a rank's hang
 * became reportable (the caller syncs). */
int hang_check(struct hang *h, int64_t now);
/* Milliseconds until hang_check has work; -1: nothing watched. */
int64_t hang_next_ms(const struct hang *h, int64_t now);
/* The reportable hang of a rank: how long it made no progress; 0: none. */
int64_t hang_ms(const struct hang *h, int64_t attempt_id, int rank);

/* `anvil _stacks --out FILE --why TEXT PID...` (argv[0] is "_stacks"). */
int hang_stacks_main(int argc, char **argv);

#endif
