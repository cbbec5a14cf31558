#include "gpu/nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/util.h"

/* NVML's ABI as its public nvml.h (API version 12) declares it, written out
 * here so that nothing of NVIDIA's is needed at build time. Enums are ints
 * in the C ABI; the static asserts below pin the struct layouts. */

/* nvmlReturn_t */
#define NVML_SUCCESS                  0
#define NVML_ERROR_INVALID_ARGUMENT   2
#define NVML_ERROR_NOT_SUPPORTED      3
#define NVML_ERROR_NO_PERMISSION      4
#define NVML_ERROR_NOT_FOUND          6
#define NVML_ERROR_INSUFFICIENT_SIZE  7
#define NVML_ERROR_DRIVER_NOT_LOADED  9
#define NVML_ERROR_TIMEOUT            10
#define NVML_ERROR_LIBRARY_NOT_FOUND  12
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_GPU_IS_LOST        15
#define NVML_ERROR_IN_USE             19

#define NVML_FEATURE_ENABLED                1 /* nvmlEnableState_t */
#define NVML_TEMPERATURE_GPU                0 /* nvmlTemperatureSensors_t */
#define NVML_CLOCK_SM                       1 /* nvmlClockType_t */
#define NVML_CLOCK_MEM                      2 /* nvmlClockType_t */
#define NVML_MEMORY_ERROR_TYPE_CORRECTED    0 /* nvmlMemoryErrorType_t */
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED  1 /* nvmlMemoryErrorType_t */
#define NVML_VOLATILE_ECC                   0 /* nvmlEccCounterType_t */
#define NVML_AGGREGATE_ECC                  1 /* nvmlEccCounterType_t */
#define NVML_RETIRED_MULTIPLE_SBE           0 /* NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS */
#define NVML_RETIRED_DBE                    1 /* NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR */
#define NVML_NVLINK_MAX_LINKS               18
#define NVML_EVENT_XID_CRITICAL_ERROR       0x8ull /* nvmlEventTypeXidCriticalError */
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230

/* nvmlGpuTopologyLevel_t */
#define NVML_TOPOLOGY_INTERNAL   0
#define NVML_TOPOLOGY_SINGLE     10
#define NVML_TOPOLOGY_MULTIPLE   20
#define NVML_TOPOLOGY_HOSTBRIDGE 30
#define NVML_TOPOLOGY_NODE       40
#define NVML_TOPOLOGY_SYSTEM     50

/* nvmlValueType_t */
#define NVML_VALUE_TYPE_DOUBLE             0
#define NVML_VALUE_TYPE_UNSIGNED_INT       1
#define NVML_VALUE_TYPE_UNSIGNED_LONG      2
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
#define NVML_VALUE_TYPE_SIGNED_LONG_LONG   4
#define NVML_VALUE_TYPE_SIGNED_INT         5
#define NVML_VALUE_TYPE_UNSIGNED_SHORT     6

#define NVML_UUID_SIZE    96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define NVML_NAME_SIZE    96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define NVML_VERSION_SIZE 80 /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
#define NVML_CPUSET_WORDS 64 /* unsigned longs: 4096 CPUs */

/* Handles: nvmlDevice_t and nvmlEventSet_t are pointers to these. */
struct nvmlDevice_st;
struct nvmlEventSet_st;

struct nvml_memory { /* nvmlMemory_t */
	unsigned long long total, free, used;
};

struct nvml_pci_info { /* nvmlPciInfo_t */
	char bus_id_legacy[16];
	unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
};

struct nvml_utilization { /* nvmlUtilization_t */
	unsigned int gpu, memory;
};

struct nvml_event_data { /* nvmlEventData_t, as nvmlEventSetWait_v2 fills it */
	struct nvmlDevice_st *device;
	unsigned long long event_type;
	unsigned long long event_data; /* the XID */
	unsigned int gpu_instance_id, compute_instance_id;
};

union nvml_value { /* nvmlValue_t */
	double d;
	int si;
	unsigned int ui;
	unsigned long ul;
	unsigned long long ull;
	long long sll;
	unsigned short us;
};

struct nvml_field_value { /* nvmlFieldValue_t */
	unsigned int field_id;
	unsigned int scope_id;
	long long timestamp;
	long long latency_usec;
	int value_type;
	int nvml_return;
	union nvml_value value;
};

