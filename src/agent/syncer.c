#include "agent/syncer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/desired.h"
#include "agent/exec.h"
#include "agent/launch.h"
#include "agent/lease.h"
#include "agent/mpi.h"
#include "agent/serve.h"
#include "agent/task.h"
#include "base/buf.h"
#include "base/curl_lazy.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "proto/wire.h"

#define CALLS                   2
#define BACKOFF_MIN_MS          50
#define BACKOFF_MAX_MS          1000
#define REGISTER_BACKOFF_MAX_MS 10000 /* after refused registrations */
#define ANSWER_MAX              (16u << 20)

struct ack {
	int64_t attempt_id;
	int rank;
};

/* The latest notice delivered to a session rank (by its id). */
struct delivered {
	int64_t attempt_id;
	int rank;
	int64_t id;
};

/* One request slot; each keeps its own keep-alive connection. */
struct call {
	CURL *easy;
	int active;
	uint64_t seq;
	uint64_t identity;        /* the syncer's identity when it was sent */
	int64_t sent_boot_ms;     /* when it was sent (agent/lease.h's clock) */
	uint64_t facts_version;   /* of the facts it carried; 0: none */
	uint64_t health_version;  /* of the health report it carried; 0: none */
	uint64_t profile_version; /* of the profile status it carried; 0: none */
	json_t *profile_sent;     /* that status, for the log of its answer */
	char *body;
	struct curl_slist *hdrs;
	struct buf answer;
	struct ack *acks;
	size_t nacks;
	char errbuf[CURL_ERROR_SIZE];
};

struct syncer {
	struct syncer_config cfg;
	CURLM *multi;
	struct call calls[CALLS];
	char *url;
	int64_t node_id;
	char secret[256];
	json_t *facts;
	uint64_t facts_version;
	json_t *health;
	uint64_t health_version;
	json_t *profile_status;
	uint64_t profile_version;
	int64_t generation;
	int64_t lease_ms; /* the ranks' lease, as the last valid answer said; 0: none */
	uint64_t sent;    /* seq of the latest request sent */
	int dirty;        /* local state changed since the latest request */
	int closing;      /* syncer_flush: apply nothing */
	int64_t next_try; /* monotonic ms */
	int64_t backoff;
	int failing; /* an outage is being reported */
	int64_t failing_since;
	int auth_failed, auth_tries;
	int64_t register_backoff; /* after a refused registration; 0: none refused */
	uint64_t identity;        /* bumped by each syncer_set_identity */
	/* the ranks of the last answer applied, held (agent/desired.h) */
	struct desired_rank *desired;
	size_t ndesired;
	int has_desired;    /* an answer has been applied */
	struct buf applied; /* that answer's text, byte for byte; empty: none */
	struct delivered *notices;
	size_t nnotices, capnotices;
};

struct syncer *syncer_new(const struct syncer_config *cfg)
{
	struct syncer *s = xcalloc(1, sizeof(*s));
	s->cfg = *cfg;
	curl_lazy_load();
	s->multi = curl_multi_init();
	if (!s->multi) {
		fprintf(stderr, "anvil: curl_multi_init failed\n");
		abort();
	}
	for (int i = 0; i < CALLS; i++) {
		s->calls[i].easy = curl_easy_init();
		if (!s->calls[i].easy)
			abort();
		buf_init(&s->calls[i].answer);
	}
	buf_init(&s->applied);
	s->url = xasprintf("%s/v1/agent/sync", cfg->server);
	s->backoff = BACKOFF_MIN_MS;
	return s;
}

static void call_reset(struct syncer *s, struct call *c)
{
	if (c->active)
		curl_multi_remove_handle(s->multi, c->easy);
	c->active = 0;
	free(c->body);
	c->body = NULL;
	curl_slist_free_all(c->hdrs);
	c->hdrs = NULL;
	free(c->acks);
	c->acks = NULL;
	c->nacks = 0;
	json_decref(c->profile_sent);
	c->profile_sent = NULL;
	buf_reset(&c->answer);
}

static void forget_desired(struct syncer *s)
{
	for (size_t i = 0; i < s->ndesired; i++)
		desired_cleanup(&s->desired[i]);
	free(s->desired);
	s->desired = NULL;
	s->ndesired = 0;
}

