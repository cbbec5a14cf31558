/* test_sim.c - the simulated GPU backend through gpu/gpu.h and gpu/sim.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "base/util.h"
#include "gpu/gpu.h"
#include "gpu/sim.h"

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
	CHECK_INT(gpu_open("nvml", &b, err, sizeof(err)), -ENOSYS);
	CHECK(b == NULL);
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

TEST_MAIN()
