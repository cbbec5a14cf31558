/* test_rdma.c - RDMA ports from a prepared sysfs tree, GPU nearness and
 * the NCCL variables (gpu/rdma.h). Each test builds its tree in a
 * temporary directory laid out like /sys. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "base/util.h"
#include "gpu/rdma.h"
#include "proto/wire.h"

static char root[64];

static void make_root(void)
{
	snprintf(root, sizeof(root), "/tmp/anvil-rdma-XXXXXX");
	CHECK(mkdtemp(root) != NULL);
}

static void put(const char *rel, const char *text)
{
	char path[512], dir[512];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	CHECK_INT(mkdir_p(dir, 0755), 0);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static void link_to(const char *rel, const char *target)
{
	char path[512], dir[512];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	CHECK_INT(mkdir_p(dir, 0755), 0);
	if (symlink(target, path) != 0)
		FAIL_AT("symlink %s -> %s: %s", path, target, strerror(errno));
}

/* A PCI device under <root>/devices/<pcipath>, reachable from
 * <root>/bus/pci/devices/<busid> as in sysfs. */
static void pci_device(const char *pcipath, int numa)
{
	char rel[256], text[16], target[256];
	snprintf(rel, sizeof(rel), "devices/%s/numa_node", pcipath);
	snprintf(text, sizeof(text), "%d\n", numa);
	put(rel, text);
	snprintf(rel, sizeof(rel), "bus/pci/devices/%s", strrchr(pcipath, '/') + 1);
	snprintf(target, sizeof(target), "../../../devices/%s", pcipath);
	link_to(rel, target);
}

/* An HCA dev on the PCI device at pcipath with one interface netdev. */
static void hca(const char *dev, const char *pcipath, int numa, const char *netdev)
{
	char rel[256], target[256];
	pci_device(pcipath, numa);
	/* /sys/class/infiniband/mlx5_0 -> ../../devices/<pci>/infiniband/mlx5_0 */
	snprintf(rel, sizeof(rel), "class/infiniband/%s", dev);
	snprintf(target, sizeof(target), "../../devices/%s/infiniband/%s", pcipath, dev);
	link_to(rel, target);
	/* .../infiniband/mlx5_0/device -> ../../../<device> */
	snprintf(rel, sizeof(rel), "devices/%s/infiniband/%s/device", pcipath, dev);
	snprintf(target, sizeof(target), "../../../%s", strrchr(pcipath, '/') + 1);
	link_to(rel, target);
	if (netdev) {
		snprintf(rel, sizeof(rel), "devices/%s/net/%s/dev_port", pcipath, netdev);
		put(rel, "0\n");
	}
}

static void port(const char *dev, const char *pcipath, int n, const char *state, const char *phys,
                 const char *rate, const char *layer)
{
	char rel[256];
	const char *names[] = {"state", "phys_state", "rate", "link_layer"};
	const char *values[] = {state, phys, rate, layer};
	for (int i = 0; i < 4; i++) {
		if (!values[i])
			continue;
		snprintf(rel, sizeof(rel), "devices/%s/infiniband/%s/ports/%d/%s", pcipath, dev, n,
		         names[i]);
		put(rel, values[i]);
	}
}

/* The tree most tests use. NUMA node 0: a PCIe switch (root port 17:01.0,
 * switch 18:00.0) holding mlx5_0 (InfiniBand) and GPU 0, and GPU 1 on its
 * own root port of the same root complex. NUMA node 1: mlx5_3
 * (InfiniBand) under a switch with GPU 2, mlx5_4 (RoCE) under a switch
 * with GPU 3, and mlx5_5 (InfiniBand, port down) alone. */
