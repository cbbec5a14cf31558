/* test_nvml.c - the NVML backend through gpu/gpu.h, loading the fake
 * libnvidia-ml of tests/fake_nvml/ by its real dlopen path. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/util.h"
#include "gpu/gpu.h"

#ifndef FAKE_NVML_PATH
#error "FAKE_NVML_PATH: the fake libnvidia-ml, set by tests/CMakeLists.txt"
#endif

static struct gpu_backend *open_fake(void)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	int rc = gpu_open("nvml:" FAKE_NVML_PATH, &b, err, sizeof(err));
	if (rc)
		FAIL_AT("gpu_open(nvml:%s): %d: %s", FAKE_NVML_PATH, rc, err);
	return b;
}

TEST(reads_the_inventory)
{
	struct gpu_backend *b = open_fake();
	CHECK_STR(gpu_backend_name(b), "nvml");
	CHECK_INT(gpu_count(b), 2);
	CHECK_STR(gpu_driver_version(b), "550.54.15");
	CHECK_STR(gpu_cuda_version(b), "12.4");
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 0, &g), 0);
	CHECK_INT(g.index, 0);
	CHECK_STR(g.uuid, "GPU-fake-0000");
	CHECK_STR(g.name, "NVIDIA H200");
	CHECK(g.memory_bytes == 150754820096ull);
	CHECK_STR(g.pci_bus_id, "0000BEEF:18:00.0");
	CHECK_INT(g.minor, 0);
	CHECK_INT(g.numa_node, 0); /* not in sysfs: nvmlDeviceGetNumaNodeId */
	CHECK_STR(g.cpu_affinity, "0-3,8");
	CHECK_INT(g.mig_mode, 0);
	CHECK_INT(g.persistence_mode, 1);
	CHECK_INT(g.nvlinks, 1);
	CHECK_INT(gpu_info(b, 1, &g), 0);
	CHECK_STR(g.uuid, "GPU-fake-0001");
	CHECK_INT(g.minor, 1);
	CHECK_INT(g.numa_node, 1);
	CHECK_STR(g.cpu_affinity, "64-67");
	CHECK_INT(g.mig_mode, -1); /* NOT_SUPPORTED */
	CHECK_INT(gpu_info(b, 2, &g), ERR_NOTFOUND);
	CHECK_INT(gpu_link_between(b, 0, 1), GPU_LINK_NVLINK);
	CHECK_INT(gpu_link_between(b, 1, 0), GPU_LINK_NVLINK);
	CHECK_INT(gpu_link_between(b, 1, 1), GPU_LINK_SELF);
	uint64_t groups[4];
	CHECK_INT(gpu_groups(b, groups, 4), 1);
	CHECK(groups[0] == 0x3);
	json_t *inv = gpu_inventory_json(b);
	char *text = jv_dump(inv);
	CHECK_CONTAINS(text, "\"uuid\":\"GPU-fake-0001\"");
	CHECK_CONTAINS(text, "\"links\":[\"NV\",\"SELF\"]");
	CHECK(!strstr(text, "\"mig_mode\":-1"));
	free(text);
	json_decref(inv);
	gpu_close(b);
}

TEST(topology_without_nvlink)
{
	setenv("FAKE_NVML_NO_NVLINK", "1", 1);
	struct gpu_backend *b = open_fake();
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 0, &g), 0);
	CHECK_INT(g.nvlinks, 0);
	CHECK_INT(gpu_link_between(b, 0, 1), GPU_LINK_PIX); /* NVML_TOPOLOGY_SINGLE */
	uint64_t groups[4];
	CHECK_INT(gpu_groups(b, groups, 4), 1);
	CHECK(groups[0] == 0x3);
	gpu_close(b);
}

