/* test_sim.c - the simulated GPU backend through gpu/gpu.h and gpu/sim.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/util.h"
#include "gpu/gpu.h"
#include "gpu/sim.h"
#include "proto/wire.h"

static char dir[64];

static const char *tmp_path(const char *name)
{
	static char path[128];
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/anvil-gpu-XXXXXX");
		CHECK(mkdtemp(dir) != NULL);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

/* Opens "sim:" + a file holding text; returns the rc, err filled. */
static int open_text(const char *text, struct gpu_backend **b, char *err, size_t errlen)
{
	const char *path = tmp_path("gpus.json");
	CHECK_INT(write_file_atomic(path, text, strlen(text), 0644), 0);
	char spec[160];
	snprintf(spec, sizeof(spec), "sim:%s", path);
	return gpu_open(spec, b, err, errlen);
}

#define ONE_GPU(extra)                                                                             \
	"{\"driver_version\":\"sim-550.54.15\",\"cuda_version\":\"12.4\",\"gpus\":[{"              \
	"\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"NVIDIA H200\","                                 \
	"\"memory_bytes\":150754820096,\"pci_bus_id\":\"00000000:18:00.0\"" extra "}]}"

TEST(reads_a_valid_file)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(open_text(ONE_GPU(""), &b, err, sizeof(err)), 0);
	CHECK_STR(gpu_backend_name(b), "sim");
	CHECK_INT(gpu_count(b), 1);
	CHECK_STR(gpu_driver_version(b), "sim-550.54.15");
	CHECK_STR(gpu_cuda_version(b), "12.4");
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 0, &g), 0);
	CHECK_INT(g.index, 0);
	CHECK_STR(g.uuid, "GPU-a");
	CHECK_STR(g.name, "NVIDIA H200");
	CHECK(g.memory_bytes == 150754820096ull);
	CHECK_STR(g.pci_bus_id, "00000000:18:00.0");
	CHECK_INT(gpu_info(b, 1, &g), ERR_NOTFOUND);
	CHECK_INT(gpu_info(b, -1, &g), ERR_NOTFOUND);
	gpu_close(b);
	rm_rf(dir);
}

static void expect_invalid(const char *text, const char *reason)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(open_text(text, &b, err, sizeof(err)), ERR_INVALID);
	CHECK(b == NULL);
	CHECK_CONTAINS(err, "gpus.json");
	CHECK_CONTAINS(err, reason);
}

