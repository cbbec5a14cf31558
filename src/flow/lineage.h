/* lineage.h - where a workflow run's results came from and where they went,
 * decided without I/O: the graph of runs, the objects they wrote and read
 * and the URIs they were given, walked upstream or downstream; and what of
 * a run's record may be shown: its environment with secret values removed,
 * its command with the objects it fetched named by their keys.
 *
 * The server (server/api_lineage.c) adds a RUN record for every run of
 * every execution it keeps (lineage_add), then walks from the nodes a
 * query names (lineage_walk) and adds each run's attempts to what it
 * answers. A RUN record:
 *
 *   {"run": R, "exec": E, "workflow": NAME, "label": "c[2]", "task": "c",
 *    "index": 2, "state": "succeeded", "needs": [R, ...],
 *    "fetch": [{"ref", "kind", "keys", "list"}], "outputs": {K: OUTPUT},
 *    "cached_from": R, "uris": [URI, ...]}
 *
 * "run" is required and unique; the rest may be left out. "needs": the
 * runs of the tasks it needs (in its execution); "fetch": what its job
 * fetched (flow_fetch); "outputs": the run's (engine.h: an OUTPUT of kind
 * file or dir names a stored object by "key"); "cached_from": the run a
 * cached run reused; "uris": the URIs it was given (lineage_input_uris).
 * Other members are carried to the run's node as they are.
 *
 * The graph's nodes, each with "id" and "type":
 *
 *   run     "run:R"       the record less needs, fetch and uris, plus
 *                         "objects": what it read, [{"ref", "key",
 *                         "kind", "size", "sha256"}] (one per key)
 *   object  "object:KEY"  {"key", "kind": "file"|"dir", "size", "sha256"}
 *                         (size and sha256 when a producer reported them)
 *   input   "input:URI"   {"uri"}
 *
 * and its edges {"from", "to", "kind"}, in the direction the data went:
 *
 *   produced  run -> object  the run wrote it: one of its outputs (a
 *                            cached run's outputs are its origin's)
 *   consumed  object -> run  the run fetched it
 *   input     input -> run   the run was given the URI
 *   cached    run -> run     the later run reused the earlier's outputs
 *   needs     run -> run     the later needed the earlier and read no
 *                            object it wrote: a value, the order only,
 *                            or objects a cached run reused
 *
 * The graph holds a reference to each record until lineage_free. One
 * thread at a time; nothing here blocks or touches a file.
 */
#ifndef ANVIL_FLOW_LINEAGE_H
#define ANVIL_FLOW_LINEAGE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* A walk stops adding nodes here and says it was cut ("truncated"). */
#define LINEAGE_MAX_NODES 20000

enum lineage_dir {
	LINEAGE_UPSTREAM,   /* where it came from: edges followed backwards */
	LINEAGE_DOWNSTREAM, /* where it went: edges followed forwards */
	LINEAGE_BOTH,       /* the two walks together (not zig-zag) */
};

const char *lineage_dir_name(enum lineage_dir d);
/* "upstream", "downstream" or "both"; 0, or ERR_INVALID. */
int lineage_dir_parse(const char *s, enum lineage_dir *out);

struct lineage;

struct lineage *lineage_new(void);
void lineage_free(struct lineage *g); /* NULL is fine */

/* Adds a RUN record (above); the graph keeps a reference. 0, or
 * ERR_INVALID with why in err when it has no positive "run" or repeats
 * one added before. */
int lineage_add(struct lineage *g, json_t *rec, char *err, size_t errlen);

/* Whether the node id ("run:R", "object:KEY", "input:URI") is in the
 * graph, every record added so far linked. */
int lineage_has(struct lineage *g, const char *id);

/* The part of the graph reached from starts (an array of node ids that
 * lineage_has) in direction dir, at most depth edges away (depth < 0: no
 * limit): {"nodes": [start nodes, then in the order reached], "edges":
 * [the edges followed], "truncated": bool}. The caller decrefs it. */
json_t *lineage_walk(struct lineage *g, const json_t *starts, enum lineage_dir dir, int64_t depth);

/* ---- what a run's record may show ---- */

/* The names whose values are secrets, as patterns: "*X*" contains X,
 * "X*" starts with it, "*X" ends with it, else the name itself; compared
 * without case. NULL-terminated; docs/workflows.md lists the same. */
extern const char *const lineage_secret_names[];

/* 1 when a variable or input called name holds a secret. */
int lineage_secret_name(const char *name);

/* A copy of obj (an environment or a set of inputs: {NAME: value}) with
 * the value of each secret name replaced by "<redacted>" and the password
 * of a URL in any other text value ("postgres://u:PASS@host/db") too.
 * NULL or a non-object gives an empty object. The caller decrefs it. */
json_t *lineage_redact(const json_t *obj);

/* The command (an array of strings) with each {{ tasks.T.outputs.K }}
 * that fetch ([{"ref", "keys", "list"}]) names replaced by the object's
 * key, a list's keys joined by spaces ("<missing>" for one not written);
 * other text as it is. The caller decrefs it. */
json_t *lineage_resolve_command(const json_t *command, const json_t *fetch);

/* The URIs ("scheme://...", the whole value) a run of task (the compiled
 * task, templates unrendered) is given: the values of the workflow's
 * inputs (wf_inputs) and of the run's params that its command, env or
 * inputs use through {{ inputs.X }} or {{ params.P }}, and each of its
 * inputs that renders to one. Each once, in the order met. The caller
 * decrefs the array. */
json_t *lineage_input_uris(const json_t *task, const json_t *wf_inputs, const json_t *params);

/* 1 when s is a URI as lineage_input_uris means it: a scheme of a letter
 * then letters, digits, '+', '-' or '.', then "://" and at least one
 * more character, no blank anywhere. */
int lineage_is_uri(const char *s);

#endif
