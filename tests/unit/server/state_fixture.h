/* state_fixture.h - a server state without HTTP, and the agents it talks to
 * played by the test.
 *
 * struct sfx owns a fresh state (server/state.h) on a SQLite file in its own
 * mkdtemp directory, with its lock held from sfx_open() to sfx_close(), and
 * one simulated agent per registered node. Each call does what the server's
 * handlers do around the state functions (agentproto.c: last_seen, reports
 * with the generation the agent last applied, then flush), so a test drives
 * the same transitions an agent's syncs would.
 *
 * A simulated agent knows the ranks it was told to run (struct sfx_proc):
 * sfx_apply() takes the node's desired set as a sync answer and starts what
 * is new and stops (SIGTERM) what is gone, as agent/syncer.c reconciles;
 * sfx_report() sends a report (proto/wire.h, wire_report) for every rank it
 * runs and every end not yet acknowledged, and forgets the ends the server
 * took. A test decides how processes end: sfx_exit(), sfx_fail_start(),
 * sfx_end_stopped(). Pointers into the state (jobs, nodes, attempts) die
 * with sfx_restart(): look them up again by id afterwards.
 */
#ifndef ANVIL_STATE_FIXTURE_H
#define ANVIL_STATE_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "proto/wire.h"
#include "register_fixture.h"
#include "server/glue.h"

#define SFX_MAX_NODES  8
#define SFX_TIMEOUT_MS 30000 /* node_timeout_ms of sfx_open() */

enum sfx_proc_state {
	SFX_RUNNING, /* started; reported "running" from the next report on */
	SFX_EXITED,  /* ended: exit_code/signal, reported once, then forgotten */
	SFX_FAILED,  /* could not start: reported as failed_to_start */
};

/* A rank as its agent sees it. */
struct sfx_proc {
	int64_t attempt_id;
	int rank;
	enum sfx_proc_state state;
	int exit_code, signal;
	int stopping; /* dropped from the desired set: SIGTERM sent */
	int reported; /* reported at least once */
	/* EXITED: its launcher's words (a job with a head); NULL: none */
	const char *reason;
	/* EXITED: processes the kernel killed at its memory limit (oom_kills) */
	int oom_kills;
	/* RUNNING, a session's rank: how long its GPUs have been idle, sent as
	 * gpu_idle_ms when has_idle (sfx_set_idle) */
	int has_idle;
	int64_t gpu_idle_ms;
};

struct sfx_agent {
	int64_t gen; /* the generation of the last answer applied */
	int silent;  /* sfx_silence(): no syncs until a test calls one */
	struct sfx_proc *procs;
	int nprocs, cap;
};

struct sfx {
	char dir[64];
	char db[96];
	int64_t timeout_ms;
	struct state st;
	int nnodes;
	int ngpus;
	struct sfx_agent agents[SFX_MAX_NODES];
};

static inline json_t *sfx_json(const char *text)
{
	json_t *o = NULL;
	char err[256];
	if (jv_parse_object(text, strlen(text), &o, err, sizeof(err)))
		FAIL_AT("bad fixture JSON: %s: %s", err, text);
	return o;
}

static inline void sfx_flush(struct sfx *f)
{
	CHECK_INT(state_flush(&f->st), 0);
}

/* The facts an agent with `gpus` simulated GPUs registers with. */
static inline json_t *sfx_facts(int gpus)
{
	json_t *list = json_array();
	for (int g = 0; g < gpus; g++) {
		char uuid[32];
		snprintf(uuid, sizeof(uuid), "GPU-%d", g);
		json_array_append_new(list, json_pack("{s:i,s:s,s:s,s:I}", "index", g, "uuid", uuid,
		                                      "model", "NVIDIA H200", "memory_bytes",
		                                      (json_int_t)(141LL << 30)));
	}
	return json_pack("{s:s,s:s,s:o}", "address", "127.0.0.1", "backend", "sim", "gpus", list);
}

/* Registers node-<count+1> with `gpus` GPUs (as agentproto_register does);
 * returns its index (node id - 1). */
