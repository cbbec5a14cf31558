/* wire.h - the records of the API and the agent protocol, each described once.
 *
 * A record that crosses between the server and an agent (docs/api.md, "Agent
 * protocol"), or from the client to the server (the job submission, "POST
 * /v1/jobs"), is one field table here: name, JSON type, required or not,
 * bounds, and a one-line meaning. The producer builds the record through
 * wire_set(), which asserts that every field it sets is in the table with
 * that type; the consumer validates it with wire_check(). A new field is one
 * table entry, and tests/unit/proto/test_wire.c checks the tables against the
 * field tables of docs/api.md both ways, so the doc cannot drift either.
 * A record nested in another (a desired entry in the sync answer, a GPU in
 * the facts, a finding in the health report) has a table of its own, which
 * the consumer applies to each entry with wire_check_each(); what no table
 * can say (a finding's scope is one of four words) the consumer checks next
 * to it.
 *
 * Why proto/, a library of its own: the server, the agent (with its GPU
 * layer, gpu/, which builds the facts' GPU and RDMA entries), the client
 * and the store (whose job field table, model/fields.h, takes the submit
 * record's types and bounds) link it, and it depends on base/ (jv.h) and
 * jansson only. It describes JSON, not the
 * code of either side - it names no server or agent type, and each side maps
 * its own structs onto the fields. Each table holds the bounds its consumer
 * has always enforced.
 *
 * The tables are constant data; every function is pure and thread-safe.
 */
#ifndef ANVIL_WIRE_H
#define ANVIL_WIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/jv.h"

#define WIRE_MAX_FIELDS 32
/* The agent protocol's revision this build speaks (the facts' "protocol"),
 * and the revision from which an agent takes shared environments in a sync
 * answer ("envs" and the entries' "env_base"; server/ranks.c). */
#define WIRE_PROTOCOL            2
#define WIRE_PROTOCOL_SHARED_ENV 2
/* GPUs per node a job may ask for: model/model.h's MODEL_MAX_GPUS (the
 * server asserts that they agree). */
#define WIRE_MAX_GPUS 64
/* A head's or worker's command line (a job with a head, docs/cli.md), and
 * the longest wait for its head to answer (a day). */
#define WIRE_MAX_SHELL           16384
#define WIRE_MAX_HEAD_TIMEOUT_MS (24LL * 3600 * 1000)
/* What one exec of a job's command can take (the submission's "command"
 * and "env"): each argument and each environment string NAME=VALUE at most
 * WIRE_MAX_ARG bytes with its NUL (Linux's MAX_ARG_STRLEN; a longer one is
 * E2BIG at the exec), and all of them together, with their NULs, at most
 * WIRE_MAX_EXEC: a quarter of ARG_MAX's usual 2 MiB (a quarter of an 8 MiB
 * stack), which leaves room for the pointers and what the agent adds, and
 * under the 1 MiB cap on a request's body, so that a body can reach it and
 * be told (a workflow's rendered run can too). */
#define WIRE_MAX_ARG  131072
#define WIRE_MAX_EXEC (512 << 10)
/* A notice's text (a desired entry's "notice"): within a NOTICE frame's
 * cap (proto/stream.h, STREAM_TEXT_MAX). */
#define WIRE_MAX_NOTICE 1024

struct wire_field {
	const char *name;
	enum jv_type type; /* bounds as in jv.h */
	int required;
	int64_t min;
	int64_t max;
	const char *meaning; /* one line; docs/api.md carries the same words */
};

struct wire_record {
	const char *name;                /* its key in docs/api.md: <!-- wire:NAME --> */
	const struct wire_field *fields; /* ends with a NULL name */
	/* NULL, or a record whose fields this one has too, after its own; a
	 * field of its own replaces the base's field of that name (the
	 * registration body is the facts with "name" required). Together at
	 * most WIRE_MAX_FIELDS. */
	const struct wire_record *base;
};

/* An agent's POST /v1/agent/sync body (the server validates it). */
extern const struct wire_record wire_sync_request;
/* One entry of its "ranks": the agent's report of one rank. */
extern const struct wire_record wire_report;
/* The server's answer to a sync (the agent validates it). */
extern const struct wire_record wire_sync_answer;
/* One entry of the answer's "ranks": a rank the node should run. */
extern const struct wire_record wire_desired;
/* Its "notice": words for a session's terminal, delivered once by id. */
extern const struct wire_record wire_notice;

