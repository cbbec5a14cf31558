/* The server's state transitions (server/state.h) without HTTP: submit,
 * place, the agents' reports, lost nodes, cancel, preemption, drains,
 * requeues and restarts, each through the public functions the handlers
 * call, with the agents played by state_fixture.h. */
#include "state_fixture.h"

#include "base/err.h"

/* The node index (id - 1) rank r of a runs on. */
static int node_of(const struct attempt *a, int r)
{
	CHECK(r < a->nranks);
	return (int)a->ranks[r].node_id - 1;
}

static uint64_t used(struct sfx *f, int node)
{
	return sfx_node(f, node)->gpus_used;
}

/* A 2-node gang of 2 GPUs a node, placed and running on a fresh
 * 2 x 2-GPU cluster. */
static struct job *running_gang(struct sfx *f)
{
	struct job *j = sfx_submit(f, "{\"command\": [\"torchrun\", \"train.py\"], \"gpus\": 2,"
	                              " \"nodes\": 2, \"name\": \"gang\"}");
	CHECK_INT(j->state, JOB_SCHEDULED);
	sfx_start_all(f);
	CHECK_INT(j->state, JOB_RUNNING);
	return j;
}

/* ---- submit ---- */

/* facts_ms_ago: since the facts its agent sent at registering; none from
 * a node loaded by a restarted server, until its agent sends them again. */
TEST(a_node_says_when_its_agent_last_sent_its_facts)
{
	struct sfx *f = sfx_open(1, 2);
	json_t *o = state_node_json(&f->st, sfx_node(f, 0), 0);
	CHECK(json_is_integer(json_object_get(o, "facts_ms_ago")));
	CHECK(json_integer_value(json_object_get(o, "facts_ms_ago")) < 60000);
	json_decref(o);
	sfx_restart(f);
	o = state_node_json(&f->st, sfx_node(f, 0), 0);
	CHECK(json_is_null(json_object_get(o, "facts_ms_ago")));
	json_decref(o);
	sfx_close(f);
}

TEST(submit_without_nodes_waits_then_a_new_node_takes_it)
{
	struct sfx *f = sfx_open(0, 0);
	struct job *j = sfx_submit(f, "{\"command\": [\"python3\", \"train.py\"], \"gpus\": 2,"
	                              " \"name\": \"first\", \"priority\": 5}");
	CHECK_INT(j->id, 1);
	CHECK_INT(j->state, JOB_PENDING);
	CHECK_INT(j->gpus, 2);
	CHECK_INT(j->nodes, 1);
	CHECK_INT(j->priority, 5);
	CHECK_STR(j->name, "first");
	CHECK_STR(j->queue, "default");
	CHECK_STR(j->team, "default");
	CHECK(j->submit_ms > 0);
	CHECK_INT(j->nattempts, 0);
	CHECK_INT(f->st.core->npending, 1);
	CHECK(f->st.core->pending[0] == j);
	CHECK_CONTAINS(j->reason, "no nodes have registered yet");
	CHECK_INT(sfx_events(f, "job.submitted", j->id, "1 node(s) x 2 GPU(s)"), 1);

	/* a node registers: the waiting job is placed on it */
	int n = sfx_add_node(f, 2);
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_INT(f->st.core->npending, 0);
	CHECK_INT(j->nattempts, 1);
	CHECK_INT(sfx_attempt(j)->ranks[0].gpus, 0x3);
	CHECK_INT(used(f, n), 0x3);
	CHECK_INT(sfx_events(f, "job.placed", j->id, NULL), 1);
	sfx_close(f);
}

static void refused(struct sfx *f, const char *body, int want_rc, const char *want1,
                    const char *want2)
{
	char err[256] = "";
	int rc = sfx_submit_refused(f, body, err, sizeof(err));
	if (rc != want_rc)
		FAIL_AT("%s: rc %d (%s), want %d", body, rc, err, want_rc);
	CHECK_CONTAINS(err, want1);
	CHECK_CONTAINS(err, want2);
}

TEST(submit_refusals_name_the_field_and_change_nothing)
{
	struct sfx *f = sfx_open(1, 2);
	int64_t gen = sfx_node(f, 0)->generation;
	refused(f, "{\"gpus\": 1}", ERR_INVALID, "field 'command'", "required");
	refused(f, "{\"command\": [\"x\"], \"gpus\": -1}", ERR_INVALID, "field 'gpus'",
	        "below the minimum 0");
	refused(f, "{\"command\": [\"x\"], \"gpus\": 0, \"gpu_type\": \"h200\"}", ERR_INVALID,
	        "field 'gpu_type': 'h200'", "field 'gpus' is 0 (a CPU-only job)");
	refused(f, "{\"command\": [\"x\"], \"gpus\": 0, \"min_gpu_memory_bytes\": 1073741824}",
	        ERR_INVALID, "field 'min_gpu_memory_bytes': 1073741824", "a CPU-only job");
	refused(f, "{\"command\": [\"x\"], \"gpus\": 0, \"pool\": \"cpu\"}", ERR_UNFIT,
	        "no node is in the requested pool", "{\"pool\":\"cpu\"}");
	refused(f, "{\"command\": [\"x\"], \"gpus\": 0, \"nodes\": 2}", ERR_UNFIT,
	        "asks for 2 nodes for its CPU-only ranks", "only 1 node matches");
	refused(f, "{\"command\": [\"x\"], \"priority\": \"high\"}", ERR_INVALID,
	        "field 'priority'", "\"high\"");
	refused(f, "{\"command\": [\"x\"], \"queue\": \"nope\"}", ERR_INVALID, "field 'queue'",
	        "no queue named 'nope'");
	refused(f, "{\"command\": [\"x\"], \"colour\": \"red\"}", ERR_INVALID, "field 'colour'",
	        "unknown field");
	refused(f, "{\"command\": [\"\"]}", ERR_INVALID, "field 'command[0]'", "must not be empty");
	refused(f, "{\"command\": [\"x\"], \"env\": {\"A=B\": \"c\"}}", ERR_INVALID, "field 'env'",
	        "A=B");
	refused(f, "{\"command\": [\"x\"], \"cpus\": 0.001}", ERR_INVALID, "field 'cpus'",
	        "below the minimum");
	/* valid, but larger than any node */
	refused(f, "{\"command\": [\"x\"], \"gpus\": 4}", ERR_UNFIT, "4 GPUs per node",
	        "largest matching node has 2");
	refused(f, "{\"command\": [\"x\"], \"gpus\": 1, \"nodes\": 2}", ERR_UNFIT, "2 nodes",
	        "only 1 matching node");
	CHECK_INT(f->st.njobs, 0);
	CHECK_INT(f->st.core->npending, 0);
	CHECK_INT(f->st.core->nactive, 0);
	CHECK_INT(used(f, 0), 0);
	CHECK_INT(sfx_node(f, 0)->generation, gen);
	CHECK_INT(sfx_events(f, "job.submitted", 0, NULL), 0);
	/* refusals use up no id */
	struct job *j = sfx_submit(f, "{\"command\": [\"x\"]}");
	CHECK_INT(j->id, 1);
	CHECK_INT(j->gpus, 1);
	sfx_close(f);
}

