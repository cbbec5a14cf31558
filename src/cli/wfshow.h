/* wfshow.h - what `anvil wf ls` and `anvil wf show` print, from the
 * server's JSON (docs/api.md, "Workflows"). Pure: the caller passes the
 * clock, so tests check the text directly. */
#ifndef ANVIL_CLI_WFSHOW_H
#define ANVIL_CLI_WFSHOW_H

#include <jansson.h>
#include <stdint.h>

#include "base/buf.h"

/* The executions of GET /v1/workflows: one line each, newest first. */
void wfshow_list(const json_t *list, int64_t now_ms, struct buf *out);
/* One execution (GET /v1/workflows/ID): a header, then a line per run
 * (sweep children with their parameters and value outputs) with the tasks
 * it needs (the DAG), its state,
 * tries, job, node, time and cache status, then why each run that did not
 * succeed did not. */
void wfshow_exec(const json_t *x, int64_t now_ms, struct buf *out);

#endif
