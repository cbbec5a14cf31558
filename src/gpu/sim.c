#include "gpu/sim.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"

#define SIM_FILE_MAX   (1u << 20)
#define SIM_IDLE_C     35
#define SIM_LOAD_C     40 /* added at 100% util */
#define SIM_THROTTLE_C 87 /* the thermal slowdown threshold */

/* What telemetry a model shows: its top clocks and its power range. */
struct sim_model {
	const char *key; /* found in the GPU's name; NULL: the fallback */
	int64_t sm_mhz, mem_mhz;
	int64_t idle_mw, tdp_mw;
};

static const struct sim_model sim_models[] = {
        {"H200", 1980, 3201, 75000, 700000},
        {"H100", 1980, 2619, 70000, 700000},
        {"A100", 1410, 1593, 60000, 400000},
        {NULL, 1410, 1593, 60000, 400000},
};

struct sim_gpu {
	struct gpu_info info;
	int pcie_switch; /* -1: not behind a known switch */
	uint64_t peers;  /* NVLink peers, by index */
	const struct sim_model *model;
	/* Fault state: what gpu_inject set and gpu_reset or "clear" undo. */
	int lost;
	int64_t util_pct, mem_used;
	int64_t held_temp_c;   /* -1: follows the load */
	int64_t held_power_mw; /* -1: follows util */
	int64_t throttle;
	int64_t sbe_volatile, dbe_volatile, sbe_aggregate, dbe_aggregate;
	int64_t remap_correctable, remap_uncorrectable, remap_pending, remap_failure;
	int64_t recovery_action;
	/* Energy integrated from power up to energy_at_us (monotonic). */
	int64_t energy_uj, energy_at_us;
};

struct sim {
	/* Guards everything below but the pipe, which is only read by events()
	 * and only written under the lock (see sim.h, threading). */
	pthread_mutex_t lock;
	char driver_version[64];
	char cuda_version[32];
	int count;
	int64_t reset_ms; /* how long gpu_reset() takes; set at open */
	struct sim_gpu gpus[GPU_MAX];
	/* XIDs waiting for events(): a ring of SIM_EVENTS_MAX. */
	struct gpu_event queue[SIM_EVENTS_MAX];
	int queue_head, queue_len;
	int wake[2]; /* a byte per queued XID; events() polls wake[0] */
};

static const struct jv_field file_fields[] = {
        {"driver_version", JV_STRING, 1, 1, 63},
        {"cuda_version", JV_STRING, 1, 1, 31},
        {"reset_ms", JV_INT, 0, 0, SIM_RESET_MS_MAX},
        {"gpus", JV_ARRAY, 1, 0, GPU_MAX},
        {NULL, 0, 0, 0, 0},
};

static const struct jv_field gpu_fields[] = {
        {"index", JV_INT, 1, 0, GPU_MAX - 1},
        {"uuid", JV_STRING, 1, 1, 95},
        {"name", JV_STRING, 1, 1, 95},
        {"memory_bytes", JV_INT, 1, 1, INT64_MAX},
        {"pci_bus_id", JV_STRING, 1, 1, 31},
        {"minor", JV_INT, 0, 0, 1 << 20},
        {"numa_node", JV_INT, 0, 0, 1023},
        {"cpu_affinity", JV_STRING, 0, 1, 255},
        {"mig_mode", JV_BOOL, 0, 0, 0},
        {"persistence_mode", JV_BOOL, 0, 0, 0},
        {"nvlink_peers", JV_ARRAY, 0, 0, GPU_MAX},
        {"pcie_switch", JV_INT, 0, 0, 1 << 20},
        {NULL, 0, 0, 0, 0},
};

static const struct sim_model *find_model(const char *name)
{
	const struct sim_model *m = sim_models;
	while (m->key && !strcasestr(name, m->key))
		m++;
	return m;
}

