/* openlineage.h - an execution's lineage as OpenLineage run events
 * (spec 2-0-2, https://openlineage.io/spec/2-0-2/OpenLineage.json, the
 * RunEvent), for catalogs such as Marquez. Pure: the graph in, events out;
 * `anvil lineage --export` writes or posts them (docs/workflows.md,
 * "Lineage").
 *
 * The input is what GET /v1/lineage?exec=E answers: lineage.h's graph,
 * each run node with its "attempts" (the server's details), and the
 * "execution" ({"id", "name", "state", "submit_ms", "end_ms"}). Events:
 *
 *   - the execution, job WORKFLOW: START at its submission, then COMPLETE
 *     (succeeded), FAIL (failed) or ABORT (cancelled) at its end;
 *   - each attempt of each run of E, job WORKFLOW.TASK (a sweep's children
 *     share it), the execution as its parent run: START at its start,
 *     then COMPLETE (succeeded), FAIL (failed, lost) or ABORT (cancelled,
 *     preempted) at its end. Inputs: the objects it read and the URIs it
 *     was given; outputs, on the end of the attempt that made them: the
 *     run's file and dir outputs. Datasets are {namespace, name: object
 *     key or URI}, with the content hash as the dataset version and the
 *     size as output statistics.
 *
 * A run that ran nothing (cached, skipped, waiting) has no events; an
 * attempt still running has its START only. Each run's id is a UUID
 * (version 5, in the URL namespace) of "anvil://NAMESPACE/executions/E"
 * or ".../attempts/A": the same attempt always has the same id, and the
 * namespace keeps clusters apart.
 */
#ifndef ANVIL_FLOW_OPENLINEAGE_H
#define ANVIL_FLOW_OPENLINEAGE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define OPENLINEAGE_SCHEMA_URL "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"

struct openlineage_opts {
	const char *ns;       /* the namespace of jobs and datasets ("anvil") */
	const char *producer; /* a URI naming what made the events */
};

/* The events of the execution in graph, in order: the execution's START,
 * each run's attempts (START, then its end) in run and attempt order, the
 * execution's end. An array (the caller decrefs it); NULL with err when
 * graph has no "execution". */
json_t *openlineage_events(const json_t *graph, const struct openlineage_opts *o, char *err,
                           size_t errlen);

/* The UUID (version 5, URL namespace, RFC 4122) of name, as
 * "xxxxxxxx-xxxx-5xxx-yxxx-xxxxxxxxxxxx". */
void openlineage_uuid(const char *name, char out[37]);

/* ms since the epoch as "2026-05-01T12:00:00.123Z". */
void openlineage_time(int64_t ms, char out[32]);

#endif
