/* gpu.h - the GPU backend interface: discovery, topology, telemetry,
 * events and recovery of a node's GPUs.
 *
 * A backend is a table of operations (struct gpu_backend_ops) behind an
 * opaque handle. gpu_open() picks one from a spec string:
 *
 *   "sim:PATH"   the simulated backend (gpu/sim.h): GPUs described by a JSON
 *                file, faults injected at run time; its name is "sim" so it
 *                can never pass for hardware
 *   "none"       a node without GPUs (backend name "none")
 *   "nvml"       NVIDIA's NVML, loaded with dlopen("libnvidia-ml.so.1")
 *   "nvml:PATH"  NVML from another library file (tests load a fake one)
 *
 * The caller owns the handle and frees it with gpu_close(). Backends are
 * not thread-safe: one thread uses a handle at a time (the agent holds a
 * mutex). Inventory and topology are read once at open; samples and events
 * are read when asked.
 */
#ifndef ANVIL_GPU_H
#define ANVIL_GPU_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define GPU_MAX 64

/* How two GPUs are connected, closest first: NVML's topology levels (the
 * nvidia-smi topo -m names in comments), with a direct NVLink ahead of all. */
enum gpu_link {
	GPU_LINK_SELF = 0, /* the same GPU ("X") */
	GPU_LINK_NVLINK,   /* at least one direct NVLink ("NV#") */
	GPU_LINK_PIX,      /* one PCIe switch (NVML_TOPOLOGY_SINGLE) */
	GPU_LINK_PXB,      /* several PCIe switches (NVML_TOPOLOGY_MULTIPLE) */
	GPU_LINK_PHB,      /* one PCIe host bridge (NVML_TOPOLOGY_HOSTBRIDGE) */
	GPU_LINK_NODE,     /* one NUMA node, across host bridges (NVML_TOPOLOGY_NODE) */
	GPU_LINK_SYS,      /* across NUMA nodes (NVML_TOPOLOGY_SYSTEM) */
};

/* "SELF", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"; "?" for anything else. */
const char *gpu_link_name(enum gpu_link l);

/* What never changes while the node runs. Strings are "" when unknown,
 * ints -1 when unknown or unsupported. */
struct gpu_info {
	int index;
	char uuid[96];
	char name[96];
	uint64_t memory_bytes;
	char pci_bus_id[32];    /* "00000000:18:00.0" as NVML writes it */
	int minor;              /* N of /dev/nvidiaN */
	int numa_node;          /* NUMA node of the GPU's PCIe root */
	char cpu_affinity[256]; /* the CPUs close to it, as a cpulist "0-31,64-95" */
	int mig_mode;           /* 1 enabled, 0 disabled, -1 unsupported */
	int persistence_mode;   /* 1 enabled, 0 disabled, -1 unknown */
	int nvlinks;            /* NVLink links in state active */
};

/* NVML's GPU recovery action (nvmlDeviceGetFieldValues with
 * NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): what the driver says it needs. */
enum gpu_recovery {
	GPU_RECOVERY_NONE = 0,
	GPU_RECOVERY_GPU_RESET = 1,
	GPU_RECOVERY_NODE_REBOOT = 2,
	GPU_RECOVERY_DRAIN_P2P = 3,
	GPU_RECOVERY_DRAIN_AND_RESET = 4,
};

/* One reading of a GPU. A counter or value the GPU does not support is
 * -1 (the int64 fields) so exporters can leave it out. */
struct gpu_sample {
	/* 1 when the GPU fell off the bus (NVML_ERROR_GPU_IS_LOST): nothing
	 * below is meaningful then. */
	int lost;
	int64_t util_gpu_pct;   /* nvmlDeviceGetUtilizationRates .gpu */
	int64_t util_mem_pct;   /* ... .memory */
	int64_t mem_used_bytes; /* nvmlDeviceGetMemoryInfo */
	int64_t mem_free_bytes;
	int64_t temp_c;            /* NVML_TEMPERATURE_GPU */
	int64_t power_mw;          /* nvmlDeviceGetPowerUsage, milliwatts */
	int64_t energy_mj;         /* nvmlDeviceGetTotalEnergyConsumption, millijoules */
	int64_t sm_clock_mhz;      /* NVML_CLOCK_SM */
	int64_t mem_clock_mhz;     /* NVML_CLOCK_MEM */
	int64_t throttle_reasons;  /* nvmlDeviceGetCurrentClocksEventReasons bits */
	int64_t ecc_sbe_volatile;  /* corrected, since the driver loaded */
	int64_t ecc_dbe_volatile;  /* uncorrected, since the driver loaded */
	int64_t ecc_sbe_aggregate; /* corrected, lifetime */
	int64_t ecc_dbe_aggregate; /* uncorrected, lifetime */
	int64_t retired_sbe;       /* pages retired (pre-Ampere) */
	int64_t retired_dbe;
	int64_t retired_pending;   /* 1 when a retirement waits for a reset */
	int64_t remap_correctable; /* rows remapped (Ampere and later) */
	int64_t remap_uncorrectable;
	int64_t remap_pending;   /* 1 when a remap waits for a reset */
	int64_t remap_failure;   /* 1 when a remap failed: the GPU must be replaced */
	int64_t recovery_action; /* enum gpu_recovery, -1 if unsupported */
};

/* NVML's throttle (clocks event) reason bits that gpu_sample uses. */
#define GPU_THROTTLE_SW_POWER_CAP   0x4ull
#define GPU_THROTTLE_HW_SLOWDOWN    0x8ull
#define GPU_THROTTLE_SW_THERMAL     0x20ull
#define GPU_THROTTLE_HW_THERMAL     0x40ull
#define GPU_THROTTLE_HW_POWER_BRAKE 0x80ull

