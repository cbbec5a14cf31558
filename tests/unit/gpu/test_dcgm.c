/* test_dcgm.c - the dcgm-exporter compatible exposition (gpu/dcgm.h):
 * exact lines and labels, omission of unsupported values, escaping, and
 * promtool's verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "base/buf.h"
#include "gpu/dcgm.h"

static struct gpu_info h200(int index)
{
	struct gpu_info in;
	memset(&in, 0, sizeof(in));
	in.index = index;
	snprintf(in.uuid, sizeof(in.uuid), "GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", index);
	snprintf(in.name, sizeof(in.name), "NVIDIA H200");
	snprintf(in.pci_bus_id, sizeof(in.pci_bus_id), "00000000:%02X:00.0", 0x18 + index);
	in.minor = index;
	in.numa_node = 0;
	return in;
}

/* Every field supported; distinct values so a swapped field shows. */
static struct gpu_sample busy(void)
{
	struct gpu_sample s = {
	        .util_gpu_pct = 97,
	        .util_mem_pct = 41,
	        .mem_used_bytes = 100ll << 30,
	        .mem_free_bytes = (40ll << 30) + 12345,
	        .temp_c = 61,
	        .power_mw = 652345,
	        .energy_mj = 123456789,
	        .sm_clock_mhz = 1980,
	        .mem_clock_mhz = 2619,
	        .throttle_reasons = 4,
	        .ecc_sbe_volatile = 3,
	        .ecc_dbe_volatile = 0,
	        .ecc_sbe_aggregate = 17,
	        .ecc_dbe_aggregate = 1,
	        .retired_sbe = 0,
	        .retired_dbe = 2,
	        .retired_pending = 0,
	        .remap_correctable = 5,
	        .remap_uncorrectable = 1,
	        .remap_pending = 0,
	        .remap_failure = 0,
	        .recovery_action = 0,
	};
	return s;
}

/* Only what a minimal GPU reports: the rest -1. */
static struct gpu_sample sparse(void)
{
	struct gpu_sample s = busy();
	s.util_mem_pct = s.energy_mj = s.mem_clock_mhz = s.throttle_reasons = -1;
	s.ecc_sbe_volatile = s.ecc_dbe_volatile = s.ecc_sbe_aggregate = s.ecc_dbe_aggregate = -1;
	s.retired_sbe = s.retired_dbe = s.retired_pending = -1;
	s.remap_correctable = s.remap_uncorrectable = s.remap_pending = s.remap_failure = -1;
	s.recovery_action = -1;
	return s;
}

static char *render(const char *host, const char *backend, const struct dcgm_gpu *g, int n)
{
	struct buf b;
	buf_init(&b);
	dcgm_write(&b, host, backend, g, n);
	buf_add(&b, "", 0);
	return buf_detach(&b);
}

#define L0                                                                                         \
	"gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:18:00." \
	"0\",device=\"nvidia0\",modelName=\"NVIDIA H200\",Hostname=\"node-7\""
#define L1                                                                                         \
	"gpu=\"1\",UUID=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:19:00." \
	"0\",device=\"nvidia1\",modelName=\"NVIDIA H200\",Hostname=\"node-7\""
/* anvil's own families: the same without modelName. */
#define A0                                                                                         \
	"gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:18:00." \
	"0\",device=\"nvidia0\",Hostname=\"node-7\""
#define A1                                                                                         \
	"gpu=\"1\",UUID=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\",pci_bus_id=\"00000000:19:00." \
	"0\",device=\"nvidia1\",Hostname=\"node-7\""
#define JOB ",anvil_job=\"j-42\",anvil_task=\"train\""

