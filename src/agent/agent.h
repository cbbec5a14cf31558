/* agent.h - the node agent: `anvil agent`.
 *
 * Registers with the server using the join token (or reuses the identity
 * in WORK_DIR/node.json), reports the node's facts and GPUs, long-polls
 * /v1/agent/sync and starts and stops rank processes so that what runs
 * matches the server's desired set (docs/api.md). Serves /healthz,
 * /metrics and /v1/logs. SIGTERM or SIGINT stops every rank (SIGTERM, then
 * SIGKILL after its grace, at most 5 s) and exits 0; after SIGKILL the ranks
 * keep running and a restarted agent re-adopts them.
 *
 * Structure, one thread (the HTTP server, the GPU watcher and the
 * convergence worker have their own):
 *   agent.c    flags, setup, the event loop, shutdown
 *   syncer.c   the sync long poll on curl multi and reconciliation
 *   exec*.c    ranks: start, stop, reap, re-adopt (its files by concern
 *              in exec_int.h; shim.c, cgroup.c, journal.c: the ranks'
 *              records)
 *   ident.c    node.json, registration, facts
 *   serve.c    the agent's HTTP endpoints
 *   converge*.c  the node's fleet profile: its steps run in a worker
 *              thread, the status reported with the syncs (converge.h)
 */
#ifndef ANVIL_AGENT_H
#define ANVIL_AGENT_H

/* argv[0] is "agent". Returns the process exit status: 0 after a clean
 * shutdown, 1 on a fatal error, 2 on bad flags. */
int agent_main(int argc, char **argv);

#endif