/* ---- placement and reports ---- */

/* A CPU-only job (gpus 0) holds no GPU: it starts while its node's GPUs are
 * all taken, its rank sees none, and a node runs at most as many CPU-only
 * ranks as it has CPUs (the fixture's facts give none: 1). */
TEST(a_cpu_only_job_runs_beside_busy_gpus_and_within_the_nodes_limit)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *g = sfx_submit_running(f, "{\"command\": [\"train\"], \"gpus\": 2}");
	struct job *c = sfx_submit(f, "{\"command\": [\"prep\"], \"gpus\": 0}");
	CHECK_INT(c->state, JOB_SCHEDULED);
	struct attempt *a = sfx_attempt(c);
	CHECK_INT(a->ranks[0].gpus, 0);
	CHECK_INT(used(f, 0), 0x3); /* still the GPU job's alone */
	json_t *d = sfx_entry(f, a, 0);
	const json_t *env = json_object_get(d, "env");
	CHECK_INT(json_array_size(json_object_get(d, "gpus")), 0);
	CHECK_STR(jv_str(env, "CUDA_VISIBLE_DEVICES", "?"), "");
	CHECK_STR(jv_str(env, "NVIDIA_VISIBLE_DEVICES", "?"), "void");
	CHECK_STR(jv_str(env, "NPROC_PER_NODE", "?"), "1");
	CHECK_STR(jv_str(env, "WORLD_SIZE", "?"), "1");
	json_decref(d);
	/* the node's one CPU-only rank is taken: the next one waits, and says so */
	struct job *c2 = sfx_submit(f, "{\"command\": [\"eval\"], \"gpus\": 0}");
	CHECK_INT(c2->state, JOB_PENDING);
	sfx_tick(f);
	CHECK_STR(c2->reason, "every eligible node runs its limit of 1 CPU-only rank (1 node)");
	sfx_start_all(f);
	sfx_exit(f, 0, a->id, 0, 0);
	sfx_sync(f, 0);
	CHECK_INT(c->state, JOB_SUCCEEDED);
	CHECK_INT(c2->state, JOB_SCHEDULED);
	CHECK_INT(g->state, JOB_RUNNING);
	CHECK_INT(used(f, 0), 0x3);
	sfx_close(f);
}

TEST(a_gang_gets_one_rank_on_each_of_two_nodes)
{
	struct sfx *f = sfx_open(2, 2);
	int64_t gen0 = sfx_node(f, 0)->generation, gen1 = sfx_node(f, 1)->generation;
	struct job *j = sfx_submit(f, "{\"command\": [\"torchrun\"], \"gpus\": 2, \"nodes\": 2}");
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_STR(j->reason, "placed");
	CHECK_INT(f->st.core->npending, 0);
	CHECK_INT(f->st.core->nactive, 1);
	CHECK_INT(j->nattempts, 1);
	struct attempt *a = sfx_attempt(j);
	CHECK(f->st.core->active[0] == a);
	CHECK_INT(a->state, JOB_SCHEDULED);
	CHECK_INT(a->number, 1);
	CHECK_INT(a->job_id, j->id);
	CHECK_INT(attempt_ending(a), 0);
	CHECK_INT(a->nranks, 2);
	CHECK(a->ranks[0].node_id != a->ranks[1].node_id);
	for (int r = 0; r < 2; r++) {
		CHECK_INT(a->ranks[r].rank, r);
		CHECK_INT(a->ranks[r].state, RANK_ASSIGNED);
		CHECK_INT(a->ranks[r].gpus, 0x3);
		CHECK_INT(used(f, node_of(a, r)), 0x3);
		CHECK_INT(sfx_ndesired(f, node_of(a, r)), 1);
		CHECK(sfx_desires(f, node_of(a, r), a->id, r));
	}
	CHECK_STR(a->master_addr, "127.0.0.1");
	CHECK_INT(a->master_port, 20000 + a->id);
	CHECK(sfx_node(f, 0)->generation > gen0);
	CHECK(sfx_node(f, 1)->generation > gen1);
	CHECK_INT(sfx_events(f, "job.placed", j->id, "on 2 node(s)"), 1);
	/* the cluster is full: the next job waits */
	struct job *next = sfx_submit(f, "{\"command\": [\"x\"]}");
	CHECK_INT(next->state, JOB_PENDING);
	CHECK_INT(next->nattempts, 0);
	sfx_close(f);
}

TEST(a_job_runs_once_every_rank_reports_running)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *j = sfx_submit(f, "{\"command\": [\"torchrun\"], \"gpus\": 2, \"nodes\": 2}");
	struct attempt *a = sfx_attempt(j);
	int n0 = node_of(a, 0), n1 = node_of(a, 1);
	/* a report before the agent applied anything changes nothing */
	sfx_report(f, n0);
	CHECK_INT(a->ranks[0].state, RANK_ASSIGNED);
	sfx_apply(f, n0);
	sfx_report(f, n0);
	CHECK_INT(a->ranks[0].state, RANK_RUNNING);
	CHECK_INT(a->ranks[0].pid, 1000);
	CHECK_INT(a->ranks[1].state, RANK_ASSIGNED);
	CHECK_INT(a->state, JOB_SCHEDULED);
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_INT(j->start_ms, 0);
	sfx_apply(f, n1);
	sfx_report(f, n1);
	CHECK_INT(a->ranks[1].state, RANK_RUNNING);
	CHECK_INT(a->state, JOB_RUNNING);
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK(a->start_ms > 0);
	CHECK_INT(j->start_ms, a->start_ms);
	CHECK_STR(j->reason, "running");
	/* reports are idempotent */
	int64_t start = j->start_ms, gen = sfx_node(f, n0)->generation;
	sfx_sync(f, n0);
	sfx_sync(f, n1);
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK_INT(j->start_ms, start);
	CHECK_INT(sfx_node(f, n0)->generation, gen);
	CHECK_INT(used(f, n0), 0x3);
	CHECK_INT(used(f, n1), 0x3);
	sfx_close(f);
}

