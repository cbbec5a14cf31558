/* The join token's life (server/jointoken.h): its checks name why a token
 * is refused (none, another, rotated away, expired), its record survives
 * a restart, a token file without its record starts a new life, and a
 * rotation refuses the old token from then on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../test.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/util.h"
#include "server/jointoken.h"

#define HOUR (3600 * 1000LL)
#define T0   1700000000000LL /* a wall clock time */

static const char token[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static char *fresh_dir(void)
{
	static char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/anvil-test-join-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	return dir;
}

static void rm_dir(const char *dir)
{
	CHECK_INT(rm_rf(dir), 0);
}

static int check(const struct jointoken *t, const char *presented, int64_t now, char *why)
{
	why[0] = '\0';
	return jointoken_check(t, presented, now, why, 400);
}

TEST(check_names_why_a_token_is_refused)
{
	struct jointoken t = {.created_ms = T0, .expires_ms = T0 + 24 * HOUR};
	snprintf(t.token, sizeof(t.token), "%s", token);
	char why[400];
	CHECK_INT(check(&t, token, T0, why), 0);
	CHECK_INT(check(&t, token, T0 + 24 * HOUR - 1, why), 0);
	CHECK_INT(check(&t, token, T0 + 24 * HOUR, why), ERR_AUTH);
	CHECK_CONTAINS(why, "the join token expired at 2023-11-15 22:13:20 UTC");
	CHECK_CONTAINS(why, "anvil node token --rotate");
	CHECK_INT(check(&t, NULL, T0, why), ERR_AUTH);
	CHECK_CONTAINS(why, "register needs the cluster's join token");
	CHECK_INT(check(&t, "", T0, why), ERR_AUTH);
	CHECK_INT(check(&t, "0123456789abcdef", T0, why), ERR_AUTH);
	CHECK_CONTAINS(why, "is not the cluster's join token");
	t.expires_ms = 0; /* never */
	CHECK_INT(check(&t, token, INT64_MAX, why), 0);
}

TEST(json_view_says_expired)
{
	struct jointoken t = {.created_ms = T0, .expires_ms = T0 + HOUR};
	snprintf(t.token, sizeof(t.token), "%s", token);
	json_t *v = jointoken_json(&t, T0);
	CHECK_STR(json_string_value(json_object_get(v, "token")), token);
	CHECK_INT(json_integer_value(json_object_get(v, "expires_ms")), T0 + HOUR);
	CHECK(json_is_false(json_object_get(v, "expired")));
	json_decref(v);
	v = jointoken_json(&t, T0 + HOUR);
	CHECK(json_is_true(json_object_get(v, "expired")));
	json_decref(v);
	t.expires_ms = 0;
	v = jointoken_json(&t, T0 + 1000 * HOUR);
	CHECK(json_is_null(json_object_get(v, "expires_ms")));
	CHECK(json_is_false(json_object_get(v, "expired")));
	json_decref(v);
}

/* A new token gets its life from the TTL; a restart keeps it (it does not
 * start again), and the record file is 0600. */
TEST(load_records_the_life_and_keeps_it)
{
	char *dir = fresh_dir(), err[256];
	struct jointoken t;
	CHECK_INT(jointoken_load(dir, token, 24 * HOUR, T0, &t, err, sizeof(err)), 0);
	CHECK_INT(t.created_ms, T0);
	CHECK_INT(t.expires_ms, T0 + 24 * HOUR);
	char path[128];
	snprintf(path, sizeof(path), "%s/join.token.json", dir);
	struct stat sb;
	CHECK_INT(stat(path, &sb), 0);
	CHECK_INT(sb.st_mode & 0777, 0600);
	struct jointoken again;
	CHECK_INT(jointoken_load(dir, token, 1 * HOUR, T0 + 5 * HOUR, &again, err, sizeof(err)), 0);
	CHECK_INT(again.created_ms, T0);
	CHECK_INT(again.expires_ms, T0 + 24 * HOUR);
	char why[400];
	CHECK_INT(check(&again, token, T0 + 25 * HOUR, why), ERR_AUTH); /* expired across it */
	rm_dir(dir);
}

/* A token file an operator replaced (its record names another token)
 * starts a new life, and the one it replaced is refused as rotated. */
TEST(load_of_a_replaced_token_starts_again)
{
	char *dir = fresh_dir(), err[256], why[400];
	struct jointoken t;
	CHECK_INT(jointoken_load(dir, token, 24 * HOUR, T0, &t, err, sizeof(err)), 0);
	static const char other[] = "ffffffffffffffffffffffffffffffffffffffff";
	CHECK_INT(jointoken_load(dir, other, 0, T0 + 30 * HOUR, &t, err, sizeof(err)), 0);
	CHECK_STR(t.token, other);
	CHECK_INT(t.created_ms, T0 + 30 * HOUR);
	CHECK_INT(t.expires_ms, 0);
	CHECK_INT(check(&t, other, T0 + 1000 * HOUR, why), 0);
	CHECK_INT(check(&t, token, T0 + 31 * HOUR, why), ERR_AUTH);
	CHECK_CONTAINS(why, "was rotated at");
	rm_dir(dir);
}

TEST(load_refuses_a_damaged_record)
{
	char *dir = fresh_dir(), err[256] = "", path[128];
	snprintf(path, sizeof(path), "%s/join.token.json", dir);
	CHECK_INT(write_file_atomic(path, "{\"sha256\": 5}", 13, 0600), 0);
	struct jointoken t;
	memset(&t, 0x5a, sizeof(t));
	CHECK_INT(jointoken_load(dir, token, HOUR, T0, &t, err, sizeof(err)), ERR_INVALID);
	CHECK_CONTAINS(err, "is not a join token record");
	CHECK_INT((unsigned char)t.token[0], 0x5a); /* untouched */
	rm_dir(dir);
}

/* Rotation: a new token in join.token (0600), the old one refused as
 * rotated, the new one's life from the rotation; a restart agrees. */
TEST(rotate_refuses_the_old_token)
{
	char *dir = fresh_dir(), err[256], why[400];
	struct jointoken t;
	CHECK_INT(jointoken_load(dir, token, 24 * HOUR, T0, &t, err, sizeof(err)), 0);
	CHECK_INT(jointoken_rotate(dir, &t, 2 * HOUR, T0 + 48 * HOUR, err, sizeof(err)), 0);
	CHECK(strcmp(t.token, token) != 0);
	CHECK_INT((long long)strlen(t.token), 64);
	CHECK_INT(t.expires_ms, T0 + 50 * HOUR);
	CHECK_INT(check(&t, t.token, T0 + 49 * HOUR, why), 0);
	CHECK_INT(check(&t, token, T0 + 49 * HOUR, why), ERR_AUTH);
	CHECK_CONTAINS(why, "the join token was rotated at 2023-11-16 22:13:20 UTC");
	char path[128];
	snprintf(path, sizeof(path), "%s/join.token", dir);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file(path, 4096, &b), 0);
	CHECK_INT((long long)b.len, 65);
	CHECK(strncmp(b.data, t.token, 64) == 0);
	struct stat sb;
	CHECK_INT(stat(path, &sb), 0);
	CHECK_INT(sb.st_mode & 0777, 0600);
	buf_cleanup(&b);
	struct jointoken again;
	char current[JOINTOKEN_MAX + 1];
	snprintf(current, sizeof(current), "%s", t.token);
	CHECK_INT(jointoken_load(dir, current, 24 * HOUR, T0 + 49 * HOUR, &again, err, sizeof(err)),
	          0);
	CHECK_INT(again.expires_ms, T0 + 50 * HOUR);
	CHECK_INT(check(&again, token, T0 + 49 * HOUR, why), ERR_AUTH);
	CHECK_CONTAINS(why, "rotated");
	rm_dir(dir);
}

/* Only the newest JOINTOKEN_ROTATED rotated tokens are remembered; an
 * older one is just "not the join token". */
TEST(rotated_tokens_are_remembered_up_to_the_cap)
{
	char *dir = fresh_dir(), err[256], why[400];
	struct jointoken t;
	CHECK_INT(jointoken_load(dir, token, 0, T0, &t, err, sizeof(err)), 0);
	char first[JOINTOKEN_MAX + 1];
	snprintf(first, sizeof(first), "%s", t.token);
	for (int i = 0; i < JOINTOKEN_ROTATED; i++)
		CHECK_INT(jointoken_rotate(dir, &t, 0, T0 + i, err, sizeof(err)), 0);
	CHECK_INT(t.nrotated, JOINTOKEN_ROTATED);
	CHECK_INT(check(&t, first, T0, why), ERR_AUTH);
	CHECK_CONTAINS(why, "rotated");
	CHECK_INT(jointoken_rotate(dir, &t, 0, T0 + 100, err, sizeof(err)), 0);
	CHECK_INT(check(&t, first, T0, why), ERR_AUTH);
	CHECK_CONTAINS(why, "is not the cluster's join token");
	rm_dir(dir);
}

TEST_MAIN()
