/* The field tables of proto/wire.h: what wire_set() and
 * wire_check() enforce, and that docs/api.md documents each table exactly:
 * every field of a table has its row in the doc's table for that record, and
 * every documented row is a field of the table. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "proto/wire.h"

#ifndef ANVIL_API_DOC
#error "tests/CMakeLists.txt passes ANVIL_API_DOC, the path of docs/api.md"
#endif

static const char *type_text(enum jv_type t)
{
	switch (t) {
	case JV_STRING: return "string";
	case JV_INT: return "integer";
	case JV_BOOL: return "bool";
	case JV_STRINGS: return "array of strings";
	case JV_OBJECT: return "object";
	case JV_STRING_MAP: return "object of strings";
	case JV_ARRAY: return "array";
	case JV_NUMBER: return "number";
	}
	return "?";
}

/* How the doc writes a field's bounds: the table's min and max, in words. */
static void bounds_text(const struct wire_field *f, char *out, size_t n)
{
	long long lo = (long long)f->min, hi = (long long)f->max;
	switch (f->type) {
	case JV_INT:
		if (f->min == INT64_MIN && f->max == INT64_MAX)
			snprintf(out, n, "any");
		else if (f->max == INT64_MAX)
			snprintf(out, n, "≥ %lld", lo);
		else
			snprintf(out, n, "%lld–%lld", lo, hi);
		return;
	case JV_STRING:
		if (hi > 0)
			snprintf(out, n, lo > 0 ? "1–%lld characters" : "≤ %lld characters", hi);
		else
			snprintf(out, n, lo > 0 ? "non-empty" : "any");
		return;
	case JV_STRINGS:
	case JV_ARRAY:
		if (hi > 0 && lo > 0)
			snprintf(out, n, "%lld–%lld entries", lo, hi);
		else if (hi > 0)
			snprintf(out, n, "≤ %lld entries", hi);
		else if (lo > 0)
			snprintf(out, n, "≥ %lld entries", lo);
		else
			snprintf(out, n, "any");
		return;
	case JV_STRING_MAP: snprintf(out, n, hi > 0 ? "≤ %lld entries" : "any", hi); return;
	case JV_NUMBER: snprintf(out, n, "%g–%g", (double)lo / 1000, (double)hi / 1000); return;
	case JV_OBJECT:
	case JV_BOOL: snprintf(out, n, "—"); return;
	}
}

static void row_text(const struct wire_field *f, char *out, size_t n)
{
	char bounds[64];
	bounds_text(f, bounds, sizeof(bounds));
	snprintf(out, n, "| `%s` | %s | %s | %s | %s |", f->name, type_text(f->type),
	         f->required ? "yes" : "no", bounds, f->meaning);
}

static char *read_doc(void)
{
	FILE *fp = fopen(ANVIL_API_DOC, "r");
	if (!fp)
		FAIL_AT("cannot open %s", ANVIL_API_DOC);
	char *text = xcalloc(1, 1 << 20);
	size_t len = fread(text, 1, (1 << 20) - 1, fp);
	fclose(fp);
	CHECK(len > 0 && len < (1 << 20) - 1);
	return text;
}

/* The field name of a doc row ("| `name` | ..."), into out; 0 if none. */
static int row_name(const char *line, size_t len, char *out, size_t n)
{
	const char *a = memchr(line, '`', len);
	const char *b = a ? memchr(a + 1, '`', len - (size_t)(a + 1 - line)) : NULL;
	if (!a || !b || (size_t)(b - a - 1) >= n)
		return 0;
	snprintf(out, n, "%.*s", (int)(b - a - 1), a + 1);
	return 1;
}

/* Compares r with the table that follows <!-- wire:NAME --> in the doc;
 * returns how many mismatches it printed. */
static int compare_record(const char *doc, const struct wire_record *r)
{
	char marker[96], want[512], name[64];
	int bad = 0;
	snprintf(marker, sizeof(marker), "<!-- wire:%s -->\n", r->name);
	const char *p = strstr(doc, marker);
	if (!p) {
		fprintf(stderr, "docs/api.md: no '%.*s' before the table of record '%s'\n",
		        (int)strlen(marker) - 1, marker, r->name);
		return 1;
	}
	p += strlen(marker);
	const char *rows[WIRE_MAX_FIELDS * 2];
	size_t lens[WIRE_MAX_FIELDS * 2];
	int nrows = 0;
	for (int line = 0; *p == '|'; line++) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		if (line >= 2 && nrows < WIRE_MAX_FIELDS * 2) { /* past header and rule */
			rows[nrows] = p;
			lens[nrows++] = len;
		}
		p += len + (eol ? 1 : 0);
	}
	for (const struct wire_field *f = r->fields; f->name; f++) {
		row_text(f, want, sizeof(want));
		int found = 0;
		for (int i = 0; i < nrows && !found; i++) {
			if (!row_name(rows[i], lens[i], name, sizeof(name)) ||
			    strcmp(name, f->name) != 0)
				continue;
			found = 1;
			if (lens[i] != strlen(want) || memcmp(rows[i], want, lens[i]) != 0) {
				fprintf(stderr,
				        "%s.%s: docs/api.md has\n  %.*s\nthe table says\n  %s\n",
				        r->name, f->name, (int)lens[i], rows[i], want);
				bad++;
			}
		}
		if (!found) {
			fprintf(stderr, "%s.%s: missing from docs/api.md; its row:\n  %s\n",
			        r->name, f->name, want);
			bad++;
		}
	}
	for (int i = 0; i < nrows; i++) {
		if (!row_name(rows[i], lens[i], name, sizeof(name)) || !wire_field(r, name)) {
			fprintf(stderr,
			        "%s: docs/api.md documents a field the table lacks:\n  %.*s\n",
			        r->name, (int)lens[i], rows[i]);
			bad++;
		}
	}
	return bad;
}

