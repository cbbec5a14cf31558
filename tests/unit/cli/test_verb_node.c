/* The node verbs' renderers and the fault body: `anvil nodes` with GPU
 * health, `anvil nodes show NODE` (GPU table, topology matrix, RDMA
 * ports), `anvil node check` and `anvil node fault`. */
#include <jansson.h>
#include <stdlib.h>
#include <time.h>

#include "../test.h"
#include "base/err.h"
#include "cli/verb.h"
#include "cli/verb_node.h"

static json_t *load(const char *text)
{
	json_error_t je;
	json_t *v = json_loads(text, 0, &je);
	if (!v)
		FAIL_AT("bad test JSON: %s (line %d column %d)", je.text, je.line, je.column);
	return v;
}

/* A 4-GPU node as GET /v1/nodes/NAME answers: GPU 2 quarantined, GPUs 0-1
 * on NVLink and busy with job 42, GPUs 2-3 behind one PCIe switch on the
 * other NUMA node, one active InfiniBand port near GPUs 0-1, one down. */
static const char node_json[] =
        "{\"id\": 3, \"name\": \"gpu-7\", \"hostname\": \"gpu-7.dc1\", \"address\": \"10.0.0.7\","
        " \"agent_url\": \"http://10.0.0.7:7071\", \"state\": \"ready\", \"cpus\": 224,"
        " \"backend\": \"sim\", \"last_seen_ms_ago\": 1500,"
        " \"gpus_total\": 4, \"gpus_allocated\": 2, \"gpus_unhealthy\": 1,"
        " \"reason\": \"\", \"drained_by_fault\": false, \"fault\": null,"
        " \"faults\": {\"warning\": 2, \"job\": 1, \"gpu\": 1, \"node\": 0},"
        " \"labels\": {\"rack\": \"r1\", \"switch\": \"s1\"}, \"pool\": null,"
        " \"driver_version\": \"sim-550.54.15\", \"cuda_version\": \"12.4\", \"agent_version\": "
        "\"0.1.0\","
        " \"gpus\": ["
        "  {\"index\": 0, \"uuid\": \"GPU-a0\", \"model\": \"NVIDIA H200\","
        "   \"memory_bytes\": 150754820096, \"job_id\": 42, \"health\": \"healthy\","
        "   \"pci_bus_id\": \"00000000:18:00.0\", \"numa_node\": 0,"
        "   \"cpu_affinity\": \"0-55,112-167\", \"nvlinks\": 1,"
        "   \"links\": [\"SELF\", \"NV\", \"SYS\", \"SYS\"]},"
        "  {\"index\": 1, \"uuid\": \"GPU-a1\", \"model\": \"NVIDIA H200\","
        "   \"memory_bytes\": 150754820096, \"job_id\": 42, \"health\": \"healthy\","
        "   \"pci_bus_id\": \"00000000:2a:00.0\", \"numa_node\": 0,"
        "   \"cpu_affinity\": \"0-55,112-167\", \"nvlinks\": 1,"
        "   \"links\": [\"NV\", \"SELF\", \"SYS\", \"SYS\"]},"
        "  {\"index\": 2, \"uuid\": \"GPU-a2\", \"model\": \"NVIDIA H200\","
        "   \"memory_bytes\": 150754820096, \"job_id\": null, \"health\": \"quarantined\","
        "   \"health_reason\": \"XID 48 (double-bit ECC error): reset the GPU\","
        "   \"pci_bus_id\": \"00000000:9a:00.0\", \"numa_node\": 1,"
        "   \"cpu_affinity\": \"56-111,168-223\", \"nvlinks\": 0,"
        "   \"links\": [\"SYS\", \"SYS\", \"SELF\", \"PIX\"]},"
        "  {\"index\": 3, \"uuid\": \"GPU-a3\", \"model\": \"NVIDIA H200\","
        "   \"memory_bytes\": 85899345920, \"job_id\": null, \"health\": \"healthy\","
        "   \"pci_bus_id\": \"00000000:ab:00.0\", \"numa_node\": 1,"
        "   \"cpu_affinity\": \"56-111,168-223\", \"nvlinks\": 0,"
        "   \"links\": [\"SYS\", \"SYS\", \"PIX\", \"SELF\"]}],"
        " \"rdma\": ["
        "  {\"dev\": \"mlx5_0\", \"port\": 1, \"state\": \"ACTIVE\", \"phys_state\": \"LinkUp\","
        "   \"rate\": \"400 Gb/sec (4X NDR)\", \"link_layer\": \"InfiniBand\", \"netdev\": \"ib0\","
        "   \"numa_node\": 0, \"pci_bus_id\": \"0000:19:00.0\", \"gpus_near\": [0, 1],"
        "   \"near_by\": \"switch\", \"gpus_numa\": [0, 1]},"
        "  {\"dev\": \"mlx5_1\", \"port\": 1, \"state\": \"DOWN\", \"phys_state\": \"Disabled\","
        "   \"rate\": \"\", \"link_layer\": \"Ethernet\", \"netdev\": \"\", \"numa_node\": -1,"
        "   \"pci_bus_id\": \"\", \"gpus_near\": [], \"near_by\": \"none\", \"gpus_numa\": []}]}";

