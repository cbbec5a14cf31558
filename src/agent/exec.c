/* exec.c - the executor's core (exec.h): its ranks (found, added,
 * dropped), stopping them, polling them to their end, and the executor's
 * life (exec_new, exec_free). What a start, the journal, the limits and
 * the spare shims need is in the files exec_int.h lists.
 */
#include "agent/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/exec_int.h"
#include "agent/fence.h"
#include "agent/journal.h"
#include "agent/lease.h"
#include "agent/logpool.h"
#include "agent/shim.h"
#include "base/err.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "model/machine.h"

#define ADOPT_POLL_MS   250 /* adopted shims are not our children: no word from them */
#define CGROUP_RETRY_MS 20

struct exec_rank *exec_rank_find(const struct exec *e, int64_t attempt_id, int rank, size_t *pos)
{
	for (size_t i = 0; i < e->n; i++)
		if (e->ranks[i]->attempt_id == attempt_id && e->ranks[i]->rank == rank) {
			if (pos)
				*pos = i;
			return e->ranks[i];
		}
	return NULL;
}

int exec_rank_move(struct exec_rank *r, enum exec_state to)
{
	if (!machine_find(MACHINE_AGENT_RANK, (int)r->state, (int)to)) {
		log_error("illegal state change refused: %s attempt=%lld rank=%d %s -> %s",
		          machine_kind_name(MACHINE_AGENT_RANK), (long long)r->attempt_id, r->rank,
		          machine_state_name(MACHINE_AGENT_RANK, (int)r->state),
		          machine_state_name(MACHINE_AGENT_RANK, (int)to));
		return ERR_CONFLICT;
	}
	r->state = to;
	return 0;
}

struct exec_rank *exec_rank_add(struct exec *e, int64_t attempt_id, int rank)
{
	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 16;
		e->ranks = xrealloc(e->ranks, e->cap * sizeof(*e->ranks));
	}
	struct exec_rank *r = xcalloc(1, sizeof(*r));
	r->attempt_id = attempt_id;
	r->rank = rank;
	r->state = (enum exec_state)machine_initial(MACHINE_AGENT_RANK); /* running */
	r->sock = -1;
	if (e->cgroup_root)
		r->cgroup = xasprintf("%s/%lld-%d", e->cgroup_root, (long long)attempt_id, rank);
	e->ranks[e->n++] = r;
	return r;
}

static void env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

static void rank_free(struct exec_rank *r)
{
	for (int i = 0; i < EXEC_LIMITS; i++)
		free(r->limits[i]);
	env_free(r->env);
	free(r->cwd);
	free(r->error);
	free(r->cgroup);
	free(r);
}

static void kill_rank(struct exec_rank *r, int sig)
{
	if (r->pgid > 0)
		killpg(r->pgid, sig);
	if (r->cgroup)
		cgroup_signal(r->cgroup, sig, r->shim > 0 ? r->shim : 0);
	for (int i = 0; i < EXEC_LIMITS && !r->cgroup; i++)
		if (r->limits[i]) /* the shim is never in these */
			cgroup_signal(r->limits[i], sig, 0);
}

void exec_cgroup_tidy(struct exec_rank *r)
{
	if (r->cgroup_left) {
		cgroup_signal(r->cgroup, SIGKILL, r->shim > 0 ? r->shim : 0);
		if (cgroup_remove(r->cgroup) == 0)
			r->cgroup_left = 0;
	}
	exec_limits_tidy(r);
}

/* The command ended with wait status st, or was lost (st unused). */
void exec_set_final(struct exec_rank *r, int st, const char *lost)
{
	if (exec_rank_move(r, EXEC_EXITED) != 0)
		return; /* final already: its end stays the one recorded first */
	/* what an exec needed goes with the rank (exec_context) */
	env_free(r->env);
	r->env = NULL;
	free(r->cwd);
	r->cwd = NULL;
	if (lost) {
		r->exit_code = 255;
		r->signal = 0;
		r->lost = 1;
		if (lost != r->error) {
			free(r->error);
			r->error = xstrdup(lost);
		}
	} else if (WIFSIGNALED(st)) {
		r->signal = WTERMSIG(st);
		r->exit_code = 128 + r->signal;
	} else {
		r->exit_code = WEXITSTATUS(st);
	}
	if (!lost && !r->have_status) {
		r->wait_status = st;
		r->have_status = 1;
	}
}