_Static_assert(sizeof(struct nvml_memory) == 24, "nvmlMemory_t");
_Static_assert(sizeof(struct nvml_pci_info) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(struct nvml_utilization) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(struct nvml_event_data) == 32, "nvmlEventData_t");
_Static_assert(sizeof(struct nvml_field_value) == 40, "nvmlFieldValue_t");

#define DEV struct nvmlDevice_st *

/* The functions we use, with NVML's signatures. */
struct nvml_fns {
	int (*init)(void);
	int (*shutdown)(void);
	const char *(*error_string)(int result);
	int (*driver_version)(char *version, unsigned int length);
	int (*cuda_version)(int *version);
	int (*count)(unsigned int *count);
	int (*handle_by_index)(unsigned int index, struct nvmlDevice_st **device);
	int (*uuid)(DEV, char *uuid, unsigned int length);
	int (*name)(DEV, char *name, unsigned int length);
	int (*memory)(DEV, struct nvml_memory *memory);
	int (*pci_info)(DEV, struct nvml_pci_info *pci);
	int (*minor)(DEV, unsigned int *minor);
	int (*mig_mode)(DEV, unsigned int *current, unsigned int *pending);
	int (*persistence_mode)(DEV, int *mode);
	int (*cpu_affinity)(DEV, unsigned int words, unsigned long *set);
	int (*numa_node)(DEV, unsigned int *node);
	int (*common_ancestor)(DEV, DEV, int *level);
	int (*nvlink_state)(DEV, unsigned int link, int *active);
	int (*nvlink_remote_pci)(DEV, unsigned int link, struct nvml_pci_info *pci);
	int (*utilization)(DEV, struct nvml_utilization *util);
	int (*temperature)(DEV, int sensor, unsigned int *temp);
	int (*power_usage)(DEV, unsigned int *milliwatts);
	int (*energy)(DEV, unsigned long long *millijoules);
	int (*clock_info)(DEV, int type, unsigned int *mhz);
	int (*clocks_event_reasons)(DEV, unsigned long long *reasons);
	int (*total_ecc_errors)(DEV, int error_type, int counter_type, unsigned long long *count);
	int (*retired_pages)(DEV, int cause, unsigned int *count, unsigned long long *addresses);
	int (*retired_pending)(DEV, int *pending);
	int (*remapped_rows)(DEV, unsigned int *corrected, unsigned int *uncorrected,
	                     unsigned int *pending, unsigned int *failure);
	int (*field_values)(DEV, int count, struct nvml_field_value *values);
	int (*event_set_create)(struct nvmlEventSet_st **set);
	int (*register_events)(DEV, unsigned long long types, struct nvmlEventSet_st *set);
	int (*event_set_wait)(struct nvmlEventSet_st *set, struct nvml_event_data *data,
	                      unsigned int timeout_ms);
	int (*event_set_free)(struct nvmlEventSet_st *set);
};

static const struct nvml_sym {
	const char *name;
	const char *fallback; /* the older name of the same function */
	size_t offset;
	int required;
} nvml_syms[] = {
#define S(name, field, required)                                                                   \
	{                                                                                          \
		name, NULL, offsetof(struct nvml_fns, field), required                             \
	}
        S("nvmlInit_v2", init, 1),
        S("nvmlDeviceGetCount_v2", count, 1),
        S("nvmlDeviceGetHandleByIndex_v2", handle_by_index, 1),
        S("nvmlDeviceGetUUID", uuid, 1),
        S("nvmlDeviceGetName", name, 1),
        S("nvmlDeviceGetMemoryInfo", memory, 1),
        S("nvmlShutdown", shutdown, 0),
        S("nvmlErrorString", error_string, 0),
        S("nvmlSystemGetDriverVersion", driver_version, 0),
        S("nvmlSystemGetCudaDriverVersion_v2", cuda_version, 0),
        S("nvmlDeviceGetPciInfo_v3", pci_info, 0),
        S("nvmlDeviceGetMinorNumber", minor, 0),
        S("nvmlDeviceGetMigMode", mig_mode, 0),
        S("nvmlDeviceGetPersistenceMode", persistence_mode, 0),
        S("nvmlDeviceGetCpuAffinity", cpu_affinity, 0),
        S("nvmlDeviceGetNumaNodeId", numa_node, 0),
        S("nvmlDeviceGetTopologyCommonAncestor", common_ancestor, 0),
        S("nvmlDeviceGetNvLinkState", nvlink_state, 0),
        S("nvmlDeviceGetNvLinkRemotePciInfo_v2", nvlink_remote_pci, 0),
        S("nvmlDeviceGetUtilizationRates", utilization, 0),
        S("nvmlDeviceGetTemperature", temperature, 0),
        S("nvmlDeviceGetPowerUsage", power_usage, 0),
        S("nvmlDeviceGetTotalEnergyConsumption", energy, 0),
        S("nvmlDeviceGetClockInfo", clock_info, 0),
        {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
         offsetof(struct nvml_fns, clocks_event_reasons), 0},
        S("nvmlDeviceGetTotalEccErrors", total_ecc_errors, 0),
        S("nvmlDeviceGetRetiredPages", retired_pages, 0),
        S("nvmlDeviceGetRetiredPagesPendingStatus", retired_pending, 0),
        S("nvmlDeviceGetRemappedRows", remapped_rows, 0),
        S("nvmlDeviceGetFieldValues", field_values, 0),
        S("nvmlEventSetCreate", event_set_create, 0),
        S("nvmlDeviceRegisterEvents", register_events, 0),
        S("nvmlEventSetWait_v2", event_set_wait, 0),
        S("nvmlEventSetFree", event_set_free, 0),
#undef S
};

