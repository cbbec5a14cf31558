/* syncer.h - the agent's side of /v1/agent/sync (docs/api.md).
 *
 * A level-triggered long poll on curl multi: the syncer reports every rank
 * the executor has not had acknowledged, applies the server's complete
 * desired set (starts what is new, stops what is gone, forgets what is
 * finished, acknowledged and no longer listed) and polls again.
 *
 * Latency: when local state changes while a poll is parked at the server
 * (syncer_changed), a second request goes out at once on a second
 * keep-alive connection; the server answers the superseded one itself. At
 * most two requests are in flight; an answer older than one already
 * applied only acknowledges reports. The facts, the health report and the
 * profile status each ride on one request in flight at most: the server's
 * threads may take the two connections' requests in either order, so a
 * newer version waits for the answer to the request carrying the older. Failures back off from 50 ms to 1 s,
 * logged once per outage; ranks keep running meanwhile.
 *
 * Sessions: a running session rank's report carries how long its GPUs
 * have been idle (gpu_idle_ms, when cfg.gpu_idle_ms can tell), and a
 * notice in its desired entry is handed to cfg.notice once per id (the ids
 * delivered are kept while the rank is desired; an agent restart may show
 * the latest one again).
 *
 * Profiles: the answer's "profile" (absent: none) goes to cfg.on_profile
 * with every answer applied; the node's profile status (agent/converge.h)
 * is sent, as the health report is, while it changed.
 *
 * Why libcurl here, when every other HTTP call goes through httpc (whose
 * plain-http calls use libevent): the agent's main loop waits in one
 * curl_multi_poll on both in-flight requests and on its own descriptors
 * (the executor's, the streams'), which httpc's one-call-at-a-time
 * interface does not offer; the agent is a daemon, so loading libcurl
 * (syncer_new does) costs it nothing that matters.
 *
 * Each entry of an answer is parsed once, into a struct desired_rank
 * (agent/desired.h): what every answer needs of every entry when it is
 * applied, the rest only for a rank it starts; the launchers read that.
 *
 * Owned by the agent's main thread; the executor and stats are borrowed.
 */
#ifndef ANVIL_AGENT_SYNCER_H
#define ANVIL_AGENT_SYNCER_H

#include <jansson.h>
#include <stdint.h>

struct desired_rank;
struct exec;
struct serve_stats;
struct syncer;

struct syncer_config {
	const char *server; /* base URL */
	int64_t wait_ms;
	struct exec *exec;
	struct serve_stats *stats;
	/* optional: variables the agent adds to a rank that uses gpus (the
	 * mask of its desired entry's "gpus") unless the job set them itself */
	void (*rank_env)(void *ctx, uint64_t gpus, json_t *env);
	/* optional: the desired ranks just applied (agent/desired.h, their
	 * held fields), n of them, borrowed for the call */
	void (*on_desired)(void *ctx, const struct desired_rank *ranks, size_t n);
	void *ctx;
	/* optional: the device minor (N of /dev/nvidiaN) of each GPU by index,
	 * -1 unknown; borrowed for the syncer's life. A rank whose GPUs' minors
	 * are not all known is not isolated from other GPUs (agent/exec.h). */
	const int *gpu_minors;
	int ngpu_minors;
	/* optional: how long every GPU in the mask has been idle, -1 when not
	 * known (agent/gpuwatch.h, gpuwatch_idle_ms) */
	int64_t (*gpu_idle_ms)(void *ctx, uint64_t gpus);
	/* optional: delivers a notice to a running session rank's terminal;
	 * must not block (agent/streams.h, streams_notice) */
	void (*notice)(void *ctx, int64_t attempt_id, int rank, const char *text);
	/* optional: the "profile" of every answer applied, borrowed for the
	 * call (NULL when the answer has none; agent/converge.h,
	 * converge_set_profile); must not block */
	void (*on_profile)(void *ctx, const json_t *profile);
	/* optional: the newest checkpoint uploaded for an attempt, which rank
	 * 0's report carries (agent/ckptsync.h, ckptsync_newest; a new
	 * reference or NULL); must not block */
	json_t *(*checkpoint)(void *ctx, int64_t attempt_id);
	/* optional: how long a running rank made no progress once it is
	 * declared hung (agent/hang.h, hang_ms), else 0 */
	int64_t (*hung_ms)(void *ctx, int64_t attempt_id, int rank);
};

struct syncer *syncer_new(const struct syncer_config *cfg);
void syncer_free(struct syncer *s);

/* New identity (after registering): clears an auth failure. */
void syncer_set_identity(struct syncer *s, int64_t node_id, const char *secret);
/* Facts to send with the next requests until one is answered 200 (steals). */
void syncer_set_facts(struct syncer *s, json_t *facts);
/* The GPU health report to send with the next requests until one is
 * answered 200 (steals; agent/gpuwatch.h). */
void syncer_set_health(struct syncer *s, json_t *health);
/* The profile status to send with the next requests until one is
 * answered 200 (steals; NULL: none to send; agent/converge.h). */
void syncer_set_profile_status(struct syncer *s, json_t *status);
/* Local state changed: report it promptly. */
void syncer_changed(struct syncer *s);

/* Sends what is due, handles answers. Call after every wake-up. */
void syncer_step(struct syncer *s);
/* Waits up to timeout_ms for network activity or for one of the nfds fds
 * (at most SYNCER_WAIT_FDS) to be readable; ready[i] says which. */
#define SYNCER_WAIT_FDS 4
void syncer_wait(struct syncer *s, const int *fds, int nfds, int64_t timeout_ms, int *ready);
/* Milliseconds until syncer_step has something to do without I/O. */
int64_t syncer_next_ms(const struct syncer *s);

/* The server refused the secret (401) and a re-registration is due now. */
int syncer_needs_register(const struct syncer *s);
/* Registration failed: try again after the backoff; refused (401, 409:
 * an admin has to act) after a longer one, up to 10 s. */
void syncer_register_failed(struct syncer *s, int refused);

/* Drops requests in flight, sends one final report with wait_ms 0 and
 * waits for it up to timeout_ms. */
void syncer_flush(struct syncer *s, int64_t timeout_ms);

#endif