TEST(every_rank_exiting_zero_succeeds_and_frees_the_gpus)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *j = running_gang(f);
	struct attempt *a = sfx_attempt(j);
	int n0 = node_of(a, 0), n1 = node_of(a, 1);
	sfx_exit(f, n0, a->id, 0, 0);
	sfx_sync(f, n0);
	CHECK_INT(a->ranks[0].state, RANK_EXITED);
	CHECK_INT(attempt_ending(a), 0); /* a rank that succeeds stops nobody */
	CHECK(sfx_desires(f, n1, a->id, 1));
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK_INT(used(f, n0), 0); /* freed rank by rank */
	CHECK_INT(used(f, n1), 0x3);
	sfx_exit(f, n1, a->id, 1, 0);
	sfx_sync(f, n1);
	CHECK_INT(a->state, JOB_SUCCEEDED);
	CHECK_INT(j->state, JOB_SUCCEEDED);
	CHECK(j->has_exit);
	CHECK_INT(j->exit_code, 0);
	CHECK(a->end_ms >= a->start_ms);
	CHECK_INT(j->end_ms, a->end_ms);
	CHECK_STR(j->reason, "all 2 rank(s) exited 0");
	CHECK_STR(a->end_reason, j->reason);
	CHECK_INT(used(f, n0), 0);
	CHECK_INT(used(f, n1), 0);
	CHECK_INT(f->st.core->nactive, 0);
	CHECK_INT(sfx_ndesired(f, n0), 0);
	CHECK_INT(sfx_ndesired(f, n1), 0);
	CHECK_INT(sfx_events(f, "job.finished", j->id, "succeeded exit_code=0"), 1);
	/* the same report again (a retried sync) changes nothing */
	int64_t end = j->end_ms;
	CHECK(sfx_proc(f, n1, a->id, 1) == NULL); /* acknowledged: the agent forgot it */
	json_t *again = json_pack("[{s:I,s:i,s:s,s:i,s:i}]", "attempt_id", (json_int_t)a->id,
	                          "rank", 1, "state", "exited", "exit_code", 9, "signal", 0);
	state_reports(&f->st, sfx_node(f, n1), again, f->agents[n1].gen);
	json_decref(again);
	CHECK_INT(j->state, JOB_SUCCEEDED);
	CHECK_INT(j->exit_code, 0);
	CHECK_INT(j->end_ms, end);
	CHECK_INT(a->ranks[1].exit_code, 0);
	sfx_close(f);
}

/* A rank the kernel killed at its memory limit (its agent counted the
 * OOM kills in its memory cgroup) fails the job with that reason, in the
 * limit's words, and the exit status of the kill. */
TEST(a_rank_killed_at_its_memory_limit_says_out_of_memory)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *j = sfx_submit_running(
	        f, "{\"command\": [\"train\"], \"gpus\": 1, \"memory_bytes\": 67108864}");
	struct attempt *a = sfx_attempt(j);
	struct sfx_proc *p = sfx_proc(f, 0, a->id, 0);
	p->state = SFX_EXITED;
	p->signal = 9;
	p->oom_kills = 1;
	sfx_sync(f, 0);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 137);
	CHECK_STR(j->reason, "rank 0 on node-1 ran out of memory (limit 64 MiB): the kernel "
	                     "killed 1 of its processes");
	/* A shell whose child was killed exits 137 by itself: the same reason. */
	struct job *k = sfx_submit_running(
	        f, "{\"command\": [\"train\"], \"gpus\": 1, \"memory_bytes\": 1610612736}");
	a = sfx_attempt(k);
	p = sfx_proc(f, 0, a->id, 0);
	p->state = SFX_EXITED;
	p->exit_code = 137;
	p->oom_kills = 2;
	sfx_sync(f, 0);
	CHECK_INT(k->exit_code, 137);
	CHECK_STR(k->reason, "rank 0 on node-1 ran out of memory (limit 1.5 GiB): the kernel "
	                     "killed 2 of its processes");
	sfx_close(f);
}

TEST(a_rank_exiting_non_zero_stops_the_gang_and_fails_the_job)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *j = running_gang(f);
	struct attempt *a = sfx_attempt(j);
	int n0 = node_of(a, 0), n1 = node_of(a, 1);
	int64_t gen1 = sfx_node(f, n1)->generation;
	sfx_exit(f, n0, a->id, 0, 3);
	sfx_sync(f, n0);
	CHECK_INT(a->ranks[0].state, RANK_EXITED);
	CHECK_INT(a->ranks[0].exit_code, 3);
	CHECK(attempt_ending(a));
	/* the other rank is dropped from its node's desired set ... */
	CHECK(sfx_node(f, n1)->generation > gen1);
	CHECK_INT(sfx_ndesired(f, n1), 0);
	/* ... but holds its GPUs and keeps the job going until it reports */
	CHECK_INT(a->ranks[1].state, RANK_RUNNING);
	CHECK_INT(used(f, n0), 0);
	CHECK_INT(used(f, n1), 0x3);
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK_INT(a->state, JOB_RUNNING);
	CHECK(j->has_exit);
	CHECK_INT(j->exit_code, 3);
	char want[64];
	snprintf(want, sizeof(want), "rank 0 on node-%d exited non-zero", n0 + 1);
	CHECK_STR(j->reason, want);
	/* node n1's agent stops its rank (SIGTERM) and reports the end */
	sfx_sync(f, n1);
	CHECK(sfx_proc(f, n1, a->id, 1)->stopping);
	CHECK_INT(sfx_end_stopped(f, n1), 1);
	sfx_sync(f, n1);
	CHECK_INT(a->ranks[1].state, RANK_EXITED);
	CHECK_INT(a->ranks[1].signal, 15);
	CHECK_INT(a->state, JOB_FAILED);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 3); /* the first failure, not the SIGTERM */
	CHECK_STR(j->reason, want);
	CHECK(j->end_ms > 0);
	CHECK_INT(used(f, n1), 0);
	CHECK_INT(f->st.core->nactive, 0);
	CHECK_INT(sfx_events(f, "job.finished", j->id, "failed exit_code=3"), 1);
	sfx_close(f);
}

