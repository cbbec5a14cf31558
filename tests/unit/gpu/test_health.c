/* test_health.c - XID classification, sample rules and the clean check
 * (gpu/health.h). */
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "gpu/health.h"

/* A healthy H200 at work: every counter supported and zero. */
static struct gpu_sample healthy(void)
{
	struct gpu_sample s;
	memset(&s, 0, sizeof(s));
	s.util_gpu_pct = 97;
	s.util_mem_pct = 40;
	s.mem_used_bytes = 100ll << 30;
	s.mem_free_bytes = 40ll << 30;
	s.temp_c = 60;
	s.power_mw = 650000;
	s.energy_mj = 123456789;
	s.sm_clock_mhz = 1980;
	s.mem_clock_mhz = 2619;
	s.recovery_action = GPU_RECOVERY_NONE;
	return s;
}

/* A GPU that supports none of the optional counters. */
static struct gpu_sample unsupported(void)
{
	struct gpu_sample s = healthy();
	s.throttle_reasons = s.ecc_sbe_volatile = s.ecc_dbe_volatile = -1;
	s.ecc_sbe_aggregate = s.ecc_dbe_aggregate = s.retired_sbe = s.retired_dbe = -1;
	s.retired_pending = s.remap_correctable = s.remap_uncorrectable = -1;
	s.remap_pending = s.remap_failure = s.recovery_action = s.temp_c = -1;
	return s;
}

static struct gpu_finding judge_xid(int index, uint64_t xid, const struct gpu_sample *now)
{
	struct gpu_event ev = {.index = index, .xid = xid, .wall_ms = 1};
	struct gpu_finding f;
	memset(&f, 0, sizeof(f));
	f.scope = (enum gpu_scope)99;
	int rc = gpu_health_judge_event(&ev, now, &f);
	if (rc != 1)
		FAIL_AT("XID %llu: judge_event returned %d", (unsigned long long)xid, rc);
	return f;
}

static void expect_xid_scope(uint64_t xid, enum gpu_scope scope)
{
	struct gpu_finding f = judge_xid(2, xid, NULL);
	if (f.scope != scope)
		FAIL_AT("XID %llu: scope %s, want %s", (unsigned long long)xid,
		        gpu_scope_name(f.scope), gpu_scope_name(scope));
	char code[32];
	snprintf(code, sizeof(code), "xid-%llu", (unsigned long long)xid);
	CHECK_STR(f.code, code);
	CHECK_INT(f.index, 2);
	CHECK(gpu_health_xid(xid) != NULL);
}

TEST(scope_names_round_trip)
{
	const char *names[] = {"none", "warning", "job", "gpu", "node"};
	for (int i = 0; i < GPU_SCOPE_COUNT; i++) {
		CHECK_STR(gpu_scope_name((enum gpu_scope)i), names[i]);
		enum gpu_scope s = GPU_SCOPE_NODE;
		CHECK_INT(gpu_scope_parse(names[i], &s), 0);
		CHECK_INT(s, i);
	}
	CHECK_STR(gpu_scope_name((enum gpu_scope)7), "?");
	enum gpu_scope s = GPU_SCOPE_JOB;
	CHECK_INT(gpu_scope_parse("warn", &s), ERR_INVALID);
	CHECK_INT(gpu_scope_parse(NULL, &s), ERR_INVALID);
	CHECK_INT(s, GPU_SCOPE_JOB);
}

TEST(application_errors_fail_only_the_job)
{
	uint64_t xids[] = {8, 13, 31, 32, 43, 45, 68, 94, 126};
	for (size_t i = 0; i < sizeof(xids) / sizeof(xids[0]); i++)
		expect_xid_scope(xids[i], GPU_SCOPE_JOB);
	struct gpu_finding f = judge_xid(0, 13, NULL);
	CHECK_STR(f.reason, "XID 13 on GPU 0 (graphics engine exception): the job on this GPU "
	                    "fails; the GPU stays in service");
}

TEST(reset_errors_take_the_gpu)
{
	uint64_t xids[] = {46, 48, 62, 64, 95, 109, 119, 120, 136, 140, 143, 155, 158, 171};
	for (size_t i = 0; i < sizeof(xids) / sizeof(xids[0]); i++)
		expect_xid_scope(xids[i], GPU_SCOPE_GPU);
	struct gpu_finding f = judge_xid(5, 95, NULL);
	CHECK_STR(f.reason, "XID 95 on GPU 5 (uncontained memory error): the GPU needs a reset "
	                    "before it runs another job");
}