static inline int sfx_add_node(struct sfx *f, int gpus)
{
	CHECK(f->nnodes < SFX_MAX_NODES);
	char name[32];
	snprintf(name, sizeof(name), "node-%d", f->nnodes + 1);
	json_t *facts = sfx_facts(gpus);
	struct node *n = test_join(&f->st, facts, name);
	json_decref(facts);
	CHECK_INT(n->id, f->nnodes + 1);
	state_settle(&f->st);
	sfx_flush(f);
	return f->nnodes++;
}

/* A fresh state with nodes node-1..node-<nodes> of `gpus` GPUs each; the
 * lock is held until sfx_close(). */
static inline struct sfx *sfx_open_timeout(int nodes, int gpus, int64_t timeout_ms)
{
	struct sfx *f = xcalloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/anvil-test-state-XXXXXX");
	CHECK(mkdtemp(f->dir) != NULL);
	snprintf(f->db, sizeof(f->db), "%s/state.db", f->dir);
	f->timeout_ms = timeout_ms;
	f->ngpus = gpus;
	CHECK_INT(state_open(&f->st, f->db, 0, timeout_ms), 0);
	state_lock(&f->st);
	for (int i = 0; i < nodes; i++)
		sfx_add_node(f, gpus);
	return f;
}

static inline struct sfx *sfx_open(int nodes, int gpus)
{
	return sfx_open_timeout(nodes, gpus, SFX_TIMEOUT_MS);
}

static inline void sfx_close(struct sfx *f)
{
	sfx_flush(f);
	state_unlock(&f->st);
	state_close(&f->st);
	CHECK_INT(rm_rf(f->dir), 0);
	for (int i = 0; i < SFX_MAX_NODES; i++)
		free(f->agents[i].procs);
	free(f);
}

/* The server stops and starts again on the same file; the agents keep
 * running. The preemption settings, which come from the server's
 * configuration and not from the file, are carried over. */
static inline void sfx_restart(struct sfx *f)
{
	int64_t min_runtime = f->st.config.preempt_min_runtime_ms;
	int64_t restart_cost = f->st.config.preempt_restart_cost_ms;
	int max_ratio = f->st.config.preempt_max_ratio, loss_pct = f->st.config.preempt_loss_pct;
	sfx_flush(f);
	state_unlock(&f->st);
	state_close(&f->st);
	CHECK_INT(state_open(&f->st, f->db, 0, f->timeout_ms), 0);
	state_lock(&f->st);
	f->st.config.preempt_min_runtime_ms = min_runtime;
	f->st.config.preempt_restart_cost_ms = restart_cost;
	f->st.config.preempt_max_ratio = max_ratio;
	f->st.config.preempt_loss_pct = loss_pct;
	CHECK_INT(f->st.nnodes, f->nnodes);
}

static inline struct node *sfx_node(struct sfx *f, int i)
{
	struct node *n = state_node(&f->st, i + 1);
	CHECK(n != NULL);
	return n;
}

/* Submits a job from JSON text; fails the test if it is refused. */
static inline struct job *sfx_submit(struct sfx *f, const char *text)
{
	json_t *body = sfx_json(text);
	struct job *j = NULL;
	char err[256] = "";
	int rc = state_submit(&f->st, body, &j, err, sizeof(err));
	json_decref(body);
	if (rc)
		FAIL_AT("submit %s: %s", text, err);
	sfx_flush(f);
	return j;
}

/* Submits a job that should be refused: returns the code, err the message. */
static inline int sfx_submit_refused(struct sfx *f, const char *text, char *err, size_t errlen)
{
	json_t *body = sfx_json(text);
	struct job *j = NULL;
	int rc = state_submit(&f->st, body, &j, err, errlen);
	json_decref(body);
	if (rc == 0)
		FAIL_AT("submit %s was accepted as job %lld", text, (long long)j->id);
	CHECK(j == NULL);
	sfx_flush(f);
	return rc;
}

/* The job's current (last) attempt, or NULL. */
static inline struct attempt *sfx_attempt(const struct job *j)
{
	return j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
}

