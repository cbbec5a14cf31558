/* httpc.h - a blocking HTTP client: the one interface every HTTP call of
 * anvil goes through (the agent's sync long poll aside: agent/syncer.h).
 *
 * struct httpc wraps one reusable connection (keep-alive) and is owned by one
 * thread at a time; handles share nothing, so threads may each use their
 * own. httpc_do() sends one request with an optional bearer token and JSON
 * body and collects the answer (capped at 64 MiB: ERR_TOOBIG past it).
 * A transport failure returns ERR_UPSTREAM (or ERR_TIMEOUT) with the reason
 * in httpc_error(); any HTTP status is a success at this level. The answer's
 * headers are kept (capped at HTTPC_MAX_HEADERS bytes) until the next
 * request, for httpc_header().
 *
 * Files of any size travel without being held in memory: httpc_get_file
 * writes a 2xx answer's body to a file descriptor, httpc_put_file sends one
 * as the body (with "Expect: 100-continue": a server that refuses it on its
 * headers answers before the body is sent). Their deadline is not a total
 * time (a checkpoint of many gigabytes takes what it takes) but the
 * connection's, and a transfer that moves nothing for idle_ms.
 *
 * Two libraries behind it, chosen by the URL's scheme, both loaded on first
 * use (dlopen), so a process that makes no HTTP call loads neither:
 *
 *   http://   libevent's evhttp (base/event_lazy.h, httpc_event.c): the
 *             cluster's API, the agents, the object API; every anvil
 *             process. libevent needs only libc, where libcurl's Debian
 *             build brings 32 libraries (OpenSSL, GnuTLS, Kerberos, LDAP,
 *             SSH, ...) whose loading cost a CLI command about 8 ms, most
 *             of `anvil jobs` and of the way to an `anvil shell` prompt.
 *   https://  libcurl (base/curl_lazy.h, httpc_curl.c): TLS, which only
 *             URLs outside the cluster use (`anvil lineage --export --url`).
 *
 * $ANVIL_HTTP_CLIENT=curl sends http:// through libcurl too: the tests run
 * the same checks on both, and it is a way back should libevent misbehave.
 *
 * A create that must not happen twice (a job, a workflow execution, an
 * upload: docs/api.md, "Idempotency-Key") carries a key the client made
 * for it, and may then be sent again when its answer is lost: the server
 * answers a repeat of a key it has seen with the first answer instead of
 * creating again. httpc_set_retry() turns both on for a handle.
 */
#ifndef ANVIL_HTTPC_H
#define ANVIL_HTTPC_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct httpc;

/* Loads libevent now (base/event_lazy.h); the first http:// call loads it
 * anyway. Daemons call it at start, so that a missing library shows then. */
void httpc_global_init(void);

/* A handle; no library is loaded and nothing connected until its first
 * call. Reads $ANVIL_HTTP_CLIENT. */
struct httpc *httpc_new(void);
void httpc_free(struct httpc *c);

int httpc_do(struct httpc *c, const char *method, const char *url, const char *token,
             const char *body, size_t body_len, long timeout_ms, int *status, struct buf *out);
const char *httpc_error(const struct httpc *c);

/* A header line ("X-Anvil-Attempt: 12") that every request of c sends
 * from now on, besides its own; NULL: none. Copied. */
void httpc_set_header(struct httpc *c, const char *line);

/* From now on every call of c carries "Idempotency-Key: key" (NULL:
 * none; copied) and, when retry_ms > 0, is sent again, with the same key,
 * when its answer is lost - no answer came (refused, reset, closed early,
 * timed out) or it is 502, 503 or 504, what a proxy or a restarting server
 * answers - HTTPC_RETRY_FIRST_MS after the first try, then twice as long
 * each time up to HTTPC_RETRY_GAP_MS apart, until retry_ms has passed
 * since the first try: the last try's result then stands. Only a request
 * that may be repeated retries: a GET, or one with a key. A file's body
 * is sent again from its first offset; a file being downloaded is cut back
 * to where it started. A failure to read or write the caller's file is
 * not retried. httpc_set_retry(c, NULL, 0) ends it. */
#define HTTPC_RETRY_FIRST_MS 250
#define HTTPC_RETRY_GAP_MS   2000
void httpc_set_retry(struct httpc *c, const char *key, long retry_ms);
/* How many times the last call was sent: 1, more after retries. */
int httpc_tries(const struct httpc *c);
/* Called before each retry (try: the one about to be sent, from 2; why:
 * what became of the last: httpc_error(), or its status), so that a
 * person waiting is told; NULL: nothing. */
typedef void (*httpc_retry_fn)(void *ctx, int try, const char *why);
void httpc_on_retry(struct httpc *c, httpc_retry_fn fn, void *ctx);

/* A fresh random key for one create (hex; HTTPC_KEY_LEN digits). */
#define HTTPC_KEY_LEN 32
void httpc_new_key(char key[HTTPC_KEY_LEN + 1]);

/* GET url: a 2xx answer's body is written to fd (from its current
 * offset), another's goes to err_body (capped at 64 KiB). *status as for
 * httpc_do; ERR_UPSTREAM or ERR_TIMEOUT when the transfer failed (also a
 * failed write to fd: the message says so), with the reason in
 * httpc_error(). */
int httpc_get_file(struct httpc *c, const char *url, const char *token, int fd, long idle_ms,
                   int *status, struct buf *err_body);
/* PUT url with the size bytes fd reads (from its current offset) as the
 * body, sent as application/octet-stream; the answer's body in out (as
 * httpc_do). */
int httpc_put_file(struct httpc *c, const char *url, const char *token, int fd, int64_t size,
                   long idle_ms, int *status, struct buf *out);

#define HTTPC_MAX_HEADERS (16 * 1024)

/* The value of the last answer's header name (case-insensitive), without
 * surrounding blanks, copied into out (cut to outlen); out, or NULL when
 * the answer had no such header (or there was no answer). */
const char *httpc_header(const struct httpc *c, const char *name, char *out, size_t outlen);

#endif