TEST(node_errors_drain_the_node)
{
	expect_xid_scope(79, GPU_SCOPE_NODE);
	expect_xid_scope(74, GPU_SCOPE_NODE);
	expect_xid_scope(151, GPU_SCOPE_NODE);
	struct gpu_finding f = judge_xid(3, 79, NULL);
	CHECK_STR(f.reason,
	          "XID 79 on GPU 3 (GPU has fallen off the bus): the node needs a reboot");
	f = judge_xid(1, 74, NULL);
	CHECK_CONTAINS(f.reason, "NVLink error");
}

TEST(informational_xids_are_warnings)
{
	uint64_t xids[] = {63, 92, 93, 37, 54, 137, 144, 150, 154, 157};
	for (size_t i = 0; i < sizeof(xids) / sizeof(xids[0]); i++)
		expect_xid_scope(xids[i], GPU_SCOPE_WARN);
	/* SMBPBI test messages: nothing to report, out untouched. */
	struct gpu_event ev = {.index = 0, .xid = 106};
	struct gpu_finding f = {.index = 42};
	CHECK_INT(gpu_health_judge_event(&ev, NULL, &f), 0);
	CHECK_INT(f.index, 42);
}

TEST(unknown_xid_is_a_counted_warning)
{
	CHECK(gpu_health_xid(999) == NULL);
	CHECK(gpu_health_xid(1) == NULL); /* "Unused" on Ampere and later */
	struct gpu_finding f = judge_xid(4, 999, NULL);
	CHECK_INT(f.scope, GPU_SCOPE_WARN);
	CHECK_STR(f.code, "xid-999");
	CHECK_STR(f.reason, "XID 999 on GPU 4 (not in anvil's catalog): reported only; nothing "
	                    "is stopped");
}

TEST(recovery_action_overrides_the_catalog)
{
	struct gpu_sample now = healthy();
	now.recovery_action = GPU_RECOVERY_GPU_RESET;
	struct gpu_finding f = judge_xid(1, 13, &now); /* job -> gpu */
	CHECK_INT(f.scope, GPU_SCOPE_GPU);
	CHECK_STR(f.code, "xid-13");
	CHECK_STR(f.reason, "XID 13 on GPU 1 (graphics engine exception); the driver asks for a "
	                    "GPU reset: the GPU needs a reset before it runs another job");
	f = judge_xid(1, 79, &now); /* node -> gpu: the driver knows better */
	CHECK_INT(f.scope, GPU_SCOPE_GPU);

	now.recovery_action = GPU_RECOVERY_NODE_REBOOT;
	CHECK_INT(judge_xid(1, 94, &now).scope, GPU_SCOPE_NODE);
	now.recovery_action = GPU_RECOVERY_DRAIN_P2P;
	f = judge_xid(1, 48, &now);
	CHECK_INT(f.scope, GPU_SCOPE_NODE);
	CHECK_CONTAINS(f.reason, "drain peer-to-peer traffic");
	now.recovery_action = GPU_RECOVERY_DRAIN_AND_RESET;
	CHECK_INT(judge_xid(1, 63, &now).scope, GPU_SCOPE_GPU);

	/* NONE and unsupported never lower the catalog's scope. */
	now.recovery_action = GPU_RECOVERY_NONE;
	CHECK_INT(judge_xid(1, 48, &now).scope, GPU_SCOPE_GPU);
	CHECK_INT(judge_xid(1, 79, &now).scope, GPU_SCOPE_NODE);
	now.recovery_action = -1;
	CHECK_INT(judge_xid(1, 48, &now).scope, GPU_SCOPE_GPU);
	/* A lost GPU's recovery field means nothing. */
	now.recovery_action = GPU_RECOVERY_GPU_RESET;
	now.lost = 1;
	CHECK_INT(judge_xid(1, 79, &now).scope, GPU_SCOPE_NODE);

	CHECK_INT(gpu_health_recovery_scope(GPU_RECOVERY_NONE), GPU_SCOPE_NONE);
	CHECK_INT(gpu_health_recovery_scope(-1), GPU_SCOPE_NONE);
	CHECK_INT(gpu_health_recovery_scope(GPU_RECOVERY_GPU_RESET), GPU_SCOPE_GPU);
	CHECK_INT(gpu_health_recovery_scope(GPU_RECOVERY_NODE_REBOOT), GPU_SCOPE_NODE);
	CHECK_INT(gpu_health_recovery_scope(GPU_RECOVERY_DRAIN_P2P), GPU_SCOPE_NODE);
	CHECK_INT(gpu_health_recovery_scope(GPU_RECOVERY_DRAIN_AND_RESET), GPU_SCOPE_GPU);
	CHECK_INT(gpu_health_recovery_scope(42), GPU_SCOPE_GPU);
}

