#include "sched/place.h"

#include <stdio.h>

#include "base/err.h"

uint64_t place_take_gpus(uint64_t mask, int count)
{
	uint64_t out = 0;
	for (int i = 0; i < count; i++) {
		if (!mask)
			return 0;
		uint64_t low = mask & (~mask + 1);
		out |= low;
		mask &= ~low;
	}
	return out;
}

/* Leftover GPUs after placing `gpus` on n, or -1 when it does not fit. */
static int leftover(const struct place_node *n, int gpus)
{
	if (!n->usable)
		return -1;
	int freec = __builtin_popcountll(n->free);
	return freec >= gpus ? freec - gpus : -1;
}

int place_job(const struct place_node *nodes, int nnodes, const struct place_request *req,
              int *node_idx, uint64_t *gpus, char *why, size_t whylen)
{
	/* Selection of the req->nodes best-fit nodes, kept sorted by leftover
	 * in the caller's out array: O(nnodes * req->nodes), no allocation. */
	int sel[PLACE_MAX_NODES];
	int chosen = 0;
	int fitting = 0;
	if (req->nodes < 1 || req->nodes > PLACE_MAX_NODES) {
		snprintf(why, whylen, "asks for %d nodes; a job spans 1 to %d", req->nodes,
		         PLACE_MAX_NODES);
		return ERR_BUSY;
	}
	for (int i = 0; i < nnodes; i++) {
		int left = leftover(&nodes[i], req->gpus);
		if (left < 0)
			continue;
		fitting++;
		if (chosen == req->nodes && left >= leftover(&nodes[sel[chosen - 1]], req->gpus))
			continue;
		int pos = chosen < req->nodes ? chosen++ : chosen - 1;
		while (pos > 0 && leftover(&nodes[sel[pos - 1]], req->gpus) > left) {
			sel[pos] = sel[pos - 1];
			pos--;
		}
		sel[pos] = i;
	}
	if (chosen < req->nodes) {
		snprintf(why, whylen,
		         "needs %d node(s) with %d free GPU(s) each; %d node(s) have that now",
		         req->nodes, req->gpus, fitting);
		return ERR_BUSY;
	}
	for (int k = 0; k < req->nodes; k++) {
		node_idx[k] = sel[k];
		gpus[k] = place_take_gpus(nodes[sel[k]].free, req->gpus);
	}
	return 0;
}

int place_fits_ever(const struct place_node *nodes, int nnodes, const struct place_request *req,
                    char *why, size_t whylen)
{
	int big_enough = 0, most = 0;
	for (int i = 0; i < nnodes; i++) {
		if (nodes[i].total >= req->gpus)
			big_enough++;
		if (nodes[i].total > most)
			most = nodes[i].total;
	}
	if (req->gpus > most) {
		snprintf(why, whylen, "asks for %d GPUs per node, but the largest node has %d GPUs",
		         req->gpus, most);
		return ERR_UNFIT;
	}
	if (big_enough < req->nodes) {
		snprintf(why, whylen,
		         "asks for %d nodes with %d GPUs each, but the cluster has %d such node(s)",
		         req->nodes, req->gpus, big_enough);
		return ERR_UNFIT;
	}
	return 0;
}
