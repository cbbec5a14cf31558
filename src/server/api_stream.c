/* api_stream.c - POST /v1/jobs/ID/attach and POST /v1/jobs/ID/exec: a
 * rank's interactive stream (docs/api.md, "Streams").
 *
 * The handler checks the job and the rank under the state lock, then,
 * outside it, opens the same kind of stream to the rank's agent with the
 * node secret (base/upgrade.h), as job_logs proxies a log read. Only when
 * the agent has said 101 does the client get its 101 (httpd_upgrade), so
 * every refusal - the job's, the rank's, the agent's - is an ordinary HTTP
 * error the CLI prints. Then one thread per stream splices the two
 * connections (base/relay.h) until either side closes; it holds no lock
 * and never reads the frames (proto/stream.h), which only the CLI and the
 * process on the node parse.
 *
 * Exec also takes an MPI job's exec token (docs/cli.md, "MPI"): a secret
 * the server made for one attempt and gave only to that attempt's ranks,
 * so that `anvil _rsh` on rank 0 can start mpirun's daemons in the other
 * ranks without the admin token. It opens exec streams into the ranks of
 * that attempt while it is the job's current one, and nothing else: every
 * other route still asks for the admin token (api.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/relay.h"
#include "base/upgrade.h"
#include "base/util.h"
#include "proto/stream.h"
#include "server/server.h"

#define AGENT_STREAM_TIMEOUT_MS 10000

/* Where the rank runs: what the handler needs once the lock is let go. */
struct stream_target {
	char agent_url[256];
	char secret[128];
	char node[64];
	int64_t attempt_id;
};

/* One stream, from the agent's 101 to the end of the relay. */
struct job_stream {
	struct upgrade agent;
	int64_t job_id;
	int rank;
	int exec;
	char node[64];
};

/* The rank's node and attempt, or an error naming why the job cannot be
 * streamed to now (409 while it is not running, so a client may wait). */
static int find_target(struct state *st, int64_t id, int64_t rank, int exec,
                       struct stream_target *t, char *err, size_t errlen)
{
	struct job *j = state_job(st, id);
	if (!j) {
		snprintf(err, errlen, "no job %lld", (long long)id);
		return ERR_NOTFOUND;
	}
	if (!exec && !j->session) {
		snprintf(
		        err, errlen,
		        "job %lld is not an interactive session (anvil shell); `anvil exec %lld -- "
		        "CMD` runs a command in any running job",
		        (long long)id, (long long)id);
		return ERR_CONFLICT;
	}
	if (rank >= j->nodes) {
		snprintf(err, errlen, "query 'rank': job %lld has ranks 0 to %d", (long long)id,
		         j->nodes - 1);
		return ERR_INVALID;
	}
	if (job_state_final(j->state)) {
		snprintf(err, errlen, "job %lld has ended (%s)", (long long)id,
		         job_state_name(j->state));
		return ERR_CONFLICT;
	}
	const struct attempt *a = j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
	const struct rank *k = a && !job_state_final(a->state) ? &a->ranks[rank] : NULL;
	if (!k || k->state != RANK_RUNNING) {
		snprintf(err, errlen, "rank %lld of job %lld is not running (job %s: %s)",
		         (long long)rank, (long long)id, job_state_name(j->state), j->reason);
		return ERR_CONFLICT;
	}
	struct node *n = state_node(st, k->node_id);
	if (!n || !n->agent_url || !n->agent_url[0] || !n->secret) {
		snprintf(err, errlen, "rank %lld of job %lld: its node's agent has no address",
		         (long long)rank, (long long)id);
		return ERR_UPSTREAM;
	}
	snprintf(t->agent_url, sizeof(t->agent_url), "%s", n->agent_url);
	snprintf(t->secret, sizeof(t->secret), "%s", n->secret);
	snprintf(t->node, sizeof(t->node), "%s", n->name);
	t->attempt_id = a->id;
	return 0;
}

/* The agent's refusal as ours: its message, and a status that keeps its
 * meaning for the client (a rank the agent no longer runs is a conflict). */
static void agent_refused(struct httpd_req *req, const struct upgrade *u, const char *node)
{
	json_t *o = NULL;
	char perr[64], msg[700];
	const char *text = u->body.data ? u->body.data : "";
	if (jv_parse_object(u->body.data, u->body.len, &o, perr, sizeof(perr)) == 0)
		text = jv_str(json_object_get(o, "error"), "message", text);
	text_printf(msg, sizeof(msg), "%s's agent: %s", node, text);
	int code = u->status == 404   ? ERR_NOTFOUND
	           : u->status == 409 ? ERR_CONFLICT
	           : u->status == 503 ? ERR_BUSY
	                              : ERR_UPSTREAM;
	httpd_error(req, code, msg);
	json_decref(o);
}

