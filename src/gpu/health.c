/* health.c - the XID catalog and the sample rules behind health.h. */
#include "gpu/health.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"

static const char *const scope_names[GPU_SCOPE_COUNT] = {"none", "warning", "job", "gpu", "node"};

const char *gpu_scope_name(enum gpu_scope s)
{
	if ((int)s < 0 || (int)s >= GPU_SCOPE_COUNT)
		return "?";
	return scope_names[s];
}

int gpu_scope_parse(const char *name, enum gpu_scope *out)
{
	for (int i = 0; name && i < GPU_SCOPE_COUNT; i++) {
		if (strcmp(name, scope_names[i]) == 0) {
			*out = (enum gpu_scope)i;
			return 0;
		}
	}
	return ERR_INVALID;
}

void gpu_health_config_default(struct gpu_health_config *cfg)
{
	cfg->temp_warn_c = GPU_HEALTH_TEMP_WARN_C;
	cfg->sbe_burst = GPU_HEALTH_SBE_BURST;
}

/* What each scope asks of the operator, as the end of a reason. */
#define DO_WARN    "reported only; nothing is stopped"
#define DO_JOB     "the job on this GPU fails; the GPU stays in service"
#define DO_RESET   "the GPU needs a reset before it runs another job"
#define DO_REBOOT  "the node needs a reboot"
#define DO_NVLINK  "the node is drained for a GPU reset or a reboot"
#define DO_DRIVER  "reported; the driver's recovery action decides"
#define DO_NOTHING "a test message; nothing to do"

/* NVIDIA's Xid catalog for Ampere and later (analyzing-xid-catalog.html,
 * the spreadsheet of October 2025), by the immediate-action bucket; the
 * descriptions are the catalog's. Codes the catalog marks "Unused" on these
 * GPUs are left out, so they are judged as unknown (warning). Sorted by lo.
 *
 * Decisions beyond a one-to-one reading of the bucket:
 * - 43 (IGNORE) and 45 (WORKFLOW_XID_45) are job: the driver has already
 *   stopped the process, so its job has failed, and the GPU is healthy (43)
 *   or the primary XID that caused the cleanup carries the real scope (45).
 * - 48 (WORKFLOW_XID_48): solo it is RESET_GPU; with 63/64 it is
 *   DRAIN_AND_RESET, which is still one GPU. 171/172 only detail a 48.
 * - 74 (WORKFLOW_NVLINK_ERR: reset the GPU or reboot the node) is node: the
 *   healthy end of a broken link reports it too, so one GPU cannot be
 *   fenced with confidence, and an NVLink node's jobs span its GPUs.
 * - 144-150 (WORKFLOW_NVLINK5_ERR) need the error-status decode, which an
 *   NVML event does not carry; the fatal rows raise XID 154 and a recovery
 *   action, which decides the scope. 154 itself defers to that action.
 * - 151 (RESTART_VM) is node: on bare metal the VM is the node.
 * - 54 (CHECK_MECHANICALS) and 78 (UPDATE_SWFW) need a person, not a
 *   reset: warning. */
