/* metrics.c - GET /metrics: the server's gauges and counters in the
 * Prometheus text format, then the HTTP layer's own. */
#include <stdint.h>

#include "base/httpd.h"
#include "server/server.h"

static void gauge(struct buf *out, const char *name, const char *help)
{
	buf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

void server_metrics(struct server *s, struct buf *out)
{
	struct state *st = &s->state;
	state_lock(st);
	uint64_t jobs[JOB_NSTATES] = {0}, nodes[NODE_NSTATES] = {0};
	int64_t gtotal = 0, gused = 0, gbad = 0, faults[NODE_FAULT_NSCOPES] = {0}, held = 0;
	for (int64_t i = 0; i < st->njobs; i++)
		if (st->jobs[i])
			jobs[st->jobs[i]->state]++;
	for (int i = 0; i < st->nnodes; i++) {
		const struct node *n = st->nodes[i];
		nodes[n->state == NODE_LOST ? NODE_LOST : n->admin]++;
		gtotal += n->ngpus;
		gused += __builtin_popcountll(n->gpus_used);
		gbad += __builtin_popcountll(n->gpus_unhealthy);
		held += n->state != NODE_LOST && n->admin == NODE_READY && n->hold[0];
		for (int k = 0; k < NODE_FAULT_NSCOPES; k++)
			faults[k] += n->faults[k];
	}
	gauge(out, "anvil_jobs", "Jobs by state.");
	for (int i = 0; i < JOB_NSTATES; i++)
		buf_printf(out, "anvil_jobs{state=\"%s\"} %llu\n", job_state_name(i),
		           (unsigned long long)jobs[i]);
	gauge(out, "anvil_nodes", "Nodes by state.");
	for (int i = 0; i < NODE_NSTATES; i++)
		buf_printf(out, "anvil_nodes{state=\"%s\"} %llu\n", node_state_name(i),
		           (unsigned long long)nodes[i]);
	gauge(out, "anvil_nodes_held",
	      "Ready nodes that their fleet profile keeps from new work (converging or held).");
	buf_printf(out, "anvil_nodes_held %lld\n", (long long)held);
	gauge(out, "anvil_gpus", "GPUs registered in the cluster.");
	buf_printf(out, "anvil_gpus %lld\n", (long long)gtotal);
	gauge(out, "anvil_gpus_allocated", "GPUs held by running attempts.");
	buf_printf(out, "anvil_gpus_allocated %lld\n", (long long)gused);
	gauge(out, "anvil_gpus_unhealthy", "GPUs quarantined or lost: never assigned.");
	buf_printf(out, "anvil_gpus_unhealthy %lld\n", (long long)gbad);
	buf_printf(out, "# HELP anvil_gpu_faults_total GPU fault findings applied, by scope.\n"
	                "# TYPE anvil_gpu_faults_total counter\n");
	for (int k = 0; k < NODE_FAULT_NSCOPES; k++)
		buf_printf(out, "anvil_gpu_faults_total{scope=\"%s\"} %lld\n",
		           node_fault_scope_name(k), (long long)faults[k]);
	buf_printf(out,
	           "# HELP anvil_jobs_submitted_total Jobs accepted.\n"
	           "# TYPE anvil_jobs_submitted_total counter\n"
	           "anvil_jobs_submitted_total %llu\n",
	           (unsigned long long)st->stats.submitted_total);
	buf_printf(out,
	           "# HELP anvil_sched_passes_total Scheduling passes.\n"
	           "# TYPE anvil_sched_passes_total counter\n"
	           "anvil_sched_passes_total %llu\n"
	           "# HELP anvil_sched_seconds_total Time spent scheduling.\n"
	           "# TYPE anvil_sched_seconds_total counter\n"
	           "anvil_sched_seconds_total %.6f\n",
	           (unsigned long long)st->stats.sched_passes, st->stats.sched_seconds);
	buf_printf(out,
	           "# HELP anvil_sched_skipped_total Cycles skipped: no GPU was free.\n"
	           "# TYPE anvil_sched_skipped_total counter\n"
	           "anvil_sched_skipped_total %llu\n",
	           (unsigned long long)st->stats.sched_skipped);
	buf_printf(out,
	           "# HELP anvil_state_refused_moves_total State changes the state machines "
	           "refused (a bug if not 0; the log names each).\n"
	           "# TYPE anvil_state_refused_moves_total counter\n"
	           "anvil_state_refused_moves_total %llu\n",
	           (unsigned long long)st->stats.refused_moves);
	buf_printf(out,
	           "# HELP anvil_state_flush_failures_total Writes of the state that failed (a "
	           "full disk); each is retried, the log says so once in 10 s.\n"
	           "# TYPE anvil_state_flush_failures_total counter\n"
	           "anvil_state_flush_failures_total %llu\n",
	           (unsigned long long)st->stats.flush_failures);
	gauge(out, "anvil_state_unwritten",
	      "1 while changes wait in memory because the last write of the state failed.");
	buf_printf(out, "anvil_state_unwritten %d\n", st->stats.unwritten);
	state_unlock(st);
	httpd_metrics(s->http, "anvil", out);
}
