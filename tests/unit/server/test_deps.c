/* What an array's limit lets the scheduler see (server/deps.c), and what
 * its held members say they wait for: the limit where it holds them, else
 * what holds the member ahead of them (the CPU room, the GPUs). Through
 * the state functions the handlers call, agents played by
 * state_fixture.h. */
#include "state_fixture.h"

/* Submits an array (JSON text of its fields); its first member. */
static struct job *submit_array(struct sfx *f, const char *fields)
{
	char text[512];
	snprintf(text, sizeof(text), "{\"command\": [\"sweep\"], %s}", fields);
	return sfx_submit(f, text);
}

static struct job *member(struct sfx *f, const struct job *first, int k)
{
	struct job *j = state_job(&f->st, first->id + k);
	CHECK(j != NULL);
	CHECK_INT(j->array_id, first->id);
	return j;
}

/* 0-9%3 of CPU-only members on one node with room for one CPU-only rank:
 * one runs, two are let through and wait for the node's room, and the
 * seven held by the limit say so too, not that three run. */
TEST(a_cpu_limited_array_says_what_holds_it)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *a = submit_array(
	        f,
	        "\"gpus\": 0, \"array\": {\"indices\": [0,1,2,3,4,5,6,7,8,9], \"max_running\": 3}");
	sfx_tick(f);
	CHECK_INT(a->state, JOB_SCHEDULED);
	const char *room = "every eligible node runs its limit of 1 CPU-only rank (1 node)";
	CHECK_STR(member(f, a, 1)->reason, room);
	CHECK_STR(member(f, a, 2)->reason, room);
	char want[256];
	snprintf(want, sizeof(want),
	         "array %lld: 1 of its jobs run (limit %%3); the next in line waits: %s",
	         (long long)a->id, room);
	for (int k = 3; k < 10; k++)
		CHECK_STR(member(f, a, k)->reason, want);
	/* the first ends: the next runs, and the held ones say so */
	sfx_start_all(f);
	sfx_exit(f, 0, sfx_attempt(a)->id, 0, 0);
	sfx_sync(f, 0);
	CHECK_INT(a->state, JOB_SUCCEEDED);
	CHECK_INT(member(f, a, 1)->state, JOB_SCHEDULED);
	/* the same words: nothing to write again */
	CHECK_STR(member(f, a, 9)->reason, want);
	sfx_close(f);
}

/* Where the limit itself holds the members, they say that, with the true
 * count. */
TEST(an_array_at_its_limit_says_its_limit)
{
	struct sfx *f = sfx_open(1, 4);
	struct job *a = submit_array(
	        f, "\"gpus\": 1, \"array\": {\"indices\": [0,1,2,3,4,5], \"max_running\": 2}");
	sfx_tick(f);
	CHECK_INT(a->state, JOB_SCHEDULED);
	CHECK_INT(member(f, a, 1)->state, JOB_SCHEDULED);
	char want[128];
	snprintf(want, sizeof(want), "array %lld: 2 of its jobs run, its limit (%%2)",
	         (long long)a->id);
	for (int k = 2; k < 6; k++)
		CHECK_STR(member(f, a, k)->reason, want);
	sfx_close(f);
}

/* 0-5%4 of one-GPU members on 2 GPUs: two run, two are let through and
 * wait for a GPU, and the held two name that wait. */
TEST(a_gpu_limited_array_says_what_holds_it)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *a = submit_array(
	        f, "\"gpus\": 1, \"array\": {\"indices\": [0,1,2,3,4,5], \"max_running\": 4}");
	sfx_tick(f);
	CHECK_INT(member(f, a, 1)->state, JOB_SCHEDULED);
	const char *gpu = member(f, a, 2)->reason;
	CHECK(gpu[0] != '\0');
	CHECK(strncmp(gpu, "array ", 6) != 0);
	char want[256];
	snprintf(want, sizeof(want),
	         "array %lld: 2 of its jobs run (limit %%4); the next in line waits: ",
	         (long long)a->id);
	CHECK(strncmp(member(f, a, 5)->reason, want, strlen(want)) == 0);
	CHECK_CONTAINS(member(f, a, 5)->reason, "GPU");
	sfx_close(f);
}

TEST_MAIN()
