/* verb_nodes.c - `anvil nodes`: the cluster's nodes with their GPUs' health
 * (GET /v1/nodes), and `anvil nodes show NODE`: one node with every GPU, the
 * topology matrix and the RDMA ports (GET /v1/nodes/NAME). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"
#include "cli/verb_node.h"

/* The GPU models of a node, each once: "NVIDIA H200" or "A100, H200". */
static void models(const json_t *gpus, struct buf *out)
{
	size_t i, j;
	const json_t *g;
	json_array_foreach (gpus, i, g) {
		const char *m = verb_str(g, "model");
		int seen = 0;
		for (j = 0; j < i && !seen; j++)
			seen = strcmp(verb_str(json_array_get(gpus, j), "model"), m) == 0;
		if (seen || !*m)
			continue;
		if (out->len)
			buf_adds(out, ", ");
		buf_adds(out, m);
	}
}

/* "8" when every GPU is healthy, "7/8 ok" when some are not. */
static void gpu_health_cell(const json_t *node, char *out, size_t n)
{
	long long total = verb_int(node, "gpus_total", 0),
	          bad = verb_int(node, "gpus_unhealthy", 0);
	if (bad > 0)
		snprintf(out, n, "%lld/%lld ok", total - bad, total);
	else
		snprintf(out, n, "%lld", total);
}

/* Why the node is as it is: a reset waiting for its agent, the admin
 * reason, the fault its agent reports now, or else its first unhealthy
 * GPU. */
static void reason_cell(const json_t *node, struct buf *out)
{
	const char *reason = verb_str(node, "reason"), *fault = verb_str(node, "fault");
	if (json_is_true(json_object_get(node, "reset")))
		buf_adds(out, "reset: waiting for its agent to register with the join token");
	if (*reason)
		buf_printf(out, "%s%s", out->len ? "; " : "", reason);
	if (*fault && strcmp(fault, reason) != 0)
		buf_printf(out, "%sfault: %s", *reason ? "; " : "", fault);
	if (out->len)
		return;
	size_t i;
	const json_t *g;
	json_array_foreach (json_object_get(node, "gpus"), i, g) {
		const char *health = verb_str(g, "health");
		if (!*health || strcmp(health, "healthy") == 0)
			continue;
		buf_printf(out, "GPU %lld %s", (long long)verb_int(g, "index", -1), health);
		if (*verb_str(g, "health_reason"))
			buf_printf(out, ": %s", verb_str(g, "health_reason"));
		return;
	}
}

static void add_row(struct clitable *t, const json_t *node)
{
	char seen[32], health[48];
	struct buf model, why;
	buf_init(&model);
	buf_init(&why);
	models(json_object_get(node, "gpus"), &model);
	reason_cell(node, &why);
	gpu_health_cell(node, health, sizeof(health));
	clitable_duration(seen, sizeof(seen), verb_int(node, "last_seen_ms_ago", -1));
	clitable_add(t, "%lld", (long long)verb_int(node, "id", -1));
	clitable_add(t, "%s", verb_str(node, "name"));
	clitable_add(t, "%s", verb_str(node, "state"));
	clitable_add(t, "%s", health);
	clitable_add(t, "%lld/%lld", (long long)verb_int(node, "gpus_allocated", 0),
	             (long long)verb_int(node, "gpus_total", 0));
	clitable_add(t, "%s", model.len ? model.data : "");
	clitable_add(t, "%s", verb_str(node, "address"));
	clitable_add(t, "%s%s", seen, strcmp(seen, "-") ? " ago" : "");
	clitable_add(t, "%s", why.len ? why.data : "");
	buf_cleanup(&model);
	buf_cleanup(&why);
}

void verb_nodes_render(const json_t *nodes, int64_t now_ms, struct buf *out)
{
	(void)now_ms; /* the server reports how long ago each node synced */
	if (json_array_size(nodes) == 0) {
		buf_adds(out, "no nodes\n");
		return;
	}
	struct clitable *t = clitable_new(9, "ID", "NAME", "STATE", "GPUS", "ALLOC", "MODEL",
	                                  "ADDRESS", "LAST SEEN", "REASON");
	clitable_right(t, 0);
	clitable_right(t, 3);
	clitable_right(t, 4);
	size_t i;
	const json_t *node;
	json_array_foreach (nodes, i, node)
		add_row(t, node);
	clitable_render(t, out);
	clitable_free(t);
}