TEST(api_doc_documents_every_table_exactly)
{
	char *doc = read_doc();
	int bad = 0;
	for (int i = 0; wire_records[i]; i++)
		bad += compare_record(doc, wire_records[i]);
	free(doc);
	CHECK_INT(bad, 0);
}

TEST(tables_are_well_formed)
{
	for (int i = 0; wire_records[i]; i++) {
		int n = 0;
		for (const struct wire_field *f = wire_records[i]->fields; f->name; f++, n++) {
			CHECK(f->meaning && *f->meaning && !strchr(f->meaning, '|'));
			CHECK(f->min <= f->max || f->max == 0);
			CHECK(wire_field(wire_records[i], f->name) == f); /* no duplicates */
		}
		CHECK(n > 0 && n <= WIRE_MAX_FIELDS);
	}
}

TEST(check_enforces_the_tables_bounds)
{
	char err[256];
	json_t *o = json_pack("{s:i,s:i,s:s}", "attempt_id", 9, "rank", 1023, "state", "running");
	CHECK_INT(wire_check(o, &wire_report, err, sizeof(err)), 0);
	json_object_set_new(o, "rank", json_integer(1024));
	CHECK_INT(wire_check(o, &wire_report, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'rank': 1024 is above the maximum 1023");
	json_object_set_new(o, "rank", json_integer(0));
	json_object_set_new(o, "colour", json_string("red"));
	CHECK_INT(wire_check(o, &wire_report, err, sizeof(err)), ERR_INVALID);
	/* ... which a consumer that tolerates newer peers drops first */
	json_t *known = wire_known(o, &wire_report);
	CHECK_INT(wire_check(known, &wire_report, err, sizeof(err)), 0);
	json_decref(known);
	json_t *body = json_pack("{s:i,s:[O]}", "node_id", 1, "ranks", o);
	json_array_append_new(json_object_get(body, "ranks"), json_string("x"));
	CHECK_INT(wire_check_each(body, "ranks", &wire_report, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "ranks[0]: field 'colour': unknown field");
	json_decref(body);
	json_decref(o);
}

/* The submission's table holds what the server has always enforced,
 * "cpus" (a number, not an integer) included, with the same messages. */
TEST(submit_table_checks_a_job_body)
{
	char err[256];
	json_t *o =
	        json_pack("{s:[s,s],s:i,s:f,s:{s:s},s:[s],s:s}", "command", "sh", "-c", "gpus", 2,
	                  "cpus", 0.5, "env", "LR", "3e-4", "exported", "LR", "cwd", "/data");
	CHECK_INT(wire_check(o, &wire_submit, err, sizeof(err)), 0);
	json_object_set_new(o, "cpus", json_real(0.001));
	CHECK_INT(wire_check(o, &wire_submit, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'cpus': 0.001 is below the minimum 0.01");
	json_object_set_new(o, "cpus", json_integer(4));
	json_object_set_new(o, "gpus", json_integer(WIRE_MAX_GPUS + 1));
	CHECK_INT(wire_check(o, &wire_submit, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'gpus': 65 is above the maximum 64");
	json_object_del(o, "gpus");
	json_object_set_new(o, "exported", json_string("LR"));
	CHECK_INT(wire_check(o, &wire_submit, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'exported': \"LR\" is not an array of strings");
	json_object_del(o, "exported");
	json_object_del(o, "command");
	CHECK_INT(wire_check(o, &wire_submit, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'command': required");
	json_decref(o);
}

/* The register body is the facts with "name" required: one table for the
 * fields they share, checked and built as one record. */
TEST(register_is_the_facts_with_name_required)
{
	char err[256];
	CHECK(wire_field(&wire_register, "gpus") == wire_field(&wire_facts, "gpus"));
	CHECK_INT(wire_field(&wire_register, "name")->required, 1);
	CHECK_INT(wire_field(&wire_facts, "name")->required, 0);
	CHECK(wire_field(&wire_register, "colour") == NULL);
	json_t *o = json_pack("{s:s,s:i,s:[{s:i,s:s}]}", "hostname", "box", "cpus", 8, "gpus",
	                      "index", 0, "uuid", "GPU-1");
	CHECK_INT(wire_check(o, &wire_facts, err, sizeof(err)), 0);
	CHECK_INT(wire_check(o, &wire_register, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'name': required");
	wire_set(o, &wire_register, "name", json_string("node-1"));
	CHECK_INT(wire_check(o, &wire_register, err, sizeof(err)), 0);
	/* the base's bounds hold in the record built on it */
	json_object_set_new(o, "cpus", json_integer(-1));
	CHECK_INT(wire_check(o, &wire_register, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'cpus': -1 is below the minimum 0");
	json_object_set_new(o, "colour", json_string("red"));
	json_t *known = wire_known(o, &wire_register);
	CHECK_INT(json_object_size(known), 4);
	CHECK(json_object_get(known, "name") && json_object_get(known, "gpus"));
	json_decref(known);
	/* the entries are records of their own */
	json_object_set_new(json_array_get(json_object_get(o, "gpus"), 0), "links",
	                    json_string("NV"));
	CHECK_INT(wire_check_each(o, "gpus", &wire_gpu, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "gpus[0]: field 'links': \"NV\" is not an array of strings");
	json_decref(o);
	o = json_pack("{s:[{s:s}]}", "rdma", "dev", "mlx5_0");
	CHECK_INT(wire_check_each(o, "rdma", &wire_rdma_port, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "rdma[0]: field 'port': required");
	json_decref(o);
}

/* The health report and its three kinds of entries, as the agent's GPU
 * watcher sends them. */
TEST(health_tables_check_a_report)
{
	char err[256];
	json_t *h = json_pack("{s:[{s:i,s:s},{s:i,s:s,s:s,s:s,s:I}],s:n,s:[{s:I,s:i,s:s,s:s,s:s,"
	                      "s:I,s:b}]}",
	                      "gpus", "index", 0, "state", "healthy", "index", 1, "state",
	                      "quarantined", "code", "xid-48", "reason", "XID 48 on GPU 1",
	                      "since_ms", (json_int_t)1790000000000, "node", "findings", "seq",
	                      (json_int_t)1790000000001, "gpu", 1, "scope", "gpu", "code", "xid-48",
	                      "reason", "XID 48 on GPU 1", "wall_ms", (json_int_t)1790000000000,
	                      "counted", 1);
	CHECK(h != NULL);
	CHECK_INT(wire_check(h, &wire_health, err, sizeof(err)), 0);
	CHECK_INT(wire_check_each(h, "gpus", &wire_gpu_health, err, sizeof(err)), 0);
	CHECK_INT(wire_check_each(h, "findings", &wire_finding, err, sizeof(err)), 0);
	json_t *nf = json_pack("{s:s,s:s}", "code", "gpu-lost", "reason", "");
	CHECK_INT(wire_check(nf, &wire_node_fault, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'reason': must not be empty");
	json_decref(nf);
	json_object_set_new(json_array_get(json_object_get(h, "findings"), 0), "seq",
	                    json_integer(0));
	CHECK_INT(wire_check_each(h, "findings", &wire_finding, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "findings[0]: field 'seq': 0 is below the minimum 1");
	json_object_set_new(json_array_get(json_object_get(h, "gpus"), 1), "index",
	                    json_integer(64));
	CHECK_INT(wire_check_each(h, "gpus", &wire_gpu_health, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "gpus[1]: field 'index': 64 is above the maximum 63");
	json_decref(h);
}

/* Runs set in a child; whether it was aborted. */
static int aborts(void (*set)(void))
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		freopen("/dev/null", "w", stderr);
		set();
		_exit(0);
	}
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void set_unknown(void)
{
	json_t *o = json_object();
	wire_set(o, &wire_desired, "colour", json_string("red"));
	json_decref(o);
}

static void set_wrong_type(void)
{
	json_t *o = json_object();
	wire_set(o, &wire_desired, "rank", json_string("0"));
	json_decref(o);
}

static void set_null_required(void)
{
	json_t *o = json_object();
	wire_set(o, &wire_desired, "command", json_null());
	json_decref(o);
}

static void set_fine(void)
{
	json_t *o = json_object();
	wire_set(o, &wire_desired, "rank", json_integer(0));
	wire_set(o, &wire_desired, "cwd", json_null());
	json_decref(o);
}

TEST(set_refuses_what_the_table_does_not_describe)
{
	CHECK(aborts(set_unknown));
	CHECK(aborts(set_wrong_type));
	CHECK(aborts(set_null_required));
	CHECK(!aborts(set_fine));
}

static void set_unknown_in_base(void)
{
	json_t *o = json_object();
	wire_set(o, &wire_register, "colour", json_string("red"));
	json_decref(o);
}

static void set_wrong_type_in_base(void)
{
	json_t *o = json_object();
	wire_set(o, &wire_register, "cpus", json_string("8"));
	json_decref(o);
}

static void set_base_fields(void)
{
	json_t *o = json_object();
	wire_set(o, &wire_register, "name", json_string("node-1"));
	wire_set(o, &wire_register, "hostname", json_string("box"));
	json_decref(o);
}

/* A record built on a base sets the base's fields with their types. */
TEST(set_knows_the_base_records_fields)
{
	CHECK(aborts(set_unknown_in_base));
	CHECK(aborts(set_wrong_type_in_base));
	CHECK(!aborts(set_base_fields));
}

TEST_MAIN()