/* 1 when s is a cpulist: "N" or "N-M" (N <= M) items joined by commas. */
static int is_cpulist(const char *s)
{
	for (;;) {
		char *end;
		if (*s < '0' || *s > '9')
			return 0;
		unsigned long lo = strtoul(s, &end, 10);
		s = end;
		if (*s == '-') {
			if (s[1] < '0' || s[1] > '9')
				return 0;
			unsigned long hi = strtoul(s + 1, &end, 10);
			if (hi < lo)
				return 0;
			s = end;
		}
		if (*s == '\0')
			return 1;
		if (*s++ != ',')
			return 0;
	}
}

/* Reads gpus[i]'s nvlink_peers into a mask; symmetry is checked once all
 * GPUs are read. */
static int parse_peers(const json_t *peers, int i, int count, uint64_t *out, char *err,
                       size_t errlen)
{
	size_t k;
	json_t *p;
	*out = 0;
	json_array_foreach (peers, k, p) {
		if (!json_is_integer(p)) {
			char *shown = json_dumps(p, JSON_COMPACT | JSON_ENCODE_ANY);
			snprintf(err, errlen,
			         "gpus[%d]: field 'nvlink_peers[%zu]': %.40s is not an integer", i,
			         k, shown ? shown : "?");
			free(shown);
			return ERR_INVALID;
		}
		json_int_t v = json_integer_value(p);
		if (v < 0 || v >= count) {
			snprintf(err, errlen,
			         "gpus[%d]: field 'nvlink_peers[%zu]': %lld is not a GPU of this "
			         "file "
			         "(0..%d)",
			         i, k, (long long)v, count - 1);
			return ERR_INVALID;
		}
		if (v == i) {
			snprintf(err, errlen,
			         "gpus[%d]: field 'nvlink_peers[%zu]': %lld is the GPU itself (no "
			         "GPU has "
			         "an NVLink to itself)",
			         i, k, (long long)v);
			return ERR_INVALID;
		}
		if (*out >> v & 1) {
			snprintf(err, errlen, "gpus[%d]: field 'nvlink_peers[%zu]': %lld repeats",
			         i, k, (long long)v);
			return ERR_INVALID;
		}
		*out |= 1ull << v;
	}
	return 0;
}

/* The optional fields of gpus[i], after jv_check. */
static int parse_gpu_topology(struct sim *s, const json_t *g, int i, int count, char *err,
                              size_t errlen)
{
	struct sim_gpu *sg = &s->gpus[i];
	struct gpu_info *out = &sg->info;
	out->minor = (int)jv_int(g, "minor", -1);
	for (int j = 0; out->minor >= 0 && j < i; j++) {
		if (s->gpus[j].info.minor == out->minor) {
			snprintf(err, errlen, "gpus[%d]: field 'minor': %d repeats gpus[%d]", i,
			         out->minor, j);
			return ERR_INVALID;
		}
	}
	out->numa_node = (int)jv_int(g, "numa_node", -1);
	const char *cpus = jv_str(g, "cpu_affinity", "");
	if (*cpus && !is_cpulist(cpus)) {
		snprintf(err, errlen,
		         "gpus[%d]: field 'cpu_affinity': \"%.64s\" is not a cpulist like "
		         "\"0-31,64-95\"",
		         i, cpus);
		return ERR_INVALID;
	}
	snprintf(out->cpu_affinity, sizeof(out->cpu_affinity), "%s", cpus);
	out->mig_mode = jv_bool(g, "mig_mode", -1);
	out->persistence_mode = jv_bool(g, "persistence_mode", -1);
	sg->pcie_switch = (int)jv_int(g, "pcie_switch", -1);
	const json_t *peers = json_object_get(g, "nvlink_peers");
	if (json_is_array(peers)) {
		int rc = parse_peers(peers, i, count, &sg->peers, err, errlen);
		if (rc)
			return rc;
	}
	out->nvlinks = __builtin_popcountll(sg->peers);
	return 0;
}

