/* jointoken.h - the cluster's join token: what admits a new node.
 *
 * The join token lets an agent register a name the server does not know
 * yet (or one an operator reset: server/nodes.c, "registration"); a node
 * that registered syncs with its own secret from then on, so rotating or
 * expiring the token never touches the nodes that joined.
 *
 * The token is kept in STATE_DIR/join.token (the token alone, one line,
 * 0600: what agents, `anvil up` and `anvil fleet bootstrap` read), and its
 * record in STATE_DIR/join.token.json (0600): when it was made, when it
 * expires (0: never) and the SHA-256 of the tokens rotated away (the newest
 * JOINTOKEN_ROTATED, with when), so that a refusal can say why. A record
 * whose hash is not the token's (a token file an operator wrote, or one
 * from a server before records) starts the token's life at this start.
 *
 * jointoken_check and jointoken_json are pure; load and rotate write the
 * files. Not thread-safe: the server keeps its struct jointoken under a
 * mutex of its own (server.h).
 */
#ifndef ANVIL_JOINTOKEN_H
#define ANVIL_JOINTOKEN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

#define JOINTOKEN_MAX     128 /* characters, as the token files of server.c */
#define JOINTOKEN_ROTATED 8   /* rotated tokens remembered */
/* The longest life a token may be given: ten years. */
#define JOINTOKEN_TTL_MAX_MS (3660LL * 24 * 3600 * 1000)

struct jointoken {
	char token[JOINTOKEN_MAX + 1];
	int64_t created_ms;                                /* wall */
	int64_t expires_ms;                                /* wall; 0: never */
	char rotated[JOINTOKEN_ROTATED][HASH_HEX_LEN + 1]; /* newest first */
	int64_t rotated_ms[JOINTOKEN_ROTATED];
	int nrotated;
};

/* The token (already read from dir/join.token, or just made) with its
 * record from dir/join.token.json, written there when it had none for
 * this token (created now, expiring ttl_ms from now; 0: never). 0, or a
 * negative code with the reason in err (the record could not be written,
 * or it is not a record). */
int jointoken_load(const char *dir, const char *token, int64_t ttl_ms, int64_t now_wall,
                   struct jointoken *out, char *err, size_t errlen);

/* Replaces the token with a new one (64 hex digits) expiring ttl_ms from
 * now (0: never), the old one remembered as rotated, and writes both files.
 * 0, or a negative code (t unchanged) with the reason in err. */
int jointoken_rotate(const char *dir, struct jointoken *t, int64_t ttl_ms, int64_t now_wall,
                     char *err, size_t errlen);

/* Whether presented (the bearer token, NULL when none) is the valid join
 * token at now_wall: 0, or ERR_AUTH with why in why: none given, not the
 * cluster's, rotated away (when), expired (when), each with what to do. */
int jointoken_check(const struct jointoken *t, const char *presented, int64_t now_wall, char *why,
                    size_t len);

/* {"token", "created_ms", "expires_ms" (null: never), "expired"}. */
json_t *jointoken_json(const struct jointoken *t, int64_t now_wall);

/* The record of join.token.json: {"sha256", "created_ms", "expires_ms",
 * "rotated": [{"sha256", "time_ms"}]}; and back, into t, whose token must
 * be set (ERR_INVALID when rec is not one, or is another token's). */
json_t *jointoken_record(const struct jointoken *t);
int jointoken_from_record(const json_t *rec, struct jointoken *t);

#endif
