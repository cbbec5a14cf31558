/* exec_spares.c - the spare-shim pool (exec.h, "Spare shims"): shims
 * forked ahead of time, each in a spare cgroup, used by a rank's start,
 * taken back when a rank ends, and kept at the wanted number.
 *
 * A spare-* cgroup only ever holds a spare shim: a spare's cgroup is
 * renamed to its rank's before the launch is sent. So whatever is left in
 * one (after a crash, say) can be killed and the cgroup removed
 * (exec_doom_cgroup, in exec.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/exec_int.h"
#include "agent/shim.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define SPARE_RETRY_MS 1000 /* after a spare could not be made */

/* The rank's shim from the oldest spare: its cgroup is renamed to the
 * rank's (the spare is already in it, so the command is too, by fork),
 * then the launch is sent. 0; -ECHILD when the spare took the launch and
 * died (the rank cannot be known to run); another code when no spare was
 * used and nothing started. */
int exec_spares_launch(struct exec *e, struct exec_rank *r, struct launch *la)
{
	if (e->nspares == 0 || !shim_spare_fits(&la->l))
		return -EAGAIN;
	struct spare s = e->spares[0];
	if (s.cgroup && rename(s.cgroup, r->cgroup) < 0) {
		int rc = -errno; /* e.g. a stale cgroup of that name: keep the spare */
		log_debug("spare not used attempt=%lld rank=%d error=\"%s\"",
		          (long long)r->attempt_id, r->rank, strerror(-rc));
		return rc;
	}
	memmove(&e->spares[0], &e->spares[1], (size_t)--e->nspares * sizeof(e->spares[0]));
	free(s.cgroup);
	s.cgroup = NULL; /* it is the rank's now */
	exec_limits_inline(e, r, la->spec);
	/* In a batch the pid is read later (exec_settle): this spare forks the
	 * command while the next rank's launch is prepared. */
	int rc = shim_spare_send(&s.shim, &la->l);
	if (rc == 0 && !e->batch)
		rc = shim_spare_started(&s.shim, &r->pgid);
	if (rc == 0) {
		exec_rank_watch(e, r, s.shim);
		r->spare = 1;
		r->launching = e->batch;
		e->nlaunching += (size_t)e->batch;
		e->started_spare++;
		return 0;
	}
	log_warn("spare shim failed attempt=%lld rank=%d pid=%d error=\"%s\"",
	         (long long)r->attempt_id, r->rank, (int)s.shim.pid, strerror(-rc));
	exec_spares_discard(e, &s);
	return rc == -ECHILD ? rc : -EAGAIN;
}

