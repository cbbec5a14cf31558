/* gpu.h - the GPU backend interface: discovery of a node's GPUs.
 *
 * A backend is a table of operations (struct gpu_backend_ops) behind an
 * opaque handle. gpu_open() picks one from a spec string:
 *
 *   "sim:PATH"  the simulated backend (gpu/sim.h): GPUs described by a JSON
 *               file; its name is "sim" so it can never pass for hardware
 *   "none"      a node without GPUs (backend name "none")
 *   "nvml"      NVIDIA's NVML through dlopen (not built yet: -ENOSYS)
 *
 * The caller owns the handle and frees it with gpu_close(). Backends are
 * not thread-safe: one thread uses a handle at a time. The information is
 * read once at open; gpu_info() copies it out.
 */
#ifndef ANVIL_GPU_H
#define ANVIL_GPU_H

#include <stddef.h>
#include <stdint.h>

#define GPU_MAX 64

struct gpu_info {
	int index;
	char uuid[96];
	char name[96];
	uint64_t memory_bytes;
	char pci_bus_id[32];
};

/* What every backend implements. open() gets the text after "name:" (or
 * NULL) and returns its private state; errors go to err as one sentence. */
struct gpu_backend_ops {
	const char *name;
	int (*open)(const char *arg, void **state, char *err, size_t errlen);
	int (*count)(void *state);
	int (*info)(void *state, int index, struct gpu_info *out);
	const char *(*driver_version)(void *state);
	const char *(*cuda_version)(void *state);
	void (*close)(void *state);
};

struct gpu_backend;

/* Opens the backend named by spec (see above); 0, ERR_INVALID (unknown
 * spec or bad file, with the reason in err), -ENOSYS or a negative errno. */
int gpu_open(const char *spec, struct gpu_backend **out, char *err, size_t errlen);
void gpu_close(struct gpu_backend *b);

const char *gpu_backend_name(const struct gpu_backend *b);
int gpu_count(const struct gpu_backend *b);
/* 0, or ERR_NOTFOUND when index is not in [0, gpu_count). */
int gpu_info(const struct gpu_backend *b, int index, struct gpu_info *out);
const char *gpu_driver_version(const struct gpu_backend *b);
const char *gpu_cuda_version(const struct gpu_backend *b);

#endif