#define SW0    "pci0000:17/0000:17:01.0/0000:18:00.0"
#define NIC0   SW0 "/0000:19:00.0/0000:1a:00.0"
#define GPU0   SW0 "/0000:19:01.0/0000:1b:00.0"
#define GPU1   "pci0000:17/0000:17:02.0/0000:1c:00.0"
#define SW1    "pci0000:97/0000:97:01.0/0000:98:00.0"
#define NIC3   SW1 "/0000:99:00.0/0000:9a:00.0"
#define GPU2   SW1 "/0000:99:01.0/0000:9b:00.0"
#define SW2    "pci0000:c0/0000:c0:01.0/0000:c1:00.0"
#define NIC4   SW2 "/0000:c2:00.0/0000:c3:00.0"
#define GPU3   SW2 "/0000:c2:01.0/0000:c4:00.0"
#define NIC5   "pci0000:d0/0000:d0:01.0/0000:d1:00.0"
#define ACTIVE "4: ACTIVE\n"
#define LINKUP "5: LinkUp\n"

static struct gpu_info gpus[5];

static void build_cluster_node(void)
{
	make_root();
	hca("mlx5_0", NIC0, 0, "ib0");
	port("mlx5_0", NIC0, 1, ACTIVE, LINKUP, "400 Gb/sec (4X NDR)\n", "InfiniBand\n");
	hca("mlx5_3", NIC3, 1, "ib3");
	port("mlx5_3", NIC3, 1, ACTIVE, LINKUP, "400 Gb/sec (4X NDR)\n", "InfiniBand\n");
	hca("mlx5_4", NIC4, 1, "ens5f0np0");
	port("mlx5_4", NIC4, 1, ACTIVE, LINKUP, "200 Gb/sec (4X HDR)\n", "Ethernet\n");
	hca("mlx5_5", NIC5, 1, "ib5");
	port("mlx5_5", NIC5, 1, "1: DOWN\n", "3: Disabled\n", "10 Gb/sec (4X SDR)\n",
	     "InfiniBand\n");
	const char *paths[] = {GPU0, GPU1, GPU2, GPU3};
	const char *ids[] = {"00000000:1B:00.0", "00000000:1C:00.0", "00000000:9B:00.0",
	                     "00000000:C4:00.0", "00000000:EE:00.0"};
	int numa[] = {0, 0, 1, 1, -1};
	memset(gpus, 0, sizeof(gpus));
	for (int i = 0; i < 5; i++) {
		if (i < 4)
			pci_device(paths[i], numa[i]);
		gpus[i].index = i;
		gpus[i].numa_node = i < 4 ? numa[i] : -1;
		snprintf(gpus[i].pci_bus_id, sizeof(gpus[i].pci_bus_id), "%s", ids[i]);
	}
	gpus[1].numa_node = -1; /* unknown to the backend: read from sysfs instead */
}

static int scan(struct rdma_port *out)
{
	memset(out, 0xab, sizeof(*out) * RDMA_MAX_PORTS);
	return rdma_scan(root, gpus, 5, out, RDMA_MAX_PORTS);
}

TEST(scans_infiniband_and_roce_ports)
{
	build_cluster_node();
	struct rdma_port p[RDMA_MAX_PORTS];
	CHECK_INT(scan(p), 4);
	CHECK_STR(p[0].dev, "mlx5_0");
	CHECK_INT(p[0].port, 1);
	CHECK_STR(p[0].state, "ACTIVE");
	CHECK_STR(p[0].phys_state, "LinkUp");
	CHECK_STR(p[0].rate, "400 Gb/sec (4X NDR)");
	CHECK_STR(p[0].link_layer, "InfiniBand");
	CHECK_STR(p[0].netdev, "ib0");
	CHECK_INT(p[0].numa_node, 0);
	CHECK_STR(p[0].pci_bus_id, "0000:1a:00.0");
	CHECK_STR(p[0].error, "");
	CHECK_STR(p[1].dev, "mlx5_3");
	CHECK_STR(p[2].dev, "mlx5_4");
	CHECK_STR(p[2].link_layer, "Ethernet");
	CHECK_STR(p[2].rate, "200 Gb/sec (4X HDR)");
	CHECK_STR(p[2].netdev, "ens5f0np0");
	CHECK_STR(p[3].dev, "mlx5_5");
	CHECK_STR(p[3].state, "DOWN");
	CHECK_STR(p[3].phys_state, "Disabled");
	CHECK_STR(p[3].error, "");
	CHECK_INT(rdma_scan(root, gpus, 5, p, 2), 2); /* capped */
	rm_rf(root);
}