TEST(rejects_bad_files)
{
	expect_invalid(ONE_GPU(",\"extra\":1"), "gpus[0]: field 'extra': unknown field");
	expect_invalid("{\"driver_version\":\"x\",\"cuda_version\":\"1\"}",
	               "field 'gpus': required");
	expect_invalid("{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":[{"
	               "\"index\":1,\"uuid\":\"GPU-a\",\"name\":\"n\",\"memory_bytes\":1,"
	               "\"pci_bus_id\":\"p\"}]}",
	               "gpus[0]: field 'index': 1 is out of order (expected 0)");
	expect_invalid("{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":[{"
	               "\"index\":0,\"uuid\":\"a\",\"name\":\"n\",\"memory_bytes\":1,"
	               "\"pci_bus_id\":\"p\"}]}",
	               "gpus[0]: field 'uuid': \"a\" does not start with GPU-");
	expect_invalid("{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":[{"
	               "\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"n\",\"memory_bytes\":0,"
	               "\"pci_bus_id\":\"p\"}]}",
	               "gpus[0]: field 'memory_bytes': 0 is below the minimum 1");
	expect_invalid("{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":[{"
	               "\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"n\",\"memory_bytes\":\"big\","
	               "\"pci_bus_id\":\"p\"}]}",
	               "field 'memory_bytes': \"big\" is not an integer");
	expect_invalid("{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":[3]}",
	               "gpus[0]: expected an object");
	expect_invalid("{\"driver_version\":", "malformed JSON at line 1");
	rm_rf(dir);
}

TEST(rejects_duplicate_uuids)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	const char *text = "{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":["
	                   "{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"n\",\"memory_bytes\":1,"
	                   "\"pci_bus_id\":\"p\"},"
	                   "{\"index\":1,\"uuid\":\"GPU-a\",\"name\":\"n\",\"memory_bytes\":1,"
	                   "\"pci_bus_id\":\"q\"}]}";
	CHECK_INT(open_text(text, &b, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "gpus[1]: field 'uuid': \"GPU-a\" repeats gpus[0]");
	rm_rf(dir);
}

TEST(missing_file_and_bad_spec)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(gpu_open("sim:/nonexistent/gpus.json", &b, err, sizeof(err)), -ENOENT);
	CHECK_CONTAINS(err, "/nonexistent/gpus.json: No such file");
	CHECK_INT(gpu_open("cuda", &b, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "'cuda': unknown");
	CHECK_INT(gpu_open("nvml:/nonexistent/libnvidia-ml.so.1", &b, err, sizeof(err)),
	          ERR_NOTFOUND);
	CHECK_CONTAINS(err, "/nonexistent/libnvidia-ml.so.1");
	CHECK(b == NULL);
	CHECK_INT(gpu_open("nvml:", &b, err, sizeof(err)), ERR_INVALID);
	/* Plain "nvml" opens where a driver and GPUs are, and else says so. */
	int rc = gpu_open("nvml", &b, err, sizeof(err));
	CHECK(rc == 0 || rc == ERR_NOTFOUND);
	if (rc == 0) {
		CHECK_STR(gpu_backend_name(b), "nvml");
		CHECK(gpu_count(b) > 0);
		gpu_close(b);
	}
	b = NULL;
	CHECK_INT(gpu_open("none", &b, err, sizeof(err)), 0);
	CHECK_STR(gpu_backend_name(b), "none");
	CHECK_INT(gpu_count(b), 0);
	gpu_close(b);
	gpu_close(NULL);
}

TEST(write_file_round_trips)
{
	const char *path = tmp_path("node.json");
	char p0[160], p1[160];
	snprintf(p0, sizeof(p0), "%s", path);
	snprintf(p1, sizeof(p1), "%s.1", path);
	CHECK_INT(gpu_sim_write_file(p0, 8, "H200", 0), 0);
	CHECK_INT(gpu_sim_write_file(p1, 8, "A100", 1), 0);
	char spec[200], err[512];
	struct gpu_backend *b0, *b1;
	snprintf(spec, sizeof(spec), "sim:%s", p0);
	CHECK_INT(gpu_open(spec, &b0, err, sizeof(err)), 0);
	snprintf(spec, sizeof(spec), "sim:%s", p1);
	CHECK_INT(gpu_open(spec, &b1, err, sizeof(err)), 0);
	CHECK_INT(gpu_count(b0), 8);
	CHECK_STR(gpu_backend_name(b0), "sim");
	CHECK_STR(gpu_driver_version(b0), "sim-550.54.15");
	struct gpu_info g0, g1, g7;
	CHECK_INT(gpu_info(b0, 0, &g0), 0);
	CHECK_INT(gpu_info(b0, 7, &g7), 0);
	CHECK_INT(gpu_info(b1, 0, &g1), 0);
	CHECK_STR(g0.name, "NVIDIA H200");
	CHECK(g0.memory_bytes == 150754820096ull);
	CHECK_STR(g1.name, "NVIDIA A100-SXM4-80GB");
	CHECK(g1.memory_bytes == 85899345920ull);
	CHECK(strcmp(g0.uuid, g7.uuid) != 0);
	CHECK(strcmp(g0.uuid, g1.uuid) != 0);
	CHECK(strncmp(g0.uuid, "GPU-", 4) == 0);
	CHECK(strcmp(g0.pci_bus_id, g7.pci_bus_id) != 0);
	gpu_close(b1);
	/* Deterministic: the same node gets the same UUIDs again. */
	CHECK_INT(gpu_sim_write_file(p1, 8, "H200", 0), 0);
	CHECK_INT(gpu_open(spec, &b1, err, sizeof(err)), 0);
	CHECK_INT(gpu_info(b1, 0, &g1), 0);
	CHECK_STR(g1.uuid, g0.uuid);
	gpu_close(b0);
	gpu_close(b1);
	/* Unknown model: its name, 80 GiB; 64 GPUs have distinct bus ids. */
	CHECK_INT(gpu_sim_write_file(p0, 64, "Mystery X1", 3), 0);
	snprintf(spec, sizeof(spec), "sim:%s", p0);
	CHECK_INT(gpu_open(spec, &b0, err, sizeof(err)), 0);
	CHECK_INT(gpu_count(b0), 64);
	CHECK_INT(gpu_info(b0, 63, &g0), 0);
	CHECK_STR(g0.name, "Mystery X1");
	CHECK(g0.memory_bytes == 80ull << 30);
	gpu_close(b0);
	CHECK_INT(gpu_sim_write_file(p0, 65, "H200", 0), ERR_INVALID);
	CHECK_INT(gpu_sim_write_file(p0, 1, "H200", -1), ERR_INVALID);
	CHECK_INT(gpu_sim_write_file(p0, 0, NULL, 0), 0);
	rm_rf(dir);
}

TEST(old_file_reads_topology_as_unknown)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(open_text(ONE_GPU(""), &b, err, sizeof(err)), 0);
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 0, &g), 0);
	CHECK_INT(g.minor, -1);
	CHECK_INT(g.numa_node, -1);
	CHECK_STR(g.cpu_affinity, "");
	CHECK_INT(g.mig_mode, -1);
	CHECK_INT(g.persistence_mode, -1);
	CHECK_INT(g.nvlinks, 0);
	CHECK_INT(gpu_link_between(b, 0, 0), GPU_LINK_SELF);
	CHECK_INT(gpu_link_between(b, 0, 1), GPU_LINK_SYS);
	gpu_close(b);
	rm_rf(dir);
}

/* Four GPUs: 0-1 NVLinked, 2-3 behind one switch, all four on NUMA node 0
 * except 3 on node 1. */
#define FOUR_GPUS(g0, g3)                                                                          \
	"{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":["                              \
	"{\"index\":0,\"uuid\":\"GPU-0\",\"name\":\"NVIDIA A100-SXM4-80GB\",\"memory_bytes\":8,"   \
	"\"pci_bus_id\":\"a\",\"minor\":4,\"numa_node\":0,\"cpu_affinity\":\"0-31,64-95\","        \
	"\"mig_mode\":true,\"persistence_mode\":false,\"nvlink_peers\":[1]" g0 "},"                \
	"{\"index\":1,\"uuid\":\"GPU-1\",\"name\":\"n\",\"memory_bytes\":8,\"pci_bus_id\":\"b\","  \
	"\"numa_node\":0,\"nvlink_peers\":[0]},"                                                   \
	"{\"index\":2,\"uuid\":\"GPU-2\",\"name\":\"n\",\"memory_bytes\":8,\"pci_bus_id\":\"c\","  \
	"\"numa_node\":0,\"pcie_switch\":7},"                                                      \
	"{\"index\":3,\"uuid\":\"GPU-3\",\"name\":\"n\",\"memory_bytes\":8,\"pci_bus_id\":\"d\","  \
	"\"numa_node\":1,\"pcie_switch\":7" g3 "}]}"

TEST(reads_topology_fields)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(open_text(FOUR_GPUS("", ""), &b, err, sizeof(err)), 0);
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 0, &g), 0);
	CHECK_INT(g.minor, 4);
	CHECK_INT(g.numa_node, 0);
	CHECK_STR(g.cpu_affinity, "0-31,64-95");
	CHECK_INT(g.mig_mode, 1);
	CHECK_INT(g.persistence_mode, 0);
	CHECK_INT(g.nvlinks, 1);
	CHECK_INT(gpu_info(b, 3, &g), 0);
	CHECK_INT(g.minor, -1);
	CHECK_INT(g.numa_node, 1);
	CHECK_INT(g.nvlinks, 0);
	CHECK_INT(gpu_link_between(b, 0, 1), GPU_LINK_NVLINK);
	CHECK_INT(gpu_link_between(b, 1, 0), GPU_LINK_NVLINK);
	CHECK_INT(gpu_link_between(b, 2, 3), GPU_LINK_PIX); /* the switch beats NUMA */
	CHECK_INT(gpu_link_between(b, 0, 2), GPU_LINK_NODE);
	CHECK_INT(gpu_link_between(b, 1, 3), GPU_LINK_SYS);
	CHECK_INT(gpu_link_between(b, 2, 2), GPU_LINK_SELF);
	CHECK_INT(gpu_link_between(b, 0, 4), GPU_LINK_SYS);
	CHECK_INT(gpu_link_between(b, -1, 0), GPU_LINK_SYS);
	uint64_t groups[8];
	CHECK_INT(gpu_groups(b, groups, 8), 2);
	CHECK(groups[0] == 0x3); /* NVLink */
	CHECK(groups[1] == 0xc); /* PCIe switch */
	gpu_close(b);
	rm_rf(dir);
}

TEST(rejects_bad_topology_fields)
{
	expect_invalid(ONE_GPU(",\"minor\":-1"),
	               "gpus[0]: field 'minor': -1 is below the minimum 0");
	expect_invalid(ONE_GPU(",\"minor\":\"0\""),
	               "gpus[0]: field 'minor': \"0\" is not an integer");
	expect_invalid(FOUR_GPUS("", ",\"minor\":4"), "gpus[3]: field 'minor': 4 repeats gpus[0]");
	expect_invalid(ONE_GPU(",\"numa_node\":5000"),
	               "gpus[0]: field 'numa_node': 5000 is above the maximum 1023");
	expect_invalid(ONE_GPU(",\"cpu_affinity\":\"0-x\""),
	               "gpus[0]: field 'cpu_affinity': \"0-x\" is not a cpulist");
	expect_invalid(ONE_GPU(",\"cpu_affinity\":\"9-3\""),
	               "gpus[0]: field 'cpu_affinity': \"9-3\" is not a cpulist");
	expect_invalid(ONE_GPU(",\"cpu_affinity\":\"1,\""), "field 'cpu_affinity'");
	expect_invalid(ONE_GPU(",\"cpu_affinity\":\"\""),
	               "gpus[0]: field 'cpu_affinity': must not be empty");
	expect_invalid(ONE_GPU(",\"mig_mode\":1"),
	               "gpus[0]: field 'mig_mode': 1 is not true or false");
	expect_invalid(ONE_GPU(",\"persistence_mode\":\"on\""),
	               "gpus[0]: field 'persistence_mode': \"on\" is not true or false");
	expect_invalid(ONE_GPU(",\"pcie_switch\":-2"),
	               "gpus[0]: field 'pcie_switch': -2 is below the minimum 0");
	expect_invalid(ONE_GPU(",\"nvlink_peers\":3"),
	               "gpus[0]: field 'nvlink_peers': 3 is not an array");
	expect_invalid(ONE_GPU(",\"nvlink_peers\":[\"1\"]"),
	               "gpus[0]: field 'nvlink_peers[0]': \"1\" is not an integer");
	expect_invalid(ONE_GPU(",\"nvlink_peers\":[0]"),
	               "gpus[0]: field 'nvlink_peers[0]': 0 is the GPU itself");
	expect_invalid(ONE_GPU(",\"nvlink_peers\":[1]"),
	               "gpus[0]: field 'nvlink_peers[0]': 1 is not a GPU of this file (0..0)");
	expect_invalid(FOUR_GPUS(",\"extra\":0", ""), "gpus[0]: field 'extra': unknown field");
	/* One-sided: GPU 3 lists 2, which does not list it back. */
	expect_invalid(FOUR_GPUS("", ",\"nvlink_peers\":[2]"),
	               "gpus[3]: field 'nvlink_peers': lists 2, but gpus[2] does not list 3 "
	               "(NVLinks are symmetric)");
	expect_invalid(FOUR_GPUS("", ",\"nvlink_peers\":[2,2]"),
	               "gpus[3]: field 'nvlink_peers[1]': 2 repeats");
	rm_rf(dir);
}

/* Writes a board with gpu_sim_write_file_topo and opens it. */
static struct gpu_backend *open_board(int count, const char *model, int island)
{
	const char *path = tmp_path("board.json");
	CHECK_INT(gpu_sim_write_file_topo(path, count, model, 0, island), 0);
	char spec[160], err[512] = "";
	snprintf(spec, sizeof(spec), "sim:%s", path);
	struct gpu_backend *b = NULL;
	int rc = gpu_open(spec, &b, err, sizeof(err));
	if (rc)
		FAIL_AT("gpu_open: %s", err);
	return b;
}

TEST(board_with_nvlink_islands_of_four)
{
	const char *path = tmp_path("islands.json");
	CHECK_INT(gpu_sim_write_file(path, 8, "H200", 2), 0);
	char spec[160], err[512] = "";
	snprintf(spec, sizeof(spec), "sim:%s", path);
	struct gpu_backend *b = NULL;
	CHECK_INT(gpu_open(spec, &b, err, sizeof(err)), 0);
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 5, &g), 0);
	CHECK_INT(g.minor, 5);
	CHECK_INT(g.numa_node, 1);
	CHECK_STR(g.cpu_affinity, "56-111,168-223");
	CHECK_INT(g.mig_mode, 0);
	CHECK_INT(g.persistence_mode, 1);
	CHECK_INT(g.nvlinks, 3);
	CHECK_INT(gpu_info(b, 0, &g), 0);
	CHECK_STR(g.cpu_affinity, "0-55,112-167");
	/* The whole matrix: NV inside an island, SYS across (other NUMA). */
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 8; j++)
			CHECK_INT(gpu_link_between(b, i, j),
			          i == j ? GPU_LINK_SELF
			                 : (i / 4 == j / 4 ? GPU_LINK_NVLINK : GPU_LINK_SYS));
	/* Without NVLink: a PCIe switch per pair, NUMA halves. */
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 8; j++)
			CHECK_INT(gpu_pcie_between(b, i, j), i == j           ? GPU_LINK_SELF
			                                     : i / 2 == j / 2 ? GPU_LINK_PIX
			                                     : i / 4 == j / 4 ? GPU_LINK_NODE
			                                                      : GPU_LINK_SYS);
	uint64_t groups[8];
	CHECK_INT(gpu_groups(b, groups, 8), 2);
	CHECK(groups[0] == 0x0f);
	CHECK(groups[1] == 0xf0);
	CHECK_INT(gpu_groups(b, groups, 1), 1);
	CHECK(groups[0] == 0x0f);
	gpu_close(b);
	rm_rf(dir);
}

