/* test_gpuwatch.c - the agent's GPU watcher over simulated GPUs: the
 * metrics carry the node name, a quarantined GPU stays out of service
 * while a rank uses it and until its reset is done, and idle time. */
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "agent/gpuwatch.h"
#include "base/buf.h"
#include "base/jv.h"
#include "base/util.h"
#include "gpu/gpu.h"
#include "gpu/sim.h"
#include "proto/wire.h"

struct fixture {
	char dir[64];
	struct gpu_backend *b;
	struct gpuwatch *w;
};

/* Two simulated H200s whose reset takes reset_ms, watched every 100 ms by
 * a watcher that calls its node "node-7". */
static void start(struct fixture *f, int64_t reset_ms)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/anvil-gpuwatch-XXXXXX");
	CHECK(mkdtemp(f->dir) != NULL);
	char path[128], spec[160], err[512] = "";
	snprintf(path, sizeof(path), "%s/gpus.json", f->dir);
	CHECK_INT(gpu_sim_write_file(path, 2, "H200", 0), 0);
	struct buf text;
	buf_init(&text);
	CHECK_INT(read_file(path, 1 << 20, &text), 0);
	json_t *o = json_loadb(text.data, text.len, 0, NULL);
	CHECK(o != NULL);
	json_object_set_new(o, "reset_ms", json_integer(reset_ms));
	char *out = jv_dump(o);
	CHECK_INT(write_file_atomic(path, out, strlen(out), 0644), 0);
	free(out);
	json_decref(o);
	buf_cleanup(&text);
	snprintf(spec, sizeof(spec), "sim:%s", path);
	if (gpu_open(spec, &f->b, err, sizeof(err)) != 0)
		FAIL_AT("gpu_open: %s", err);
	struct gpuwatch_config cfg = {
	        .gpus = f->b, .work_dir = f->dir, .node_name = "node-7", .sample_ms = 100};
	CHECK_INT(gpuwatch_start(&cfg, &f->w), 0);
}

static void stop(struct fixture *f)
{
	gpuwatch_stop(f->w);
	gpu_close(f->b);
	rm_rf(f->dir);
}

/* GPU i's state in the watcher's report. */
static const char *state_of(struct fixture *f, int i, char *out, size_t n)
{
	json_t *r = gpuwatch_report(f->w);
	snprintf(out, n, "%s",
	         jv_str(json_array_get(json_object_get(r, "gpus"), (size_t)i), "state", "?"));
	json_decref(r);
	return out;
}

/* Polls every 10 ms until GPU i is in state want; returns when it was seen. */
static int64_t wait_state(struct fixture *f, int i, const char *want, int64_t timeout_ms)
{
	char s[32];
	int64_t end = now_ms() + timeout_ms;
	while (strcmp(state_of(f, i, s, sizeof(s)), want) != 0) {
		if (now_ms() > end)
			FAIL_AT("GPU %d: still %s after %lld ms, expected %s", i, s,
			        (long long)timeout_ms, want);
		sleep_ms(10);
	}
	return now_ms();
}

static void inject(struct fixture *f, const char *text)
{
	char err[256] = "";
	json_t *fault = json_loads(text, 0, NULL);
	CHECK(fault != NULL);
	if (gpuwatch_inject(f->w, fault, err, sizeof(err)) != 0)
		FAIL_AT("inject %s: %s", text, err);
	json_decref(fault);
}

static void metrics(struct fixture *f, struct buf *out)
{
	buf_reset(out);
	gpuwatch_metrics(f->w, out);
	CHECK(out->len > 0);
}

TEST(metrics_carry_the_node_name_as_hostname)
{
	struct fixture f;
	start(&f, 0);
	struct buf m;
	buf_init(&m);
	metrics(&f, &m);
	/* the anvil node name, what `anvil nodes` lists: not the machine's hostname */
	CHECK_CONTAINS(m.data, "device=\"nvidia0\",Hostname=\"node-7\",anvil_backend=\"sim\","
	                       "state=\"healthy\"} 1\n");
	CHECK_CONTAINS(m.data, "device=\"nvidia1\",Hostname=\"node-7\",anvil_backend=\"sim\","
	                       "state=\"healthy\"} 1\n");
	buf_cleanup(&m);
	stop(&f);
}

TEST(quarantine_lasts_until_the_gpu_is_idle_and_its_reset_is_done)
{
	struct fixture f;
	start(&f, 600);
	struct gpuwatch_use use = {.gpus = 1u << 0, .job_id = 42, .job_name = "train"};
	gpuwatch_set_usage(f.w, &use, 1);
	inject(&f, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":48}");
	wait_state(&f, 0, "quarantined", 5000);
	/* no reset while a rank uses the GPU */
	sleep_ms(800);
	char s[32];
	CHECK_STR(state_of(&f, 0, s, sizeof(s)), "quarantined");
	int64_t idle = now_ms();
	gpuwatch_set_usage(f.w, NULL, 0);
	/* idle now: the reset runs, and the GPU is out of service until it is
	 * done; the metrics say so meanwhile */
	sleep_ms(300);
	CHECK_STR(state_of(&f, 0, s, sizeof(s)), "quarantined");
	struct buf m;
	buf_init(&m);
	metrics(&f, &m);
	CHECK_CONTAINS(m.data, "device=\"nvidia0\",Hostname=\"node-7\",anvil_backend=\"sim\","
	                       "state=\"quarantined\"} 1\n");
	int64_t back = wait_state(&f, 0, "healthy", 10000);
	CHECK(back - idle >= 600);
	metrics(&f, &m);
	CHECK_CONTAINS(m.data, "device=\"nvidia0\",Hostname=\"node-7\",anvil_backend=\"sim\","
	                       "state=\"healthy\"} 1\n");
	/* the other GPU was never touched */
	CHECK_STR(state_of(&f, 1, s, sizeof(s)), "healthy");
	buf_cleanup(&m);
	stop(&f);
}

