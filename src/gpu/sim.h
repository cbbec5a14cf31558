/* sim.h - the simulated GPU backend ("sim").
 *
 * The build machines have no GPU, so `anvil up` and the tests describe a
 * node's GPUs in a small JSON file, validated strictly (unknown fields,
 * wrong types, duplicate uuids and out-of-order indices are rejected with
 * the file, the field, the value and the reason):
 *
 *   {"driver_version": "sim-550.54.15", "cuda_version": "12.4",
 *    "gpus": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200",
 *              "memory_bytes": 150754820096, "pci_bus_id": "00000000:18:00.0"}]}
 *
 * "gpus" holds 0 to GPU_MAX entries whose indices are 0, 1, ... in order.
 * The backend reports its name as "sim" everywhere (node facts, metrics) so
 * that simulated GPUs are never mistaken for hardware. Thread-safe: no
 * shared state.
 */
#ifndef ANVIL_GPU_SIM_H
#define ANVIL_GPU_SIM_H

#include "gpu/gpu.h"

extern const struct gpu_backend_ops gpu_sim_ops;

/* Writes a sim file for node node_index (>= 0) with count GPUs (0..GPU_MAX)
 * of the given model ("H200", "A100", a full name, or NULL for H200), with
 * UUIDs that are deterministic and distinct per node and GPU, and the
 * model's memory size (80 GiB for a model it does not know). Written
 * atomically. 0, ERR_INVALID or a negative errno. */
int gpu_sim_write_file(const char *path, int count, const char *model, int node_index);

#endif