/* ---- one node ---- */

static void field(struct buf *out, const char *label, const char *value)
{
	buf_printf(out, "  %-12s", label);
	verb_add_clean(out, *value ? value : "-");
	buf_adds(out, "\n");
}

/* "140.4 GiB", "80 GiB", "512 MiB"; "-" for 0. */
static void memory_text(int64_t bytes, char *out, size_t n)
{
	if (bytes <= 0) {
		snprintf(out, n, "-");
	} else if (bytes < (1ll << 30)) {
		snprintf(out, n, "%lld MiB", (long long)(bytes >> 20));
	} else {
		long long tenths = (long long)((bytes * 10 + (1ll << 29)) >> 30);
		if (tenths % 10)
			snprintf(out, n, "%lld.%lld GiB", tenths / 10, tenths % 10);
		else
			snprintf(out, n, "%lld GiB", tenths / 10);
	}
}

/* "KEY=VALUE KEY=VALUE" of an object of strings. */
static void labels_text(const json_t *labels, struct buf *out)
{
	const char *k;
	const json_t *v;
	json_object_foreach ((json_t *)labels, k, v)
		buf_printf(out, "%s%s=%s", out->len ? " " : "", k,
		           json_is_string(v) ? json_string_value(v) : "?");
}

/* "warning 2, job 1, gpu 1, node 0". */
static void faults_text(const json_t *faults, struct buf *out)
{
	static const char *const scopes[] = {"warning", "job", "gpu", "node"};
	for (size_t i = 0; i < sizeof(scopes) / sizeof(scopes[0]); i++)
		buf_printf(out, "%s%s %lld", i ? ", " : "", scopes[i],
		           (long long)verb_int(faults, scopes[i], 0));
}

static void node_state_field(const json_t *node, struct buf *out)
{
	char s[96];
	snprintf(s, sizeof(s), "%s%s", verb_str(node, "state"),
	         json_is_true(json_object_get(node, "drained_by_fault")) ? " (by a fault)" : "");
	field(out, "state", s);
}

/* "h200 (1a2b3c4d5e6f): converged, checked" or "-" without a profile. */
static void profile_field(const json_t *node, struct buf *out)
{
	const json_t *p = json_object_get(node, "profile");
	const json_t *st = json_object_get(node, "profile_status");
	char s[200] = "";
	if (json_is_object(p)) {
		const char *hash = verb_str(p, "hash");
		int current = strcmp(verb_str(st, "hash"), hash) == 0;
		int checked = strcmp(verb_str(node, "profile_checked"), hash) == 0;
		snprintf(s, sizeof(s), "%s (%.12s): %s%s", verb_str(p, "name"), hash,
		         current ? verb_str(st, "state") : "no report yet",
		         checked ? ", checked" : "");
	}
	field(out, "profile", s);
}

