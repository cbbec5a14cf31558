/* exec_limits.c - the ranks' CPU, memory and GPU device limits (exec.h,
 * "Limits"): a cgroup per rank in each limit's v1 hierarchy, or on cgroup
 * v2 the limits written into the rank's own cgroup.
 *
 * Each is its own hierarchy's business: one that cannot be had is said
 * once and the rank runs without it.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/exec_int.h"
#include "base/log.h"
#include "base/mem.h"

static const char *const limit_controllers[EXEC_LIMITS] = {"cpu", "memory", "devices"};

/* 1 while a final rank's limits' cgroups are still to be removed. */
int exec_limits_left(const struct exec_rank *r)
{
	for (int i = 0; i < EXEC_LIMITS && r->state != EXEC_RUNNING; i++)
		if (r->limits[i])
			return 1;
	return 0;
}

/* How many of the rank's processes the kernel killed for passing its
 * memory limit, from whichever of its cgroups is a memory one (a v1
 * hierarchy mounted with others shares a directory; on v2, its own). */
int exec_limits_oom(const struct exec_rank *r)
{
	int most = 0;
	for (int i = 0; i < EXEC_LIMITS + 1; i++) {
		const char *path = i < EXEC_LIMITS    ? r->limits[i]
		                   : r->inline_limits ? r->cgroup
		                                      : NULL;
		int n = path ? cgroup_oom_kills(path) : 0;
		if (n > most)
			most = n;
	}
	return most;
}

/* A final rank's limits' cgroups go, and whatever it left in them. */
void exec_limits_tidy(struct exec_rank *r)
{
	for (int i = 0; i < EXEC_LIMITS && r->state != EXEC_RUNNING; i++) {
		if (!r->limits[i])
			continue;
		cgroup_signal(r->limits[i], SIGKILL, 0);
		if (cgroup_remove(r->limits[i]) == 0) {
			free(r->limits[i]);
			r->limits[i] = NULL;
		}
	}
}

static const char *limit_why(int err, int err2)
{
	if (err == -ENOTSUP && err2 == -ENOTSUP)
		return "the agent's cgroup v2 was not given that controller (cgroup.controllers), "
		       "and no v1 hierarchy of it is mounted";
	if (err == -ENOTSUP && err2)
		return strerror(-err2);
	if (err == -ENOTSUP)
		return "no v1 hierarchy of that controller is mounted";
	if (err == -EXDEV)
		return "the hierarchy is shared with the ranks' pids or freezer one";
	return strerror(-err);
}

void exec_limits_setup(struct exec *e, const char *group, int i)
{
	if (e->v2) {
		/* In the rank's own cgroup: devices by an eBPF program, which
		 * needs no controller; cpu and memory where delegated. */
		int rc2 = i == EXEC_LIMIT_DEVICES
		                  ? 0
		                  : cgroup_v2_delegate(e->cgroup_root, limit_controllers[i]);
		if (rc2 == 0) {
			e->limit_inline[i] = 1;
			return;
		}
		e->limit_err2[i] = rc2; /* a hybrid host: try its v1 hierarchy */
	}
	int rc = cgroup_setup_controller(limit_controllers[i], group, &e->limit_root[i]);
	if (rc == 0 && e->cgroup_root && strcmp(e->limit_root[i], e->cgroup_root) == 0) {
		/* Its rank cgroups would be the spares' renamed ones: not here. */
		free(e->limit_root[i]);
		e->limit_root[i] = NULL;
		rc = -EXDEV;
	}
	e->limit_err[i] = rc;
}

static unsigned limits_wanted(const struct exec *e, const struct exec_spec *spec)
{
	unsigned want = 0;
	if (spec->cpu_millis > 0)
		want |= 1u << EXEC_LIMIT_CPU;
	if (spec->memory_bytes > 0)
		want |= 1u << EXEC_LIMIT_MEMORY;
	if (e->isolate && spec->ngpu_minors >= 0)
		want |= 1u << EXEC_LIMIT_DEVICES;
	return want;
}

