/* The state machines' tables (model/machine.h): checked against a matrix
 * written out here independently, and docs/states.md checked against the
 * tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "model/machine.h"
#include "model/model.h"

/* Row: from state; column: to state; 'x' allowed, '.' refused. */
static const char *const job_matrix[JOB_NSTATES] = {
        /*            pend sched run succ fail canc lost pre */
        /* pending */ ".x...x..",
        /* sched   */ "x.xxxxx.",
        /* running */ "x..xxxx.",
        /* succ    */ "........",
        /* failed  */ "........",
        /* cancel  */ "........",
        /* lost    */ "........",
        /* preempt */ "........",
};

static const char *const attempt_matrix[JOB_NSTATES] = {
        /*            pend sched run succ fail canc lost pre */
        /* pending */ "........",
        /* sched   */ "..xxxxxx",
        /* running */ "...xxxxx",
        /* succ    */ "........",
        /* failed  */ "........",
        /* cancel  */ "........",
        /* lost    */ "........",
        /* preempt */ "........",
};

static const char *const rank_matrix[RANK_NSTATES] = {
        /*             asg run exit fail lost */
        /* assigned */ ".xxxx",
        /* running  */ "..xxx",
        /* exited   */ ".....",
        /* failed   */ ".....",
        /* lost     */ ".....",
};

static const char *const node_matrix[NODE_NSTATES] = {
        /*          ready lost cord drning drned await */
        /* ready */ ".x....",
        /* lost  */ "x.....",
        /* cord  */ "......",
        /* drning*/ "......",
        /* drned */ "......",
        /* await */ "......",
};

static const char *const admin_matrix[NODE_NSTATES] = {
        /*           ready lost cord drning drned await */
        /* ready  */ "x.xx..",
        /* lost   */ "......",
        /* cord   */ "x.xx..",
        /* drning */ "x.xxx.",
        /* drned  */ "x.xx..",
        /* await  */ "x.....",
};

/* An attempt's stop cause is set once, from none, and never changes. */
static const char *const stop_matrix[ATTEMPT_STOP_NSTATES] = {
        /*              none rfail canc pre req time idle gpu rank0 lost hung */
        /* none      */ ".xxxxxxxxxx",
        /* rank_fail */ "...........",
        /* cancelled */ "...........",
        /* preempted */ "...........",
        /* requeued  */ "...........",
        /* time      */ "...........",
        /* idle      */ "...........",
        /* gpu_fault */ "...........",
        /* rank0     */ "...........",
        /* node_lost */ "...........",
        /* hung      */ "...........",
};

static const char *const cancel_matrix[JOB_CANCEL_NSTATES] = {
        /*               none requested */
        /* none      */ ".x",
        /* requested */ "..",
};

/* A rank on its node (agent/exec.h's enum exec_state, numbered alike). */
static const char *const agent_rank_matrix[] = {
        /*            run exit fail */
        /* running */ ".xx",
        /* exited  */ "...",
        /* failed  */ "...",
};

static void check_matrix(enum machine_kind k, const char *const *m)
{
	int n = machine_nstates(k);
	for (int from = 0; from < n; from++)
		for (int to = 0; to < n; to++) {
			int want = m[from][to] == 'x';
			int got = machine_find(k, from, to) != NULL;
			if (want != got)
				FAIL_AT("%s %s -> %s: table says %s, matrix says %s",
				        machine_kind_name(k), machine_state_name(k, from),
				        machine_state_name(k, to), got ? "allowed" : "refused",
				        want ? "allowed" : "refused");
		}
}

TEST(job_table_is_the_matrix)
{
	check_matrix(MACHINE_JOB, job_matrix);
}

TEST(attempt_table_is_the_matrix)
{
	check_matrix(MACHINE_ATTEMPT, attempt_matrix);
}

TEST(rank_table_is_the_matrix)
{
	check_matrix(MACHINE_RANK, rank_matrix);
}