static void node_header(const json_t *node, int64_t now_ms, struct buf *out)
{
	(void)now_ms;
	char s[160], seen[32];
	struct buf tmp;
	buf_init(&tmp);
	buf_printf(out, "node %lld: ", (long long)verb_int(node, "id", -1));
	verb_add_clean(out, verb_str(node, "name"));
	buf_adds(out, "\n");
	node_state_field(node, out);
	field(out, "reason", verb_str(node, "reason"));
	field(out, "fault", verb_str(node, "fault"));
	faults_text(json_object_get(node, "faults"), &tmp);
	field(out, "faults", tmp.data);
	snprintf(s, sizeof(s), "%lld total, %lld allocated, %lld unhealthy",
	         (long long)verb_int(node, "gpus_total", 0),
	         (long long)verb_int(node, "gpus_allocated", 0),
	         (long long)verb_int(node, "gpus_unhealthy", 0));
	field(out, "gpus", s);
	int64_t cpus = verb_int(node, "cpus", 0), limit = cpus > 0 ? cpus : 1; /* schedule.c */
	snprintf(s, sizeof(s), "%lld (at most %lld CPU-only rank%s at once)", (long long)cpus,
	         (long long)limit, limit == 1 ? "" : "s");
	field(out, "cpus", s);
	const char *backend = verb_str(node, "backend");
	snprintf(s, sizeof(s), "%s%s", backend,
	         strcmp(backend, "sim") == 0 ? " (simulated GPUs, not hardware)" : "");
	field(out, "backend", s);
	field(out, "driver", verb_str(node, "driver_version"));
	field(out, "cuda", verb_str(node, "cuda_version"));
	field(out, "agent", verb_str(node, "agent_version"));
	buf_reset(&tmp);
	labels_text(json_object_get(node, "labels"), &tmp);
	field(out, "labels", tmp.len ? tmp.data : "");
	field(out, "pool", verb_str(node, "pool"));
	profile_field(node, out);
	field(out, "hostname", verb_str(node, "hostname"));
	field(out, "address", verb_str(node, "address"));
	/* Where to scrape the node's GPU metrics: the agent serves them. */
	const char *agent = verb_str(node, "agent_url");
	buf_reset(&tmp);
	if (*agent)
		buf_printf(&tmp, "%s/metrics", agent);
	field(out, "metrics", tmp.len ? tmp.data : "");
	clitable_duration(seen, sizeof(seen), verb_int(node, "last_seen_ms_ago", -1));
	snprintf(s, sizeof(s), "%s%s", seen, strcmp(seen, "-") ? " ago" : "");
	field(out, "last seen", s);
	buf_cleanup(&tmp);
}

/* An int cell: the value, or "" (shown as "-") when absent or -1. */
static void int_cell(struct clitable *t, const json_t *obj, const char *name)
{
	int64_t v = verb_int(obj, name, -1);
	if (v < 0)
		clitable_add(t, "%s", "");
	else
		clitable_add(t, "%lld", (long long)v);
}

static void gpu_table(const json_t *gpus, struct buf *out)
{
	struct clitable *t = clitable_new(8, "GPU", "MODEL", "MEMORY", "JOB", "NUMA", "NVLINKS",
	                                  "BUS ID", "HEALTH");
	for (int c = 0; c < 6; c++)
		if (c != 1)
			clitable_right(t, c);
	size_t i;
	const json_t *g;
	json_array_foreach (gpus, i, g) {
		char mem[32];
		memory_text(verb_int(g, "memory_bytes", 0), mem, sizeof(mem));
		clitable_add(t, "%lld", (long long)verb_int(g, "index", -1));
		clitable_add(t, "%s", verb_str(g, "model"));
		clitable_add(t, "%s", mem);
		int_cell(t, g, "job_id");
		int_cell(t, g, "numa_node");
		int_cell(t, g, "nvlinks");
		clitable_add(t, "%s", verb_str(g, "pci_bus_id"));
		const char *why = verb_str(g, "health_reason");
		clitable_add(t, "%s%s%s", verb_str(g, "health"), *why ? ": " : "", why);
	}
	clitable_render(t, out);
	clitable_free(t);
}

/* ---- the topology matrix: a grid wider than clitable's columns ---- */

struct grid {
	int rows, cols;
	char **cells; /* rows * cols, owned */
};

static void grid_set(struct grid *g, int r, int c, const char *s)
{
	struct buf b;
	buf_init(&b);
	verb_add_clean(&b, s);
	g->cells[r * g->cols + c] = xstrdup(b.len ? b.data : "");
	buf_cleanup(&b);
}

/* Columns two spaces apart, left-aligned, no trailing spaces. */
static void grid_render(const struct grid *g, struct buf *out)
{
	size_t *w = xcalloc((size_t)g->cols, sizeof(*w));
	for (int i = 0; i < g->rows * g->cols; i++) {
		size_t n = strlen(g->cells[i]);
		if (n > w[i % g->cols])
			w[i % g->cols] = n;
	}
	for (int r = 0; r < g->rows; r++) {
		struct buf line;
		buf_init(&line);
		for (int c = 0; c < g->cols; c++) {
			const char *s = g->cells[r * g->cols + c];
			buf_printf(&line, "%-*s%s", (int)w[c], s, c + 1 < g->cols ? "  " : "");
		}
		while (line.len && line.data[line.len - 1] == ' ')
			line.len--;
		buf_add(out, line.data, line.len);
		buf_adds(out, "\n");
		buf_cleanup(&line);
	}
	free(w);
}

