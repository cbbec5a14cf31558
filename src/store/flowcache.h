/* flowcache.h - the workflow task cache (docs/workflows.md, "The task
 * cache"), kept in a state database's flow_cache table (store.h) with the
 * outputs in an object store (objstore/blob.h). The server's engine
 * (server/flows.c) and the local runner (cli/wflocal.c) both use it, each
 * with its own database and store.
 *
 * Entries, by key:
 *   KEY (a run's flow_cache_parts "key")
 *       {"parts", "results": [RESULT, ...]}, newest first, at most
 *       FLOWCACHE_RESULTS: RESULT {"outputs", "exec", "run", "task",
 *       "time_ms"} and, for a task keyed by what it read (FLOW_CODE_READS),
 *       what it depends on: "view" (codeset.h: the files of its bundle it
 *       read, with their hashes) or, when its wrapper could not record
 *       them, "bundle" (the whole bundle's key). A run is a hit on the
 *       first RESULT whose view its own bundle matches (or whose bundle is
 *       its own) and whose outputs are all still in the store.
 *   "last:WORKFLOW/TASK/PARAMS"
 *       {"parts", "view", "bundle"} of that task instance's latest
 *       success, so that a miss can say what changed, naming the files.
 * A bundle's index (codeset.h) is not an entry but an object of the
 * store, "index/<hex of the bundle>" (flowcache_index).
 */
#ifndef ANVIL_STORE_FLOWCACHE_H
#define ANVIL_STORE_FLOWCACHE_H

#include <jansson.h>
#include <stdint.h>

#include "flow/engine.h"
#include "store/store.h"

#define FLOWCACHE_RESULTS 8 /* results kept under one key */

struct blob_store;

/* Whether the (rendered) task has cache enabled (flow_cache_on). */
int flowcache_enabled(const json_t *task);

/* Makes the index of the stored bundle (tarball_index) and keeps it in
 * objects as "index/<hex>", unless it is there already: the API calls it
 * before it takes the state lock, so that a new bundle's files are hashed
 * outside it. 0, or an error with why in err. */
int flowcache_index_prepare(struct blob_store *objects, const char *bundle, char *err,
                            size_t errlen);
/* x's bundle's index: x->code_index, else the stored one (made now when
 * there is none, see above), kept in x. NULL when x has no bundle or its
 * index cannot be made (logged, and not tried again for x): the task
 * cache then falls back to whole bundles. Borrowed from x. */
const json_t *flowcache_index(struct blob_store *objects, struct flow_exec *x);

/* Sets r's key and parts (flow_cache_parts of r's task, its values, the
 * hashes of the objects it fetches and its code as cache.code says) and
 * its note ("hit", or "miss: why"). Unless x->no_cache, a recorded result
 * that r's code matches and whose outputs are all in objects (NULL: not
 * checked) is a hit: r is cached from it (flow_cached) and 1 is returned;
 * else 0. */
int flowcache_lookup(struct store *db, struct blob_store *objects, struct flow_exec *x,
                     struct flow_run *r, const json_t *rendered, const json_t *fetch,
                     int64_t now_ms);
/* Records r's success under its key, with what it read of its bundle
 * (r->reads seen in the bundle's index) for a task keyed by its reads,
 * and its parts as the instance's latest. A write that fails is logged:
 * the cache is an optimisation. */
void flowcache_record(struct store *db, struct blob_store *objects, struct flow_exec *x,
                      const struct flow_run *r, int64_t now_ms);

#endif