TEST(board_without_nvlink_groups_by_switch_then_numa)
{
	struct gpu_backend *b = open_board(8, "A100", 0);
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 0, &g), 0);
	CHECK_INT(g.nvlinks, 0);
	CHECK_INT(gpu_link_between(b, 0, 1), GPU_LINK_PIX);
	CHECK_INT(gpu_link_between(b, 0, 2), GPU_LINK_NODE);
	CHECK_INT(gpu_link_between(b, 3, 4), GPU_LINK_SYS);
	uint64_t groups[8];
	CHECK_INT(gpu_groups(b, groups, 8), 4);
	CHECK(groups[0] == 0x03 && groups[1] == 0x0c && groups[2] == 0x30 && groups[3] == 0xc0);
	gpu_close(b);
	/* Islands of 3 over 8 GPUs: 0-2, 3-5, 6-7; the last is smaller. */
	b = open_board(8, "H100", 3);
	CHECK_INT(gpu_groups(b, groups, 8), 3);
	CHECK(groups[0] == 0x07 && groups[1] == 0x38 && groups[2] == 0xc0);
	gpu_close(b);
	/* One GPU per switch: NUMA halves are what is left. */
	const char *text = "{\"driver_version\":\"x\",\"cuda_version\":\"1\",\"gpus\":["
	                   "{\"index\":0,\"uuid\":\"GPU-0\",\"name\":\"n\",\"memory_bytes\":8,"
	                   "\"pci_bus_id\":\"a\",\"numa_node\":0},"
	                   "{\"index\":1,\"uuid\":\"GPU-1\",\"name\":\"n\",\"memory_bytes\":8,"
	                   "\"pci_bus_id\":\"b\",\"numa_node\":1},"
	                   "{\"index\":2,\"uuid\":\"GPU-2\",\"name\":\"n\",\"memory_bytes\":8,"
	                   "\"pci_bus_id\":\"c\",\"numa_node\":0},"
	                   "{\"index\":3,\"uuid\":\"GPU-3\",\"name\":\"n\",\"memory_bytes\":8,"
	                   "\"pci_bus_id\":\"d\"}]}";
	char err[512] = "";
	CHECK_INT(open_text(text, &b, err, sizeof(err)), 0);
	CHECK_INT(gpu_groups(b, groups, 8), 3);
	CHECK(groups[0] == 0x5 && groups[1] == 0x2 && groups[2] == 0x8);
	gpu_close(b);
	CHECK_INT(gpu_sim_write_file_topo(tmp_path("x.json"), 8, "H200", 0, -1), ERR_INVALID);
	CHECK_INT(gpu_sim_write_file_topo(tmp_path("x.json"), 8, "H200", 0, 65), ERR_INVALID);
	rm_rf(dir);
}

