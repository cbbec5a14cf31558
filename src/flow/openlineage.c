/* openlineage.c - an execution's lineage as OpenLineage run events
 * (openlineage.h). Pure. */
#include "flow/openlineage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/crypto_lazy.h"
#include "base/jv.h"
#include "base/mem.h"

/* The facets' schemas, at the versions whose fields are used here. A
 * facet of our own (the attempt's details) validates against the spec's
 * RunFacet, which allows any property. */
#define PARENT_URL                                                                                 \
	"https://openlineage.io/spec/facets/1-0-1/ParentRunFacet.json#/$defs/ParentRunFacet"
#define JOB_TYPE_URL                                                                               \
	"https://openlineage.io/spec/facets/2-0-2/JobTypeJobFacet.json#/$defs/JobTypeJobFacet"
#define VERSION_URL                                                                                \
	"https://openlineage.io/spec/facets/1-0-0/DatasetVersionDatasetFacet.json#/$defs/"         \
	"DatasetVersionDatasetFacet"
#define OUTPUT_STATS_URL                                                                           \
	"https://openlineage.io/spec/facets/1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/" \
	"OutputStatisticsOutputDatasetFacet"
#define RUN_FACET_URL "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunFacet"

void openlineage_uuid(const char *name, char out[37])
{
	/* RFC 4122's namespace for URLs, 6ba7b811-9dad-11d1-80b4-00c04fd430c8 */
	static const unsigned char url_ns[16] = {0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1,
	                                         0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8};
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx)
		abort();
	EVP_DigestInit_ex(ctx, EVP_sha1(), NULL);
	EVP_DigestUpdate(ctx, url_ns, sizeof(url_ns));
	EVP_DigestUpdate(ctx, name, strlen(name));
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	EVP_MD_CTX_free(ctx);
	md[6] = (unsigned char)((md[6] & 0x0f) | 0x50); /* version 5 */
	md[8] = (unsigned char)((md[8] & 0x3f) | 0x80); /* the RFC 4122 variant */
	int n = 0;
	for (int i = 0; i < 16; i++)
		n += snprintf(out + n, (size_t)(37 - n), "%s%02x",
		              i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", md[i]);
}

void openlineage_time(int64_t ms, char out[32])
{
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&secs, &tm);
	char date[24];
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, 32, "%s.%03dZ", date, (int)(ms % 1000));
}

/* ---- the parts of an event ---- */

struct ctx {
	const struct openlineage_opts *o;
	const char *workflow;
	int64_t exec;
	char exec_run[37];
	json_t *uris;   /* run node id -> [URI] it was given */
	json_t *events; /* the answer */
};

static json_t *facet(const struct ctx *c, const char *schema_url)
{
	return json_pack("{s:s,s:s}", "_producer", c->o->producer, "_schemaURL", schema_url);
}

static json_t *job(const struct ctx *c, const char *name, const char *type)
{
	json_t *jt = facet(c, JOB_TYPE_URL);
	json_object_set_new(jt, "processingType", json_string("BATCH"));
	json_object_set_new(jt, "integration", json_string("ANVIL"));
	json_object_set_new(jt, "jobType", json_string(type));
	return json_pack("{s:s,s:s,s:{s:o}}", "namespace", c->o->ns, "name", name, "facets",
	                 "jobType", jt);
}

static void emit(struct ctx *c, const char *type, int64_t ms, json_t *run, json_t *jb,
                 json_t *inputs, json_t *outputs)
{
	char when[32];
	openlineage_time(ms, when);
	json_array_append_new(c->events,
	                      json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:s,s:s}", "eventType", type,
	                                "eventTime", when, "run", run, "job", jb, "inputs", inputs,
	                                "outputs", outputs, "producer", c->o->producer, "schemaURL",
	                                OPENLINEAGE_SCHEMA_URL));
}

