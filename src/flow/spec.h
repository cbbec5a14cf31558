/* spec.h - a workflow's definition: its compiled JSON form, checked, and
 * the YAML front end that compiles to it.
 *
 * The compiled form is what the API takes and what the Python SDK also
 * produces (docs/workflows.md is its reference):
 *
 *   {"name": "...", "inputs": {NAME: scalar}, "tasks": [TASK, ...]}
 *   TASK: {"name", "command": [argv], "resources": {"gpus", "nodes",
 *          "cpus", "memory_bytes", "gpu_type"}, "queue", "priority",
 *          "needs": [task names], "inputs": {K: scalar}, "outputs":
 *          {K: "file"|"dir"|"value"}, "env": {K: string}, "retries":
 *          {"count", "backoff_ms"}, "timeout_ms", "checkpoint", "cache":
 *          {"enabled", "version", "code"}, "map": {"grid": {P: [values]} | "list":
 *          [{P: value}], "concurrency"}}
 *
 * Strings may hold templates: {{ inputs.NAME }}, {{ params.P }} (in a task
 * with map), {{ tasks.T.outputs.K }} (T must be in the task's needs; the
 * YAML front end adds it). The
 * check finds every error, not only the first: unknown keys, wrong types
 * and ranges, duplicate or missing tasks, unknown references, cycles. Pure:
 * no I/O.
 */
#ifndef ANVIL_FLOW_SPEC_H
#define ANVIL_FLOW_SPEC_H

#include <jansson.h>
#include <stddef.h>

#include "base/schema.h"

#define FLOW_MAX_TASKS 1000

/* Errors are base/schema.h's: each with the JSON path of the value at
 * fault ("tasks[2].needs[0]"); every one is found, not only the first. */

/* Checks a compiled workflow; returns the number of errors added. */
int flow_check(const json_t *wf, struct schema_errors *errs);

/* Compiles a workflow written the YAML way (tasks as a mapping by name, a
 * command as one string for /bin/sh, memory "8Gi", durations "90s", retries
 * as a count, cache as a boolean) into the compiled form, applies the
 * overrides of workflow inputs (-i k=v: an object of strings) and checks
 * it. Returns the compiled form, or NULL with errors whose paths are the
 * source's ("tasks.train.memory"). */
json_t *flow_compile(const json_t *src, const json_t *overrides, struct schema_errors *errs);

/* The YAML front end: parses text and compiles it. Each error is one line
 * "FILE:LINE:COLUMN: what is wrong" in out (of size len, "\n"-separated);
 * returns NULL then. */
json_t *flow_compile_yaml(const char *file, const char *text, size_t len, const json_t *overrides,
                          char *out, size_t len_out);

/* The template "{{ ref }}" that starts at or after s: 1 with ref (trimmed,
 * cut to len - 1) and the template's start and end (one past its "}}");
 * 0 when there is none; -1 when a "{{" is not closed. */
int flow_template_next(const char *s, char *ref, size_t len, const char **start, const char **end);

#endif
