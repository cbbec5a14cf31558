/* run.h - the pure parts of running a workflow's tasks: a sweep expanded
 * into its children, templates rendered with the values known at run time,
 * and a task's cache key, made of parts so that a miss can say what
 * changed (with flow/codeset.h for the files of the code bundle a task
 * depends on). No I/O: the server's workflow engine calls these.
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

/* ---- the task cache's key (docs/workflows.md, "The task cache") ---- */

/* Whether the task is cached: cache.enabled, true by default when cache
 * is a mapping (cache: {code: [...]}), false without one. */
int flow_cache_on(const json_t *task);

/* How a cached task's key covers its code bundle (cache.code):
 *   FLOW_CODE_READS   "reads", the default: the files of the bundle the
 *                     task read (or looked for and did not find), as its
 *                     wrapper recorded them, are compared when a later
 *                     run looks its key up; the key itself leaves the
 *                     code out;
 *   FLOW_CODE_BUNDLE  "bundle": the whole bundle's hash is in the key;
 *   FLOW_CODE_PATHS   a list of paths: those files and directories of
 *                     the bundle (codeset_declared) are in the key. */
enum flow_code { FLOW_CODE_READS, FLOW_CODE_BUNDLE, FLOW_CODE_PATHS };
enum flow_code flow_cache_code(const json_t *task);
const char *flow_code_name(enum flow_code c);

/* The cache key of a run of task (as written: its templates not
 * rendered), made of parts so that a miss can say what changed:
 *   {"form": 2, "command": H, "env": H, "inputs": H, "values": {REF: V},
 *    "objects": {REF: H}, "outputs": H, "code_by": "reads"|"bundle"|
 *    "paths", "code": H, "version": V, "key": H}
 * each H the SHA-256 (hex) of its part as canonical JSON (keys sorted,
 * compact). "values" holds the value of each template of the command,
 * env and inputs that ctx (flow_context) has: inputs, parameters and
 * upstream value outputs (one longer than 256 bytes as its
 * {"sha256": H}); "objects" the hash of the content keys of each object
 * the run fetches (input_hashes: {REF: [keys]}, may be NULL); "code" the
 * hash of code, what the caller says of the bundle ({"bundle": KEY},
 * {"paths": [...], "view": VIEW} or {"reads": true}); "key" the hash of
 * all the others. Resources, queue, priority, retries and timeout are
 * left out: they do not change a result. The caller decrefs. */
json_t *flow_cache_parts(const json_t *task, const json_t *ctx, const json_t *input_hashes,
                         const json_t *code);

/* Why parts `now` miss an entry recorded with parts `was` (the same task
 * instance's last success), every difference in a fixed order joined by
 * "; ": "the command changed", "input mult changed: 3 -> 5", "the code
 * changed: gen.py", ... Where both views are given (codeset.h: what the
 * earlier run depended on of its bundle, and the same keys in the new
 * bundle), the code is judged by them, naming the files that differ;
 * else by the parts' code hashes ("the code bundle changed"). Into out;
 * "nothing changed" when nothing did. */
void flow_cache_why(const json_t *was, const json_t *now, const json_t *was_view,
                    const json_t *now_view, char *out, size_t len);

#endif
