/* fake_nvml.c - a stand-in libnvidia-ml for the NVML backend's tests.
 *
 * It exports NVML's functions by their exact names and signatures (written
 * out here from NVIDIA's nvml.h, independently of src/gpu/nvml.c, so that a
 * layout mistake on one side shows) over two fake GPUs:
 *
 *   GPU 0  "NVIDIA H200", bus 0000BEEF:18:00.0, NUMA 0, CPUs 0-3,8
 *   GPU 1  "NVIDIA H200", bus 0000BEEF:2A:00.0, NUMA 1, CPUs 64-67,
 *          recovery action GPU_RESET, SW power cap throttling, remaps pending
 *
 * joined by one NVLink (link 0 of each), with one event set whose queue
 * holds a P-state event of GPU 0 and then XID 48 of GPU 1. The bus domain
 * 0xBEEF exists on no machine, so sysfs knows nothing of these GPUs and the
 * NUMA node comes from nvmlDeviceGetNumaNodeId. Like drivers older than
 * r535 it has nvmlDeviceGetCurrentClocksThrottleReasons but not
 * ...ClocksEventReasons, and like Ampere and later no page retirement.
 *
 * Environment, read at each call: FAKE_NVML_LOST=I makes GPU I answer
 * NVML_ERROR_GPU_IS_LOST to everything; FAKE_NVML_COUNT=N reports N GPUs
 * (0..2); FAKE_NVML_INIT_FAIL=1 makes nvmlInit_v2 answer
 * NVML_ERROR_DRIVER_NOT_LOADED; FAKE_NVML_NO_NVLINK=1 makes every NVLink
 * inactive (the topology then comes from nvmlDeviceGetTopologyCommonAncestor:
 * one PCIe switch). Built with FAKE_NVML_OLD it lacks
 * nvmlDeviceGetMemoryInfo, a required function.
 */
#include <stdlib.h>
#include <string.h>

enum {
	SUCCESS = 0,
	ERROR_UNINITIALIZED = 1,
	ERROR_INVALID_ARGUMENT = 2,
	ERROR_NOT_SUPPORTED = 3,
	ERROR_DRIVER_NOT_LOADED = 9,
	ERROR_TIMEOUT = 10,
	ERROR_GPU_IS_LOST = 15,
};

struct nvmlDevice_st {
	int index;
};
struct nvmlEventSet_st {
	int next; /* the next queued event */
	int registered;
};

struct fake_memory {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
};

struct fake_pci {
	char busIdLegacy[16];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[32];
};

struct fake_utilization {
	unsigned int gpu;
	unsigned int memory;
};

struct fake_event_data {
	struct nvmlDevice_st *device;
	unsigned long long eventType;
	unsigned long long eventData;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
};

union fake_value {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	signed long long sllVal;
	unsigned short usVal;
};

struct fake_field_value {
	unsigned int fieldId;
	unsigned int scopeId;
	long long timestamp;
	long long latencyUsec;
	int valueType;
	int nvmlReturn;
	union fake_value value;
};

#define DEV struct nvmlDevice_st *