TEST(a_rank_failing_to_start_fails_the_gang_and_unstarted_ranks_end_when_dropped)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *j = sfx_submit(f, "{\"command\": [\"nope\"], \"gpus\": 1, \"nodes\": 2}");
	struct attempt *a = sfx_attempt(j);
	int n0 = node_of(a, 0), n1 = node_of(a, 1);
	sfx_apply(f, n0);
	sfx_fail_start(f, n0, a->id, 0);
	sfx_report(f, n0);
	CHECK_INT(a->ranks[0].state, RANK_FAILED_START);
	CHECK_STR(a->ranks[0].error, "exec: no such file");
	CHECK(attempt_ending(a));
	CHECK_INT(j->exit_code, 127);
	CHECK_CONTAINS(j->reason, "failed to start");
	/* node n1's agent never started rank 1: while it has not applied the
	 * generation that dropped it, its silence proves nothing */
	sfx_report(f, n1);
	CHECK_INT(a->ranks[1].state, RANK_ASSIGNED);
	CHECK_INT(used(f, n1), 0x1);
	sfx_apply(f, n1);
	CHECK_INT(sfx_running(f, n1), 0);
	sfx_report(f, n1); /* has applied it and does not run it: it is over */
	CHECK_INT(a->ranks[1].state, RANK_EXITED);
	CHECK_STR(a->ranks[1].error, "stopped before it started");
	CHECK_INT(a->state, JOB_FAILED);
	CHECK_INT(j->state, JOB_FAILED);
	CHECK_INT(j->exit_code, 127);
	CHECK_INT(used(f, n0), 0);
	CHECK_INT(used(f, n1), 0);
	sfx_close(f);
}

/* ---- lost nodes ---- */

TEST(a_silent_node_loses_its_ranks_and_the_job)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *j = running_gang(f);
	struct attempt *a = sfx_attempt(j);
	int n0 = node_of(a, 0), n1 = node_of(a, 1);
	sfx_silence(f, n1);
	struct node *lost = sfx_node(f, n1);
	CHECK_INT(lost->state, NODE_LOST);
	CHECK_STR(node_shown_state(lost), "lost");
	CHECK_INT(a->ranks[1].state, RANK_LOST);
	CHECK_INT(used(f, n1), 0);
	CHECK(attempt_ending(a));
	CHECK_INT(sfx_ndesired(f, n0), 0); /* the gang stops */
	CHECK_INT(j->state, JOB_RUNNING);  /* until rank 0 reports its end */
	CHECK_INT(sfx_events(f, "node.lost", 0, NULL), 1);
	char want[64];
	snprintf(want, sizeof(want), "rank 1 on node-%d was lost with its node", n1 + 1);
	CHECK_STR(j->reason, want);
	sfx_sync(f, n0);
	CHECK_INT(sfx_end_stopped(f, n0), 1);
	sfx_sync(f, n0);
	CHECK_INT(a->state, JOB_LOST);
	CHECK_INT(j->state, JOB_LOST);
	CHECK_INT(j->exit_code, 75); /* EX_TEMPFAIL, as anvil run --wait says */
	CHECK_STR(j->reason, want);
	CHECK_INT(used(f, n0), 0);
	CHECK_INT(f->st.core->nactive, 0);

	/* nothing is placed on a lost node */
	struct job *k = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2, \"nodes\": 2}");
	CHECK_INT(k->state, JOB_PENDING);

	/* it comes back still running the lost rank: not ready until it has
	 * stopped it */
	sfx_report(f, n1);
	CHECK_INT(lost->state, NODE_LOST);
	CHECK_INT(a->ranks[1].state, RANK_LOST); /* fenced: a stale report changes nothing */
	sfx_apply(f, n1);
	CHECK_INT(sfx_end_stopped(f, n1), 1);
	sfx_report(f, n1);
	CHECK_INT(lost->state, NODE_READY);
	CHECK_STR(node_shown_state(lost), "ready");
	CHECK_INT(a->state, JOB_LOST);
	CHECK_INT(sfx_events(f, "node.ready", 0, NULL), 1);
	CHECK_INT(k->state, JOB_SCHEDULED); /* and takes work again */
	sfx_close(f);
}

TEST(a_lost_node_back_with_nothing_running_is_ready_at_once)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *j = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	sfx_start_all(f);
	sfx_silence(f, 0);
	CHECK_INT(j->state, JOB_LOST); /* its only rank: over at once */
	CHECK_INT(sfx_attempt(j)->ranks[0].state, RANK_LOST);
	CHECK_INT(used(f, 0), 0);
	CHECK_INT(f->st.core->nactive, 0);
	CHECK_STR(node_shown_state(sfx_node(f, 0)), "lost");
	/* a later check changes nothing */
	state_check_nodes(&f->st, now_ms());
	CHECK_INT(sfx_events(f, "node.lost", 0, NULL), 1);
	struct job *k = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	CHECK_INT(k->state, JOB_PENDING);
	/* the machine rebooted: its agent runs nothing */
	sfx_agent_reboot(f, 0);
	sfx_report(f, 0);
	CHECK_INT(sfx_node(f, 0)->state, NODE_READY);
	CHECK_INT(k->state, JOB_SCHEDULED);
	CHECK_INT(used(f, 0), 0x1);
	sfx_close(f);
}

/* ---- cancel ---- */

TEST(cancelling_a_pending_job_ends_it_at_once)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *a = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	struct job *b = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	CHECK_INT(b->state, JOB_PENDING);
	int64_t gen = sfx_node(f, 0)->generation;
	CHECK_INT(state_cancel(&f->st, b), 0);
	CHECK_INT(b->state, JOB_CANCELLED);
	CHECK(b->cancel_requested);
	CHECK(b->end_ms > 0);
	CHECK_STR(b->reason, "cancelled before it started");
	CHECK_INT(b->nattempts, 0);
	CHECK_INT(f->st.core->npending, 0);
	CHECK_INT(sfx_node(f, 0)->generation, gen);
	CHECK_INT(sfx_events(f, "job.cancel", b->id, NULL), 1);
	/* again: nothing more */
	int64_t end = b->end_ms;
	CHECK_INT(state_cancel(&f->st, b), 0);
	CHECK_INT(b->end_ms, end);
	CHECK_INT(sfx_events(f, "job.cancel", b->id, NULL), 1);
	/* when the GPUs free up, the cancelled job is not placed */
	sfx_start_all(f);
	sfx_exit(f, 0, sfx_attempt(a)->id, 0, 0);
	sfx_sync(f, 0);
	CHECK_INT(a->state, JOB_SUCCEEDED);
	CHECK_INT(b->state, JOB_CANCELLED);
	CHECK_INT(b->nattempts, 0);
	CHECK_INT(f->st.core->nactive, 0);
	sfx_close(f);
}