struct nvml_gpu {
	struct nvmlDevice_st *dev;
	struct gpu_info info;
	uint64_t peers; /* NVLink peers, by index */
	int fabric;     /* an active NVLink reaches something else: an NVSwitch */
	int nvlink_remote_n;
	struct nvml_pci_info nvlink_remote[NVML_NVLINK_MAX_LINKS];
};

struct nvml {
	void *lib;
	struct nvml_fns fn;
	int initialized;
	struct nvmlEventSet_st *events; /* NULL: no GPU could register */
	char driver_version[NVML_VERSION_SIZE];
	char cuda_version[32];
	int count;
	struct nvml_gpu gpus[GPU_MAX];
	unsigned char links[GPU_MAX][GPU_MAX]; /* enum gpu_link */
	unsigned char pcie[GPU_MAX][GPU_MAX];  /* the same without NVLink */
};

static const char *nvml_str(const struct nvml *n, int r)
{
	const char *s = n->fn.error_string ? n->fn.error_string(r) : NULL;
	return s ? s : "unknown NVML error";
}

/* Our code for an NVML error. */
static int nvml_code(int r)
{
	switch (r) {
	case NVML_SUCCESS: return 0;
	case NVML_ERROR_NOT_FOUND:
	case NVML_ERROR_DRIVER_NOT_LOADED:
	case NVML_ERROR_LIBRARY_NOT_FOUND:
	case NVML_ERROR_FUNCTION_NOT_FOUND: return ERR_NOTFOUND;
	case NVML_ERROR_NO_PERMISSION: return -EACCES;
	case NVML_ERROR_NOT_SUPPORTED: return -ENOTSUP;
	case NVML_ERROR_INVALID_ARGUMENT: return ERR_INVALID;
	case NVML_ERROR_TIMEOUT: return ERR_TIMEOUT;
	case NVML_ERROR_IN_USE: return ERR_BUSY;
	default: return ERR_UPSTREAM;
	}
}

static void nvml_free(struct nvml *n)
{
	if (!n)
		return;
	if (n->events && n->fn.event_set_free)
		n->fn.event_set_free(n->events);
	if (n->initialized && n->fn.shutdown)
		n->fn.shutdown();
	if (n->lib)
		dlclose(n->lib);
	free(n);
}

static int load_syms(struct nvml *n, const char *path, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(nvml_syms) / sizeof(nvml_syms[0]); i++) {
		const struct nvml_sym *s = &nvml_syms[i];
		void *p = dlsym(n->lib, s->name);
		if (!p && s->fallback)
			p = dlsym(n->lib, s->fallback);
		if (!p && s->required) {
			snprintf(err, errlen,
			         "gpu backend nvml: %s has no function %s (a driver too old or not "
			         "NVML): running without GPUs",
			         path, s->name);
			return ERR_NOTFOUND;
		}
		/* POSIX guarantees a function pointer fits what dlsym returns. */
		memcpy((char *)&n->fn + s->offset, &p, sizeof(p));
	}
	return 0;
}

/* "00000000:18:00.0" (domain:bus:device.function, hex) into its numbers;
 * 0 or -1. */