/* Injects a fault given as JSON text; returns the rc, err filled. */
static int inject(struct gpu_backend *b, const char *text, char *err, size_t errlen)
{
	json_t *f = NULL;
	CHECK_INT(jv_parse_object(text, strlen(text), &f, err, errlen), 0);
	int rc = gpu_inject(b, f, err, errlen);
	json_decref(f);
	return rc;
}

static void must_inject(struct gpu_backend *b, const char *text)
{
	char err[512] = "";
	if (inject(b, text, err, sizeof(err)) != 0)
		FAIL_AT("inject %s: %s", text, err);
}

static struct gpu_sample sample_of(struct gpu_backend *b, int index)
{
	struct gpu_sample s;
	memset(&s, 0x5a, sizeof(s));
	CHECK_INT(gpu_sample(b, index, &s), 0);
	return s;
}

TEST(sample_of_an_idle_gpu)
{
	struct gpu_backend *b = open_board(2, "H200", 2);
	struct gpu_sample s = sample_of(b, 1);
	CHECK_INT(s.lost, 0);
	CHECK_INT(s.util_gpu_pct, 0);
	CHECK_INT(s.util_mem_pct, 0);
	CHECK_INT(s.mem_used_bytes, 0);
	CHECK_INT(s.mem_free_bytes, 150754820096ll);
	CHECK_INT(s.temp_c, 35);
	CHECK_INT(s.power_mw, 75000);
	CHECK_INT(s.sm_clock_mhz, 1980);
	CHECK_INT(s.mem_clock_mhz, 3201);
	CHECK_INT(s.throttle_reasons, 0);
	CHECK_INT(s.ecc_sbe_volatile, 0);
	CHECK_INT(s.ecc_dbe_aggregate, 0);
	CHECK_INT(s.retired_sbe, -1); /* rows are remapped, pages not retired */
	CHECK_INT(s.retired_dbe, -1);
	CHECK_INT(s.retired_pending, -1);
	CHECK_INT(s.remap_correctable, 0);
	CHECK_INT(s.remap_pending, 0);
	CHECK_INT(s.remap_failure, 0);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_NONE);
	/* Energy accumulates over real time from power: 75 W for >= 50 ms. */
	int64_t e0 = s.energy_mj;
	sleep_ms(50);
	s = sample_of(b, 1);
	CHECK(s.energy_mj - e0 >= 75 * 50 - 1);
	CHECK(s.energy_mj - e0 < 75 * 5000);
	CHECK_INT(gpu_sample(b, 2, &s), ERR_NOTFOUND);
	CHECK_INT(gpu_sample(b, -1, &s), ERR_NOTFOUND);
	gpu_close(b);
	/* A100 clocks and power. */
	b = open_board(1, "A100", 0);
	s = sample_of(b, 0);
	CHECK_INT(s.sm_clock_mhz, 1410);
	CHECK_INT(s.mem_clock_mhz, 1593);
	CHECK_INT(s.power_mw, 60000);
	gpu_close(b);
	rm_rf(dir);
}