int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int result);
int nvmlSystemGetDriverVersion(char *version, unsigned int length);
int nvmlSystemGetCudaDriverVersion_v2(int *version);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, DEV *device);
int nvmlDeviceGetUUID(DEV d, char *uuid, unsigned int length);
int nvmlDeviceGetName(DEV d, char *name, unsigned int length);
int nvmlDeviceGetMemoryInfo(DEV d, struct fake_memory *memory);
int nvmlDeviceGetPciInfo_v3(DEV d, struct fake_pci *pci);
int nvmlDeviceGetMinorNumber(DEV d, unsigned int *minor);
int nvmlDeviceGetMigMode(DEV d, unsigned int *current, unsigned int *pending);
int nvmlDeviceGetPersistenceMode(DEV d, int *mode);
int nvmlDeviceGetCpuAffinity(DEV d, unsigned int size, unsigned long *set);
int nvmlDeviceGetNumaNodeId(DEV d, unsigned int *node);
int nvmlDeviceGetTopologyCommonAncestor(DEV a, DEV b, int *level);
int nvmlDeviceGetNvLinkState(DEV d, unsigned int link, int *active);
int nvmlDeviceGetNvLinkRemotePciInfo_v2(DEV d, unsigned int link, struct fake_pci *pci);
int nvmlDeviceGetUtilizationRates(DEV d, struct fake_utilization *util);
int nvmlDeviceGetTemperature(DEV d, int sensor, unsigned int *temp);
int nvmlDeviceGetPowerUsage(DEV d, unsigned int *power);
int nvmlDeviceGetTotalEnergyConsumption(DEV d, unsigned long long *energy);
int nvmlDeviceGetClockInfo(DEV d, int type, unsigned int *clock);
int nvmlDeviceGetCurrentClocksThrottleReasons(DEV d, unsigned long long *reasons);
int nvmlDeviceGetTotalEccErrors(DEV d, int type, int counter, unsigned long long *count);
int nvmlDeviceGetRemappedRows(DEV d, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                              unsigned int *failure);
int nvmlDeviceGetFieldValues(DEV d, int count, struct fake_field_value *values);
int nvmlEventSetCreate(struct nvmlEventSet_st **set);
int nvmlDeviceRegisterEvents(DEV d, unsigned long long types, struct nvmlEventSet_st *set);
int nvmlEventSetWait_v2(struct nvmlEventSet_st *set, struct fake_event_data *data,
                        unsigned int timeout_ms);
int nvmlEventSetFree(struct nvmlEventSet_st *set);

static struct nvmlDevice_st devices[2] = {{0}, {1}};
static struct nvmlEventSet_st event_set;
static const char *const bus_ids[2] = {"0000BEEF:18:00.0", "0000BEEF:2A:00.0"};
static const unsigned int buses[2] = {0x18, 0x2a};
static int initialized;

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && *v ? (int)strtol(v, NULL, 10) : dflt;
}

/* SUCCESS for a live GPU of this fake; the error to answer otherwise. */
static int check(DEV d)
{
	if (!initialized)
		return ERROR_UNINITIALIZED;
	if (d != &devices[0] && d != &devices[1])
		return ERROR_INVALID_ARGUMENT;
	if (env_int("FAKE_NVML_LOST", -1) == d->index)
		return ERROR_GPU_IS_LOST;
	return SUCCESS;
}

int nvmlInit_v2(void)
{
	if (env_int("FAKE_NVML_INIT_FAIL", 0))
		return ERROR_DRIVER_NOT_LOADED;
	initialized = 1;
	event_set.next = 0;
	return SUCCESS;
}

int nvmlShutdown(void)
{
	initialized = 0;
	return SUCCESS;
}

const char *nvmlErrorString(int result)
{
	switch (result) {
	case SUCCESS: return "Success";
	case ERROR_UNINITIALIZED: return "Uninitialized";
	case ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case ERROR_NOT_SUPPORTED: return "Not Supported";
	case ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case ERROR_TIMEOUT: return "Timeout";
	case ERROR_GPU_IS_LOST: return "GPU is lost";
	default: return "Unknown Error";
	}
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	if (length < 10)
		return ERROR_INVALID_ARGUMENT;
	strcpy(version, "550.54.15");
	return SUCCESS;
}

int nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	*version = 12040;
	return SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialized)
		return ERROR_UNINITIALIZED;
	*count = (unsigned)env_int("FAKE_NVML_COUNT", 2);
	return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, DEV *device)
{
	if (!initialized)
		return ERROR_UNINITIALIZED;
	if (index >= 2)
		return ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return SUCCESS;
}

int nvmlDeviceGetUUID(DEV d, char *uuid, unsigned int length)
{
	int r = check(d);
	if (r)
		return r;
	if (length < 20)
		return ERROR_INVALID_ARGUMENT;
	strcpy(uuid, d->index ? "GPU-fake-0001" : "GPU-fake-0000");
	return SUCCESS;
}

