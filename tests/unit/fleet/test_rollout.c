/* The pace of a rolling upgrade (fleet/rollout.h): max_unavailable
 * fleet-wide, max_unavailable_per_block per topology block, the stop at
 * the first failure, nodes out before their turn, lost nodes. */
#include <string.h>

#include "../test.h"
#include "fleet/rollout.h"

#define N 8

struct run {
	struct fleet_unit u[N];
	int n;
	int start[N], work[N];
	struct fleet_next r;
};

/* n units, blocks as a string of letters ("aabb": two in a, two in b; '-'
 * none), every one queued. */
static void setup(struct run *x, const char *blocks)
{
	static char names[N][2];
	memset(x, 0, sizeof(*x));
	x->n = (int)strlen(blocks);
	for (int i = 0; i < x->n; i++) {
		names[i][0] = blocks[i] == '-' ? '\0' : blocks[i];
		names[i][1] = '\0';
		x->u[i].block = names[i];
		x->u[i].phase = FLEET_QUEUED;
	}
}

static void next(struct run *x, int max, int per_block)
{
	struct fleet_policy p = {max, per_block};
	fleet_rollout_next(&p, x->u, x->n, x->start, x->work, &x->r);
}

/* The starters as a string of unit indexes ("03"). */
static const char *starters(struct run *x)
{
	static char s[N + 1];
	for (int i = 0; i < x->r.nstart; i++)
		s[i] = (char)('0' + x->start[i]);
	s[x->r.nstart] = '\0';
	return s;
}

/* Starts what may start and moves it to phase p. */
static void take(struct run *x, enum fleet_phase p)
{
	for (int i = 0; i < x->r.nstart; i++)
		x->u[x->start[i]].phase = p;
}

TEST(one_at_a_time)
{
	struct run x;
	setup(&x, "aaa");
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "0");
	take(&x, FLEET_DRAINING);
	next(&x, 1, 1);
	CHECK_STR(starters(&x), ""); /* 0 is out */
	CHECK_INT(x.r.out, 1);
	x.u[0].phase = FLEET_VALIDATING;
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "");
	x.u[0].phase = FLEET_DONE;
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "1");
	take(&x, FLEET_DONE);
	next(&x, 1, 1);
	take(&x, FLEET_DONE);
	next(&x, 1, 1);
	CHECK(x.r.done);
	CHECK_STR(starters(&x), "");
}

TEST(max_unavailable_bounds_the_fleet)
{
	struct run x;
	setup(&x, "------");
	next(&x, 3, 3);
	CHECK_STR(starters(&x), "012");
	CHECK_INT(x.r.out, 3);
	take(&x, FLEET_CONVERGING);
	x.u[1].phase = FLEET_DONE;
	next(&x, 3, 3);
	CHECK_STR(starters(&x), "3"); /* one came back: one more may go */
}

TEST(per_block_limit)
{
	struct run x;
	setup(&x, "aaabbb");
	next(&x, 2, 1);
	CHECK_STR(starters(&x), "03"); /* one of each block, not 0 and 1 */
	take(&x, FLEET_DRAINING);
	x.u[3].phase = FLEET_DONE;
	next(&x, 2, 1);
	CHECK_STR(starters(&x), "4"); /* block a is full while 0 is out */
	take(&x, FLEET_DRAINING);
	next(&x, 4, 2);
	CHECK_STR(starters(&x), "15"); /* two a block, four in all: 0, 1, 4, 5 */
	setup(&x, "aab-");
	next(&x, 4, 1);
	CHECK_STR(starters(&x), "023"); /* no block: a block of its own */
}

TEST(stops_at_the_first_failure)
{
	struct run x;
	setup(&x, "abcd");
	next(&x, 2, 1);
	CHECK_STR(starters(&x), "01");
	take(&x, FLEET_CONVERGING);
	x.u[0].phase = FLEET_FAILED;
	x.u[1].phase = FLEET_DONE;
	next(&x, 2, 1);
	CHECK(x.r.stop);
	CHECK(!x.r.done);
	CHECK_STR(starters(&x), "");
}

TEST(nodes_out_before_their_turn_cost_nothing)
{
	struct run x;
	setup(&x, "aaaa");
	x.u[1].was_out = 1; /* cordoned by hand */
	x.u[3].was_out = 1;
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "013");
	CHECK_INT(x.r.out, 1); /* only 0 counts */
	take(&x, FLEET_VALIDATING);
	next(&x, 1, 1);
	CHECK_STR(starters(&x), ""); /* 2 waits for 0, not for 1 and 3 */
	x.u[0].phase = FLEET_DONE;
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "2");
}

TEST(lost_nodes_wait)
{
	struct run x;
	setup(&x, "---");
	x.u[0].lost = 1;
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "1");
	take(&x, FLEET_DONE);
	x.u[2].phase = FLEET_DONE;
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "");
	CHECK(!x.r.done); /* 0 is still to do */
	x.u[0].lost = 0;
	next(&x, 1, 1);
	CHECK_STR(starters(&x), "0");
}

TEST(phase_names)
{
	enum fleet_phase p;
	for (int i = 0; i < FLEET_NPHASES; i++) {
		CHECK_INT(fleet_phase_parse(fleet_phase_name((enum fleet_phase)i), &p), 0);
		CHECK_INT(p, i);
	}
	CHECK(fleet_phase_parse("gone", &p) < 0);
	CHECK(fleet_phase_parse(NULL, &p) < 0);
}

TEST_MAIN()