TEST(nodes_table_shows_gpu_health_and_reason)
{
	char text[8192];
	snprintf(text, sizeof(text),
	         "[%s,"
	         " {\"id\": 4, \"name\": \"gpu-8\", \"address\": \"10.0.0.8\", \"state\": "
	         "\"draining\", \"drained_by_fault\": true, \"last_seen_ms_ago\": 900,"
	         "  \"gpus_total\": 8, \"gpus_allocated\": 1, \"gpus_unhealthy\": 1,"
	         "  \"reason\": \"GPU 5 has fallen off the bus (XID 79)\","
	         "  \"fault\": \"GPU 5 has fallen off the bus (XID 79)\","
	         "  \"gpus\": [{\"model\": \"NVIDIA H200\", \"health\": \"lost\"}]},"
	         " {\"id\": 5, \"name\": \"gpu-9\", \"address\": \"10.0.0.9\", \"state\": "
	         "\"cordoned\", \"last_seen_ms_ago\": 10, \"gpus_total\": 8, \"gpus_allocated\": 0,"
	         "  \"gpus_unhealthy\": 0, \"reason\": \"disk swap\", \"fault\": \"NVLink error\","
	         "  \"gpus\": [{\"model\": \"NVIDIA H200\", \"health\": \"healthy\"}]}]",
	         node_json);
	json_t *nodes = load(text);
	struct buf out;
	buf_init(&out);
	verb_nodes_render(nodes, 0, &out);
	CHECK_STR(
	        out.data,
	        "ID  NAME   STATE       GPUS  ALLOC  MODEL        ADDRESS   LAST SEEN  REASON\n"
	        " 3  gpu-7  ready     3/4 ok    2/4  NVIDIA H200  10.0.0.7  1s ago     GPU 2 "
	        "quarantined: XID 48 (double-bit ECC error): reset the GPU\n"
	        " 4  gpu-8  draining  7/8 ok    1/8  NVIDIA H200  10.0.0.8  900ms ago  GPU 5 has "
	        "fallen off the bus (XID 79)\n"
	        " 5  gpu-9  cordoned       8    0/8  NVIDIA H200  10.0.0.9  10ms ago   disk swap; "
	        "fault: NVLink error\n");
	json_decref(nodes);
	buf_cleanup(&out);
}

