/* rdma.h - the node's RDMA ports (InfiniBand and RoCE) from sysfs, which
 * GPUs each one is near, and the NCCL variables a rank should get.
 *
 * rdma_scan() reads, under a root that is "/sys" in production and a
 * prepared tree in tests:
 *
 *   <root>/class/infiniband/<dev>/ports/<n>/state        "4: ACTIVE"
 *   <root>/class/infiniband/<dev>/ports/<n>/phys_state   "5: LinkUp"
 *   <root>/class/infiniband/<dev>/ports/<n>/rate         "200 Gb/sec (4X HDR)"
 *   <root>/class/infiniband/<dev>/ports/<n>/link_layer   "InfiniBand" | "Ethernet" (RoCE)
 *   <root>/class/infiniband/<dev>/device                 -> ../../../devices/pci0000:17/.../0000:18:00.0
 *   <root>/class/infiniband/<dev>/device/numa_node       "0", "-1" when none
 *   <root>/class/infiniband/<dev>/device/net/<if>/       its network interfaces
 *   <root>/bus/pci/devices/<busid>                       -> the GPU's device directory
 *
 * A GPU is near a port when both hang below one PCIe bridge under the root
 * complex (their resolved device paths share a component after
 * "pciDDDD:BB": the same PCIe switch, nvidia-smi's PIX/PXB), else when
 * both are on the same NUMA node; near_by says which rule matched.
 *
 * A missing <root>/class/infiniband means no RDMA devices (0, not an
 * error). A port whose files are missing or malformed is still returned,
 * with error set to one sentence and state "", so the caller can log it
 * and report it; nothing else uses such a port. Pure apart from reading
 * sysfs; thread-safe.
 */
#ifndef ANVIL_GPU_RDMA_H
#define ANVIL_GPU_RDMA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

/* Enough for 8 dual-port HCAs plus spares; rdma_scan() stops at its max. */
#define RDMA_MAX_PORTS 64

enum rdma_near {
	RDMA_NEAR_NONE = 0, /* no GPU is near (or none has a location) */
	RDMA_NEAR_SWITCH,   /* below the same PCIe bridge */
	RDMA_NEAR_NUMA,     /* on the same NUMA node, no shared bridge */
};

/* "none", "switch", "numa". */
const char *rdma_near_name(enum rdma_near n);

struct rdma_port {
	char dev[64];        /* "mlx5_0" */
	int port;            /* 1, 2, ... */
	char state[16];      /* "ACTIVE", "DOWN", "INIT", "ARMED"; "" when skipped */
	char phys_state[24]; /* "LinkUp", "Disabled", "Polling", ... */
	char rate[48];       /* "200 Gb/sec (4X HDR)"; "" when the file is absent */
	char link_layer[16]; /* "InfiniBand" or "Ethernet" (RoCE) */
	char netdev[32];     /* "ib0", "ens1f0np0"; "" when none */
	int numa_node;       /* -1 when unknown */
	char pci_bus_id[32]; /* sysfs form "0000:18:00.0"; "" when unknown */
	uint64_t gpus_near;  /* bit i: the GPU whose gpu_info.index is i */
	enum rdma_near near_by;
	uint64_t gpus_numa; /* every GPU on the port's NUMA node, switch or not */
	char error[160];    /* why the port was skipped; "" for a good port */
};

/* Scans root (NULL: "/sys") for RDMA ports, devices sorted by name and
 * ports by number, and marks the GPUs near each (gpus may be NULL when
 * ngpus is 0). Writes at most max ports and returns how many; a negative
 * errno when <root>/class/infiniband exists but cannot be read. */
int rdma_scan(const char *root, const struct gpu_info *gpus, int ngpus, struct rdma_port *out,
              int max);

/* The NCCL variables for a rank that uses the GPUs in gpu_mask (bit i: GPU
 * index i). Of the ACTIVE InfiniBand and RoCE ports, it uses those below
 * the same PCIe switch as one of the rank's GPUs; if there are none, those
 * on the NUMA node of one of its GPUs; if none again, all of them. Writes
 * the values (not "NAME=") into the caller's buffers:
 *
 *   hca      NCCL_IB_HCA, "=mlx5_0:1,mlx5_3:1" ('=': exact names, not prefixes)
 *   ifname   NCCL_SOCKET_IFNAME, "=ib0,ib3": those ports' interfaces
 *
 * An empty value means: leave the variable unset (no usable port, or no
 * port with an interface). Returns the number of ports used, or
 * ERR_TOOBIG when a buffer is too small (both buffers untouched then). */
int rdma_nccl_env(const struct rdma_port *ports, int n, uint64_t gpu_mask, char *hca, size_t hcalen,
                  char *ifname, size_t ifnamelen);

/* The ports as a JSON array for the agent's facts: one object per port
 * with every field above ("gpus_near" and "gpus_numa" as arrays of GPU
 * indices, "error" only when set), built through proto/wire.h's table of
 * an RDMA port (wire_rdma_port); a port with a name that is not UTF-8 is
 * left out. The caller owns the result (json_decref). */
json_t *rdma_ports_json(const struct rdma_port *ports, int n);

#endif