TEST(nearness_by_switch_then_numa)
{
	build_cluster_node();
	struct rdma_port p[RDMA_MAX_PORTS];
	CHECK_INT(scan(p), 4);
	/* GPU 1 shares only the root complex with mlx5_0: not the switch. */
	CHECK_INT(p[0].near_by, RDMA_NEAR_SWITCH);
	CHECK(p[0].gpus_near == 0x1);
	CHECK(p[0].gpus_numa == 0x3); /* GPU 1's node came from sysfs */
	CHECK_INT(p[1].near_by, RDMA_NEAR_SWITCH);
	CHECK(p[1].gpus_near == 0x4);
	CHECK_INT(p[2].near_by, RDMA_NEAR_SWITCH);
	CHECK(p[2].gpus_near == 0x8);
	/* mlx5_5 shares no bridge with any GPU: its NUMA node decides. */
	CHECK_INT(p[3].near_by, RDMA_NEAR_NUMA);
	CHECK(p[3].gpus_near == 0xc);
	CHECK_STR(rdma_near_name(RDMA_NEAR_NUMA), "numa");
	CHECK_STR(rdma_near_name(RDMA_NEAR_SWITCH), "switch");
	CHECK_STR(rdma_near_name(RDMA_NEAR_NONE), "none");

	/* Without GPUs nothing is near. */
	CHECK_INT(rdma_scan(root, NULL, 0, p, RDMA_MAX_PORTS), 4);
	CHECK(p[0].gpus_near == 0 && p[0].gpus_numa == 0);
	CHECK_INT(p[0].near_by, RDMA_NEAR_NONE);
	rm_rf(root);
}

static void expect_env(const struct rdma_port *p, int n, uint64_t mask, int used,
                       const char *want_hca, const char *want_if)
{
	char h[128] = "x", f[128] = "x";
	CHECK_INT(rdma_nccl_env(p, n, mask, h, sizeof(h), f, sizeof(f)), used);
	CHECK_STR(h, want_hca);
	CHECK_STR(f, want_if);
}

TEST(nccl_variables_prefer_near_ports)
{
	build_cluster_node();
	struct rdma_port p[RDMA_MAX_PORTS];
	int n = scan(p);
	CHECK_INT(n, 4);
	expect_env(p, n, 0x1, 1, "=mlx5_0:1", "=ib0");       /* same switch */
	expect_env(p, n, 0x8, 1, "=mlx5_4:1", "=ens5f0np0"); /* RoCE, same switch */
	expect_env(p, n, 0x5, 2, "=mlx5_0:1,mlx5_3:1", "=ib0,ib3");
	expect_env(p, n, 0x2, 1, "=mlx5_0:1", "=ib0"); /* no switch: same NUMA node */
	/* A GPU the tree does not know: every active port, never the down one. */
	expect_env(p, n, 0x10, 3, "=mlx5_0:1,mlx5_3:1,mlx5_4:1", "=ib0,ib3,ens5f0np0");
	expect_env(p, n, 0, 3, "=mlx5_0:1,mlx5_3:1,mlx5_4:1", "=ib0,ib3,ens5f0np0");

	/* Too small a buffer: ERR_TOOBIG, both untouched. */
	char h[8] = "keep", f[64] = "keep";
	CHECK_INT(rdma_nccl_env(p, n, 0, h, sizeof(h), f, sizeof(f)), ERR_TOOBIG);
	CHECK_STR(h, "keep");
	CHECK_STR(f, "keep");

	/* No usable port: both empty, so the caller sets neither. */
	expect_env(p + 3, 1, 0xf, 0, "", "");
	expect_env(NULL, 0, 0xf, 0, "", "");
	/* A port without an interface leaves NCCL_SOCKET_IFNAME unset. */
	p[0].netdev[0] = '\0';
	expect_env(p, 1, 0x1, 1, "=mlx5_0:1", "");
	rm_rf(root);
}

