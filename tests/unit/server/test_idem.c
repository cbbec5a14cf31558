/* Idempotency-Keys (server/idem.h): what a key may be, what tells two
 * requests and two senders apart, and the records through the state:
 * written with the jobs they made, in the same transaction, found again
 * after a restart, gone once expired. */
#include <string.h>

#include "../store/sql_int.h"
#include "base/err.h"
#include "base/hash.h"
#include "server/idem.h"
#include "state_fixture.h"

static const char job_body[] = "{\"command\": [\"true\"], \"gpus\": 1}";

static void check_refused(const char *key, const char *why)
{
	char err[256] = "";
	CHECK_INT(idem_key_check(key, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "header 'Idempotency-Key'");
	CHECK_CONTAINS(err, why);
}

TEST(keys_are_printable_and_capped)
{
	char err[256];
	CHECK_INT(idem_key_check("a", err, sizeof(err)), 0);
	CHECK_INT(idem_key_check("job-2024-06-01T12:00:00Z/run_7.~x", err, sizeof(err)), 0);
	char longest[IDEM_KEY_MAX + 2];
	memset(longest, 'k', IDEM_KEY_MAX);
	longest[IDEM_KEY_MAX] = '\0';
	CHECK_INT(idem_key_check(longest, err, sizeof(err)), 0);
	longest[IDEM_KEY_MAX] = 'k';
	longest[IDEM_KEY_MAX + 1] = '\0';
	check_refused(longest, "256 bytes, longer than 255");
	check_refused("", "empty");
	check_refused("ab\x01"
	              "c",
	              "byte 0x01 at 2");
	check_refused("two words", "byte 0x20 at 3");
	check_refused("caf\xc3\xa9", "byte 0xc3 at 3");
	/* the value is shown back without what could drive a terminal */
	char err2[256];
	idem_key_check("x\x1b[2Jy", err2, sizeof(err2));
	CHECK(strchr(err2, '\x1b') == NULL);
	CHECK_CONTAINS(err2, "'x?[2Jy'");
}

TEST(digest_tells_method_path_and_body_apart)
{
	char a[65], b[65], body1[65], body2[65];
	hash_sha256("{\"gpus\":1}", 10, body1);
	hash_sha256("{\"gpus\":2}", 10, body2);
	idem_digest("POST", "/v1/jobs", body1, a);
	idem_digest("POST", "/v1/jobs", body1, b);
	CHECK_STR(a, b);
	CHECK(hash_hex_ok(a));
	idem_digest("POST", "/v1/jobs", body2, b);
	CHECK(strcmp(a, b) != 0);
	idem_digest("POST", "/v1/workflows", body1, b);
	CHECK(strcmp(a, b) != 0);
	idem_digest("PUT", "/v1/jobs", body1, b);
	CHECK(strcmp(a, b) != 0);
	char s1[65], s2[65];
	idem_scope("Bearer alice", s1);
	idem_scope("Bearer bob", s2);
	CHECK(strcmp(s1, s2) != 0);
	CHECK(strstr(s1, "alice") == NULL); /* a hash, never the token */
}

static struct store_idem key_of(const char *scope, const char *key)
{
	struct store_idem r = {0};
	idem_scope(scope, r.scope);
	snprintf(r.key, sizeof(r.key), "%s", key);
	char body[65];
	hash_sha256(job_body, strlen(job_body), body);
	idem_digest("POST", "/v1/jobs", body, r.digest);
	return r;
}

static int rows(struct sfx *f, const char *sql, const char *arg)
{
	return sql_int(f->db, sql, arg);
}

/* The key is in the database with the job, before the handler's flush,
 * naming it; the flush adds the answer; a restart finds both. */
TEST(submission_writes_its_key_with_its_jobs)
{
	struct sfx *f = sfx_open(1, 2);
	struct store_idem k = key_of("Bearer admin", "k-1");
	json_t *body = sfx_json(job_body);
	struct job *j = NULL;
	char err[256] = "";
	CHECK_INT(state_submit_keyed(&f->st, body, &k, &j, err, sizeof(err)), 0);
	json_decref(body);
	/* no flush yet: what jobs_admit committed */
	CHECK_INT(rows(f, "SELECT count(*) FROM jobs", NULL), 1);
	CHECK_INT(rows(f,
	               "SELECT count(*) FROM idempotency WHERE key = ?1 AND ref = 'job:1' AND "
	               "body IS NULL AND status = 0",
	               "k-1"),
	          1);
	struct store_idem got;
	CHECK_INT(state_idem_find(&f->st, k.scope, "k-1", &got), 0);
	CHECK_STR(got.ref, "job:1");
	CHECK(got.body == NULL);
	CHECK_STR(got.digest, k.digest);
	/* the handler's answer: pending, found, then written by the flush */
	struct store_idem answer = k;
	answer.status = 201;
	answer.body = "{\"job\":{\"id\":1}}";
	state_idem_add(&f->st, &answer);
	CHECK_INT(state_idem_find(&f->st, k.scope, "k-1", &got), 0);
	CHECK_STR(got.body, "{\"job\":{\"id\":1}}");
	free(got.body);
	sfx_flush(f);
	CHECK_INT(rows(f,
	               "SELECT count(*) FROM idempotency WHERE key = ?1 AND status = 201 AND "
	               "body = '{\"job\":{\"id\":1}}'",
	               "k-1"),
	          1);
	sfx_restart(f);
	CHECK_INT(state_idem_find(&f->st, k.scope, "k-1", &got), 0);
	CHECK_INT(got.status, 201);
	CHECK_STR(got.body, "{\"job\":{\"id\":1}}");
	free(got.body);
	/* another sender's key of the same name is not this one */
	struct store_idem other = key_of("Bearer someone else", "k-1");
	CHECK_INT(state_idem_find(&f->st, other.scope, "k-1", &got), ERR_NOTFOUND);
	sfx_close(f);
}

/* A refused submission remembers no key: its repeat is judged again. */
TEST(refused_submission_keeps_no_key)
{
	struct sfx *f = sfx_open(1, 2);
	struct store_idem k = key_of("Bearer admin", "k-2");
	json_t *body = sfx_json("{\"command\": [\"true\"], \"gpus\": 64}");
	struct job *j = NULL;
	char err[256] = "";
	CHECK(state_submit_keyed(&f->st, body, &k, &j, err, sizeof(err)) != 0);
	json_decref(body);
	sfx_flush(f);
	struct store_idem got;
	CHECK_INT(state_idem_find(&f->st, k.scope, "k-2", &got), ERR_NOTFOUND);
	CHECK_INT(rows(f, "SELECT count(*) FROM idempotency", NULL), 0);
	/* and the next submission without a key records none either */
	sfx_submit(f, job_body);
	CHECK_INT(rows(f, "SELECT count(*) FROM idempotency", NULL), 0);
	sfx_close(f);
}

/* Past idem_keep_ms a key is gone at once, and the housekeeping's prune
 * removes its row; a younger one stays. */
TEST(keys_expire_and_are_pruned)
{
	struct sfx *f = sfx_open(0, 0);
	f->st.config.idem_keep_ms = 60000;
	struct store_idem old = key_of("Bearer admin", "old");
	old.status = 201;
	old.body = "{}";
	old.created_ms = wall_ms() - 61000;
	struct store_idem young = key_of("Bearer admin", "young");
	young.status = 201;
	young.body = "{}";
	state_idem_add(&f->st, &old);
	state_idem_add(&f->st, &young);
	sfx_flush(f);
	CHECK_INT(rows(f, "SELECT count(*) FROM idempotency", NULL), 2);
	struct store_idem got;
	CHECK_INT(state_idem_find(&f->st, old.scope, "old", &got), ERR_NOTFOUND);
	CHECK_INT(state_idem_find(&f->st, young.scope, "young", &got), 0);
	free(got.body);
	state_idem_prune(&f->st);
	CHECK_INT(rows(f, "SELECT count(*) FROM idempotency WHERE key = ?1", "old"), 0);
	CHECK_INT(rows(f, "SELECT count(*) FROM idempotency WHERE key = ?1", "young"), 1);
	/* an expired key may name a new create: its record replaces the old */
	old.created_ms = 0;
	old.body = "{\"new\":true}";
	state_idem_add(&f->st, &old);
	sfx_flush(f);
	CHECK_INT(state_idem_find(&f->st, old.scope, "old", &got), 0);
	CHECK_STR(got.body, "{\"new\":true}");
	free(got.body);
	sfx_close(f);
}

TEST_MAIN()