TEST(xid_154_defers_to_the_recovery_action)
{
	CHECK_INT(judge_xid(0, 154, NULL).scope, GPU_SCOPE_WARN);
	struct gpu_sample now = healthy();
	now.recovery_action = GPU_RECOVERY_NODE_REBOOT;
	struct gpu_finding f = judge_xid(0, 154, &now);
	CHECK_INT(f.scope, GPU_SCOPE_NODE);
	CHECK_STR(f.reason, "XID 154 on GPU 0 (GPU recovery action changed); the driver asks for "
	                    "a node reboot: the node needs a reboot");
}

TEST(event_on_an_unknown_gpu)
{
	struct gpu_finding f = judge_xid(-1, 48, NULL);
	CHECK_INT(f.index, -1);
	CHECK_INT(f.scope, GPU_SCOPE_NODE);
	CHECK_STR(f.reason, "XID 48 on an unknown GPU (double-bit ECC error): no single GPU can be "
	                    "fenced, so the node is drained");
	f = judge_xid(-1, 13, NULL);
	CHECK_INT(f.index, -1);
	CHECK_INT(f.scope, GPU_SCOPE_JOB);
	struct gpu_event ev = {.index = 0, .xid = 13};
	CHECK_INT(gpu_health_judge_event(NULL, NULL, &f), ERR_INVALID);
	CHECK_INT(gpu_health_judge_event(&ev, NULL, NULL), ERR_INVALID);
}

static int judge(const struct gpu_sample *prev, const struct gpu_sample *cur,
                 struct gpu_finding *out)
{
	memset(out, 0, sizeof(*out) * GPU_HEALTH_MAX_FINDINGS);
	return gpu_health_judge_sample(3, prev, cur, NULL, out, GPU_HEALTH_MAX_FINDINGS);
}

TEST(healthy_samples_yield_nothing)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), b = healthy();
	CHECK_INT(judge(NULL, &a, f), 0);
	CHECK_INT(judge(&a, &b, f), 0);
	struct gpu_sample u = unsupported();
	CHECK_INT(judge(NULL, &u, f), 0);
	CHECK_INT(judge(&u, &u, f), 0);
	CHECK_INT(gpu_health_judge_sample(0, NULL, NULL, NULL, f, 1), ERR_INVALID);
	CHECK_INT(gpu_health_judge_sample(0, NULL, &a, NULL, NULL, 1), ERR_INVALID);
}

TEST(uncorrectable_ecc_is_edge_triggered)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), b = healthy();
	b.ecc_dbe_volatile = 2;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_INT(f[0].index, 3);
	CHECK_INT(f[0].scope, GPU_SCOPE_GPU);
	CHECK_STR(f[0].code, "ecc-uncorrectable");
	CHECK_STR(f[0].reason, "GPU 3 has 2 uncorrectable ECC errors since the driver loaded (was "
	                       "0): the GPU needs a reset before it runs another job");
	CHECK_INT(judge(&b, &b, f), 0); /* still 2: already reported */
	a = b;
	b.ecc_dbe_volatile = 3;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "ecc-uncorrectable");
	/* Aggregate (lifetime) counts alone never trigger. */
	a = healthy();
	b = healthy();
	b.ecc_dbe_aggregate = 7;
	CHECK_INT(judge(&a, &b, f), 0);
}

TEST(pending_remap_and_retirement_are_edge_triggered)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), b = healthy();
	b.remap_pending = 1;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "remap-pending");
	CHECK_INT(f[0].scope, GPU_SCOPE_GPU);
	CHECK_INT(judge(&b, &b, f), 0);
	CHECK_INT(judge(&b, &a, f), 0); /* cleared: nothing to say */
	CHECK_INT(judge(&a, &b, f), 1); /* and again */

	b = healthy();
	b.retired_pending = 1;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "retire-pending");
	CHECK_INT(f[0].scope, GPU_SCOPE_GPU);
	CHECK_INT(judge(&b, &b, f), 0);
}

