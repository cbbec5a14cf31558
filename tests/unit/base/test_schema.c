/* base/schema.h: field tables, the YAML way's values, and errors written
 * where the YAML document says they were. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/schema.h"
#include "base/ydoc.h"

static const struct schema_field fields[] = {
        {"name", SCHEMA_NAME, 1, 0, 0}, {"count", SCHEMA_INT, 0, 1, 8},
        {"ratio", SCHEMA_NUM, 0, 0, 1}, {"label", SCHEMA_STR, 0, 1, 4},
        {"on", SCHEMA_BOOL, 0, 0, 0},   {"wait", SCHEMA_DURATION, 0, 1000, 3600000},
        {"any", SCHEMA_ANY, 0, 0, 0},   {NULL, 0, 0, 0, 0},
};

/* Checks the YAML text against fields; the errors as written. */
static const char *check(const char *yaml, char *out, size_t len)
{
	struct ydoc d;
	char err[256];
	if (ydoc_parse(yaml, strlen(yaml), &d, err, sizeof(err)))
		FAIL_AT("not YAML: %s", err);
	struct schema_errors *e = calloc(1, sizeof(*e));
	schema_fields(d.root, fields, "", e);
	schema_write("f.yaml", &d, e, out, len);
	free(e);
	ydoc_free(&d);
	return out;
}

TEST(every_error_of_a_table_where_it_was_written)
{
	char out[4096];
	check("count: 9\n"
	      "name: 'no spaces'\n"
	      "bogus: 1\n"
	      "ratio: x\n"
	      "label: toolong\n"
	      "on: 1\n"
	      "wait: 2h\n"
	      "any: [1]\n",
	      out, sizeof(out));
	CHECK_STR(out, "f.yaml:1:8: count: 9 is out of range: 1 to 8\n"
	               "f.yaml:2:7: name: 'no spaces' is not a name: 1 to 63 letters, digits, "
	               "'_' or '-'\n"
	               "f.yaml:3:1: bogus: unknown key 'bogus'\n"
	               "f.yaml:4:8: ratio: should be a number, not text\n"
	               "f.yaml:5:8: label: should be 1 to 4 characters long\n"
	               "f.yaml:6:5: on: should be a boolean, not an integer\n"
	               "f.yaml:7:7: wait: 2h is out of range: 1s to 1h\n");
	check("count: 2\n", out, sizeof(out));
	CHECK_STR(out, "f.yaml:1:1: 'name' is missing\n");
	check("[1, 2]\n", out, sizeof(out));
	CHECK_STR(out, "f.yaml:1:1: should be a mapping, not a list\n");
	check("name: a\nwait: soon\n", out, sizeof(out));
	CHECK_STR(out, "f.yaml:2:7: wait: 'soon' is not a duration like 90s, 10m or 2h\n");
}

TEST(sizes_and_durations_the_yaml_way)
{
	int64_t n;
	json_t *v = json_string("8Gi");
	CHECK_INT(schema_size(v, &n), 0);
	CHECK_INT(n, 8LL << 30);
	json_decref(v);
	v = json_string("1.5T");
	CHECK_INT(schema_size(v, &n), 0);
	CHECK_INT(n, 1500000000000LL);
	json_decref(v);
	v = json_string("8 GB");
	CHECK_INT(schema_size(v, &n), -1);
	json_decref(v);
	v = json_string("99999999999Ti"); /* past int64: refused, not wrapped */
	CHECK_INT(schema_size(v, &n), -1);
	json_decref(v);
	v = json_integer(90);
	CHECK_INT(schema_duration(v, &n), 0);
	CHECK_INT(n, 90000);
	json_decref(v);
	v = json_real(-1);
	CHECK_INT(schema_duration(v, &n), -1);
	json_decref(v);
	char t[32];
	schema_duration_text(7200000, t, sizeof(t));
	CHECK_STR(t, "2h");
	schema_duration_text(90000, t, sizeof(t));
	CHECK_STR(t, "90s");
	schema_duration_text(600000, t, sizeof(t));
	CHECK_STR(t, "10m");
	schema_duration_text(1500, t, sizeof(t));
	CHECK_STR(t, "1500ms");
}

TEST(too_many_errors_are_counted_not_kept)
{
	struct schema_errors *e = calloc(1, sizeof(*e));
	for (int i = 0; i < SCHEMA_MAX_ERRORS + 5; i++)
		schema_add(e, "x", "error %d", i);
	CHECK_INT(e->n, SCHEMA_MAX_ERRORS);
	CHECK_INT(e->dropped, 5);
	CHECK_INT(schema_count(e), SCHEMA_MAX_ERRORS + 5);
	struct ydoc d = {0};
	char out[32768];
	schema_write("f.yaml", &d, e, out, sizeof(out));
	CHECK_CONTAINS(out, "f.yaml:1:1: x: error 0\n");
	CHECK_CONTAINS(out, "f.yaml: 5 more errors not shown\n");
	free(e);
}

TEST_MAIN()