/* Checks and copies gpus[i]; the message in err names the element. */
static int parse_gpu(struct sim *s, const json_t *g, int i, int count, char *err, size_t errlen)
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
		if (strcmp(s->gpus[j].info.uuid, uuid) == 0) {
			snprintf(err, errlen, "gpus[%d]: field 'uuid': \"%s\" repeats gpus[%d]", i,
			         uuid, j);
			return ERR_INVALID;
		}
	}
	struct gpu_info *out = &s->gpus[i].info;
	out->index = i;
	snprintf(out->uuid, sizeof(out->uuid), "%s", uuid);
	snprintf(out->name, sizeof(out->name), "%s", jv_str(g, "name", ""));
	snprintf(out->pci_bus_id, sizeof(out->pci_bus_id), "%s", jv_str(g, "pci_bus_id", ""));
	out->memory_bytes = (uint64_t)jv_int(g, "memory_bytes", 0);
	s->gpus[i].model = find_model(out->name);
	return parse_gpu_topology(s, g, i, count, err, errlen);
}

/* NVLinks are cables: a link gpus[i] lists must be listed by its peer. */
static int check_symmetric(const struct sim *s, char *err, size_t errlen)
{
	for (int i = 0; i < s->count; i++) {
		for (int j = 0; j < s->count; j++) {
			if ((s->gpus[i].peers >> j & 1) && !(s->gpus[j].peers >> i & 1)) {
				snprintf(err, errlen,
				         "gpus[%d]: field 'nvlink_peers': lists %d, but gpus[%d] "
				         "does "
				         "not list %d (NVLinks are symmetric)",
				         i, j, j, i);
				return ERR_INVALID;
			}
		}
	}
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
	s->reset_ms = jv_int(root, "reset_ms", SIM_RESET_MS);
	json_t *gpus = json_object_get(root, "gpus");
	int count = (int)json_array_size(gpus);
	size_t i;
	json_t *g;
	json_array_foreach (gpus, i, g) {
		rc = parse_gpu(s, g, (int)i, count, err, errlen);
		if (rc)
			goto out;
	}
	s->count = count;
	rc = check_symmetric(s, err, errlen);
out:
	json_decref(root);
	return rc;
}

/* Back to healthy and idle (the "clear" fault; and the state at open). */
static void clear_faults(struct sim_gpu *g)
{
	g->lost = 0;
	g->util_pct = 0;
	g->mem_used = 0;
	g->held_temp_c = -1;
	g->held_power_mw = -1;
	g->throttle = 0;
	g->sbe_volatile = g->dbe_volatile = g->sbe_aggregate = g->dbe_aggregate = 0;
	g->remap_correctable = g->remap_uncorrectable = 0;
	g->remap_pending = g->remap_failure = 0;
	g->recovery_action = GPU_RECOVERY_NONE;
}

