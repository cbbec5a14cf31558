#include "gpu/sim.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"

#define SIM_FILE_MAX (1u << 20)

struct sim {
	char driver_version[64];
	char cuda_version[32];
	int count;
	struct gpu_info gpus[GPU_MAX];
};

static const struct jv_field file_fields[] = {
        {"driver_version", JV_STRING, 1, 1, 63},
        {"cuda_version", JV_STRING, 1, 1, 31},
        {"gpus", JV_ARRAY, 1, 0, GPU_MAX},
        {NULL, 0, 0, 0, 0},
};

static const struct jv_field gpu_fields[] = {
        {"index", JV_INT, 1, 0, GPU_MAX - 1}, {"uuid", JV_STRING, 1, 1, 95},
        {"name", JV_STRING, 1, 1, 95},        {"memory_bytes", JV_INT, 1, 1, INT64_MAX},
        {"pci_bus_id", JV_STRING, 1, 1, 31},  {NULL, 0, 0, 0, 0},
};

/* Checks and copies gpus[i]; the message in err names the element. */
static int parse_gpu(struct sim *s, const json_t *g, int i, char *err, size_t errlen)
{
	char why[256];
	if (!json_is_object(g)) {
		snprintf(err, errlen, "gpus[%d]: expected an object", i);
		return ERR_INVALID;
	}
	if (jv_check(g, gpu_fields, why, sizeof(why))) {
		snprintf(err, errlen, "gpus[%d]: %s", i, why);
		return ERR_INVALID;
	}
	int64_t index = jv_int(g, "index", -1);
	if (index != i) {
		snprintf(err, errlen,
		         "gpus[%d]: field 'index': %" PRId64 " is out of order (expected %d)", i,
		         index, i);
		return ERR_INVALID;
	}
	const char *uuid = jv_str(g, "uuid", "");
	if (strncmp(uuid, "GPU-", 4) != 0) {
		snprintf(err, errlen, "gpus[%d]: field 'uuid': \"%s\" does not start with GPU-", i,
		         uuid);
		return ERR_INVALID;
	}
	for (int j = 0; j < i; j++) {
		if (strcmp(s->gpus[j].uuid, uuid) == 0) {
			snprintf(err, errlen, "gpus[%d]: field 'uuid': \"%s\" repeats gpus[%d]", i,
			         uuid, j);
			return ERR_INVALID;
		}
	}
	struct gpu_info *out = &s->gpus[i];
	out->index = i;
	snprintf(out->uuid, sizeof(out->uuid), "%s", uuid);
	snprintf(out->name, sizeof(out->name), "%s", jv_str(g, "name", ""));
	snprintf(out->pci_bus_id, sizeof(out->pci_bus_id), "%s", jv_str(g, "pci_bus_id", ""));
	out->memory_bytes = (uint64_t)jv_int(g, "memory_bytes", 0);
	return 0;
}

static int parse_file(struct sim *s, const struct buf *text, char *err, size_t errlen)
{
	json_t *root = NULL;
	int rc = jv_parse_object(text->data, text->len, &root, err, errlen);
	if (rc)
		return rc;
	rc = jv_check(root, file_fields, err, errlen);
	if (rc)
		goto out;
	snprintf(s->driver_version, sizeof(s->driver_version), "%s",
	         jv_str(root, "driver_version", ""));
	snprintf(s->cuda_version, sizeof(s->cuda_version), "%s", jv_str(root, "cuda_version", ""));
	json_t *gpus = json_object_get(root, "gpus");
	size_t i;
	json_t *g;
	json_array_foreach (gpus, i, g) {
		rc = parse_gpu(s, g, (int)i, err, errlen);
		if (rc)
			goto out;
	}
	s->count = (int)json_array_size(gpus);
out:
	json_decref(root);
	return rc;
}