static const struct gpu_xid_class catalog[] = {
        {8, 8, GPU_SCOPE_JOB, "GPU stopped processing", DO_JOB},
        {11, 11, GPU_SCOPE_JOB, "invalid or corrupted push buffer stream", DO_JOB},
        {13, 13, GPU_SCOPE_JOB, "graphics engine exception", DO_JOB},
        {25, 25, GPU_SCOPE_JOB, "invalid or illegal push buffer stream", DO_JOB},
        {31, 31, GPU_SCOPE_JOB, "GPU memory page fault", DO_JOB},
        {32, 32, GPU_SCOPE_JOB, "invalid or corrupted push buffer stream", DO_JOB},
        {37, 38, GPU_SCOPE_WARN, "driver firmware error", DO_WARN},
        {39, 41, GPU_SCOPE_JOB, "copy engine exception", DO_JOB},
        {43, 43, GPU_SCOPE_JOB, "GPU stopped processing", DO_JOB},
        {44, 44, GPU_SCOPE_WARN, "graphics engine fault during context switch", DO_WARN},
        {45, 45, GPU_SCOPE_JOB, "preemptive cleanup after an earlier error", DO_JOB},
        {46, 46, GPU_SCOPE_GPU, "GPU stopped processing", DO_RESET},
        {48, 48, GPU_SCOPE_GPU, "double-bit ECC error", DO_RESET},
        {54, 54, GPU_SCOPE_WARN, "auxiliary power is not connected", DO_WARN},
        {60, 60, GPU_SCOPE_JOB, "video processor exception", DO_JOB},
        {62, 62, GPU_SCOPE_GPU, "internal micro-controller halt", DO_RESET},
        {63, 63, GPU_SCOPE_WARN, "GPU memory remapping event", DO_WARN},
        {64, 64, GPU_SCOPE_GPU, "GPU memory remapping failure", DO_RESET},
        {66, 67, GPU_SCOPE_WARN, "illegal access by driver", DO_WARN},
        {68, 68, GPU_SCOPE_JOB, "NVDEC0 exception", DO_JOB},
        {69, 69, GPU_SCOPE_JOB, "graphics engine class error", DO_JOB},
        {70, 72, GPU_SCOPE_JOB, "copy engine error", DO_JOB},
        {74, 74, GPU_SCOPE_NODE, "NVLink error", DO_NVLINK},
        {75, 77, GPU_SCOPE_JOB, "copy engine error", DO_JOB},
        {78, 78, GPU_SCOPE_WARN, "vGPU start error", DO_WARN},
        {79, 79, GPU_SCOPE_NODE, "GPU has fallen off the bus", DO_REBOOT},
        {80, 80, GPU_SCOPE_JOB, "corrupted data sent to GPU", DO_JOB},
        {82, 82, GPU_SCOPE_JOB, "NVJPG0 error", DO_JOB},
        {83, 84, GPU_SCOPE_JOB, "NVDEC error", DO_JOB},
        {85, 85, GPU_SCOPE_JOB, "copy engine error", DO_JOB},
        {86, 86, GPU_SCOPE_JOB, "OFA exception", DO_JOB},
        {88, 89, GPU_SCOPE_JOB, "NVDEC error", DO_JOB},
        {92, 92, GPU_SCOPE_WARN, "high single-bit ECC error rate", DO_WARN},
        {93, 93, GPU_SCOPE_WARN, "InfoROM wear limit exceeded", DO_WARN},
        {94, 94, GPU_SCOPE_JOB, "contained memory error", DO_JOB},
        {95, 95, GPU_SCOPE_GPU, "uncontained memory error", DO_RESET},
        {96, 98, GPU_SCOPE_JOB, "NVDEC error", DO_JOB},
        {99, 105, GPU_SCOPE_JOB, "NVJPG error", DO_JOB},
        {106, 107, GPU_SCOPE_NONE, "SMBPBI test message", DO_NOTHING},
        {109, 109, GPU_SCOPE_GPU, "context switch timeout", DO_RESET},
        {110, 110, GPU_SCOPE_GPU, "security fault", DO_RESET},
        {119, 119, GPU_SCOPE_GPU, "GSP RPC timeout", DO_RESET},
        {120, 120, GPU_SCOPE_GPU, "GSP error", DO_RESET},
        {121, 121, GPU_SCOPE_WARN, "C2C error", DO_WARN},
        {126, 135, GPU_SCOPE_JOB, "copy engine error", DO_JOB},
        {136, 136, GPU_SCOPE_GPU, "link training failed", DO_RESET},
        {137, 137, GPU_SCOPE_WARN, "NVLink privilege error", DO_WARN},
        {139, 139, GPU_SCOPE_JOB, "OFA1 error", DO_JOB},
        {140, 140, GPU_SCOPE_GPU, "unrecovered ECC error", DO_RESET},
        {141, 141, GPU_SCOPE_WARN, "CUDA fast path error", DO_WARN},
        {143, 143, GPU_SCOPE_GPU, "GPU initialization error", DO_RESET},
        {144, 150, GPU_SCOPE_WARN, "NVLink5 error", DO_DRIVER},
        {151, 151, GPU_SCOPE_NODE, "key rotation error", DO_REBOOT},
        {152, 153, GPU_SCOPE_WARN, "DLA error", DO_WARN},
        {154, 154, GPU_SCOPE_WARN, "GPU recovery action changed", DO_DRIVER},
        {155, 155, GPU_SCOPE_GPU, "NVLink software-defined error", DO_RESET},
        {156, 156, GPU_SCOPE_GPU, "resource retirement event", DO_RESET},
        {157, 157, GPU_SCOPE_WARN, "resource retirement failure", DO_WARN},
        {158, 158, GPU_SCOPE_GPU, "GPU fatal timeout", DO_RESET},
        {159, 159, GPU_SCOPE_WARN, "CHI non-data error", DO_WARN},
        {160, 161, GPU_SCOPE_WARN, "channel retirement", DO_WARN},
        {171, 172, GPU_SCOPE_GPU, "uncorrectable ECC error (detail of XID 48)", DO_RESET},
};

