/* glue.h - the scheduler glue (schedule.c, layer 4 of core.h's drawing):
 * what it offers the entry points above it beyond state.h's scheduling
 * calls. Every function runs with the state lock held.
 *
 * The glue keeps its interned copy of what it reads from a record (a job's
 * queue, team and constraints; a node's pool, labels and GPU model) in its
 * own table. A node's copy is made again whenever node->changes moves; a
 * job's never changes after submission.
 */
#ifndef ANVIL_GLUE_H
#define ANVIL_GLUE_H

#include "server/records.h"

/* Interns the job's queue, team and constraints into the glue's table. */
void glue_job_cache(struct state *st, struct job *j);
/* Drops j's entry: a refused submission, whose id goes to the next job. */
void glue_forget_job(struct state *st, const struct job *j);
/* 0 if j could ever run on the registered nodes, else ERR_UNFIT + why. */
int glue_fits_ever(struct state *st, struct job *j, char *why, size_t whylen);
/* A submission without its cycle: builds the jobs of body (an array's
 * members), checks they could ever run, gives the first `task` (a
 * workflow run's, may be NULL; taken) and admits them (on disk, then
 * pending). On success *out is the first job, *n how many; on failure
 * nothing is left and task is freed. */
int glue_submit(struct state *st, const json_t *body, json_t *task, struct job ***out, int *n,
                char *err, size_t errlen);
/* glue_submit in two halves, for several submissions admitted in one
 * transaction (a workflow's runs that start together): glue_build makes
 * and checks body's jobs with ids from first_id (st->njobs + 1, plus the
 * jobs built before it and not yet admitted), and on failure leaves
 * nothing (task freed); glue_admit admits n of them, from one or more
 * builds, all or none: on failure it frees them (the caller frees js). */
int glue_build(struct state *st, const json_t *body, json_t *task, int64_t first_id,
               struct job ***out, int *n, char *err, size_t errlen);
int glue_admit(struct state *st, struct job **js, int n, char *err, size_t errlen);
/* As if a second had passed since the last cycle: the next one is full
 * and not skipped (tests drive time this way). */
void glue_age(struct state *st);
/* Frees the glue's caches and the scheduler. */
void glue_free(struct state *st);

#endif
