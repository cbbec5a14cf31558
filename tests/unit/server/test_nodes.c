/* A node's identity (server/nodes.c, "registration"): the join token
 * admits new names only; a registered name is taken again with its own
 * secret, or with the join token once after a reset; approval; the address
 * a node syncs from; reports for another node's ranks. Through the public
 * functions agentproto.c calls, with agents played by state_fixture.h. */
#include "state_fixture.h"

#include "base/err.h"

static json_t *facts(void)
{
	return sfx_facts(2);
}

/* state_register as agentproto_register calls it. */
static int reg(struct sfx *f, const char *name, const struct node_admission *adm, struct node **out,
               char *err)
{
	json_t *fx = facts();
	err[0] = '\0';
	int rc = state_register(&f->st, fx, name, adm, out, err, 600);
	json_decref(fx);
	sfx_flush(f);
	return rc;
}

static const struct node_admission join_from_1 = {.peer = "127.0.0.1", .join_ok = 1};

TEST(the_join_token_admits_a_registered_name_no_more)
{
	struct sfx *f = sfx_open(1, 2);
	struct node *n = sfx_node(f, 0), *got = NULL;
	char secret[65], err[600];
	snprintf(secret, sizeof(secret), "%s", n->secret);
	CHECK_INT((long long)strlen(secret), 64);
	CHECK_INT(reg(f, "node-1", &join_from_1, &got, err), ERR_CONFLICT);
	CHECK_CONTAINS(err, "node node-1 is registered already, and the join token admits new "
	                    "nodes only");
	CHECK_CONTAINS(err, "anvil node reset node-1");
	CHECK(got == NULL);
	CHECK_STR(n->secret, secret); /* nothing changed */
	/* without a valid join token it is a 401 with the token's reason */
	struct node_admission bad = {.peer = "127.0.0.1", .join_why = "the join token expired"};
	CHECK_INT(reg(f, "node-1", &bad, &got, err), ERR_AUTH);
	CHECK_STR(err, "the join token expired");
	CHECK_INT(reg(f, "node-9", &bad, &got, err), ERR_AUTH);
	CHECK_INT(f->st.nnodes, 1);
	sfx_close(f);
}

/* Its own secret registers it again (from a new address, say): the same
 * node and secret, the address updated; bound to its address, not from
 * another. */
TEST(its_own_secret_registers_a_node_again)
{
	struct sfx *f = sfx_open(1, 2);
	struct node *n = sfx_node(f, 0), *got = NULL;
	char secret[65], err[600];
	snprintf(secret, sizeof(secret), "%s", n->secret);
	CHECK_STR(n->registered_from, "127.0.0.1");
	struct node_admission own = {.peer = "127.0.0.2", .own_secret = 1};
	CHECK_INT(reg(f, "node-1", &own, &got, err), 0);
	CHECK(got == n);
	CHECK_STR(n->secret, secret);
	CHECK_STR(n->registered_from, "127.0.0.2");
	own.bind_address = 1;
	own.peer = "127.0.0.3";
	CHECK_INT(reg(f, "node-1", &own, &got, err), ERR_AUTH);
	CHECK_CONTAINS(err, "node node-1's secret is bound to the address it registered from, "
	                    "127.0.0.2 (--bind-node-address); this registration comes from "
	                    "127.0.0.3");
	CHECK_STR(n->registered_from, "127.0.0.2");
	own.peer = "127.0.0.2";
	CHECK_INT(reg(f, "node-1", &own, &got, err), 0);
	sfx_close(f);
}

/* A reset revokes the secret at once, loses the node's ranks (the job is
 * lost), survives a restart, and lets one join-token registration in. */
TEST(a_reset_node_is_admitted_once_with_the_join_token)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *j = sfx_submit(f, "{\"command\": [\"sleep\", \"1d\"], \"gpus\": 1}");
	sfx_start_all(f);
	CHECK_INT(j->state, JOB_RUNNING);
	int64_t jid = j->id;
	struct node *n = sfx_node(f, 0), *got = NULL;
	char old[65], err[600];
	snprintf(old, sizeof(old), "%s", n->secret);
	state_node_reset(&f->st, n);
	state_settle(&f->st);
	sfx_flush(f);
	CHECK_STR(n->secret, "");
	CHECK_INT(n->state, NODE_LOST);
	CHECK_INT(state_job(&f->st, jid)->state, JOB_LOST);
	CHECK_INT(sfx_ndesired(f, 0), 0);
	sfx_restart(f);
	n = sfx_node(f, 0);
	CHECK(n->reset);
	CHECK_STR(n->secret, "");
	/* the old secret is no credential now */
	struct node_admission own = {.peer = "127.0.0.1", .own_secret = 0};
	CHECK_INT(reg(f, "node-1", &own, &got, err), ERR_AUTH);
	struct node_admission join = join_from_1;
	join.peer = "127.0.0.9";
	CHECK_INT(reg(f, "node-1", &join, &got, err), 0);
	CHECK(got == n);
	CHECK_INT((long long)strlen(n->secret), 64);
	CHECK(strcmp(n->secret, old) != 0);
	CHECK(!n->reset);
	CHECK_STR(n->registered_from, "127.0.0.9");
	/* once */
	CHECK_INT(reg(f, "node-1", &join_from_1, &got, err), ERR_CONFLICT);
	sfx_close(f);
}

