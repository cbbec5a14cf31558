/* desired_fixture.h - the desired record (agent/desired.h) the launchers'
 * tests (test_launch.c, test_mpi.c, test_task.c) hand to launch_argv,
 * mpi_argv and task_argv: made from a desired entry as the syncer makes
 * it, parsed and then deepened. An entry that leaves out attempt_id or
 * rank, which wire_desired requires and the launcher under test does not
 * read, gets 1 and 0.
 */
#ifndef ANVIL_DESIRED_FIXTURE_H
#define ANVIL_DESIRED_FIXTURE_H

#include <jansson.h>

#include "../test.h"
#include "agent/desired.h"

/* The record of entry d (left as it is), valid until the 16th call after
 * this one; the records stay reachable, so none is reported leaked. */
static inline const struct desired_rank *desired_fx(const json_t *d)
{
	static struct desired_rank ring[16];
	static unsigned next;
	struct desired_rank *r = &ring[next++ % 16];
	json_t *c = json_copy((json_t *)d);
	if (!json_object_get(c, "attempt_id"))
		json_object_set_new(c, "attempt_id", json_integer(1));
	if (!json_object_get(c, "rank"))
		json_object_set_new(c, "rank", json_integer(0));
	char why[256] = "";
	desired_cleanup(r);
	desired_parse(c, r);
	json_decref(c);
	if (desired_deepen(r, why, sizeof(why)) != 0)
		FAIL_AT("bad desired entry in the test: %s", why);
	return r;
}

#endif
