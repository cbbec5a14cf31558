/* serve.h - the agent's own HTTP endpoints.
 *
 *   GET /healthz   {"status":"ok"}
 *   GET /metrics   Prometheus text: the counters in struct serve_stats and
 *                  the HTTP server's own (anvil_agent_http_*)
 *   GET /v1/logs?attempt=A&rank=R&stream=S&offset=O&limit=L[&tail=N]
 *                  raw bytes of a rank's stdout (S=stdout, the default)
 *                  or stderr log (agent/exec.h) from offset O, or its
 *                  last N lines (bearer: the node secret); header
 *                  X-Anvil-Next-Offset: where the bytes sent end; limit
 *                  defaults to and is capped at 1 MiB (a tail too); 404
 *                  when the node has no such log
 *   GET /v1/gpus   inventory, last sample and health of every GPU
 *   POST /v1/gpu/faults
 *                  injects a fault (simulated backend only; gpu/sim.h)
 *   POST /v1/check the node check (agent/gpuwatch.h), machine-readable
 *                  (these three: bearer the node secret; metrics also carry
 *                  the GPUs' DCGM-compatible series)
 *   GET /v1/profile
 *                  the node's fleet profile (hash, name), its status and
 *                  the check interval (agent/converge.h)
 *   POST /v1/profile/converge
 *                  runs the profile's steps again with their actions; a
 *                  body {"hash": H} runs them only if H is the node's
 *                  profile (409 otherwise; 404 when it has none); 202
 *                  (these two: bearer the node secret)
 *   POST /v1/attach?attempt=A&rank=R
 *   POST /v1/exec?attempt=A&rank=R
 *                  interactive streams into a running rank (HTTP Upgrade:
 *                  anvil-stream; node secret; agent/streams.h): attach to a
 *                  session's holder, or run a command in the rank; 409 when
 *                  the rank does not run here (or is not a session)
 *
 * Handlers run on the HTTP server's threads. They read only the log files,
 * the atomic counters that the agent's main thread publishes, the secret
 * and the running ranks' contexts (under a mutex: serve_set_secret and
 * serve_set_ranks may run at any time).
 */
#ifndef ANVIL_AGENT_SERVE_H
#define ANVIL_AGENT_SERVE_H

#include <stdatomic.h>
#include <stdint.h>

#define SERVE_LOG_LIMIT    (1 << 20)
#define SERVE_LOG_TAIL_MAX 100000 /* lines */

struct serve_stats {
	atomic_llong ranks_running;
	atomic_llong ranks_started_total;
	atomic_llong ranks_started_spare_total;
	atomic_llong shims_reused_total;
	atomic_llong sync_total;
	atomic_llong sync_errors_total;
	atomic_llong sync_repeated_total;
	atomic_llong gpus;
};

struct serve;
struct connguard_limits;
struct gpuwatch;
struct converge;

/* A running rank, as exec and attach need it (agent/exec.h, exec_context). */
struct serve_rank {
	int64_t attempt_id;
	int rank;
	int pid;    /* its command: the process exec joins the cgroups of */
	char **env; /* NULL-terminated "KEY=VALUE"; owned */
	char *cwd;  /* owned */
};

/* Listens on host:port (0: any), with the connection limits and deadlines
 * limits (NULL: the defaults; base/connguard.h); stats, work_dir and gw
 * (NULL: no GPU routes) are borrowed and must outlive the server. */
int serve_start(const char *host, int port, const struct connguard_limits *limits,
                const char *work_dir, struct serve_stats *stats, struct gpuwatch *gw,
                struct serve **out);
int serve_port(const struct serve *s);
void serve_set_secret(struct serve *s, const char *secret);
/* The profile endpoints' worker (borrowed; must outlive the server). */
void serve_set_converge(struct serve *s, struct converge *c);
/* Replaces the running ranks (takes ranks[0..n) and the array, malloc'd). */
void serve_set_ranks(struct serve *s, struct serve_rank *ranks, int n);
void serve_ranks_free(struct serve_rank *ranks, int n);
void serve_stop(struct serve *s);

#endif
