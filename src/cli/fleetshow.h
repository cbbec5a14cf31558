/* fleetshow.h - what `anvil fleet plan`, `apply`, `refresh`, `history`
 * and `status` print, from the server's JSON (docs/api.md, "Fleet"). Pure:
 * the caller passes the clock, so tests check the text directly.
 * Everything a server or a spec wrote goes through verb_add_clean or
 * clitable, so no value can drive the terminal.
 */
#ifndef ANVIL_CLI_FLEETSHOW_H
#define ANVIL_CLI_FLEETSHOW_H

#include <jansson.h>
#include <stdint.h>

#include "base/buf.h"

/* A plan (fleet/plan.h): nodes to add, remove and change (with what
 * differs in each and whether it needs a drain), queues and teams, the
 * rolling upgrade it starts, and the count of changes, or "no changes". */
void fleetshow_plan(const json_t *plan, struct buf *out);
/* The refresh report (GET /v1/fleet/refresh): the counts, then each node
 * whose agent reports it failed or drifted, or whose facts differ. */
void fleetshow_refresh(const json_t *drift, struct buf *out);
/* GET /v1/fleet/revisions: one line per revision, newest first. */
void fleetshow_history(const json_t *revisions, int64_t now_ms, struct buf *out);
/* One revision (GET /v1/fleet/revisions/N): its record, then the spec's
 * text as it was applied (or, without it, its plan). */
void fleetshow_revision(const json_t *rev, int64_t now_ms, struct buf *out);
/* GET /v1/fleet/status: the revision, its rollout node by node, and the
 * nodes of the spec that are not in service. */
void fleetshow_status(const json_t *status, int64_t now_ms, struct buf *out);

/* Progress while the apply that made revision is followed: what a status
 * says of the nodes named in watch ({name: true}), their phase in that
 * revision's rollout or else their state, compared with what seen ({name:
 * text}, the caller's, updated) held; a line for each node whose phase or
 * state changed ("  h200-01  converging: converging to profile h200 (step
 * 2 of 7)"). Returns how many lines it added. */
int fleetshow_progress(const json_t *status, int64_t revision, const json_t *watch, json_t *seen,
                       struct buf *out);

#endif
