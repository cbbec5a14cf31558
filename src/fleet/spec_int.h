/* spec_int.h - what the files of the fleet spec share (spec.c: the whole,
 * pools, queues, teams and upgrade policy; spec_profile.c: node profiles;
 * spec_group.c: node groups and the nodes they expand to; bootstrap.c checks
 * the names and addresses it is given by the same rules). Not for use
 * outside src/fleet.
 */
#ifndef ANVIL_FLEET_SPEC_INT_H
#define ANVIL_FLEET_SPEC_INT_H

#include <jansson.h>

#include "base/schema.h"

/* One compile: the source, the errors, and what the groups build. */
struct fleet_ctx {
	const json_t *src;
	struct schema_errors *e;
	json_t *node_at;  /* {node name: its group}: who holds a name already */
	json_t *addr_at;  /* {address: its node} */
	json_t *nodes;    /* the compiled nodes, in order */
	long long nnodes; /* nodes counted so far, kept or not */
};

/* Checks the profile src at path; returns its compiled form (never NULL). */
json_t *spec_profile(const char *name, const json_t *src, const char *path,
                     struct schema_errors *e);
/* Checks the group src at path, expands its nodes into ctx; returns the
 * compiled group (never NULL). */
json_t *spec_group(struct fleet_ctx *c, const char *name, const json_t *src, const char *path);

/* Adds "there is no KIND 'NAME' (KINDs: a, b, c)" at path when the
 * mapping section of the source (pools, profiles, ...) has no NAME; 1
 * when it has. */
int spec_ref(struct fleet_ctx *c, const char *section, const char *kind, const char *name,
             const char *path);

/* What a label (key and value) may hold: the server's rules (api_nodes.c:
 * keys 1-63 characters without '=', values up to 63). Adds errors at path
 * and returns the value as text, or NULL when it is none. */
json_t *spec_label_value(const json_t *v, const char *path, struct schema_errors *e);
int spec_label_key_ok(const char *k);

/* The agent's rule for a node name (agent.c): 1 to 63 letters, digits,
 * '-', '_' or '.'. */
int spec_is_node_name(const char *s);
/* An IPv4 or IPv6 address, or a host name (dot-separated labels of
 * letters, digits and '-', the last not all digits). */
int spec_is_address(const char *s);

#endif
