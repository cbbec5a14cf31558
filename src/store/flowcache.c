/* flowcache.c - the task cache over a state database and an object store
 * (flowcache.h). */
#include "store/flowcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/tarball.h"
#include "base/util.h"
#include "flow/codeset.h"
#include "flow/run.h"
#include "objstore/blob.h"

int flowcache_enabled(const json_t *task)
{
	return flow_cache_on(task);
}

/* ---- a bundle's index ---- */

/* "index/<hex>" of a bundle "sha256/<hex>"; NULL for another key. */
static char *index_name(const char *bundle)
{
	if (strncmp(bundle, "sha256/", 7) != 0 || strlen(bundle) != 71)
		return NULL;
	return xasprintf("index/%s", bundle + 7);
}

/* The index stored for bundle, or NULL. */
static json_t *stored_index(struct blob_store *objects, const char *bundle)
{
	char *name = index_name(bundle);
	int fd = -1;
	struct blob_info info;
	json_t *doc = NULL, *files = NULL;
	if (name && blob_read_fd(objects, name, &fd, &info) == 0) {
		json_error_t je;
		doc = json_loadfd(fd, 0, &je);
		close(fd);
	}
	if (doc && strcmp(jv_str(doc, "bundle", ""), bundle) == 0 &&
	    json_is_object(json_object_get(doc, "files")))
		files = json_incref(json_object_get(doc, "files"));
	json_decref(doc);
	free(name);
	return files;
}

/* The bundle's index, made from its archive and stored. */
static int make_index(struct blob_store *objects, const char *bundle, json_t **out, char *err,
                      size_t errlen)
{
	char *name = index_name(bundle);
	if (!name)
		return snprintf(err, errlen, "'%s' is not a content key", bundle), ERR_INVALID;
	int fd = -1;
	struct blob_info info;
	char why[600];
	json_t *files = NULL;
	int rc = blob_read_fd(objects, bundle, &fd, &info);
	if (rc)
		snprintf(err, errlen, "cannot read %s: %s", bundle, err_msg(rc));
	else if ((rc = tarball_index(fd, &files, why, sizeof(why))))
		snprintf(err, errlen, "%s: %s", bundle, why);
	if (fd >= 0)
		close(fd);
	if (rc == 0) {
		json_t *doc = json_pack("{s:s,s:O}", "bundle", bundle, "files", files);
		char *text = json_dumps(doc, JSON_SORT_KEYS | JSON_COMPACT);
		/* two makers of one index store the same bytes */
		struct blob_info stored;
		if (blob_put_named(objects, name, text, strlen(text), &stored) != 0)
			log_warn("cannot store the index of a bundle bundle=%s", bundle);
		free(text);
		json_decref(doc);
		*out = files;
	}
	free(name);
	return rc;
}

int flowcache_index_prepare(struct blob_store *objects, const char *bundle, char *err,
                            size_t errlen)
{
	json_t *files = stored_index(objects, bundle);
	int rc = files ? 0 : make_index(objects, bundle, &files, err, errlen);
	json_decref(files);
	return rc;
}

const json_t *flowcache_index(struct blob_store *objects, struct flow_exec *x)
{
	if (x->code_index || x->code_index_failed || !x->bundle[0] || !objects)
		return x->code_index;
	x->code_index = stored_index(objects, x->bundle);
	char err[700];
	if (!x->code_index && make_index(objects, x->bundle, &x->code_index, err, sizeof(err))) {
		log_warn("a code bundle cannot be indexed: its tasks' cache compares whole bundles "
		         "exec=%lld why=\"%s\"",
		         (long long)x->id, err);
		x->code_index_failed = 1;
	}
	if (x->code_index)
		codeset_add_listings(x->code_index);
	return x->code_index;
}

/* ---- keys ---- */

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

/* What the key says of the code (flow_cache_parts' code), and for
 * declared paths their view in x's bundle (*declared; NULL otherwise). */