static int parse_bus_id(const char *s, unsigned v[4])
{
	static const char seps[4] = {':', ':', '.', '\0'};
	for (int k = 0; k < 4; k++) {
		char *end;
		errno = 0;
		unsigned long x = strtoul(s, &end, 16);
		if (end == s || *end != seps[k] || errno || x > 0xffffffffUL)
			return -1;
		v[k] = (unsigned)x;
		s = end + (k < 3);
	}
	return 0;
}

static int same_bus_id(const char *a, const char *b)
{
	unsigned va[4], vb[4];
	if (parse_bus_id(a, va) || parse_bus_id(b, vb))
		return 0;
	return memcmp(va, vb, sizeof(va)) == 0;
}

/* The NUMA node of the GPU's PCIe root, as the kernel knows it; -1. */
static int sysfs_numa_node(const char *bus_id)
{
	unsigned v[4];
	if (parse_bus_id(bus_id, v))
		return -1;
	char path[128];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", v[0], v[1],
	         v[2], v[3]);
	struct buf text;
	buf_init(&text);
	int64_t node = -1;
	if (read_file(path, 64, &text) == 0 && text.data) {
		while (text.len && (text.data[text.len - 1] == '\n'))
			text.data[--text.len] = '\0';
		if (parse_i64(text.data, -1, 1 << 20, &node) != 0)
			node = -1;
	}
	buf_cleanup(&text);
	return (int)node;
}

/* A CPU bit mask as a cpulist ("0-31,64-95"); "" if it does not fit. */
static void cpulist(const unsigned long *set, int words, char *out, size_t outlen)
{
	const int bits = (int)(8 * sizeof(unsigned long));
	size_t used = 0;
	out[0] = '\0';
	for (int c = 0; c < words * bits;) {
		if (!(set[c / bits] >> (c % bits) & 1)) {
			c++;
			continue;
		}
		int end = c;
		while (end + 1 < words * bits && (set[(end + 1) / bits] >> ((end + 1) % bits) & 1))
			end++;
		int w = end > c ? snprintf(out + used, outlen - used, "%s%d-%d", used ? "," : "", c,
		                           end)
		                : snprintf(out + used, outlen - used, "%s%d", used ? "," : "", c);
		if (w < 0 || (size_t)w >= outlen - used) {
			out[0] = '\0';
			return;
		}
		used += (size_t)w;
		c = end + 1;
	}
}

/* The optional facts of one GPU; what a driver cannot tell stays unknown. */
static void read_details(struct nvml *n, struct nvml_gpu *g)
{
	struct gpu_info *info = &g->info;
	unsigned u = 0, pending = 0;
	int mode = 0;
	struct nvml_pci_info pci;
	memset(&pci, 0, sizeof(pci));
	if (n->fn.pci_info && n->fn.pci_info(g->dev, &pci) == NVML_SUCCESS)
		snprintf(info->pci_bus_id, sizeof(info->pci_bus_id), "%.31s", pci.bus_id);
	if (n->fn.minor && n->fn.minor(g->dev, &u) == NVML_SUCCESS)
		info->minor = (int)u;
	if (n->fn.mig_mode && n->fn.mig_mode(g->dev, &u, &pending) == NVML_SUCCESS)
		info->mig_mode = u != 0;
	if (n->fn.persistence_mode && n->fn.persistence_mode(g->dev, &mode) == NVML_SUCCESS)
		info->persistence_mode = mode == NVML_FEATURE_ENABLED;
	unsigned long set[NVML_CPUSET_WORDS] = {0};
	if (n->fn.cpu_affinity &&
	    n->fn.cpu_affinity(g->dev, NVML_CPUSET_WORDS, set) == NVML_SUCCESS)
		cpulist(set, NVML_CPUSET_WORDS, info->cpu_affinity, sizeof(info->cpu_affinity));
	info->numa_node = sysfs_numa_node(info->pci_bus_id);
	if (info->numa_node < 0 && n->fn.numa_node && n->fn.numa_node(g->dev, &u) == NVML_SUCCESS)
		info->numa_node = (int)u;
	if (!n->fn.nvlink_state)
		return;
	info->nvlinks = 0;
	for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
		int active = 0;
		if (n->fn.nvlink_state(g->dev, l, &active) != NVML_SUCCESS ||
		    active != NVML_FEATURE_ENABLED)
			continue;
		info->nvlinks++;
		struct nvml_pci_info *remote = &g->nvlink_remote[g->nvlink_remote_n];
		memset(remote, 0, sizeof(*remote));
		if (!n->fn.nvlink_remote_pci ||
		    n->fn.nvlink_remote_pci(g->dev, l, remote) != NVML_SUCCESS)
			g->fabric = 1; /* active, but to what: count it with the switches */
		else
			g->nvlink_remote_n++;
	}
}