void syncer_free(struct syncer *s)
{
	if (!s)
		return;
	for (int i = 0; i < CALLS; i++) {
		call_reset(s, &s->calls[i]);
		buf_cleanup(&s->calls[i].answer);
		curl_easy_cleanup(s->calls[i].easy);
	}
	curl_multi_cleanup(s->multi);
	forget_desired(s);
	buf_cleanup(&s->applied);
	free(s->notices);
	json_decref(s->facts);
	json_decref(s->health);
	json_decref(s->profile_status);
	free(s->url);
	free(s);
}

void syncer_set_identity(struct syncer *s, int64_t node_id, const char *secret)
{
	s->node_id = node_id;
	snprintf(s->secret, sizeof(s->secret), "%s", secret);
	s->generation = 0; /* a new registration may start a new count */
	buf_reset(&s->applied);
	s->auth_failed = 0;
	s->register_backoff = 0;
	s->identity++;
}

void syncer_set_facts(struct syncer *s, json_t *facts)
{
	json_decref(s->facts);
	s->facts = facts;
	s->facts_version++;
	s->dirty = 1;
}

void syncer_set_health(struct syncer *s, json_t *health)
{
	json_decref(s->health);
	s->health = health;
	s->health_version++;
	s->dirty = 1;
}

void syncer_set_profile_status(struct syncer *s, json_t *status)
{
	json_decref(s->profile_status);
	s->profile_status = status;
	s->profile_version++;
	s->dirty = 1;
}

void syncer_changed(struct syncer *s)
{
	s->dirty = 1;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct call *c = ud;
	size_t n = size * nmemb;
	if (c->answer.len + n > ANSWER_MAX)
		return 0; /* curl fails the transfer: an answer this big is wrong */
	buf_add(&c->answer, ptr, n);
	return n;
}

/* The desired record of rank (attempt_id, rank) in ranks (n of them). */
static const struct desired_rank *desired_of(const struct desired_rank *ranks, size_t n,
                                             int64_t attempt_id, int rank)
{
	for (size_t i = 0; i < n; i++)
		if (ranks[i].attempt_id == attempt_id && ranks[i].rank == rank)
			return &ranks[i];
	return NULL;
}

/* A running session rank's idle GPU time, -1 when not known. */
static int64_t session_idle_ms(const struct syncer *s, const struct exec_status *st)
{
	const struct desired_rank *d =
	        desired_of(s->desired, s->ndesired, st->attempt_id, st->rank);
	uint64_t mask = d ? d->gpus.mask : 0;
	if (!s->cfg.gpu_idle_ms || !mask || !d->session)
		return -1;
	return s->cfg.gpu_idle_ms(s->cfg.ctx, mask);
}

/* One entry of "ranks" (proto/wire.h, wire_report); final reports are
 * remembered for the ack. */
static json_t *report(struct syncer *s, struct call *c, const struct exec_status *st)
{
	const struct wire_record *r = &wire_report;
	struct exec *ex = s->cfg.exec;
	json_t *o = json_object();
	wire_set(o, r, "attempt_id", json_integer(st->attempt_id));
	wire_set(o, r, "rank", json_integer(st->rank));
	json_t *up = st->rank == 0 && s->cfg.checkpoint
	                     ? s->cfg.checkpoint(s->cfg.ctx, st->attempt_id)
	                     : NULL;
	if (up) /* level-triggered: the newest, in every report */
		wire_set(o, r, "checkpoint", up);
	if (st->state == EXEC_RUNNING) {
		wire_set(o, r, "state", json_string(st->pid ? "running" : "starting"));
		if (st->pid)
			wire_set(o, r, "pid", json_integer(st->pid));
		/* One stat; the directory exists only for checkpointing jobs. */
		int64_t ckpt = exec_checkpoint_ms(ex, st->job_id);
		if (ckpt > 0)
			wire_set(o, r, "checkpoint_ms", json_integer(ckpt));
		int64_t idle = st->pid ? session_idle_ms(s, st) : -1;
		if (idle >= 0)
			wire_set(o, r, "gpu_idle_ms", json_integer(idle));
		int64_t hung =
		        s->cfg.hung_ms ? s->cfg.hung_ms(s->cfg.ctx, st->attempt_id, st->rank) : 0;
		if (hung > 0)
			wire_set(o, r, "hung_ms", json_integer(hung));
		return o;
	}
	if (st->state == EXEC_EXITED) {
		wire_set(o, r, "state", json_string("exited"));
		wire_set(o, r, "exit_code", json_integer(st->exit_code));
		wire_set(o, r, "signal", json_integer(st->signal));
		if (st->oom_kills > 0)
			wire_set(o, r, "oom_kills", json_integer(st->oom_kills));
		char why[256];
		if (st->error) /* lost: what the agent knows of why */
			wire_set(o, r, "error", json_string(st->error));
		else if (launch_reason_read(exec_work_dir(ex), st->attempt_id, st->rank, why,
		                            sizeof(why)))
			wire_set(o, r, "reason", json_string(why)); /* a job with a head */
	} else {
		wire_set(o, r, "state", json_string("failed_to_start"));
		wire_set(o, r, "error", json_string(st->error ? st->error : "unknown"));
	}
	c->acks[c->nacks++] = (struct ack){st->attempt_id, st->rank};
	return o;
}