TEST(cancelling_a_running_job_stops_its_ranks_then_ends_it)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *j = running_gang(f);
	struct attempt *a = sfx_attempt(j);
	int64_t gen0 = sfx_node(f, 0)->generation, gen1 = sfx_node(f, 1)->generation;
	CHECK_INT(state_cancel(&f->st, j), 0);
	sfx_flush(f);
	CHECK(j->cancel_requested);
	CHECK(attempt_ending(a));
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK_STR(j->reason, "cancelling: stopping every rank");
	CHECK(sfx_node(f, 0)->generation > gen0);
	CHECK(sfx_node(f, 1)->generation > gen1);
	CHECK_INT(sfx_ndesired(f, 0), 0);
	CHECK_INT(sfx_ndesired(f, 1), 0);
	CHECK_INT(used(f, 0), 0x3); /* until the ranks have stopped */
	CHECK_INT(used(f, 1), 0x3);
	for (int n = 0; n < 2; n++) {
		sfx_sync(f, n);
		CHECK_INT(sfx_end_stopped(f, n), 1);
	}
	sfx_sync(f, 0);
	CHECK_INT(j->state, JOB_RUNNING);
	CHECK_INT(used(f, 0), 0);
	/* a non-zero exit while cancelling does not make it a failure */
	sfx_sync(f, 1);
	CHECK_INT(a->state, JOB_CANCELLED);
	CHECK_INT(j->state, JOB_CANCELLED);
	CHECK_STR(j->reason, "cancelled by request");
	CHECK(j->has_exit);
	CHECK_INT(j->exit_code, 128 + 15);
	CHECK(j->end_ms > 0);
	CHECK_INT(used(f, 1), 0);
	CHECK_INT(f->st.core->nactive, 0);
	CHECK_INT(sfx_events(f, "job.finished", j->id, "cancelled"), 1);
	sfx_close(f);
}

/* ---- preemption, requeues and drains ---- */

TEST(a_higher_priority_job_preempts_and_the_victim_is_requeued)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *low = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2, \"name\": \"low\"}");
	sfx_start_all(f);
	CHECK_INT(low->state, JOB_RUNNING);
	struct attempt *a = sfx_attempt(low);
	struct job *high = sfx_submit(
	        f, "{\"command\": [\"x\"], \"gpus\": 2, \"priority\": 10, \"name\": \"high\"}");
	CHECK_INT(high->state, JOB_PENDING);
	/* under the minimum runtime, the victim is spared */
	sfx_tick(f);
	CHECK_INT(attempt_ending(a), 0);
	CHECK_INT(high->state, JOB_PENDING);

	f->st.config.preempt_min_runtime_ms = 0;
	int64_t gen = sfx_node(f, 0)->generation;
	sfx_tick(f);
	CHECK(attempt_ending(a));
	CHECK_INT(a->stop, ATTEMPT_STOP_PREEMPTED);
	CHECK_INT(a->preempted_for, high->id);
	char want[64];
	snprintf(want, sizeof(want), "preempted for job %lld (higher priority)",
	         (long long)high->id);
	CHECK_STR(a->end_reason, want);
	CHECK_CONTAINS(low->reason, want);
	CHECK_CONTAINS(low->reason, "will be requeued");
	CHECK(sfx_node(f, 0)->generation > gen);
	CHECK_INT(sfx_ndesired(f, 0), 0);
	CHECK_INT(low->state, JOB_RUNNING);  /* until its rank has stopped */
	CHECK_INT(high->state, JOB_PENDING); /* its GPUs are still held */
	CHECK_INT(used(f, 0), 0x3);
	CHECK_INT(sfx_events(f, "job.preempted", low->id, want), 1);

	sfx_sync(f, 0);
	CHECK_INT(sfx_end_stopped(f, 0), 1);
	sfx_report(f, 0);
	CHECK_INT(a->state, JOB_PREEMPTED);
	CHECK(a->end_ms > 0);
	CHECK_STR(a->end_reason, want);
	CHECK_INT(low->state, JOB_PENDING);
	CHECK_INT(low->start_ms, 0);
	CHECK_INT(low->end_ms, 0);
	CHECK(!low->has_exit);
	CHECK_INT(f->st.core->npending, 1);
	CHECK(f->st.core->pending[0] == low);
	CHECK_INT(sfx_events(f, "job.requeued", low->id, want), 1);
	/* the freed GPUs go to the preemptor */
	CHECK_INT(high->state, JOB_SCHEDULED);
	CHECK_INT(sfx_attempt(high)->ranks[0].gpus, 0x3);
	CHECK_INT(used(f, 0), 0x3);
	CHECK_INT(low->nattempts, 1);

	/* once it is done, the victim gets a new attempt */
	sfx_start_all(f);
	CHECK_INT(high->state, JOB_RUNNING);
	sfx_exit(f, 0, sfx_attempt(high)->id, 0, 0);
	sfx_sync(f, 0);
	CHECK_INT(high->state, JOB_SUCCEEDED);
	CHECK_INT(low->state, JOB_SCHEDULED);
	CHECK_INT(low->nattempts, 2);
	struct attempt *b = sfx_attempt(low);
	CHECK(b != a);
	CHECK_INT(b->number, 2);
	CHECK_INT(b->state, JOB_SCHEDULED);
	CHECK_INT(b->stop, ATTEMPT_STOP_NONE);
	CHECK_INT(a->state, JOB_PREEMPTED); /* history stays */
	sfx_start_all(f);
	sfx_exit(f, 0, b->id, 0, 0);
	sfx_sync(f, 0);
	CHECK_INT(low->state, JOB_SUCCEEDED);
	CHECK_INT(used(f, 0), 0);
	sfx_close(f);
}

TEST(a_requeued_victim_says_why_it_waits_and_its_attempt_keeps_the_cause)
{
	/* The job's own reason gives way to its next wait (schedule.c,
	 * apply_preemption); the cause stays with the attempt and the event. */
	struct sfx *f = sfx_open(1, 2);
	f->st.config.preempt_min_runtime_ms = 0;
	struct job *low = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	sfx_start_all(f);
	struct job *high = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2, \"priority\": 10}");
	sfx_tick(f);
	CHECK(attempt_ending(sfx_attempt(low)));
	sfx_sync(f, 0);
	sfx_end_stopped(f, 0);
	sfx_report(f, 0);
	CHECK_INT(low->state, JOB_PENDING);
	CHECK_INT(high->state, JOB_SCHEDULED);
	CHECK(strstr(low->reason, "will be requeued") == NULL);
	CHECK_CONTAINS(low->reason, "needs 2 GPUs on one node");
	CHECK_STR(low->attempts[0]->end_reason, "preempted for job 2 (higher priority)");
	CHECK_INT(sfx_events(f, "job.requeued", low->id, "preempted for job 2"), 1);
	sfx_close(f);
}