static void splice(const struct httpd_stream *st, void *ctx)
{
	struct job_stream *js = ctx;
	if (st) {
		int64_t start = now_ms();
		struct relay_stats rs = {0};
		int rc = relay_run(st->fd, js->agent.fd, js->agent.extra.data, js->agent.extra.len,
		                   st->extra, st->extra_len, &rs);
		log_info("stream ended job=%lld rank=%d kind=%s node=%s seconds=%.1f in=%llu "
		         "out=%llu%s%s",
		         (long long)js->job_id, js->rank, js->exec ? "exec" : "attach", js->node,
		         (double)(now_ms() - start) / 1000.0, (unsigned long long)rs.a_to_b,
		         (unsigned long long)rs.b_to_a, rc ? " error=" : "", rc ? err_msg(rc) : "");
	}
	upgrade_close(&js->agent);
	free(js);
}

/* Whether req carries the exec token of job id's current attempt; the
 * same answer whatever is wrong (no such job, no token, another one), so
 * that a token tells nothing about other jobs. */
static int exec_token_ok(struct state *st, struct httpd_req *req, int64_t id)
{
	const struct job *j = state_job(st, id);
	const struct attempt *a = j && j->nattempts ? j->attempts[j->nattempts - 1] : NULL;
	return a && a->exec_token[0] && api_token_ok(req, a->exec_token);
}

static void open_stream(struct server *s, struct httpd_req *req, int64_t id, int exec, int by_token)
{
	req->route = exec ? "jobs_exec" : "jobs_attach";
	if (!httpd_wants_upgrade(req, STREAM_UPGRADE)) {
		httpd_error(req, ERR_INVALID,
		            "this route is a stream: send Connection: Upgrade and "
		            "Upgrade: " STREAM_UPGRADE " (anvil attach and anvil exec do)");
		return;
	}
	int64_t rank = 0;
	const char *r = httpd_query(req, "rank");
	if (r && parse_i64(r, 0, 1023, &rank)) {
		httpd_error(req, ERR_INVALID, "query 'rank': must be an integer from 0 to 1023");
		return;
	}
	struct stream_target t;
	char err[512];
	state_lock(&s->state);
	int rc = 0;
	if (by_token && !exec_token_ok(&s->state, req, id)) {
		rc = ERR_AUTH;
		text_printf(err, sizeof(err),
		            "this call needs the admin token, or for exec the exec token of the "
		            "job's current attempt (ANVIL_EXEC_TOKEN in an MPI job's ranks)");
	}
	if (rc == 0)
		rc = find_target(&s->state, id, rank, exec, &t, err, sizeof(err));
	state_unlock(&s->state);
	if (rc) {
		httpd_error(req, rc, err);
		return;
	}
	char path[128];
	snprintf(path, sizeof(path), "/v1/%s?attempt=%lld&rank=%lld", exec ? "exec" : "attach",
	         (long long)t.attempt_id, (long long)rank);
	struct job_stream *js = xcalloc(1, sizeof(*js));
	rc = upgrade_open(&js->agent, t.agent_url, path, t.secret, STREAM_UPGRADE,
	                  AGENT_STREAM_TIMEOUT_MS);
	if (rc || js->agent.status != 101) {
		if (rc) {
			text_printf(err, sizeof(err), "%s's agent could not be reached: %.400s",
			            t.node, js->agent.error);
			httpd_error(req, ERR_UPSTREAM, err);
		} else {
			agent_refused(req, &js->agent, t.node);
		}
		upgrade_close(&js->agent);
		free(js);
		return;
	}
	js->job_id = id;
	js->rank = (int)rank;
	js->exec = exec;
	snprintf(js->node, sizeof(js->node), "%s", t.node);
	log_info("stream opened job=%lld rank=%d kind=%s node=%s by=%s", (long long)id, (int)rank,
	         exec ? "exec" : "attach", t.node, by_token ? "exec-token" : "admin");
	httpd_upgrade(req, STREAM_UPGRADE, splice, js);
}

void api_stream(struct server *s, struct httpd_req *req, int64_t id, int exec)
{
	open_stream(s, req, id, exec, 0);
}

int api_stream_by_exec_token(struct server *s, struct httpd_req *req)
{
	static const char prefix[] = "/v1/jobs/", suffix[] = "/exec";
	const char *p = req->path;
	const char *h = httpd_header(req, "Authorization");
	if (strcmp(req->method, "POST") != 0 || !h || strncmp(h, "Bearer ", 7) != 0 ||
	    strncmp(p, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	const char *seg = p + sizeof(prefix) - 1, *slash = strchr(seg, '/');
	if (!slash || strcmp(slash, suffix) != 0)
		return 0;
	int64_t id = api_path_id(seg, (size_t)(slash - seg));
	if (!id)
		return 0;
	open_stream(s, req, id, 1, 1);
	return 1;
}
