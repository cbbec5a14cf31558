#include "agent/gpuwatch.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "gpu/dcgm.h"
#include "gpu/health.h"
#include "proto/wire.h"

#define CHECK_PROGRAM_TIMEOUT_MS 120000
#define EVENT_WAIT_MS            100

extern char **environ;

enum gw_state { GW_HEALTHY, GW_QUARANTINED, GW_LOST };
static const char *const state_names[] = {"healthy", "quarantined", "lost"};

struct gw_gpu {
	struct gpu_info info;
	struct gpu_sample sample;
	int have_sample;
	enum gw_state state;
	char code[32];
	char reason[200];
	int64_t since_ms;
	int64_t last_xid;
	int64_t faults[GPU_SCOPE_COUNT];
	int64_t next_reset_ms; /* monotonic; 0: as soon as it is idle */
	int64_t job_id;        /* 0: idle */
	char job_name[96];
	/* Idle time (gpuwatch_idle_ms): whether the last sample read the
	 * utilization, whether it was at GPUWATCH_IDLE_PCT or more, and since
	 * when (monotonic) the samples have read under it. */
	int util_known;
	int busy;
	int64_t idle_since;
};

struct finding {
	int64_t seq;
	int64_t wall_ms;
	int counted; /* 0: a consequence of a fault already acted on (same GPU, out already) */
	struct gpu_finding f;
};

struct gpuwatch {
	pthread_mutex_t mu;
	pthread_t thread;
	int started;
	int stop;
	int kick; /* sample now */
	struct gpu_backend *b;
	char *state_path;
	char *node_name; /* the Hostname label (dcgm.h) */
	char *check_program;
	int64_t sample_ms;
	struct gpu_health_config hc;
	int n;
	struct gw_gpu g[GPU_MAX];
	char node_code[32];
	char node_reason[256];
	int64_t node_since_ms;
	struct finding findings[GPUWATCH_FINDINGS]; /* ring, oldest at head */
	int nfindings, head;
	int64_t next_seq;
	int efd;
};

/* ---- the report and its persistence (lock held) ---- */

