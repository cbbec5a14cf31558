/* flowcache.h - the workflow task cache (docs/workflows.md, "The task
 * cache"), kept in a state database's flow_cache table (store.h) with the
 * outputs in an object store (blob.h). The server's engine
 * (server/flows.c) and the local runner (cli/wflocal.c) both use it, each
 * with its own database and store.
 *
 * An entry under a run's key holds its parts, outputs, execution and run;
 * a second entry, "last:WORKFLOW/TASK/PARAMS", holds the parts of that
 * task instance's latest success, so a miss can say what changed.
 */
#ifndef ANVIL_STORE_FLOWCACHE_H
#define ANVIL_STORE_FLOWCACHE_H

#include <jansson.h>
#include <stdint.h>

#include "flow/engine.h"
#include "store/store.h"

struct blob_store;

/* Whether the (rendered) task has cache enabled. */
int flowcache_enabled(const json_t *task);

/* Sets r's key and parts (flow_cache_parts of rendered, the hashes of the
 * objects it fetches and x's bundle) and its note ("hit", or "miss: why").
 * Unless x->no_cache, a recorded result whose outputs are all in objects
 * (NULL: not checked) is a hit: r is cached from it (flow_cached) and 1
 * is returned; else 0. */
int flowcache_lookup(struct store *db, struct blob_store *objects, struct flow_exec *x,
                     struct flow_run *r, const json_t *rendered, const json_t *fetch,
                     int64_t now_ms);
/* Records r's success under its key, and its parts as the instance's
 * latest. A write that fails is logged: the cache is an optimisation. */
void flowcache_record(struct store *db, const struct flow_exec *x, const struct flow_run *r,
                      int64_t now_ms);

#endif
