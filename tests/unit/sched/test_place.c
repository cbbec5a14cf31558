#include <stdlib.h>

#include "../test.h"
#include "base/err.h"
#include "sched/place.h"

static struct place_node node(int64_t id, int total, uint64_t freemask)
{
	struct place_node n = {.id = id, .total = total, .free = freemask, .usable = 1};
	return n;
}

TEST(best_fit_prefers_partly_used_node)
{
	struct place_node nodes[3] = {node(1, 8, 0xff), node(2, 8, 0x0f), node(3, 8, 0x03)};
	struct place_request req = {.gpus = 2, .nodes = 1};
	int idx[1];
	uint64_t gpus[1];
	char why[128];
	CHECK_INT(place_job(nodes, 3, &req, idx, gpus, why, sizeof(why)), 0);
	CHECK_INT(idx[0], 2);
	CHECK_INT(gpus[0], 0x03);
}

TEST(gang_is_all_or_nothing)
{
	struct place_node nodes[3] = {node(1, 4, 0x0f), node(2, 4, 0x01), node(3, 4, 0x0f)};
	struct place_request req = {.gpus = 4, .nodes = 3};
	int idx[3] = {-7, -7, -7};
	uint64_t gpus[3] = {0, 0, 0};
	char why[128];
	CHECK_INT(place_job(nodes, 3, &req, idx, gpus, why, sizeof(why)), ERR_BUSY);
	CHECK_CONTAINS(why, "needs 3 node(s) with 4 free GPU(s) each; 2 node(s)");
	CHECK_INT(idx[0], -7);
	req.nodes = 2;
	CHECK_INT(place_job(nodes, 3, &req, idx, gpus, why, sizeof(why)), 0);
	CHECK(idx[0] != idx[1]);
	CHECK(idx[0] != 1 && idx[1] != 1);
	CHECK_INT(gpus[0], 0x0f);
	CHECK_INT(gpus[1], 0x0f);
}

TEST(unusable_nodes_take_nothing)
{
	struct place_node nodes[2] = {node(1, 4, 0x0f), node(2, 4, 0x0f)};
	nodes[0].usable = 0;
	struct place_request req = {.gpus = 1, .nodes = 2};
	int idx[2];
	uint64_t gpus[2];
	char why[128];
	CHECK_INT(place_job(nodes, 2, &req, idx, gpus, why, sizeof(why)), ERR_BUSY);
	req.nodes = 1;
	CHECK_INT(place_job(nodes, 2, &req, idx, gpus, why, sizeof(why)), 0);
	CHECK_INT(idx[0], 1);
}

TEST(fits_ever_explains)
{
	struct place_node nodes[2] = {node(1, 4, 0), node(2, 8, 0)};
	char why[128];
	struct place_request req = {.gpus = 16, .nodes = 1};
	CHECK_INT(place_fits_ever(nodes, 2, &req, why, sizeof(why)), ERR_UNFIT);
	CHECK_CONTAINS(why, "largest node has 8 GPUs");
	req.gpus = 8;
	req.nodes = 2;
	CHECK_INT(place_fits_ever(nodes, 2, &req, why, sizeof(why)), ERR_UNFIT);
	CHECK_CONTAINS(why, "has 1 such node");
	req.gpus = 4;
	CHECK_INT(place_fits_ever(nodes, 2, &req, why, sizeof(why)), 0);
}

/* Randomized: repeatedly place and free; no GPU is ever handed out twice and
 * every placement is whole. */
TEST(random_placements_never_double_book)
{
	srand(42);
	enum { N = 16 };
	struct place_node nodes[N];
	for (int i = 0; i < N; i++)
		nodes[i] = node(i + 1, 8, 0xff);
	uint64_t used[N] = {0};
	for (int step = 0; step < 20000; step++) {
		struct place_request req = {.gpus = rand() % 9, .nodes = 1 + rand() % 4};
		int idx[4];
		uint64_t gpus[4];
		char why[128];
		if (place_job(nodes, N, &req, idx, gpus, why, sizeof(why)) == 0) {
			for (int k = 0; k < req.nodes; k++) {
				CHECK_INT(__builtin_popcountll(gpus[k]), req.gpus);
				CHECK_INT(used[idx[k]] & gpus[k], 0);
				for (int m = 0; m < k; m++)
					CHECK(idx[m] != idx[k]);
				used[idx[k]] |= gpus[k];
				nodes[idx[k]].free &= ~gpus[k];
			}
		}
		int victim = rand() % N;
		uint64_t drop = used[victim] & (uint64_t)rand();
		used[victim] &= ~drop;
		nodes[victim].free |= drop;
	}
}

TEST_MAIN()