static void changed(struct gpuwatch *w)
{
	uint64_t one = 1;
	if (write(w->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("gpuwatch: cannot signal a change error=\"%s\"", strerror(errno));
}

static void save(struct gpuwatch *w)
{
	json_t *q = json_array();
	for (int i = 0; i < w->n; i++) {
		const struct gw_gpu *g = &w->g[i];
		if (g->state == GW_QUARANTINED)
			json_array_append_new(q,
			                      json_pack("{s:s,s:s,s:s,s:I}", "uuid", g->info.uuid,
			                                "code", g->code, "reason", g->reason,
			                                "since_ms", (json_int_t)g->since_ms));
	}
	json_t *o = json_pack("{s:o}", "quarantined", q);
	char *text = jv_dump(o);
	json_decref(o);
	int rc = write_file_atomic(w->state_path, text, strlen(text), 0644);
	if (rc)
		log_warn("gpuwatch: cannot save file=%s error=\"%s\"", w->state_path,
		         strerror(-rc));
	free(text);
}

/* Quarantines from an earlier agent, matched by UUID. */
static void load(struct gpuwatch *w)
{
	struct buf b;
	buf_init(&b);
	json_t *o = NULL;
	if (read_file(w->state_path, 1 << 20, &b) == 0)
		o = json_loadb(b.data, b.len, 0, NULL);
	buf_cleanup(&b);
	size_t k;
	json_t *e;
	json_array_foreach (json_object_get(o, "quarantined"), k, e) {
		for (int i = 0; i < w->n; i++) {
			struct gw_gpu *g = &w->g[i];
			if (strcmp(g->info.uuid, jv_str(e, "uuid", "")) != 0)
				continue;
			g->state = GW_QUARANTINED;
			snprintf(g->code, sizeof(g->code), "%s", jv_str(e, "code", "unknown"));
			text_printf(g->reason, sizeof(g->reason), "%s", jv_str(e, "reason", ""));
			g->since_ms = jv_int(e, "since_ms", wall_ms());
			log_info("gpu still quarantined gpu=%d uuid=%s reason=\"%s\"", i,
			         g->info.uuid, g->reason);
		}
	}
	json_decref(o);
}

static void set_state(struct gpuwatch *w, struct gw_gpu *g, enum gw_state s, const char *code,
                      const char *reason)
{
	g->state = s;
	snprintf(g->code, sizeof(g->code), "%s", code);
	text_printf(g->reason, sizeof(g->reason), "%s", reason);
	g->since_ms = wall_ms();
	g->next_reset_ms = 0;
	save(w);
}

/* Records a finding and applies it to the GPU's and the node's health. */
static void apply(struct gpuwatch *w, const struct gpu_finding *f)
{
	struct finding *slot;
	if (w->nfindings < GPUWATCH_FINDINGS) {
		slot = &w->findings[(w->head + w->nfindings++) % GPUWATCH_FINDINGS];
	} else {
		slot = &w->findings[w->head];
		w->head = (w->head + 1) % GPUWATCH_FINDINGS;
	}
	slot->seq = w->next_seq++;
	slot->wall_ms = wall_ms();
	slot->f = *f;
	struct gw_gpu *g = f->index >= 0 && f->index < w->n ? &w->g[f->index] : NULL;
	/* One XID 48 also shows as new uncorrectable errors and a recovery
	 * action in the next sample: evidence, recorded, but one fault. */
	slot->counted = !(g && f->scope == GPU_SCOPE_GPU && g->state != GW_HEALTHY);
	if (g && slot->counted)
		g->faults[f->scope]++;
	log_warn("gpu fault gpu=%d scope=%s code=%s reason=\"%s\"", f->index,
	         gpu_scope_name(f->scope), f->code, f->reason);
	if (g && strcmp(f->code, "gpu-lost") == 0 && g->state != GW_LOST)
		set_state(w, g, GW_LOST, f->code, f->reason);
	else if (g && f->scope >= GPU_SCOPE_GPU && g->state == GW_HEALTHY)
		set_state(w, g, GW_QUARANTINED, f->code, f->reason);
	if (f->scope == GPU_SCOPE_NODE && !w->node_reason[0]) {
		snprintf(w->node_code, sizeof(w->node_code), "%s", f->code);
		text_printf(w->node_reason, sizeof(w->node_reason), "%s", f->reason);
		w->node_since_ms = wall_ms();
	}
	changed(w);
}

/* A reason or code as JSON: never NULL, as wire_set() wants (a reason
 * that quotes a device's bytes may not be UTF-8). */
static json_t *text(const char *s)
{
	json_t *v = json_string(s);
	if (!v) {
		char *fixed = jv_utf8_fix(s);
		v = json_string(fixed ? fixed : "");
		free(fixed);
	}
	return v;
}

/* Lock held. The health report's "gpus" (proto/wire.h, wire_gpu_health). */
static json_t *gpus_health(const struct gpuwatch *w)
{
	const struct wire_record *r = &wire_gpu_health;
	json_t *gpus = json_array();
	for (int i = 0; i < w->n; i++) {
		const struct gw_gpu *g = &w->g[i];
		json_t *o = json_object();
		wire_set(o, r, "index", json_integer(i));
		wire_set(o, r, "state", json_string(state_names[g->state]));
		if (g->state != GW_HEALTHY) {
			wire_set(o, r, "code", text(g->code));
			wire_set(o, r, "reason", text(g->reason));
			wire_set(o, r, "since_ms", json_integer(g->since_ms));
		}
		json_array_append_new(gpus, o);
	}
	return gpus;
}

/* Lock held. Its "findings", oldest first (wire_finding). */
static json_t *findings(const struct gpuwatch *w)
{
	const struct wire_record *r = &wire_finding;
	json_t *a = json_array();
	for (int k = 0; k < w->nfindings; k++) {
		const struct finding *f = &w->findings[(w->head + k) % GPUWATCH_FINDINGS];
		json_t *o = json_object();
		wire_set(o, r, "seq", json_integer(f->seq));
		wire_set(o, r, "gpu", json_integer(f->f.index));
		wire_set(o, r, "scope", json_string(gpu_scope_name(f->f.scope)));
		wire_set(o, r, "code", text(f->f.code));
		wire_set(o, r, "reason", text(f->f.reason));
		wire_set(o, r, "wall_ms", json_integer(f->wall_ms));
		wire_set(o, r, "counted", json_boolean(f->counted));
		json_array_append_new(a, o);
	}
	return a;
}

json_t *gpuwatch_report(struct gpuwatch *w)
{
	uint64_t drain;
	if (read(w->efd, &drain, sizeof(drain)) < 0 && errno != EAGAIN)
		log_debug("gpuwatch: eventfd read error=\"%s\"", strerror(errno));
	const struct wire_record *r = &wire_health;
	json_t *o = json_object();
	pthread_mutex_lock(&w->mu);
	wire_set(o, r, "gpus", gpus_health(w));
	json_t *node = json_null();
	if (w->node_reason[0]) {
		node = json_object();
		wire_set(node, &wire_node_fault, "code", text(w->node_code));
		wire_set(node, &wire_node_fault, "reason", text(w->node_reason));
		wire_set(node, &wire_node_fault, "since_ms", json_integer(w->node_since_ms));
	}
	wire_set(o, r, "node", node);
	wire_set(o, r, "findings", findings(w));
	pthread_mutex_unlock(&w->mu);
	return o;
}

/* ---- the thread ---- */

/* Idle time from one sample (lock held). */
static void track_idle(struct gpuwatch *w, struct gw_gpu *g, const struct gpu_sample *s)
{
	int known = !s->lost && s->util_gpu_pct >= 0;
	int busy = known && s->util_gpu_pct >= GPUWATCH_IDLE_PCT;
	if (known && !busy && (!g->util_known || g->busy))
		g->idle_since = now_ms(); /* idle from the first sample that says so */
	/* A rank's GPU at work again: the next sync goes out now, as the
	 * server counts a session's idle time on from the last report until
	 * it hears otherwise (server/ranks.c). */
	if (busy && g->util_known && !g->busy && g->job_id)
		changed(w);
	g->util_known = known;
	g->busy = busy;
}

/* Samples GPU i outside the lock and judges it against the last sample. */
static void sample_one(struct gpuwatch *w, int i)
{
	struct gpu_sample s;
	if (gpu_sample(w->b, i, &s) != 0)
		return;
	struct gpu_finding f[GPU_HEALTH_MAX_FINDINGS];
	pthread_mutex_lock(&w->mu);
	struct gw_gpu *g = &w->g[i];
	/* A lost previous sample is passed too: health.c reports gpu-lost only
	 * when it appears, and treats a GPU back from lost as new. */
	const struct gpu_sample *prev = g->have_sample ? &g->sample : NULL;
	int n = gpu_health_judge_sample(i, prev, &s, &w->hc, f, GPU_HEALTH_MAX_FINDINGS);
	for (int k = 0; k < n; k++)
		apply(w, &f[k]);
	g->sample = s;
	g->have_sample = 1;
	track_idle(w, g, &s);
	pthread_mutex_unlock(&w->mu);
}

static void judge_events(struct gpuwatch *w, const struct gpu_event *ev, int n)
{
	for (int k = 0; k < n; k++) {
		struct gpu_sample now;
		int has = ev[k].index >= 0 && ev[k].index < w->n &&
		          gpu_sample(w->b, ev[k].index, &now) == 0;
		struct gpu_finding f;
		int found = gpu_health_judge_event(&ev[k], has ? &now : NULL, &f);
		pthread_mutex_lock(&w->mu);
		if (ev[k].index >= 0 && ev[k].index < w->n)
			w->g[ev[k].index].last_xid = (int64_t)ev[k].xid;
		if (found == 1)
			apply(w, &f);
		else
			changed(w); /* the XID still shows in the metrics */
		pthread_mutex_unlock(&w->mu);
	}
}

/* Resets idle quarantined GPUs; back in service after a clean check. */
static void try_resets(struct gpuwatch *w)
{
	for (int i = 0; i < w->n; i++) {
		pthread_mutex_lock(&w->mu);
		struct gw_gpu *g = &w->g[i];
		int due = g->state == GW_QUARANTINED && g->job_id == 0 &&
		          now_ms() >= g->next_reset_ms;
		pthread_mutex_unlock(&w->mu);
		if (!due)
			continue;
		log_info("gpu reset started gpu=%d uuid=%s", i, g->info.uuid);
		char err[256] = "", why[200] = "";
		int rc = gpu_reset(w->b, i, err, sizeof(err));
		struct gpu_sample s;
		int clean = rc == 0 && gpu_sample(w->b, i, &s) == 0 &&
		            gpu_health_is_clean(&s, why, sizeof(why));
		pthread_mutex_lock(&w->mu);
		if (clean && g->state == GW_QUARANTINED) {
			log_info("gpu reset and clean gpu=%d uuid=%s was=\"%s\"", i, g->info.uuid,
			         g->reason);
			set_state(w, g, GW_HEALTHY, "", "");
			g->sample = s;
			g->have_sample = 1;
			changed(w);
		} else if (g->state == GW_QUARANTINED) {
			log_warn("gpu stays quarantined gpu=%d reset=\"%s\" check=\"%s\"", i,
			         rc ? err : "ok", rc ? "not run" : why);
			g->next_reset_ms = now_ms() + GPUWATCH_RESET_RETRY_MS;
		}
		pthread_mutex_unlock(&w->mu);
	}
}

static void *watch(void *arg)
{
	struct gpuwatch *w = arg;
	int64_t next_sample = 0;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		int stop = w->stop, kick = w->kick;
		w->kick = 0;
		pthread_mutex_unlock(&w->mu);
		if (stop)
			break;
		if (kick || now_ms() >= next_sample) {
			for (int i = 0; i < w->n; i++)
				sample_one(w, i);
			next_sample = now_ms() + w->sample_ms;
		}
		try_resets(w);
		struct gpu_event ev[16];
		int n = gpu_events(w->b, EVENT_WAIT_MS, ev, 16);
		if (n > 0)
			judge_events(w, ev, n);
		else if (n < 0) /* no event source: just wait */
			nanosleep(&(struct timespec){0, EVENT_WAIT_MS * 1000000L}, NULL);
	}
	return NULL;
}

int gpuwatch_start(const struct gpuwatch_config *cfg, struct gpuwatch **out)
{
	struct gpuwatch *w = xcalloc(1, sizeof(*w));
	pthread_mutex_init(&w->mu, NULL);
	w->b = cfg->gpus;
	w->state_path = xasprintf("%s/gpu-health.json", cfg->work_dir);
	w->node_name = xstrdup(cfg->node_name ? cfg->node_name : "");
	w->check_program = cfg->check_program ? xstrdup(cfg->check_program) : NULL;
	w->sample_ms = cfg->sample_ms > 0 ? cfg->sample_ms : GPUWATCH_SAMPLE_MS;
	gpu_health_config_default(&w->hc);
	w->n = gpu_count(w->b);
	for (int i = 0; i < w->n; i++)
		gpu_info(w->b, i, &w->g[i].info);
	w->next_seq = wall_ms() * 1000; /* grows across agent restarts */
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		int rc = -errno;
		gpuwatch_stop(w);
		return rc;
	}
	load(w);
	changed(w); /* the first report goes out with the first sync */
	if (w->n > 0) {
		int rc = -pthread_create(&w->thread, NULL, watch, w);
		if (rc) {
			gpuwatch_stop(w);
			return rc;
		}
		w->started = 1;
	}
	*out = w;
	return 0;
}

