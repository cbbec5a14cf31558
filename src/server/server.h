/* server.h - the control plane: `anvil server`.
 *
 * server_main parses flags, opens the state (state.h), starts the HTTP API
 * (api.c, agentproto.c) and the housekeeping thread, and serves until
 * SIGTERM/SIGINT. struct server ties those together; handlers get it as ctx.
 */
#ifndef ANVIL_SERVER_H
#define ANVIL_SERVER_H

#include <limits.h>
#include <pthread.h>

#include "base/httpd.h"
#include "base/jv.h"
#include "server/jointoken.h"
#include "server/state.h"

/* A token file holds 32 to 128 characters of [A-Za-z0-9._~+/=-] (the server
 * writes 64 hex digits at first start; an operator may put their own). */
#define SERVER_TOKEN_MIN 32
#define SERVER_TOKEN_MAX 128

struct server {
	struct state state;
	struct httpd *http;
	int state_open; /* state_open() succeeded: state_close() on the way out */
	char admin_token[SERVER_TOKEN_MAX + 1];
	/* The join token (jointoken.h) under join_mu: rotated by an admin
	 * while registrations read it. Lock order: join_mu may be taken with
	 * the state lock held, never the state lock with join_mu held.
	 * state_dir: where its files are. */
	pthread_mutex_t join_mu;
	struct jointoken join;
	int64_t join_ttl_ms; /* --join-token-ttl: a new token's life; 0: forever */
	char state_dir[PATH_MAX + 16];
	/* Node identity (server/nodes.c, "registration"): new nodes await an
	 * admin's approval (--approve-nodes); a node's secret is good only
	 * from the address it registered from (--bind-node-address). */
	int approve_nodes;
	int bind_node_address;
	char url[128];
	int64_t max_wait_ms;
	volatile int stopping;
	/* For /v1/objects (api_objects.c) on the object store (--objects,
	 * state.objects): the largest object it takes (--object-max-size), and
	 * the lock that keeps named puts one at a time (objstore/blob.h). */
	int64_t object_max;
	pthread_mutex_t objects_mu;
	/* Suspended GET /v1/jobs/ID?wait_ms=&while= (api_wait.c), state lock */
	struct job_waiter *waiters;
	int nwaiters, capwaiters;
};

int server_main(int argc, char **argv);

/* The single entry for every HTTP request (api.c). */
int server_handle(struct httpd_req *req, void *ctx);
/* Agent protocol handlers (agentproto.c). */
int agentproto_register(struct server *s, struct httpd_req *req);
int agentproto_sync(struct server *s, struct httpd_req *req);
void agentproto_wake(struct state *st, struct node *n);
void agentproto_expire(struct server *s, int64_t now);
void agentproto_release_all(struct server *s);
/* A job's long poll (api_wait.c): GET /v1/jobs/ID?wait_ms=N&while=STATE,
 * suspended while the job is in STATE; api_wait_check answers those due
 * (lock held). */
int api_job_wait(struct server *s, struct httpd_req *req, int64_t id);
void api_wait_check(struct server *s, int64_t now);

/* GET /metrics (metrics.c). */
void server_metrics(struct server *s, struct buf *out);

/* Shared by the API files (api_util.c). */
void api_send_json(struct httpd_req *req, int status, json_t *o); /* takes o */
/* Parses a request body and validates it against fields (jv_check); on
 * failure answers 400 itself and returns NULL. */
json_t *api_body(struct httpd_req *req, const struct jv_field *fields);
/* "Authorization: Bearer WANT", compared in constant time; NULL or ""
 * want (a revoked secret): no. */
int api_token_ok(struct httpd_req *req, const char *want);
/* state_flush: 0, or the error answered: the change stays in memory, is
 * written by a later flush, and reaches no agent before (state.h). */
int api_flush_or_fail(struct state *st, struct httpd_req *req);
/* Answers the node's waiting sync poll, if any, with 401 and why, not its
 * desired set: the poll belongs to a registration that is over (the node
 * registered again, maybe from another address, or was reset). Lock held. */
void api_poll_drop(struct node *n, const char *why);
/* Whether the request's bearer token is the valid join token now: 0, or
 * ERR_AUTH with why in why (takes join_mu). */
int api_join_ok(struct server *s, struct httpd_req *req, char *why, size_t len);
/* A create's Idempotency-Key (server/idem.h; docs/api.md), as its handler
 * carries it: whether the request had one, and its record (scope, key and
 * digest; the answer once made). */
struct api_idem {
	int has;
	struct store_idem rec;
};
/* Reads the request's Idempotency-Key: 0, ik->has saying whether it had
 * one; a malformed one is answered 400, and -1. body_sha256: the SHA-256
 * of the body when the caller has it (a spooled upload); NULL: req->body
 * is hashed. */
int api_idem_begin(struct httpd_req *req, struct api_idem *ik, const char *body_sha256);
/* Makes a create's first answer again from what it made (a record whose
 * body a crash kept from being written; ref: "job:17"): the answer and
 * *status, or NULL. */