TEST(stop_and_cancel_tables_are_the_matrices)
{
	check_matrix(MACHINE_ATTEMPT_STOP, stop_matrix);
	check_matrix(MACHINE_JOB_CANCEL, cancel_matrix);
	CHECK_INT(machine_initial(MACHINE_ATTEMPT_STOP), ATTEMPT_STOP_NONE);
	CHECK_INT(machine_initial(MACHINE_JOB_CANCEL), JOB_CANCEL_NONE);
	CHECK(!machine_final(MACHINE_ATTEMPT_STOP, ATTEMPT_STOP_NONE));
	for (int s = 1; s < ATTEMPT_STOP_NSTATES; s++)
		CHECK(machine_final(MACHINE_ATTEMPT_STOP, s));
}

/* The events the causes record: those the job's own would not tell. */
TEST(stop_and_cancel_events)
{
	static const char *const events[ATTEMPT_STOP_NSTATES] = {
	        [ATTEMPT_STOP_PREEMPTED] = "job.preempted",
	        [ATTEMPT_STOP_TIME_LIMIT] = "job.timeout",
	        [ATTEMPT_STOP_IDLE] = "job.idle_timeout",
	        [ATTEMPT_STOP_GPU_FAULT] = "job.gpu_fault",
	        [ATTEMPT_STOP_HUNG] = "job.hung",
	};
	for (int s = 1; s < ATTEMPT_STOP_NSTATES; s++) {
		const struct machine_move *m =
		        machine_find(MACHINE_ATTEMPT_STOP, ATTEMPT_STOP_NONE, s);
		CHECK(m != NULL);
		CHECK_STR(m->event ? m->event : "-", events[s] ? events[s] : "-");
	}
	const struct machine_move *c =
	        machine_find(MACHINE_JOB_CANCEL, JOB_CANCEL_NONE, JOB_CANCEL_REQUESTED);
	CHECK(c != NULL && c->event != NULL);
	CHECK_STR(c->event, "job.cancel");
}

/* What each cause decides, written out again: requeue (R), the first
 * failing rank's status (S), rank 0's end only (0), ends lost (L), ends
 * failed (F). */
TEST(stop_outcomes_are_the_list)
{
	static const char *const decides[ATTEMPT_STOP_NSTATES] = {
	        [ATTEMPT_STOP_NONE] = "S",         [ATTEMPT_STOP_RANK_FAILED] = "S",
	        [ATTEMPT_STOP_CANCELLED] = "",     [ATTEMPT_STOP_PREEMPTED] = "R",
	        [ATTEMPT_STOP_REQUEUED] = "R",     [ATTEMPT_STOP_TIME_LIMIT] = "",
	        [ATTEMPT_STOP_IDLE] = "",          [ATTEMPT_STOP_GPU_FAULT] = "S",
	        [ATTEMPT_STOP_RANK0_ENDED] = "S0", [ATTEMPT_STOP_NODE_LOST] = "RL",
	        [ATTEMPT_STOP_HUNG] = "RF",
	};
	for (int s = 0; s < ATTEMPT_STOP_NSTATES; s++) {
		const struct machine_outcome *o = machine_outcome(MACHINE_ATTEMPT_STOP, s);
		CHECK(o != NULL && o->what != NULL && *o->what);
		CHECK_INT(o->state, s);
		CHECK_INT(machine_decides(MACHINE_ATTEMPT_STOP, s, MACHINE_REQUEUES),
		          strchr(decides[s], 'R') != NULL);
		CHECK_INT(machine_decides(MACHINE_ATTEMPT_STOP, s, MACHINE_RANK_STATUS),
		          strchr(decides[s], 'S') != NULL);
		CHECK_INT(machine_decides(MACHINE_ATTEMPT_STOP, s, MACHINE_RANK0_ONLY),
		          strchr(decides[s], '0') != NULL);
		CHECK_INT(machine_decides(MACHINE_ATTEMPT_STOP, s, MACHINE_ENDS_LOST),
		          strchr(decides[s], 'L') != NULL);
		CHECK_INT(machine_decides(MACHINE_ATTEMPT_STOP, s, MACHINE_ENDS_FAILED),
		          strchr(decides[s], 'F') != NULL);
	}
	for (int s = 0; s < JOB_CANCEL_NSTATES; s++)
		CHECK_INT(machine_outcome(MACHINE_JOB_CANCEL, s)->state, s);
	CHECK(machine_outcome(MACHINE_JOB, JOB_PENDING) == NULL);
	CHECK(machine_outcome(MACHINE_ATTEMPT_STOP, ATTEMPT_STOP_NSTATES) == NULL);
	CHECK(!machine_decides(MACHINE_JOB, JOB_PENDING, MACHINE_REQUEUES));
	char out[8192];
	machine_markdown(MACHINE_ATTEMPT_STOP, out, sizeof(out));
	CHECK(strstr(out, "    none --> preempted\n") != NULL);
	CHECK(strstr(out, "| none | time_limit | job.timeout |") != NULL);
	CHECK(strstr(out, "\n| state | outcome |\n|---|---|\n| none | ") != NULL);
	machine_markdown(MACHINE_RANK, out, sizeof(out));
	CHECK(strstr(out, "| state | outcome |") == NULL);
}

