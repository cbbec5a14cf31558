/* httpc.h - a blocking HTTP client on libcurl.
 *
 * struct httpc wraps one reusable connection (keep-alive) and is owned by one
 * thread at a time. httpc_do() sends one request with an optional bearer
 * token and JSON body and collects the answer (capped at max_resp bytes).
 * A transport failure returns ERR_UPSTREAM (or ERR_TIMEOUT) with the reason
 * in httpc_error(); any HTTP status is a success at this level. The answer's
 * headers are kept (capped at HTTPC_MAX_HEADERS bytes) until the next
 * request, for httpc_header().
 */
#ifndef ANVIL_HTTPC_H
#define ANVIL_HTTPC_H

#include <stddef.h>

#include "base/buf.h"

struct httpc;

/* Loads libcurl now (base/curl_lazy.h); httpc_new and upgrade_open load
 * it on first use anyway. Daemons call it at start. */
void httpc_global_init(void);

struct httpc *httpc_new(void);
void httpc_free(struct httpc *c);

int httpc_do(struct httpc *c, const char *method, const char *url, const char *token,
             const char *body, size_t body_len, long timeout_ms, int *status, struct buf *out);
const char *httpc_error(const struct httpc *c);

#define HTTPC_MAX_HEADERS (16 * 1024)

/* The value of the last answer's header name (case-insensitive), without
 * surrounding blanks, copied into out (cut to outlen); out, or NULL when
 * the answer had no such header (or there was no answer). */
const char *httpc_header(const struct httpc *c, const char *name, char *out, size_t outlen);

#endif