TEST(exposition_matches_the_exporter)
{
	struct gpu_info i0 = h200(0), i1 = h200(1);
	struct gpu_sample s0 = busy(), s1 = sparse();
	struct dcgm_gpu g[2] = {
	        {.info = &i0,
	         .sample = &s0,
	         .last_xid = 0,
	         .job_id = "j-42",
	         .task = "train",
	         .health = "healthy",
	         .faults = {0, 2, 1, 0, 0}},
	        {.info = &i1,
	         .sample = &s1,
	         .last_xid = 79,
	         .job_id = "",
	         .task = NULL,
	         .health = "quarantined",
	         .faults = {0, 0, 0, 1, 0}},
	};
	char *text = render("node-7", "nvml", g, 2);
	const char *want =
	        "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
	        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
	        "DCGM_FI_DEV_SM_CLOCK{" L0 JOB "} 1980\n"
	        "DCGM_FI_DEV_SM_CLOCK{" L1 "} 1980\n"
	        "# HELP DCGM_FI_DEV_MEM_CLOCK Memory clock frequency (in MHz).\n"
	        "# TYPE DCGM_FI_DEV_MEM_CLOCK gauge\n"
	        "DCGM_FI_DEV_MEM_CLOCK{" L0 JOB "} 2619\n"
	        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
	        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
	        "DCGM_FI_DEV_GPU_TEMP{" L0 JOB "} 61\n"
	        "DCGM_FI_DEV_GPU_TEMP{" L1 "} 61\n"
	        "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
	        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
	        "DCGM_FI_DEV_POWER_USAGE{" L0 JOB "} 652.345\n"
	        "DCGM_FI_DEV_POWER_USAGE{" L1 "} 652.345\n"
	        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot "
	        "(in mJ).\n"
	        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
	        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" L0 JOB "} 123456789\n"
	        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
	        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
	        "DCGM_FI_DEV_GPU_UTIL{" L0 JOB "} 97\n"
	        "DCGM_FI_DEV_GPU_UTIL{" L1 "} 97\n"
	        "# HELP DCGM_FI_DEV_MEM_COPY_UTIL Memory utilization (in %).\n"
	        "# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge\n"
	        "DCGM_FI_DEV_MEM_COPY_UTIL{" L0 JOB "} 41\n"
	        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
	        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
	        "DCGM_FI_DEV_XID_ERRORS{" L0 JOB "} 0\n"
	        "DCGM_FI_DEV_XID_ERRORS{" L1 "} 79\n"
	        "# HELP DCGM_FI_DEV_CLOCK_THROTTLE_REASONS Current clock throttle reasons (bitmask "
	        "of DCGM_CLOCKS_THROTTLE_REASON_*)\n"
	        "# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge\n"
	        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{" L0 JOB "} 4\n"
	        "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n"
	        "# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
	        "DCGM_FI_DEV_FB_FREE{" L0 JOB "} 40960\n"
	        "DCGM_FI_DEV_FB_FREE{" L1 "} 40960\n"
	        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
	        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
	        "DCGM_FI_DEV_FB_USED{" L0 JOB "} 102400\n"
	        "DCGM_FI_DEV_FB_USED{" L1 "} 102400\n"
	        "# HELP DCGM_FI_DEV_ECC_SBE_VOL_TOTAL Total number of single-bit volatile ECC "
	        "errors.\n"
	        "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n"
	        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{" L0 JOB "} 3\n"
	        "# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC "
	        "errors.\n"
	        "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"
	        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{" L0 JOB "} 0\n"
	        "# HELP DCGM_FI_DEV_ECC_SBE_AGG_TOTAL Total number of single-bit persistent ECC "
	        "errors.\n"
	        "# TYPE DCGM_FI_DEV_ECC_SBE_AGG_TOTAL counter\n"
	        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{" L0 JOB "} 17\n"
	        "# HELP DCGM_FI_DEV_ECC_DBE_AGG_TOTAL Total number of double-bit persistent ECC "
	        "errors.\n"
	        "# TYPE DCGM_FI_DEV_ECC_DBE_AGG_TOTAL counter\n"
	        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL{" L0 JOB "} 1\n"
	        "# HELP DCGM_FI_DEV_RETIRED_SBE Total number of retired pages due to single-bit "
	        "errors.\n"
	        "# TYPE DCGM_FI_DEV_RETIRED_SBE counter\n"
	        "DCGM_FI_DEV_RETIRED_SBE{" L0 JOB "} 0\n"
	        "# HELP DCGM_FI_DEV_RETIRED_DBE Total number of retired pages due to double-bit "
	        "errors.\n"
	        "# TYPE DCGM_FI_DEV_RETIRED_DBE counter\n"
	        "DCGM_FI_DEV_RETIRED_DBE{" L0 JOB "} 2\n"
	        "# HELP DCGM_FI_DEV_RETIRED_PENDING Total number of pages pending retirement.\n"
	        "# TYPE DCGM_FI_DEV_RETIRED_PENDING counter\n"
	        "DCGM_FI_DEV_RETIRED_PENDING{" L0 JOB "} 0\n"
	        "# HELP DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS Number of remapped rows for "
	        "uncorrectable errors\n"
	        "# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter\n"
	        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{" L0 JOB "} 1\n"
	        "# HELP DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS Number of remapped rows for "
	        "correctable errors\n"
	        "# TYPE DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS counter\n"
	        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{" L0 JOB "} 5\n"
	        "# HELP DCGM_FI_DEV_ROW_REMAP_FAILURE Whether remapping of rows has failed\n"
	        "# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge\n"
	        "DCGM_FI_DEV_ROW_REMAP_FAILURE{" L0 JOB "} 0\n"
	        "# HELP anvil_gpu_health The GPU's health as anvil judges it: 1 for its current "
	        "state.\n"
	        "# TYPE anvil_gpu_health gauge\n"
	        "anvil_gpu_health{" A0 ",state=\"healthy\"} 1\n"
	        "anvil_gpu_health{" A1 ",state=\"quarantined\"} 1\n"
	        "# HELP anvil_gpu_faults_total Faults found on the GPU, by the smallest scope that "
	        "fixes them.\n"
	        "# TYPE anvil_gpu_faults_total counter\n"
	        "anvil_gpu_faults_total{" A0 ",scope=\"warning\"} 2\n"
	        "anvil_gpu_faults_total{" A0 ",scope=\"job\"} 1\n"
	        "anvil_gpu_faults_total{" A0 ",scope=\"gpu\"} 0\n"
	        "anvil_gpu_faults_total{" A0 ",scope=\"node\"} 0\n"
	        "anvil_gpu_faults_total{" A1 ",scope=\"warning\"} 0\n"
	        "anvil_gpu_faults_total{" A1 ",scope=\"job\"} 0\n"
	        "anvil_gpu_faults_total{" A1 ",scope=\"gpu\"} 1\n"
	        "anvil_gpu_faults_total{" A1 ",scope=\"node\"} 0\n";
	if (strcmp(text, want) != 0) {
		/* Point at the first differing line: the whole text is long. */
		size_t i = 0, line = 0;
		while (text[i] && text[i] == want[i])
			line += text[i++] == '\n';
		size_t start = i;
		while (start > 0 && text[start - 1] != '\n')
			start--;
		FAIL_AT("line %zu differs:\n got: %.200s\nwant: %.200s", line + 1, text + start,
		        want + start);
	}
	free(text);
}