TEST(remap_failure_quarantines_the_gpu)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), b = healthy();
	b.remap_failure = 1;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "remap-failure");
	CHECK_INT(f[0].scope, GPU_SCOPE_GPU);
	CHECK_CONTAINS(f[0].reason, "must be replaced");
	CHECK_INT(judge(&b, &b, f), 0);
	char why[160];
	CHECK_INT(gpu_health_is_clean(&b, why, sizeof(why)), 0);
	CHECK_CONTAINS(why, "replaced");
}

TEST(lost_gpu_drains_the_node_once)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), lost = healthy();
	lost.lost = 1;
	lost.remap_pending = 1; /* meaningless on a lost GPU */
	lost.recovery_action = GPU_RECOVERY_GPU_RESET;
	CHECK_INT(judge(&a, &lost, f), 1);
	CHECK_STR(f[0].code, "gpu-lost");
	CHECK_INT(f[0].scope, GPU_SCOPE_NODE);
	CHECK_STR(f[0].reason,
	          "GPU 3 has fallen off the bus (NVML: GPU is lost): the node needs a reboot");
	CHECK_INT(judge(&lost, &lost, f), 0);
	CHECK_INT(judge(NULL, &lost, f), 1);
	/* Back from lost: its last reading meant nothing, so what is pending now
	 * is reported as on a first sample. */
	struct gpu_sample back = healthy();
	back.remap_pending = 1;
	CHECK_INT(judge(&lost, &back, f), 1);
	CHECK_STR(f[0].code, "remap-pending");
}

TEST(recovery_action_appearing_and_changing)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), b = healthy();
	b.recovery_action = GPU_RECOVERY_GPU_RESET;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "recovery-reset");
	CHECK_INT(f[0].scope, GPU_SCOPE_GPU);
	CHECK_STR(f[0].reason,
	          "GPU 3: the driver asks for a GPU reset (recovery action 1); the GPU "
	          "needs a reset before it runs another job");
	CHECK_INT(judge(&b, &b, f), 0);
	a = b;
	b.recovery_action = GPU_RECOVERY_NODE_REBOOT;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "recovery-reboot");
	CHECK_INT(f[0].scope, GPU_SCOPE_NODE);
	a = healthy();
	b.recovery_action = GPU_RECOVERY_DRAIN_P2P;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "recovery-drain-p2p");
	CHECK_INT(f[0].scope, GPU_SCOPE_NODE);
	b.recovery_action = GPU_RECOVERY_DRAIN_AND_RESET;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "recovery-reset");
	CHECK_INT(f[0].scope, GPU_SCOPE_GPU);
	b.recovery_action = GPU_RECOVERY_NONE;
	CHECK_INT(judge(&a, &b, f), 0);
}

TEST(heat_and_hardware_slowdown_warn_once)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), b = healthy();
	b.temp_c = 84;
	CHECK_INT(judge(&a, &b, f), 0);
	b.temp_c = 85;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "thermal");
	CHECK_INT(f[0].scope, GPU_SCOPE_WARN);
	CHECK_STR(f[0].reason,
	          "GPU 3 is hot at 85 C (warning at 85 C): reported only; nothing is stopped");
	a = b;
	b.temp_c = 90;
	CHECK_INT(judge(&a, &b, f), 0); /* still hot */

	a = healthy();
	b = healthy();
	b.throttle_reasons = (int64_t)GPU_THROTTLE_HW_THERMAL;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "thermal");
	CHECK_CONTAINS(f[0].reason, "clocks throttled for heat");

	/* Running at the power cap is normal for a busy GPU. */
	b.throttle_reasons = (int64_t)GPU_THROTTLE_SW_POWER_CAP;
	CHECK_INT(judge(&a, &b, f), 0);
	b.throttle_reasons = (int64_t)(GPU_THROTTLE_SW_POWER_CAP | GPU_THROTTLE_HW_POWER_BRAKE);
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "power-throttle");
	CHECK_CONTAINS(f[0].reason, "external power brake");
	CHECK_INT(judge(&b, &b, f), 0);
	/* Unsupported readings never warn. */
	struct gpu_sample u = unsupported();
	CHECK_INT(judge(&u, &u, f), 0);
}