TEST(requeueing_an_attempt_stops_it_and_places_the_job_again)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *j = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	sfx_start_all(f);
	struct attempt *a = sfx_attempt(j);
	const char *why = "GPU 0 of node node-1 quarantined: XID 79";
	state_attempt_requeue(&f->st, a, why);
	sfx_flush(f);
	CHECK(attempt_ending(a));
	CHECK_INT(a->stop, ATTEMPT_STOP_REQUEUED);
	CHECK_INT(a->preempted_for, 0);
	CHECK_STR(a->end_reason, why);
	CHECK_CONTAINS(j->reason, "stopping to requeue: ");
	CHECK_CONTAINS(j->reason, why);
	CHECK_INT(sfx_ndesired(f, 0), 0);
	CHECK_INT(j->state, JOB_RUNNING);
	/* a second requeue of an attempt already ending changes nothing */
	state_attempt_requeue(&f->st, a, "something else");
	CHECK_STR(a->end_reason, why);
	sfx_sync(f, 0);
	CHECK_INT(sfx_end_stopped(f, 0), 1);
	sfx_sync(f, 0);
	CHECK_INT(a->state, JOB_PREEMPTED);
	CHECK_STR(a->end_reason, why);
	CHECK_INT(sfx_events(f, "job.requeued", j->id, why), 1);
	/* back in the queue and, the node being free, placed again at once */
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_INT(j->nattempts, 2);
	CHECK_INT(sfx_attempt(j)->number, 2);
	CHECK_INT(sfx_attempt(j)->state, JOB_SCHEDULED);
	CHECK_INT(used(f, 0), sfx_attempt(j)->ranks[0].gpus);
	CHECK(sfx_desires(f, 0, sfx_attempt(j)->id, 0));
	sfx_close(f);
}

TEST(draining_a_node_requeues_its_work_and_takes_none)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *j = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	sfx_start_all(f);
	struct attempt *a = sfx_attempt(j);
	int dn = node_of(a, 0), other = 1 - dn;
	struct node *n = sfx_node(f, dn);
	sfx_set_admin(f, dn, NODE_DRAINING, "maintenance");
	CHECK_INT(n->admin, NODE_DRAINING);
	CHECK_STR(node_shown_state(n), "draining");
	char why[64];
	snprintf(why, sizeof(why), "node node-%d draining: maintenance", dn + 1);
	CHECK(attempt_ending(a));
	CHECK_INT(a->stop, ATTEMPT_STOP_REQUEUED);
	CHECK_STR(a->end_reason, why);
	CHECK_INT(sfx_ndesired(f, dn), 0);
	CHECK_INT(sfx_events(f, "node.state", 0, "ready -> draining: maintenance (1 attempts"), 1);
	/* new work goes elsewhere */
	struct job *k = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	CHECK_INT(k->state, JOB_SCHEDULED);
	CHECK_INT(node_of(sfx_attempt(k), 0), other);
	/* the drained node's last rank ends: requeued, and the node drained */
	sfx_sync(f, dn);
	CHECK_INT(n->admin, NODE_DRAINING);
	CHECK_INT(sfx_end_stopped(f, dn), 1);
	sfx_sync(f, dn);
	CHECK_INT(a->state, JOB_PREEMPTED);
	CHECK_INT(n->admin, NODE_DRAINED);
	CHECK_STR(node_shown_state(n), "drained");
	CHECK_INT(used(f, dn), 0);
	CHECK_INT(sfx_events(f, "node.state", 0, "draining -> drained"), 1);
	CHECK_INT(j->state, JOB_PENDING); /* nowhere to go: the other node is full */
	CHECK_INT(j->nattempts, 1);
	sfx_tick(f);
	CHECK_INT(j->state, JOB_PENDING);
	CHECK_INT(sfx_ndesired(f, dn), 0);
	/* back in service: the requeued job runs there */
	sfx_set_admin(f, dn, NODE_READY, "");
	CHECK_INT(n->admin, NODE_READY);
	CHECK_INT(j->state, JOB_SCHEDULED);
	CHECK_INT(j->nattempts, 2);
	CHECK_INT(node_of(sfx_attempt(j), 0), dn);
	sfx_close(f);
}

TEST(draining_an_idle_node_drains_it_at_once_and_cordon_keeps_work)
{
	struct sfx *f = sfx_open(2, 2);
	sfx_set_admin(f, 0, NODE_DRAINING, "");
	CHECK_INT(sfx_node(f, 0)->admin, NODE_DRAINED);
	/* draining a drained node changes nothing */
	sfx_set_admin(f, 0, NODE_DRAINING, "again");
	CHECK_INT(sfx_node(f, 0)->admin, NODE_DRAINED);
	struct job *j = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	CHECK_INT(node_of(sfx_attempt(j), 0), 1);
	sfx_start_all(f);
	/* a cordon stops new work, not running work */
	sfx_set_admin(f, 1, NODE_CORDONED, "look at it");
	CHECK_STR(node_shown_state(sfx_node(f, 1)), "cordoned");
	CHECK(!attempt_ending(sfx_attempt(j)));
	CHECK_INT(sfx_ndesired(f, 1), 1);
	struct job *k = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	CHECK_INT(k->state, JOB_PENDING);
	sfx_set_admin(f, 1, NODE_READY, "");
	CHECK_INT(k->state, JOB_SCHEDULED);
	CHECK_INT(used(f, 1), 0x3);
	sfx_close(f);
}

/* ---- restarts ---- */

struct seen {
	enum job_state state;
	int nattempts;
	int64_t start_ms, end_ms;
	int ending;
	enum rank_state ranks[2];
	uint64_t gpus[2];
};

static void remember(struct sfx *f, int64_t id, struct seen *s)
{
	struct job *j = state_job(&f->st, id);
	CHECK(j != NULL);
	memset(s, 0, sizeof(*s));
	s->state = j->state;
	s->nattempts = j->nattempts;
	s->start_ms = j->start_ms;
	s->end_ms = j->end_ms;
	const struct attempt *a = sfx_attempt(j);
	if (!a)
		return;
	s->ending = attempt_ending(a);
	for (int r = 0; r < a->nranks && r < 2; r++) {
		s->ranks[r] = a->ranks[r].state;
		s->gpus[r] = a->ranks[r].gpus;
	}
}

static void same(struct sfx *f, int64_t id, const struct seen *want)
{
	struct seen now;
	remember(f, id, &now);
	int differ = now.state != want->state || now.nattempts != want->nattempts ||
	             now.start_ms != want->start_ms || now.end_ms != want->end_ms ||
	             now.ending != want->ending;
	for (int r = 0; r < 2; r++)
		differ |= now.ranks[r] != want->ranks[r] || now.gpus[r] != want->gpus[r];
	if (differ)
		FAIL_AT("job %lld now/before: state %s/%s attempts %d/%d ending %d/%d start "
		        "%lld/%lld (or its ranks differ)",
		        (long long)id, job_state_name(now.state), job_state_name(want->state),
		        now.nattempts, want->nattempts, now.ending, want->ending,
		        (long long)now.start_ms, (long long)want->start_ms);
}