const struct gpu_xid_class *gpu_health_xid(uint64_t xid)
{
	for (size_t i = 0; i < sizeof(catalog) / sizeof(catalog[0]); i++) {
		if (xid >= catalog[i].lo && xid <= catalog[i].hi)
			return &catalog[i];
	}
	return NULL;
}

/* The driver's recovery actions: scope, finding code, and the sentence. */
struct recovery {
	enum gpu_scope scope;
	const char *code;
	const char *says;
};

static struct recovery recovery_of(int64_t action)
{
	switch (action) {
	case -1:
	case GPU_RECOVERY_NONE: return (struct recovery){GPU_SCOPE_NONE, "", ""};
	case GPU_RECOVERY_GPU_RESET:
		return (struct recovery){GPU_SCOPE_GPU, "recovery-reset",
		                         "the driver asks for a GPU reset"};
	case GPU_RECOVERY_NODE_REBOOT:
		return (struct recovery){GPU_SCOPE_NODE, "recovery-reboot",
		                         "the driver asks for a node reboot"};
	case GPU_RECOVERY_DRAIN_P2P:
		return (struct recovery){GPU_SCOPE_NODE, "recovery-drain-p2p",
		                         "the driver asks to drain peer-to-peer traffic"};
	case GPU_RECOVERY_DRAIN_AND_RESET:
		return (struct recovery){GPU_SCOPE_GPU, "recovery-reset",
		                         "the driver asks to drain peer-to-peer traffic and "
		                         "reset the GPU"};
	case 5: /* NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN */
		return (struct recovery){GPU_SCOPE_NODE, "recovery-imex",
		                         "the driver asks to recover the IMEX domain"};
	case 6: /* NVML_GPU_RECOVERY_ACTION_BUS_RESET */
		return (struct recovery){GPU_SCOPE_GPU, "recovery-reset",
		                         "the driver asks for a PCIe bus reset of the GPU"};
	case 7: /* NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT */
		return (struct recovery){GPU_SCOPE_NODE, "recovery-reboot",
		                         "the driver asks for a system reboot"};
	default:
		return (struct recovery){GPU_SCOPE_GPU, "recovery-unknown",
		                         "the driver asks for a recovery action anvil does not "
		                         "know"};
	}
}

enum gpu_scope gpu_health_recovery_scope(int64_t action)
{
	return recovery_of(action).scope;
}

static const char *scope_action(enum gpu_scope s)
{
	switch (s) {
	case GPU_SCOPE_NONE: return DO_NOTHING;
	case GPU_SCOPE_WARN: return DO_WARN;
	case GPU_SCOPE_JOB: return DO_JOB;
	case GPU_SCOPE_GPU: return DO_RESET;
	case GPU_SCOPE_NODE: return DO_REBOOT;
	}
	return DO_WARN;
}

static void finding_set(struct gpu_finding *f, int index, enum gpu_scope scope, const char *code)
{
	memset(f, 0, sizeof(*f));
	f->index = index;
	f->scope = scope;
	snprintf(f->code, sizeof(f->code), "%s", code);
}

/* Reasons are capped at their field; a long one is cut, never overrun. */
__attribute__((format(printf, 2, 3))) static void reasonf(struct gpu_finding *f, const char *fmt,
                                                          ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->reason, sizeof(f->reason), fmt, ap);
	va_end(ap);
}

int gpu_health_judge_event(const struct gpu_event *ev, const struct gpu_sample *now,
                           struct gpu_finding *out)
{
	if (!ev || !out)
		return ERR_INVALID;
	const struct gpu_xid_class *c = gpu_health_xid(ev->xid);
	enum gpu_scope scope = c ? c->scope : GPU_SCOPE_WARN;
	const char *action = c ? c->action : NULL;
	/* Only an action other than NONE overrides: see health.h on staleness.
	 * A lost GPU's other readings mean nothing. */
	struct recovery r = recovery_of(now && !now->lost ? now->recovery_action : -1);
	if (r.scope != GPU_SCOPE_NONE) {
		scope = r.scope;
		action = NULL;
	}
	if (scope == GPU_SCOPE_NONE)
		return 0;
	int index = ev->index >= 0 ? ev->index : -1;
	const char *what = c ? c->what : "not in anvil's catalog";
	char says[128] = "";
	if (r.scope != GPU_SCOPE_NONE)
		snprintf(says, sizeof(says), "; %s", r.says);
	if (index < 0 && scope == GPU_SCOPE_GPU) {
		scope = GPU_SCOPE_NODE;
		action = "no single GPU can be fenced, so the node is drained";
	}
	if (!action)
		action = scope_action(scope);
	char code[32], gpu[32];
	snprintf(code, sizeof(code), "xid-%llu", (unsigned long long)ev->xid);
	if (index >= 0)
		snprintf(gpu, sizeof(gpu), "GPU %d", index);
	else
		snprintf(gpu, sizeof(gpu), "an unknown GPU");
	finding_set(out, index, scope, code);
	reasonf(out, "XID %llu on %s (%s)%s: %s", (unsigned long long)ev->xid, gpu, what, says,
	        action);
	return 1;
}