/* A scheduling cycle as the housekeeping loop runs one each second:
 * unlike the cycles that submissions and reports run, it is not skipped
 * when no GPU is free, so preemption is decided. */
static inline void sfx_tick(struct sfx *f)
{
	state_schedule_tick(&f->st, now_ms() + 1000);
	sfx_flush(f);
}

/* An operator's cordon, drain or uncordon, as the node update handler
 * makes it (api_nodes.c): the change, then a scheduling cycle. */
static inline void sfx_set_admin(struct sfx *f, int node, enum node_state admin, const char *reason)
{
	CHECK_INT(state_node_set_admin(&f->st, sfx_node(f, node), admin, reason, 0), 0);
	sfx_flush(f);
	state_schedule(&f->st);
	sfx_flush(f);
}

/* ---- the agents ---- */

static inline struct sfx_proc *sfx_proc(struct sfx *f, int node, int64_t attempt_id, int rank)
{
	struct sfx_agent *ag = &f->agents[node];
	for (int i = 0; i < ag->nprocs; i++)
		if (ag->procs[i].attempt_id == attempt_id && ag->procs[i].rank == rank)
			return &ag->procs[i];
	return NULL;
}

/* How many ranks node's agent runs (not ended). */
static inline int sfx_running(struct sfx *f, int node)
{
	int count = 0;
	for (int i = 0; i < f->agents[node].nprocs; i++)
		count += f->agents[node].procs[i].state == SFX_RUNNING;
	return count;
}

/* The node's sync answer (state_desired); the caller decrefs it. */
static inline json_t *sfx_desired(struct sfx *f, int node)
{
	json_t *o = state_desired(&f->st, sfx_node(f, node));
	char err[256] = "";
	if (wire_check(o, &wire_sync_answer, err, sizeof(err)) ||
	    wire_check_each(o, "ranks", &wire_desired, err, sizeof(err)))
		FAIL_AT("sync answer: %s", err);
	return o;
}

/* 1 if node's desired set holds rank `rank` of attempt_id. */
static inline int sfx_desires(struct sfx *f, int node, int64_t attempt_id, int rank)
{
	json_t *o = sfx_desired(f, node);
	int found = 0;
	size_t i;
	json_t *d;
	json_array_foreach (json_object_get(o, "ranks"), i, d) {
		found |= jv_int(d, "attempt_id", 0) == attempt_id && jv_int(d, "rank", -1) == rank;
	}
	json_decref(o);
	return found;
}

static inline int sfx_ndesired(struct sfx *f, int node)
{
	json_t *o = sfx_desired(f, node);
	int count = (int)json_array_size(json_object_get(o, "ranks"));
	json_decref(o);
	return count;
}

/* The agent applies the node's desired set: it starts what is new and
 * stops (SIGTERM) every running rank that is gone. */
static inline void sfx_apply(struct sfx *f, int node)
{
	struct sfx_agent *ag = &f->agents[node];
	json_t *o = sfx_desired(f, node);
	const json_t *ranks = json_object_get(o, "ranks");
	int64_t gen = jv_int(o, "generation", 0);
	CHECK(gen >= ag->gen); /* generations never go back, restarts included */
	ag->gen = gen;
	size_t i;
	json_t *d;
	json_array_foreach (ranks, i, d) {
		int64_t aid = jv_int(d, "attempt_id", 0);
		int rank = (int)jv_int(d, "rank", -1);
		if (sfx_proc(f, node, aid, rank))
			continue;
		XGROW(ag->procs, ag->nprocs, ag->cap);
		ag->procs[ag->nprocs++] =
		        (struct sfx_proc){.attempt_id = aid, .rank = rank, .state = SFX_RUNNING};
	}
	for (int p = 0; p < ag->nprocs; p++) {
		struct sfx_proc *k = &ag->procs[p];
		int wanted = 0;
		json_array_foreach (ranks, i, d) {
			wanted |= jv_int(d, "attempt_id", 0) == k->attempt_id &&
			          jv_int(d, "rank", -1) == k->rank;
		}
		if (!wanted && k->state == SFX_RUNNING)
			k->stopping = 1;
	}
	json_decref(o);
}