TEST(unsupported_values_and_lost_gpus_are_left_out)
{
	struct gpu_info in = h200(0);
	struct gpu_sample s = sparse();
	struct dcgm_gpu g = {.info = &in, .sample = &s, .last_xid = -1};
	char *text = render(NULL, "nvml", &g, 1);
	CHECK(strstr(text, "DCGM_FI_DEV_MEM_CLOCK") == NULL); /* no series, no HELP */
	CHECK(strstr(text, "DCGM_FI_DEV_ECC") == NULL);
	CHECK(strstr(text, "DCGM_FI_DEV_XID_ERRORS") == NULL);
	CHECK(strstr(text, "anvil_gpu_health") == NULL); /* health NULL */
	CHECK(strstr(text, "Hostname") == NULL);         /* no hostname */
	CHECK(strstr(text, "anvil_backend") == NULL);    /* real hardware */
	CHECK_CONTAINS(text, "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-00000000-aaaa-bbbb-cccc-"
	                     "dddddddddddd\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\","
	                     "modelName=\"NVIDIA H200\"} 61\n");
	free(text);

	s.lost = 1;
	g.last_xid = 79;
	g.health = "lost";
	text = render("n", "nvml", &g, 1);
	CHECK(strstr(text, "DCGM_FI_DEV_GPU_TEMP") == NULL);
	CHECK(strstr(text, "DCGM_FI_DEV_SM_CLOCK") == NULL);
	CHECK_CONTAINS(text, "DCGM_FI_DEV_XID_ERRORS{");
	CHECK_CONTAINS(text, ",Hostname=\"n\"} 79\n");
	CHECK_CONTAINS(text, ",state=\"lost\"} 1\n");
	free(text);

	g.sample = NULL; /* no reading yet */
	g.last_xid = 0;
	text = render("n", "nvml", &g, 1);
	CHECK(strstr(text, "DCGM_FI_DEV_GPU_TEMP") == NULL);
	CHECK_CONTAINS(text, "DCGM_FI_DEV_XID_ERRORS{");
	free(text);
	text = render("n", "nvml", &g, 0);
	CHECK_STR(text, "");
	free(text);
}

TEST(sim_backend_labels_every_series)
{
	struct gpu_info i0 = h200(0), i1 = h200(1);
	struct gpu_sample s = busy();
	struct dcgm_gpu g[2] = {
	        {.info = &i0, .sample = &s, .last_xid = 0, .job_id = "j-1", .health = "healthy"},
	        {.info = &i1, .sample = &s, .last_xid = 0, .task = "eval", .health = "healthy"},
	};
	char *text = render("node-1", "sim", g, 2);
	int series = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (line[0] == '#')
			continue;
		series++;
		if (!strstr(line, ",anvil_backend=\"sim\""))
			FAIL_AT("series without anvil_backend: %s", line);
	}
	CHECK(series > 40);
	free(text);
	text = render("node-1", "sim", g, 2);
	/* Only the labels that are set. */
	CHECK_CONTAINS(text, "Hostname=\"node-1\",anvil_job=\"j-1\",anvil_backend=\"sim\"} 1980\n");
	CHECK_CONTAINS(text,
	               "Hostname=\"node-1\",anvil_task=\"eval\",anvil_backend=\"sim\"} 1980\n");
	CHECK_CONTAINS(text, "Hostname=\"node-1\",anvil_backend=\"sim\",state=\"healthy\"} 1\n");
	free(text);
}