/* Sample rules. Each is a condition on one sample; a finding is emitted
 * when the condition holds now and did not in prev (NULL: never did). */

static int has(int64_t v)
{
	return v > 0;
}

static int64_t thermal_bits(const struct gpu_sample *s)
{
	return s->throttle_reasons > 0 ? s->throttle_reasons & (int64_t)(GPU_THROTTLE_SW_THERMAL |
	                                                                 GPU_THROTTLE_HW_THERMAL)
	                               : 0;
}

/* SW_POWER_CAP is left out on purpose: it is the normal state of a busy GPU
 * at its power limit, and would warn on every training job. */
static int64_t power_bits(const struct gpu_sample *s)
{
	return s->throttle_reasons > 0
	               ? s->throttle_reasons &
	                         (int64_t)(GPU_THROTTLE_HW_SLOWDOWN | GPU_THROTTLE_HW_POWER_BRAKE)
	               : 0;
}

static int hot(const struct gpu_sample *s, const struct gpu_health_config *cfg)
{
	return thermal_bits(s) ||
	       (cfg->temp_warn_c > 0 && s->temp_c >= 0 && s->temp_c >= cfg->temp_warn_c);
}

struct findings {
	struct gpu_finding *out;
	int max;
	int n;
	int index;
	struct gpu_finding discard; /* where findings past max are formatted */
};

static struct gpu_finding *emit(struct findings *fs, enum gpu_scope scope, const char *code)
{
	if (fs->n >= fs->max)
		return &fs->discard; /* formatted and dropped: keeps the rules simple */
	struct gpu_finding *f = &fs->out[fs->n++];
	finding_set(f, fs->index, scope, code);
	return f;
}

static void judge_memory(struct findings *fs, const struct gpu_sample *prev,
                         const struct gpu_sample *cur)
{
	int i = fs->index;
	if (has(cur->remap_failure) && !(prev && has(prev->remap_failure)))
		reasonf(emit(fs, GPU_SCOPE_GPU, "remap-failure"),
		        "GPU %d failed to remap a memory row: it must be replaced, and stays out "
		        "of service",
		        i);
	/* A volatile counter that changed at all (it also drops to 0 at a
	 * reset, which is not > 0) has seen new errors. */
	if (has(cur->ecc_dbe_volatile) &&
	    !(prev && prev->ecc_dbe_volatile == cur->ecc_dbe_volatile)) {
		char was[48] = "";
		if (prev && prev->ecc_dbe_volatile >= 0)
			snprintf(was, sizeof(was), " (was %lld)",
			         (long long)prev->ecc_dbe_volatile);
		reasonf(emit(fs, GPU_SCOPE_GPU, "ecc-uncorrectable"),
		        "GPU %d has %lld uncorrectable ECC errors since the driver loaded%s: %s", i,
		        (long long)cur->ecc_dbe_volatile, was, DO_RESET);
	}
	if (has(cur->remap_pending) && !(prev && has(prev->remap_pending)))
		reasonf(emit(fs, GPU_SCOPE_GPU, "remap-pending"),
		        "GPU %d has a memory row remap pending: the GPU needs a reset to apply it",
		        i);
	if (has(cur->retired_pending) && !(prev && has(prev->retired_pending)))
		reasonf(emit(fs, GPU_SCOPE_GPU, "retire-pending"),
		        "GPU %d has a page retirement pending: the GPU needs a reset to apply it",
		        i);
}