static void log_final(const struct exec_rank *r)
{
	if (r->lost)
		log_warn("rank lost attempt=%lld rank=%d job=%lld reason=\"%s\"",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id, r->error);
	else
		log_info("rank exited attempt=%lld rank=%d job=%lld exit_code=%d signal=%d",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id, r->exit_code,
		         r->signal);
}

/* The kernel's OOM kills in the rank's memory cgroup, read as it ends,
 * before its cgroups are removed, and journaled only when there are any
 * (rare): a restarted agent that finds the cgroup gone still reports why
 * the rank died (syncer: oom_kills). */
static void note_oom(struct exec *e, struct exec_rank *r)
{
	int n = exec_limits_oom(r);
	if (n <= r->oom_kills)
		return;
	r->oom_kills = n;
	exec_journal_put(e, json_pack("{s:I,s:i,s:i}", "attempt_id", (json_int_t)r->attempt_id,
	                              "rank", r->rank, "oom_kills", n));
}

/* The command ended (found by polling, or at adoption when !live).
 * Whatever the rank left behind goes with it: everything in its cgroup,
 * else its process group, but only while we watched it end (an adopted
 * rank's group may be long gone and its id reused). */
static void finish(struct exec *e, struct exec_rank *r, int st, const char *lost, int live)
{
	if (!lost && r->state == EXEC_RUNNING)
		note_oom(e, r);
	exec_set_final(r, st, lost);
	e->ctx_version++;
	if (r->session) { /* the holder removes it, unless it was killed */
		char *sock = exec_session_socket(e, r->attempt_id, r->rank);
		unlink(sock);
		free(sock);
	}
	if (r->cgroup) {
		r->cgroup_left = 1;
		exec_cgroup_tidy(r);
	} else if (live && r->pgid > 0) {
		killpg(r->pgid, SIGKILL);
	}
	log_final(r);
}

/* open() that never returns 0, 1 or 2: the shim dup2s onto those. */
int exec_open_high(const char *path, int flags, unsigned mode)
{
	int fd = open(path, flags | O_CLOEXEC, mode);
	return fd < 0 ? -errno : fd_above_stdio(fd);
}

/* The rank's shim runs it: its socket tells exec_poll when it ends. */
void exec_rank_watch(struct exec *e, struct exec_rank *r, struct shim sh)
{
	r->shim = sh.pid;
	r->sock = sh.sock;
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = sh.sock};
	if (epoll_ctl(e->epoll_fd, EPOLL_CTL_ADD, sh.sock, &ev) < 0)
		log_warn("cannot watch a shim error=\"%s\"", strerror(errno));
}

static void rank_unwatch(struct exec *e, struct exec_rank *r)
{
	if (r->sock < 0)
		return;
	epoll_ctl(e->epoll_fd, EPOLL_CTL_DEL, r->sock, NULL);
	close(r->sock);
	r->sock = -1;
}

/* Kills what is in the cgroup and removes it, now or from exec_poll. */
void exec_doom_cgroup(struct exec *e, char *path)
{
	cgroup_signal(path, SIGKILL, 0);
	if (cgroup_remove(path) == 0) {
		free(path);
		return;
	}
	e->doomed = xrealloc(e->doomed, (e->ndoomed + 1) * sizeof(*e->doomed));
	e->doomed[e->ndoomed++] = path;
}

void exec_tidy_doomed(struct exec *e)
{
	for (size_t i = e->ndoomed; i-- > 0;) {
		cgroup_signal(e->doomed[i], SIGKILL, 0);
		if (cgroup_remove(e->doomed[i]) == 0) {
			free(e->doomed[i]);
			e->doomed[i] = e->doomed[--e->ndoomed];
		}
	}
}

