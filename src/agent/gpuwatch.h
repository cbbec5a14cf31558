/* gpuwatch.h - the agent's GPU health watcher.
 *
 * One thread reads the backend's critical events (XIDs) as they come and
 * samples every GPU every sample_ms, judges both (gpu/health.h), and keeps
 * each GPU's health:
 *
 *   healthy --gpu-scope finding--> quarantined --idle, reset, clean check--> healthy
 *      |                                |  (reset fails or check fails: stays,
 *      |                                |   retried every GPUWATCH_RESET_RETRY_MS)
 *      +--gpu-lost (node fault)--> lost (until the agent restarts: a reboot)
 *
 * and the node's fault (a node-scope finding: the node must drain; it is
 * cleared only by a new agent process, as after a reboot). Findings are
 * numbered (seq grows across restarts: it starts from the wall clock) and
 * the newest GPUWATCH_FINDINGS are kept for the report, which the syncer
 * sends to the server whenever it changes (gpuwatch_fd turns readable).
 * Quarantines are written to WORK_DIR/gpu-health.json, so a restarted
 * agent keeps them until the reset and clean check.
 *
 * A quarantined GPU stays quarantined, and so is never assigned, until all
 * of: no desired rank uses it (gpuwatch_set_usage), the backend's reset
 * has returned 0 (nvml: nvidia-smi --gpu-reset, seconds; sim: the file's
 * reset_ms), and a fresh sample passes gpu_health_is_clean(). The thread
 * waits for a reset, one GPU at a time: meanwhile no GPU is sampled and
 * events wait (as they would behind nvidia-smi), and gpuwatch_stop() waits.
 *
 * Who calls what: the main thread starts and stops it, reads the report
 * and tells it which GPUs ranks use (gpuwatch_set_usage); the HTTP threads
 * read metrics, the GPU list and run checks; gpuwatch_inject comes from
 * the HTTP threads too. Everything is guarded by one internal mutex, never
 * held across a backend call that can block (events, reset, the check
 * program).
 */
#ifndef ANVIL_AGENT_GPUWATCH_H
#define ANVIL_AGENT_GPUWATCH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "gpu/gpu.h"

#define GPUWATCH_FINDINGS       64
#define GPUWATCH_SAMPLE_MS      2000
#define GPUWATCH_RESET_RETRY_MS 30000
/* A GPU whose utilization reads under this (percent) is idle. */
#define GPUWATCH_IDLE_PCT 5

struct gpuwatch;

struct gpuwatch_config {
	struct gpu_backend *gpus;  /* borrowed; must outlive the watcher */
	const char *work_dir;      /* gpu-health.json lives here */
	const char *node_name;     /* the metrics' Hostname label: the anvil node name */
	int64_t sample_ms;         /* 0: GPUWATCH_SAMPLE_MS */
	const char *check_program; /* NULL: no compute check (see gpuwatch_check) */
};

int gpuwatch_start(const struct gpuwatch_config *cfg, struct gpuwatch **out);
void gpuwatch_stop(struct gpuwatch *w);

/* Readable when the report changed; gpuwatch_report() clears it. */
int gpuwatch_fd(const struct gpuwatch *w);
/* The health report for the server (proto/wire.h, wire_health: "gpus",
 * "node" or null, "findings"), built through its tables. Caller owns it. */
json_t *gpuwatch_report(struct gpuwatch *w);

/* What ranks use now: gpus[i] is the mask of GPUs of the i-th rank, with
 * its job id and name. Resets wait for a GPU to be idle; the metrics label
 * busy GPUs with their job. */
struct gpuwatch_use {
	uint64_t gpus;
	int64_t job_id;
	const char *job_name;
};
void gpuwatch_set_usage(struct gpuwatch *w, const struct gpuwatch_use *use, int n);

/* How long every GPU in the mask has been idle (its utilization under
 * GPUWATCH_IDLE_PCT in every sample since; 0 when one is busy), counted
 * from the first idle sample after a busy one, or after this watcher's
 * first sample; -1 when a GPU's utilization is not known (no sample yet,
 * lost, not supported, not on this node) or the mask is empty. A GPU of a
 * rank (gpuwatch_set_usage) turning busy again makes gpuwatch_fd readable,
 * so the agent's next sync says so at once. */
int64_t gpuwatch_idle_ms(struct gpuwatch *w, uint64_t gpus);

/* Injects a fault (sim backend only; gpu/sim.h) and samples at once. 0,
 * ERR_INVALID with the reason, or -ENOSYS on real hardware. */
int gpuwatch_inject(struct gpuwatch *w, const json_t *fault, char *err, size_t errlen);

/* The DCGM-compatible exposition of every GPU (gpu/dcgm.h). */
void gpuwatch_metrics(struct gpuwatch *w, struct buf *out);
/* Inventory, last sample and health of every GPU. Caller owns it. */
json_t *gpuwatch_gpus_json(struct gpuwatch *w);

/* The node check (`anvil node check`): expect may give "gpus",
 * "gpu_model", "driver_version". Checks count, model, driver, every GPU's
 * health (a fresh sample must pass gpu_health_is_clean and the GPU must
 * not be quarantined or lost), no node fault, and, when a check program is
 * configured, runs it once per GPU with CUDA_VISIBLE_DEVICES set to that
 * GPU (exit 0 within 120 s passes). Returns the machine-readable result:
 * {"ok", "backend", "summary", "checks": [{name, ok, detail}]}. */
json_t *gpuwatch_check(struct gpuwatch *w, const json_t *expect);

#endif