static void grid_free(struct grid *g)
{
	for (int i = 0; i < g->rows * g->cols; i++)
		free(g->cells[i]);
	free(g->cells);
}

/* One row of the matrix: "GPUi", its link to every GPU ("X" for itself,
 * as nvidia-smi writes it), its CPU affinity and NUMA node. */
static void topo_row(struct grid *g, int r, const json_t *gpu, int n)
{
	char s[32];
	snprintf(s, sizeof(s), "GPU%lld", (long long)verb_int(gpu, "index", r - 1));
	grid_set(g, r, 0, s);
	const json_t *links = json_object_get(gpu, "links");
	for (int c = 0; c < n; c++) {
		const char *l = json_string_value(json_array_get(links, (size_t)c));
		grid_set(g, r, c + 1, !l ? "?" : strcmp(l, "SELF") == 0 ? "X" : l);
	}
	const char *aff = verb_str(gpu, "cpu_affinity");
	grid_set(g, r, n + 1, *aff ? aff : "N/A");
	int64_t numa = verb_int(gpu, "numa_node", -1);
	snprintf(s, sizeof(s), "%lld", (long long)numa);
	grid_set(g, r, n + 2, numa >= 0 ? s : "N/A");
}

static void topo_matrix(const json_t *gpus, struct buf *out)
{
	int n = (int)json_array_size(gpus);
	struct grid g = {n + 1, n + 3, xcalloc((size_t)(n + 1) * (size_t)(n + 3), sizeof(char *))};
	grid_set(&g, 0, 0, "");
	for (int c = 0; c < n; c++) {
		char s[32];
		snprintf(s, sizeof(s), "GPU%lld",
		         (long long)verb_int(json_array_get(gpus, (size_t)c), "index", c));
		grid_set(&g, 0, c + 1, s);
	}
	grid_set(&g, 0, n + 1, "CPU Affinity");
	grid_set(&g, 0, n + 2, "NUMA Affinity");
	for (int r = 0; r < n; r++)
		topo_row(&g, r + 1, json_array_get(gpus, (size_t)r), n);
	grid_render(&g, out);
	grid_free(&g);
	buf_adds(out,
	         "\nX = self, NV = NVLink, PIX = one PCIe switch, PXB = several PCIe switches,\n"
	         "PHB = one PCIe host bridge, NODE = one NUMA node, SYS = across NUMA nodes\n");
}

/* Whether any GPU reported its links (agents before the GPU layer did not). */
static int has_links(const json_t *gpus)
{
	size_t i;
	const json_t *g;
	json_array_foreach (gpus, i, g)
		if (json_array_size(json_object_get(g, "links")) > 0)
			return 1;
	return 0;
}

/* "0,1 (switch)"; "" when no GPU is near. */
static void near_text(const json_t *port, struct buf *out)
{
	size_t i;
	const json_t *g;
	json_array_foreach (json_object_get(port, "gpus_near"), i, g)
		buf_printf(out, "%s%lld", i ? "," : "", (long long)json_integer_value(g));
	if (out->len && *verb_str(port, "near_by"))
		buf_printf(out, " (%s)", verb_str(port, "near_by"));
}

static void rdma_table(const json_t *ports, struct buf *out)
{
	struct clitable *t =
	        clitable_new(7, "PORT", "STATE", "RATE", "LAYER", "NETDEV", "NUMA", "NEAR GPUS");
	clitable_right(t, 5);
	size_t i;
	const json_t *p;
	json_array_foreach (ports, i, p) {
		struct buf near;
		buf_init(&near);
		near_text(p, &near);
		clitable_add(t, "%s:%lld", verb_str(p, "dev"), (long long)verb_int(p, "port", 0));
		if (*verb_str(p, "error"))
			clitable_add(t, "skipped: %s", verb_str(p, "error"));
		else
			clitable_add(t, "%s", verb_str(p, "state"));
		clitable_add(t, "%s", verb_str(p, "rate"));
		clitable_add(t, "%s", verb_str(p, "link_layer"));
		clitable_add(t, "%s", verb_str(p, "netdev"));
		int_cell(t, p, "numa_node");
		clitable_add(t, "%s", near.len ? near.data : "");
		buf_cleanup(&near);
	}
	clitable_render(t, out);
	clitable_free(t);
}