TEST(label_values_are_escaped)
{
	struct gpu_info in = h200(0);
	snprintf(in.name, sizeof(in.name), "NVIDIA \"H200\" \\ 141GB\nrev2");
	in.minor = -1;
	struct gpu_sample s = busy();
	struct dcgm_gpu g = {.info = &in,
	                     .sample = &s,
	                     .job_id = "j\"1",
	                     .task = "a\\b",
	                     .health = "he\"al\nthy"};
	char *text = render("host\"x", "nvml", &g, 1);
	CHECK_CONTAINS(text,
	               "device=\"nvidia0\",modelName=\"NVIDIA \\\"H200\\\" \\\\ 141GB\\nrev2\","
	               "Hostname=\"host\\\"x\",anvil_job=\"j\\\"1\",anvil_task=\"a\\\\b\"} 61\n");
	CHECK_CONTAINS(text, "state=\"he\\\"al\\nthy\"} 1\n");
	free(text);
}

/* The known lints, all on the exporter's own choices: counters it names
 * without "_total" (once per family), and its camelCase label modelName
 * (once per series). anvil's families must be clean. */
static const char *const known_lints[] = {
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_RETIRED_DBE counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_RETIRED_PENDING counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_RETIRED_SBE counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter metrics should have \"_total\" suffix",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter metrics should have \"_total\" suffix",
};
#define NKNOWN    (sizeof(known_lints) / sizeof(known_lints[0]))
#define CAMELCASE " label names should be written in 'snake_case' not 'camelCase'"

/* A camelCase lint on a DCGM family: "DCGM_FI_DEV_<NAME>" CAMELCASE. */
static int camelcase_lint(const char *line)
{
	size_t n = strlen(line), c = strlen(CAMELCASE);
	return strncmp(line, "DCGM_FI_DEV_", 12) == 0 && n > c &&
	       strcmp(line + n - c, CAMELCASE) == 0 && !strchr(line, '{');
}

TEST(promtool_accepts_the_exposition)
{
	const char *promtool = "/usr/bin/promtool";
	if (access(promtool, X_OK) != 0)
		FAIL_AT("%s is missing: install Debian's \"prometheus\" package (scripts/deps.sh) "
		        "to check the exposition",
		        promtool);
	struct gpu_info i0 = h200(0), i1 = h200(1);
	snprintf(i1.name, sizeof(i1.name), "NVIDIA \"H200\" \\ x\ny");
	struct gpu_sample s0 = busy(), s1 = sparse();
	struct dcgm_gpu g[2] = {
	        {.info = &i0,
	         .sample = &s0,
	         .last_xid = 13,
	         .job_id = "j-42",
	         .task = "train",
	         .health = "healthy",
	         .faults = {0, 1, 2, 3, 4}},
	        {.info = &i1, .sample = &s1, .last_xid = 0, .health = "quarantined"},
	};
	char *text = render("node-7", "sim", g, 2);
	int dcgm_series = 0;
	for (const char *l = text; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		dcgm_series += strncmp(l, "DCGM_FI_DEV_", 12) == 0;
	char path[] = "/tmp/anvil-dcgm-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path); /* nothing left behind, even when a check fails */
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	CHECK(lseek(fd, 0, SEEK_SET) == 0);
	free(text);

	char cmd[256]; /* promtool reads the open file as its stdin */
	snprintf(cmd, sizeof(cmd), "%s check metrics <&%d 2>&1", promtool, fd);
	FILE *p = popen(cmd, "r");
	CHECK(p != NULL);
	char line[512];
	int seen[NKNOWN] = {0}, camel = 0;
	while (fgets(line, sizeof(line), p)) {
		line[strcspn(line, "\n")] = '\0';
		if (camelcase_lint(line)) {
			camel++;
			continue;
		}
		size_t k = 0;
		while (k < NKNOWN && strcmp(line, known_lints[k]) != 0)
			k++;
		if (k == NKNOWN)
			FAIL_AT("promtool: unexpected output: %s", line);
		seen[k]++;
	}
	int st = pclose(p);
	close(fd);
	/* promtool exits 3 for lint findings, 1 for a parse error. */
	CHECK(WIFEXITED(st));
	CHECK(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 3);
	for (size_t k = 0; k < NKNOWN; k++) {
		if (seen[k] != 1)
			FAIL_AT("promtool: expected once: %s (seen %d times)", known_lints[k],
			        seen[k]);
	}
	CHECK_INT(camel, dcgm_series); /* modelName: one per DCGM series, none on anvil's */
}

TEST_MAIN()