/* One report entry (proto/wire.h, wire_report) for p. */
static inline json_t *sfx_report_of(const struct sfx_proc *p)
{
	const struct wire_record *r = &wire_report;
	json_t *o = json_object();
	wire_set(o, r, "attempt_id", json_integer(p->attempt_id));
	wire_set(o, r, "rank", json_integer(p->rank));
	if (p->state == SFX_RUNNING) {
		wire_set(o, r, "state", json_string("running"));
		wire_set(o, r, "pid", json_integer(1000 + p->rank));
		if (p->has_idle)
			wire_set(o, r, "gpu_idle_ms", json_integer(p->gpu_idle_ms));
	} else if (p->state == SFX_EXITED) {
		wire_set(o, r, "state", json_string("exited"));
		wire_set(o, r, "exit_code", json_integer(p->exit_code));
		wire_set(o, r, "signal", json_integer(p->signal));
		if (p->reason)
			wire_set(o, r, "reason", json_string(p->reason));
		if (p->oom_kills)
			wire_set(o, r, "oom_kills", json_integer(p->oom_kills));
	} else {
		wire_set(o, r, "state", json_string("failed_to_start"));
		wire_set(o, r, "error", json_string("exec: no such file"));
	}
	return o;
}

/* The agent's report half of a sync: every rank it runs and every end
 * not yet acknowledged, with the generation it last applied; the ends are
 * then acknowledged (forgotten). As the sync handler: last_seen, then a
 * flush. */
static inline void sfx_report(struct sfx *f, int node)
{
	struct sfx_agent *ag = &f->agents[node];
	json_t *ranks = json_array();
	for (int p = 0; p < ag->nprocs; p++) {
		json_array_append_new(ranks, sfx_report_of(&ag->procs[p]));
		ag->procs[p].reported = 1;
	}
	json_t *request = json_pack("{s:I,s:I,s:O}", "node_id", (json_int_t)node + 1, "generation",
	                            (json_int_t)ag->gen, "ranks", ranks);
	char err[256] = "";
	if (wire_check(request, &wire_sync_request, err, sizeof(err)) ||
	    wire_check_each(request, "ranks", &wire_report, err, sizeof(err)))
		FAIL_AT("sync request: %s", err);
	json_decref(request);
	struct node *n = sfx_node(f, node);
	n->last_seen_ms = now_ms();
	ag->silent = 0;
	state_reports(&f->st, n, ranks, ag->gen);
	json_decref(ranks);
	int keep = 0;
	for (int p = 0; p < ag->nprocs; p++)
		if (ag->procs[p].state == SFX_RUNNING)
			ag->procs[keep++] = ag->procs[p];
	ag->nprocs = keep;
	sfx_flush(f);
}

/* One sync: the report, then the answer applied. */
static inline void sfx_sync(struct sfx *f, int node)
{
	sfx_report(f, node);
	sfx_apply(f, node);
}

/* Every agent but the silent ones takes its desired set and reports what
 * it started as running: the placed ranks become RUNNING. */
static inline void sfx_start_all(struct sfx *f)
{
	for (int i = 0; i < f->nnodes; i++) {
		if (f->agents[i].silent)
			continue;
		sfx_apply(f, i);
		sfx_report(f, i);
	}
}

/* The rank's process ends with code (reported at the next sync). */
static inline void sfx_exit(struct sfx *f, int node, int64_t attempt_id, int rank, int code)
{
	struct sfx_proc *p = sfx_proc(f, node, attempt_id, rank);
	if (!p || p->state != SFX_RUNNING)
		FAIL_AT("node %d runs no rank %d of attempt %lld", node, rank,
		        (long long)attempt_id);
	p->state = SFX_EXITED;
	p->exit_code = code;
}

/* From the next report on, the rank's agent says its GPUs have been idle
 * for ms (a session's rank: gpu_idle_ms). */