/* Reads GPU i: required facts first (an error is the whole open's). */
static int read_gpu(struct nvml *n, int i, char *err, size_t errlen)
{
	struct nvml_gpu *g = &n->gpus[i];
	struct gpu_info *info = &g->info;
	struct nvml_memory mem;
	memset(&mem, 0, sizeof(mem));
	const char *what = "nvmlDeviceGetHandleByIndex_v2";
	int r = n->fn.handle_by_index((unsigned)i, &g->dev);
	if (r == NVML_SUCCESS) {
		what = "nvmlDeviceGetUUID";
		r = n->fn.uuid(g->dev, info->uuid, sizeof(info->uuid));
	}
	if (r == NVML_SUCCESS) {
		what = "nvmlDeviceGetName";
		r = n->fn.name(g->dev, info->name, sizeof(info->name));
	}
	if (r == NVML_SUCCESS) {
		what = "nvmlDeviceGetMemoryInfo";
		r = n->fn.memory(g->dev, &mem);
	}
	if (r != NVML_SUCCESS) {
		snprintf(err, errlen, "gpu backend nvml: GPU %d: %s: %s", i, what, nvml_str(n, r));
		return r == NVML_ERROR_GPU_IS_LOST ? ERR_UPSTREAM : nvml_code(r);
	}
	info->uuid[sizeof(info->uuid) - 1] = '\0';
	info->name[sizeof(info->name) - 1] = '\0';
	info->index = i;
	info->memory_bytes = mem.total;
	info->minor = info->numa_node = info->mig_mode = info->persistence_mode = -1;
	info->nvlinks = -1;
	read_details(n, g);
	return 0;
}

static enum gpu_link link_of_level(int level)
{
	switch (level) {
	case NVML_TOPOLOGY_INTERNAL: /* two GPUs on one board: one switch */
	case NVML_TOPOLOGY_SINGLE: return GPU_LINK_PIX;
	case NVML_TOPOLOGY_MULTIPLE: return GPU_LINK_PXB;
	case NVML_TOPOLOGY_HOSTBRIDGE: return GPU_LINK_PHB;
	case NVML_TOPOLOGY_NODE: return GPU_LINK_NODE;
	default: return GPU_LINK_SYS;
	}
}

/* NVLink peers (from the remote ends read at open), then the matrix. */
static void read_topology(struct nvml *n)
{
	for (int i = 0; i < n->count; i++) {
		struct nvml_gpu *g = &n->gpus[i];
		for (int k = 0; k < g->nvlink_remote_n; k++) {
			int j = 0;
			while (j < n->count &&
			       !same_bus_id(g->nvlink_remote[k].bus_id, n->gpus[j].info.pci_bus_id))
				j++;
			if (j < n->count && j != i)
				g->peers |= 1ull << j;
			else if (j == n->count)
				g->fabric = 1;
		}
	}
	for (int i = 0; i < n->count; i++) {
		n->links[i][i] = GPU_LINK_SELF;
		n->pcie[i][i] = GPU_LINK_SELF;
		for (int j = i + 1; j < n->count; j++) {
			const struct nvml_gpu *a = &n->gpus[i], *b = &n->gpus[j];
			enum gpu_link p = GPU_LINK_SYS;
			int level = NVML_TOPOLOGY_SYSTEM;
			if (n->fn.common_ancestor &&
			    n->fn.common_ancestor(a->dev, b->dev, &level) == NVML_SUCCESS)
				p = link_of_level(level);
			enum gpu_link l = p;
			if ((a->peers >> j & 1) || (b->peers >> i & 1) || (a->fabric && b->fabric))
				l = GPU_LINK_NVLINK;
			n->links[i][j] = n->links[j][i] = (unsigned char)l;
			n->pcie[i][j] = n->pcie[j][i] = (unsigned char)p;
		}
	}
}