static json_t *code_part(struct blob_store *objects, struct flow_exec *x, const json_t *task,
                         json_t **declared)
{
	*declared = NULL;
	enum flow_code by = flow_cache_code(task);
	const json_t *index = by == FLOW_CODE_PATHS ? flowcache_index(objects, x) : NULL;
	if (!x->bundle[0] || by == FLOW_CODE_BUNDLE || (by == FLOW_CODE_PATHS && !index))
		return json_pack("{s:s}", "bundle", x->bundle);
	if (by == FLOW_CODE_READS)
		return json_pack("{s:b}", "reads", 1);
	const json_t *paths = json_object_get(json_object_get(task, "cache"), "code");
	*declared = codeset_declared(index, paths);
	return json_pack("{s:O,s:O}", "paths", paths, "view", *declared);
}

/* ---- lookups ---- */

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

/* Whether x's code is what result depended on: the files of its view, the
 * same in x's bundle; or its whole bundle; or, without either, the key's
 * code part alone. */
static int code_matches(struct blob_store *objects, struct flow_exec *x, const json_t *result)
{
	const json_t *view = json_object_get(result, "view");
	const char *bundle = jv_str(result, "bundle", NULL);
	if (view) {
		const json_t *index = flowcache_index(objects, x);
		json_t *now = index ? codeset_view(index, view) : NULL;
		int same = now && json_equal(now, view);
		json_decref(now);
		return same;
	}
	return !bundle || strcmp(bundle, x->bundle) == 0;
}

/* The entry's first result that x's code matches and whose outputs are
 * in the store; *gone: the run of one that matched but whose outputs are
 * not. */
static const json_t *find_result(struct blob_store *objects, struct flow_exec *x,
                                 const json_t *entry, int64_t *gone)
{
	size_t i;
	json_t *res;
	*gone = 0;
	json_array_foreach (json_object_get(entry, "results"), i, res) {
		if (!code_matches(objects, x, res))
			continue;
		if (outputs_present(objects, json_object_get(res, "outputs")))
			return res;
		if (!*gone)
			*gone = jv_int(res, "run", 0);
	}
	return NULL;
}

/* Why r misses, against its instance's last success. */
static void why_missed(struct store *db, struct blob_store *objects, struct flow_exec *x,
                       struct flow_run *r, const json_t *parts, const json_t *declared)
{
	char *lk = last_key(x, r);
	json_t *last = store_get_cache(db, lk);
	free(lk);
	if (!last) {
		text_printf(r->cache_note, sizeof(r->cache_note), "miss: no earlier result");
		return;
	}
	const json_t *was_view = json_object_get(last, "view");
	json_t *now_view = NULL;
	const char *by = jv_str(parts, "code_by", "");
	if (was_view && strcmp(by, jv_str(json_object_get(last, "parts"), "code_by", "")) == 0) {
		const json_t *index = flowcache_index(objects, x);
		if (declared)
			now_view = json_incref((json_t *)declared);
		else if (index && strcmp(by, "reads") == 0)
			now_view = codeset_view(index, was_view);
	}
	char why[400];
	flow_cache_why(json_object_get(last, "parts"), parts, now_view ? was_view : NULL, now_view,
	               why, sizeof(why));
	/* a result recorded without what it read depends on its whole bundle */
	if (strcmp(why, "nothing changed") == 0 && !now_view &&
	    strcmp(jv_str(last, "bundle", ""), x->bundle) != 0)
		text_printf(why, sizeof(why), "the code bundle changed");
	text_printf(r->cache_note, sizeof(r->cache_note), "miss: %s", why);
	json_decref(now_view);
	json_decref(last);
}