/* An object as a dataset: its key the name, its hash the version. */
static json_t *object_dataset(const struct ctx *c, const char *key, const json_t *info, int out)
{
	const char *hex = jv_str(info, "sha256", NULL);
	if (!hex || !*hex)
		hex = strncmp(key, "sha256/", 7) == 0 ? key + 7 : key;
	json_t *v = facet(c, VERSION_URL);
	json_object_set_new(v, "datasetVersion", json_string(hex));
	json_t *d = json_pack("{s:s,s:s,s:{s:o}}", "namespace", c->o->ns, "name", key, "facets",
	                      "version", v);
	if (out && json_is_integer(json_object_get(info, "size"))) {
		json_t *st = facet(c, OUTPUT_STATS_URL);
		json_object_set(st, "size", json_object_get(info, "size"));
		json_object_set_new(d, "outputFacets", json_pack("{s:o}", "outputStatistics", st));
	}
	return d;
}

static json_t *inputs_of(const struct ctx *c, const json_t *run)
{
	json_t *in = json_array();
	size_t i;
	const json_t *o;
	json_array_foreach (json_object_get(run, "objects"), i, o)
		if (json_string_length(json_object_get(o, "key")))
			json_array_append_new(in, object_dataset(c, jv_str(o, "key", ""), o, 0));
	json_array_foreach (json_object_get(c->uris, jv_str(run, "id", "")), i, o)
		json_array_append_new(in, json_pack("{s:s,s:O}", "namespace", c->o->ns, "name", o));
	return in;
}

static json_t *outputs_of(const struct ctx *c, const json_t *run)
{
	json_t *out = json_array();
	const char *k;
	json_t *o;
	json_object_foreach ((json_t *)json_object_get(run, "outputs"), k, o)
		if (json_string_length(json_object_get(o, "key")))
			json_array_append_new(out, object_dataset(c, jv_str(o, "key", ""), o, 1));
	return out;
}

/* ---- attempts ---- */

/* The event that ends an attempt in state s; NULL while it has not ended. */
static const char *end_type(const char *s)
{
	if (strcmp(s, "succeeded") == 0)
		return "COMPLETE";
	if (strcmp(s, "failed") == 0 || strcmp(s, "lost") == 0)
		return "FAIL";
	if (strcmp(s, "cancelled") == 0 || strcmp(s, "preempted") == 0)
		return "ABORT";
	return NULL;
}

/* The attempt's run: its id, the execution as its parent, and what it
 * ran where (a facet of ours). */
static json_t *attempt_run(const struct ctx *c, const json_t *run, const json_t *a)
{
	char *name = xasprintf("anvil://%s/executions/%lld/attempts/%lld", c->o->ns,
	                       (long long)c->exec, (long long)jv_int(a, "attempt", 0));
	char id[37];
	openlineage_uuid(name, id);
	free(name);
	json_t *parent = facet(c, PARENT_URL);
	json_object_set_new(parent, "run", json_pack("{s:s}", "runId", c->exec_run));
	json_object_set_new(parent, "job",
	                    json_pack("{s:s,s:s}", "namespace", c->o->ns, "name", c->workflow));
	json_t *mine = facet(c, RUN_FACET_URL);
	json_t *what = json_pack(
	        "{s:I,s:I,s:s,s:I,s:I,s:O?,s:O?,s:O?,s:O?,s:s}", "execution", (json_int_t)c->exec,
	        "run", (json_int_t)jv_int(run, "run", 0), "label", jv_str(run, "label", ""),
	        "attempt", (json_int_t)jv_int(a, "attempt", 0), "job",
	        (json_int_t)jv_int(a, "job", 0), "code", json_object_get(a, "code"), "command",
	        json_object_get(a, "command"), "nodes", json_object_get(a, "nodes"), "exitCode",
	        json_object_get(a, "exit_code"), "reason", jv_str(a, "reason", ""));
	json_object_update(mine, what);
	json_decref(what);
	return json_pack("{s:s,s:{s:o,s:o}}", "runId", id, "facets", "parent", parent, "anvil",
	                 mine);
}

static void attempt_events(struct ctx *c, const json_t *run, const json_t *a, int last)
{
	int64_t start = jv_int(a, "start_ms", 0), end = jv_int(a, "end_ms", 0);
	const char *type = end_type(jv_str(a, "state", ""));
	if (!start && !end)
		return;
	char *name = xasprintf("%s.%s", c->workflow, jv_str(run, "task", ""));
	emit(c, "START", start ? start : end, attempt_run(c, run, a), job(c, name, "TASK"),
	     inputs_of(c, run), json_array());
	if (type) {
		int made = last && strcmp(type, "COMPLETE") == 0 &&
		           strcmp(jv_str(run, "state", ""), "succeeded") == 0;
		emit(c, type, end ? end : start, attempt_run(c, run, a), job(c, name, "TASK"),
		     inputs_of(c, run), made ? outputs_of(c, run) : json_array());
	}
	free(name);
}

