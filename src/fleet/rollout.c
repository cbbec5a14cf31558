/* rollout.c - which nodes of a rolling upgrade may go out now (rollout.h). */
#include "fleet/rollout.h"

#include <string.h>

static const char *const phase_names[FLEET_NPHASES] = {
        "queued", "draining", "converging", "validating", "done", "failed",
};

const char *fleet_phase_name(enum fleet_phase p)
{
	return p >= 0 && p < FLEET_NPHASES ? phase_names[p] : "?";
}

int fleet_phase_parse(const char *s, enum fleet_phase *out)
{
	for (int i = 0; s && i < FLEET_NPHASES; i++)
		if (strcmp(s, phase_names[i]) == 0) {
			*out = (enum fleet_phase)i;
			return 0;
		}
	return -1;
}

static int in_progress(enum fleet_phase p)
{
	return p == FLEET_DRAINING || p == FLEET_CONVERGING || p == FLEET_VALIDATING;
}

static int blockless(const char *b)
{
	return !b || !*b;
}

/* Counted units out now in u's block, among the counted ones (out[], no
 * more than the fleet-wide limit allows). */
static int out_in_block(const struct fleet_unit *u, const int *out, int nout, const char *block)
{
	int count = 0;
	if (blockless(block))
		return 0;
	for (int i = 0; i < nout; i++) {
		const char *b = u[out[i]].block;
		count += !blockless(b) && strcmp(b, block) == 0;
	}
	return count;
}

void fleet_rollout_next(const struct fleet_policy *p, const struct fleet_unit *u, int n, int *start,
                        int *work, struct fleet_next *r)
{
	memset(r, 0, sizeof(*r));
	int done = 0, nout = 0;
	for (int i = 0; i < n; i++) {
		r->stop |= u[i].phase == FLEET_FAILED;
		done += u[i].phase == FLEET_DONE;
		if (in_progress(u[i].phase) && !u[i].was_out)
			work[nout++] = i; /* the units out that count */
	}
	r->done = done == n;
	r->out = nout;
	if (r->stop || r->done)
		return;
	for (int i = 0; i < n; i++) {
		const struct fleet_unit *x = &u[i];
		if (x->phase != FLEET_QUEUED || x->lost)
			continue;
		if (!x->was_out) {
			if (nout >= p->max_unavailable ||
			    out_in_block(u, work, nout, x->block) >= p->max_per_block)
				continue;
			work[nout++] = i;
		}
		start[r->nstart++] = i;
	}
	r->out = nout;
}