typedef json_t *(*api_idem_remake)(struct state *st, const char *ref, int *status);
/* With the state lock held, before the create: 1 when ik's key was used
 * within its time and the request is answered - the first answer again,
 * with "Idempotent-Replayed: true", or 409 when the key came with another
 * request (500 when the store cannot say) - so nothing is to be made. 0:
 * go on (no key, or a new one). remake may be NULL. */
int api_idem_seen(struct state *st, struct httpd_req *req, const struct api_idem *ik,
                  api_idem_remake remake);
/* With the state lock held, after the create: records status and o as
 * ik's answer (with a key), writes what changed (state_flush) and answers
 * o. When the flush fails: strict answers 500 (what was made stays in
 * memory and a later flush writes it with its key); otherwise o is
 * answered all the same, for a create committed already (jobs_admit).
 * Takes o; returns the flush's result. */
int api_idem_answer(struct state *st, struct httpd_req *req, const struct api_idem *ik, int status,
                    json_t *o, int strict);
/* With the state lock held, after a create whose answer comes after more
 * commits: records ik's key (with a key) with status and ref, what the
 * create made, and no answer yet, for the next flush; a repeat that finds
 * no answer makes it again from ref (api_idem_remake). */
void api_idem_ref(struct state *st, const struct api_idem *ik, int status, const char *ref);
int64_t api_path_id(const char *seg, size_t len);
/* POST /v1/jobs/ID/attach (exec 0) and /exec (exec 1): the rank's stream,
 * relayed to its agent (api_stream.c). */
void api_stream(struct server *s, struct httpd_req *req, int64_t id, int exec);
/* POST /v1/jobs/ID/exec with an MPI job's exec token instead of the admin
 * token (docs/cli.md, "MPI"): answered, and 1, when req is that route with a
 * bearer token that is not the admin's; the stream opens only when the token
 * is the one of ID's current attempt. 0: not such a request. */
int api_stream_by_exec_token(struct server *s, struct httpd_req *req);
/* /v1/objects/KEY (api_objects.c): rest is what follows "/v1/objects/";
 * checks its own credentials (the admin token, or an attempt's exec
 * token for what that attempt may touch). */
void api_objects(struct server *s, struct httpd_req *req, const char *rest);
/* Whether token is the exec token of attempt attempt_id, while that
 * attempt is not final, and the attempt may touch key (objects_key_canon'd):
 * a content key, or its job's checkpoint key (job->task's "checkpoint")
 * or a key under it. The same answer, 0, whatever is wrong, so that a
 * token tells nothing about other attempts. The caller holds the state
 * lock. */
int api_objects_exec_ok(struct state *st, const char *token, int64_t attempt_id, const char *key);
/* httpd's spool callback (httpd_spool_fn): a PUT of an object has its body
 * written to a file, up to object_max bytes, once its credentials pass. */
int64_t api_objects_spool(struct httpd_req *req, void *ctx);
/* Routes under /v1/nodes (api_nodes.c); rest is what follows "/v1/nodes". */
void api_nodes(struct server *s, struct httpd_req *req, const char *rest);
/* GET /v1/join-token and POST /v1/join-token/rotate (api_nodes.c). */
void api_join_token(struct server *s, struct httpd_req *req, const char *rest);
/* The node check of node node_id with the expectations expect (taken), as
 * POST /v1/nodes/NAME/check runs it, for the fleet's checker thread
 * (server.c): 0 with the agent's result in *result (the caller's), or an
 * error and why in err (the node is lost, its agent did not answer).
 * Without the state lock: the agent may take minutes. */
int api_nodes_check(struct server *s, int64_t node_id, json_t *expect, json_t **result, char *err,
                    size_t errlen);
/* Asks node node_id's agent to run its profile's steps again (POST
 * /v1/profile/converge {"hash"}; docs/api.md, "Agent endpoints"): 0 once it
 * took the request, else an error and why in err. Without the state lock. */
int api_nodes_converge(struct server *s, int64_t node_id, const char *hash, char *err,
                       size_t errlen);
/* "gpu_count: 7 GPUs (expected 8); driver_version: ..." of a check
 * result's failed checks, or its summary when none failed. */
void api_nodes_check_text(const json_t *result, char *out, size_t len);
/* Routes under /v1/fleet (api_fleet.c); rest is what follows "/v1/fleet". */
void api_fleet(struct server *s, struct httpd_req *req, const char *rest);
/* /v1/workflows... (api_flows.c); the _by_exec_token variant handles the
 * one route a task wrapper calls with its attempt's exec token and returns
 * 1 when it was that route. */
void api_flows(struct server *s, struct httpd_req *req, const char *rest);
int api_flows_by_exec_token(struct server *s, struct httpd_req *req);
/* GET /v1/lineage (api_lineage.c). api_lineage_query answers the query
 * {"exec", "task", "index", "object", "uri", "direction", "depth"} (the
 * URL's values, as strings) with the state lock held: 0 with the graph in
 * *out (the caller decrefs it), or an error code and the field, value
 * and reason in err. */
void api_lineage(struct server *s, struct httpd_req *req);
int api_lineage_query(struct state *st, const json_t *q, json_t **out, char *err, size_t errlen);

#endif