/* A critical event (NVML's nvmlEventTypeXidCriticalError). */
struct gpu_event {
	int index;       /* the GPU, -1 when NVML could not say */
	uint64_t xid;    /* the XID code */
	int64_t wall_ms; /* when it was read */
};

/* What every backend implements. open() gets the text after "name:" (or
 * NULL) and returns its private state; errors go to err as one sentence.
 * Optional operations may be NULL; the gpu_* wrappers answer for them. The
 * wrappers check indices before calling an operation, and sample() gets
 * out pre-filled as "nothing known" (lost 0, every int64 field -1). */
struct gpu_backend_ops {
	const char *name;
	int (*open)(const char *arg, void **state, char *err, size_t errlen);
	int (*count)(void *state);
	int (*info)(void *state, int index, struct gpu_info *out);
	const char *(*driver_version)(void *state);
	const char *(*cuda_version)(void *state);
	/* optional: the rest */
	enum gpu_link (*link)(void *state, int a, int b);
	enum gpu_link (*pcie)(void *state, int a, int b); /* link() without NVLink */
	int (*sample)(void *state, int index, struct gpu_sample *out);
	int (*events)(void *state, int timeout_ms, struct gpu_event *out, int max);
	int (*reset)(void *state, int index, char *err, size_t errlen);
	int (*inject)(void *state, const json_t *fault, char *err, size_t errlen);
	void (*close)(void *state);
};

struct gpu_backend;

/* Opens the backend named by spec (see above); 0, ERR_INVALID (unknown
 * spec or bad file, with the reason in err), ERR_NOTFOUND (nvml: the
 * library, one of its required functions or any GPU is absent, with the
 * reason in err as one sentence: a node without GPUs), ERR_UPSTREAM (nvml:
 * the driver failed otherwise) or a negative errno. */
int gpu_open(const char *spec, struct gpu_backend **out, char *err, size_t errlen);
void gpu_close(struct gpu_backend *b);

const char *gpu_backend_name(const struct gpu_backend *b);
int gpu_count(const struct gpu_backend *b);
/* 0, or ERR_NOTFOUND when index is not in [0, gpu_count). */
int gpu_info(const struct gpu_backend *b, int index, struct gpu_info *out);
const char *gpu_driver_version(const struct gpu_backend *b);
const char *gpu_cuda_version(const struct gpu_backend *b);

/* The link between GPUs a and b (GPU_LINK_SELF when a == b; GPU_LINK_SYS
 * when the backend cannot tell or an index is out of range). */
enum gpu_link gpu_link_between(const struct gpu_backend *b, int a, int bidx);

/* The PCIe relationship of GPUs a and b, whatever NVLink joins them
 * (PIX, PXB, PHB, NODE, SYS; SELF when a == b); GPU_LINK_SYS when the
 * backend cannot tell. What ranks GPUs within an NVLink group. */
enum gpu_link gpu_pcie_between(const struct gpu_backend *b, int a, int bidx);

/* Reads GPU index now. 0; ERR_NOTFOUND for a bad index; -ENOSYS when the
 * backend has no telemetry. A lost GPU is 0 with out->lost = 1. */
int gpu_sample(struct gpu_backend *b, int index, struct gpu_sample *out);

/* Waits up to timeout_ms (0: do not wait) for critical events and copies up
 * to max (>= 1) of them into out. The count (0 on timeout), or a negative
 * code (-ENOSYS when the backend has none, -EINVAL for max < 1,
 * ERR_UPSTREAM when the driver failed). */
int gpu_events(struct gpu_backend *b, int timeout_ms, struct gpu_event *out, int max);

/* Resets GPU index (nvml: nvidia-smi --gpu-reset; sim: clears its faults).
 * 0, ERR_NOTFOUND, ERR_BUSY (in use), -ENOSYS (the backend cannot), or
 * another error (ERR_UPSTREAM: the reset failed), always with err set. */
int gpu_reset(struct gpu_backend *b, int index, char *err, size_t errlen);

/* Injects a fault (sim only; the object's format is in gpu/sim.h). 0,
 * ERR_INVALID with the field and reason in err, or -ENOSYS for a backend
 * that is real hardware. */
int gpu_inject(struct gpu_backend *b, const json_t *fault, char *err, size_t errlen);

/* Groups of GPUs that share NVLink (connected components of NVLINK links),
 * else a PCIe switch (PIX/PXB), else a NUMA node (NODE/PHB), as bit masks
 * by index: what the scheduler packs multi-GPU tasks into. Returns the
 * number of groups written (<= max). Every GPU is in exactly one group. */
int gpu_groups(const struct gpu_backend *b, uint64_t *groups, int max);

/* The inventory as JSON, an array with one object per GPU: the gpu_info
 * fields by name (an int that is -1 and an empty cpu_affinity are left
 * out; index, uuid, name, memory_bytes and pci_bus_id are always there)
 * plus "links", the gpu_link_name() to every GPU by index ("SELF" at its
 * own): what the agent reports, the facts' GPU entries of proto/wire.h
 * (wire_gpu), built through that table. The caller owns the result. */
json_t *gpu_inventory_json(const struct gpu_backend *b);

/* One sample as JSON: "lost" (true or false), then, unless lost, the
 * int64 fields named as in struct gpu_sample, -1 left out. The caller owns
 * the result. */
json_t *gpu_sample_json(const struct gpu_sample *s);

#endif
