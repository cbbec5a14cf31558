/* cliconn.h - where the client finds the server, and how it talks to it.
 *
 * Resolution, for the server address and the token independently (mixed
 * sources are fine): the --server/--token flags, else $ANVIL_SERVER and
 * $ANVIL_TOKEN, else the client file $ANVIL_HOME/client.json (ANVIL_HOME
 * defaults to ~/.anvil), {"server": "http://127.0.0.1:PORT", "token": "..."},
 * which `anvil server` and `anvil up` write. The file is only read when a
 * flag or variable leaves something unset. Each value remembers where it came
 * from, so that an error can say how the client found the address it tried.
 *
 * Requests go through one keep-alive httpc connection. cliconn_call() is the
 * usual path for a verb: it prints "anvil: <message>" itself on failure and
 * returns the process exit status (CLI_EXIT_FAILED when the server said no,
 * CLI_EXIT_UNREACHABLE when it could not be reached). One thread.
 *
 * A create (a job, a workflow execution, a fleet apply or rollback, an
 * upload) goes through cliconn_create(): it carries an Idempotency-Key
 * made for it and, when its answer is lost (the server restarts, a proxy
 * answers 502/503/504), is sent again with the same key for up to
 * retry_ms, so that it is made once (docs/cli.md, "Retries").
 */
#ifndef ANVIL_CLICONN_H
#define ANVIL_CLICONN_H

#include <jansson.h>
#include <stddef.h>

#include "base/buf.h"

struct httpc;

struct cliconn {
	char *server;      /* base URL, no trailing slash */
	char *token;       /* NULL when none was found */
	char *server_from; /* "--server", "$ANVIL_SERVER" or the client file's path */
	char *token_from;
	char *file; /* the client file's path */
	struct httpc *http;
	long timeout_ms;  /* per request; 30 s */
	long retry_ms;    /* a create's retries: CLICONN_RETRY_MS, or $ANVIL_RETRY_FOR */
	char error[1024]; /* the last failure, for the caller to print */
};

#define CLICONN_RETRY_MS  60000 /* how long a create whose answer is lost is retried */
#define CLICONN_RETRY_ENV "ANVIL_RETRY_FOR"

/* Resolves server and token without touching the network. 0, or
 * ERR_NOTFOUND when no server address is configured anywhere, or
 * ERR_INVALID when the client file had to be read and is malformed or
 * $ANVIL_RETRY_FOR is not a duration; the
 * message (naming the file and the ways to configure) is in c->error.
 * c needs cliconn_cleanup() either way. */
int cliconn_resolve(struct cliconn *c, const char *server_flag, const char *token_flag);
void cliconn_cleanup(struct cliconn *c);

/* The client file's path: $ANVIL_HOME/client.json or ~/.anvil/client.json.
 * The caller frees it. */
char *cliconn_file_path(void);

/* Sends one request (path like "/v1/jobs"; body NULL for none). 0 with the
 * HTTP status in *status and the body in out; or ERR_UPSTREAM/ERR_TIMEOUT
 * when the server could not be reached, with the message (the address and
 * where it came from) in c->error. */
int cliconn_do(struct cliconn *c, const char *method, const char *path, const json_t *body,
               int *status, struct buf *out);

/* The value of header name in the last answer (httpc_header), copied
 * into out; NULL when it had none. */
const char *cliconn_header(const struct cliconn *c, const char *name, char *out, size_t outlen);

/* Describes a non-2xx answer in c->error: the server's error message from
 * {"error": {"code", "message"}}, or the status and the start of the body
 * when the answer has another shape. A 401 says where the token came from. */
void cliconn_describe(struct cliconn *c, int status, const struct buf *body);

/* Request, expect 2xx and a JSON object. Returns CLI_EXIT_OK with the object
 * in *out (json_decref it), else prints "anvil: <c->error>" to stderr and
 * returns CLI_EXIT_FAILED or CLI_EXIT_UNREACHABLE. */
int cliconn_call(struct cliconn *c, const char *method, const char *path, const json_t *body,
                 json_t **out);

/* A create: cliconn_call with an Idempotency-Key made for this one call,
 * sent again with the same key while its answer is lost, for up to
 * c->retry_ms; the failure then says how often it was sent. */
int cliconn_create(struct cliconn *c, const char *method, const char *path, const json_t *body,
                   json_t **out);

/* Appends s percent-encoded for a URL query value. */
void cliconn_escape(struct buf *out, const char *s);

#endif