enum record { RECORD_FACTS, RECORD_HEALTH, RECORD_PROFILE };

/* Whether a request in flight other than c carries a version of the record.
 * A record rides on one request in flight at most: the two connections'
 * requests may reach the server's threads in either order, and a newer
 * profile status applied before an older one would leave the server with
 * the older (a node "converging" for ever after it said "converged"). A
 * newer version waits for the carrier's answer; as the server answers a
 * request only after applying it, it then applies the versions in order. */
static int carried_elsewhere(const struct syncer *s, const struct call *c, enum record rec)
{
	for (int i = 0; i < CALLS; i++) {
		const struct call *o = &s->calls[i];
		uint64_t v = rec == RECORD_FACTS    ? o->facts_version
		             : rec == RECORD_HEALTH ? o->health_version
		                                    : o->profile_version;
		if (o != c && o->active && v)
			return 1;
	}
	return 0;
}

/* The sync request (proto/wire.h, wire_sync_request); *withheld is set when
 * a record to send waits for the answer of the request that carries it. */
static char *build_request(struct syncer *s, struct call *c, int64_t wait_ms, int *withheld)
{
	const struct wire_record *r = &wire_sync_request;
	struct exec *ex = s->cfg.exec;
	json_t *ranks = json_array();
	c->acks = xcalloc(exec_count(ex) + 1, sizeof(*c->acks));
	for (size_t i = 0; i < exec_count(ex); i++) {
		struct exec_status st;
		exec_get(ex, i, &st);
		if (st.state == EXEC_RUNNING || !st.acked)
			json_array_append_new(ranks, report(s, c, &st));
	}
	json_t *o = json_object();
	wire_set(o, r, "node_id", json_integer(s->node_id));
	wire_set(o, r, "generation", json_integer(s->generation));
	wire_set(o, r, "wait_ms", json_integer(wait_ms));
	wire_set(o, r, "ranks", ranks);
	int wait_facts = s->facts && carried_elsewhere(s, c, RECORD_FACTS);
	int wait_health = s->health && carried_elsewhere(s, c, RECORD_HEALTH);
	int wait_profile = s->profile_status && carried_elsewhere(s, c, RECORD_PROFILE);
	*withheld = wait_facts || wait_health || wait_profile;
	c->facts_version = c->health_version = c->profile_version = 0;
	if (s->facts && !wait_facts) {
		wire_set(o, r, "facts", json_incref(s->facts));
		c->facts_version = s->facts_version;
	}
	if (s->health && !wait_health) {
		wire_set(o, r, "health", json_incref(s->health));
		c->health_version = s->health_version;
	}
	if (s->profile_status && !wait_profile) {
		wire_set(o, r, "profile_status", json_incref(s->profile_status));
		c->profile_version = s->profile_version;
		c->profile_sent = json_incref(s->profile_status);
	}
	char *body = jv_dump(o);
	json_decref(o);
	return body;
}

