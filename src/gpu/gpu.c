#include "gpu/gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "gpu/sim.h"

struct gpu_backend {
	const struct gpu_backend_ops *ops;
	void *state;
};

/* The "none" backend: a node without GPUs. */
static int none_open(const char *arg, void **state, char *err, size_t errlen)
{
	(void)arg;
	(void)err;
	(void)errlen;
	*state = NULL;
	return 0;
}

static int none_count(void *state)
{
	(void)state;
	return 0;
}

static int none_info(void *state, int index, struct gpu_info *out)
{
	(void)state;
	(void)index;
	(void)out;
	return ERR_NOTFOUND;
}

static const char *none_version(void *state)
{
	(void)state;
	return "";
}

static void none_close(void *state)
{
	(void)state;
}

static const struct gpu_backend_ops none_ops = {
        .name = "none",
        .open = none_open,
        .count = none_count,
        .info = none_info,
        .driver_version = none_version,
        .cuda_version = none_version,
        .close = none_close,
};

int gpu_open(const char *spec, struct gpu_backend **out, char *err, size_t errlen)
{
	const struct gpu_backend_ops *ops = NULL;
	const char *arg = NULL;
	if (!spec || strcmp(spec, "none") == 0) {
		ops = &none_ops;
	} else if (strncmp(spec, "sim:", 4) == 0) {
		ops = &gpu_sim_ops;
		arg = spec + 4;
	} else if (strcmp(spec, "nvml") == 0) {
		snprintf(err, errlen, "gpu backend 'nvml': not built in this version");
		return -ENOSYS;
	} else {
		snprintf(err, errlen,
		         "gpu backend '%.64s': unknown (expected sim:PATH, none or nvml)", spec);
		return ERR_INVALID;
	}
	void *state = NULL;
	int rc = ops->open(arg, &state, err, errlen);
	if (rc)
		return rc;
	struct gpu_backend *b = xcalloc(1, sizeof(*b));
	b->ops = ops;
	b->state = state;
	*out = b;
	return 0;
}

void gpu_close(struct gpu_backend *b)
{
	if (!b)
		return;
	b->ops->close(b->state);
	free(b);
}

const char *gpu_backend_name(const struct gpu_backend *b)
{
	return b->ops->name;
}

int gpu_count(const struct gpu_backend *b)
{
	return b->ops->count(b->state);
}

int gpu_info(const struct gpu_backend *b, int index, struct gpu_info *out)
{
	if (index < 0 || index >= gpu_count(b))
		return ERR_NOTFOUND;
	return b->ops->info(b->state, index, out);
}

const char *gpu_driver_version(const struct gpu_backend *b)
{
	return b->ops->driver_version(b->state);
}

const char *gpu_cuda_version(const struct gpu_backend *b)
{
	return b->ops->cuda_version(b->state);
}
