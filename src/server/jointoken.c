/* jointoken.c - the join token's life: its record, rotation and expiry
 * (jointoken.h). */
#include "server/jointoken.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"

#define RECORD_MAX 16384 /* bytes of join.token.json read */

static void hex_of(const char *token, char out[HASH_HEX_LEN + 1])
{
	hash_sha256(token, strlen(token), out);
}

/* "2024-05-01 12:00:00 UTC" */
static void when_text(int64_t ms, char *out, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	if (!gmtime_r(&t, &tm) || strftime(out, len, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
		snprintf(out, len, "%lld ms after the epoch", (long long)ms);
}

int jointoken_check(const struct jointoken *t, const char *presented, int64_t now_wall, char *why,
                    size_t len)
{
	char when[48];
	if (!presented || !*presented) {
		text_printf(why, len,
		            "register needs the cluster's join token (Authorization: "
		            "Bearer ...; see STATE_DIR/join.token)");
		return ERR_AUTH;
	}
	if (secret_equal(presented, t->token)) {
		if (!t->expires_ms || now_wall < t->expires_ms)
			return 0;
		when_text(t->expires_ms, when, sizeof(when));
		text_printf(why, len,
		            "the join token expired at %s; an admin makes a new one with `anvil "
		            "node token --rotate` (nodes that joined keep working)",
		            when);
		return ERR_AUTH;
	}
	char hex[HASH_HEX_LEN + 1];
	if (strlen(presented) <= JOINTOKEN_MAX) {
		hex_of(presented, hex);
		for (int i = 0; i < t->nrotated; i++) {
			if (strcmp(hex, t->rotated[i]) != 0)
				continue;
			when_text(t->rotated_ms[i], when, sizeof(when));
			text_printf(why, len,
			            "the join token was rotated at %s and is no longer valid; "
			            "the current one is shown by `anvil node token`",
			            when);
			return ERR_AUTH;
		}
	}
	text_printf(why, len,
	            "the token is not the cluster's join token (nor the node's own "
	            "secret)");
	return ERR_AUTH;
}

json_t *jointoken_json(const struct jointoken *t, int64_t now_wall)
{
	return json_pack("{s:s,s:I,s:o,s:b}", "token", t->token, "created_ms",
	                 (json_int_t)t->created_ms, "expires_ms",
	                 t->expires_ms ? json_integer(t->expires_ms) : json_null(), "expired",
	                 t->expires_ms && now_wall >= t->expires_ms);
}

json_t *jointoken_record(const struct jointoken *t)
{
	char hex[HASH_HEX_LEN + 1];
	hex_of(t->token, hex);
	json_t *rotated = json_array();
	for (int i = 0; i < t->nrotated; i++)
		json_array_append_new(rotated, json_pack("{s:s,s:I}", "sha256", t->rotated[i],
		                                         "time_ms", (json_int_t)t->rotated_ms[i]));
	return json_pack("{s:s,s:I,s:I,s:o}", "sha256", hex, "created_ms",
	                 (json_int_t)t->created_ms, "expires_ms", (json_int_t)t->expires_ms,
	                 "rotated", rotated);
}

/* Puts hex first among the rotated, the oldest dropped past the cap. */
static void remember(struct jointoken *t, const char *hex, int64_t when)
{
	int n = t->nrotated < JOINTOKEN_ROTATED ? t->nrotated : JOINTOKEN_ROTATED - 1;
	memmove(t->rotated[1], t->rotated[0], (size_t)n * sizeof(t->rotated[0]));
	memmove(&t->rotated_ms[1], &t->rotated_ms[0], (size_t)n * sizeof(t->rotated_ms[0]));
	snprintf(t->rotated[0], sizeof(t->rotated[0]), "%s", hex);
	t->rotated_ms[0] = when;
	t->nrotated = n + 1;
}

static const struct jv_field record_fields[] = {
        {"sha256", JV_STRING, 1, HASH_HEX_LEN, HASH_HEX_LEN},
        {"created_ms", JV_INT, 1, 0, INT64_MAX},
        {"expires_ms", JV_INT, 1, 0, INT64_MAX},
        {"rotated", JV_ARRAY, 0, 0, 1000},
        {NULL, 0, 0, 0, 0},
};

/* The rotated tokens of rec into t (the newest JOINTOKEN_ROTATED). */
static void rotated_from(const json_t *rec, struct jointoken *t)
{
	t->nrotated = 0;
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(rec, "rotated"), i, e) {
		const char *h = jv_str(e, "sha256", "");
		if (t->nrotated == JOINTOKEN_ROTATED || !hash_hex_ok(h))
			continue;
		snprintf(t->rotated[t->nrotated], sizeof(t->rotated[0]), "%s", h);
		t->rotated_ms[t->nrotated++] = jv_int(e, "time_ms", 0);
	}
}

int jointoken_from_record(const json_t *rec, struct jointoken *t)
{
	char why[128];
	if (!json_is_object(rec) || jv_check(rec, record_fields, why, sizeof(why)) ||
	    !hash_hex_ok(jv_str(rec, "sha256", "")))
		return ERR_INVALID;
	rotated_from(rec, t);
	char hex[HASH_HEX_LEN + 1];
	hex_of(t->token, hex);
	if (strcmp(hex, jv_str(rec, "sha256", "")) != 0)
		return ERR_CONFLICT; /* another token's: only its rotated list is kept */
	t->created_ms = jv_int(rec, "created_ms", 0);
	t->expires_ms = jv_int(rec, "expires_ms", 0);
	return 0;
}

static int write_record(const char *dir, const struct jointoken *t)
{
	char *path = xasprintf("%s/join.token.json", dir);
	json_t *rec = jointoken_record(t);
	char *text = jv_dump(rec);
	int rc = write_file_atomic(path, text, strlen(text), 0600);
	free(text);
	json_decref(rec);
	free(path);
	return rc;
}

int jointoken_load(const char *dir, const char *token, int64_t ttl_ms, int64_t now_wall,
                   struct jointoken *out, char *err, size_t errlen)
{
	struct jointoken t = {0};
	snprintf(t.token, sizeof(t.token), "%s", token);
	char *path = xasprintf("%s/join.token.json", dir);
	struct buf b;
	buf_init(&b);
	json_t *rec = NULL;
	int rc = read_file(path, RECORD_MAX, &b);
	if (rc == 0) {
		rec = json_loadb(b.data ? b.data : "", b.len, 0, NULL);
		rc = jointoken_from_record(rec, &t);
		if (rc == ERR_INVALID)
			text_printf(err, errlen,
			            "%s is not a join token record (remove it: the token then "
			            "lives --join-token-ttl from this start)",
			            path);
	}
	if (rc == -ENOENT || rc == ERR_CONFLICT) { /* a new token, or one it has no record of */
		if (rc == ERR_CONFLICT) {
			remember(&t, jv_str(rec, "sha256", ""), now_wall);
			snprintf(t.token, sizeof(t.token), "%s", token); /* unchanged, to be sure */
		}
		t.created_ms = now_wall;
		t.expires_ms = ttl_ms > 0 ? now_wall + ttl_ms : 0;
		rc = write_record(dir, &t);
		if (rc)
			text_printf(err, errlen, "cannot write %s: %s", path, err_msg(rc));
	} else if (rc && rc != ERR_INVALID) {
		text_printf(err, errlen, "cannot read %s: %s", path, err_msg(rc));
	}
	if (rc == 0)
		*out = t;
	json_decref(rec);
	buf_cleanup(&b);
	free(path);
	return rc;
}

int jointoken_rotate(const char *dir, struct jointoken *t, int64_t ttl_ms, int64_t now_wall,
                     char *err, size_t errlen)
{
	struct jointoken next = *t;
	char hex[HASH_HEX_LEN + 1];
	hex_of(t->token, hex);
	remember(&next, hex, now_wall);
	random_hex(next.token, 32);
	next.created_ms = now_wall;
	next.expires_ms = ttl_ms > 0 ? now_wall + ttl_ms : 0;
	/* The record first: a token file without its record would live a
	 * whole TTL from the next start instead of from now. */
	int rc = write_record(dir, &next);
	char *path = xasprintf("%s/join.token", dir);
	if (rc == 0) {
		char line[JOINTOKEN_MAX + 2];
		snprintf(line, sizeof(line), "%s\n", next.token);
		rc = write_file_atomic(path, line, strlen(line), 0600);
		if (rc)
			write_record(dir, t); /* back to the token that is still in the file */
	}
	if (rc)
		text_printf(err, errlen, "cannot write the join token files in %s: %s", dir,
		            err_msg(rc));
	else
		*t = next;
	free(path);
	return rc;
}
