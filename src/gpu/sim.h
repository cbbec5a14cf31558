/* sim.h - the simulated GPU backend ("sim").
 *
 * The build machines have no GPU, so `anvil up` and the tests describe a
 * node's GPUs in a small JSON file, validated strictly (unknown fields,
 * wrong types, duplicate uuids and out-of-order indices are rejected with
 * the file, the field, the value and the reason):
 *
 *   {"driver_version": "sim-550.54.15", "cuda_version": "12.4", "reset_ms": 2000,
 *    "gpus": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200",
 *              "memory_bytes": 150754820096, "pci_bus_id": "00000000:18:00.0",
 *              "minor": 0, "numa_node": 0, "cpu_affinity": "0-55,112-167",
 *              "mig_mode": false, "persistence_mode": true,
 *              "nvlink_peers": [1, 2, 3], "pcie_switch": 0}]}
 *
 * "gpus" holds 0 to GPU_MAX entries whose indices are 0, 1, ... in order.
 * "reset_ms" (optional, 0..SIM_RESET_MS_MAX, default SIM_RESET_MS) is how
 * long gpu_reset() takes (see below).
 * The fields after pci_bus_id are optional (files without them load as
 * before): an absent int reads -1 (unknown) in gpu_info, an absent
 * cpu_affinity "", an absent nvlink_peers no NVLink. "minor" values are
 * distinct; "cpu_affinity" is a cpulist ("0-3,8,10-11"); "nvlink_peers"
 * lists other GPUs' indices, and links are symmetric: a GPU that lists a
 * peer must be listed by it. gpu_info's nvlinks is the number of peers
 * (one link each). "pcie_switch" is an opaque id shared by the GPUs behind
 * one PCIe switch. The link between two GPUs is, first that applies:
 * SELF (the same GPU), NV (peers), PIX (same pcie_switch), NODE (same
 * numa_node), SYS.
 *
 * Telemetry is computed from the GPU's model (found in its name: H200,
 * H100, A100; other names get A100-like figures) and its faults: util and
 * memory used 0 unless a "load" fault set them; temperature 35 C plus 40 C
 * at full load; power from idle to the model's TDP with util; energy
 * integrated from power over the monotonic clock since open; the model's
 * top SM and memory clocks (halved under a HW slowdown, thermal or power
 * brake reason, cut to 85% under a SW one); ECC counters, remaps and the
 * recovery action as faults left them. The simulated models remap rows
 * (Ampere and later), so the retired_* fields are -1 (NVML answers "not
 * supported" there too).
 *
 * Faults (gpu_inject, one JSON object per call, validated strictly; an
 * error names the field, the value and the reason). Every object has
 * "gpu": an index of this node, and "kind", one of:
 *
 *   {"gpu": I, "kind": "xid", "xid": N, "recovery_action": A}
 *       queues XID N (1..999) for gpu_events(). Side effects: 79 marks the
 *       GPU lost; 48 adds one uncorrectable ECC error (volatile and
 *       aggregate); 63 and 64 set remap_pending. The recovery action
 *       becomes A (0..4, optional) or else what NVIDIA's XID catalog says
 *       for N: 48, 62, 64, 95, 119, 120 -> GPU_RESET, 79 -> NODE_REBOOT,
 *       others leave it as it was.
 *   {"gpu": I, "kind": "ecc", "correctable": N, "uncorrectable": M}
 *       adds N and M (each optional, default 0) to the volatile and the
 *       aggregate ECC counters.
 *   {"gpu": I, "kind": "temperature", "celsius": C}
 *       holds the temperature at C (0..150) until a reset or clear; at 87 or
 *       more the SW and HW thermal slowdown reasons are added.
 *   {"gpu": I, "kind": "throttle", "reasons": BITS}
 *       replaces the throttle reasons (NVML's bits, 0..2^32-1).
 *   {"gpu": I, "kind": "power", "watts": W}
 *       holds the power draw at W (0..2000) instead of deriving it from util.
 *   {"gpu": I, "kind": "load", "util_pct": P, "mem_used_bytes": B}
 *       sets the workload: util P (0..100) and memory used B (0..the GPU's
 *       memory), each optional, default 0.
 *   {"gpu": I, "kind": "lost"}
 *       the GPU fell off the bus: gpu_sample() answers lost = 1 (gpu_info()
 *       still answers) and gpu_reset() fails, until a "clear".
 *   {"gpu": I, "kind": "remap", "pending": 0|1, "failure": 0|1,
 *    "correctable": N, "uncorrectable": M}
 *       sets the row remapper's state; each field optional, absent ones
 *       stay as they are.
 *   {"gpu": I, "kind": "recovery_action", "action": A}
 *       sets the recovery action (0..4, enum gpu_recovery).
 *   {"gpu": I, "kind": "clear"}
 *       back to healthy and idle: every fault above undone, aggregate ECC
 *       counters and remaps included. Queued events stay queued.
 *
 * gpu_reset() of a lost GPU fails at once with ERR_UPSTREAM. Otherwise it
 * takes reset_ms, as a reset does on hardware (nvidia-smi --gpu-reset
 * returns after seconds), and the GPU shows its faults until then; it
 * fails with ERR_UPSTREAM if the GPU was lost meanwhile, else clears the
 * volatile ECC counters, pending remaps, the recovery action, a held
 * temperature and the throttle reasons, and returns 0; aggregate counters,
 * remapped rows, a remap failure, load and power stay, as on hardware.
 *
 * Threading: unlike the other backends, the sim is thread-safe (a mutex
 * inside guards its state), and gpu_events() waits without holding it, on
 * a pipe that every injected XID writes a byte to: one thread may block
 * in gpu_events() while another injects faults, samples or resets; a
 * reset waits its reset_ms without holding it either. The
 * event queue holds the newest SIM_EVENTS_MAX events.
 *
 * The backend reports its name as "sim" everywhere (node facts, metrics) so
 * that simulated GPUs are never mistaken for hardware.
 */