void gpuwatch_stop(struct gpuwatch *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_mutex_unlock(&w->mu);
	if (w->started)
		pthread_join(w->thread, NULL);
	if (w->efd >= 0)
		close(w->efd);
	pthread_mutex_destroy(&w->mu);
	free(w->state_path);
	free(w->node_name);
	free(w->check_program);
	free(w);
}

int gpuwatch_fd(const struct gpuwatch *w)
{
	return w->efd;
}

void gpuwatch_set_usage(struct gpuwatch *w, const struct gpuwatch_use *use, int n)
{
	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < w->n; i++) {
		w->g[i].job_id = 0;
		w->g[i].job_name[0] = '\0';
	}
	for (int k = 0; k < n; k++)
		for (int i = 0; i < w->n; i++)
			if (use[k].gpus & (1ull << i)) {
				w->g[i].job_id = use[k].job_id;
				snprintf(w->g[i].job_name, sizeof(w->g[i].job_name), "%s",
				         use[k].job_name ? use[k].job_name : "");
			}
	pthread_mutex_unlock(&w->mu);
}

int64_t gpuwatch_idle_ms(struct gpuwatch *w, uint64_t gpus)
{
	int64_t idle = INT64_MAX, now = now_ms();
	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < 64 && idle >= 0; i++) {
		if (!(gpus & (1ull << i)))
			continue;
		const struct gw_gpu *g = i < w->n ? &w->g[i] : NULL;
		int64_t x = !g || !g->util_known ? -1 : g->busy ? 0 : now - g->idle_since;
		idle = x < idle ? x : idle;
	}
	pthread_mutex_unlock(&w->mu);
	return idle == INT64_MAX ? -1 : idle;
}