/* One event set for XIDs on every GPU that can report them. */
static void open_events(struct nvml *n)
{
	if (!n->fn.event_set_create || !n->fn.register_events || !n->fn.event_set_wait ||
	    !n->fn.event_set_free || n->fn.event_set_create(&n->events) != NVML_SUCCESS) {
		n->events = NULL;
		return;
	}
	int registered = 0;
	for (int i = 0; i < n->count; i++)
		registered += n->fn.register_events(n->gpus[i].dev, NVML_EVENT_XID_CRITICAL_ERROR,
		                                    n->events) == NVML_SUCCESS;
	if (!registered) {
		n->fn.event_set_free(n->events);
		n->events = NULL;
	}
}

static void read_versions(struct nvml *n)
{
	int v = 0;
	if (n->fn.driver_version &&
	    n->fn.driver_version(n->driver_version, sizeof(n->driver_version)) != NVML_SUCCESS)
		n->driver_version[0] = '\0';
	n->driver_version[sizeof(n->driver_version) - 1] = '\0';
	if (n->fn.cuda_version && n->fn.cuda_version(&v) == NVML_SUCCESS && v > 0)
		snprintf(n->cuda_version, sizeof(n->cuda_version), "%d.%d", v / 1000,
		         v % 1000 / 10);
}

/* nvmlInit_v2 and the GPU count; a node without driver or GPUs is
 * ERR_NOTFOUND, so the agent runs without GPUs. */
static int start(struct nvml *n, const char *path, char *err, size_t errlen)
{
	int r = n->fn.init();
	if (r != NVML_SUCCESS) {
		snprintf(err, errlen, "gpu backend nvml: nvmlInit_v2 of %s failed: %s", path,
		         nvml_str(n, r));
		return nvml_code(r) == ERR_NOTFOUND ? ERR_NOTFOUND : ERR_UPSTREAM;
	}
	n->initialized = 1;
	unsigned count = 0;
	r = n->fn.count(&count);
	if (r != NVML_SUCCESS) {
		snprintf(err, errlen, "gpu backend nvml: nvmlDeviceGetCount_v2 failed: %s",
		         nvml_str(n, r));
		return ERR_UPSTREAM;
	}
	if (count == 0) {
		snprintf(err, errlen, "gpu backend nvml: the NVIDIA driver reports no GPU");
		return ERR_NOTFOUND;
	}
	/* More than GPU_MAX is no machine we know; the first GPU_MAX serve. */
	n->count = count > GPU_MAX ? GPU_MAX : (int)count;
	return 0;
}

static int nvml_open(const char *arg, void **state, char *err, size_t errlen)
{
	const char *path = arg ? arg : "libnvidia-ml.so.1";
	struct nvml *n = xcalloc(1, sizeof(*n));
	int rc = 0;
	n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		snprintf(
		        err, errlen,
		        "gpu backend nvml: cannot load %s (%.200s): no NVIDIA driver on this node, "
		        "running without GPUs",
		        path, dlerror());
		rc = ERR_NOTFOUND;
		goto out;
	}
	rc = load_syms(n, path, err, errlen);
	if (!rc)
		rc = start(n, path, err, errlen);
	for (int i = 0; !rc && i < n->count; i++)
		rc = read_gpu(n, i, err, errlen);
	if (rc)
		goto out;
	read_topology(n);
	open_events(n);
	read_versions(n);
	*state = n;
	n = NULL;
out:
	nvml_free(n);
	return rc;
}

static int nvml_count(void *state)
{
	return ((struct nvml *)state)->count;
}

static int nvml_info(void *state, int index, struct gpu_info *out)
{
	*out = ((struct nvml *)state)->gpus[index].info;
	return 0;
}

static const char *nvml_driver_version(void *state)
{
	return ((struct nvml *)state)->driver_version;
}

static const char *nvml_cuda_version(void *state)
{
	return ((struct nvml *)state)->cuda_version;
}

static enum gpu_link nvml_link(void *state, int a, int b)
{
	return (enum gpu_link)((struct nvml *)state)->links[a][b];
}

static enum gpu_link nvml_pcie(void *state, int a, int b)
{
	return (enum gpu_link)((struct nvml *)state)->pcie[a][b];
}

/* 1 when r is success; notes a lost GPU on the way. */
static int got(int r, int *lost)
{
	if (r == NVML_ERROR_GPU_IS_LOST)
		*lost = 1;
	return r == NVML_SUCCESS;
}