#ifndef ANVIL_GPU_SIM_H
#define ANVIL_GPU_SIM_H

#include "gpu/gpu.h"

#define SIM_EVENTS_MAX 1024
/* How long a simulated reset takes unless the file says ("reset_ms"):
 * long enough to see a quarantined GPU in `anvil nodes show` and the
 * metrics. The cap keeps an agent's shutdown, which waits for a reset
 * under way, bounded. */
#define SIM_RESET_MS     2000
#define SIM_RESET_MS_MAX 60000

extern const struct gpu_backend_ops gpu_sim_ops;

/* Writes a sim file for node node_index (>= 0) with count GPUs (0..GPU_MAX)
 * of the given model ("H200", "A100", a full name, or NULL for H200), with
 * UUIDs that are deterministic and distinct per node and GPU, and the
 * model's memory size (80 GiB for a model it does not know). The board
 * looks like an HGX one: minor = index; the first half of the GPUs on NUMA
 * node 0 (CPUs 0-55,112-167), the second half on node 1 (56-111,168-223);
 * two GPUs per PCIe switch (pcie_switch = index / 2); MIG disabled,
 * persistence mode on. NVLink joins islands of nvlink_group_size GPUs
 * (0..GPU_MAX; 0: no NVLink; the last island may be smaller). Real HGX
 * boards join all 8 GPUs through NVSwitches; islands are a simplification
 * that lets tests see NVLink-aware placement. Written atomically. 0,
 * ERR_INVALID or a negative errno. */
int gpu_sim_write_file_topo(const char *path, int count, const char *model, int node_index,
                            int nvlink_group_size);

/* gpu_sim_write_file_topo() with NVLink islands of 4 (GPUs 0-3 and 4-7 on
 * an 8-GPU node). */
int gpu_sim_write_file(const char *path, int count, const char *model, int node_index);

#endif
