/* test_gpuwatch.c - the agent's GPU watcher over simulated GPUs: the
 * metrics carry the node name. */
#include <stdio.h>
#include <stdlib.h>

#include "../test.h"
#include "agent/gpuwatch.h"
#include "base/buf.h"
#include "base/util.h"
#include "gpu/gpu.h"
#include "gpu/sim.h"

struct fixture {
	char dir[64];
	struct gpu_backend *b;
	struct gpuwatch *w;
};

/* Two simulated H200s, watched every 100 ms by a watcher that calls its
 * node "node-7". */
static void start(struct fixture *f)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/anvil-gpuwatch-XXXXXX");
	CHECK(mkdtemp(f->dir) != NULL);
	char path[128], spec[160], err[512] = "";
	snprintf(path, sizeof(path), "%s/gpus.json", f->dir);
	CHECK_INT(gpu_sim_write_file(path, 2, "H200", 0), 0);
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

static void metrics(struct fixture *f, struct buf *out)
{
	buf_reset(out);
	gpuwatch_metrics(f->w, out);
	CHECK(out->len > 0);
}

TEST(metrics_carry_the_node_name_as_hostname)
{
	struct fixture f;
	start(&f);
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

TEST_MAIN()