static int64_t field_int(const struct nvml_field_value *f)
{
	switch (f->value_type) {
	case NVML_VALUE_TYPE_DOUBLE: return (int64_t)f->value.d;
	case NVML_VALUE_TYPE_UNSIGNED_INT: return f->value.ui;
	case NVML_VALUE_TYPE_UNSIGNED_LONG: return (int64_t)f->value.ul;
	case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return (int64_t)f->value.ull;
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return f->value.sll;
	case NVML_VALUE_TYPE_SIGNED_INT: return f->value.si;
	case NVML_VALUE_TYPE_UNSIGNED_SHORT: return f->value.us;
	default: return -1;
	}
}

/* Utilization, memory, temperature, power, energy, clocks, throttling. */
static void sample_activity(struct nvml *n, DEV d, struct gpu_sample *out, int *lost)
{
	struct nvml_fns *fn = &n->fn;
	struct nvml_memory mem;
	struct nvml_utilization util;
	unsigned u = 0;
	unsigned long long ull = 0;
	if (got(fn->memory(d, &mem), lost)) {
		out->mem_used_bytes = (int64_t)mem.used;
		out->mem_free_bytes = (int64_t)mem.free;
	}
	if (fn->utilization && got(fn->utilization(d, &util), lost)) {
		out->util_gpu_pct = util.gpu;
		out->util_mem_pct = util.memory;
	}
	if (fn->temperature && got(fn->temperature(d, NVML_TEMPERATURE_GPU, &u), lost))
		out->temp_c = u;
	if (fn->power_usage && got(fn->power_usage(d, &u), lost))
		out->power_mw = u;
	if (fn->energy && got(fn->energy(d, &ull), lost))
		out->energy_mj = (int64_t)ull;
	if (fn->clock_info && got(fn->clock_info(d, NVML_CLOCK_SM, &u), lost))
		out->sm_clock_mhz = u;
	if (fn->clock_info && got(fn->clock_info(d, NVML_CLOCK_MEM, &u), lost))
		out->mem_clock_mhz = u;
	if (fn->clocks_event_reasons && got(fn->clocks_event_reasons(d, &ull), lost))
		out->throttle_reasons = (int64_t)ull;
}

static int64_t retired_count(struct nvml *n, DEV d, int cause, int *lost)
{
	unsigned count = 0;
	/* A count of 0 asks for the size: INSUFFICIENT_SIZE says some exist. */
	int r = n->fn.retired_pages(d, cause, &count, NULL);
	if (r == NVML_ERROR_INSUFFICIENT_SIZE)
		r = NVML_SUCCESS;
	return got(r, lost) ? (int64_t)count : -1;
}

/* ECC counters, page retirement, row remapping, the recovery action. */
static void sample_memory_health(struct nvml *n, DEV d, struct gpu_sample *out, int *lost)
{
	struct nvml_fns *fn = &n->fn;
	static const struct {
		int type, counter;
		size_t offset;
	} ecc[] = {
	        {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
	         offsetof(struct gpu_sample, ecc_sbe_volatile)},
	        {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
	         offsetof(struct gpu_sample, ecc_dbe_volatile)},
	        {NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC,
	         offsetof(struct gpu_sample, ecc_sbe_aggregate)},
	        {NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC,
	         offsetof(struct gpu_sample, ecc_dbe_aggregate)},
	};
	for (size_t i = 0; fn->total_ecc_errors && i < sizeof(ecc) / sizeof(ecc[0]); i++) {
		unsigned long long v = 0;
		if (got(fn->total_ecc_errors(d, ecc[i].type, ecc[i].counter, &v), lost)) {
			int64_t x = (int64_t)v;
			memcpy((char *)out + ecc[i].offset, &x, sizeof(x));
		}
	}
	if (fn->retired_pages) {
		out->retired_sbe = retired_count(n, d, NVML_RETIRED_MULTIPLE_SBE, lost);
		out->retired_dbe = retired_count(n, d, NVML_RETIRED_DBE, lost);
	}
	int pending = 0;
	if (fn->retired_pending && got(fn->retired_pending(d, &pending), lost))
		out->retired_pending = pending == NVML_FEATURE_ENABLED;
	unsigned corr = 0, unc = 0, rpending = 0, failure = 0;
	if (fn->remapped_rows &&
	    got(fn->remapped_rows(d, &corr, &unc, &rpending, &failure), lost)) {
		out->remap_correctable = corr;
		out->remap_uncorrectable = unc;
		out->remap_pending = rpending != 0;
		out->remap_failure = failure != 0;
	}
	struct nvml_field_value fv;
	memset(&fv, 0, sizeof(fv));
	fv.field_id = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
	if (fn->field_values && got(fn->field_values(d, 1, &fv), lost) && got(fv.nvml_return, lost))
		out->recovery_action = field_int(&fv);
}