int nvmlDeviceGetName(DEV d, char *name, unsigned int length)
{
	int r = check(d);
	if (r)
		return r;
	if (length < 20)
		return ERROR_INVALID_ARGUMENT;
	strcpy(name, "NVIDIA H200");
	return SUCCESS;
}

#ifndef FAKE_NVML_OLD
int nvmlDeviceGetMemoryInfo(DEV d, struct fake_memory *memory)
{
	int r = check(d);
	if (r)
		return r;
	memory->total = 150754820096ull;
	memory->used = d->index ? 0 : 1ull << 30;
	memory->free = memory->total - memory->used;
	return SUCCESS;
}
#endif

static void fill_pci(int index, struct fake_pci *pci)
{
	memset(pci, 0, sizeof(*pci));
	strcpy(pci->busId, bus_ids[index]);
	strcpy(pci->busIdLegacy, bus_ids[index] + 4);
	pci->domain = 0xbeef;
	pci->bus = buses[index];
	pci->pciDeviceId = 0x233510de;
}

int nvmlDeviceGetPciInfo_v3(DEV d, struct fake_pci *pci)
{
	int r = check(d);
	if (r)
		return r;
	fill_pci(d->index, pci);
	return SUCCESS;
}

int nvmlDeviceGetMinorNumber(DEV d, unsigned int *minor)
{
	int r = check(d);
	if (r)
		return r;
	*minor = (unsigned)d->index;
	return SUCCESS;
}

int nvmlDeviceGetMigMode(DEV d, unsigned int *current, unsigned int *pending)
{
	int r = check(d);
	if (r)
		return r;
	if (d->index == 1)
		return ERROR_NOT_SUPPORTED;
	*current = *pending = 0;
	return SUCCESS;
}

int nvmlDeviceGetPersistenceMode(DEV d, int *mode)
{
	int r = check(d);
	if (r)
		return r;
	*mode = 1;
	return SUCCESS;
}

int nvmlDeviceGetCpuAffinity(DEV d, unsigned int size, unsigned long *set)
{
	int r = check(d);
	if (r)
		return r;
	if (size < 2)
		return ERROR_INVALID_ARGUMENT;
	memset(set, 0, size * sizeof(*set));
	if (d->index == 0)
		set[0] = 0x10f; /* CPUs 0-3 and 8 */
	else
		set[64 / (8 * sizeof(unsigned long))] = 0xfUL << (64 % (8 * sizeof(unsigned long)));
	return SUCCESS;
}

int nvmlDeviceGetNumaNodeId(DEV d, unsigned int *node)
{
	int r = check(d);
	if (r)
		return r;
	*node = (unsigned)d->index;
	return SUCCESS;
}

int nvmlDeviceGetTopologyCommonAncestor(DEV a, DEV b, int *level)
{
	int r = check(a);
	if (!r)
		r = check(b);
	if (r)
		return r;
	*level = 10; /* NVML_TOPOLOGY_SINGLE */
	return SUCCESS;
}