static void sim_free(struct sim *s)
{
	if (!s)
		return;
	for (int i = 0; i < 2; i++)
		if (s->wake[i] >= 0)
			close(s->wake[i]);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static struct sim *sim_new(void)
{
	struct sim *s = xcalloc(1, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	s->wake[0] = s->wake[1] = -1;
	int64_t now = now_us();
	for (int i = 0; i < GPU_MAX; i++) {
		clear_faults(&s->gpus[i]);
		s->gpus[i].energy_at_us = now;
	}
	return s;
}

static int sim_open(const char *path, void **state, char *err, size_t errlen)
{
	char why[512];
	struct buf text;
	buf_init(&text);
	struct sim *s = sim_new();
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
	if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
		rc = -errno;
		snprintf(err, errlen, "gpu sim: pipe: %s", strerror(errno));
		goto out;
	}
	*state = s;
	s = NULL;
out:
	sim_free(s);
	buf_cleanup(&text);
	return rc;
}

static int sim_count(void *state)
{
	/* Set at open, never changed: no lock needed. */
	return ((struct sim *)state)->count;
}

static int sim_info(void *state, int index, struct gpu_info *out)
{
	*out = ((struct sim *)state)->gpus[index].info;
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

static enum gpu_link sim_link(void *state, int a, int b)
{
	const struct sim_gpu *ga = &((struct sim *)state)->gpus[a];
	const struct sim_gpu *gb = &((struct sim *)state)->gpus[b];
	if (a == b)
		return GPU_LINK_SELF;
	if (ga->peers >> b & 1)
		return GPU_LINK_NVLINK;
	if (ga->pcie_switch >= 0 && ga->pcie_switch == gb->pcie_switch)
		return GPU_LINK_PIX;
	if (ga->info.numa_node >= 0 && ga->info.numa_node == gb->info.numa_node)
		return GPU_LINK_NODE;
	return GPU_LINK_SYS;
}

static enum gpu_link sim_pcie(void *state, int a, int b)
{
	const struct sim_gpu *ga = &((struct sim *)state)->gpus[a];
	const struct sim_gpu *gb = &((struct sim *)state)->gpus[b];
	if (a == b)
		return GPU_LINK_SELF;
	if (ga->pcie_switch >= 0 && ga->pcie_switch == gb->pcie_switch)
		return GPU_LINK_PIX;
	if (ga->info.numa_node >= 0 && ga->info.numa_node == gb->info.numa_node)
		return GPU_LINK_NODE;
	return GPU_LINK_SYS;
}

static int64_t power_mw(const struct sim_gpu *g)
{
	if (g->held_power_mw >= 0)
		return g->held_power_mw;
	const struct sim_model *m = g->model;
	return m->idle_mw + (m->tdp_mw - m->idle_mw) * g->util_pct / 100;
}

static int64_t temp_c(const struct sim_gpu *g)
{
	return g->held_temp_c >= 0 ? g->held_temp_c : SIM_IDLE_C + SIM_LOAD_C * g->util_pct / 100;
}

/* Adds the energy drawn since the last call at the power drawn until now;
 * called before anything that changes the power. */
static void accrue_energy(struct sim_gpu *g)
{
	int64_t now = now_us();
	int64_t dt_us = now - g->energy_at_us;
	if (dt_us <= 0)
		return;
	/* mW * ms = uJ; split so neither product can overflow. */
	int64_t p = power_mw(g);
	g->energy_uj += p * (dt_us / 1000) + p * (dt_us % 1000) / 1000;
	g->energy_at_us = now;
}

static int64_t throttle_of(const struct sim_gpu *g)
{
	int64_t t = g->throttle;
	if (temp_c(g) >= SIM_THROTTLE_C)
		t |= (int64_t)(GPU_THROTTLE_SW_THERMAL | GPU_THROTTLE_HW_THERMAL);
	return t;
}

static int64_t sm_clock_of(const struct sim_gpu *g, int64_t throttle)
{
	const uint64_t hw =
	        GPU_THROTTLE_HW_SLOWDOWN | GPU_THROTTLE_HW_THERMAL | GPU_THROTTLE_HW_POWER_BRAKE;
	const uint64_t sw = GPU_THROTTLE_SW_POWER_CAP | GPU_THROTTLE_SW_THERMAL;
	if ((uint64_t)throttle & hw)
		return g->model->sm_mhz / 2;
	if ((uint64_t)throttle & sw)
		return g->model->sm_mhz * 85 / 100;
	return g->model->sm_mhz;
}

static int sim_sample(void *state, int index, struct gpu_sample *out)
{
	struct sim *s = state;
	pthread_mutex_lock(&s->lock);
	struct sim_gpu *g = &s->gpus[index];
	if (g->lost) {
		out->lost = 1;
		goto out;
	}
	accrue_energy(g);
	out->util_gpu_pct = g->util_pct;
	out->util_mem_pct = g->util_pct / 2;
	out->mem_used_bytes = g->mem_used;
	out->mem_free_bytes = (int64_t)g->info.memory_bytes - g->mem_used;
	out->temp_c = temp_c(g);
	out->power_mw = power_mw(g);
	out->energy_mj = g->energy_uj / 1000;
	out->throttle_reasons = throttle_of(g);
	out->sm_clock_mhz = sm_clock_of(g, out->throttle_reasons);
	out->mem_clock_mhz = g->model->mem_mhz;
	out->ecc_sbe_volatile = g->sbe_volatile;
	out->ecc_dbe_volatile = g->dbe_volatile;
	out->ecc_sbe_aggregate = g->sbe_aggregate;
	out->ecc_dbe_aggregate = g->dbe_aggregate;
	out->remap_correctable = g->remap_correctable;
	out->remap_uncorrectable = g->remap_uncorrectable;
	out->remap_pending = g->remap_pending;
	out->remap_failure = g->remap_failure;
	out->recovery_action = g->recovery_action;
out:
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Empties the wake pipe; the queue, read under the same lock, is the truth. */
static void drain_wake(struct sim *s)
{
	char junk[256];
	while (read(s->wake[0], junk, sizeof(junk)) > 0) {
	}
}

static int sim_events(void *state, int timeout_ms, struct gpu_event *out, int max)
{
	struct sim *s = state;
	int64_t deadline = now_ms() + timeout_ms;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		/* Draining before reading the queue cannot lose a wakeup: an
		 * inject after the unlock below writes a new byte. */
		drain_wake(s);
		int n = 0;
		int64_t read_at = wall_ms();
		while (n < max && s->queue_len > 0) {
			out[n] = s->queue[s->queue_head];
			out[n++].wall_ms = read_at;
			s->queue_head = (s->queue_head + 1) % SIM_EVENTS_MAX;
			s->queue_len--;
		}
		pthread_mutex_unlock(&s->lock);
		int64_t left = deadline - now_ms();
		if (n > 0 || left <= 0)
			return n;
		struct pollfd p = {.fd = s->wake[0], .events = POLLIN};
		if (poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 && errno != EINTR)
			return -errno;
	}
}

static int sim_reset(void *state, int index, char *err, size_t errlen)
{
	struct sim *s = state;
	struct sim_gpu *g = &s->gpus[index];
	pthread_mutex_lock(&s->lock);
	int lost = g->lost;
	pthread_mutex_unlock(&s->lock);
	/* A reset takes time, as nvidia-smi --gpu-reset does on hardware: the
	 * caller waits, and the GPU keeps its faults until the reset is done.
	 * The lock is not held meanwhile, so samples, events and injections go
	 * on; a GPU that falls off the bus during the reset fails it. A lost
	 * GPU fails at once. (reset_ms is set at open and never changes.) */
	if (!lost)
		sleep_ms(s->reset_ms);
	int rc = 0;
	pthread_mutex_lock(&s->lock);
	if (g->lost) {
		snprintf(err, errlen, "gpu %d: GPU fell off the bus; the node needs a reboot",
		         index);
		rc = ERR_UPSTREAM;
	} else {
		accrue_energy(g);
		g->sbe_volatile = g->dbe_volatile = 0;
		g->remap_pending = 0;
		g->recovery_action = GPU_RECOVERY_NONE;
		g->held_temp_c = -1;
		g->throttle = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Fault injection: one table entry per kind (see sim.h). apply() runs
 * under the lock, after jv_check and the index check. */
struct fault_kind {
	const char *name;
	const struct jv_field *fields;
	int (*apply)(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen);
};

#define FAULT_COMMON                                                                               \
	{"gpu", JV_INT, 1, 0, GPU_MAX - 1},                                                        \
	{                                                                                          \
		"kind", JV_STRING, 1, 1, 32                                                        \
	}
#define FAULT_END                                                                                  \
	{                                                                                          \
		NULL, 0, 0, 0, 0                                                                   \
	}

static void queue_xid(struct sim *s, int index, uint64_t xid)
{
	if (s->queue_len == SIM_EVENTS_MAX) {
		/* Full: the oldest goes, the newest is what an operator wants. */
		s->queue_head = (s->queue_head + 1) % SIM_EVENTS_MAX;
		s->queue_len--;
	}
	int tail = (s->queue_head + s->queue_len) % SIM_EVENTS_MAX;
	s->queue[tail] = (struct gpu_event){.index = index, .xid = xid, .wall_ms = 0};
	s->queue_len++;
	/* A full pipe already wakes the reader; nothing else can fail here. */
	ssize_t w = write(s->wake[1], "x", 1);
	(void)w;
}

/* What NVIDIA's XID catalog asks for, for the XIDs it says need a reset or
 * a reboot; -1 for the rest (the recovery action stays). */
static int64_t catalog_recovery(int64_t xid)
{
	switch (xid) {
	case 48:  /* double bit ECC error */
	case 62:  /* internal micro-controller halt */
	case 64:  /* ECC page retirement or row remapper recording failure */
	case 95:  /* uncontained ECC error */
	case 119: /* GSP RPC timeout */
	case 120: /* GSP error */ return GPU_RECOVERY_GPU_RESET;
	case 79: /* fell off the bus */ return GPU_RECOVERY_NODE_REBOOT;
	default: return -1;
	}
}

static const struct jv_field xid_fields[] = {
        FAULT_COMMON,
        {"xid", JV_INT, 1, 1, 999},
        {"recovery_action", JV_INT, 0, 0, GPU_RECOVERY_DRAIN_AND_RESET},
        FAULT_END,
};

static int apply_xid(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	int64_t xid = jv_int(f, "xid", 0);
	switch (xid) {
	case 79: g->lost = 1; break;
	case 48:
		g->dbe_volatile++;
		g->dbe_aggregate++;
		break;
	case 63:
	case 64: g->remap_pending = 1; break;
	default: break;
	}
	int64_t action = jv_int(f, "recovery_action", catalog_recovery(xid));
	if (action >= 0)
		g->recovery_action = action;
	queue_xid(s, g->info.index, (uint64_t)xid);
	return 0;
}

static const struct jv_field ecc_fields[] = {
        FAULT_COMMON,
        {"correctable", JV_INT, 0, 0, INT32_MAX},
        {"uncorrectable", JV_INT, 0, 0, INT32_MAX},
        FAULT_END,
};

static int apply_ecc(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	int64_t sbe = jv_int(f, "correctable", 0), dbe = jv_int(f, "uncorrectable", 0);
	g->sbe_volatile += sbe;
	g->sbe_aggregate += sbe;
	g->dbe_volatile += dbe;
	g->dbe_aggregate += dbe;
	return 0;
}

static const struct jv_field temperature_fields[] = {
        FAULT_COMMON,
        {"celsius", JV_INT, 1, 0, 150},
        FAULT_END,
};

static int apply_temperature(struct sim *s, struct sim_gpu *g, const json_t *f, char *err,
                             size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	g->held_temp_c = jv_int(f, "celsius", SIM_IDLE_C);
	return 0;
}

static const struct jv_field throttle_fields[] = {
        FAULT_COMMON,
        {"reasons", JV_INT, 1, 0, UINT32_MAX},
        FAULT_END,
};

static int apply_throttle(struct sim *s, struct sim_gpu *g, const json_t *f, char *err,
                          size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	g->throttle = jv_int(f, "reasons", 0);
	return 0;
}

static const struct jv_field power_fields[] = {
        FAULT_COMMON,
        {"watts", JV_INT, 1, 0, 2000},
        FAULT_END,
};

static int apply_power(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	g->held_power_mw = jv_int(f, "watts", 0) * 1000;
	return 0;
}

static const struct jv_field load_fields[] = {
        FAULT_COMMON,
        {"util_pct", JV_INT, 0, 0, 100},
        {"mem_used_bytes", JV_INT, 0, 0, INT64_MAX},
        FAULT_END,
};

static int apply_load(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen)
{
	(void)s;
	int64_t used = jv_int(f, "mem_used_bytes", 0);
	if ((uint64_t)used > g->info.memory_bytes) {
		snprintf(err, errlen,
		         "fault \"load\": field 'mem_used_bytes': %" PRId64
		         " is more than gpu %d's memory (%" PRIu64 " bytes)",
		         used, g->info.index, g->info.memory_bytes);
		return ERR_INVALID;
	}
	g->util_pct = jv_int(f, "util_pct", 0);
	g->mem_used = used;
	return 0;
}

static const struct jv_field bare_fields[] = {
        FAULT_COMMON,
        FAULT_END,
};

static int apply_lost(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen)
{
	(void)s;
	(void)f;
	(void)err;
	(void)errlen;
	g->lost = 1;
	return 0;
}

static int apply_clear(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen)
{
	(void)s;
	(void)f;
	(void)err;
	(void)errlen;
	clear_faults(g);
	return 0;
}

static const struct jv_field remap_fields[] = {
        FAULT_COMMON,
        {"pending", JV_INT, 0, 0, 1},
        {"failure", JV_INT, 0, 0, 1},
        {"correctable", JV_INT, 0, 0, INT32_MAX},
        {"uncorrectable", JV_INT, 0, 0, INT32_MAX},
        FAULT_END,
};

static int apply_remap(struct sim *s, struct sim_gpu *g, const json_t *f, char *err, size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	g->remap_pending = jv_int(f, "pending", g->remap_pending);
	g->remap_failure = jv_int(f, "failure", g->remap_failure);
	g->remap_correctable = jv_int(f, "correctable", g->remap_correctable);
	g->remap_uncorrectable = jv_int(f, "uncorrectable", g->remap_uncorrectable);
	return 0;
}

static const struct jv_field recovery_fields[] = {
        FAULT_COMMON,
        {"action", JV_INT, 1, GPU_RECOVERY_NONE, GPU_RECOVERY_DRAIN_AND_RESET},
        FAULT_END,
};

static int apply_recovery(struct sim *s, struct sim_gpu *g, const json_t *f, char *err,
                          size_t errlen)
{
	(void)s;
	(void)err;
	(void)errlen;
	g->recovery_action = jv_int(f, "action", GPU_RECOVERY_NONE);
	return 0;
}

static const struct fault_kind fault_kinds[] = {
        {"xid", xid_fields, apply_xid},
        {"ecc", ecc_fields, apply_ecc},
        {"temperature", temperature_fields, apply_temperature},
        {"throttle", throttle_fields, apply_throttle},
        {"power", power_fields, apply_power},
        {"load", load_fields, apply_load},
        {"lost", bare_fields, apply_lost},
        {"remap", remap_fields, apply_remap},
        {"recovery_action", recovery_fields, apply_recovery},
        {"clear", bare_fields, apply_clear},
};

#define FAULT_KIND_NAMES                                                                           \
	"xid, ecc, temperature, throttle, power, load, lost, remap, recovery_action, clear"

static const struct fault_kind *find_kind(const json_t *fault, char *err, size_t errlen)
{
	const json_t *kind = json_object_get(fault, "kind");
	if (!kind) {
		snprintf(err, errlen, "fault: field 'kind': required, one of " FAULT_KIND_NAMES);
		return NULL;
	}
	if (json_is_string(kind)) {
		for (size_t i = 0; i < sizeof(fault_kinds) / sizeof(fault_kinds[0]); i++)
			if (strcmp(json_string_value(kind), fault_kinds[i].name) == 0)
				return &fault_kinds[i];
	}
	char *shown = json_dumps(kind, JSON_COMPACT | JSON_ENCODE_ANY);
	snprintf(err, errlen, "fault: field 'kind': %.40s is not one of " FAULT_KIND_NAMES,
	         shown ? shown : "?");
	free(shown);
	return NULL;
}

static int sim_inject(void *state, const json_t *fault, char *err, size_t errlen)
{
	struct sim *s = state;
	char why[256];
	const struct fault_kind *k = find_kind(fault, err, errlen);
	if (!k)
		return ERR_INVALID;
	if (jv_check(fault, k->fields, why, sizeof(why))) {
		snprintf(err, errlen, "fault \"%s\": %s", k->name, why);
		return ERR_INVALID;
	}
	int64_t index = jv_int(fault, "gpu", -1);
	if (index >= s->count) {
		snprintf(err, errlen,
		         "fault \"%s\": field 'gpu': %" PRId64
		         " is not a GPU of this node (it has %d)",
		         k->name, index, s->count);
		return ERR_INVALID;
	}
	pthread_mutex_lock(&s->lock);
	struct sim_gpu *g = &s->gpus[index];
	accrue_energy(g);
	int rc = k->apply(s, g, fault, err, errlen);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static void sim_close(void *state)
{
	sim_free(state);
}

const struct gpu_backend_ops gpu_sim_ops = {
        .name = "sim",
        .open = sim_open,
        .count = sim_count,
        .info = sim_info,
        .driver_version = sim_driver_version,
        .cuda_version = sim_cuda_version,
        .link = sim_link,
        .pcie = sim_pcie,
        .sample = sim_sample,
        .events = sim_events,
        .reset = sim_reset,
        .inject = sim_inject,
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

/* The CPUs of each NUMA half of a two-socket, 56-core-per-socket host with
 * SMT, as the kernel lists them. */
static const char *const numa_cpus[2] = {"0-55,112-167", "56-111,168-223"};

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

static json_t *board_gpu(int i, int count, const char *name, uint64_t mem, int node_index,
                         int island)
{
	char uuid[64], bus[32];
	/* "5151" marks a simulated GPU to a human reading the UUID. */
	snprintf(uuid, sizeof(uuid), "GPU-%08x-5151-4000-8000-%06x%06x", name_hash(name),
	         (unsigned)node_index, (unsigned)i);
	snprintf(bus, sizeof(bus), "00000000:%02X:%02X.0", pci_bus[i % 8], i / 8);
	int numa = i * 2 / count;
	json_t *g = json_pack("{s:i,s:s,s:s,s:I,s:s,s:i,s:i,s:s,s:b,s:b,s:i}", "index", i, "uuid",
	                      uuid, "name", name, "memory_bytes", (json_int_t)mem, "pci_bus_id",
	                      bus, "minor", i, "numa_node", numa, "cpu_affinity", numa_cpus[numa],
	                      "mig_mode", 0, "persistence_mode", 1, "pcie_switch", i / 2);
	if (island > 0) {
		json_t *peers = json_array();
		for (int j = i / island * island; j < count && j < (i / island + 1) * island; j++)
			if (j != i)
				json_array_append_new(peers, json_integer(j));
		json_object_set_new(g, "nvlink_peers", peers);
	}
	return g;
}

int gpu_sim_write_file_topo(const char *path, int count, const char *model, int node_index,
                            int nvlink_group_size)
{
	if (count < 0 || count > GPU_MAX || node_index < 0 || node_index > 0xffffff ||
	    nvlink_group_size < 0 || nvlink_group_size > GPU_MAX ||
	    (model && (!*model || strlen(model) > 80)))
		return ERR_INVALID;
	const char *name;
	uint64_t mem;
	pick_model(model, &name, &mem);
	json_t *gpus = json_array();
	for (int i = 0; i < count; i++)
		json_array_append_new(
		        gpus, board_gpu(i, count, name, mem, node_index, nvlink_group_size));
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

int gpu_sim_write_file(const char *path, int count, const char *model, int node_index)
{
	return gpu_sim_write_file_topo(path, count, model, node_index, 4);
}