static int sim_open(const char *path, void **state, char *err, size_t errlen)
{
	char why[512];
	struct buf text;
	buf_init(&text);
	struct sim *s = xcalloc(1, sizeof(*s));
	int rc = read_file(path, SIM_FILE_MAX, &text);
	if (rc == -EFBIG) {
		snprintf(err, errlen, "gpu sim file %s: larger than %u bytes", path, SIM_FILE_MAX);
		goto out;
	}
	if (rc) {
		snprintf(err, errlen, "gpu sim file %s: %s", path, strerror(-rc));
		goto out;
	}
	rc = parse_file(s, &text, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "gpu sim file %s: %s", path, why);
		goto out;
	}
	*state = s;
	s = NULL;
out:
	free(s);
	buf_cleanup(&text);
	return rc;
}

static int sim_count(void *state)
{
	return ((struct sim *)state)->count;
}

static int sim_info(void *state, int index, struct gpu_info *out)
{
	*out = ((struct sim *)state)->gpus[index];
	return 0;
}

static const char *sim_driver_version(void *state)
{
	return ((struct sim *)state)->driver_version;
}

static const char *sim_cuda_version(void *state)
{
	return ((struct sim *)state)->cuda_version;
}

static void sim_close(void *state)
{
	free(state);
}

const struct gpu_backend_ops gpu_sim_ops = {
        .name = "sim",
        .open = sim_open,
        .count = sim_count,
        .info = sim_info,
        .driver_version = sim_driver_version,
        .cuda_version = sim_cuda_version,
        .close = sim_close,
};

struct model {
	const char *alias[4];
	const char *name;
	uint64_t memory_bytes;
};

static const struct model models[] = {
        {{"H200", "NVIDIA H200", "H200-141GB", NULL}, "NVIDIA H200", 150754820096ull},
        {{"A100", "A100-80GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"},
         "NVIDIA A100-SXM4-80GB",
         85899345920ull},
        {{"H100", "NVIDIA H100", "H100-80GB", "NVIDIA H100 80GB HBM3"},
         "NVIDIA H100 80GB HBM3",
         85520809984ull},
};

/* Real 8-GPU boards put their GPUs on these buses; GPU 8+ take device 1+. */
static const int pci_bus[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

static void pick_model(const char *model, const char **name, uint64_t *mem)
{
	*name = model ? model : "NVIDIA H200";
	*mem = 80ull << 30;
	for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++)
		for (int a = 0; a < 4 && models[m].alias[a]; a++)
			if (strcasecmp(*name, models[m].alias[a]) == 0) {
				*name = models[m].name;
				*mem = models[m].memory_bytes;
				return;
			}
}

/* FNV-1a of the model name: part of the UUID, so models never collide. */
static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

int gpu_sim_write_file(const char *path, int count, const char *model, int node_index)
{
	if (count < 0 || count > GPU_MAX || node_index < 0 || node_index > 0xffffff ||
	    (model && (!*model || strlen(model) > 80)))
		return ERR_INVALID;
	const char *name;
	uint64_t mem;
	pick_model(model, &name, &mem);
	json_t *gpus = json_array();
	for (int i = 0; i < count; i++) {
		char uuid[64], bus[32];
		/* "5151" marks a simulated GPU to a human reading the UUID. */
		snprintf(uuid, sizeof(uuid), "GPU-%08x-5151-4000-8000-%06x%06x", name_hash(name),
		         (unsigned)node_index, (unsigned)i);
		snprintf(bus, sizeof(bus), "00000000:%02X:%02X.0", pci_bus[i % 8], i / 8);
		json_array_append_new(gpus, json_pack("{s:i,s:s,s:s,s:I,s:s}", "index", i, "uuid",
		                                      uuid, "name", name, "memory_bytes",
		                                      (json_int_t)mem, "pci_bus_id", bus));
	}
	json_t *root = json_pack("{s:s,s:s,s:o}", "driver_version", "sim-550.54.15", "cuda_version",
	                         "12.4", "gpus", gpus);
	char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (!text)
		return -ENOMEM;
	struct buf b;
	buf_init(&b);
	buf_printf(&b, "%s\n", text);
	free(text);
	int rc = write_file_atomic(path, b.data, b.len, 0644);
	buf_cleanup(&b);
	return rc;
}