TEST(faults_load_power_temperature_throttle)
{
	struct gpu_backend *b = open_board(2, "H200", 2);
	must_inject(b, "{\"gpu\":0,\"kind\":\"load\",\"util_pct\":100,\"mem_used_bytes\":1000}");
	struct gpu_sample s = sample_of(b, 0);
	CHECK_INT(s.util_gpu_pct, 100);
	CHECK_INT(s.util_mem_pct, 50);
	CHECK_INT(s.mem_used_bytes, 1000);
	CHECK_INT(s.mem_free_bytes, 150754820096ll - 1000);
	CHECK_INT(s.temp_c, 75);
	CHECK_INT(s.power_mw, 700000);
	CHECK_INT(s.throttle_reasons, 0);
	CHECK_INT(sample_of(b, 1).util_gpu_pct, 0); /* only GPU 0 */
	must_inject(b, "{\"gpu\":0,\"kind\":\"power\",\"watts\":720}");
	CHECK_INT(sample_of(b, 0).power_mw, 720000);
	must_inject(b, "{\"gpu\":0,\"kind\":\"temperature\",\"celsius\":86}");
	s = sample_of(b, 0);
	CHECK_INT(s.temp_c, 86);
	CHECK_INT(s.throttle_reasons, 0);
	must_inject(b, "{\"gpu\":0,\"kind\":\"temperature\",\"celsius\":91}");
	s = sample_of(b, 0);
	CHECK_INT(s.temp_c, 91);
	CHECK_INT(s.throttle_reasons, GPU_THROTTLE_SW_THERMAL | GPU_THROTTLE_HW_THERMAL);
	CHECK_INT(s.sm_clock_mhz, 990);
	must_inject(b, "{\"gpu\":1,\"kind\":\"throttle\",\"reasons\":4}");
	s = sample_of(b, 1);
	CHECK_INT(s.throttle_reasons, GPU_THROTTLE_SW_POWER_CAP);
	CHECK_INT(s.sm_clock_mhz, 1683);
	CHECK_INT(s.temp_c, 35);
	must_inject(b, "{\"gpu\":0,\"kind\":\"clear\"}");
	s = sample_of(b, 0);
	CHECK_INT(s.util_gpu_pct, 0);
	CHECK_INT(s.temp_c, 35);
	CHECK_INT(s.power_mw, 75000);
	CHECK_INT(s.throttle_reasons, 0);
	gpu_close(b);
	rm_rf(dir);
}

TEST(faults_xid_effects_and_events)
{
	struct gpu_backend *b = open_board(4, "H200", 4);
	struct gpu_event ev[8];
	CHECK_INT(gpu_events(b, 0, ev, 8), 0);
	must_inject(b, "{\"gpu\":1,\"kind\":\"xid\",\"xid\":48}");
	struct gpu_sample s = sample_of(b, 1);
	CHECK_INT(s.ecc_dbe_volatile, 1);
	CHECK_INT(s.ecc_dbe_aggregate, 1);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_GPU_RESET);
	must_inject(b, "{\"gpu\":2,\"kind\":\"xid\",\"xid\":63}");
	s = sample_of(b, 2);
	CHECK_INT(s.remap_pending, 1);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_NONE);
	must_inject(b, "{\"gpu\":2,\"kind\":\"xid\",\"xid\":64}");
	CHECK_INT(sample_of(b, 2).recovery_action, GPU_RECOVERY_GPU_RESET);
	must_inject(b, "{\"gpu\":3,\"kind\":\"xid\",\"xid\":74}");
	s = sample_of(b, 3);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_NONE);
	CHECK_INT(s.ecc_dbe_volatile, 0);
	CHECK_INT(s.remap_pending, 0);
	CHECK_INT(s.lost, 0);
	must_inject(b, "{\"gpu\":3,\"kind\":\"xid\",\"xid\":74,\"recovery_action\":3}");
	CHECK_INT(sample_of(b, 3).recovery_action, GPU_RECOVERY_DRAIN_P2P);
	must_inject(b, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":79}");
	s = sample_of(b, 0);
	CHECK_INT(s.lost, 1);
	CHECK_INT(s.temp_c, -1);
	CHECK_INT(s.recovery_action, -1);
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 0, &g), 0); /* info still answers */
	/* Events come out in order, max at a time, stamped when read. */
	int64_t before = wall_ms();
	CHECK_INT(gpu_events(b, 0, ev, 3), 3);
	CHECK_INT(ev[0].index, 1);
	CHECK_INT(ev[0].xid, 48);
	CHECK(ev[0].wall_ms >= before);
	CHECK_INT(ev[1].index, 2);
	CHECK_INT(ev[1].xid, 63);
	CHECK_INT(ev[2].xid, 64);
	CHECK_INT(gpu_events(b, 0, ev, 8), 3);
	CHECK_INT(ev[0].xid, 74);
	CHECK_INT(ev[1].xid, 74);
	CHECK_INT(ev[2].index, 0);
	CHECK_INT(ev[2].xid, 79);
	/* Nothing queued: a wait lasts its timeout. */
	int64_t t0 = now_ms();
	CHECK_INT(gpu_events(b, 60, ev, 8), 0);
	CHECK(now_ms() - t0 >= 55);
	CHECK_INT(gpu_events(b, 0, ev, 0), -EINVAL);
	must_inject(b, "{\"gpu\":0,\"kind\":\"clear\"}");
	CHECK_INT(sample_of(b, 0).lost, 0);
	gpu_close(b);
	rm_rf(dir);
}