TEST(samples_every_field)
{
	struct gpu_backend *b = open_fake();
	struct gpu_sample s;
	CHECK_INT(gpu_sample(b, 0, &s), 0);
	CHECK_INT(s.lost, 0);
	CHECK_INT(s.util_gpu_pct, 97);
	CHECK_INT(s.util_mem_pct, 41);
	CHECK_INT(s.mem_used_bytes, 1ll << 30);
	CHECK_INT(s.mem_free_bytes, 150754820096ll - (1ll << 30));
	CHECK_INT(s.temp_c, 61);
	CHECK_INT(s.power_mw, 650000);
	CHECK_INT(s.energy_mj, 5000000000ll);
	CHECK_INT(s.sm_clock_mhz, 1980);
	CHECK_INT(s.mem_clock_mhz, 3201);
	CHECK_INT(s.throttle_reasons, 0);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_NONE);
	CHECK_INT(gpu_sample(b, 1, &s), 0);
	/* The throttle reasons come through the older function's name. */
	CHECK_INT(s.throttle_reasons, GPU_THROTTLE_SW_POWER_CAP);
	CHECK_INT(s.ecc_sbe_volatile, 3);
	CHECK_INT(s.ecc_dbe_volatile, 0);
	CHECK_INT(s.ecc_sbe_aggregate, 10);
	CHECK_INT(s.ecc_dbe_aggregate, 1);
	CHECK_INT(s.remap_correctable, 2);
	CHECK_INT(s.remap_uncorrectable, 1);
	CHECK_INT(s.remap_pending, 1);
	CHECK_INT(s.remap_failure, 0);
	CHECK_INT(s.recovery_action, GPU_RECOVERY_GPU_RESET);
	/* The fake has no page retirement functions: unknown, not failure. */
	CHECK_INT(s.retired_sbe, -1);
	CHECK_INT(s.retired_dbe, -1);
	CHECK_INT(s.retired_pending, -1);
	CHECK_INT(gpu_sample(b, 2, &s), ERR_NOTFOUND);
	gpu_close(b);
}

TEST(a_lost_gpu_samples_as_lost)
{
	struct gpu_backend *b = open_fake();
	setenv("FAKE_NVML_LOST", "1", 1);
	struct gpu_sample s;
	CHECK_INT(gpu_sample(b, 1, &s), 0);
	CHECK_INT(s.lost, 1);
	CHECK_INT(s.temp_c, -1);
	CHECK_INT(s.mem_used_bytes, -1);
	CHECK_INT(s.recovery_action, -1);
	json_t *js = gpu_sample_json(&s);
	char *text = jv_dump(js);
	CHECK_STR(text, "{\"lost\":true}");
	free(text);
	json_decref(js);
	CHECK_INT(gpu_sample(b, 0, &s), 0);
	CHECK_INT(s.lost, 0);
	CHECK_INT(s.temp_c, 61);
	struct gpu_info g;
	CHECK_INT(gpu_info(b, 1, &g), 0); /* read at open: still there */
	CHECK_STR(g.uuid, "GPU-fake-0001");
	gpu_close(b);
}

TEST(events_report_xids)
{
	struct gpu_backend *b = open_fake();
	struct gpu_event ev[4];
	int64_t before = wall_ms();
	/* The queue holds a P-state event (not critical) and then XID 48. */
	CHECK_INT(gpu_events(b, 100, ev, 4), 1);
	CHECK_INT(ev[0].index, 1);
	CHECK_INT(ev[0].xid, 48);
	CHECK(ev[0].wall_ms >= before);
	CHECK_INT(gpu_events(b, 0, ev, 4), 0);
	char err[256];
	json_t *f = json_pack("{s:i,s:s}", "gpu", 0, "kind", "lost");
	CHECK_INT(gpu_inject(b, f, err, sizeof(err)), -ENOSYS);
	CHECK_CONTAINS(err, "'nvml'");
	json_decref(f);
	gpu_close(b);
}

TEST(a_missing_library_is_notfound)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(gpu_open("nvml:/nonexistent/libnvidia-ml.so.1", &b, err, sizeof(err)),
	          ERR_NOTFOUND);
	CHECK(b == NULL);
	CHECK_CONTAINS(err, "gpu backend nvml: cannot load /nonexistent/libnvidia-ml.so.1 (");
	CHECK_CONTAINS(err, "running without GPUs");
}

TEST(a_missing_required_function_is_notfound)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	CHECK_INT(gpu_open("nvml:" FAKE_NVML_OLD_PATH, &b, err, sizeof(err)), ERR_NOTFOUND);
	CHECK(b == NULL);
	CHECK_CONTAINS(err, "has no function nvmlDeviceGetMemoryInfo");
}