int gpuwatch_inject(struct gpuwatch *w, const json_t *fault, char *err, size_t errlen)
{
	int rc = gpu_inject(w->b, fault, err, errlen);
	if (rc == -ENOSYS)
		snprintf(err, errlen,
		         "fault injection needs the simulated GPU backend; this node's is '%s'",
		         gpu_backend_name(w->b));
	if (rc == 0) {
		pthread_mutex_lock(&w->mu);
		w->kick = 1;
		pthread_mutex_unlock(&w->mu);
	}
	return rc;
}

/* ---- what the HTTP threads read ---- */

void gpuwatch_metrics(struct gpuwatch *w, struct buf *out)
{
	struct dcgm_gpu d[GPU_MAX];
	char jobs[GPU_MAX][24];
	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < w->n; i++) {
		struct gw_gpu *g = &w->g[i];
		snprintf(jobs[i], sizeof(jobs[i]), "%lld", (long long)g->job_id);
		d[i] = (struct dcgm_gpu){
		        .info = &g->info,
		        .sample = g->have_sample ? &g->sample : NULL,
		        .last_xid = g->last_xid,
		        .job_id = g->job_id ? jobs[i] : NULL,
		        .task = g->job_id ? g->job_name : NULL,
		        .health = state_names[g->state],
		};
		memcpy(d[i].faults, g->faults, sizeof(d[i].faults));
	}
	dcgm_write(out, w->node_name, gpu_backend_name(w->b), d, w->n);
	pthread_mutex_unlock(&w->mu);
}

