/* converge.c - the agent's convergence worker (agent/converge.h): which
 * profile is the target, when a run or a check is due, the status the
 * main thread reports, and WORK_DIR/profile.json. converge_run.c runs
 * the steps. */
#include "agent/converge.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "proto/wire.h"

struct converge {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int started;
	atomic_int stop; /* read by a command in flight without the lock */
	char *work_dir;
	char *file;
	struct steps_facts facts;
	int64_t interval_ms;
	int apt_simulate;
	int efd;
	/* guarded by mu */
	json_t *target;     /* the profile to converge to ({hash, name, spec}), or NULL */
	int refused;        /* the target is malformed: never run */
	int ran;            /* a run of the target has started since the agent started */
	int run_due;        /* a run with actions is due */
	int running;        /* the worker runs the steps now */
	json_t *status;     /* what to report, or NULL */
	int save_due;       /* the file should be written (or removed: no target) */
	int64_t next_check; /* monotonic ms */
};

static void changed(struct converge *c)
{
	uint64_t one = 1;
	if (write(c->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("converge: cannot signal a change error=\"%s\"", strerror(errno));
}

/* ---- the file ---- */

int converge_load(const char *work_dir, json_t **profile, json_t **status, char *err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", work_dir, CONVERGE_FILE);
	struct buf b;
	buf_init(&b);
	json_t *o = NULL;
	int rc = read_file(path, 1u << 20, &b);
	if (rc == 0)
		rc = jv_parse_object(b.data ? b.data : "", b.len, &o, err, errlen);
	buf_cleanup(&b);
	if (rc)
		return rc;
	const json_t *p = json_object_get(o, "profile"), *s = json_object_get(o, "status");
	char why[256];
	if (wire_check(p, &wire_profile, why, sizeof(why)) != 0 ||
	    wire_check(s, &wire_profile_status, why, sizeof(why)) != 0 ||
	    wire_check_each(s, "steps", &wire_profile_step, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s", path, why);
		json_decref(o);
		return ERR_INVALID;
	}
	*profile = json_incref((json_t *)p);
	*status = json_incref((json_t *)s);
	json_decref(o);
	return 0;
}

int converge_save(const char *work_dir, const json_t *profile, const json_t *status)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", work_dir, CONVERGE_FILE);
	if (!profile)
		return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
	json_t *o = json_pack("{s:O,s:O}", "profile", profile, "status", status);
	char *text = jv_dump(o);
	json_decref(o);
	int rc = write_file_atomic(path, text, strlen(text), 0644);
	free(text);
	return rc;
}

/* Writes or removes the file as the state under the lock says; the
 * worker alone calls it, so writes never cross. */
static void save(struct converge *c)
{
	pthread_mutex_lock(&c->mu);
	int due = c->save_due;
	c->save_due = 0;
	json_t *p = due && c->target && c->status ? json_deep_copy(c->target) : NULL;
	json_t *s = p ? json_deep_copy(c->status) : NULL;
	pthread_mutex_unlock(&c->mu);
	if (!due)
		return;
	int rc = converge_save(c->work_dir, p, s);
	if (rc)
		log_warn("cannot keep the profile status file=%s error=\"%s\"", c->file,
		         strerror(-rc));
	json_decref(p);
	json_decref(s);
}

/* ---- the worker ---- */

/* A run's progress, shown while its profile is still the target (a
 * refused or forgotten one must not be overwritten by an older run). */
static void on_progress(void *ctx, const json_t *status)
{
	struct converge *c = ctx;
	pthread_mutex_lock(&c->mu);
	int current =
	        c->target && strcmp(jv_str(c->target, "hash", ""), jv_str(status, "hash", "")) == 0;
	if (current) {
		json_decref(c->status);
		c->status = json_deep_copy(status);
		changed(c);
	}
	pthread_mutex_unlock(&c->mu);
}

static int same_steps(const json_t *a, const json_t *b)
{
	return a && b && strcmp(jv_str(a, "state", ""), jv_str(b, "state", "")) == 0 &&
	       strcmp(jv_str(a, "hash", ""), jv_str(b, "hash", "")) == 0 &&
	       json_equal(json_object_get(a, "steps"), json_object_get(b, "steps"));
}

static void log_result(const json_t *st, int check_only, int64_t ms)
{
	const char *state = jv_str(st, "state", "");
	const json_t *bad = NULL;
	size_t i;
	json_t *step;
	json_array_foreach (json_object_get(st, "steps"), i, step)
		if (!bad && strcmp(jv_str(step, "status", ""), "failed") == 0)
			bad = step;
	if (!bad) {
		log_info("profile %s hash=%.12s steps=%zu ms=%lld", state, jv_str(st, "hash", ""),
		         json_array_size(json_object_get(st, "steps")), (long long)ms);
		return;
	}
	log_warn("profile %s%s hash=%.12s step=\"%s\" detail=\"%.300s\"", state,
	         check_only ? " (checks)" : "", jv_str(st, "hash", ""), jv_str(bad, "name", ""),
	         jv_str(bad, "detail", ""));
}

/* One run or check of the target; the lock is held on entry and exit and
 * dropped while the steps run. */
static void run_locked(struct converge *c, int check_only)
{
	json_t *profile = json_deep_copy(c->target), *prev = json_deep_copy(c->status);
	if (!check_only) {
		c->run_due = 0;
		c->ran = 1;
	}
	c->running = 1;
	pthread_mutex_unlock(&c->mu);
	struct converge_run_opts o = {.check_only = check_only,
	                              .apt_simulate = c->apt_simulate,
	                              .prev = prev,
	                              .stop = &c->stop,
	                              .progress = on_progress,
	                              .ctx = c};
	int64_t t0 = now_ms();
	json_t *st = converge_run(profile, &c->facts, &o);
	int show = !check_only || !same_steps(st, prev);
	if (show)
		log_result(st, check_only, now_ms() - t0);
	pthread_mutex_lock(&c->mu);
	c->running = 0;
	c->next_check = now_ms() + c->interval_ms;
	/* A run for a target that went meanwhile says nothing; one stopped
	 * half-way is not kept (the next start runs again). */
	int current = c->target &&
	              strcmp(jv_str(c->target, "hash", ""), jv_str(profile, "hash", "")) == 0;
	if (current && !atomic_load(&c->stop) && show) {
		json_decref(c->status);
		c->status = json_incref(st);
		c->save_due = 1;
		changed(c);
	}
	json_decref(st);
	json_decref(profile);
	json_decref(prev);
}

/* Checks run between runs, after the target's first run since the
 * start, only while the node is converged or drifted. */
static int check_armed(const struct converge *c)
{
	const char *state = jv_str(c->status, "state", "");
	return c->target && !c->refused && c->ran && c->interval_ms > 0 &&
	       (strcmp(state, "converged") == 0 || strcmp(state, "drifted") == 0);
}

static int check_due(const struct converge *c)
{
	return check_armed(c) && now_ms() >= c->next_check;
}

static void wait_locked(struct converge *c)
{
	int64_t ms = check_armed(c) ? c->next_check - now_ms() : 3600000;
	if (ms <= 0)
		ms = 1;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

static void *work(void *arg)
{
	struct converge *c = arg;
	pthread_mutex_lock(&c->mu);
	while (!atomic_load(&c->stop)) {
		if (c->save_due) {
			pthread_mutex_unlock(&c->mu);
			save(c);
			pthread_mutex_lock(&c->mu);
		} else if (c->run_due && c->target && !c->refused) {
			run_locked(c, 0);
		} else if (check_due(c)) {
			run_locked(c, 1);
		} else {
			wait_locked(c);
		}
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* ---- the main thread's side ---- */

static void load(struct converge *c)
{
	char err[512];
	json_t *p = NULL, *s = NULL;
	int rc = converge_load(c->work_dir, &p, &s, err, sizeof(err));
	if (rc == -ENOENT)
		return;
	if (rc) {
		log_warn("ignoring the profile status file: %s",
		         rc == ERR_INVALID ? err : strerror(-rc));
		return;
	}
	struct steps *steps = NULL;
	c->refused = steps_from_profile(json_object_get(p, "spec"), &steps, err, sizeof(err)) != 0;
	steps_free(steps);
	c->target = p;
	c->status = s;
	log_info("profile status from file=%s hash=%.12s state=%s", c->file, jv_str(p, "hash", ""),
	         jv_str(s, "state", ""));
	changed(c);
}

int converge_start(const struct converge_config *cfg, struct converge **out)
{
	struct converge *c = xcalloc(1, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	c->work_dir = xstrdup(cfg->work_dir);
	c->file = xasprintf("%s/%s", cfg->work_dir, CONVERGE_FILE);
	c->facts = *cfg->facts;
	c->interval_ms = cfg->check_interval_ms;
	c->apt_simulate = cfg->apt_simulate;
	c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->efd < 0) {
		int rc = -errno;
		converge_stop(c);
		return rc;
	}
	load(c);
	int rc = -pthread_create(&c->thread, NULL, work, c);
	if (rc) {
		converge_stop(c);
		return rc;
	}
	c->started = 1;
	*out = c;
	return 0;
}

void converge_stop(struct converge *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->stop, 1);
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (c->started)
		pthread_join(c->thread, NULL);
	if (c->efd >= 0)
		close(c->efd);
	json_decref(c->target);
	json_decref(c->status);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c->work_dir);
	free(c->file);
	free(c);
}

/* Lock held. The node has no profile now. */
static void forget(struct converge *c)
{
	if (!c->target)
		return;
	log_info("the server sends no profile now: forgetting hash=%.12s",
	         jv_str(c->target, "hash", ""));
	json_decref(c->target);
	json_decref(c->status);
	c->target = c->status = NULL;
	c->refused = c->run_due = 0;
	c->save_due = 1;
	changed(c);
}

/* Lock held. A new target; refused (with the reason logged and reported)
 * when it is malformed. */
static void take(struct converge *c, const json_t *profile)
{
	char why[512];
	const char *hash = jv_str(profile, "hash", "");
	json_t *known = wire_known(profile, &wire_profile);
	struct steps *s = NULL;
	int rc = wire_check(known, &wire_profile, why, sizeof(why));
	if (rc == 0)
		rc = steps_from_profile(json_object_get(known, "spec"), &s, why, sizeof(why));
	steps_free(s);
	json_decref(c->target);
	c->target = json_is_string(json_object_get(profile, "hash"))
	                    ? json_incref(known)
	                    : json_pack("{s:s}", "hash", "invalid");
	json_decref(known);
	c->refused = rc != 0;
	c->ran = 1; /* seen since the start: a refused one counts too */
	c->run_due = !c->refused;
	if (c->refused) {
		log_warn("profile refused hash=%.12s name=%s reason=\"%s\"", hash,
		         jv_str(profile, "name", ""), why);
		json_decref(c->status);
		c->status = converge_refused(hash, why);
		c->save_due = 1;
		changed(c);
	} else {
		log_info("profile to converge to hash=%.12s name=%s", hash,
		         jv_str(profile, "name", ""));
	}
	pthread_cond_signal(&c->cv);
}

void converge_set_profile(struct converge *c, const json_t *profile)
{
	pthread_mutex_lock(&c->mu);
	if (!json_is_object(profile)) {
		forget(c);
	} else {
		const char *hash = jv_str(profile, "hash", "invalid");
		int same = c->target && strcmp(jv_str(c->target, "hash", ""), hash) == 0;
		/* The first profile after a start runs whatever its hash (after a
		 * reboot mounts and kernel settings are gone); later only a new
		 * one. A copy: the answer goes when this returns. */
		if (!same || !c->ran) {
			json_t *copy = json_deep_copy(profile);
			take(c, copy);
			json_decref(copy);
		}
	}
	int save_due = c->save_due;
	if (save_due)
		pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

int converge_rerun(struct converge *c, const char *hash, char *err, size_t errlen)
{
	int rc = 0;
	pthread_mutex_lock(&c->mu);
	const char *have = c->target ? jv_str(c->target, "hash", "") : NULL;
	if (!have) {
		rc = ERR_NOTFOUND;
		snprintf(err, errlen, "this node has no profile: its sync answers carry none");
	} else if (hash && strcmp(hash, have) != 0) {
		rc = ERR_CONFLICT;
		snprintf(err, errlen, "hash: '%.64s': this node's profile is %.64s", hash, have);
	} else if (c->refused) {
		rc = ERR_CONFLICT;
		snprintf(err, errlen, "the profile %.64s was refused: %s", have,
		         jv_str(json_array_get(json_object_get(c->status, "steps"), 0), "detail",
		                "malformed"));
	} else {
		c->run_due = 1;
		log_info("profile run requested hash=%.12s", have);
		pthread_cond_signal(&c->cv);
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int converge_fd(const struct converge *c)
{
	return c->efd;
}

json_t *converge_status(struct converge *c)
{
	uint64_t drain;
	if (read(c->efd, &drain, sizeof(drain)) < 0 && errno != EAGAIN)
		log_debug("converge: eventfd read error=\"%s\"", strerror(errno));
	pthread_mutex_lock(&c->mu);
	json_t *s = c->status ? json_deep_copy(c->status) : NULL;
	pthread_mutex_unlock(&c->mu);
	return s;
}

json_t *converge_show(struct converge *c)
{
	pthread_mutex_lock(&c->mu);
	json_t *p = c->target ? json_pack("{s:s,s:s}", "hash", jv_str(c->target, "hash", ""),
	                                  "name", jv_str(c->target, "name", ""))
	                      : json_null();
	json_t *o =
	        json_pack("{s:o,s:o,s:I,s:b}", "profile", p, "status",
	                  c->status ? json_deep_copy(c->status) : json_null(), "check_interval_ms",
	                  (json_int_t)c->interval_ms, "running", c->running);
	pthread_mutex_unlock(&c->mu);
	return o;
}