TEST(correctable_burst_needs_two_samples)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample a = healthy(), b = healthy();
	a.ecc_sbe_volatile = 10;
	b.ecc_sbe_volatile = 10 + GPU_HEALTH_SBE_BURST - 1;
	CHECK_INT(judge(&a, &b, f), 0);
	b.ecc_sbe_volatile = 10 + GPU_HEALTH_SBE_BURST;
	CHECK_INT(judge(&a, &b, f), 1);
	CHECK_STR(f[0].code, "ecc-correctable-burst");
	CHECK_INT(f[0].scope, GPU_SCOPE_WARN);
	CHECK_CONTAINS(f[0].reason, "corrected 100 ECC errors since the last sample");
	CHECK_INT(judge(NULL, &b, f), 0); /* a first sample has no interval */

	struct gpu_health_config cfg = {.temp_warn_c = 0, .sbe_burst = 5};
	b.ecc_sbe_volatile = 15;
	b.temp_c = 99;
	CHECK_INT(gpu_health_judge_sample(1, &a, &b, &cfg, f, GPU_HEALTH_MAX_FINDINGS), 1);
	CHECK_STR(f[0].code, "ecc-correctable-burst");
	struct gpu_health_config d;
	gpu_health_config_default(&d);
	CHECK_INT(d.temp_warn_c, GPU_HEALTH_TEMP_WARN_C);
	CHECK_INT(d.sbe_burst, GPU_HEALTH_SBE_BURST);
}

TEST(first_sample_reports_what_is_already_wrong)
{
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	struct gpu_sample s = healthy();
	s.ecc_dbe_volatile = 1;
	s.remap_pending = 1;
	s.recovery_action = GPU_RECOVERY_GPU_RESET;
	s.remap_failure = 1;
	s.retired_pending = 1;
	s.temp_c = 95;
	s.throttle_reasons = (int64_t)GPU_THROTTLE_HW_SLOWDOWN;
	CHECK_INT(judge(NULL, &s, f), 7);
	const char *want[] = {"remap-failure",  "ecc-uncorrectable", "remap-pending",
	                      "retire-pending", "recovery-reset",    "thermal",
	                      "power-throttle"};
	for (int i = 0; i < 7; i++) {
		CHECK_STR(f[i].code, want[i]);
		CHECK_INT(f[i].index, 3);
	}
	CHECK_STR(f[1].reason, "GPU 3 has 1 uncorrectable ECC errors since the driver loaded: the "
	                       "GPU needs a reset before it runs another job");
	/* Fewer slots: the most severe first, the count capped. */
	struct gpu_finding two[2];
	CHECK_INT(gpu_health_judge_sample(3, NULL, &s, NULL, two, 2), 2);
	CHECK_STR(two[0].code, "remap-failure");
	CHECK_STR(two[1].code, "ecc-uncorrectable");
	CHECK_INT(gpu_health_judge_sample(3, NULL, &s, NULL, NULL, 0), 0);
}

TEST(clean_check_after_reset)
{
	char why[160];
	struct gpu_sample s = healthy();
	CHECK_INT(gpu_health_is_clean(&s, why, sizeof(why)), 1);
	struct gpu_sample u = unsupported();
	CHECK_INT(gpu_health_is_clean(&u, NULL, 0), 1);
	s.ecc_dbe_aggregate = 9; /* lifetime counts survive resets */
	s.ecc_sbe_volatile = 4;
	CHECK_INT(gpu_health_is_clean(&s, why, sizeof(why)), 1);

	s = healthy();
	s.lost = 1;
	CHECK_INT(gpu_health_is_clean(&s, why, sizeof(why)), 0);
	CHECK_STR(why, "the GPU is lost (fallen off the bus)");
	s = healthy();
	s.remap_pending = 1;
	CHECK_INT(gpu_health_is_clean(&s, why, sizeof(why)), 0);
	CHECK_STR(why, "a memory row remap is still pending");
	s = healthy();
	s.retired_pending = 1;
	CHECK_INT(gpu_health_is_clean(&s, why, sizeof(why)), 0);
	CHECK_STR(why, "a page retirement is still pending");
	s = healthy();
	s.ecc_dbe_volatile = 2;
	CHECK_INT(gpu_health_is_clean(&s, why, sizeof(why)), 0);
	CHECK_STR(why, "2 uncorrectable ECC errors since the reset");
	s = healthy();
	s.recovery_action = GPU_RECOVERY_NODE_REBOOT;
	CHECK_INT(gpu_health_is_clean(&s, why, sizeof(why)), 0);
	CHECK_STR(why, "the driver asks for a node reboot (recovery action 2)");
	s = healthy();
	s.remap_failure = 1;
	CHECK_INT(gpu_health_is_clean(&s, NULL, 0), 0);
	CHECK_INT(gpu_health_is_clean(NULL, why, sizeof(why)), 0);
	CHECK_STR(why, "no reading");
}

TEST_MAIN()