json_t *gpuwatch_gpus_json(struct gpuwatch *w)
{
	json_t *inv = gpu_inventory_json(w->b);
	pthread_mutex_lock(&w->mu);
	for (int i = 0; i < w->n && i < (int)json_array_size(inv); i++) {
		struct gw_gpu *g = &w->g[i];
		json_t *o = json_array_get(inv, (size_t)i);
		json_object_set_new(o, "health", json_string(state_names[g->state]));
		if (g->state != GW_HEALTHY)
			json_object_set_new(o, "health_reason", json_string(g->reason));
		json_object_set_new(o, "sample",
		                    g->have_sample ? gpu_sample_json(&g->sample) : json_null());
		json_object_set_new(o, "job_id", g->job_id ? json_integer(g->job_id) : json_null());
	}
	pthread_mutex_unlock(&w->mu);
	return json_pack("{s:s,s:s,s:s,s:o}", "backend", gpu_backend_name(w->b), "driver_version",
	                 gpu_driver_version(w->b), "cuda_version", gpu_cuda_version(w->b), "gpus",
	                 inv);
}

/* ---- the node check ---- */

static void add_check(json_t *checks, int *ok, const char *name, int pass, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

static void add_check(json_t *checks, int *ok, const char *name, int pass, const char *fmt, ...)
{
	char detail[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	json_array_append_new(
	        checks, json_pack("{s:s,s:b,s:s}", "name", name, "ok", pass, "detail", detail));
	*ok &= pass;
}

/* Runs the check program on GPU i: 0 when it exits 0 in time. */
static int run_program(const char *program, int i, char *why, size_t whylen)
{
	char cvd[32];
	snprintf(cvd, sizeof(cvd), "CUDA_VISIBLE_DEVICES=%d", i);
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = xcalloc(n + 2, sizeof(*env));
	size_t k = 0;
	for (size_t e = 0; e < n; e++)
		if (strncmp(environ[e], "CUDA_VISIBLE_DEVICES=", 21) != 0)
			env[k++] = environ[e];
	env[k] = cvd;
	char *argv[] = {(char *)program, NULL};
	pid_t pid;
	int rc = posix_spawn(&pid, program, NULL, NULL, argv, env);
	free(env);
	if (rc) {
		snprintf(why, whylen, "cannot run %s: %s", program, strerror(rc));
		return -rc;
	}
	int status = 0;
	int64_t end = now_ms() + CHECK_PROGRAM_TIMEOUT_MS;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			snprintf(why, whylen, "%s on GPU %d: no result in %d s", program, i,
			         CHECK_PROGRAM_TIMEOUT_MS / 1000);
			return ERR_TIMEOUT;
		}
		nanosleep(&(struct timespec){0, 20000000L}, NULL);
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	snprintf(why, whylen, "%s on GPU %d: %s %d", program, i,
	         WIFEXITED(status) ? "exit status" : "signal",
	         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	return ERR_UPSTREAM;
}

static void check_gpus(struct gpuwatch *w, json_t *checks, int *ok)
{
	for (int i = 0; i < w->n; i++) {
		struct gpu_sample s;
		char why[200] = "";
		int rc = gpu_sample(w->b, i, &s);
		int clean = rc == 0 && gpu_health_is_clean(&s, why, sizeof(why));
		pthread_mutex_lock(&w->mu);
		enum gw_state st = w->g[i].state;
		char reason[200];
		text_printf(reason, sizeof(reason), "%s", w->g[i].reason);
		pthread_mutex_unlock(&w->mu);
		char name[32];
		snprintf(name, sizeof(name), "gpu%d.health", i);
		if (rc)
			add_check(checks, ok, name, 0, "cannot read GPU %d: %s", i, err_msg(rc));
		else if (!clean)
			add_check(checks, ok, name, 0, "%s", why);
		else if (st != GW_HEALTHY)
			add_check(checks, ok, name, 0, "%s: %s", state_names[st], reason);
		else
			add_check(checks, ok, name, 1, "clean (temperature %lld C)",
			          (long long)s.temp_c);
	}
}

json_t *gpuwatch_check(struct gpuwatch *w, const json_t *expect)
{
	json_t *checks = json_array();
	int ok = 1;
	int64_t want = jv_int(expect, "gpus", -1);
	int n = gpu_count(w->b);
	if (want >= 0)
		add_check(checks, &ok, "gpu_count", n == want, "%d GPUs (expected %lld)", n,
		          (long long)want);
	const char *model = jv_str(expect, "gpu_model", NULL);
	for (int i = 0; model && i < n; i++) {
		if (strcasecmp(w->g[i].info.name, model) != 0) {
			add_check(checks, &ok, "gpu_model", 0, "GPU %d is %s (expected %s)", i,
			          w->g[i].info.name, model);
			model = NULL;
		}
	}
	if (model)
		add_check(checks, &ok, "gpu_model", 1, "every GPU is %s", model);
	const char *drv = jv_str(expect, "driver_version", NULL), *have = gpu_driver_version(w->b);
	add_check(checks, &ok, "driver_version", !drv || strcmp(drv, have) == 0, "%s%s%s",
	          *have ? have : "(none)", drv ? " expected " : "", drv ? drv : "");
	check_gpus(w, checks, &ok);
	pthread_mutex_lock(&w->mu);
	char node[256];
	snprintf(node, sizeof(node), "%s", w->node_reason);
	pthread_mutex_unlock(&w->mu);
	add_check(checks, &ok, "node_fault", !node[0], "%s", node[0] ? node : "none reported");
	if (!w->check_program) {
		add_check(checks, &ok, "compute", 1,
		          "skipped: no CUDA check program (agent flag --gpu-check-program)");
	} else {
		for (int i = 0; i < n; i++) {
			char why[300] = "", name[32];
			snprintf(name, sizeof(name), "gpu%d.compute", i);
			int rc = run_program(w->check_program, i, why, sizeof(why));
			add_check(checks, &ok, name, rc == 0, "%s", rc ? why : "passed");
		}
	}
	int failed = 0;
	size_t k;
	json_t *c;
	json_array_foreach (checks, k, c) {
		failed += !jv_bool(c, "ok", 0);
	}
	char summary[64];
	snprintf(summary, sizeof(summary), "%zu checks, %d failed", json_array_size(checks),
	         failed);
	return json_pack("{s:b,s:s,s:s,s:o}", "ok", ok, "backend", gpu_backend_name(w->b),
	                 "summary", summary, "checks", checks);
}