int flowcache_lookup(struct store *db, struct blob_store *objects, struct flow_exec *x,
                     struct flow_run *r, const json_t *rendered, const json_t *fetch,
                     int64_t now_ms)
{
	(void)rendered; /* the key is made of the task as written and its values */
	const json_t *task = flow_task(x, r->task);
	json_t *ctx = flow_context(x, r), *hashes = input_hashes(fetch), *declared = NULL;
	json_t *code = code_part(objects, x, task, &declared);
	json_t *parts = flow_cache_parts(task, ctx, hashes, code);
	json_decref(code);
	json_decref(hashes);
	json_decref(ctx);
	json_decref(r->cache_parts);
	r->cache_parts = parts;
	text_printf(r->cache_key, sizeof(r->cache_key), "%s", jv_str(parts, "key", ""));
	int hit = 0;
	if (x->no_cache) {
		text_printf(r->cache_note, sizeof(r->cache_note), "not read: run with --no-cache");
	} else {
		json_t *entry = store_get_cache(db, r->cache_key);
		int64_t gone = 0;
		const json_t *res = entry ? find_result(objects, x, entry, &gone) : NULL;
		if (res) {
			text_printf(r->cache_note, sizeof(r->cache_note), "hit");
			flow_cached(x, r, json_object_get(res, "outputs"), jv_int(res, "exec", 0),
			            jv_int(res, "run", 0), now_ms);
			hit = 1;
		} else if (gone) {
			text_printf(r->cache_note, sizeof(r->cache_note),
			            "miss: the outputs of run %lld are gone from the object store",
			            (long long)gone);
		} else {
			why_missed(db, objects, x, r, parts, declared);
		}
		json_decref(entry);
	}
	json_decref(declared);
	return hit;
}

/* ---- records ---- */

/* Whether two results depend on the same code (the newer replaces the
 * older). */
static int same_code(const json_t *a, const json_t *b)
{
	const json_t *va = json_object_get(a, "view"), *vb = json_object_get(b, "view");
	if (va || vb)
		return va && vb && json_equal(va, vb);
	return strcmp(jv_str(a, "bundle", ""), jv_str(b, "bundle", "")) == 0;
}

/* The entry under r's key with result first. */
static json_t *entry_with(struct store *db, const struct flow_run *r, json_t *result)
{
	json_t *old = store_get_cache(db, r->cache_key);
	json_t *results = json_array();
	json_array_append(results, result);
	size_t i;
	json_t *res;
	json_array_foreach (json_object_get(old, "results"), i, res)
		if (json_array_size(results) < FLOWCACHE_RESULTS && !same_code(res, result))
			json_array_append(results, res);
	json_decref(old);
	return json_pack("{s:O,s:o}", "parts", r->cache_parts, "results", results);
}

/* What r depended on of its bundle: the view of what it read (a task
 * keyed by its reads, when its wrapper reported them) or of what it
 * declares; NULL for neither. */
static json_t *view_of(struct blob_store *objects, struct flow_exec *x, const struct flow_run *r,
                       enum flow_code by)
{
	const json_t *index = x->bundle[0] ? flowcache_index(objects, x) : NULL;
	if (!index)
		return NULL;
	if (by == FLOW_CODE_READS && r->reads)
		return codeset_view(index, r->reads);
	if (by == FLOW_CODE_PATHS)
		return codeset_declared(
		        index,
		        json_object_get(json_object_get(flow_task(x, r->task), "cache"), "code"));
	return NULL;
}

void flowcache_record(struct store *db, struct blob_store *objects, struct flow_exec *x,
                      const struct flow_run *r, int64_t now_ms)
{
	enum flow_code by = flow_cache_code(flow_task(x, r->task));
	json_t *view = view_of(objects, x, r, by);
	json_t *result = json_pack("{s:O?,s:I,s:I,s:s,s:I}", "outputs", r->outputs, "exec",
	                           (json_int_t)x->id, "run", (json_int_t)r->id, "task",
	                           flow_task_name(x, r->task), "time_ms", (json_int_t)now_ms);
	if (by == FLOW_CODE_READS && view)
		json_object_set(result, "view", view);
	else if (by == FLOW_CODE_READS && x->bundle[0])
		json_object_set_new(result, "bundle", json_string(x->bundle));
	json_t *entry = entry_with(db, r, result);
	char *lk = last_key(x, r);
	json_t *last = json_pack("{s:O,s:s}", "parts", r->cache_parts, "bundle", x->bundle);
	if (view)
		json_object_set(last, "view", view);
	if (store_put_cache(db, r->cache_key, entry) != 0 || store_put_cache(db, lk, last) != 0)
		log_warn("cannot record a cached result run=%lld", (long long)r->id);
	json_decref(entry);
	json_decref(result);
	json_decref(last);
	json_decref(view);
	free(lk);
}