TEST(node_show_gpus_topology_and_rdma)
{
	json_t *node = load(node_json);
	struct buf out;
	buf_init(&out);
	verb_node_show_render(node, 0, &out);
	CHECK_STR(out.data,
	          "node 3: gpu-7\n"
	          "  state       ready\n"
	          "  reason      -\n"
	          "  fault       -\n"
	          "  faults      warning 2, job 1, gpu 1, node 0\n"
	          "  gpus        4 total, 2 allocated, 1 unhealthy\n"
	          "  cpus        224 (at most 224 CPU-only ranks at once)\n"
	          "  backend     sim (simulated GPUs, not hardware)\n"
	          "  driver      sim-550.54.15\n"
	          "  cuda        12.4\n"
	          "  agent       0.1.0\n"
	          "  labels      rack=r1 switch=s1\n"
	          "  pool        -\n"
	          "  profile     -\n"
	          "  hostname    gpu-7.dc1\n"
	          "  address     10.0.0.7\n"
	          "  metrics     http://10.0.0.7:7071/metrics\n"
	          "  last seen   1s ago\n"
	          "\n"
	          "GPU  MODEL           MEMORY  JOB  NUMA  NVLINKS  BUS ID            HEALTH\n"
	          "  0  NVIDIA H200  140.4 GiB   42     0        1  00000000:18:00.0  healthy\n"
	          "  1  NVIDIA H200  140.4 GiB   42     0        1  00000000:2a:00.0  healthy\n"
	          "  2  NVIDIA H200  140.4 GiB    -     1        0  00000000:9a:00.0  quarantined: "
	          "XID 48 (double-bit ECC error): reset the GPU\n"
	          "  3  NVIDIA H200     80 GiB    -     1        0  00000000:ab:00.0  healthy\n"
	          "\n"
	          "topology:\n"
	          "      GPU0  GPU1  GPU2  GPU3  CPU Affinity    NUMA Affinity\n"
	          "GPU0  X     NV    SYS   SYS   0-55,112-167    0\n"
	          "GPU1  NV    X     SYS   SYS   0-55,112-167    0\n"
	          "GPU2  SYS   SYS   X     PIX   56-111,168-223  1\n"
	          "GPU3  SYS   SYS   PIX   X     56-111,168-223  1\n"
	          "\n"
	          "X = self, NV = NVLink, PIX = one PCIe switch, PXB = several PCIe switches,\n"
	          "PHB = one PCIe host bridge, NODE = one NUMA node, SYS = across NUMA nodes\n"
	          "\n"
	          "RDMA ports:\n"
	          "PORT      STATE   RATE                 LAYER       NETDEV  NUMA  NEAR GPUS\n"
	          "mlx5_0:1  ACTIVE  400 Gb/sec (4X NDR)  InfiniBand  ib0        0  0,1 (switch)\n"
	          "mlx5_1:1  DOWN    -                    Ethernet    -          -  -\n");
	json_decref(node);
	buf_cleanup(&out);
}

TEST(node_show_without_gpus_or_inventory)
{
	/* a node from an agent before the GPU layer: no links, no RDMA */
	json_t *node = load("{\"id\": 1, \"name\": \"cpu\\u001b[2J\", \"state\": \"drained\","
	                    " \"drained_by_fault\": true, \"reason\": \"GPU 0 lost\","
	                    " \"fault\": \"GPU 0 lost\", \"gpus\": []}");
	struct buf out;
	buf_init(&out);
	verb_node_show_render(node, 0, &out);
	CHECK_CONTAINS(out.data, "node 1: cpu?[2J\n");
	CHECK_CONTAINS(out.data, "  state       drained (by a fault)\n");
	CHECK_CONTAINS(out.data, "  fault       GPU 0 lost\n");
	CHECK_CONTAINS(out.data, "  faults      warning 0, job 0, gpu 0, node 0\n");
	CHECK_CONTAINS(out.data, "\nno GPUs\n");
	CHECK_CONTAINS(out.data, "  metrics     -\n"); /* no agent URL reported */
	CHECK(!strstr(out.data, "topology"));
	CHECK(!strstr(out.data, "RDMA"));
	json_decref(node);
	buf_cleanup(&out);
}

