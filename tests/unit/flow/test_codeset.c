/* flow/codeset.h: a task's view of a bundle holds the files it looked up
 * (null for one that was not there) and the listings it read; an edit to
 * another file leaves it as it was, an edit to one of its files, a file
 * appearing where it looked, or one added to a directory it listed does
 * not; declared paths cover everything under a directory; differences
 * are named; keys and paths from outside are checked. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../test_json.h"
#include "base/jv.h"
#include "flow/codeset.h"

/* A bundle: gen.py, train.py, lib/util.py, lib/io.py, a link. */
static json_t *bundle(const char *gen, const char *train)
{
	json_t *i = test_json("{\"\": \"d\", \"lib\": \"d\", \"lib/util.py\": \"f:u1\","
	                      " \"lib/io.py\": \"f:io1\", \"entry.py\": \"l:gen.py\"}");
	json_object_set_new(i, "gen.py", json_string(gen));
	json_object_set_new(i, "train.py", json_string(train));
	return i;
}

/* JSON of any kind from text (test_json takes objects only). */
static json_t *any(const char *text)
{
	json_error_t je;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
	if (!v)
		FAIL_AT("bad fixture %s: %s", text, je.text);
	return v;
}

static int same(const json_t *a, const json_t *b)
{
	return json_equal(a, b);
}

TEST(a_view_holds_what_was_looked_up_and_null_for_what_was_not_there)
{
	json_t *b1 = bundle("f:g1", "f:t1");
	json_t *keys = any("[\"gen.py\", \"lib/util.py\", \"json.py\", \"entry.py\", \"lib\"]");
	json_t *v = codeset_view(b1, keys);
	char *s = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT);
	CHECK_STR(s,
	          "{\"entry.py\":\"l:gen.py\",\"gen.py\":\"f:g1\",\"json.py\":null,\"lib\":\"d\","
	          "\"lib/util.py\":\"f:u1\"}");
	free(s);
	/* an earlier view's keys, seen again in the same bundle: the same view */
	json_t *again = codeset_view(b1, v);
	CHECK(same(v, again));
	json_decref(again);
	json_decref(v);
	json_decref(keys);
	json_decref(b1);
}

TEST(an_edit_to_a_file_not_read_keeps_the_view_an_edit_to_one_read_does_not)
{
	json_t *b1 = bundle("f:g1", "f:t1"), *b2 = bundle("f:g1", "f:t2"),
	       *b3 = bundle("f:g2", "f:t1");
	json_t *keys = any("[\"gen.py\", \"lib/util.py\"]");
	json_t *v1 = codeset_view(b1, keys);
	json_t *v2 = codeset_view(b2, v1), *v3 = codeset_view(b3, v1);
	CHECK(same(v1, v2)); /* train.py changed: not read */
	CHECK(!same(v1, v3));
	char out[200];
	CHECK_INT(codeset_diff(v1, v3, out, sizeof(out)), 1);
	CHECK_STR(out, "gen.py");
	CHECK_INT(codeset_diff(v1, v2, out, sizeof(out)), 0);
	CHECK_STR(out, "");
	/* a file that was looked for and is there now */
	json_t *absent = any("[\"json.py\"]");
	json_t *w1 = codeset_view(b1, absent);
	json_object_set_new(b2, "json.py", json_string("f:j"));
	json_t *w2 = codeset_view(b2, w1);
	CHECK_INT(codeset_diff(w1, w2, out, sizeof(out)), 1);
	CHECK_STR(out, "json.py (new)");
	json_decref(absent);
	json_decref(w1);
	json_decref(w2);
	json_decref(v1);
	json_decref(v2);
	json_decref(v3);
	json_decref(keys);
	json_decref(b1);
	json_decref(b2);
	json_decref(b3);
}