const char *exec_cgroup_root(const struct exec *e)
{
	return e->cgroup_root;
}

const char *exec_work_dir(const struct exec *e)
{
	return e->work_dir;
}

static void stop_rank(struct exec_rank *r, int64_t cap_ms)
{
	if (r->state != EXEC_RUNNING || r->stopping)
		return;
	int64_t grace = r->grace_ms;
	if (cap_ms >= 0 && grace > cap_ms)
		grace = cap_ms;
	r->stopping = 1;
	r->kill_at = now_ms() + grace;
	log_info("rank stopping attempt=%lld rank=%d job=%lld grace_ms=%lld",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id, (long long)grace);
	if (grace <= 0) {
		kill_rank(r, SIGKILL);
		r->killed = 1;
	} else {
		kill_rank(r, SIGTERM);
	}
}

int exec_lease_renew(struct exec *e, int64_t end_ms, int64_t len_ms)
{
	if (e->lease_fd < 0)
		return -EBADF;
	if (end_ms && end_ms <= e->lease_end_ms)
		return 0; /* an older request's answer: the lease never shrinks */
	e->lease_end_ms = end_ms;
	return lease_renew(e->lease_fd, end_ms, len_ms);
}

int exec_stop(struct exec *e, int64_t attempt_id, int rank, int64_t cap_ms)
{
	exec_settle(e);
	struct exec_rank *r = exec_rank_find(e, attempt_id, rank, NULL);
	if (!r)
		return ERR_NOTFOUND;
	stop_rank(r, cap_ms);
	return 0;
}

void exec_stop_all(struct exec *e, int64_t cap_ms)
{
	exec_settle(e);
	for (size_t i = 0; i < e->n; i++)
		stop_rank(e->ranks[i], cap_ms);
}

/* 1 when the shim is gone: reaped now, or (not our child) no longer exists. */
static int shim_gone(struct exec_rank *r)
{
	if (r->shim <= 0)
		return 0;
	int st;
	pid_t w = waitpid(r->shim, &st, WNOHANG);
	if (w == r->shim) {
		r->own = 0;
		r->shim = -r->shim; /* reaped: the pid may be reused from now on */
		return 1;
	}
	return w < 0 && errno == ECHILD && kill(r->shim, 0) < 0 && errno == ESRCH;
}

/* Our shim said the command ended with wait status st. */
static void ended(struct exec *e, struct exec_rank *r, int st)
{
	r->wait_status = st;
	r->have_status = 1;
	note_oom(e, r);
	if (exec_spares_reuse(e, r)) {
		exec_set_final(r, st, NULL);
		e->ctx_version++;
		log_final(r);
		return;
	}
	rank_unwatch(e, r); /* the shim exits: SIGCHLD, reaped below */
	finish(e, r, st, NULL, 1);
}

/* Reaps the shim of a final rank (it exits after its rank). */
static void reap(struct exec_rank *r)
{
	if (r->own && r->shim > 0 && r->sock < 0 && waitpid(r->shim, NULL, WNOHANG) == r->shim) {
		r->own = 0;
		r->shim = -r->shim;
	}
}

int exec_poll_running(struct exec *e, struct exec_rank *r, int64_t now, int live)
{
	if (r->sock >= 0) {
		struct shim sh = {.pid = r->shim, .sock = r->sock};
		int st, rc = shim_ended(&sh, &st);
		if (rc == 1) {
			ended(e, r, st);
			return 1;
		}
		if (rc < 0)
			rank_unwatch(e, r); /* gone without a word: see below */
	}
	if (r->shim == 0 && r->pgid > 0 && r->stopping)
		kill_rank(r, r->killed ? SIGKILL : SIGTERM); /* stopped before we knew it */
	int gone = r->sock < 0 && (r->shim < 0 || shim_gone(r));
	/* Our own shims tell on their socket; adopted ones are polled. */
	if ((gone || !r->own) && r->have_status) {
		finish(e, r, r->wait_status, NULL, live);
		return 1;
	}
	if (gone) {
		finish(e, r, 0, "the rank's shim ended without recording an exit status", live);
		return 1;
	}
	if (r->shim == 0 && !r->own && now >= r->lost_at) {
		finish(e, r, 0, "the agent stopped while the rank was starting", live);
		return 1;
	}
	if (r->stopping && !r->killed && now >= r->kill_at) {
		log_info("rank killed after grace attempt=%lld rank=%d job=%lld",
		         (long long)r->attempt_id, r->rank, (long long)r->job_id);
		kill_rank(r, SIGKILL);
		r->killed = 1;
	}
	return 0;
}

