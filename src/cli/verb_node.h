/* verb_node.h - what the node verbs share: `anvil nodes show NODE` (in
 * verb_nodes.c) and `anvil node show|cordon|drain|uncordon|label|check|
 * fault` (verb_node.c).
 *
 * The renderers turn the server's JSON into the human output and are pure
 * (the caller passes the clock), so tests can check them directly; the
 * fault builder turns the words of `anvil node fault` into the fault
 * object of gpu/sim.h. Single-threaded; nothing here keeps a pointer.
 */
#ifndef ANVIL_VERB_NODE_H
#define ANVIL_VERB_NODE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "cli/verb.h"

/* One node as GET /v1/nodes/NAME answers it ("node"): state, reason,
 * fault, fault counts, versions and labels, a table of every GPU, the
 * topology matrix (as `nvidia-smi topo -m` prints it) and the RDMA ports. */
void verb_node_show_render(const json_t *node, int64_t now_ms, struct buf *out);

/* The answer of POST /v1/nodes/NAME/check: a NAME / OK / DETAIL table of
 * the checks, then one line with the verdict and the summary. */
void verb_node_check_render(const json_t *result, int64_t now_ms, struct buf *out);

/* The answer of GET /v1/join-token: the token alone on the first line,
 * then when it expires (now_ms: the wall clock), or that it expired or
 * never does. */
void verb_node_token_render(const json_t *token, int64_t now_ms, struct buf *out);

/* The fault object for GPU gpu: {"gpu": gpu, "kind": kind, KEY: VALUE...}
 * from nkv words "KEY=VALUE" (VALUE as a JSON integer when it is a decimal
 * integer, else as a string; the agent validates the rest). 0 with the new
 * object in *out (json_decref it), or ERR_INVALID with a message naming
 * the word and the reason in err (*out untouched). */
int verb_node_fault_body(int64_t gpu, const char *kind, char *const *kv, int nkv, json_t **out,
                         char *err, size_t errlen);

/* GET /v1/nodes/NAME and prints it (verb_node_show_render, or the JSON
 * with --json); the verb's exit status. Connects first. */
int verb_node_show(struct verb_ctx *v, const char *name);

/* "/v1/nodes/NAME" plus tail ("" or "/check"), NAME percent-encoded. */
void verb_node_path(struct buf *out, const char *name, const char *tail);

#endif