TEST(node_check_table_and_verdict)
{
	json_t *r = load(
	        "{\"ok\": false, \"backend\": \"sim\", \"summary\": \"5 checks, 1 failed\","
	        " \"checks\": ["
	        "  {\"name\": \"gpu_count\", \"ok\": true, \"detail\": \"2 GPUs (expected 2)\"},"
	        "  {\"name\": \"gpu_model\", \"ok\": true, \"detail\": \"every GPU is "
	        "NVIDIA H200\"},"
	        "  {\"name\": \"gpu0.health\", \"ok\": true, \"detail\": \"clean "
	        "(temperature 35 C)\"},"
	        "  {\"name\": \"gpu1.health\", \"ok\": false, \"detail\": \"quarantined: "
	        "XID 48\"},"
	        "  {\"name\": \"compute\", \"ok\": true, \"detail\": \"skipped: no CUDA "
	        "check program\"}]}");
	struct buf out;
	buf_init(&out);
	verb_node_check_render(r, 0, &out);
	CHECK_STR(out.data, "NAME         OK      DETAIL\n"
	                    "gpu_count    ok      2 GPUs (expected 2)\n"
	                    "gpu_model    ok      every GPU is NVIDIA H200\n"
	                    "gpu0.health  ok      clean (temperature 35 C)\n"
	                    "gpu1.health  FAILED  quarantined: XID 48\n"
	                    "compute      ok      skipped: no CUDA check program\n"
	                    "check FAILED: 5 checks, 1 failed (backend sim)\n");
	json_object_set_new(r, "ok", json_true());
	buf_reset(&out);
	verb_node_check_render(r, 0, &out);
	CHECK_CONTAINS(out.data, "check passed: 5 checks, 1 failed (backend sim)\n");
	json_decref(r);
	buf_cleanup(&out);
}

/* A reset node is lost until its agent registers again; its row says so,
 * before the operator's reason. */
TEST(nodes_table_says_a_reset_node_waits_for_its_agent)
{
	json_t *nodes = load("[{\"id\": 1, \"name\": \"n1\", \"address\": \"10.0.0.1\","
	                     " \"state\": \"lost\", \"reset\": true, \"reason\": \"rack 4\","
	                     " \"last_seen_ms_ago\": 10, \"gpus_total\": 0, \"gpus\": []}]");
	struct buf out;
	buf_init(&out);
	verb_nodes_render(nodes, 0, &out);
	CHECK_CONTAINS(out.data, "lost");
	CHECK_CONTAINS(out.data,
	               "reset: waiting for its agent to register with the join token; rack 4\n");
	json_decref(nodes);
	buf_cleanup(&out);
}

/* `anvil node token`: the token alone on its first line (for scripts),
 * then when it expires, that it expired (and what to do), or never. */
TEST(node_token_render_says_when_it_expires)
{
	setenv("TZ", "UTC", 1);
	tzset();
	json_t *t = load("{\"token\": \"abc123\", \"created_ms\": 0, \"expires_ms\": 86400000,"
	                 " \"expired\": false}");
	struct buf out;
	buf_init(&out);
	verb_node_token_render(t, 86400000 - 3600000, &out);
	CHECK_STR(out.data, "abc123\nexpires at 1970-01-02 00:00:00 (in 1h00m)\n");
	buf_reset(&out);
	verb_node_token_render(t, 86400000, &out);
	CHECK_STR(out.data, "abc123\nexpired at 1970-01-02 00:00:00: `anvil node token --rotate` "
	                    "makes a new one\n");
	json_object_set_new(t, "expires_ms", json_null());
	buf_reset(&out);
	verb_node_token_render(t, 5, &out);
	CHECK_STR(out.data, "abc123\nnever expires\n");
	json_decref(t);
	buf_cleanup(&out);
}