static inline void sfx_set_idle(struct sfx *f, int node, int64_t attempt_id, int rank, int64_t ms)
{
	struct sfx_proc *p = sfx_proc(f, node, attempt_id, rank);
	if (!p || p->state != SFX_RUNNING)
		FAIL_AT("node %d runs no rank %d of attempt %lld", node, rank,
		        (long long)attempt_id);
	p->has_idle = 1;
	p->gpu_idle_ms = ms;
}

/* The rank could not be started (reported as failed_to_start). */
static inline void sfx_fail_start(struct sfx *f, int node, int64_t attempt_id, int rank)
{
	struct sfx_proc *p = sfx_proc(f, node, attempt_id, rank);
	if (!p || p->state != SFX_RUNNING || p->reported)
		FAIL_AT("node %d has no unreported rank %d of attempt %lld", node, rank,
		        (long long)attempt_id);
	p->state = SFX_FAILED;
}

/* Every rank the agent was told to stop ends by SIGTERM; returns how many. */
static inline int sfx_end_stopped(struct sfx *f, int node)
{
	int count = 0;
	for (int p = 0; p < f->agents[node].nprocs; p++) {
		struct sfx_proc *k = &f->agents[node].procs[p];
		if (k->state == SFX_RUNNING && k->stopping) {
			k->state = SFX_EXITED;
			k->signal = 15;
			count++;
		}
	}
	return count;
}

/* The node's agent goes silent past the node timeout; the housekeeping
 * loop notices (state_check_nodes). The next sfx_report() is its return. */
static inline void sfx_silence(struct sfx *f, int node)
{
	f->agents[node].silent = 1;
	sfx_node(f, node)->last_seen_ms = now_ms() - f->timeout_ms - 1;
	state_check_nodes(&f->st, now_ms());
	sfx_flush(f);
}

/* The node's machine reboots: its agent runs nothing and has applied
 * nothing. */
static inline void sfx_agent_reboot(struct sfx *f, int node)
{
	f->agents[node].nprocs = 0;
	f->agents[node].gen = 0;
}

/* ---- events ---- */

/* How many stored events of kind there are for job_id (0: any job) whose
 * message contains `contains` (NULL: any); flushes first. */
static inline int sfx_events(struct sfx *f, const char *kind, int64_t job_id, const char *contains)
{
	sfx_flush(f);
	json_t *all = state_events(&f->st, 100000, job_id);
	CHECK(all != NULL);
	int count = 0;
	size_t i;
	json_t *e;
	json_array_foreach (all, i, e) {
		if (strcmp(jv_str(e, "kind", ""), kind) == 0 &&
		    (!contains || strstr(jv_str(e, "message", ""), contains)))
			count++;
	}
	json_decref(all);
	return count;
}

/* The index of the node that rank r of a runs on. */
static inline int sfx_node_of(const struct attempt *a, int r)
{
	CHECK(r < a->nranks);
	return (int)a->ranks[r].node_id - 1;
}

/* A job submitted from text, placed, and running on every rank. */
static inline struct job *sfx_submit_running(struct sfx *f, const char *text)
{
	struct job *j = sfx_submit(f, text);
	CHECK_INT(j->state, JOB_SCHEDULED);
	sfx_start_all(f);
	CHECK_INT(j->state, JOB_RUNNING);
	return j;
}

/* The desired entry of rank r of a (the caller decrefs it). */
static inline json_t *sfx_entry(struct sfx *f, const struct attempt *a, int r)
{
	json_t *o = sfx_desired(f, sfx_node_of(a, r));
	size_t i;
	json_t *d, *found = NULL;
	json_array_foreach (json_object_get(o, "ranks"), i, d)
		if (jv_int(d, "attempt_id", 0) == a->id && jv_int(d, "rank", -1) == r)
			found = json_incref(d);
	json_decref(o);
	CHECK(found != NULL);
	return found;
}

/* The agent of node applies its desired set, where exactly one rank was
 * dropped: that rank ends of the SIGTERM and the agent reports it. */
static inline void sfx_one_stopped(struct sfx *f, int node)
{
	sfx_apply(f, node);
	CHECK_INT(sfx_end_stopped(f, node), 1); /* SIGTERM: 143 */
	sfx_sync(f, node);
}

#endif