int nvmlDeviceGetNvLinkState(DEV d, unsigned int link, int *active)
{
	int r = check(d);
	if (r)
		return r;
	if (link >= 18)
		return ERROR_INVALID_ARGUMENT;
	*active = link == 0 && !env_int("FAKE_NVML_NO_NVLINK", 0);
	return SUCCESS;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(DEV d, unsigned int link, struct fake_pci *pci)
{
	int r = check(d);
	if (r)
		return r;
	if (link != 0)
		return ERROR_NOT_SUPPORTED;
	fill_pci(1 - d->index, pci);
	return SUCCESS;
}

int nvmlDeviceGetUtilizationRates(DEV d, struct fake_utilization *util)
{
	int r = check(d);
	if (r)
		return r;
	util->gpu = d->index ? 0 : 97;
	util->memory = d->index ? 0 : 41;
	return SUCCESS;
}

int nvmlDeviceGetTemperature(DEV d, int sensor, unsigned int *temp)
{
	int r = check(d);
	if (r)
		return r;
	if (sensor != 0)
		return ERROR_INVALID_ARGUMENT;
	*temp = d->index ? 33 : 61;
	return SUCCESS;
}

int nvmlDeviceGetPowerUsage(DEV d, unsigned int *power)
{
	int r = check(d);
	if (r)
		return r;
	*power = d->index ? 74000 : 650000;
	return SUCCESS;
}

int nvmlDeviceGetTotalEnergyConsumption(DEV d, unsigned long long *energy)
{
	int r = check(d);
	if (r)
		return r;
	*energy = 5000000000ull + (unsigned long long)d->index;
	return SUCCESS;
}

int nvmlDeviceGetClockInfo(DEV d, int type, unsigned int *clock)
{
	int r = check(d);
	if (r)
		return r;
	if (type == 1)
		*clock = 1980;
	else if (type == 2)
		*clock = 3201;
	else
		return ERROR_INVALID_ARGUMENT;
	return SUCCESS;
}

int nvmlDeviceGetCurrentClocksThrottleReasons(DEV d, unsigned long long *reasons)
{
	int r = check(d);
	if (r)
		return r;
	*reasons = d->index ? 0x4 : 0;
	return SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(DEV d, int type, int counter, unsigned long long *count)
{
	int r = check(d);
	if (r)
		return r;
	if (type < 0 || type > 1 || counter < 0 || counter > 1)
		return ERROR_INVALID_ARGUMENT;
	/* corrected volatile 3, uncorrected volatile 0, aggregate 10 and 1 */
	static const unsigned long long counts[2][2] = {{3, 10}, {0, 1}};
	*count = d->index ? counts[type][counter] : 0;
	return SUCCESS;
}

int nvmlDeviceGetRemappedRows(DEV d, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                              unsigned int *failure)
{
	int r = check(d);
	if (r)
		return r;
	*corr = d->index ? 2 : 0;
	*unc = d->index ? 1 : 0;
	*pending = (unsigned)d->index;
	*failure = 0;
	return SUCCESS;
}

int nvmlDeviceGetFieldValues(DEV d, int count, struct fake_field_value *values)
{
	int r = check(d);
	if (r)
		return r;
	for (int i = 0; i < count; i++) {
		if (values[i].fieldId != 230) { /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION */
			values[i].nvmlReturn = ERROR_NOT_SUPPORTED;
			continue;
		}
		values[i].nvmlReturn = SUCCESS;
		values[i].valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
		values[i].value.uiVal = d->index ? 1 : 0;
	}
	return SUCCESS;
}

int nvmlEventSetCreate(struct nvmlEventSet_st **set)
{
	if (!initialized)
		return ERROR_UNINITIALIZED;
	memset(&event_set, 0, sizeof(event_set));
	*set = &event_set;
	return SUCCESS;
}

int nvmlDeviceRegisterEvents(DEV d, unsigned long long types, struct nvmlEventSet_st *set)
{
	int r = check(d);
	if (r)
		return r;
	if (set != &event_set || !(types & 0x8))
		return ERROR_INVALID_ARGUMENT;
	set->registered |= 1 << d->index;
	return SUCCESS;
}

int nvmlEventSetWait_v2(struct nvmlEventSet_st *set, struct fake_event_data *data,
                        unsigned int timeout_ms)
{
	(void)timeout_ms; /* the queue never grows: waiting would change nothing */
	if (set != &event_set || set->registered != 3)
		return ERROR_INVALID_ARGUMENT;
	memset(data, 0, sizeof(*data));
	switch (set->next++) {
	case 0:
		data->device = &devices[0];
		data->eventType = 0x4; /* nvmlEventTypePState */
		return SUCCESS;
	case 1:
		data->device = &devices[1];
		data->eventType = 0x8; /* nvmlEventTypeXidCriticalError */
		data->eventData = 48;
		data->gpuInstanceId = data->computeInstanceId = 0xffffffffu;
		return SUCCESS;
	default: return ERROR_TIMEOUT;
	}
}

int nvmlEventSetFree(struct nvmlEventSet_st *set)
{
	if (set != &event_set)
		return ERROR_INVALID_ARGUMENT;
	set->registered = 0;
	return SUCCESS;
}
