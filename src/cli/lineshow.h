/* lineshow.h - what `anvil lineage` prints from GET /v1/lineage's graph
 * (docs/api.md, "Lineage"): an indented tree from the nodes asked about,
 * or the graph as Graphviz text. Pure: the server's JSON in, text out, so
 * tests check the text directly. Control characters in what the server
 * sent are shown as '?'.
 */
#ifndef ANVIL_CLI_LINESHOW_H
#define ANVIL_CLI_LINESHOW_H

#include <jansson.h>
#include <stddef.h>

#include "base/buf.h"

/* The query of GET /v1/lineage for what `anvil lineage` was given, into
 * q (URL-encoded): EXEC/TASK or EXEC/TASK[INDEX] (one run), EXEC (every
 * run of the execution; *whole set to 1), sha256/<hex> (an object) or
 * scheme://... (an input's URI). 0, or ERR_INVALID with why in err. */
int lineshow_query(const char *target, struct buf *q, int *whole, char *err, size_t errlen);

/* The graph as a tree from each of its "starts", following its
 * "direction" (upstream: where each node came from; downstream: where it
 * went; both: the one tree, then the other). One node a line:
 *
 *   1/d (diamond): succeeded, job 4 on node-1, exit 0, code 9f2c1a2b3c4d
 *   |-- 1/b (diamond): succeeded, job 2 on node-1, exit 0, code 9f2c1a2b3c4d
 *   |   `-- object sha256/5be1c0ffee12 (file, 1.5 KiB)
 *   `-- cached from 1/c (diamond): ...
 *
 * A run: EXEC/LABEL (workflow), its state and its latest attempt's job,
 * node(s), exit status and code bundle (its hash, short); an object: its
 * key (short), kind and size; an input: its URI. A node met again is
 * written once more with "(above)" and not followed. */
void lineshow_tree(const json_t *graph, struct buf *out);

/* The graph in the DOT language: `digraph lineage { ... }`, a node per
 * node (runs as boxes, objects as notes, inputs as ellipses), an edge per
 * edge labelled with its kind. */
void lineshow_dot(const json_t *graph, struct buf *out);

/* "512 B", "1.5 KiB", "3.2 GiB" into out. */
void lineshow_size(int64_t bytes, char *out, size_t n);

#endif
