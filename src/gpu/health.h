/* health.h - GPU fault classification: what broke, and the smallest scope
 * that fixes it.
 *
 * Two inputs feed it: critical events (XIDs, struct gpu_event) and samples
 * (struct gpu_sample: ECC counters, row-remap and page-retirement flags,
 * the driver's recovery action, throttling). Each judgment yields findings,
 * and each finding names one scope, the least disruptive action that
 * clears the fault:
 *
 *   none     nothing to do (a test message)
 *   warning  report and count it; nothing is stopped
 *   job      fail the job using that GPU; the GPU stays in service
 *   gpu      take the GPU out of service (fail its job) and reset it; it
 *            comes back only when gpu_health_is_clean() passes
 *   node     drain the node (a reboot, or draining all peer-to-peer work)
 *
 * XIDs follow NVIDIA's Xid catalog for Ampere and later
 * (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), by its
 * "Resolution Bucket (Immediate Action)" column:
 *
 *   RESTART_APP                     -> job      (13, 31, 43, 45, 94, ...)
 *   RESET_GPU, WORKFLOW_XID_48      -> gpu      (46, 48, 62, 64, 95, 119, 120, ...)
 *   RESTART_BM                      -> node     (79)
 *   WORKFLOW_NVLINK_ERR             -> node     (74)
 *   RESTART_VM                      -> node     (151)
 *   IGNORE, CHECK_*, UPDATE_SWFW    -> warning  (63, 92, ...)
 *   WORKFLOW_NVLINK5_ERR, XID_154   -> warning, unless the recovery action says more
 *   not in the catalog              -> warning  (conservative: reported and
 *                                      counted, never takes capacity away)
 *
 * Exceptions, each argued in health.c: 43 and 45 are job (the catalog says
 * IGNORE / WORKFLOW_XID_45: the process has already been stopped, so its job
 * has failed); 74 is node, because an NVLink fault may be reported by the
 * healthy end of the link, so fencing one GPU may fence the wrong one.
 *
 * The driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), when
 * a sample has one, overrides the catalog for an event: GPU_RESET and
 * DRAIN_AND_RESET -> gpu (the reset is per GPU; the work doing peer-to-peer
 * traffic with it is the job using it), NODE_REBOOT -> node, DRAIN_P2P ->
 * node (NVIDIA: terminate every process doing peer-to-peer traffic, which
 * on an NVLink node is any multi-GPU job). NONE never lowers the catalog's
 * scope: the driver announces a changed action with XID 154 after the
 * fault, so a NONE read just after an XID may be stale; the later change is
 * caught by gpu_health_judge_sample().
 *
 * Pure functions over caller-owned structs; thread-safe.
 */
#ifndef ANVIL_GPU_HEALTH_H
#define ANVIL_GPU_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

enum gpu_scope {
	GPU_SCOPE_NONE = 0,
	GPU_SCOPE_WARN,
	GPU_SCOPE_JOB,
	GPU_SCOPE_GPU,
	GPU_SCOPE_NODE,
};
#define GPU_SCOPE_COUNT 5

/* "none", "warning", "job", "gpu", "node"; "?" out of range. */
const char *gpu_scope_name(enum gpu_scope s);
/* The reverse of gpu_scope_name(): 0, or ERR_INVALID for another name. */
int gpu_scope_parse(const char *name, enum gpu_scope *out);

/* One judgment. code is short and stable (for counters, alerts and tests):
 *
 *   xid-<n>                 an XID event (the scope says what it needs)
 *   gpu-lost                the GPU fell off the bus                    node
 *   ecc-uncorrectable       new uncorrectable (volatile DBE) errors     gpu
 *   remap-pending           a row remap waits for a reset               gpu
 *   retire-pending          a page retirement waits for a reset         gpu
 *   remap-failure           a row remap failed: replace the GPU         gpu
 *   recovery-reset          the driver asks for a GPU reset             gpu
 *   recovery-reboot         the driver asks for a node reboot           node
 *   recovery-drain-p2p      the driver asks to drain peer-to-peer work  node
 *   recovery-imex           the driver asks to recover the IMEX domain  node
 *   recovery-unknown        an action this build does not know          gpu
 *   thermal                 thermal throttling or temp >= the warning   warning
 *   power-throttle          hardware slowdown or power brake            warning
 *   ecc-correctable-burst   many corrected errors between two samples   warning
 *
 * reason is one plain sentence naming the GPU, the fault and the action.
 * index is the GPU, or -1 when the driver could not say which. */
