#include "gpu/gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "gpu/nvml.h"
#include "gpu/sim.h"
#include "proto/wire.h"

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
		ops = &gpu_nvml_ops;
	} else if (strncmp(spec, "nvml:", 5) == 0 && spec[5]) {
		ops = &gpu_nvml_ops;
		arg = spec + 5;
	} else {
		snprintf(
		        err, errlen,
		        "gpu backend '%.64s': unknown (expected sim:PATH, none, nvml or nvml:PATH)",
		        spec);
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

const char *gpu_link_name(enum gpu_link l)
{
	static const char *const names[] = {
	        [GPU_LINK_SELF] = "SELF", [GPU_LINK_NVLINK] = "NV", [GPU_LINK_PIX] = "PIX",
	        [GPU_LINK_PXB] = "PXB",   [GPU_LINK_PHB] = "PHB",   [GPU_LINK_NODE] = "NODE",
	        [GPU_LINK_SYS] = "SYS",
	};
	if ((unsigned)l >= sizeof(names) / sizeof(names[0]))
		return "?";
	return names[l];
}

static int in_range(const struct gpu_backend *b, int index)
{
	return index >= 0 && index < gpu_count(b);
}

enum gpu_link gpu_link_between(const struct gpu_backend *b, int a, int bidx)
{
	if (!in_range(b, a) || !in_range(b, bidx))
		return GPU_LINK_SYS;
	if (a == bidx)
		return GPU_LINK_SELF;
	if (!b->ops->link)
		return GPU_LINK_SYS;
	enum gpu_link l = b->ops->link(b->state, a, bidx);
	/* A backend never calls two distinct GPUs the same one. */
	return l > GPU_LINK_SELF && l <= GPU_LINK_SYS ? l : GPU_LINK_SYS;
}

enum gpu_link gpu_pcie_between(const struct gpu_backend *b, int a, int bidx)
{
	if (!in_range(b, a) || !in_range(b, bidx))
		return GPU_LINK_SYS;
	if (a == bidx)
		return GPU_LINK_SELF;
	if (!b->ops->pcie)
		return GPU_LINK_SYS;
	enum gpu_link l = b->ops->pcie(b->state, a, bidx);
	return l > GPU_LINK_NVLINK && l <= GPU_LINK_SYS ? l : GPU_LINK_SYS;
}

int gpu_sample(struct gpu_backend *b, int index, struct gpu_sample *out)
{
	if (!in_range(b, index))
		return ERR_NOTFOUND;
	if (!b->ops->sample)
		return -ENOSYS;
	struct gpu_sample s = {
	        .lost = 0,
	        .util_gpu_pct = -1,
	        .util_mem_pct = -1,
	        .mem_used_bytes = -1,
	        .mem_free_bytes = -1,
	        .temp_c = -1,
	        .power_mw = -1,
	        .energy_mj = -1,
	        .sm_clock_mhz = -1,
	        .mem_clock_mhz = -1,
	        .throttle_reasons = -1,
	        .ecc_sbe_volatile = -1,
	        .ecc_dbe_volatile = -1,
	        .ecc_sbe_aggregate = -1,
	        .ecc_dbe_aggregate = -1,
	        .retired_sbe = -1,
	        .retired_dbe = -1,
	        .retired_pending = -1,
	        .remap_correctable = -1,
	        .remap_uncorrectable = -1,
	        .remap_pending = -1,
	        .remap_failure = -1,
	        .recovery_action = -1,
	};
	int rc = b->ops->sample(b->state, index, &s);
	if (rc)
		return rc;
	*out = s;
	return 0;
}

int gpu_events(struct gpu_backend *b, int timeout_ms, struct gpu_event *out, int max)
{
	if (!b->ops->events)
		return -ENOSYS;
	if (max < 1 || !out)
		return -EINVAL;
	return b->ops->events(b->state, timeout_ms < 0 ? 0 : timeout_ms, out, max);
}

int gpu_reset(struct gpu_backend *b, int index, char *err, size_t errlen)
{
	if (!in_range(b, index)) {
		snprintf(err, errlen, "gpu %d: no such GPU (the node has %d)", index, gpu_count(b));
		return ERR_NOTFOUND;
	}
	if (!b->ops->reset) {
		snprintf(err, errlen, "gpu backend '%s': cannot reset a GPU", b->ops->name);
		return -ENOSYS;
	}
	return b->ops->reset(b->state, index, err, errlen);
}

int gpu_inject(struct gpu_backend *b, const json_t *fault, char *err, size_t errlen)
{
	if (!b->ops->inject) {
		snprintf(err, errlen,
		         "gpu backend '%s': faults can only be injected into simulated GPUs",
		         b->ops->name);
		return -ENOSYS;
	}
	if (!json_is_object(fault)) {
		snprintf(err, errlen, "fault: expected a JSON object");
		return ERR_INVALID;
	}
	return b->ops->inject(b->state, fault, err, errlen);
}

/* Union-find over GPU indices, for connected components. */
static int find_root(int *parent, int i)
{
	while (parent[i] != i) {
		parent[i] = parent[parent[i]];
		i = parent[i];
	}
	return i;
}

/* Joins, among the GPUs in pool (a mask), every pair whose link is in
 * [lo, hi]; returns the mask of GPUs that ended up with company. */
static uint64_t join_links(const struct gpu_backend *b, int n, uint64_t pool, enum gpu_link lo,
                           enum gpu_link hi, int *parent)
{
	uint64_t joined = 0;
	for (int i = 0; i < n; i++) {
		for (int j = i + 1; j < n; j++) {
			if (!(pool >> i & 1) || !(pool >> j & 1))
				continue;
			enum gpu_link l = gpu_link_between(b, i, j);
			if (l < lo || l > hi)
				continue;
			parent[find_root(parent, j)] = find_root(parent, i);
			joined |= 1ull << i | 1ull << j;
		}
	}
	return joined;
}

/* Three passes, each over the GPUs the earlier ones left alone: NVLink
 * islands first (what collective traffic wants), then GPUs behind PCIe
 * switches, then GPUs of one NUMA node. What is left stands alone. */
int gpu_groups(const struct gpu_backend *b, uint64_t *groups, int max)
{
	int n = gpu_count(b);
	if (n > GPU_MAX)
		n = GPU_MAX;
	int parent[GPU_MAX];
	for (int i = 0; i < n; i++)
		parent[i] = i;
	uint64_t pool = n == 64 ? UINT64_MAX : (1ull << n) - 1;
	pool &= ~join_links(b, n, pool, GPU_LINK_NVLINK, GPU_LINK_NVLINK, parent);
	pool &= ~join_links(b, n, pool, GPU_LINK_PIX, GPU_LINK_PXB, parent);
	join_links(b, n, pool, GPU_LINK_PHB, GPU_LINK_NODE, parent);
	/* Groups come out ordered by their lowest index. */
	int count = 0;
	uint64_t done = 0;
	for (int i = 0; i < n && count < max; i++) {
		if (done >> i & 1)
			continue;
		uint64_t mask = 0;
		for (int j = i; j < n; j++)
			if (find_root(parent, j) == find_root(parent, i))
				mask |= 1ull << j;
		done |= mask;
		groups[count++] = mask;
	}
	return count;
}

static void set_known_int(json_t *o, const char *name, int64_t v)
{
	if (v != -1)
		json_object_set_new(o, name, json_integer((json_int_t)v));
}

/* An int field of a GPU entry, left out when -1 (unknown). */
static void set_known_field(json_t *o, const char *name, int64_t v)
{
	if (v != -1)
		wire_set(o, &wire_gpu, name, json_integer((json_int_t)v));
}

/* The entry of GPU i of n (proto/wire.h, wire_gpu); NULL when a string of
 * the driver's is not UTF-8, which JSON cannot carry. */
static json_t *inventory_entry(const struct gpu_backend *b, int i, int n, const struct gpu_info *g)
{
	const struct wire_record *r = &wire_gpu;
	json_t *uuid = json_string(g->uuid), *name = json_string(g->name),
	       *bus = json_string(g->pci_bus_id);
	if (!uuid || !name || !bus) {
		json_decref(uuid);
		json_decref(name);
		json_decref(bus);
		return NULL;
	}
	json_t *o = json_object();
	wire_set(o, r, "index", json_integer(g->index));
	wire_set(o, r, "uuid", uuid);
	wire_set(o, r, "name", name);
	wire_set(o, r, "memory_bytes", json_integer((json_int_t)g->memory_bytes));
	wire_set(o, r, "pci_bus_id", bus);
	set_known_field(o, "minor", g->minor);
	set_known_field(o, "numa_node", g->numa_node);
	json_t *affinity = g->cpu_affinity[0] ? json_string(g->cpu_affinity) : NULL;
	if (affinity)
		wire_set(o, r, "cpu_affinity", affinity);
	set_known_field(o, "mig_mode", g->mig_mode);
	set_known_field(o, "persistence_mode", g->persistence_mode);
	set_known_field(o, "nvlinks", g->nvlinks);
	json_t *links = json_array();
	for (int j = 0; j < n; j++)
		json_array_append_new(links, json_string(gpu_link_name(gpu_link_between(b, i, j))));
	wire_set(o, r, "links", links);
	return o;
}

json_t *gpu_inventory_json(const struct gpu_backend *b)
{
	json_t *arr = json_array();
	int n = gpu_count(b);
	for (int i = 0; i < n; i++) {
		struct gpu_info g;
		json_t *o = gpu_info(b, i, &g) == 0 ? inventory_entry(b, i, n, &g) : NULL;
		if (o)
			json_array_append_new(arr, o);
	}
	return arr;
}

/* The int64 fields of struct gpu_sample, in the order the JSON shows them. */
static const struct {
	const char *name;
	size_t offset;
} sample_fields[] = {
#define F(f)                                                                                       \
	{                                                                                          \
#f, offsetof(struct gpu_sample, f)                                                 \
	}
        F(util_gpu_pct),
        F(util_mem_pct),
        F(mem_used_bytes),
        F(mem_free_bytes),
        F(temp_c),
        F(power_mw),
        F(energy_mj),
        F(sm_clock_mhz),
        F(mem_clock_mhz),
        F(throttle_reasons),
        F(ecc_sbe_volatile),
        F(ecc_dbe_volatile),
        F(ecc_sbe_aggregate),
        F(ecc_dbe_aggregate),
        F(retired_sbe),
        F(retired_dbe),
        F(retired_pending),
        F(remap_correctable),
        F(remap_uncorrectable),
        F(remap_pending),
        F(remap_failure),
        F(recovery_action),
#undef F
};

json_t *gpu_sample_json(const struct gpu_sample *s)
{
	json_t *o = json_object();
	json_object_set_new(o, "lost", json_boolean(s->lost));
	if (s->lost)
		return o;
	for (size_t i = 0; i < sizeof(sample_fields) / sizeof(sample_fields[0]); i++) {
		int64_t v;
		memcpy(&v, (const char *)s + sample_fields[i].offset, sizeof(v));
		set_known_int(o, sample_fields[i].name, v);
	}
	return o;
}