/* An agent's POST /v1/agent/register body: the facts, with "name"
 * required. */
extern const struct wire_record wire_register;
/* The node's facts, as in register, and a sync request's "facts". */
extern const struct wire_record wire_facts;
/* One entry of the facts' "gpus": a GPU's inventory. */
extern const struct wire_record wire_gpu;
/* One entry of the facts' "rdma": an RDMA port. */
extern const struct wire_record wire_rdma_port;
/* A sync request's "health": the agent's GPU health report. */
extern const struct wire_record wire_health;
/* The fleet's node profiles (docs/fleet.md, docs/api.md): the sync
 * answer's `profile`, the sync request's `profile_status` and its steps. */
extern const struct wire_record wire_profile, wire_profile_status, wire_profile_step;
/* One entry of its "gpus": a GPU's health state. */
extern const struct wire_record wire_gpu_health;
/* Its "node": the node fault, when there is one. */
extern const struct wire_record wire_node_fault;
/* One entry of its "findings": a fault the agent found. */
extern const struct wire_record wire_finding;

/* A job submission: the POST /v1/jobs body (the client builds it, the
 * server validates it; the server checks what a table cannot say, such as
 * that the queue exists, itself). */
extern const struct wire_record wire_submit;

/* An exec request: the first frame of POST /v1/jobs/ID/exec's stream
 * (proto/stream.h; the exec helper on the node validates it). */
extern const struct wire_record wire_exec;

/* Every record above, for the doc check; ends with NULL. */
extern const struct wire_record *const wire_records[];

/* The variables the server sets in every rank's environment (a desired
 * entry's "env"), over the job's own (ANVIL_CHECKPOINTING for a
 * checkpointing job, ANVIL_HEAD_* for a job with a head, ANVIL_EXEC_TOKEN
 * for an MPI job); NULL-terminated. The agent adds ANVIL_OUTPUT_DIR,
 * ANVIL_LOG_FILE, ANVIL_CHECKPOINT_DIR, the NCCL interface variables, and
 * for an MPI job ANVIL_SERVER, on the node. */
extern const char *const wire_rank_env[];

/* The values of those variables for one rank, set into env by
 * wire_rank_env_set: one place that makes them, for the server's desired
 * entries and for `anvil run --local`. */
struct wire_rank_vars {
	const char *cuda;  /* CUDA_VISIBLE_DEVICES: "0,1", "" for none */
	const char *uuids; /* NVIDIA_VISIBLE_DEVICES; NULL: "void" (no GPU) */
	const char *master_addr;
	int master_port;
	int nnodes, node_rank, nproc; /* nproc: processes per node, the GPUs (at least 1) */
	int64_t job_id, attempt_id;
	int attempt; /* the attempt's number, 1 for the first */
	const char *node, *job_name;
	int checkpointing;
	int64_t array_id, array_index; /* array_id 0: not in an array */
	const char *head_addr;         /* NULL: no head */
	int head_port;
};
void wire_rank_env_set(json_t *env, const struct wire_rank_vars *v);

/* The field called name, r's own or else its base's; or NULL. */
const struct wire_field *wire_field(const struct wire_record *r, const char *name);

/* Sets field name of o to v (stolen). Asserts that r has the field and that
 * v has its type (null only for a field that is not required): a producer
 * cannot send a field the table does not describe. */
void wire_set(json_t *o, const struct wire_record *r, const char *name, json_t *v);

/* jv_check() against r: 0, or ERR_INVALID with a message naming the field. */
int wire_check(const json_t *o, const struct wire_record *r, char *err, size_t errlen);

/* Checks every element of the array field key of o against r; the message
 * is prefixed "key[i]: ". */
int wire_check_each(const json_t *o, const char *key, const struct wire_record *r, char *err,
                    size_t errlen);

/* A new object with only the fields of o that r knows (a newer peer may send
 * more); the caller decrefs it. */
json_t *wire_known(const json_t *o, const struct wire_record *r);

#endif