TEST(events_keep_the_newest_when_full)
{
	struct gpu_backend *b = open_board(1, "H200", 0);
	char fault[128];
	for (int i = 0; i < SIM_EVENTS_MAX + 5; i++) {
		snprintf(fault, sizeof(fault), "{\"gpu\":0,\"kind\":\"xid\",\"xid\":%d}",
		         1 + i % 900);
		must_inject(b, fault);
	}
	static struct gpu_event ev[SIM_EVENTS_MAX + 5];
	CHECK_INT(gpu_events(b, 0, ev, SIM_EVENTS_MAX + 5), SIM_EVENTS_MAX);
	CHECK_INT(ev[0].xid, 6);
	CHECK_INT(ev[SIM_EVENTS_MAX - 1].xid, 1 + (SIM_EVENTS_MAX + 4) % 900);
	gpu_close(b);
	rm_rf(dir);
}

struct injector {
	struct gpu_backend *b;
	int delay_ms;
};

static void *inject_later(void *arg)
{
	struct injector *in = arg;
	sleep_ms(in->delay_ms);
	must_inject(in->b, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":13}");
	return NULL;
}

TEST(events_wake_when_another_thread_injects)
{
	struct gpu_backend *b = open_board(1, "H200", 0);
	struct injector in = {b, 50};
	pthread_t t;
	CHECK_INT(pthread_create(&t, NULL, inject_later, &in), 0);
	struct gpu_event ev[4];
	int64_t t0 = now_ms();
	CHECK_INT(gpu_events(b, 10000, ev, 4), 1);
	CHECK(now_ms() - t0 < 5000);
	CHECK_INT(ev[0].xid, 13);
	pthread_join(t, NULL);
	gpu_close(b);
	rm_rf(dir);
}

TEST(faults_ecc_remap_recovery)
{
	struct gpu_backend *b = open_board(1, "H200", 0);
	must_inject(b, "{\"gpu\":0,\"kind\":\"ecc\",\"correctable\":5,\"uncorrectable\":2}");
	must_inject(b, "{\"gpu\":0,\"kind\":\"ecc\",\"correctable\":1}");
	struct gpu_sample s = sample_of(b, 0);
	CHECK_INT(s.ecc_sbe_volatile, 6);
	CHECK_INT(s.ecc_sbe_aggregate, 6);
	CHECK_INT(s.ecc_dbe_volatile, 2);
	CHECK_INT(s.ecc_dbe_aggregate, 2);
	must_inject(b, "{\"gpu\":0,\"kind\":\"remap\",\"correctable\":3,\"uncorrectable\":1,"
	               "\"pending\":1}");
	must_inject(b, "{\"gpu\":0,\"kind\":\"remap\",\"failure\":1}");
	s = sample_of(b, 0);
	CHECK_INT(s.remap_correctable, 3);
	CHECK_INT(s.remap_uncorrectable, 1);
	CHECK_INT(s.remap_pending, 1);
	CHECK_INT(s.remap_failure, 1);
	must_inject(b, "{\"gpu\":0,\"kind\":\"recovery_action\",\"action\":4}");
	CHECK_INT(sample_of(b, 0).recovery_action, GPU_RECOVERY_DRAIN_AND_RESET);
	must_inject(b, "{\"gpu\":0,\"kind\":\"clear\"}");
	s = sample_of(b, 0);
	CHECK_INT(s.ecc_sbe_aggregate, 0);
	CHECK_INT(s.remap_failure, 0);
	CHECK_INT(s.recovery_action, 0);
	gpu_close(b);
	rm_rf(dir);
}

TEST(reset_clears_volatile_state_and_fails_on_a_lost_gpu)
{
	struct gpu_backend *b = open_board(2, "H200", 2);
	char err[512] = "";
	must_inject(b, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":48}");
	must_inject(b, "{\"gpu\":0,\"kind\":\"ecc\",\"correctable\":4}");
	must_inject(b, "{\"gpu\":0,\"kind\":\"remap\",\"pending\":1,\"uncorrectable\":1}");
	must_inject(b, "{\"gpu\":0,\"kind\":\"temperature\",\"celsius\":95}");
	must_inject(b, "{\"gpu\":0,\"kind\":\"throttle\",\"reasons\":8}");
	must_inject(b, "{\"gpu\":0,\"kind\":\"load\",\"util_pct\":40}");
	int64_t t0 = now_ms();
	CHECK_INT(gpu_reset(b, 0, err, sizeof(err)), 0);
	CHECK(now_ms() - t0 >= SIM_RESET_MS); /* a file without reset_ms: the default */
	struct gpu_sample s = sample_of(b, 0);
	CHECK_INT(s.ecc_sbe_volatile, 0);
	CHECK_INT(s.ecc_dbe_volatile, 0);
	CHECK_INT(s.ecc_sbe_aggregate, 4); /* lifetime counters stay */
	CHECK_INT(s.ecc_dbe_aggregate, 1);
	CHECK_INT(s.remap_pending, 0);
	CHECK_INT(s.remap_uncorrectable, 1);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_NONE);
	CHECK_INT(s.temp_c, 35 + 40 * 40 / 100);
	CHECK_INT(s.throttle_reasons, 0);
	CHECK_INT(s.util_gpu_pct, 40);
	must_inject(b, "{\"gpu\":1,\"kind\":\"lost\"}");
	CHECK_INT(sample_of(b, 1).lost, 1);
	t0 = now_ms();
	CHECK_INT(gpu_reset(b, 1, err, sizeof(err)), ERR_UPSTREAM);
	CHECK(now_ms() - t0 < SIM_RESET_MS); /* a lost GPU fails at once */
	CHECK_CONTAINS(err, "gpu 1: GPU fell off the bus; the node needs a reboot");
	CHECK_INT(gpu_reset(b, 2, err, sizeof(err)), ERR_NOTFOUND);
	CHECK_CONTAINS(err, "gpu 2");
	gpu_close(b);
	rm_rf(dir);
}