TEST(reset_fails_and_the_gpu_stays_out_when_the_check_fails)
{
	struct fixture f;
	start(&f, 100);
	/* a failed row remap survives a reset: the clean check never passes */
	inject(&f, "{\"gpu\":1,\"kind\":\"remap\",\"failure\":1}");
	wait_state(&f, 1, "quarantined", 5000);
	sleep_ms(600); /* several resets' worth */
	char s[32];
	CHECK_STR(state_of(&f, 1, s, sizeof(s)), "quarantined");
	CHECK_STR(state_of(&f, 0, s, sizeof(s)), "healthy");
	stop(&f);
}

/* The report is what the server checks (proto/wire.h): the health record,
 * each GPU state, each finding and the node fault, once there is one. */
static void check_report(json_t *r)
{
	char err[256] = "";
	int rc = wire_check(r, &wire_health, err, sizeof(err));
	if (rc == 0)
		rc = wire_check_each(r, "gpus", &wire_gpu_health, err, sizeof(err));
	if (rc == 0)
		rc = wire_check_each(r, "findings", &wire_finding, err, sizeof(err));
	if (rc == 0 && json_is_object(json_object_get(r, "node")))
		rc = wire_check(json_object_get(r, "node"), &wire_node_fault, err, sizeof(err));
	if (rc)
		FAIL_AT("%s", err);
}

TEST(report_passes_the_wire_tables)
{
	struct fixture f;
	start(&f, 600);
	json_t *r = gpuwatch_report(f.w);
	check_report(r);
	CHECK(json_is_null(json_object_get(r, "node")));
	json_decref(r);
	struct gpuwatch_use use = {.gpus = 1u << 0, .job_id = 42, .job_name = "train"};
	gpuwatch_set_usage(f.w, &use, 1); /* no reset: GPU 0 stays quarantined */
	inject(&f, "{\"gpu\":0,\"kind\":\"xid\",\"xid\":48}");
	inject(&f, "{\"gpu\":1,\"kind\":\"xid\",\"xid\":79}");
	wait_state(&f, 0, "quarantined", 5000);
	int64_t end = now_ms() + 5000;
	for (;;) {
		r = gpuwatch_report(f.w);
		if (json_is_object(json_object_get(r, "node")) &&
		    json_array_size(json_object_get(r, "findings")) >= 2)
			break;
		json_decref(r);
		if (now_ms() > end)
			FAIL_AT("no node fault and two findings after 5 s");
		sleep_ms(10);
	}
	check_report(r);
	const json_t *g0 = json_array_get(json_object_get(r, "gpus"), 0);
	CHECK(*jv_str(g0, "code", "") && *jv_str(g0, "reason", "") &&
	      jv_int(g0, "since_ms", 0) > 0);
	json_decref(r);
	stop(&f);
}

/* Polls every 10 ms until pred(idle time of mask) holds; returns it. */
static int64_t wait_idle(struct fixture *f, uint64_t mask, int64_t lo, int64_t hi,
                         int64_t timeout_ms)
{
	int64_t end = now_ms() + timeout_ms, idle;
	while ((idle = gpuwatch_idle_ms(f->w, mask)) < lo || idle > hi) {
		if (now_ms() > end)
			FAIL_AT("idle time of mask %llx: %lld ms after %lld ms, expected "
			        "%lld..%lld",
			        (unsigned long long)mask, (long long)idle, (long long)timeout_ms,
			        (long long)lo, (long long)hi);
		sleep_ms(10);
	}
	return idle;
}

static int readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1;
}

TEST(idle_time_counts_from_the_first_idle_sample_and_busy_wakes_the_agent)
{
	struct fixture f;
	start(&f, 100);
	CHECK_INT(gpuwatch_idle_ms(f.w, 0), -1);       /* no GPU */
	CHECK_INT(gpuwatch_idle_ms(f.w, 1u << 5), -1); /* not on this node */
	wait_idle(&f, 0x3, 300, INT64_MAX, 5000);      /* sim GPUs start at 0% */

	/* a rank's GPU at work: 0 at once (the injection samples), and the
	 * agent's loop is woken so that its next sync says so */
	struct gpuwatch_use use = {.gpus = 1u << 0, .job_id = 42, .job_name = "shell"};
	gpuwatch_set_usage(f.w, &use, 1);
	json_decref(gpuwatch_report(f.w)); /* clears the fd */
	CHECK(!readable(gpuwatch_fd(f.w)));
	inject(&f, "{\"gpu\":0,\"kind\":\"load\",\"util_pct\":90}");
	wait_idle(&f, 1u << 0, 0, 0, 2000);
	CHECK(readable(gpuwatch_fd(f.w)));
	CHECK_INT(gpuwatch_idle_ms(f.w, 0x3), 0); /* every GPU of the mask must be idle */
	CHECK(gpuwatch_idle_ms(f.w, 1u << 1) >= 300);

	/* under 5% is idle: counted from that sample on */
	inject(&f, "{\"gpu\":0,\"kind\":\"load\",\"util_pct\":4}");
	wait_idle(&f, 1u << 0, 1, 1000, 2000);
	sleep_ms(300);
	int64_t idle = gpuwatch_idle_ms(f.w, 1u << 0);
	CHECK(idle >= 300 && idle < 2000);

	/* a lost GPU's utilization is not known */
	inject(&f, "{\"gpu\":1,\"kind\":\"lost\"}");
	wait_idle(&f, 1u << 1, -1, -1, 2000);
	CHECK_INT(gpuwatch_idle_ms(f.w, 0x3), -1);
	stop(&f);
}

TEST_MAIN()