/* ---- the execution ---- */

static int by_run(const void *a, const void *b)
{
	int64_t x = jv_int(*(json_t *const *)a, "run", 0),
	        y = jv_int(*(json_t *const *)b, "run", 0);
	return (x > y) - (x < y);
}

/* The run nodes of the execution, in run order (borrowed). */
static json_t **exec_runs(const struct ctx *c, const json_t *graph, size_t *n)
{
	const json_t *nodes = json_object_get(graph, "nodes");
	json_t **v = xcalloc(json_array_size(nodes) + 1, sizeof(*v));
	size_t i;
	json_t *nd;
	*n = 0;
	json_array_foreach (nodes, i, nd)
		if (strcmp(jv_str(nd, "type", ""), "run") == 0 && jv_int(nd, "exec", 0) == c->exec)
			v[(*n)++] = nd;
	qsort(v, *n, sizeof(*v), by_run);
	return v;
}

/* {run node id: [URI]} from the graph's input edges. */
static json_t *uris_by_run(const json_t *graph)
{
	json_t *m = json_object();
	size_t i;
	const json_t *e;
	json_array_foreach (json_object_get(graph, "edges"), i, e) {
		const char *from = jv_str(e, "from", ""), *to = jv_str(e, "to", "");
		if (strcmp(jv_str(e, "kind", ""), "input") != 0 || strncmp(from, "input:", 6) != 0)
			continue;
		json_t *list = json_object_get(m, to);
		if (!list)
			json_object_set_new(m, to, list = json_array());
		json_array_append_new(list, json_string(from + 6));
	}
	return m;
}

static json_t *exec_run(const struct ctx *c, const json_t *x)
{
	json_t *mine = facet(c, RUN_FACET_URL);
	json_object_set_new(mine, "execution", json_integer(c->exec));
	json_object_set(mine, "code",
	                json_object_get(x, "bundle") ? json_object_get(x, "bundle") : json_null());
	return json_pack("{s:s,s:{s:o}}", "runId", c->exec_run, "facets", "anvil", mine);
}

json_t *openlineage_events(const json_t *graph, const struct openlineage_opts *o, char *err,
                           size_t errlen)
{
	const json_t *x = json_object_get(graph, "execution");
	if (!json_is_object(x)) {
		snprintf(err, errlen, "execution: the lineage graph is not an execution's");
		return NULL;
	}
	struct ctx c = {.o = o, .workflow = jv_str(x, "name", ""), .exec = jv_int(x, "id", 0)};
	char *name = xasprintf("anvil://%s/executions/%lld", o->ns, (long long)c.exec);
	openlineage_uuid(name, c.exec_run);
	free(name);
	c.uris = uris_by_run(graph);
	c.events = json_array();
	emit(&c, "START", jv_int(x, "submit_ms", 0), exec_run(&c, x), job(&c, c.workflow, "DAG"),
	     json_array(), json_array());
	size_t n;
	json_t **runs = exec_runs(&c, graph, &n);
	for (size_t i = 0; i < n; i++) {
		const json_t *attempts = json_object_get(runs[i], "attempts");
		size_t k, na = json_array_size(attempts);
		const json_t *a;
		json_array_foreach (attempts, k, a)
			attempt_events(&c, runs[i], a, k + 1 == na);
	}
	free(runs);
	const char *state = jv_str(x, "state", "");
	const char *type = strcmp(state, "succeeded") == 0   ? "COMPLETE"
	                   : strcmp(state, "failed") == 0    ? "FAIL"
	                   : strcmp(state, "cancelled") == 0 ? "ABORT"
	                                                     : NULL;
	if (type)
		emit(&c, type, jv_int(x, "end_ms", 0), exec_run(&c, x), job(&c, c.workflow, "DAG"),
		     json_array(), json_array());
	json_decref(c.uris);
	return c.events;
}