static char *dump(const json_t *o)
{
	return json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

TEST(fault_body_numbers_are_integers)
{
	char err[256];
	json_t *body = NULL;
	char *kv[] = {"xid=79", "recovery_action=2"};
	CHECK_INT(verb_node_fault_body(2, "xid", kv, 2, &body, err, sizeof(err)), 0);
	char *s = dump(body);
	CHECK_STR(s, "{\"gpu\":2,\"kind\":\"xid\",\"xid\":79,\"recovery_action\":2}");
	free(s);
	json_decref(body);
	char *temp[] = {"celsius=-5"};
	CHECK_INT(verb_node_fault_body(0, "temperature", temp, 1, &body, err, sizeof(err)), 0);
	s = dump(body);
	CHECK_STR(s, "{\"gpu\":0,\"kind\":\"temperature\",\"celsius\":-5}");
	free(s);
	json_decref(body);
	CHECK_INT(verb_node_fault_body(1, "lost", NULL, 0, &body, err, sizeof(err)), 0);
	s = dump(body);
	CHECK_STR(s, "{\"gpu\":1,\"kind\":\"lost\"}");
	free(s);
	json_decref(body);
	/* not a number: sent as text, for the agent to name the field */
	char *word[] = {"watts=lots"};
	CHECK_INT(verb_node_fault_body(1, "power", word, 1, &body, err, sizeof(err)), 0);
	s = dump(body);
	CHECK_STR(s, "{\"gpu\":1,\"kind\":\"power\",\"watts\":\"lots\"}");
	free(s);
	json_decref(body);
}

TEST(fault_body_errors_name_the_word)
{
	char err[256];
	json_t *body = (json_t *)1; /* untouched on failure */
	char *noeq[] = {"xid79"};
	CHECK_INT(verb_node_fault_body(0, "xid", noeq, 1, &body, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "\"xid79\" is not KEY=VALUE (e.g. xid=79)");
	char *empty[] = {"xid="};
	CHECK_INT(verb_node_fault_body(0, "xid", empty, 1, &body, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "\"xid=\" is not KEY=VALUE");
	char *twice[] = {"xid=79", "xid=48"};
	CHECK_INT(verb_node_fault_body(0, "xid", twice, 2, &body, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "\"xid=48\": xid is given twice");
	char *gpu[] = {"gpu=3"};
	CHECK_INT(verb_node_fault_body(0, "xid", gpu, 1, &body, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "give the GPU with --gpu");
	CHECK_INT(verb_node_fault_body(0, "xid=79", NULL, 0, &body, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "KIND: \"xid=79\" is not a fault kind");
	CHECK(body == (json_t *)1);
}

TEST(node_show_profile_and_its_steps)
{
	json_t *node = load(
	        "{\"id\": 1, \"name\": \"h-1\", \"state\": \"held\", \"reason\": \"profile h200 "
	        "failed "
	        "at step 'mount /mnt/nvme': wrong fs type\", \"gpus\": [],"
	        " \"profile\": {\"name\": \"h200\", \"hash\": \"0123456789abcdef\"},"
	        " \"profile_checked\": null,"
	        " \"profile_status\": {\"hash\": \"0123456789abcdef\", \"state\": \"failed\","
	        " \"time_ms\": 1, \"steps\": [{\"name\": \"sysctl vm.swappiness\", \"status\": "
	        "\"ok\"},"
	        " {\"name\": \"mount /mnt/nvme\", \"status\": \"failed\", \"detail\": \"wrong fs "
	        "type\"}]}}");
	struct buf out;
	buf_init(&out);
	verb_node_show_render(node, 0, &out);
	CHECK_CONTAINS(out.data, "  state       held\n");
	CHECK_CONTAINS(out.data, "  profile     h200 (0123456789ab): failed\n");
	CHECK_CONTAINS(out.data, "profile steps:\n"
	                         "STEP                  STATUS  DETAIL\n"
	                         "sysctl vm.swappiness  ok      -\n"
	                         "mount /mnt/nvme       failed  wrong fs type\n");
	buf_cleanup(&out);
	json_decref(node);
}

TEST_MAIN()