TEST(a_restart_keeps_pending_and_running_jobs_and_gpu_allocations)
{
	struct sfx *f = sfx_open(2, 2);
	struct job *gang = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1, \"nodes\": 2}");
	struct job *one = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	sfx_start_all(f);
	struct job *late = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	CHECK_INT(late->state, JOB_SCHEDULED); /* placed, never started */
	struct job *wait = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	struct job *wait2 = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 1}");
	CHECK_INT(wait->state, JOB_PENDING);
	CHECK_INT(wait2->state, JOB_PENDING);
	CHECK_INT(gang->state, JOB_RUNNING);
	CHECK_INT(one->state, JOB_RUNNING);
	/* the last placed job is cancelled before its agent applied it */
	state_cancel(&f->st, late);
	sfx_flush(f);
	int late_node = node_of(sfx_attempt(late), 0);
	int64_t ids[] = {gang->id, one->id, late->id, wait->id, wait2->id};
	struct seen before[5];
	for (int i = 0; i < 5; i++)
		remember(f, ids[i], &before[i]);
	uint64_t used0 = used(f, 0), used1 = used(f, 1);
	CHECK_INT(used0, 0x3);
	CHECK_INT(used1, 0x3);
	int64_t gen0 = sfx_node(f, 0)->generation, gen1 = sfx_node(f, 1)->generation;
	int desired0 = sfx_ndesired(f, 0), desired1 = sfx_ndesired(f, 1);

	sfx_restart(f);
	for (int i = 0; i < 5; i++)
		same(f, ids[i], &before[i]);
	CHECK_INT(f->st.njobs, 5);
	CHECK_INT(f->st.core->npending, 2);
	CHECK_INT(f->st.core->pending[0]->id, ids[3]); /* in order */
	CHECK_INT(f->st.core->pending[1]->id, ids[4]);
	CHECK_INT(f->st.core->nactive, 3);
	CHECK_INT(used(f, 0), used0);
	CHECK_INT(used(f, 1), used1);
	CHECK_INT(sfx_node(f, 0)->generation, gen0);
	CHECK_INT(sfx_node(f, 1)->generation, gen1);
	CHECK_INT(sfx_ndesired(f, 0), desired0);
	CHECK_INT(sfx_ndesired(f, 1), desired1);
	gang = state_job(&f->st, ids[0]);
	one = state_job(&f->st, ids[1]);
	late = state_job(&f->st, ids[2]);
	wait = state_job(&f->st, ids[3]);
	wait2 = state_job(&f->st, ids[4]);
	CHECK(late->cancel_requested);

	/* the agents re-sync: the cancelled rank that never ran ends, and
	 * its GPU goes to the next job that fits */
	for (int n = 0; n < 2; n++)
		sfx_sync(f, n);
	sfx_report(f, late_node);
	CHECK_INT(late->state, JOB_CANCELLED);
	CHECK_INT(gang->state, JOB_RUNNING);
	CHECK_INT(one->state, JOB_RUNNING);
	CHECK_INT(wait->state, JOB_PENDING);
	CHECK_INT(wait2->state, JOB_SCHEDULED);
	/* the running jobs finish as if nothing had happened */
	struct attempt *g = sfx_attempt(gang);
	sfx_exit(f, node_of(g, 0), g->id, 0, 0);
	sfx_exit(f, node_of(g, 1), g->id, 1, 0);
	sfx_exit(f, node_of(sfx_attempt(one), 0), sfx_attempt(one)->id, 0, 0);
	for (int n = 0; n < 2; n++)
		sfx_sync(f, n);
	CHECK_INT(gang->state, JOB_SUCCEEDED);
	CHECK_INT(one->state, JOB_SUCCEEDED);
	CHECK_INT(wait->state, JOB_SCHEDULED);
	sfx_close(f);
}

TEST(a_restart_keeps_node_states_and_an_ending_preemption)
{
	struct sfx *f = sfx_open(3, 2);
	f->st.config.preempt_min_runtime_ms = 0;
	sfx_set_admin(f, 0, NODE_DRAINING, "disk");
	sfx_silence(f, 1);
	CHECK_INT(sfx_node(f, 0)->admin, NODE_DRAINED);
	CHECK_INT(sfx_node(f, 1)->state, NODE_LOST);
	struct job *low = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	CHECK_INT(node_of(sfx_attempt(low), 0), 2);
	sfx_start_all(f);
	struct job *high = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2, \"priority\": 3}");
	sfx_tick(f);
	CHECK_INT(sfx_attempt(low)->stop, ATTEMPT_STOP_PREEMPTED);
	int64_t lid = low->id, hid = high->id;

	sfx_restart(f);
	CHECK_INT(sfx_node(f, 0)->admin, NODE_DRAINED);
	CHECK_STR(sfx_node(f, 0)->admin_reason, "disk");
	CHECK_INT(sfx_node(f, 1)->state, NODE_LOST);
	CHECK_STR(node_shown_state(sfx_node(f, 1)), "lost");
	CHECK_INT(sfx_node(f, 2)->state, NODE_READY);
	low = state_job(&f->st, lid);
	high = state_job(&f->st, hid);
	struct attempt *a = sfx_attempt(low);
	CHECK(attempt_ending(a));
	CHECK_INT(a->stop, ATTEMPT_STOP_PREEMPTED);
	CHECK_INT(a->preempted_for, hid);
	CHECK_INT(used(f, 2), 0x3);
	CHECK_INT(sfx_ndesired(f, 2), 0);
	sfx_sync(f, 2);
	CHECK_INT(sfx_end_stopped(f, 2), 1);
	sfx_sync(f, 2);
	CHECK_INT(a->state, JOB_PREEMPTED);
	CHECK_INT(low->state, JOB_PENDING);
	CHECK_INT(high->state, JOB_SCHEDULED);
	CHECK_INT(node_of(sfx_attempt(high), 0), 2);
	sfx_close(f);
}