TEST(a_listing_changes_when_a_file_is_added_not_when_one_is_edited)
{
	json_t *b1 = bundle("f:g1", "f:t1"), *b2 = bundle("f:g1", "f:t1");
	json_t *keys = any("[\"lib/\", \"/\"]");
	json_t *v1 = codeset_view(b1, keys);
	CHECK(strncmp(jv_str(v1, "lib/", ""), "ls:", 3) == 0);
	CHECK(strncmp(jv_str(v1, "/", ""), "ls:", 3) == 0);
	json_object_set_new(b2, "lib/util.py", json_string("f:u2")); /* edited */
	json_t *v2 = codeset_view(b2, v1);
	CHECK(same(v1, v2));
	json_object_set_new(b2, "lib/new.py", json_string("f:n")); /* added */
	json_t *v3 = codeset_view(b2, v1);
	char out[200];
	CHECK_INT(codeset_diff(v1, v3, out, sizeof(out)), 1);
	CHECK_STR(out, "lib/ (files added or removed)");
	json_object_set_new(b2, "README", json_string("f:r")); /* at the top */
	json_t *v4 = codeset_view(b2, v1);
	CHECK_INT(codeset_diff(v1, v4, out, sizeof(out)), 2);
	CHECK_STR(out, "./ (files added or removed), lib/ (files added or removed)");
	/* the listings made once for the whole index are the same */
	codeset_add_listings(b2);
	CHECK_STR(jv_str(b2, "lib/", ""), jv_str(v3, "lib/", "x"));
	json_t *v5 = codeset_view(b2, v1);
	CHECK(same(v4, v5));
	json_decref(v5);
	json_decref(v1);
	json_decref(v2);
	json_decref(v3);
	json_decref(v4);
	json_decref(keys);
	json_decref(b1);
	json_decref(b2);
}

TEST(declared_paths_cover_every_file_under_a_directory)
{
	json_t *b1 = bundle("f:g1", "f:t1");
	json_t *paths = any("[\"gen.py\", \"lib/\", \"conf.yaml\"]");
	json_t *v1 = codeset_declared(b1, paths);
	char *s = json_dumps(v1, JSON_SORT_KEYS | JSON_COMPACT);
	CHECK_STR(s,
	          "{\"conf.yaml\":null,\"gen.py\":\"f:g1\",\"lib\":\"d\",\"lib/io.py\":\"f:io1\","
	          "\"lib/util.py\":\"f:u1\"}");
	free(s);
	json_t *b2 = bundle("f:g1", "f:t2");
	codeset_add_listings(b2); /* listings are not files under a directory */
	json_t *v2 = codeset_declared(b2, paths);
	CHECK(same(v1, v2)); /* train.py is not declared */
	json_object_set_new(b2, "lib/new.py", json_string("f:n"));
	json_object_del(b2, "lib/io.py");
	json_object_set_new(b2, "lib/util.py", json_string("f:u2"));
	json_t *v3 = codeset_declared(b2, paths);
	char out[200];
	CHECK_INT(codeset_diff(v1, v3, out, sizeof(out)), 3);
	CHECK_STR(out, "lib/io.py (gone), lib/new.py (new), lib/util.py");
	json_object_set_new(b2, "gen.py", json_string("f:g2"));
	json_object_set_new(b2, "conf.yaml", json_string("f:c"));
	json_t *v4 = codeset_declared(b2, paths);
	CHECK_INT(codeset_diff(v1, v4, out, sizeof(out)), 5);
	CHECK_STR(out, "conf.yaml (new), gen.py, lib/io.py (gone) and 2 more");
	json_decref(v1);
	json_decref(v2);
	json_decref(v3);
	json_decref(v4);
	json_decref(paths);
	json_decref(b1);
	json_decref(b2);
}

TEST(keys_and_declared_paths_are_checked)
{
	CHECK(codeset_key_why("gen.py") == NULL);
	CHECK(codeset_key_why("lib/") == NULL);
	CHECK(codeset_key_why("/") == NULL);
	CHECK_STR(codeset_key_why("/etc/passwd"),
	          "it is absolute: give it relative to the bundle's top");
	CHECK_STR(codeset_key_why("lib/../x"),
	          "it has a '.' or '..' part: write the path as the bundle holds it");
	CHECK_STR(codeset_key_why("a//b"), "it has an empty part ('//')");
	CHECK_STR(codeset_key_why(""), "it is empty");
	CHECK_STR(codeset_key_why("a\nb"), "it holds a control character");
	CHECK(codeset_key_why(NULL) != NULL);
	char long_path[CODESET_PATH_MAX + 2];
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[sizeof(long_path) - 1] = '\0';
	CHECK_STR(codeset_key_why(long_path), "it is longer than 1024 bytes");
	CHECK(codeset_path_why("lib/") == NULL);
	CHECK_STR(codeset_path_why("."), "it is the whole bundle: write 'code: bundle' for that");
	CHECK_STR(codeset_path_why("/"), "it is the whole bundle: write 'code: bundle' for that");
	CHECK_STR(codeset_path_why("./gen.py"),
	          "it has a '.' or '..' part: write the path as the bundle holds it");
}

TEST_MAIN()