/* With approval on, a new node takes no work until approved; the
 * operator's other moves wait for the approval too. */
TEST(a_node_awaiting_approval_takes_no_work_until_approved)
{
	struct sfx *f = sfx_open(0, 2);
	struct node_admission adm = join_from_1;
	adm.approve = 1;
	struct node *n = NULL;
	char err[600];
	CHECK_INT(reg(f, "node-1", &adm, &n, err), 0);
	CHECK_INT(n->admin, NODE_AWAITING);
	CHECK_STR(node_shown_state(n), "awaiting_approval");
	CHECK_CONTAINS(n->admin_reason, "awaiting approval (anvil node approve node-1)");
	CHECK(!node_takes_work(n));
	f->nnodes = 1;
	struct job *j = sfx_submit(f, "{\"command\": [\"true\"], \"gpus\": 1}");
	CHECK_INT(j->state, JOB_PENDING);
	CHECK_INT(sfx_ndesired(f, 0), 0);
	CHECK_INT(state_node_set_admin(&f->st, n, NODE_CORDONED, "x", 0), ERR_CONFLICT);
	CHECK_INT(state_node_set_admin(&f->st, n, NODE_DRAINING, "fault", 1), ERR_CONFLICT);
	CHECK_INT(n->admin, NODE_AWAITING);
	CHECK_INT((long long)f->st.stats.refused_moves, 0);
	sfx_restart(f);
	n = sfx_node(f, 0);
	CHECK_INT(n->admin, NODE_AWAITING);
	CHECK_INT(state_node_approve(&f->st, n, err, sizeof(err)), 0);
	CHECK_INT(n->admin, NODE_READY);
	CHECK_STR(n->admin_reason, "");
	state_settle(&f->st);
	sfx_flush(f);
	CHECK_INT(state_job(&f->st, 1)->state, JOB_SCHEDULED);
	CHECK_INT(state_node_approve(&f->st, n, err, sizeof(err)), ERR_CONFLICT);
	CHECK_STR(err, "node node-1 is not awaiting approval (it is ready)");
	sfx_close(f);
}

/* A node's syncs are answered at the address it registered from only; one
 * registered before addresses were recorded takes its first sync's. */
TEST(syncs_come_from_the_address_a_node_registered_from)
{
	struct sfx *f = sfx_open(1, 2);
	struct node *n = sfx_node(f, 0);
	char err[600];
	CHECK_INT(state_node_sync_from(&f->st, n, "127.0.0.1", 0, err, sizeof(err)), 0);
	CHECK_INT(state_node_sync_from(&f->st, n, "127.0.0.2", 0, err, sizeof(err)), ERR_AUTH);
	CHECK_CONTAINS(err, "node node-1 registered from 127.0.0.1; this sync comes from "
	                    "127.0.0.2");
	CHECK_CONTAINS(err, "register again from here with the node's secret");
	CHECK_INT(state_node_sync_from(&f->st, n, "127.0.0.2", 1, err, sizeof(err)), ERR_AUTH);
	CHECK_CONTAINS(err, "anvil node reset node-1");
	n->registered_from[0] = '\0';
	CHECK_INT(state_node_sync_from(&f->st, n, "127.0.0.5", 1, err, sizeof(err)), 0);
	CHECK_STR(n->registered_from, "127.0.0.5");
	sfx_flush(f);
	sfx_restart(f);
	CHECK_STR(sfx_node(f, 0)->registered_from, "127.0.0.5");
	sfx_close(f);
}

/* A report for a rank placed on another node changes nothing: a node's
 * syncs speak for its own ranks only. */
TEST(a_report_for_another_nodes_rank_is_ignored)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = sfx_submit(f, "{\"command\": [\"sleep\", \"1d\"], \"gpus\": 1}");
	sfx_start_all(f);
	CHECK_INT(j->state, JOB_RUNNING);
	struct attempt *a = sfx_attempt(j);
	int mine = (int)a->ranks[0].node_id - 1, other = 1 - mine;
	char text[256];
	snprintf(text, sizeof(text),
	         "[{\"attempt_id\": %lld, \"rank\": 0, \"state\": \"exited\", \"exit_code\": 0,"
	         " \"signal\": 0}]",
	         (long long)a->id);
	json_t *forged = json_loads(text, 0, NULL);
	CHECK(json_is_array(forged));
	state_reports(&f->st, sfx_node(f, other), forged, sfx_node(f, other)->generation);
	json_decref(forged);
	sfx_flush(f);
	CHECK_INT(a->ranks[0].state, RANK_RUNNING);
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK_INT(sfx_ndesired(f, mine), 1);
	sfx_close(f);
}

TEST_MAIN()