#define RESET_FILE(ms)                                                                             \
	"{\"driver_version\":\"sim-550.54.15\",\"cuda_version\":\"12.4\",\"reset_ms\":" ms         \
	",\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"NVIDIA H200\","                     \
	"\"memory_bytes\":150754820096,\"pci_bus_id\":\"00000000:18:00.0\"}]}"

struct resetter {
	struct gpu_backend *b;
	int rc;
	int64_t took_ms;
	char err[256];
};

static void *reset_now(void *arg)
{
	struct resetter *r = arg;
	int64_t t0 = now_ms();
	r->rc = gpu_reset(r->b, 0, r->err, sizeof(r->err));
	r->took_ms = now_ms() - t0;
	return NULL;
}

TEST(reset_takes_reset_ms_and_the_fault_shows_until_it_is_done)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(open_text(RESET_FILE("400"), &b, err, sizeof(err)), 0);
	must_inject(b, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":48}");
	struct resetter r = {.b = b};
	pthread_t t;
	CHECK_INT(pthread_create(&t, NULL, reset_now, &r), 0);
	sleep_ms(100);
	/* mid-reset: samples still answer, and still show the fault */
	struct gpu_sample s = sample_of(b, 0);
	CHECK_INT(s.ecc_dbe_volatile, 1);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_GPU_RESET);
	pthread_join(t, NULL);
	CHECK_INT(r.rc, 0);
	CHECK(r.took_ms >= 400);
	s = sample_of(b, 0);
	CHECK_INT(s.ecc_dbe_volatile, 0);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_NONE);
	/* a GPU that falls off the bus during the reset fails it */
	CHECK_INT(pthread_create(&t, NULL, reset_now, &r), 0);
	sleep_ms(100);
	must_inject(b, "{\"gpu\":0,\"kind\":\"lost\"}");
	pthread_join(t, NULL);
	CHECK_INT(r.rc, ERR_UPSTREAM);
	CHECK_CONTAINS(r.err, "gpu 0: GPU fell off the bus");
	gpu_close(b);
	/* 0 is an instant reset; out of range is refused */
	CHECK_INT(open_text(RESET_FILE("0"), &b, err, sizeof(err)), 0);
	must_inject(b, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":48}");
	r.b = b;
	reset_now(&r);
	CHECK_INT(r.rc, 0);
	CHECK(r.took_ms < 100);
	CHECK_INT(sample_of(b, 0).ecc_dbe_volatile, 0);
	gpu_close(b);
	expect_invalid(RESET_FILE("-1"), "field 'reset_ms': -1 is below the minimum 0");
	expect_invalid(RESET_FILE("60001"), "field 'reset_ms': 60001 is above the maximum 60000");
	expect_invalid(RESET_FILE("\"2s\""), "field 'reset_ms': \"2s\" is not an integer");
	rm_rf(dir);
}

static void expect_bad_fault(struct gpu_backend *b, const char *text, const char *reason)
{
	char err[512] = "";
	CHECK_INT(inject(b, text, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, reason);
}

TEST(rejects_bad_faults)
{
	struct gpu_backend *b = open_board(2, "H200", 2);
	expect_bad_fault(b, "{\"gpu\":0}", "fault: field 'kind': required, one of xid, ecc");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"melt\"}",
	                 "fault: field 'kind': \"melt\" is not one of xid, ecc");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":7}", "fault: field 'kind': 7 is not one of");
	expect_bad_fault(b, "{\"kind\":\"lost\"}", "fault \"lost\": field 'gpu': required");
	expect_bad_fault(b, "{\"gpu\":2,\"kind\":\"lost\"}",
	                 "fault \"lost\": field 'gpu': 2 is not a GPU of this node (it has 2)");
	expect_bad_fault(b, "{\"gpu\":-1,\"kind\":\"lost\"}",
	                 "field 'gpu': -1 is below the minimum 0");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"lost\",\"xid\":3}",
	                 "fault \"lost\": field 'xid': unknown field");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"xid\"}", "fault \"xid\": field 'xid': required");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":0}",
	                 "field 'xid': 0 is below the minimum 1");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":79,\"recovery_action\":5}",
	                 "field 'recovery_action': 5 is above the maximum 4");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"ecc\",\"correctable\":-1}",
	                 "fault \"ecc\": field 'correctable': -1 is below the minimum 0");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"temperature\",\"celsius\":200}",
	                 "field 'celsius': 200 is above the maximum 150");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"throttle\",\"reasons\":\"x\"}",
	                 "field 'reasons': \"x\" is not an integer");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"power\",\"watts\":9000}",
	                 "field 'watts': 9000 is above the maximum 2000");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"load\",\"util_pct\":101}",
	                 "field 'util_pct': 101 is above the maximum 100");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"load\",\"mem_used_bytes\":150754820097}",
	                 "fault \"load\": field 'mem_used_bytes': 150754820097 is more than gpu "
	                 "0's memory");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"remap\",\"pending\":2}",
	                 "field 'pending': 2 is above the maximum 1");
	expect_bad_fault(b, "{\"gpu\":0,\"kind\":\"recovery_action\"}",
	                 "fault \"recovery_action\": field 'action': required");
	/* A rejected fault changed nothing. */
	struct gpu_sample s = sample_of(b, 0);
	CHECK_INT(s.util_gpu_pct, 0);
	CHECK_INT(s.lost, 0);
	struct gpu_event ev[2];
	CHECK_INT(gpu_events(b, 0, ev, 2), 0);
	char err[256];
	json_t *arr = json_array();
	CHECK_INT(gpu_inject(b, arr, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "expected a JSON object");
	json_decref(arr);
	gpu_close(b);
	rm_rf(dir);
}