TEST(node_tables_are_the_matrices)
{
	check_matrix(MACHINE_NODE, node_matrix);
	check_matrix(MACHINE_NODE_ADMIN, admin_matrix);
}

/* The agent's rank: created running, ended once, no way back. */
TEST(agent_rank_table_is_the_matrix)
{
	CHECK_INT(machine_nstates(MACHINE_AGENT_RANK), 3);
	check_matrix(MACHINE_AGENT_RANK, agent_rank_matrix);
	CHECK_INT(machine_initial(MACHINE_AGENT_RANK), 0);
	CHECK_STR(machine_state_name(MACHINE_AGENT_RANK, 0), "running");
	CHECK_STR(machine_kind_name(MACHINE_AGENT_RANK), "agent rank");
	CHECK(!machine_final(MACHINE_AGENT_RANK, 0));
	CHECK(machine_final(MACHINE_AGENT_RANK, 1) && machine_final(MACHINE_AGENT_RANK, 2));
}

/* Final in the model (job_state_final, rank_state_final) means no move
 * out in the table, and the other way round for every state in use. */
TEST(final_states_have_no_way_out)
{
	for (int s = 0; s < JOB_NSTATES; s++)
		if (job_state_final((enum job_state)s))
			CHECK(machine_final(MACHINE_JOB, s) && machine_final(MACHINE_ATTEMPT, s));
	CHECK(!machine_final(MACHINE_JOB, JOB_PENDING));
	CHECK(!machine_final(MACHINE_JOB, JOB_SCHEDULED));
	CHECK(!machine_final(MACHINE_JOB, JOB_RUNNING));
	CHECK(!machine_final(MACHINE_ATTEMPT, JOB_SCHEDULED));
	CHECK(!machine_final(MACHINE_ATTEMPT, JOB_RUNNING));
	for (int s = 0; s < RANK_NSTATES; s++)
		CHECK_INT(machine_final(MACHINE_RANK, s), rank_state_final((enum rank_state)s));
	/* a node is never done: lost comes back, drained is uncordoned */
	CHECK(!machine_final(MACHINE_NODE, NODE_READY) && !machine_final(MACHINE_NODE, NODE_LOST));
	for (int s = 0; s < NODE_NSTATES; s++)
		if (s != NODE_LOST)
			CHECK(!machine_final(MACHINE_NODE_ADMIN, s));
	CHECK_INT(machine_initial(MACHINE_JOB), JOB_PENDING);
	CHECK_INT(machine_initial(MACHINE_ATTEMPT), JOB_SCHEDULED);
	CHECK_INT(machine_initial(MACHINE_RANK), RANK_ASSIGNED);
}

