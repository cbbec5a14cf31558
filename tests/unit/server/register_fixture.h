/* register_fixture.h - a node registered with the join token, as
 * agentproto_register admits one from 127.0.0.1 (server/state.h). */
#ifndef ANVIL_TEST_REGISTER_FIXTURE_H
#define ANVIL_TEST_REGISTER_FIXTURE_H

#include "../test.h"
#include "server/state.h"

static inline struct node *test_join(struct state *st, const json_t *facts, const char *name)
{
	struct node_admission adm = {.peer = "127.0.0.1", .join_ok = 1};
	struct node *n = NULL;
	char err[512] = "";
	int rc = state_register(st, facts, name, &adm, &n, err, sizeof(err));
	if (rc)
		FAIL_AT("register %s: %s", name, err);
	return n;
}

#endif
