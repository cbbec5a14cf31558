/* fleet_int.h - what the server's two fleet files share: fleet.c (layer 5
 * of core.h's drawing: the revisions, the observed state, plans and
 * applies, joining, the views) and fleet_rollout.c (layer 6: the rolling
 * upgrade's controller). Not for use outside them; what others call is in
 * fleet.h.
 *
 * The calls go one way: fleet_rollout.c calls fleet.c, never the reverse
 * (tests/lint/layers.py checks it), so a helper both need is defined in
 * fleet.c, or here when it only reads (the static inline ones below).
 * Every function runs with the state lock held.
 */
#ifndef ANVIL_SERVER_FLEET_INT_H
#define ANVIL_SERVER_FLEET_INT_H

#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "base/jv.h"
#include "fleet/rollout.h"
#include "server/core.h"

/* The reason a node taken out as not in its spec carries; a later spec
 * that names it again brings it back only while it still says so. */
#define REMOVED_REASON "not in the fleet spec"

struct fleet {
	json_t **revs; /* revs[id - 1]: each revision's document */
	char *dirty;   /* dirty[id - 1]: to be written */
	int nrevs, caprevs;
	json_t *spec;     /* the newest revision's compiled spec; NULL: none */
	json_t *members;  /* {node name: its entry in spec's nodes} */
	json_t *profiles; /* {profile name: the wire profile {"hash", "name", "spec"}} */
	int64_t active;   /* the revision whose rollout runs; 0: none */
	int64_t last_step;
	json_t *node_ids; /* {node name: id}, for the nodes indexed so far */
	int indexed;
	int *start, *work; /* fleet_rollout_next's arrays */
	int capunits;
};

/* ---- fleet.c ---- */

/* Revision id is to be written by the next flush. */
void fleet_touch(struct state *st, int64_t id);
/* The node of that name, or NULL (indexes the nodes added since). */
struct node *fleet_node_named(struct state *st, const char *name);
/* Marks the nodes the running rollout has yet to start (node->rollout_queued)
 * and unmarks every other: after an apply, each step of the rollout, its
 * end and a restart. */
void fleet_mark_queued(struct state *st);

/* ---- readers ---- */

static inline struct fleet *fleet_of(struct state *st)
{
	return st->core->fleet;
}

static inline json_t *rev(struct fleet *f, int64_t id)
{
	return id >= 1 && id <= f->nrevs ? f->revs[id - 1] : NULL;
}

static inline const char *str(const json_t *o, const char *key)
{
	return jv_str(o, key, "");
}

static inline const json_t *rollout_of(struct fleet *f, int64_t id)
{
	const json_t *ro = json_object_get(rev(f, id), "rollout");
	return json_is_object(ro) ? ro : NULL;
}

static inline enum fleet_phase phase_of(const json_t *e)
{
	enum fleet_phase p = FLEET_QUEUED;
	fleet_phase_parse(str(e, "phase"), &p);
	return p;
}

static inline int removed_by_fleet(const struct node *n)
{
	return n->admin != NODE_READY &&
	       strncmp(n->admin_reason, REMOVED_REASON, strlen(REMOVED_REASON)) == 0;
}

#endif