static int nvml_sample(void *state, int index, struct gpu_sample *out)
{
	struct nvml *n = state;
	DEV d = n->gpus[index].dev;
	const struct gpu_sample unknown = *out;
	int lost = 0;
	sample_activity(n, d, out, &lost);
	if (!lost)
		sample_memory_health(n, d, out, &lost);
	if (lost) {
		/* Whatever answered before the loss is no reading of this GPU. */
		*out = unknown;
		out->lost = 1;
	}
	return 0;
}

static int index_of(const struct nvml *n, const struct nvmlDevice_st *d)
{
	for (int i = 0; i < n->count; i++)
		if (n->gpus[i].dev == d)
			return i;
	return -1;
}

static int nvml_events(void *state, int timeout_ms, struct gpu_event *out, int max)
{
	struct nvml *n = state;
	if (!n->events)
		return -ENOSYS;
	int count = 0;
	unsigned wait = (unsigned)timeout_ms;
	while (count < max) {
		struct nvml_event_data data;
		memset(&data, 0, sizeof(data));
		int r = n->fn.event_set_wait(n->events, &data, wait);
		if (r == NVML_ERROR_TIMEOUT)
			break;
		if (r != NVML_SUCCESS)
			return count ? count : nvml_code(r);
		wait = 0; /* one wait; then only what is already there */
		if (!(data.event_type & NVML_EVENT_XID_CRITICAL_ERROR))
			continue;
		out[count++] = (struct gpu_event){
		        .index = index_of(n, data.device),
		        .xid = data.event_data,
		        .wall_ms = wall_ms(),
		};
	}
	return count;
}

extern char **environ;

/* Runs argv with stdout and stderr into out (at most cap bytes kept);
 * the exit status as waitpid gives it, or a negative errno. */
static int run_capture(char *const argv[], struct buf *out, size_t cap)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (rc != 0) {
		close(fds[0]);
		return -rc;
	}
	char chunk[512];
	ssize_t got_n;
	while ((got_n = read(fds[0], chunk, sizeof(chunk))) != 0) {
		if (got_n < 0 && errno == EINTR)
			continue;
		if (got_n < 0)
			break;
		if (out->len < cap)
			buf_add(out, chunk,
			        (size_t)got_n < cap - out->len ? (size_t)got_n : cap - out->len);
	}
	close(fds[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return status;
}

static int nvml_reset(void *state, int index, char *err, size_t errlen)
{
	struct nvml *n = state;
	const char *bus = n->gpus[index].info.pci_bus_id;
	char *argv[] = {"nvidia-smi", "--gpu-reset", "-i", (char *)bus, NULL};
	struct buf output;
	buf_init(&output);
	int st = run_capture(argv, &output, 4096);
	int rc = 0;
	if (st < 0) {
		snprintf(err, errlen, "gpu %d: cannot run nvidia-smi: %s", index, strerror(-st));
		rc = st;
	} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		const char *line = output.len ? output.data : "no output";
		size_t len = strcspn(line, "\n");
		snprintf(err, errlen, "gpu %d: nvidia-smi --gpu-reset -i %s failed (%s %d): %.*s",
		         index, bus, WIFEXITED(st) ? "exit" : "signal",
		         WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
		         (int)(len > 300 ? 300 : len), line);
		rc = strstr(output.data ? output.data : "", "in use") ? ERR_BUSY : ERR_UPSTREAM;
	}
	buf_cleanup(&output);
	return rc;
}

static void nvml_close(void *state)
{
	nvml_free(state);
}

const struct gpu_backend_ops gpu_nvml_ops = {
        .name = "nvml",
        .open = nvml_open,
        .count = nvml_count,
        .info = nvml_info,
        .driver_version = nvml_driver_version,
        .cuda_version = nvml_cuda_version,
        .link = nvml_link,
        .pcie = nvml_pcie,
        .sample = nvml_sample,
        .events = nvml_events,
        .reset = nvml_reset,
        .inject = NULL,
        .close = nvml_close,
};
