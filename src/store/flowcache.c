/* flowcache.c - the task cache over a state database and an object store
 * (flowcache.h). */
#include "store/flowcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "flow/run.h"
#include "store/blob.h"

int flowcache_enabled(const json_t *task)
{
	return jv_bool(json_object_get(task, "cache"), "enabled", 0);
}

/* The cache entry's key of a task instance's latest success: its parts say
 * what changed when the next run misses. */
static char *last_key(const struct flow_exec *x, const struct flow_run *r)
{
	char *params = json_dumps(r->params, JSON_SORT_KEYS | JSON_COMPACT);
	char *k = xasprintf("last:%s/%s/%s", x->name, flow_task_name(x, r->task), params);
	free(params);
	return k;
}

/* {REF: [object keys]} of the objects the run fetches: their content
 * hashes are part of its cache key. */
static json_t *input_hashes(const json_t *fetch)
{
	json_t *h = json_object();
	size_t i;
	json_t *it;
	json_array_foreach (fetch, i, it)
		json_object_set(h, jv_str(it, "ref", ""), json_object_get(it, "keys"));
	return h;
}

static int outputs_present(struct blob_store *objects, const json_t *outputs)
{
	const char *k;
	json_t *o;
	struct blob_info info;
	json_object_foreach ((json_t *)outputs, k, o) {
		const char *key = jv_str(o, "key", NULL);
		if (key && objects && blob_stat(objects, key, &info) != 0)
			return 0;
	}
	return 1;
}

int flowcache_lookup(struct store *db, struct blob_store *objects, struct flow_exec *x,
                     struct flow_run *r, const json_t *rendered, const json_t *fetch,
                     int64_t now_ms)
{
	json_t *hashes = input_hashes(fetch);
	json_t *parts = flow_cache_parts(rendered, hashes, x->bundle);
	json_decref(hashes);
	json_decref(r->cache_parts);
	r->cache_parts = parts;
	text_printf(r->cache_key, sizeof(r->cache_key), "%s", jv_str(parts, "key", ""));
	if (x->no_cache) {
		text_printf(r->cache_note, sizeof(r->cache_note), "not read: run with --no-cache");
		return 0;
	}
	json_t *entry = store_get_cache(db, r->cache_key);
	int hit = 0;
	if (entry && outputs_present(objects, json_object_get(entry, "outputs"))) {
		text_printf(r->cache_note, sizeof(r->cache_note), "hit");
		flow_cached(x, r, json_object_get(entry, "outputs"), jv_int(entry, "exec", 0),
		            jv_int(entry, "run", 0), now_ms);
		hit = 1;
	} else if (entry) {
		text_printf(r->cache_note, sizeof(r->cache_note),
		            "miss: the outputs of run %lld are gone from the object store",
		            (long long)jv_int(entry, "run", 0));
	} else {
		char *lk = last_key(x, r);
		json_t *last = store_get_cache(db, lk);
		char why[160];
		if (last)
			flow_cache_why(json_object_get(last, "parts"), parts, why, sizeof(why));
		text_printf(r->cache_note, sizeof(r->cache_note), "miss: %s",
		            last ? why : "no earlier result");
		json_decref(last);
		free(lk);
	}
	json_decref(entry);
	return hit;
}

/* A success's outputs under its key, and its parts as the instance's last. */
void flowcache_record(struct store *db, const struct flow_exec *x, const struct flow_run *r,
                      int64_t now_ms)
{
	json_t *entry =
	        json_pack("{s:O,s:O,s:I,s:I,s:s,s:I}", "parts", r->cache_parts, "outputs",
	                  r->outputs, "exec", (json_int_t)x->id, "run", (json_int_t)r->id, "task",
	                  flow_task_name(x, r->task), "time_ms", (json_int_t)now_ms);
	char *lk = last_key(x, r);
	json_t *last = json_pack("{s:O}", "parts", r->cache_parts);
	if (store_put_cache(db, r->cache_key, entry) != 0 || store_put_cache(db, lk, last) != 0)
		log_warn("cannot record a cached result run=%lld", (long long)r->id);
	json_decref(entry);
	json_decref(last);
	free(lk);
}