int exec_poll(struct exec *e)
{
	exec_settle(e); /* a shim's socket says SHIM_STARTED first */
	int changed = 0;
	int64_t now = now_ms();
	exec_journal_refresh(e);
	for (size_t i = 0; i < e->n; i++) {
		struct exec_rank *r = e->ranks[i];
		if (r->state == EXEC_RUNNING)
			changed += exec_poll_running(e, r, now, 1);
		else
			reap(r);
		exec_cgroup_tidy(r);
	}
	for (size_t i = e->nexiting; i-- > 0;)
		if (waitpid(e->exiting[i], NULL, WNOHANG) != 0)
			e->exiting[i] = e->exiting[--e->nexiting];
	exec_tidy_doomed(e);
	exec_spares_refill(e, now);
	exec_journal_compact(e);
	return changed;
}

int64_t exec_next_poll_ms(const struct exec *e)
{
	int64_t now = now_ms(), next = -1;
	if (e->nspares + exec_spares_out(e) < e->want_spares)
		next = now >= e->spare_retry_at ? 0 : e->spare_retry_at - now;
	else if (e->nspares > e->want_spares)
		next = e->trim ? 0 : e->spares[0].since + EXEC_SPARE_IDLE_MS - now;
	if (next < -1)
		next = 0;
	if (e->ndoomed && (next < 0 || next > CGROUP_RETRY_MS))
		next = CGROUP_RETRY_MS;
	for (size_t i = 0; i < e->n; i++) {
		const struct exec_rank *r = e->ranks[i];
		int64_t in = -1;
		if (r->cgroup_left || exec_limits_left(r))
			in = CGROUP_RETRY_MS;
		if (r->state == EXEC_RUNNING && r->sock < 0)
			in = ADOPT_POLL_MS;
		if (r->state == EXEC_RUNNING && r->stopping && !r->killed) {
			int64_t k = r->kill_at > now ? r->kill_at - now : 0;
			in = in < 0 || k < in ? k : in;
		}
		if (in >= 0 && (next < 0 || in < next))
			next = in;
	}
	return next;
}

int exec_fd(const struct exec *e)
{
	return e->epoll_fd;
}