TEST(no_driver_or_no_gpu_is_notfound)
{
	struct gpu_backend *b = NULL;
	char err[512] = "";
	setenv("FAKE_NVML_INIT_FAIL", "1", 1);
	CHECK_INT(gpu_open("nvml:" FAKE_NVML_PATH, &b, err, sizeof(err)), ERR_NOTFOUND);
	CHECK_CONTAINS(err, "nvmlInit_v2");
	CHECK_CONTAINS(err, "Driver Not Loaded");
	unsetenv("FAKE_NVML_INIT_FAIL");
	setenv("FAKE_NVML_COUNT", "0", 1);
	CHECK_INT(gpu_open("nvml:" FAKE_NVML_PATH, &b, err, sizeof(err)), ERR_NOTFOUND);
	CHECK_CONTAINS(err, "gpu backend nvml: the NVIDIA driver reports no GPU");
	CHECK(b == NULL);
	/* A GPU lost at open fails the open: its facts cannot be read. */
	setenv("FAKE_NVML_COUNT", "2", 1);
	setenv("FAKE_NVML_LOST", "0", 1);
	CHECK_INT(gpu_open("nvml:" FAKE_NVML_PATH, &b, err, sizeof(err)), ERR_UPSTREAM);
	CHECK_CONTAINS(err, "GPU 0: nvmlDeviceGetUUID: GPU is lost");
}

/* Puts a fake nvidia-smi first in PATH: it logs its arguments to args and
 * prints then exits as told. */
static void fake_smi(const char *dir, const char *say, int exit_code)
{
	char path[256], script[1024];
	snprintf(path, sizeof(path), "%s/nvidia-smi", dir);
	snprintf(script, sizeof(script), "#!/bin/sh\necho \"$@\" > %s/args\nprintf '%s'\nexit %d\n",
	         dir, say, exit_code);
	CHECK_INT(write_file_atomic(path, script, strlen(script), 0755), 0);
	char env[1024];
	snprintf(env, sizeof(env), "%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	setenv("PATH", env, 1);
}

TEST(reset_runs_nvidia_smi)
{
	char dir[] = "/tmp/anvil-nvml-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	const char *path = getenv("PATH");
	char saved[1024];
	snprintf(saved, sizeof(saved), "%s", path ? path : "/usr/bin:/bin");
	struct gpu_backend *b = open_fake();
	char err[512] = "", args_path[128];
	snprintf(args_path, sizeof(args_path), "%s/args", dir);

	fake_smi(dir, "GPU 0000BEEF:2A:00.0 was successfully reset.\\n", 0);
	CHECK_INT(gpu_reset(b, 1, err, sizeof(err)), 0);
	struct buf args;
	buf_init(&args);
	CHECK_INT(read_file(args_path, 4096, &args), 0);
	CHECK_STR(args.data, "--gpu-reset -i 0000BEEF:2A:00.0\n");
	buf_cleanup(&args);
	setenv("PATH", saved, 1);

	fake_smi(dir,
	         "GPU 0000BEEF:18:00.0 is currently in use by another process.\\n\\n1 device is "
	         "currently being used\\n",
	         255);
	CHECK_INT(gpu_reset(b, 0, err, sizeof(err)), ERR_BUSY);
	CHECK_CONTAINS(err, "gpu 0: nvidia-smi --gpu-reset -i 0000BEEF:18:00.0 failed (exit 255): "
	                    "GPU 0000BEEF:18:00.0 is currently in use by another process.");
	CHECK(!strstr(err, "1 device"));
	setenv("PATH", saved, 1);

	fake_smi(dir, "Unable to reset this GPU\\n", 3);
	CHECK_INT(gpu_reset(b, 0, err, sizeof(err)), ERR_UPSTREAM);
	CHECK_CONTAINS(err, "failed (exit 3): Unable to reset this GPU");

	setenv("PATH", "/nonexistent", 1);
	CHECK_INT(gpu_reset(b, 0, err, sizeof(err)), -ENOENT);
	CHECK_CONTAINS(err, "gpu 0: cannot run nvidia-smi");
	setenv("PATH", saved, 1);
	CHECK_INT(gpu_reset(b, 5, err, sizeof(err)), ERR_NOTFOUND);
	gpu_close(b);
	rm_rf(dir);
}

TEST_MAIN()