TEST(inventory_and_sample_json)
{
	struct gpu_backend *b = open_board(2, "H200", 2);
	json_t *inv = gpu_inventory_json(b);
	char *text = jv_dump(inv);
	CHECK_CONTAINS(text, "\"index\":1,\"uuid\":\"GPU-");
	CHECK_CONTAINS(text, "\"name\":\"NVIDIA H200\",\"memory_bytes\":150754820096,"
	                     "\"pci_bus_id\":\"00000000:2A:00.0\",\"minor\":1,\"numa_node\":1,"
	                     "\"cpu_affinity\":\"56-111,168-223\",\"mig_mode\":0,"
	                     "\"persistence_mode\":1,\"nvlinks\":1,\"links\":[\"NV\",\"SELF\"]");
	free(text);
	CHECK_INT(json_array_size(inv), 2);
	json_decref(inv);
	must_inject(b, "{\"gpu\":0,\"kind\":\"recovery_action\",\"action\":1}");
	struct gpu_sample s = sample_of(b, 0);
	json_t *js = gpu_sample_json(&s);
	CHECK(json_is_false(json_object_get(js, "lost")));
	CHECK_INT(json_integer_value(json_object_get(js, "temp_c")), 35);
	CHECK_INT(json_integer_value(json_object_get(js, "recovery_action")), 1);
	CHECK_INT(json_integer_value(json_object_get(js, "mem_clock_mhz")), 3201);
	CHECK(json_object_get(js, "energy_mj") != NULL);
	CHECK(json_object_get(js, "retired_pending") == NULL); /* -1: left out */
	CHECK_INT(json_object_size(js), 20);
	json_decref(js);
	must_inject(b, "{\"gpu\":0,\"kind\":\"lost\"}");
	s = sample_of(b, 0);
	js = gpu_sample_json(&s);
	text = jv_dump(js);
	CHECK_STR(text, "{\"lost\":true}");
	free(text);
	json_decref(js);
	gpu_close(b);
	/* An old file: unknown fields are left out, the five old ones stay. */
	char err[512] = "";
	CHECK_INT(open_text(ONE_GPU(""), &b, err, sizeof(err)), 0);
	inv = gpu_inventory_json(b);
	text = jv_dump(inv);
	CHECK_STR(text, "[{\"index\":0,\"uuid\":\"GPU-a\",\"name\":\"NVIDIA H200\","
	                "\"memory_bytes\":150754820096,\"pci_bus_id\":\"00000000:18:00.0\","
	                "\"nvlinks\":0,\"links\":[\"SELF\"]}]");
	free(text);
	json_decref(inv);
	gpu_close(b);
	rm_rf(dir);
}

/* The inventory is what the agent registers: GPU entries of proto/wire.h
 * (wire_gpu), which the server checks each of. */
TEST(inventory_entries_pass_the_wire_table)
{
	struct gpu_backend *b = open_board(4, "H200", 2);
	json_t *facts = json_pack("{s:o}", "gpus", gpu_inventory_json(b));
	char err[256] = "";
	if (wire_check_each(facts, "gpus", &wire_gpu, err, sizeof(err)) != 0)
		FAIL_AT("%s", err);
	CHECK_INT(json_array_size(json_object_get(facts, "gpus")), 4);
	json_decref(facts);
	gpu_close(b);
	rm_rf(dir);
}

TEST(optional_operations_answer_for_a_backend_without_them)
{
	struct gpu_backend *b = NULL;
	char err[256] = "";
	CHECK_INT(gpu_open("none", &b, err, sizeof(err)), 0);
	struct gpu_sample s;
	struct gpu_event ev[1];
	CHECK_INT(gpu_sample(b, 0, &s), ERR_NOTFOUND);
	CHECK_INT(gpu_events(b, 0, ev, 1), -ENOSYS);
	CHECK_INT(gpu_reset(b, 0, err, sizeof(err)), ERR_NOTFOUND);
	json_t *f = json_pack("{s:i,s:s}", "gpu", 0, "kind", "lost");
	CHECK_INT(gpu_inject(b, f, err, sizeof(err)), -ENOSYS);
	CHECK_CONTAINS(err, "'none'");
	json_decref(f);
	uint64_t groups[2];
	CHECK_INT(gpu_groups(b, groups, 2), 0);
	json_t *inv = gpu_inventory_json(b);
	CHECK_INT(json_array_size(inv), 0);
	json_decref(inv);
	CHECK_STR(gpu_link_name(GPU_LINK_SELF), "SELF");
	CHECK_STR(gpu_link_name(GPU_LINK_NVLINK), "NV");
	CHECK_STR(gpu_link_name(GPU_LINK_PIX), "PIX");
	CHECK_STR(gpu_link_name(GPU_LINK_PXB), "PXB");
	CHECK_STR(gpu_link_name(GPU_LINK_PHB), "PHB");
	CHECK_STR(gpu_link_name(GPU_LINK_NODE), "NODE");
	CHECK_STR(gpu_link_name(GPU_LINK_SYS), "SYS");
	CHECK_STR(gpu_link_name((enum gpu_link)42), "?");
	gpu_close(b);
}

TEST_MAIN()