int exec_new(const char *work_dir, const char *node_name, struct exec **out)
{
	char *logs = xasprintf("%s/logs", work_dir), *outd = xasprintf("%s/output", work_dir);
	char *spare_dirs = xasprintf("%s/spare-output", work_dir);
	char *ranks = xasprintf("%s/rank", work_dir);
	int rc = mkdir_p(logs, 0755);
	if (rc == 0)
		rc = mkdir_p(outd, 0755);
	if (rc == 0) /* the ranks' own directories (exec_rank_dir) */
		rc = mkdir_p(ranks, 0700);
	free(ranks);
	if (rc == 0)
		rc = mkdir_p(spare_dirs, 0755);
	free(logs);
	free(outd);
	if (rc) {
		free(spare_dirs);
		return rc;
	}
	struct journal *j = NULL;
	if ((rc = journal_open(work_dir, &j)) != 0)
		return rc;
	int null_fd = exec_open_high("/dev/null", O_RDWR, 0);
	int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (null_fd < 0 || epoll_fd < 0) {
		rc = null_fd < 0 ? null_fd : -errno;
		if (null_fd >= 0)
			close(null_fd);
		journal_free(j);
		free(spare_dirs);
		return rc;
	}
	struct exec *e = xcalloc(1, sizeof(*e));
	e->work_dir = xstrdup(work_dir);
	e->null_fd = null_fd;
	e->epoll_fd = epoll_fd;
	int lease = lease_open(work_dir);
	e->lease_fd = lease >= 0 ? fd_above_stdio(lease) : -1;
	if (lease < 0)
		log_warn("no lease file: ranks run unfenced by it dir=%s error=\"%s\"", work_dir,
		         strerror(-lease));
	e->journal = j;
	e->spare_dirs = spare_dirs;
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	e->self = xstrndup(n > 0 ? self : "anvil", n > 0 ? (size_t)n : 5);
	exec_launch_dirs_load(e);
	exec_fence_load(e);
	e->want_spares = EXEC_SPARES_DEFAULT;
	char *pool = xasprintf("%s/spare-logs", work_dir);
	int prc = logpool_start(pool, &e->logs);
	if (prc)
		log_warn("no log pool: every start makes its log dir=%s error=\"%s\"", pool,
		         strerror(-prc));
	free(pool);
	/* The group is named by node and work dir, so that agents of different
	 * clusters on one machine (tests, several `anvil up`s) never share one,
	 * while a restarted agent finds its ranks' groups again. */
	uint32_t h = 2166136261u;
	for (const char *p = work_dir; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	char *group = xasprintf("%s-%08x", node_name, h);
	const char *mode = getenv("ANVIL_CGROUP");
	enum cgroup_mode m = CGROUP_AUTO;
	if (mode && strcmp(mode, "v1") == 0)
		m = CGROUP_V1;
	else if (mode && strcmp(mode, "v2") == 0)
		m = CGROUP_V2;
	rc = mode && strcmp(mode, "off") == 0 ? -ECANCELED
	                                      : cgroup_setup(group, m, &e->cgroup_root);
	if (rc)
		log_info("running ranks without cgroups reason=\"%s\"",
		         rc == -ENOTSUP     ? "no v1 pids or freezer hierarchy, no cgroup v2"
		         : rc == -ECANCELED ? "ANVIL_CGROUP=off"
		                            : strerror(-rc));
	e->v2 = e->cgroup_root && cgroup_is_v2(e->cgroup_root);
	if (e->v2)
		log_info("cgroup v2 root=%s", e->cgroup_root);
	for (int i = 0; i < EXEC_LIMITS; i++)
		exec_limits_setup(e, group, i);
	free(group);
	const char *iso = getenv("ANVIL_DEVICE_ISOLATION");
	e->isolate = iso && *iso ? strcmp(iso, "0") != 0 : access("/dev/nvidiactl", F_OK) == 0;
	if (e->isolate)
		log_info("GPU device isolation on: ranks open only their own GPUs");
	exec_journal_load(e);
	*out = e;
	return 0;
}

void exec_free(struct exec *e)
{
	if (!e)
		return;
	exec_settle(e);
	logpool_stop(e->logs);
	for (int i = 0; i < e->nspares; i++)
		exec_spares_discard(e, &e->spares[i]);
	for (int tries = 0; e->ndoomed && tries < 20; tries++) {
		sleep_ms(5);
		exec_tidy_doomed(e);
	}
	for (size_t i = 0; i < e->ndoomed; i++)
		free(e->doomed[i]);
	free(e->doomed);
	close(e->null_fd);
	if (e->lease_fd >= 0)
		close(e->lease_fd);
	close(e->epoll_fd);
	journal_free(e->journal);
	free(e->exiting);
	free(e->spare_dirs);
	free(e->free_dirs);
	fence_free(e->fence);
	free(e->free_ranks);
	free(e->bundles);
	for (size_t i = 0; i < e->n; i++) {
		struct exec_rank *r = e->ranks[i];
		if (r->sock >= 0)
			close(r->sock); /* a shim still running a rank exits after it */
		/* A killed process leaves its cgroup a moment after the signal. */
		for (int tries = 0; (r->cgroup_left || exec_limits_left(r)) && tries < 20;
		     tries++) {
			exec_cgroup_tidy(r);
			if (r->cgroup_left || exec_limits_left(r))
				sleep_ms(5);
		}
		rank_free(r);
	}
	if (e->cgroup_root)
		rmdir(e->cgroup_root); /* only when no rank of ours is left in it */
	free(e->cgroup_root);
	for (int i = 0; i < EXEC_LIMITS; i++) {
		if (e->limit_root[i])
			rmdir(e->limit_root[i]);
		free(e->limit_root[i]);
	}
	free(e->ranks);
	free(e->work_dir);
	free(e->self);
	free(e);
}

int exec_uses_cgroups(const struct exec *e)
{
	return e->cgroup_root != NULL;
}

size_t exec_count(const struct exec *e)
{
	return e->n;
}

int exec_running(const struct exec *e)
{
	int n = 0;
	for (size_t i = 0; i < e->n; i++)
		n += e->ranks[i]->state == EXEC_RUNNING;
	return n;
}

uint64_t exec_started_total(const struct exec *e)
{
	return e->started;
}

void exec_get(const struct exec *e, size_t i, struct exec_status *out)
{
	const struct exec_rank *r = e->ranks[i];
	*out = (struct exec_status){
	        .attempt_id = r->attempt_id,
	        .rank = r->rank,
	        .job_id = r->job_id,
	        .state = r->state,
	        .stopping = r->stopping,
	        .pid = (int)r->pgid,
	        .exit_code = r->exit_code,
	        .signal = r->signal,
	        .oom_kills = r->oom_kills,
	        .error = r->error,
	        .acked = r->acked,
	};
}

int exec_find(const struct exec *e, int64_t attempt_id, int rank, struct exec_status *out)
{
	size_t i;
	if (!exec_rank_find(e, attempt_id, rank, &i))
		return ERR_NOTFOUND;
	exec_get(e, i, out);
	return 0;
}

int exec_context(const struct exec *e, size_t i, struct exec_context *out)
{
	const struct exec_rank *r = e->ranks[i];
	if (r->state != EXEC_RUNNING || !r->env || r->pgid <= 0)
		return ERR_NOTFOUND;
	*out = (struct exec_context){
	        .attempt_id = r->attempt_id,
	        .rank = r->rank,
	        .pid = (int)r->pgid,
	        .env = (const char *const *)r->env,
	        .cwd = r->cwd,
	};
	return 0;
}

uint64_t exec_context_version(const struct exec *e)
{
	return e->ctx_version;
}

int exec_described(const struct exec *e, int64_t attempt_id, int rank)
{
	const struct exec_rank *r = exec_rank_find(e, attempt_id, rank, NULL);
	return !r || r->state != EXEC_RUNNING || r->env != NULL;
}

void exec_ack(struct exec *e, int64_t attempt_id, int rank)
{
	struct exec_rank *r = exec_rank_find(e, attempt_id, rank, NULL);
	if (r && r->state != EXEC_RUNNING)
		r->acked = 1;
}

void exec_rank_drop(struct exec *e, size_t i)
{
	rank_free(e->ranks[i]);
	e->ranks[i] = e->ranks[--e->n];
}

void exec_forget(struct exec *e, int64_t attempt_id, int rank)
{
	size_t i;
	struct exec_rank *r = exec_rank_find(e, attempt_id, rank, &i);
	if (!r || r->state == EXEC_RUNNING)
		return;
	exec_journal_put(e, json_pack("{s:I,s:i,s:b}", "attempt_id", (json_int_t)r->attempt_id,
	                              "rank", r->rank, "forgotten", 1));
	exec_cgroup_tidy(r);
	for (int k = 0; k < EXEC_LIMITS; k++)
		if (r->limits[k]) { /* still busy: exec_poll finishes the job */
			exec_doom_cgroup(e, r->limits[k]);
			r->limits[k] = NULL;
		}
	reap(r);
	if (r->own && r->shim > 0) {
		e->exiting = xrealloc(e->exiting, (e->nexiting + 1) * sizeof(*e->exiting));
		e->exiting[e->nexiting++] = r->shim;
	}
	int task = r->task;
	exec_rank_drop(e, i);
	exec_launch_output_done(e, attempt_id);
	exec_fence_forget(e, attempt_id, rank, task);
}
