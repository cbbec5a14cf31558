/* dcgm.c - the dcgm-exporter compatible exposition behind dcgm.h. */
#include "gpu/dcgm.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

/* How a family's value is read and printed. */
enum dcgm_unit {
	DCGM_RAW,   /* the sample field as is */
	DCGM_MIB,   /* bytes -> MiB, as DCGM reports framebuffer sizes */
	DCGM_WATTS, /* milliwatts -> watts, a float as DCGM's power field */
	DCGM_XID,   /* dcgm_gpu.last_xid, not a sample field */
};

struct family {
	const char *name;
	const char *type;
	const char *help;
	size_t field; /* offsetof(struct gpu_sample, ...) */
	enum dcgm_unit unit;
};

#define FIELD(f) offsetof(struct gpu_sample, f)

/* Names, types and help texts as in dcgm-exporter's etc/default-counters.csv
 * (the ECC and retired-page rows are commented out there but keep their
 * text; CLOCK_THROTTLE_REASONS is the one the exporter adds itself), in
 * that file's order. */
static const struct family families[] = {
        {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", FIELD(sm_clock_mhz),
         DCGM_RAW},
        {"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", FIELD(mem_clock_mhz),
         DCGM_RAW},
        {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", FIELD(temp_c), DCGM_RAW},
        {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", FIELD(power_mw), DCGM_WATTS},
        {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
         "Total energy consumption since boot (in mJ).", FIELD(energy_mj), DCGM_RAW},
        {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", FIELD(util_gpu_pct), DCGM_RAW},
        {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", FIELD(util_mem_pct),
         DCGM_RAW},
        {"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", 0,
         DCGM_XID},
        {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
         "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*)",
         FIELD(throttle_reasons), DCGM_RAW},
        {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", FIELD(mem_free_bytes),
         DCGM_MIB},
        {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", FIELD(mem_used_bytes),
         DCGM_MIB},
        {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
         "Total number of single-bit volatile ECC errors.", FIELD(ecc_sbe_volatile), DCGM_RAW},
        {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
         "Total number of double-bit volatile ECC errors.", FIELD(ecc_dbe_volatile), DCGM_RAW},
        {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter",
         "Total number of single-bit persistent ECC errors.", FIELD(ecc_sbe_aggregate), DCGM_RAW},
        {"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter",
         "Total number of double-bit persistent ECC errors.", FIELD(ecc_dbe_aggregate), DCGM_RAW},
        {"DCGM_FI_DEV_RETIRED_SBE", "counter",
         "Total number of retired pages due to single-bit errors.", FIELD(retired_sbe), DCGM_RAW},
        {"DCGM_FI_DEV_RETIRED_DBE", "counter",
         "Total number of retired pages due to double-bit errors.", FIELD(retired_dbe), DCGM_RAW},
        {"DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement.",
         FIELD(retired_pending), DCGM_RAW},
        {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
         "Number of remapped rows for uncorrectable errors", FIELD(remap_uncorrectable), DCGM_RAW},
        {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
         "Number of remapped rows for correctable errors", FIELD(remap_correctable), DCGM_RAW},
        {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
         FIELD(remap_failure), DCGM_RAW},
};

/* A label value escaped as the exposition format asks: \\, \" and \n. */
static void add_value(struct buf *b, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\\')
			buf_adds(b, "\\\\");
		else if (*s == '"')
			buf_adds(b, "\\\"");
		else if (*s == '\n')
			buf_adds(b, "\\n");
		else
			buf_add(b, s, 1);
	}
}

static void add_label(struct buf *b, const char *name, const char *value)
{
	buf_printf(b, "%s%s=\"", b->len ? "," : "", name);
	add_value(b, value);
	buf_adds(b, "\"");
}

static int set(const char *s)
{
	return s && *s;
}

/* The exporter's labels, in its order: what every series of the GPU
 * carries, before anvil's own. anvil's families leave out modelName, the
 * one camelCase label name promtool objects to. */
static void identity_labels(struct buf *b, const struct dcgm_gpu *g, const char *node, int model)
{
	const struct gpu_info *in = g->info;
	char num[32];
	snprintf(num, sizeof(num), "%d", in->index);
	add_label(b, "gpu", num);
	add_label(b, "UUID", in->uuid);
	add_label(b, "pci_bus_id", in->pci_bus_id);
	snprintf(num, sizeof(num), "nvidia%d", in->minor >= 0 ? in->minor : in->index);
	add_label(b, "device", num);
	if (model)
		add_label(b, "modelName", in->name);
	if (set(node))
		add_label(b, "Hostname", node);
}

static void backend_label(struct buf *b, const char *backend)
{
	if (set(backend) && strcmp(backend, "nvml") != 0)
		add_label(b, "anvil_backend", backend);
}

/* Reads family f for g: 1 with *v set, or 0 when it is to be left out. */
static int value_of(const struct family *f, const struct dcgm_gpu *g, int64_t *v)
{
	if (f->unit == DCGM_XID) {
		*v = g->last_xid;
		return *v >= 0;
	}
	if (!g->sample || g->sample->lost)
		return 0;
	memcpy(v, (const char *)g->sample + f->field, sizeof(*v));
	return *v >= 0;
}

static void write_family(struct buf *out, const struct family *f, const struct dcgm_gpu *gpus,
                         int n, const struct buf *labels)
{
	int64_t v;
	int any = 0;
	for (int i = 0; i < n && !any; i++)
		any = value_of(f, &gpus[i], &v);
	if (!any)
		return;
	buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
	for (int i = 0; i < n; i++) {
		if (!value_of(f, &gpus[i], &v))
			continue;
		buf_printf(out, "%s{%s} ", f->name, labels[i].data);
		if (f->unit == DCGM_WATTS)
			buf_printf(out, "%.3f\n", (double)v / 1000.0);
		else if (f->unit == DCGM_MIB)
			buf_printf(out, "%lld\n", (long long)(v >> 20));
		else
			buf_printf(out, "%lld\n", (long long)v);
	}
}

static void write_anvil(struct buf *out, const struct dcgm_gpu *gpus, int n,
                        const struct buf *ident)
{
	int any = 0;
	for (int i = 0; i < n; i++)
		any |= set(gpus[i].health);
	if (any) {
		buf_adds(out, "# HELP anvil_gpu_health The GPU's health as anvil judges it: 1 for "
		              "its current state.\n# TYPE anvil_gpu_health gauge\n");
		for (int i = 0; i < n; i++) {
			if (!set(gpus[i].health))
				continue;
			buf_printf(out, "anvil_gpu_health{%s,state=\"", ident[i].data);
			add_value(out, gpus[i].health);
			buf_adds(out, "\"} 1\n");
		}
	}
	buf_adds(out, "# HELP anvil_gpu_faults_total Faults found on the GPU, by the smallest "
	              "scope that fixes them.\n# TYPE anvil_gpu_faults_total counter\n");
	for (int i = 0; i < n; i++) {
		for (int s = GPU_SCOPE_WARN; s < GPU_SCOPE_COUNT; s++) {
			if (gpus[i].faults[s] < 0)
				continue;
			buf_printf(out, "anvil_gpu_faults_total{%s,scope=\"%s\"} %lld\n",
			           ident[i].data, gpu_scope_name((enum gpu_scope)s),
			           (long long)gpus[i].faults[s]);
		}
	}
}

void dcgm_write(struct buf *out, const char *node, const char *backend, const struct dcgm_gpu *gpus,
                int n)
{
	if (n <= 0 || !gpus)
		return;
	/* Label sets once per GPU: the DCGM families add the job's labels. */
	struct buf *ident = xcalloc((size_t)n, sizeof(*ident));
	struct buf *full = xcalloc((size_t)n, sizeof(*full));
	for (int i = 0; i < n; i++) {
		buf_init(&ident[i]);
		buf_init(&full[i]);
		identity_labels(&full[i], &gpus[i], node, 1);
		if (set(gpus[i].job_id))
			add_label(&full[i], "anvil_job", gpus[i].job_id);
		if (set(gpus[i].task))
			add_label(&full[i], "anvil_task", gpus[i].task);
		backend_label(&full[i], backend);
		identity_labels(&ident[i], &gpus[i], node, 0);
		backend_label(&ident[i], backend);
	}
	for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++)
		write_family(out, &families[f], gpus, n, full);
	write_anvil(out, gpus, n, ident);
	for (int i = 0; i < n; i++) {
		buf_cleanup(&ident[i]);
		buf_cleanup(&full[i]);
	}
	free(ident);
	free(full);
}