/* Jobs and nodes record an event on every move; attempts and ranks none
 * (their job's events tell); the causes' events are checked above. No row
 * is listed twice. */
TEST(events_by_kind_and_no_duplicates)
{
	for (int k = 0; k < MACHINE_NKINDS; k++) {
		const struct machine_move *m = machine_moves((enum machine_kind)k);
		CHECK(m != NULL && m->why != NULL);
		for (; m->why; m++) {
			int want = k == MACHINE_JOB || k == MACHINE_NODE || k == MACHINE_NODE_ADMIN;
			if (k <= MACHINE_NODE_ADMIN)
				CHECK_INT(m->event != NULL, want);
			CHECK(m->from >= 0 && m->from < machine_nstates((enum machine_kind)k));
			CHECK(m->to >= 0 && m->to < machine_nstates((enum machine_kind)k));
			CHECK(machine_find((enum machine_kind)k, m->from, m->to) == m);
		}
	}
	CHECK(machine_moves((enum machine_kind)MACHINE_NKINDS) == NULL);
	CHECK(machine_find(MACHINE_JOB, JOB_SUCCEEDED, JOB_PENDING) == NULL);
}

TEST(markdown_draws_every_move)
{
	char out[8192];
	size_t n = machine_markdown(MACHINE_RANK, out, sizeof(out));
	CHECK_INT((long long)n, (long long)strlen(out));
	CHECK(strstr(out, "[*] --> assigned\n") != NULL);
	CHECK(strstr(out, "    assigned --> running\n") != NULL);
	CHECK(strstr(out, "    lost --> [*]\n") != NULL);
	CHECK(strstr(out, "| running | exited | - |") != NULL);
	/* a node is created ready, or awaiting approval where the server asks */
	n = machine_markdown(MACHINE_NODE_ADMIN, out, sizeof(out));
	CHECK(strstr(out, "    [*] --> ready\n    [*] --> awaiting_approval\n") != NULL);
	CHECK(strstr(out, "    awaiting_approval --> ready\n") != NULL);
	CHECK(strstr(out, "awaiting_approval --> [*]") == NULL);
	CHECK_INT(machine_also_initial(MACHINE_NODE_ADMIN), NODE_AWAITING);
	CHECK_INT(machine_also_initial(MACHINE_JOB), -1);
	char tiny[16];
	n = machine_markdown(MACHINE_JOB, tiny, sizeof(tiny));
	CHECK_INT((long long)n, 15);
	CHECK_INT((long long)strlen(tiny), 15);
}

static char *read_doc(void)
{
	FILE *f = fopen(ANVIL_STATES_DOC, "r");
	if (!f)
		FAIL_AT("cannot read %s", ANVIL_STATES_DOC);
	static char text[1 << 16];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

/* docs/states.md holds each kind between "<!-- machine: KIND -->" and
 * "<!-- end -->", exactly as machine_markdown draws it. */
TEST(docs_states_md_is_the_tables)
{
	const char *doc = read_doc();
	for (int k = 0; k < MACHINE_NKINDS; k++) {
		char open[64], want[8192];
		snprintf(open, sizeof(open), "<!-- machine: %s -->\n",
		         machine_kind_name((enum machine_kind)k));
		machine_markdown((enum machine_kind)k, want, sizeof(want));
		const char *at = strstr(doc, open);
		if (!at)
			FAIL_AT("docs/states.md lacks %s", open);
		at += strlen(open);
		const char *end = strstr(at, "<!-- end -->");
		if (!end || (size_t)(end - at) != strlen(want) || strncmp(at, want, strlen(want)))
			FAIL_AT("docs/states.md's %s differs from the table; it should read:\n%s",
			        machine_kind_name((enum machine_kind)k), want);
	}
}

TEST_MAIN()