/* Ends a spare that is out of the pool: it exits on EOF, SIGKILL makes sure. */
void exec_spares_discard(struct exec *e, struct spare *s)
{
	shim_close(&s->shim);
	if (s->shim.pid > 0) {
		kill(s->shim.pid, SIGKILL);
		while (waitpid(s->shim.pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (s->cgroup)
		exec_doom_cgroup(e, s->cgroup);
	s->cgroup = NULL;
	s->shim.pid = 0;
}

/* Forks one spare into a fresh cgroup of its own. */
static int spare_add(struct exec *e)
{
	struct spare s = {.shim = {.pid = 0, .sock = -1}};
	int fd = -1, rc = 0;
	if (e->cgroup_root) {
		s.cgroup = xasprintf("%s/spare-%d-%llu", e->cgroup_root, (int)getpid(),
		                     (unsigned long long)++e->spare_seq);
		if (mkdir(s.cgroup, 0755) < 0) {
			rc = -errno;
			free(s.cgroup);
			return rc;
		}
		if ((fd = rc = cgroup_open_procs(s.cgroup)) < 0)
			goto out;
	}
	rc = shim_spare_fork(fd, e->null_fd, e->fence != NULL, &s.shim);
	s.since = now_ms();
	if (rc == 0) {
		e->spares[e->nspares++] = s;
		s.cgroup = NULL;
	}
out:
	if (fd >= 0)
		close(fd);
	if (s.cgroup) {
		cgroup_remove(s.cgroup);
		free(s.cgroup);
	}
	return rc;
}

/* Pool shims running a rank now: each goes back to the pool when its rank
 * ends (exec_spares_reuse), so it counts toward the number. Making up for them
 * at once would fork and attach a new shim at every start and end an
 * extra one later: cgroup v1 attaches that cost ~10 ms of kernel time
 * each, in the way of the next start. */
int exec_spares_out(const struct exec *e)
{
	int n = 0;
	for (size_t i = 0; i < e->n; i++)
		n += e->ranks[i]->spare && e->ranks[i]->shim > 0 &&
		     e->ranks[i]->state == EXEC_RUNNING;
	return n;
}

/* Drops spares that died, then makes up the number. */
void exec_spares_refill(struct exec *e, int64_t now)
{
	for (int i = e->nspares; i-- > 0;) {
		struct spare *s = &e->spares[i];
		if (waitpid(s->shim.pid, NULL, WNOHANG) != s->shim.pid)
			continue;
		log_warn("spare shim ended by itself pid=%d", (int)s->shim.pid);
		s->shim.pid = 0;
		struct spare gone = *s;
		memmove(s, s + 1, (size_t)(--e->nspares - i) * sizeof(*s));
		exec_spares_discard(e, &gone);
	}
	/* Extras: at once when the number was lowered, else the oldest once
	 * it has idled long enough (it would be the next one used). */
	while (e->nspares > e->want_spares &&
	       (e->trim || now >= e->spares[0].since + EXEC_SPARE_IDLE_MS)) {
		struct spare gone = e->spares[0];
		memmove(&e->spares[0], &e->spares[1], (size_t)--e->nspares * sizeof(e->spares[0]));
		exec_spares_discard(e, &gone);
	}
	e->trim = 0;
	int out = exec_spares_out(e);
	if (e->nspares + out >= e->want_spares || now < e->spare_retry_at)
		return;
	while (e->nspares + out < e->want_spares) {
		int rc = spare_add(e);
		if (rc) {
			log_warn("cannot make a spare shim, ranks start without one "
			         "retry_ms=%d error=\"%s\"",
			         SPARE_RETRY_MS, strerror(-rc));
			e->spare_retry_at = now + SPARE_RETRY_MS;
			return;
		}
	}
}

void exec_set_spares(struct exec *e, int n)
{
	e->want_spares = n < 0 ? 0 : n > EXEC_SPARES_MAX ? EXEC_SPARES_MAX : n;
	e->spare_retry_at = 0;
	e->trim = 1;
}

int exec_spares(const struct exec *e, int *pids, int max)
{
	for (int i = 0; i < e->nspares && i < max; i++)
		pids[i] = (int)e->spares[i].shim.pid;
	return e->nspares;
}

uint64_t exec_started_spare_total(const struct exec *e)
{
	return e->started_spare;
}

/* A finished rank's shim, waiting for a launch in the rank's cgroup with
 * nothing else left in it, becomes a spare again: the cgroup is renamed
 * back to a spare's. 1 when it did. */
int exec_spares_reuse(struct exec *e, struct exec_rank *r)
{
	/* Up to the maximum: a burst ends ranks as fast as it starts them; the
	 * extras end once idle for EXEC_SPARE_IDLE_MS. */
	if (!r->spare || e->want_spares == 0 || e->nspares >= EXEC_SPARES_MAX || r->shim <= 0 ||
	    r->inline_limits)
		return 0;
	struct spare s = {.shim = {.pid = r->shim, .sock = r->sock}, .since = now_ms()};
	if (r->cgroup) {
		if (cgroup_signal(r->cgroup, SIGKILL, r->shim) != 0)
			return 0; /* leftovers: they die, the shim goes with its cgroup */
		s.cgroup = xasprintf("%s/spare-%d-%llu", e->cgroup_root, (int)getpid(),
		                     (unsigned long long)++e->spare_seq);
		if (rename(r->cgroup, s.cgroup) < 0) {
			free(s.cgroup);
			return 0;
		}
		free(r->cgroup);
		r->cgroup = NULL;
	}
	epoll_ctl(e->epoll_fd, EPOLL_CTL_DEL, r->sock, NULL);
	e->spares[e->nspares++] = s;
	r->sock = -1;
	r->shim = 0;
	r->own = 0;
	e->reused++;
	return 1;
}

uint64_t exec_reused_total(const struct exec *e)
{
	return e->reused;
}
