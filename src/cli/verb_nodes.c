/* verb_nodes.c - `anvil nodes`: the cluster's nodes (GET /v1/nodes). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/clitable.h"
#include "cli/verb.h"

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

static void add_row(struct clitable *t, const json_t *node)
{
	char seen[32];
	struct buf model;
	buf_init(&model);
	models(json_object_get(node, "gpus"), &model);
	clitable_duration(seen, sizeof(seen), verb_int(node, "last_seen_ms_ago", -1));
	clitable_add(t, "%lld", (long long)verb_int(node, "id", -1));
	clitable_add(t, "%s", verb_str(node, "name"));
	clitable_add(t, "%s", verb_str(node, "state"));
	clitable_add(t, "%lld/%lld", (long long)verb_int(node, "gpus_allocated", 0),
	             (long long)verb_int(node, "gpus_total", 0));
	clitable_add(t, "%s", model.len ? model.data : "");
	clitable_add(t, "%s", verb_str(node, "address"));
	clitable_add(t, "%s%s", seen, strcmp(seen, "-") ? " ago" : "");
	buf_cleanup(&model);
}

void verb_nodes_render(const json_t *nodes, int64_t now_ms, struct buf *out)
{
	(void)now_ms; /* the server reports how long ago each node synced */
	if (json_array_size(nodes) == 0) {
		buf_adds(out, "no nodes\n");
		return;
	}
	struct clitable *t =
	        clitable_new(7, "ID", "NAME", "STATE", "GPUS", "MODEL", "ADDRESS", "LAST SEEN");
	clitable_right(t, 0);
	clitable_right(t, 3);
	size_t i;
	const json_t *node;
	json_array_foreach (nodes, i, node)
		add_row(t, node);
	clitable_render(t, out);
	clitable_free(t);
}

static int nodes_fn(struct verb_ctx *v)
{
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	return verb_get_print(v, "/v1/nodes", "nodes", verb_nodes_render);
}

const struct verb verb_nodes = {
        .name = "nodes",
        .fn = nodes_fn,
        .opts = verb_json_opts,
        .usage = "[--json]",
        .summary = "list the cluster's nodes",
        .help = "Lists nodes: id, name, state, GPUs allocated/total, GPU model, address, and\n"
                "how long ago the node last synced.\n",
};