static int limit_write(int i, const char *path, const struct exec_spec *spec)
{
	switch (i) {
	case EXEC_LIMIT_CPU: return cgroup_limit_cpu(path, spec->cpu_millis);
	case EXEC_LIMIT_MEMORY: return cgroup_limit_memory(path, spec->memory_bytes);
	default: return cgroup_limit_gpus(path, spec->gpu_minors, spec->ngpu_minors);
	}
}

/* v2: the limits written into the rank's own cgroup, once it exists and
 * before the command runs (exec_spares_launch, launch). Such a cgroup is never
 * a spare's again: its limits would stay with it. */
void exec_limits_inline(struct exec *e, struct exec_rank *r, const struct exec_spec *spec)
{
	unsigned want = spec ? limits_wanted(e, spec) : 0;
	for (int i = 0; r->cgroup && i < EXEC_LIMITS; i++) {
		if (!(want & (1u << i)) || !e->limit_inline[i])
			continue;
		r->inline_limits = 1;
		int rc = limit_write(i, r->cgroup, spec);
		if (rc)
			log_warn("rank runs without its %s limit attempt=%lld rank=%d error=\"%s\"",
			         limit_controllers[i], (long long)r->attempt_id, r->rank,
			         strerror(-rc));
	}
}

/* ROOT_i/<attempt>-<rank>, made and written; the command joins it through
 * la's join_fds. Hierarchies mounted together share one directory: made
 * and joined once, written for each. */
static int limit_one(struct exec *e, struct exec_rank *r, int i, const struct exec_spec *spec,
                     struct launch *la)
{
	char *path = xasprintf("%s/%lld-%d", e->limit_root[i], (long long)r->attempt_id, r->rank);
	for (int k = 0; k < i; k++)
		if (r->limits[k] && strcmp(r->limits[k], path) == 0) {
			free(path);
			return limit_write(i, r->limits[k], spec);
		}
	int rc = mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
	int fd = rc ? rc : cgroup_open_procs(path);
	if (fd >= 0 && (rc = limit_write(i, path, spec)) == 0) {
		la->l.join_fds[la->l.njoin++] = fd;
		r->limits[i] = path;
		return 0;
	}
	if (fd >= 0)
		close(fd);
	rc = rc ? rc : fd;
	cgroup_remove(path);
	free(path);
	return rc;
}

/* The rank's limits' cgroups, before the launch (after launch_prepare,
 * which sets la->l anew). */
void exec_limits_prepare(struct exec *e, struct exec_rank *r, const struct exec_spec *spec,
                         struct launch *la)
{
	unsigned want = limits_wanted(e, spec);
	if (e->isolate && spec->ngpu_minors < 0)
		log_warn("rank not isolated from other GPUs: its GPUs' device minors are unknown "
		         "attempt=%lld rank=%d",
		         (long long)r->attempt_id, r->rank);
	for (int i = 0; want && i < EXEC_LIMITS; i++) {
		if (!(want & (1u << i)) || e->limit_inline[i])
			continue;
		if (!e->limit_root[i]) {
			if (!e->limit_logged[i])
				log_warn("ranks run without their %s limits reason=\"%s\"",
				         limit_controllers[i],
				         limit_why(e->limit_err[i], e->limit_err2[i]));
			e->limit_logged[i] = 1;
			continue;
		}
		int rc = limit_one(e, r, i, spec, la);
		if (rc)
			log_warn("rank runs without its %s limit attempt=%lld rank=%d error=\"%s\"",
			         limit_controllers[i], (long long)r->attempt_id, r->rank,
			         strerror(-rc));
	}
}

const char *exec_limit_root(const struct exec *e, enum exec_limit which)
{
	return which >= 0 && which < EXEC_LIMITS ? e->limit_root[which] : NULL;
}

void exec_set_device_isolation(struct exec *e, int on)
{
	e->isolate = on != 0;
}

int exec_device_isolation(const struct exec *e)
{
	return e->isolate;
}
