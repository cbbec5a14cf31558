/* dcgm.h - GPU metrics in the Prometheus text format, under the names,
 * units, types, help texts and labels of NVIDIA's dcgm-exporter, so that
 * dashboards and alerts written for it work on anvil's agent unchanged.
 *
 * Each series carries the exporter's labels in its order:
 *
 *   DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-...",pci_bus_id="00000000:18:00.0",
 *                        device="nvidia0",modelName="NVIDIA H200",Hostname="node-7",
 *                        anvil_job="j-42",anvil_task="train",anvil_backend="sim"} 61
 *
 * Hostname is the anvil node name (the agent's --name, what `anvil nodes`
 * lists), so a series joins the node it came from; it is left out when
 * empty (as the exporter does). anvil_job and
 * anvil_task are there while a job uses the GPU; anvil_backend is on every
 * series of every backend but "nvml", so simulated GPUs can never pass for
 * hardware. Families come in the exporter's order, one HELP and TYPE each,
 * all of a family's series together; a value the GPU does not support
 * (-1) is left out, and a family with no series is left out whole. A lost
 * GPU's sample is meaningless, so it keeps only DCGM_FI_DEV_XID_ERRORS and
 * anvil's own families.
 *
 * Matching the exporter wins over `promtool check metrics`, which lints two
 * of its choices: counters without the "_total" suffix
 * (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, DCGM_FI_DEV_ECC_*_TOTAL,
 * DCGM_FI_DEV_RETIRED_*, DCGM_FI_DEV_*_REMAPPED_ROWS: once per family) and
 * the camelCase label modelName (once per series). Nothing else.
 *
 * anvil adds two families with the exporter's labels less modelName (so
 * they lint clean) and without job labels (so the counters do not split
 * per job):
 *
 *   anvil_gpu_health{...,state="healthy"} 1          gauge
 *   anvil_gpu_faults_total{...,scope="gpu"} 3        counter, one per scope
 *
 * Pure: writes into the caller's buffer; thread-safe.
 */
#ifndef ANVIL_GPU_DCGM_H
#define ANVIL_GPU_DCGM_H

#include <stdint.h>

#include "base/buf.h"
#include "gpu/gpu.h"
#include "gpu/health.h"

/* One GPU's inputs; everything is borrowed for the call. */
struct dcgm_gpu {
	const struct gpu_info *info;     /* required */
	const struct gpu_sample *sample; /* NULL: no reading yet */
	int64_t last_xid;                /* the last XID seen; 0 none yet; -1 leaves it out */
	const char *job_id;              /* NULL or "" when no job uses the GPU */
	const char *task;                /* the job's name; NULL or "" to leave out */
	const char *health;              /* "healthy", "quarantined", "lost"; NULL leaves it out */
	int64_t faults[GPU_SCOPE_COUNT]; /* findings so far, by enum gpu_scope; [NONE] unused */
};

/* Appends the exposition of n GPUs to out. node is the anvil node name,
 * the Hostname label; NULL or "" leaves the label out. backend is the
 * gpu_backend_name() ("nvml", "sim", ...). */
void dcgm_write(struct buf *out, const char *node, const char *backend, const struct dcgm_gpu *gpus,
                int n);

#endif