static void send_call(struct syncer *s, struct call *c, int64_t wait_ms)
{
	int withheld;
	c->body = build_request(s, c, wait_ms, &withheld);
	c->identity = s->identity;
	char auth[300];
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", s->secret);
	c->hdrs = curl_slist_append(NULL, auth);
	c->hdrs = curl_slist_append(c->hdrs, "Content-Type: application/json");
	c->hdrs = curl_slist_append(c->hdrs, "Expect:");
	CURL *h = c->easy;
	curl_easy_reset(h);
	c->errbuf[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, s->url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->hdrs);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(c->body));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_PRIVATE, c);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	/* The server holds a poll at most wait_ms (capped lower): some slack. */
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(wait_ms + 10000));
	c->seq = ++s->sent;
	c->sent_boot_ms = lease_now_ms();
	c->active = 1;
	/* a withheld record goes once the request carrying it is answered; this
	 * one, parked at the server in its place, has the server answer that */
	s->dirty = withheld;
	curl_multi_add_handle(s->multi, h);
}

static void failure(struct syncer *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void failure(struct syncer *s, const char *fmt, ...)
{
	atomic_fetch_add(&s->cfg.stats->sync_errors_total, 1);
	if (!s->failing) {
		char why[512];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
		log_warn("sync failing, ranks keep running; retrying with backoff up to %d ms "
		         "server=%s reason=\"%s\"",
		         BACKOFF_MAX_MS, s->cfg.server, why);
		s->failing = 1;
		s->failing_since = now_ms();
	}
	s->next_try = now_ms() + s->backoff;
	s->backoff = s->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff * 2;
}

static void recovered(struct syncer *s)
{
	if (s->failing)
		log_info("sync works again server=%s down_ms=%lld", s->cfg.server,
		         (long long)(now_ms() - s->failing_since));
	s->failing = 0;
	s->backoff = BACKOFF_MIN_MS;
	s->next_try = 0;
	s->auth_tries = 0;
}

/* The device minors of the rank's GPUs, from the agent's table by index:
 * how many, or -1 when one is not known (the rank is then not isolated). */
static int rank_minors(const struct syncer *s, const struct desired_gpus *gpus, int *out, int max)
{
	int n = 0;
	for (size_t i = 0; i < gpus->n; i++) {
		int64_t x = gpus->index[i];
		if (x < 0 || x >= s->cfg.ngpu_minors || n == max || s->cfg.gpu_minors[x] < 0)
			return -1;
		out[n++] = s->cfg.gpu_minors[x];
	}
	return n;
}

/* What runs the rank of d: a job with a head runs its launcher, which runs
 * the rest; an MPI job mpirun on rank 0, `anvil _mpiwait` on the others; a
 * workflow task its wrapper, which runs the command, unless its code is
 * here to start it in directly (*direct); else the command itself. */
struct rank_argv {
	char **launch, **mpi, **task;
	char *direct;
	char **restore; /* `anvil _restore --key K --` before the rest (agent/ckpt.h) */
};

/* argv under `anvil _restore` when the rank restores a checkpoint first. */
static const char *const *restored(const struct desired_rank *d, struct rank_argv *a,
                                   const char *const *argv)
{
	if (!d->restore || !argv)
		return argv;
	size_t n = 0;
	while (argv[n])
		n++;
	a->restore = xcalloc(n + 6, sizeof(char *));
	a->restore[0] = xstrdup(launch_self());
	a->restore[1] = xstrdup("_restore");
	a->restore[2] = xstrdup("--key");
	a->restore[3] = xstrdup(d->restore);
	a->restore[4] = xstrdup("--");
	for (size_t i = 0; i < n; i++)
		a->restore[5 + i] = xstrdup(argv[i]);
	return (const char *const *)a->restore;
}

static const char *const *rank_argv_of(struct syncer *s, const struct desired_rank *d,
                                       struct rank_argv *a)
{
	const char *work_dir = exec_work_dir(s->cfg.exec);
	*a = (struct rank_argv){0};
	if ((a->launch = launch_argv(d, launch_self(), work_dir)))
		return (const char *const *)a->launch;
	if ((a->mpi = mpi_argv(d, launch_self())))
		return (const char *const *)a->mpi;
	if ((a->direct = task_direct_cwd(d, work_dir)))
		return d->command.v;
	if ((a->task = task_argv(d, launch_self(), work_dir)))
		return (const char *const *)a->task;
	return d->command.v;
}

static const char *const *rank_argv(struct syncer *s, const struct desired_rank *d,
                                    struct rank_argv *a)
{
	return restored(d, a, rank_argv_of(s, d, a));
}

static void rank_argv_free(struct rank_argv *a)
{
	for (size_t i = 0; a->restore && a->restore[i]; i++)
		free(a->restore[i]);
	free(a->restore);
	launch_argv_free(a->launch);
	mpi_argv_free(a->mpi);
	task_argv_free(a->task);
	free(a->direct);
}

/* PyTorch's NCCL process group tears the process down on an NCCL error
 * instead of hanging (TORCH_NCCL_ASYNC_ERROR_HANDLING=1); with a hang
 * timeout, its watchdog gives up, and a collective timeout is offered
 * (ANVIL_COLLECTIVE_TIMEOUT_S, for init_process_group's timeout), at three
 * quarters of it, so that NCCL's own error comes before anvil's. */
static void nccl_defaults(const struct desired_rank *d, json_t *extra)
{
	if (!d->gpus.mask)
		return;
	json_object_set_new(extra, "TORCH_NCCL_ASYNC_ERROR_HANDLING", json_string("1"));
	if (d->hang_timeout_ms <= 0)
		return;
	int64_t s = d->hang_timeout_ms * 3 / 4 / 1000;
	char v[24];
	snprintf(v, sizeof(v), "%lld", (long long)(s > 0 ? s : 1));
	json_object_set_new(extra, "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", json_string(v));
	json_object_set_new(extra, "ANVIL_COLLECTIVE_TIMEOUT_S", json_string(v));
}

/* The rank's environment: its entry's (agent/desired.h, desired_envv) and
 * the agent's own variables (NCCL's; the server's address for an MPI job,
 * where `anvil _rsh` execs into the other ranks, for a workflow task,
 * whose wrapper moves objects, and for a rank that restores a checkpoint
 * first), unless the job set them. */
static char **rank_env(struct syncer *s, const struct desired_rank *d, const json_t *envs,
                       char *why, size_t whylen)
{
	json_t *extra = json_object();
	if (s->cfg.rank_env)
		s->cfg.rank_env(s->cfg.ctx, d->gpus.mask, extra);
	if ((d->mpi || d->task || d->restore) && s->cfg.server)
		json_object_set_new(extra, "ANVIL_SERVER", json_string(s->cfg.server));
	nccl_defaults(d, extra);
	char **envv = desired_envv(d, envs, extra, why, whylen);
	json_decref(extra);
	return envv;
}

static void start_desired(struct syncer *s, struct desired_rank *d, const json_t *envs)
{
	char why[256];
	/* A rank started here already is all but every entry of an answer
	 * (each lists the node's whole set): it was checked when it started.
	 * One running already (adopted after a restart) may still need its
	 * environment rebuilt for exec into it (exec.h, exec_describe). */
	struct exec_status st;
	int known = exec_find(s->cfg.exec, d->attempt_id, d->rank, &st) == 0;
	if (known && exec_described(s->cfg.exec, d->attempt_id, d->rank))
		return;
	char **envv = NULL;
	if (desired_deepen(d, why, sizeof(why)) != 0 ||
	    !(envv = rank_env(s, d, envs, why, sizeof(why)))) {
		log_warn("sync answer: bad rank entry, skipped reason=\"%s\"", why);
		return;
	}
	int minors[64];
	int nminors = rank_minors(s, &d->gpus, minors, 64);
	struct rank_argv a;
	struct exec_spec spec = {
	        .attempt_id = d->attempt_id,
	        .rank = d->rank,
	        .job_id = d->job_id,
	        .argv = rank_argv(s, d, &a),
	        .env = (const char *const *)envv,
	        .grace_ms = d->grace_ms,
	        .gpu_minors = nminors > 0 ? minors : NULL,
	        .ngpu_minors = nminors,
	        .cpu_millis = d->cpu_millis,
	        .memory_bytes = d->memory_bytes,
	        .session = d->session,
	        .as_root = d->as_root,
	};
	spec.cwd = a.direct ? a.direct : d->cwd;
	spec.task = a.task != NULL;
	if (known) {
		exec_describe(s->cfg.exec, &spec);
	} else {
		exec_start(s->cfg.exec, &spec);
		s->dirty = 1;
	}
	for (size_t i = 0; envv[i]; i++)
		free(envv[i]);
	free(envv);
	rank_argv_free(&a);
}

/* Hands each running session rank its notice once (by id), and forgets
 * the ids of ranks no longer desired. */
static void deliver_notices(struct syncer *s)
{
	size_t keep = 0;
	for (size_t k = 0; k < s->nnotices; k++)
		if (desired_of(s->desired, s->ndesired, s->notices[k].attempt_id,
		               s->notices[k].rank))
			s->notices[keep++] = s->notices[k];
	s->nnotices = keep;
	for (size_t i = 0; i < s->ndesired; i++) {
		const struct desired_rank *d = &s->desired[i];
		struct exec_status st;
		char why[256];
		int64_t id;
		const char *text;
		if (!s->cfg.notice || !d->notice || !d->session ||
		    exec_find(s->cfg.exec, d->attempt_id, d->rank, &st) != 0 ||
		    st.state != EXEC_RUNNING)
			continue;
		if (desired_notice(d, &id, &text, why, sizeof(why)) != 1) {
			log_warn("sync answer: bad notice, skipped attempt=%lld rank=%d "
			         "reason=\"%s\"",
			         (long long)d->attempt_id, d->rank, why);
			continue;
		}
		size_t k = 0;
		while (k < s->nnotices &&
		       (s->notices[k].attempt_id != d->attempt_id || s->notices[k].rank != d->rank))
			k++;
		if (k < s->nnotices && s->notices[k].id >= id)
			continue; /* delivered already */
		if (k == s->nnotices) {
			XGROW(s->notices, s->nnotices, s->capnotices);
			s->nnotices++;
		}
		s->notices[k] = (struct delivered){d->attempt_id, d->rank, id};
		log_info("session notice attempt=%lld rank=%d id=%lld", (long long)d->attempt_id,
		         d->rank, (long long)id);
		s->cfg.notice(s->cfg.ctx, d->attempt_id, d->rank, text);
	}
}

/* Stops the ranks no longer desired and forgets those over and acked. */
static void retire(struct syncer *s)
{
	struct exec *ex = s->cfg.exec;
	/* Backwards: exec_forget moves the last rank into the freed slot. */
	for (size_t k = exec_count(ex); k-- > 0;) {
		struct exec_status st;
		exec_get(ex, k, &st);
		if (desired_of(s->desired, s->ndesired, st.attempt_id, st.rank))
			continue;
		if (st.state == EXEC_RUNNING && !st.stopping)
			exec_stop(ex, st.attempt_id, st.rank, -1);
		else if (st.state != EXEC_RUNNING && st.acked)
			exec_forget(ex, st.attempt_id, st.rank);
	}
}

/* Makes the node match the desired set: each entry is parsed here, once
 * (agent/desired.h), and what is started reads the record. */
static void reconcile(struct syncer *s, const json_t *ranks, const json_t *envs)
{
	struct exec *ex = s->cfg.exec;
	size_t n = json_array_size(ranks);
	struct desired_rank *d = xcalloc(n + 1, sizeof(*d));
	for (size_t i = 0; i < n; i++)
		desired_parse(json_array_get(ranks, i), &d[i]);
	exec_batch(ex); /* the spares fork while the next start is prepared */
	for (size_t i = 0; i < n; i++)
		start_desired(s, &d[i], envs);
	exec_settle(ex);
	forget_desired(s);
	s->desired = d;
	s->ndesired = n;
	s->has_desired = 1;
	deliver_notices(s);
	retire(s);
}

/* What a 200 answer settles whatever its desired set: the final reports
 * it acknowledges and the records the server took. */
/* The server answered c: the ranks' lease runs from when c was sent
 * (agent/lease.h says why not from now). */
static void renew_lease(struct syncer *s, const struct call *c)
{
	int64_t end = s->lease_ms > 0 ? c->sent_boot_ms + s->lease_ms : 0;
	int rc = exec_lease_renew(s->cfg.exec, end, s->lease_ms);
	if (rc && rc != -EBADF)
		log_warn("cannot renew the ranks' lease error=\"%s\"", strerror(-rc));
}

static void took(struct syncer *s, struct call *c)
{
	renew_lease(s, c);
	for (size_t i = 0; i < c->nacks; i++)
		exec_ack(s->cfg.exec, c->acks[i].attempt_id, c->acks[i].rank);
	if (c->facts_version && c->facts_version == s->facts_version) {
		json_decref(s->facts);
		s->facts = NULL;
	}
	if (c->health_version && c->health_version == s->health_version) {
		json_decref(s->health);
		s->health = NULL;
	}
	/* logged for every version the server took, a newer one pending or not */
	if (c->profile_version)
		log_debug("profile status acknowledged hash=%.12s state=%s",
		          jv_str(c->profile_sent, "hash", ""),
		          jv_str(c->profile_sent, "state", ""));
	if (c->profile_version && c->profile_version == s->profile_version) {
		json_decref(s->profile_status);
		s->profile_status = NULL;
	}
	recovered(s);
}

/* Whether c's answer is, byte for byte, the last answer applied. A request
 * that supersedes the node's parked poll has the server answer both with
 * the same text (the same generation and desired set); the second need not
 * be parsed, checked and applied again. As answers at least as new as the
 * last applied are applied, the same text is the same generation: never
 * an older answer that a newer one has replaced. */
static int repeated(const struct syncer *s, const struct call *c)
{
	return s->applied.len && c->answer.len == s->applied.len &&
	       memcmp(c->answer.data, s->applied.data, c->answer.len) == 0;
}

static void answered(struct syncer *s, struct call *c)
{
	char why[256];
	json_t *o = NULL;
	if (!s->closing && s->has_desired && repeated(s, c)) {
		atomic_fetch_add(&s->cfg.stats->sync_repeated_total, 1);
		took(s, c);
		retire(s); /* the ranks it acknowledged may go now */
		return;
	}
	int rc = jv_parse_object(c->answer.data, c->answer.len, &o, why, sizeof(why));
	if (rc == 0) {
		json_t *known = wire_known(o, &wire_sync_answer);
		rc = wire_check(known, &wire_sync_answer, why, sizeof(why));
		json_decref(known);
	}
	if (rc) {
		failure(s, "sync answer: %s", why);
		goto out;
	}
	s->lease_ms = jv_int(o, "lease_ms", 0);
	took(s, c);
	/* Answers on the two connections may arrive out of order, and an
	 * answer is the desired set as of its generation: apply only answers
	 * at least as new as the last one applied. Request order is no guide:
	 * a superseded poll can be answered after a newer request was. */
	int64_t gen = jv_int(o, "generation", 0);
	if (gen >= s->generation && !s->closing) {
		s->generation = gen;
		reconcile(s, json_object_get(o, "ranks"), json_object_get(o, "envs"));
		if (s->cfg.on_desired)
			s->cfg.on_desired(s->cfg.ctx, s->desired, s->ndesired);
		if (s->cfg.on_profile)
			s->cfg.on_profile(s->cfg.ctx, json_object_get(o, "profile"));
		/* keep its text (the call's buffer is reset after this) */
		struct buf t = s->applied;
		s->applied = c->answer;
		c->answer = t;
	}
out:
	json_decref(o);
}

/* Whether c's 503 is the server's own "your desired set is not stored
 * yet" (server/agentproto.c), not a proxy's: its error body, code busy. */
static int held_answer(const struct call *c)
{
	json_t *o = NULL;
	char why[64];
	if (!c->answer.len || jv_parse_object(c->answer.data, c->answer.len, &o, why, sizeof(why)))
		return 0;
	int busy = strcmp(jv_str(json_object_get(o, "error"), "code", ""), "busy") == 0;
	json_decref(o);
	return busy;
}

static void call_done(struct syncer *s, struct call *c, CURLcode cc)
{
	long status = 0;
	curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
	/* An older request answered by a newer one is no failure. */
	int latest = c->seq == s->sent;
	atomic_fetch_add(&s->cfg.stats->sync_total, 1);
	if (cc != CURLE_OK) {
		if (latest)
			failure(s, "%s", c->errbuf[0] ? c->errbuf : curl_easy_strerror(cc));
	} else if (status == 200) {
		answered(s, c);
	} else if (status == 503 && held_answer(c)) {
		/* the server has us, and holds a change it cannot store yet:
		 * our ranks keep running, and so does their lease */
		renew_lease(s, c);
		if (latest)
			failure(s, "HTTP 503: %.300s", c->answer.data ? c->answer.data : "");
	} else if (status == 401 && c->identity != s->identity) {
		/* sent with the identity before the last registration: stale */
	} else if (status == 401) {
		atomic_fetch_add(&s->cfg.stats->sync_errors_total, 1);
		if (!s->auth_failed)
			log_warn("sync refused the node secret (401): registering again "
			         "reason=\"%.300s\"",
			         c->answer.data ? c->answer.data : "");
		s->auth_failed = 1;
		if (s->auth_tries++ > 0)
			failure(s, "the node secret was refused again after registering");
	} else if (latest) {
		failure(s, "HTTP %ld: %.300s", status, c->answer.data ? c->answer.data : "");
	}
	call_reset(s, c);
}

static void collect(struct syncer *s)
{
	int running, left;
	curl_multi_perform(s->multi, &running);
	CURLMsg *m;
	while ((m = curl_multi_info_read(s->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		struct call *c = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
		if (c)
			call_done(s, c, m->data.result);
	}
}

static int active_calls(const struct syncer *s)
{
	int n = 0;
	for (int i = 0; i < CALLS; i++)
		n += s->calls[i].active;
	return n;
}

void syncer_step(struct syncer *s)
{
	collect(s);
	if (s->auth_failed || !s->secret[0] || now_ms() < s->next_try)
		return;
	int active = active_calls(s);
	if (active == CALLS || (active == 1 && !s->dirty))
		return;
	for (int i = 0; i < CALLS; i++)
		if (!s->calls[i].active) {
			send_call(s, &s->calls[i], s->cfg.wait_ms);
			break;
		}
	/* Puts the request on the wire now, and collects what that completes:
	 * the parked poll's answer, when it arrived meanwhile, is read on the
	 * way, and a finished transfer leaves no socket to wake the wait, which
	 * then slept its full second (syncer_wait) with the answer unapplied. */
	collect(s);
}

void syncer_wait(struct syncer *s, const int *fds, int nfds, int64_t timeout_ms, int *ready)
{
	struct curl_waitfd w[SYNCER_WAIT_FDS];
	int n = 0;
	if (nfds > SYNCER_WAIT_FDS)
		nfds = SYNCER_WAIT_FDS;
	for (int i = 0; i < nfds; i++)
		w[i] = (struct curl_waitfd){.fd = fds[i], .events = CURL_WAIT_POLLIN};
	if (timeout_ms < 0 || timeout_ms > 1000)
		timeout_ms = 1000;
	curl_multi_poll(s->multi, nfds > 0 ? w : NULL, (unsigned)nfds, (int)timeout_ms, &n);
	for (int i = 0; i < nfds; i++)
		ready[i] = (w[i].revents & CURL_WAIT_POLLIN) != 0;
}

int64_t syncer_next_ms(const struct syncer *s)
{
	int64_t now = now_ms();
	if (!s->secret[0])
		return -1;
	if (s->next_try > now)
		return s->next_try - now;
	if (s->auth_failed)
		return 0;
	int active = active_calls(s);
	return active == 0 || (active == 1 && s->dirty) ? 0 : -1;
}

int syncer_needs_register(const struct syncer *s)
{
	return s->auth_failed && now_ms() >= s->next_try;
}

void syncer_register_failed(struct syncer *s, int refused)
{
	failure(s, "registering again failed");
	if (!refused)
		return;
	/* Refused (the join token expired, or the node waits for an admin's
	 * reset): asked again seconds apart, not once a second. */
	s->register_backoff = s->register_backoff ? s->register_backoff * 2 : BACKOFF_MAX_MS;
	if (s->register_backoff > REGISTER_BACKOFF_MAX_MS)
		s->register_backoff = REGISTER_BACKOFF_MAX_MS;
	s->next_try = now_ms() + s->register_backoff;
}

void syncer_flush(struct syncer *s, int64_t timeout_ms)
{
	for (int i = 0; i < CALLS; i++)
		call_reset(s, &s->calls[i]);
	if (!s->secret[0] || s->auth_failed)
		return;
	s->closing = 1;
	send_call(s, &s->calls[0], 0);
	int64_t end = now_ms() + timeout_ms;
	while (s->calls[0].active && now_ms() < end) {
		int ready;
		collect(s);
		if (s->calls[0].active)
			syncer_wait(s, NULL, 0, end - now_ms(), &ready);
	}
	call_reset(s, &s->calls[0]);
}