TEST(a_restart_finds_every_attempt_by_id_after_a_requeue)
{
	/* Job 1's second attempt (id 3) is newer than job 2's first (id 2):
	 * the store returns attempts in job order, and each must still be
	 * found by its id, or its agent's reports are fenced off for good. */
	struct sfx *f = sfx_open(2, 2);
	struct job *one = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	struct job *two = sfx_submit(f, "{\"command\": [\"x\"], \"gpus\": 2}");
	sfx_start_all(f);
	int n1 = node_of(sfx_attempt(one), 0), n2 = node_of(sfx_attempt(two), 0);
	state_attempt_requeue(&f->st, sfx_attempt(one), "test");
	sfx_sync(f, n1);
	CHECK_INT(sfx_end_stopped(f, n1), 1);
	sfx_sync(f, n1);
	CHECK_INT(one->nattempts, 2);
	CHECK_INT(sfx_attempt(one)->id, 3);
	CHECK_INT(sfx_attempt(two)->id, 2);
	sfx_report(f, n1); /* attempt 3 runs */
	CHECK_INT(one->state, JOB_RUNNING);

	sfx_restart(f);
	one = state_job(&f->st, 1);
	two = state_job(&f->st, 2);
	sfx_exit(f, n2, 2, 0, 0);
	sfx_sync(f, n2);
	CHECK_INT(two->state, JOB_SUCCEEDED);
	CHECK_INT(used(f, n2), 0);
	CHECK_INT(f->st.core->nattempts, 3);
	for (int64_t id = 1; id <= 3; id++) {
		CHECK(f->st.core->attempts[id - 1] != NULL);
		CHECK_INT(f->st.core->attempts[id - 1]->id, id);
	}
	sfx_exit(f, n1, 3, 0, 0);
	sfx_sync(f, n1);
	CHECK_INT(one->state, JOB_SUCCEEDED);
	CHECK_INT(used(f, n1), 0);
	/* a new attempt takes the next id */
	struct job *three = sfx_submit(f, "{\"command\": [\"x\"]}");
	CHECK_INT(sfx_attempt(three)->id, 4);
	CHECK(f->st.core->attempts[3] == sfx_attempt(three));
	sfx_close(f);
}

/* ---- the listing and arrays ---- */

/* The reason of member k of the array whose first member is first. */
static const char *member_reason(struct sfx *f, const struct job *first, int k)
{
	const struct job *j = state_job(&f->st, first->id + k);
	CHECK(j != NULL);
	return j->reason;
}

/* A job running, then an array of 1,000 members behind it: the listing
 * grouped (as `anvil jobs` asks) has both, the array as one entry with
 * every member counted; ungrouped, the newest 100 are all members and the
 * answer says more match. */
static struct job *big_array(struct sfx *f, struct job **running)
{
	*running = sfx_submit_running(f, "{\"command\": [\"train\"], \"gpus\": 2}");
	struct buf text;
	buf_init(&text);
	buf_adds(&text, "{\"command\": [\"sweep\"], \"gpus\": 0, \"name\": \"big\", "
	                "\"array\": {\"max_running\": 10, \"indices\": [");
	for (int i = 0; i < 1000; i++)
		buf_printf(&text, "%s%d", i ? "," : "", i);
	buf_adds(&text, "]}}");
	struct job *a = sfx_submit(f, text.data);
	buf_cleanup(&text);
	sfx_tick(f);
	return a;
}

TEST(the_listing_groups_an_array_and_counts_every_member)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *train, *a = big_array(f, &train);
	struct state_jobs_query q = {.limit = 100, .index = -1, .group = 1};
	json_t *o = state_jobs_json(&f->st, &q);
	const json_t *jobs = json_object_get(o, "jobs");
	CHECK_INT(json_array_size(jobs), 2);
	CHECK(json_is_false(json_object_get(o, "more")));
	const json_t *e = json_array_get(jobs, 0), *arr = json_object_get(e, "array");
	CHECK_INT(jv_int(e, "id", 0), a->id);
	CHECK_STR(jv_str(e, "name", ""), "big");
	CHECK_INT(jv_int(arr, "members", 0), 1000);
	CHECK_INT(jv_int(arr, "first_index", -1), 0);
	CHECK_INT(jv_int(arr, "last_index", -1), 999);
	CHECK_INT(jv_int(arr, "max_running", 0), 10);
	const json_t *states = json_object_get(arr, "states");
	CHECK_INT(jv_int(states, "scheduled", 0), 1); /* one CPU: one CPU-only rank */
	CHECK_INT(jv_int(states, "pending", 0), 999);
	/* the reason is the next member's: what holds it */
	CHECK_STR(jv_str(e, "reason", ""), member_reason(f, a, 1));
	CHECK_INT(jv_int(json_array_get(jobs, 1), "id", 0), train->id);
	CHECK_STR(jv_str(json_array_get(jobs, 1), "state", ""), "running");
	json_decref(o);
	/* a state filter counts the members it passes */
	q.state = "pending";
	o = state_jobs_json(&f->st, &q);
	jobs = json_object_get(o, "jobs");
	CHECK_INT(json_array_size(jobs), 1);
	states = json_object_get(json_object_get(json_array_get(jobs, 0), "array"), "states");
	CHECK_INT(jv_int(states, "pending", 0), 999);
	CHECK(json_object_get(states, "scheduled") == NULL);
	json_decref(o);
	/* ungrouped: the newest 100 members fill the page, and more match */
	q = (struct state_jobs_query){.limit = 100, .index = -1};
	o = state_jobs_json(&f->st, &q);
	CHECK_INT(json_array_size(json_object_get(o, "jobs")), 100);
	CHECK(json_is_true(json_object_get(o, "more")));
	json_decref(o);
	/* one member by the array's id and its index */
	q = (struct state_jobs_query){.limit = 1, .array = a->id, .index = 50};
	o = state_jobs_json(&f->st, &q);
	CHECK_INT(json_array_size(json_object_get(o, "jobs")), 1);
	CHECK_INT(jv_int(json_array_get(json_object_get(o, "jobs"), 0), "id", 0), a->id + 50);
	json_decref(o);
	q.index = 1000;
	o = state_jobs_json(&f->st, &q);
	CHECK_INT(json_array_size(json_object_get(o, "jobs")), 0);
	json_decref(o);
	sfx_close(f);
}

/* Cancelling an array cancels every member, counting what it did. */
TEST(cancelling_an_array_cancels_every_member_and_counts_them)
{
	struct sfx *f = sfx_open(1, 2);
	struct job *train, *a = big_array(f, &train);
	sfx_start_all(f);
	CHECK_INT(a->state, JOB_RUNNING);
	/* one member ended, one cancelled before */
	CHECK_INT(state_cancel(&f->st, state_job(&f->st, a->id + 7)), 0);
	struct state_array_cancel c;
	CHECK_INT(state_cancel_array(&f->st, state_job(&f->st, a->id + 1), &c), ERR_INVALID);
	CHECK_INT(state_cancel_array(&f->st, train, &c), ERR_INVALID);
	CHECK_INT(state_cancel_array(&f->st, a, &c), 0);
	CHECK_INT(c.members, 1000);
	CHECK_INT(c.ended, 1);
	CHECK_INT(c.stopping, 1);
	CHECK_INT(c.cancelled, 998);
	CHECK_INT(f->st.core->npending, 0);
	CHECK_INT(state_job(&f->st, a->id + 999)->state, JOB_CANCELLED);
	CHECK(a->cancel_requested);
	CHECK_INT(train->state, JOB_RUNNING);
	sfx_close(f);
}

TEST_MAIN()
