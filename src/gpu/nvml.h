/* nvml.h - the NVML backend ("nvml", "nvml:PATH"): NVIDIA's management
 * library loaded at run time.
 *
 * open() loads libnvidia-ml.so.1 (or PATH) with dlopen and looks up each
 * function by NVML's exact name; nothing of NVIDIA's is needed to build.
 * The functions without which there is no inventory (nvmlInit_v2,
 * nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID,
 * nvmlDeviceGetName, nvmlDeviceGetMemoryInfo) are required: without one,
 * or without the library, the driver or any GPU, open() fails with
 * ERR_NOTFOUND and one sentence that says which. Every other function is
 * optional: an older driver that lacks one, or a GPU that does not support
 * it, leaves its fields -1 ("" for strings).
 *
 * Read at open: the inventory (gpu_info), NVLink peers (a link whose far
 * end is not one of the node's GPUs goes to an NVSwitch, and GPUs on
 * NVSwitches all reach each other over NVLink) and the topology matrix
 * (nvmlDeviceGetTopologyCommonAncestor); numa_node comes from sysfs
 * (/sys/bus/pci/devices/BUSID/numa_node, the NUMA node of the PCIe root),
 * else from nvmlDeviceGetNumaNodeId. Read when asked: samples (a GPU that
 * answers NVML_ERROR_GPU_IS_LOST is sampled as lost = 1) and XID events
 * (one event set registered for nvmlEventTypeXidCriticalError on every GPU
 * that supports it). reset() runs `nvidia-smi --gpu-reset -i BUSID` and
 * answers its first line of output when it fails (ERR_BUSY when that says
 * the GPU is in use). inject is NULL: this is hardware.
 *
 * Not thread-safe beyond what gpu.h says: one thread uses a handle at a
 * time (NVML itself is thread-safe; our state is not locked).
 */
#ifndef ANVIL_GPU_NVML_H
#define ANVIL_GPU_NVML_H

#include "gpu/gpu.h"

extern const struct gpu_backend_ops gpu_nvml_ops;

#endif