struct gpu_finding {
	int index;
	enum gpu_scope scope;
	char code[32];
	char reason[200];
};

/* Thresholds for gpu_health_judge_sample(). */
struct gpu_health_config {
	int64_t temp_warn_c; /* warn at or above this GPU temperature (C); <= 0: off */
	int64_t sbe_burst; /* warn when corrected errors grow this much between samples; <= 0: off */
};

/* Defaults, anvil's choices to tune per fleet: 85 C sits below the
 * slowdown thresholds data-center boards report (nvidia-smi -q -d
 * TEMPERATURE), so the warning comes before the clocks drop; a healthy
 * GPU corrects close to no errors, so 100 in one sample interval is a
 * burst worth a look. */
#define GPU_HEALTH_TEMP_WARN_C 85
#define GPU_HEALTH_SBE_BURST   100

/* The defaults above. */
void gpu_health_config_default(struct gpu_health_config *cfg);

/* One row of the built-in catalog: XIDs lo..hi share a scope. what is the
 * catalog's description, action the sentence the reason ends with. */
struct gpu_xid_class {
	uint64_t lo;
	uint64_t hi;
	enum gpu_scope scope;
	const char *what;
	const char *action;
};

/* The catalog row for xid, or NULL when anvil's catalog does not know it
 * (the caller counts those: they are judged warnings). The row is static. */
const struct gpu_xid_class *gpu_health_xid(uint64_t xid);

/* The scope the driver's recovery action asks for: none for NONE (0) and
 * for -1 (unsupported), else as in the header comment; newer actions
 * (5 RECOVER_IMEX_DOMAIN, 6 BUS_RESET, 7 SYSTEM_REBOOT) are mapped too, and
 * any other value is gpu: the driver says something is needed, and a
 * quarantined GPU only returns once the action reads NONE again. */
enum gpu_scope gpu_health_recovery_scope(int64_t action);

/* Judges one XID event; now (may be NULL) is a sample of the same GPU
 * read after the event, for its recovery action. Returns 1 with *out
 * filled, 0 when there is nothing to report (scope none; *out untouched),
 * or ERR_INVALID for a NULL ev or out. An event whose GPU is unknown
 * (index -1) at gpu scope is raised to node: no single GPU can be fenced. */
int gpu_health_judge_event(const struct gpu_event *ev, const struct gpu_sample *now,
                           struct gpu_finding *out);

/* The most findings one sample can yield; a larger out never fills. */
#define GPU_HEALTH_MAX_FINDINGS 8

/* Judges a sample of GPU index against the previous one (NULL for the
 * first sample, or when the previous one said lost). Edge-triggered: a
 * finding is emitted when a condition appears, not on every sample that
 * still shows it; with prev NULL every condition present is reported
 * (a pending remap, a lost GPU, volatile uncorrectable errors, a recovery
 * action, a remap failure, heat). The correctable burst needs two samples.
 * A lost GPU yields only gpu-lost. cfg NULL means the defaults. Writes at
 * most max findings, most severe first, and returns how many; ERR_INVALID
 * for a NULL cur, or a NULL out with max > 0. */
int gpu_health_judge_sample(int index, const struct gpu_sample *prev, const struct gpu_sample *cur,
                            const struct gpu_health_config *cfg, struct gpu_finding *out, int max);

/* The clean check after a reset: 1 when the GPU may run jobs again (not
 * lost, no pending remap or retirement, no volatile uncorrectable ECC
 * errors, no remap failure, recovery action NONE or unsupported); else 0
 * with the first reason in why (may be NULL). Unsupported (-1) counters
 * pass: they cannot show a fault. */
int gpu_health_is_clean(const struct gpu_sample *s, char *why, size_t whylen);

#endif