TEST(missing_sysfs_means_no_devices)
{
	struct rdma_port p[4];
	CHECK_INT(rdma_scan("/nonexistent/anvil-sys", NULL, 0, p, 4), 0);
	make_root();
	CHECK_INT(rdma_scan(root, NULL, 0, p, 4), 0);
	put("class/infiniband/.keep", "");
	CHECK_INT(rdma_scan(root, NULL, 0, p, 4), 0);
	CHECK_INT(rdma_scan(root, NULL, -1, p, 4), ERR_INVALID);
	rm_rf(root);
}

TEST(this_machines_sysfs_scans_cleanly)
{
	/* Whatever this machine has (usually no HCA), the scan never fails. */
	struct rdma_port p[RDMA_MAX_PORTS];
	int n = rdma_scan(NULL, NULL, 0, p, RDMA_MAX_PORTS);
	CHECK(n >= 0);
	json_t *j = rdma_ports_json(p, n);
	CHECK_INT(json_array_size(j), n);
	json_decref(j);
}

TEST(malformed_ports_are_skipped_with_a_reason)
{
	make_root();
	hca("mlx5_0", NIC0, 0, "ib0");
	port("mlx5_0", NIC0, 1, "ACTIVE\n", LINKUP, "400 Gb/sec (4X NDR)\n", "InfiniBand\n");
	port("mlx5_0", NIC0, 2, ACTIVE, LINKUP, "400 Gb/sec (4X NDR)\n", NULL);
	port("mlx5_0", NIC0, 3, ACTIVE, "LinkUp\n", "400 Gb/sec\n", "InfiniBand\n");
	port("mlx5_0", NIC0, 4, ACTIVE, LINKUP, "fast\n", "InfiniBand\n");
	port("mlx5_0", NIC0, 10, ACTIVE, NULL, NULL, "InfiniBand\n"); /* optional files absent */
	put("devices/" NIC0 "/infiniband/mlx5_0/ports/lag/state", ACTIVE); /* not a port */
	struct rdma_port p[RDMA_MAX_PORTS];
	CHECK_INT(rdma_scan(root, NULL, 0, p, RDMA_MAX_PORTS), 5);
	CHECK_INT(p[0].port, 1);
	CHECK_STR(p[0].error, "mlx5_0 port 1: state: malformed value 'ACTIVE'");
	CHECK_STR(p[0].state, "");
	CHECK_INT(p[1].port, 2);
	CHECK_STR(p[1].error, "mlx5_0 port 2: link_layer: No such file or directory");
	CHECK_STR(p[1].state, "");
	CHECK_STR(p[2].error, "mlx5_0 port 3: phys_state: malformed value 'LinkUp'");
	CHECK_STR(p[3].error, "mlx5_0 port 4: rate: malformed value 'fast'");
	CHECK_INT(p[4].port, 10); /* numeric order, not "10" < "2" */
	CHECK_STR(p[4].error, "");
	CHECK_STR(p[4].state, "ACTIVE");
	CHECK_STR(p[4].rate, "");
	CHECK_STR(p[4].phys_state, "");
	/* Skipped ports are never handed to NCCL. */
	char h[64], f[64];
	CHECK_INT(rdma_nccl_env(p, 4, 0, h, sizeof(h), f, sizeof(f)), 0);
	CHECK_INT(rdma_nccl_env(p, 5, 0, h, sizeof(h), f, sizeof(f)), 1);
	CHECK_STR(h, "=mlx5_0:10");
	rm_rf(root);
}