/* The agent's converging steps (profile_status.steps), in order. */
static void steps_table(const json_t *steps, struct buf *out)
{
	struct clitable *t = clitable_new(3, "STEP", "STATUS", "DETAIL");
	size_t i;
	const json_t *s;
	json_array_foreach (steps, i, s) {
		clitable_add(t, "%s", verb_str(s, "name"));
		clitable_add(t, "%s", verb_str(s, "status"));
		clitable_add(t, "%s", verb_str(s, "detail"));
	}
	clitable_render(t, out);
	clitable_free(t);
}

void verb_node_show_render(const json_t *node, int64_t now_ms, struct buf *out)
{
	node_header(node, now_ms, out);
	const json_t *gpus = json_object_get(node, "gpus");
	if (json_array_size(gpus) == 0) {
		buf_adds(out, "\nno GPUs\n");
	} else {
		buf_adds(out, "\n");
		gpu_table(gpus, out);
	}
	if (has_links(gpus)) {
		buf_adds(out, "\ntopology:\n");
		topo_matrix(gpus, out);
	}
	const json_t *rdma = json_object_get(node, "rdma");
	if (json_array_size(rdma) > 0) {
		buf_adds(out, "\nRDMA ports:\n");
		rdma_table(rdma, out);
	}
	const json_t *steps = json_object_get(json_object_get(node, "profile_status"), "steps");
	if (json_array_size(steps) > 0) {
		buf_adds(out, "\nprofile steps:\n");
		steps_table(steps, out);
	}
}

void verb_node_path(struct buf *out, const char *name, const char *tail)
{
	buf_adds(out, "/v1/nodes/");
	cliconn_escape(out, name);
	buf_adds(out, tail);
}

int verb_node_show(struct verb_ctx *v, const char *name)
{
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	struct buf path;
	buf_init(&path);
	verb_node_path(&path, name, "");
	ret = verb_get_print(v, path.data, "node", verb_node_show_render);
	buf_cleanup(&path);
	return ret;
}

static int nodes_fn(struct verb_ctx *v)
{
	if (v->args.npos > 0 && strcmp(v->args.pos[0], "show") != 0)
		return verb_usage_error(v, "\"%s\" is not show (usage: anvil nodes [show NODE])",
		                        v->args.pos[0]);
	if (v->args.npos == 1)
		return verb_usage_error(v, "show: missing NODE (usage: anvil nodes show NODE)");
	if (v->args.npos == 2)
		return verb_node_show(v, v->args.pos[1]);
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	return verb_get_print(v, "/v1/nodes", "nodes", verb_nodes_render);
}

const struct verb verb_nodes = {
        .name = "nodes",
        .fn = nodes_fn,
        .opts = verb_json_opts,
        .max_pos = 2,
        .usage = "[--json]\n   or: anvil nodes show [--json] NODE",
        .summary = "list the cluster's nodes and their GPUs' health; show one",
        .help = "Lists nodes: id, name, state (ready, cordoned, draining, drained, lost;\n"
                "converging or held while a fleet profile keeps it from work),\n"
                "GPUS (\"8\" when all are healthy, \"7/8 ok\" when one is quarantined or lost),\n"
                "ALLOC (GPUs allocated/total), GPU model, address, how long ago the node last\n"
                "synced, and REASON: the operator's reason, the fault its agent reports now,\n"
                "or its first unhealthy GPU.\n\n"
                "`anvil nodes show NODE` (also `anvil node show NODE`) shows one node: state,\n"
                "reason, fault, fault counts by scope, backend, driver and CUDA versions,\n"
                "labels, its fleet profile and how its agent stands against it; every GPU\n"
                "with its memory, job, NUMA node, NVLinks, PCI bus id and health; the\n"
                "topology matrix as `nvidia-smi topo -m` prints it; the RDMA ports with the\n"
                "GPUs near each; and the profile's steps. See docs/gpu.md, docs/fleet.md.\n",
};
