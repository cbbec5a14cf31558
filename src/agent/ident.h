/* ident.h - the node's identity and facts.
 *
 * The identity (node id and node secret) comes from registering with the
 * cluster's join token and lives in WORK_DIR/node.json (mode 0600), so a
 * restarted agent keeps its node: the join token admits a name once, and
 * only the node's secret registers it again (an admin's `anvil node reset`
 * lets the join token in once more). The facts are what the server schedules
 * by: hostname, address, agent URL, CPUs, memory and GPUs. Used by the
 * agent's main thread only.
 */
#ifndef ANVIL_AGENT_IDENT_H
#define ANVIL_AGENT_IDENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gpu_backend;
struct httpc;

struct ident {
	int64_t node_id;
	char secret[256];
	char name[128]; /* the node name it was registered under */
};

/* 0, -ENOENT when there is no file, ERR_INVALID (reason in err). */
int ident_load(const char *path, struct ident *out, char *err, size_t errlen);
int ident_save(const char *path, const struct ident *id);

/* The register body (proto/wire.h, wire_register), which the syncer also
 * sends as a sync's "facts": with the GPU inventory and topology, the GPU
 * groups, the driver versions and the RDMA ports (rdma: a JSON array,
 * stolen; NULL for none). */
json_t *ident_facts(const char *name, const char *address, const char *agent_url,
                    const struct gpu_backend *gpus, json_t *rdma);

/* POST /v1/agent/register with credential: the join token, or the node's
 * own secret (which registers a node again and keeps its secret). 0;
 * ERR_AUTH (the credential refused: the server's reason in err),
 * ERR_CONFLICT (the name is registered and the join token admits new nodes
 * only), ERR_INVALID (the body refused), ERR_UPSTREAM or ERR_TIMEOUT
 * (server unreachable or answered badly): reason in err. */
int ident_register(struct httpc *c, const char *server, const char *credential, const json_t *facts,
                   struct ident *out, char *err, size_t errlen);

#endif