TEST(dual_port_device_picks_interface_by_dev_port)
{
	make_root();
	const char *nic = "pci0000:00/0000:00:02.0/0000:03:00.0";
	hca("mlx4_0", nic, -1, NULL);
	put("devices/pci0000:00/0000:00:02.0/0000:03:00.0/net/eth0/dev_port", "0\n");
	put("devices/pci0000:00/0000:00:02.0/0000:03:00.0/net/eth1/dev_port", "1\n");
	port("mlx4_0", nic, 1, ACTIVE, LINKUP, "40 Gb/sec (4X QDR)\n", "Ethernet\n");
	port("mlx4_0", nic, 2, ACTIVE, LINKUP, "40 Gb/sec (4X QDR)\n", "Ethernet\n");
	struct rdma_port p[4];
	CHECK_INT(rdma_scan(root, NULL, 0, p, 4), 2);
	CHECK_STR(p[0].netdev, "eth0");
	CHECK_STR(p[1].netdev, "eth1");
	CHECK_INT(p[0].numa_node, -1);
	CHECK_STR(p[0].pci_bus_id, "0000:03:00.0");
	char h[64], f[64];
	CHECK_INT(rdma_nccl_env(p, 2, 0, h, sizeof(h), f, sizeof(f)), 2);
	CHECK_STR(h, "=mlx4_0:1,mlx4_0:2");
	CHECK_STR(f, "=eth0,eth1");
	rm_rf(root);
}

TEST(ports_as_json)
{
	build_cluster_node();
	struct rdma_port p[RDMA_MAX_PORTS];
	int n = scan(p);
	snprintf(p[3].error, sizeof(p[3].error), "mlx5_5 port 1: state: malformed value 'x'");
	json_t *j = rdma_ports_json(p, n);
	CHECK_INT(json_array_size(j), 4);
	char *first = json_dumps(json_array_get(j, 0), JSON_COMPACT | JSON_SORT_KEYS);
	CHECK_STR(first,
	          "{\"dev\":\"mlx5_0\",\"gpus_near\":[0],\"gpus_numa\":[0,1],"
	          "\"link_layer\":\"InfiniBand\",\"near_by\":\"switch\",\"netdev\":\"ib0\","
	          "\"numa_node\":0,\"pci_bus_id\":\"0000:1a:00.0\",\"phys_state\":\"LinkUp\","
	          "\"port\":1,\"rate\":\"400 Gb/sec (4X NDR)\",\"state\":\"ACTIVE\"}");
	free(first);
	CHECK_STR(json_string_value(json_object_get(json_array_get(j, 3), "error")),
	          "mlx5_5 port 1: state: malformed value 'x'");
	CHECK_STR(json_string_value(json_object_get(json_array_get(j, 3), "near_by")), "numa");
	json_decref(j);
	rm_rf(root);
}

/* The ports are what the agent registers as "rdma": RDMA ports of
 * proto/wire.h (wire_rdma_port), which the server checks each of; a port
 * that could not be read too. */
TEST(ports_pass_the_wire_table)
{
	build_cluster_node();
	struct rdma_port p[RDMA_MAX_PORTS];
	int n = scan(p);
	snprintf(p[3].error, sizeof(p[3].error), "mlx5_5 port 1: state: malformed value 'x'");
	p[3].state[0] = '\0';
	json_t *facts = json_pack("{s:o}", "rdma", rdma_ports_json(p, n));
	char err[256] = "";
	if (wire_check_each(facts, "rdma", &wire_rdma_port, err, sizeof(err)) != 0)
		FAIL_AT("%s", err);
	CHECK_INT(json_array_size(json_object_get(facts, "rdma")), 4);
	json_decref(facts);
	rm_rf(root);
}

TEST_MAIN()
