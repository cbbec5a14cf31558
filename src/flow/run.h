/* run.h - the pure parts of running a workflow's tasks: a sweep expanded
 * into its children, templates rendered with the values known at run time,
 * and a task's cache key, made of parts so that a miss can say what
 * changed. No I/O: the server's workflow engine calls these.
 */
#ifndef ANVIL_FLOW_RUN_H
#define ANVIL_FLOW_RUN_H

#include <jansson.h>
#include <stddef.h>

/* A task's parameter sets: its map's grid as every combination (the first
 * parameter varies slowest, in the order written) or its list as written;
 * [{}] for a task without map. The caller decrefs. */
json_t *flow_expand(const json_t *task);

/* s with every {{ ... }} replaced from ctx {"inputs": {...}, "params":
 * {...}, "tasks": {T: {"outputs": {K: value}}}}: text as it is, integers
 * and booleans as JSON writes them, other numbers in the shortest form
 * that reads back the same, and a list (a sweep's outputs, one per child)
 * as its items joined by spaces. NULL, with "{{ ref }}: why" in err, when a
 * reference has no value (an output not written yet). free() it. */
char *flow_render(const char *s, const json_t *ctx, char *err, size_t errlen);

/* As flow_render, but a {{ tasks.T.outputs.K }} with no value in ctx is
 * left as written: an object output, which the task's wrapper on the node
 * replaces with the path it fetched the object to (agent/task.c). */
char *flow_render_known(const char *s, const json_t *ctx, char *err, size_t errlen);

/* The cache key of a task whose command, env and inputs are rendered:
 *   {"command": H, "env": H, "inputs": H, "outputs": H, "code": H,
 *    "version": V, "key": H}
 * each H the SHA-256 (hex) of its part as canonical JSON (keys sorted,
 * compact); "inputs" covers the resolved values and the content hashes of
 * input objects (input_hashes: {URI: hash}, may be NULL); "code" is the
 * code bundle's hash as given; "key" is the hash of all the others. What
 * does not change a result is left out: resources, queue, priority,
 * retries, timeout. The caller decrefs. */
json_t *flow_cache_parts(const json_t *task, const json_t *input_hashes, const char *bundle_hash);

/* Why parts `now` miss an entry recorded with parts `was`: "the command
 * changed", "the code bundle changed", ... (every part that differs, in a
 * fixed order, joined by "; "), into out. */
void flow_cache_why(const json_t *was, const json_t *now, char *out, size_t len);

#endif
