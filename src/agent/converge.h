/* converge.h - the agent converges its node to its fleet profile.
 *
 * The server sends the node's profile in every sync answer (docs/api.md,
 * "Node profiles": {hash, name, spec}). The agent runs its steps
 * (fleet/steps.h) in order, in a worker thread of its own, so that the
 * sync loop and the ranks never wait on a mount or apt-get: each step's
 * check, and when it does not hold, its action, then the check again. A
 * step is `ok` (it held), `changed` (its action made it hold), `failed`
 * (its check cannot be made to hold here, or the action failed), or
 * `skipped` (an earlier step failed: the run stops at the first failure).
 * What each found and did, with the last 4 KiB of a command's output, is
 * the step's detail. The status goes to the server as the sync request's
 * profile_status, while it changed, until a sync carrying it is answered
 * 200 (agent/syncer.h), and is kept in WORK_DIR/profile.json, so that a
 * restarted agent reports it in its first sync.
 *
 * A run with actions happens when a sync answer carries a profile whose
 * hash differs from the one the agent last ran, for the first profile
 * after the agent starts (whatever its hash: after a reboot, mounts and
 * kernel settings are gone), and when the server asks for it
 * (converge_rerun: POST /v1/profile/converge on the agent, agent/serve.h).
 * Between runs, every check_interval_ms, the checks run alone, with no
 * action: a check that no longer holds makes the node drifted, and one that
 * holds again converged. The agent never fixes drift by itself: a
 * re-run by the server (an operator's apply or rollout) does.
 *
 *              run (new hash, agent start, re-run request)
 *   (none) ---------------------> converging --every step ok/changed--> converged
 *                                    |    ^                              |    ^
 *                        a step fails|    |run                  a check  |    | every check
 *                                    v    |                     fails    v    | holds
 *                                  failed +--------------------------- drifted
 *
 * A failed node is checked no more: it waits for a new profile, a re-run
 * or a restart. A profile that is malformed (fleet/steps.h refuses it) is
 * refused with a logged reason and reported as failed, with one step
 * named "profile" that says why; it never runs. A sync answer without a
 * profile means the node has none: the agent stops reporting and
 * checking, and forgets the file.
 *
 * Threads: converge_start/stop, converge_set_profile, converge_status and
 * converge_fd belong to the agent's main thread; converge_rerun and
 * converge_show are called from the HTTP threads; everything is guarded
 * by one internal mutex, never held across a step, a command or a file
 * write. converge_run, converge_load and converge_save are for one thread
 * at a time (the worker, or `anvil _converge`).
 */
#ifndef ANVIL_AGENT_CONVERGE_H
#define ANVIL_AGENT_CONVERGE_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fleet/steps.h"

#define CONVERGE_CHECK_INTERVAL_MS 60000
#define CONVERGE_FILE              "profile.json" /* in the work dir */
/* ANVIL_PROFILE_APT_SIMULATE=1 in the environment: the packages step runs
 * apt-get install -s, which changes nothing (tests). */
#define CONVERGE_APT_SIMULATE_ENV "ANVIL_PROFILE_APT_SIMULATE"

struct converge;
struct gpu_backend;

struct converge_config {
	const char *work_dir;            /* CONVERGE_FILE lives here; copied */
	const struct steps_facts *facts; /* copied */
	int64_t check_interval_ms;       /* 0: no checks between runs */
	int apt_simulate;                /* apt-get -s */
};

/* Loads WORK_DIR/profile.json (its status is reported at once) and starts
 * the worker. 0, or a negative errno. */
int converge_start(const struct converge_config *cfg, struct converge **out);
/* Stops the worker: a command in flight gets SIGTERM, then SIGKILL after
 * 5 s, and its step fails. NULL is fine. */
void converge_stop(struct converge *c);

/* The sync answer's profile (a wire_profile object, borrowed; NULL when
 * the answer has none). Cheap when nothing changed: call it for every
 * answer applied. */
void converge_set_profile(struct converge *c, const json_t *profile);
/* Runs the steps again with their actions, for the profile whose hash is
 * hash (NULL: whatever the node has). 0; ERR_NOTFOUND when the node has no
 * profile; ERR_CONFLICT when its profile is another one or was refused
 * (why in err). */
int converge_rerun(struct converge *c, const char *hash, char *err, size_t errlen);

/* Readable when the status changed; converge_status() clears it. */
int converge_fd(const struct converge *c);
/* The status to report (a wire_profile_status object), or NULL when the
 * node has no profile. The caller owns it. */
json_t *converge_status(struct converge *c);
/* What GET /v1/profile answers: {"profile": {"hash", "name"} or null,
 * "status": the status or null, "check_interval_ms"}. Caller owns it. */
json_t *converge_show(struct converge *c);

/* The facts the check-only steps compare: the GPU backend's GPUs, driver
 * and CUDA versions (b may be NULL: none), and this binary's version. */
void converge_facts(const struct gpu_backend *b, struct steps_facts *out);

/* One run of profile's steps on the calling thread, with their actions
 * unless check_only (then every check runs, and one that fails makes the
 * state drifted, or keeps it failed when prev's was). progress, when not
 * NULL, gets the status after each step (state converging; borrowed).
 * stop, when not NULL, ends a command in flight when it turns non-zero.
 * Returns the status (caller owns it). profile must be a valid
 * wire_profile whose spec steps_from_profile accepts; else the status is
 * failed with the reason. */
struct converge_run_opts {
	int check_only;
	int apt_simulate;
	const json_t *prev; /* the last status of this profile, or NULL */
	const atomic_int *stop;
	void (*progress)(void *ctx, const json_t *status);
	void *ctx;
};
json_t *converge_run(const json_t *profile, const struct steps_facts *facts,
                     const struct converge_run_opts *opts);

/* A failed status for a refused profile: one step "profile" saying why. */
json_t *converge_refused(const char *hash, const char *why);

/* WORK_DIR/profile.json: {"profile": ..., "status": ...}. load: 0 with
 * both (caller owns them), -ENOENT, or ERR_INVALID (why in err) for a file
 * that is not one. save: profile NULL removes the file. */
int converge_load(const char *work_dir, json_t **profile, json_t **status, char *err,
                  size_t errlen);
int converge_save(const char *work_dir, const json_t *profile, const json_t *status);

/* `anvil _converge --profile FILE --work-dir DIR [--check-only]
 * [--gpus-file F | --gpu-backend SPEC]`: one run on this machine, the
 * status printed as JSON and kept in DIR as the agent keeps it. Exit 0
 * when converged, 1 when not (or on an error), 2 on bad usage. */
int converge_main(int argc, char **argv);

#endif