static void judge_recovery(struct findings *fs, const struct gpu_sample *prev,
                           const struct gpu_sample *cur)
{
	struct recovery r = recovery_of(cur->recovery_action);
	if (r.scope == GPU_SCOPE_NONE || (prev && prev->recovery_action == cur->recovery_action))
		return;
	reasonf(emit(fs, r.scope, r.code), "GPU %d: %s (recovery action %lld); %s", fs->index,
	        r.says, (long long)cur->recovery_action, scope_action(r.scope));
}

static void judge_heat(struct findings *fs, const struct gpu_sample *prev,
                       const struct gpu_sample *cur, const struct gpu_health_config *cfg)
{
	int i = fs->index;
	if (hot(cur, cfg) && !(prev && hot(prev, cfg))) {
		char temp[64] = "";
		if (cur->temp_c >= 0 && cfg->temp_warn_c > 0)
			snprintf(temp, sizeof(temp), " at %lld C (warning at %lld C)",
			         (long long)cur->temp_c, (long long)cfg->temp_warn_c);
		else if (cur->temp_c >= 0)
			snprintf(temp, sizeof(temp), " at %lld C", (long long)cur->temp_c);
		reasonf(emit(fs, GPU_SCOPE_WARN, "thermal"), "GPU %d is hot%s%s: %s", i, temp,
		        thermal_bits(cur) ? ", clocks throttled for heat" : "", DO_WARN);
	}
	if (power_bits(cur) && !(prev && power_bits(prev)))
		reasonf(emit(fs, GPU_SCOPE_WARN, "power-throttle"),
		        "GPU %d is slowed by the hardware (%s): %s", i,
		        power_bits(cur) & (int64_t)GPU_THROTTLE_HW_POWER_BRAKE
		                ? "external power brake"
		                : "hardware slowdown",
		        DO_WARN);
	if (cfg->sbe_burst > 0 && prev && prev->ecc_sbe_volatile >= 0 &&
	    cur->ecc_sbe_volatile - prev->ecc_sbe_volatile >= cfg->sbe_burst)
		reasonf(emit(fs, GPU_SCOPE_WARN, "ecc-correctable-burst"),
		        "GPU %d corrected %lld ECC errors since the last sample (warning at %lld): "
		        "%s",
		        i, (long long)(cur->ecc_sbe_volatile - prev->ecc_sbe_volatile),
		        (long long)cfg->sbe_burst, DO_WARN);
}

int gpu_health_judge_sample(int index, const struct gpu_sample *prev, const struct gpu_sample *cur,
                            const struct gpu_health_config *cfg, struct gpu_finding *out, int max)
{
	if (!cur || (!out && max > 0))
		return ERR_INVALID;
	struct gpu_health_config dflt;
	if (!cfg) {
		gpu_health_config_default(&dflt);
		cfg = &dflt;
	}
	struct findings fs = {.out = out, .max = max > 0 ? max : 0, .index = index};
	if (cur->lost) {
		if (!prev || !prev->lost)
			reasonf(emit(&fs, GPU_SCOPE_NODE, "gpu-lost"),
			        "GPU %d has fallen off the bus (NVML: GPU is lost): %s", index,
			        DO_REBOOT);
		return fs.n;
	}
	if (prev && prev->lost)
		prev = NULL; /* back from lost: nothing it said was meaningful */
	judge_memory(&fs, prev, cur);
	judge_recovery(&fs, prev, cur);
	judge_heat(&fs, prev, cur, cfg);
	return fs.n;
}

int gpu_health_is_clean(const struct gpu_sample *s, char *why, size_t whylen)
{
	char tmp[160];
	const char *reason = NULL;
	if (!s)
		reason = "no reading";
	else if (s->lost)
		reason = "the GPU is lost (fallen off the bus)";
	else if (has(s->remap_failure))
		reason = "a memory row remap failed: the GPU must be replaced";
	else if (has(s->remap_pending))
		reason = "a memory row remap is still pending";
	else if (has(s->retired_pending))
		reason = "a page retirement is still pending";
	else if (has(s->ecc_dbe_volatile)) {
		snprintf(tmp, sizeof(tmp), "%lld uncorrectable ECC errors since the reset",
		         (long long)s->ecc_dbe_volatile);
		reason = tmp;
	} else if (recovery_of(s->recovery_action).scope != GPU_SCOPE_NONE) {
		snprintf(tmp, sizeof(tmp), "%s (recovery action %lld)",
		         recovery_of(s->recovery_action).says, (long long)s->recovery_action);
		reason = tmp;
	}
	if (!reason)
		return 1;
	if (why && whylen)
		snprintf(why, whylen, "%s", reason);
	return 0;
}
