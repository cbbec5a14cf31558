/* place.h - first-version placement: whole GPUs, best fit, gangs all or nothing.
 *
 * Pure functions over a snapshot of nodes: no I/O, no allocation in the
 * placement itself, no global state. The caller (server/state.c) builds the
 * snapshot from its records, asks for a placement, and applies it.
 *
 * Policy: a job asks for `nodes` nodes with `gpus` free GPUs each. Each rank
 * goes to a distinct node. Nodes are chosen best-fit (the fewest GPUs left
 * over after placing), so partly used nodes fill up first and whole nodes
 * stay free for gangs. Within a node the lowest free GPU indices are taken.
 * A multi-node job is placed whole or not at all.
 */
#ifndef ANVIL_PLACE_H
#define ANVIL_PLACE_H

#include <stddef.h>
#include <stdint.h>

#define PLACE_MAX_NODES 1024 /* ranks of one job */

struct place_node {
	int64_t id;
	int total;     /* GPUs on the node */
	uint64_t free; /* mask of free, healthy GPUs */
	int usable;    /* ready: may take new work */
};

struct place_request {
	int gpus; /* per node */
	int nodes;
};

/* Places req on distinct usable nodes. On success returns 0 and fills
 * node_idx[0..req->nodes) (indices into nodes, rank order) and
 * gpus[0..req->nodes). Otherwise returns ERR_BUSY and writes the reason to
 * why; the out arrays are untouched. */
int place_job(const struct place_node *nodes, int nnodes, const struct place_request *req,
              int *node_idx, uint64_t *gpus, char *why, size_t whylen);

/* 0 if req could ever run on these nodes (ignoring what is in use and node
 * states); ERR_UNFIT with the reason otherwise. */
int place_fits_ever(const struct place_node *nodes, int nnodes, const struct place_request *req,
                    char *why, size_t whylen);

/* Lowest `count` set bits of mask; 0 if mask has fewer. */
uint64_t place_take_gpus(uint64_t mask, int count);

#endif
