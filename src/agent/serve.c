#include "agent/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/converge.h"
#include "agent/exec.h"
#include "agent/gpuwatch.h"
#include "agent/streams.h"
#include "base/err.h"
#include "base/httpd.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "proto/stream.h"

struct serve {
	struct httpd *httpd;
	const char *work_dir;
	struct serve_stats *stats;
	struct gpuwatch *gw;       /* NULL: no GPU endpoints */
	pthread_mutex_t mu;        /* guards secret, ranks and converge */
	struct converge *converge; /* NULL: no profile endpoints */
	char secret[256];
	struct serve_rank *ranks; /* running, with their contexts */
	int nranks;
	char self[4096]; /* this binary: the exec helper's */
};

static void metric(struct buf *out, const char *name, const char *type, const char *help,
                   long long v)
{
	buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name, v);
}

static void get_metrics(struct serve *s, struct httpd_req *req)
{
	struct serve_stats *st = s->stats;
	struct buf *o = &req->out;
	metric(o, "anvil_agent_ranks_running", "gauge", "Ranks running on this node.",
	       atomic_load(&st->ranks_running));
	metric(o, "anvil_agent_ranks_started_total", "counter", "Ranks started.",
	       atomic_load(&st->ranks_started_total));
	metric(o, "anvil_agent_ranks_started_spare_total", "counter",
	       "Ranks started through a spare shim (already in its cgroup).",
	       atomic_load(&st->ranks_started_spare_total));
	metric(o, "anvil_agent_shims_reused_total", "counter",
	       "Shims that went back to the spare pool after their rank.",
	       atomic_load(&st->shims_reused_total));
	metric(o, "anvil_agent_sync_total", "counter", "Sync requests completed.",
	       atomic_load(&st->sync_total));
	metric(o, "anvil_agent_sync_errors_total", "counter",
	       "Sync requests that failed or were refused.", atomic_load(&st->sync_errors_total));
	metric(o, "anvil_agent_sync_repeated_total", "counter",
	       "Sync answers the same as the last one applied, not applied again.",
	       atomic_load(&st->sync_repeated_total));
	metric(o, "anvil_agent_gpus", "gauge", "GPUs the backend reports.", atomic_load(&st->gpus));
	httpd_metrics(s->httpd, "anvil_agent", o);
	if (s->gw)
		gpuwatch_metrics(s->gw, o);
	req->content_type = "text/plain; version=0.0.4";
}

/* 1 when the request carries the node secret; 0 (and the request answered
 * 401) when not; -1 (answered 503) while the agent has no secret yet: it
 * is registering, and the caller may retry in a moment. */
static int authorized(struct serve *s, struct httpd_req *req)
{
	const char *h = httpd_header(req, "Authorization");
	pthread_mutex_lock(&s->mu);
	size_t n = strlen(s->secret);
	int diff = !(n && h && strncmp(h, "Bearer ", 7) == 0 && secret_equal(h + 7, s->secret));
	pthread_mutex_unlock(&s->mu);
	if (n == 0) {
		httpd_error(req, ERR_BUSY, "this agent is still registering; retry in a moment");
		return -1;
	}
	if (diff)
		httpd_error(req, ERR_AUTH, "missing or wrong node secret");
	return diff == 0;
}

/* Query parameter name as an integer in [min, max]; 400 on error. */
static int query_int(struct httpd_req *req, const char *name, int64_t dflt, int64_t min,
                     int64_t max, int64_t *out)
{
	const char *v = httpd_query(req, name);
	char msg[200];
	if (!v && dflt < min) {
		snprintf(msg, sizeof(msg), "field '%s': required", name);
		httpd_error(req, ERR_INVALID, msg);
		return ERR_INVALID;
	}
	if (!v) {
		*out = dflt;
		return 0;
	}
	if (parse_i64(v, min, max, out) != 0) {
		snprintf(msg, sizeof(msg),
		         "field '%s': \"%.40s\" is not an integer in [%" PRId64 ", %" PRId64 "]",
		         name, v, min, max);
		httpd_error(req, ERR_INVALID, msg);
		return ERR_INVALID;
	}
	return 0;
}

/* What a log request asks for. */
struct log_query {
	int64_t attempt, rank, offset, limit;
	int64_t tail; /* > 0: the last tail lines instead of from offset */
	enum exec_stream stream;
};

/* Keeps the last q->tail lines of what was read from start, in place.
 * When the window holds fewer lines and starts inside a line (cut: it does
 * not reach back to the file's start or to a newline), that first, partial
 * line goes too. */
static void keep_tail(struct buf *b, int cut, const struct log_query *q)
{
	size_t from = text_last_lines(b->data, b->len, q->tail);
	if (from == 0 && cut) {
		const char *nl = memchr(b->data, '\n', b->len);
		from = nl ? (size_t)(nl - b->data) + 1 : b->len;
	}
	memmove(b->data, b->data + from, b->len - from);
	b->len -= from;
	b->data[b->len] = '\0';
}

/* Reads [offset, offset+limit) of the log (or its last lines) into the
 * response; header X-Anvil-Next-Offset: where the bytes sent end. */
static void send_log(struct httpd_req *req, int fd, const struct log_query *q)
{
	struct stat sb;
	if (fstat(fd, &sb) < 0) {
		httpd_error(req, -errno, NULL);
		return;
	}
	int64_t start = q->offset;
	if (q->tail > 0)
		start = sb.st_size > q->limit ? sb.st_size - q->limit : 0;
	int64_t n = sb.st_size > start ? sb.st_size - start : 0;
	if (n > q->limit)
		n = q->limit;
	buf_reserve(&req->out, (size_t)n + 1);
	ssize_t r = n > 0 ? pread(fd, req->out.data, (size_t)n, start) : 0;
	if (r < 0) {
		httpd_error(req, -errno, NULL);
		return;
	}
	req->out.len = (size_t)r;
	req->out.data[r] = '\0';
	if (q->tail > 0) {
		char before = '\n'; /* what precedes the window */
		if (start > 0 && pread(fd, &before, 1, start - 1) != 1)
			before = '\0';
		keep_tail(&req->out, before != '\n', q);
	}
	req->status = 200;
	req->content_type = "text/plain";
	char next[32];
	snprintf(next, sizeof(next), "%lld", (long long)start + (long long)r);
	httpd_add_header(req, "X-Anvil-Next-Offset", next);
}

/* Opens the asked log; -1 with the request answered when there is none. A
 * rank started by an agent from before the streams were split has no
 * stderr log (its .log holds both): its stderr reads as empty. */
static int open_log(struct serve *s, struct httpd_req *req, const struct log_query *q)
{
	char *path = exec_log_path(s->work_dir, q->attempt, (int)q->rank, q->stream);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int err = errno;
	free(path);
	if (fd < 0 && err == ENOENT && q->stream == EXEC_STDERR) {
		path = exec_log_path(s->work_dir, q->attempt, (int)q->rank, EXEC_STDOUT);
		fd = access(path, F_OK) == 0 ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
		free(path);
	}
	if (fd < 0)
		httpd_error(req, err == ENOENT ? ERR_NOTFOUND : -err,
		            err == ENOENT ? "no such rank log on this node" : NULL);
	return fd;
}

/* stream=stdout (default) or stderr; 400 otherwise. */
static int query_stream(struct httpd_req *req, enum exec_stream *out)
{
	const char *v = httpd_query(req, "stream");
	if (!v || strcmp(v, "stdout") == 0)
		*out = EXEC_STDOUT;
	else if (strcmp(v, "stderr") == 0)
		*out = EXEC_STDERR;
	else {
		char msg[120];
		snprintf(msg, sizeof(msg), "field 'stream': \"%.40s\" is not stdout or stderr", v);
		httpd_error(req, ERR_INVALID, msg);
		return ERR_INVALID;
	}
	return 0;
}

static void get_logs(struct serve *s, struct httpd_req *req)
{
	struct log_query q;
	if (authorized(s, req) != 1)
		return;
	if (query_int(req, "attempt", -1, 1, INT64_MAX, &q.attempt) ||
	    query_int(req, "rank", 0, 0, 1 << 20, &q.rank) ||
	    query_int(req, "offset", 0, 0, INT64_MAX, &q.offset) ||
	    query_int(req, "limit", SERVE_LOG_LIMIT, 1, INT64_MAX, &q.limit) ||
	    query_int(req, "tail", 0, 0, SERVE_LOG_TAIL_MAX, &q.tail) ||
	    query_stream(req, &q.stream))
		return;
	if (q.limit > SERVE_LOG_LIMIT)
		q.limit = SERVE_LOG_LIMIT;
	int fd = open_log(s, req, &q);
	if (fd >= 0) {
		send_log(req, fd, &q);
		close(fd);
	}
}

static void send_json(struct httpd_req *req, json_t *o)
{
	char *text = jv_dump(o);
	httpd_json(req, 200, text);
	free(text);
	json_decref(o);
}

/* POST bodies of the GPU routes: a JSON object, or 400. */
static json_t *body_object(struct httpd_req *req)
{
	char err[256];
	json_t *o = NULL;
	if (jv_parse_object(req->body, req->body_len, &o, err, sizeof(err))) {
		httpd_error(req, ERR_INVALID, err);
		return NULL;
	}
	return o;
}

/* GET /v1/gpus, POST /v1/gpu/faults, POST /v1/check (node secret). */
static void gpu_route(struct serve *s, struct httpd_req *req, int get)
{
	if (authorized(s, req) != 1)
		return;
	if (get) {
		send_json(req, gpuwatch_gpus_json(s->gw));
		return;
	}
	json_t *body = body_object(req);
	if (!body)
		return;
	if (strcmp(req->path, "/v1/check") == 0) {
		json_t *r = gpuwatch_check(s->gw, body);
		log_info("node check ok=%d summary=\"%s\"", jv_bool(r, "ok", 0),
		         jv_str(r, "summary", ""));
		send_json(req, r);
	} else {
		char err[512] = "";
		int rc = gpuwatch_inject(s->gw, body, err, sizeof(err));
		if (rc) {
			httpd_error(req, rc == -ENOSYS ? ERR_INVALID : rc, err);
		} else {
			char *text = jv_dump(body);
			log_warn("fault injected fault=%s", text);
			free(text);
			send_json(req, json_pack("{s:b}", "injected", 1));
		}
	}
	json_decref(body);
}

/* GET /v1/profile, POST /v1/profile/converge (node secret). */
static void profile_route(struct serve *s, struct httpd_req *req, int get)
{
	if (authorized(s, req) != 1)
		return;
	pthread_mutex_lock(&s->mu);
	struct converge *c = s->converge;
	pthread_mutex_unlock(&s->mu);
	if (!c) {
		httpd_error(req, ERR_NOTFOUND, "this agent does not converge profiles");
		return;
	}
	if (get) {
		send_json(req, converge_show(c));
		return;
	}
	json_t *body = req->body_len ? body_object(req) : json_object();
	if (!body)
		return;
	const json_t *hash = json_object_get(body, "hash");
	char err[512] = "";
	int rc = hash && !json_is_string(hash) ? ERR_INVALID : 0;
	if (rc)
		snprintf(err, sizeof(err), "field 'hash': should be the profile's hash, a string");
	else
		rc = converge_rerun(c, json_string_value(hash), err, sizeof(err));
	if (rc)
		httpd_error(req, rc, err);
	else
		httpd_json(req, 202, "{\"state\":\"converging\"}");
	json_decref(body);
}

static char **env_copy(char *const *env)
{
	size_t n = 0;
	while (env && env[n])
		n++;
	char **out = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++)
		out[i] = xstrdup(env[i]);
	return out;
}

void serve_ranks_free(struct serve_rank *ranks, int n)
{
	for (int i = 0; i < n; i++) {
		for (size_t k = 0; ranks[i].env && ranks[i].env[k]; k++)
			free(ranks[i].env[k]);
		free(ranks[i].env);
		free(ranks[i].cwd);
	}
	free(ranks);
}

/* A copy of the running rank's context (freed with serve_ranks_free(out,
 * 1)), or NULL. */
static struct serve_rank *find_rank(struct serve *s, int64_t attempt_id, int64_t rank)
{
	struct serve_rank *out = NULL;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nranks && !out; i++) {
		const struct serve_rank *r = &s->ranks[i];
		if (r->attempt_id != attempt_id || r->rank != rank)
			continue;
		out = xcalloc(1, sizeof(*out));
		*out = (struct serve_rank){.attempt_id = r->attempt_id,
		                           .rank = r->rank,
		                           .pid = r->pid,
		                           .env = env_copy(r->env),
		                           .cwd = r->cwd ? xstrdup(r->cwd) : NULL};
	}
	pthread_mutex_unlock(&s->mu);
	return out;
}

static const char *env_value(char *const *env, const char *key)
{
	size_t n = strlen(key);
	for (size_t i = 0; env && env[i]; i++)
		if (strncmp(env[i], key, n) == 0 && env[i][n] == '=')
			return env[i] + n + 1;
	return NULL;
}

/* POST /v1/attach and /v1/exec (node secret): a stream into a running rank. */
static void stream_route(struct serve *s, struct httpd_req *req, int exec)
{
	int64_t attempt, rank;
	if (authorized(s, req) != 1 || query_int(req, "attempt", -1, 1, INT64_MAX, &attempt) ||
	    query_int(req, "rank", 0, 0, 1 << 20, &rank))
		return;
	if (!httpd_wants_upgrade(req, STREAM_UPGRADE)) {
		httpd_error(req, ERR_INVALID,
		            "this route is a stream: send Connection: Upgrade and "
		            "Upgrade: " STREAM_UPGRADE);
		return;
	}
	struct serve_rank *r = find_rank(s, attempt, rank);
	char msg[160];
	const char *sock = r ? env_value(r->env, EXEC_SESSION_ENV) : NULL;
	if (!r || (!exec && !sock)) {
		snprintf(msg, sizeof(msg), "rank %lld of attempt %lld %s", (long long)rank,
		         (long long)attempt,
		         r ? "is not a session" : "is not running on this node");
		httpd_error(req, ERR_CONFLICT, msg);
	} else if (exec) {
		streams_exec(req, s->self, r);
	} else {
		streams_attach(req, sock);
	}
	if (r)
		serve_ranks_free(r, 1);
}

static int handle(struct httpd_req *req, void *ctx)
{
	struct serve *s = ctx;
	int get = strcmp(req->method, "GET") == 0;
	if (get && strcmp(req->path, "/healthz") == 0) {
		req->route = "/healthz";
		httpd_json(req, 200, "{\"status\":\"ok\"}");
	} else if (get && strcmp(req->path, "/metrics") == 0) {
		req->route = "/metrics";
		get_metrics(s, req);
	} else if (get && strcmp(req->path, "/v1/logs") == 0) {
		req->route = "/v1/logs";
		get_logs(s, req);
	} else if (!get &&
	           (strcmp(req->path, "/v1/attach") == 0 || strcmp(req->path, "/v1/exec") == 0)) {
		int exec = strcmp(req->path, "/v1/exec") == 0;
		req->route = exec ? "/v1/exec" : "/v1/attach";
		stream_route(s, req, exec);
	} else if (s->gw && ((get && strcmp(req->path, "/v1/gpus") == 0) ||
	                     (!get && (strcmp(req->path, "/v1/gpu/faults") == 0 ||
	                               strcmp(req->path, "/v1/check") == 0)))) {
		req->route = get                                   ? "/v1/gpus"
		             : strcmp(req->path, "/v1/check") == 0 ? "/v1/check"
		                                                   : "/v1/gpu/faults";
		gpu_route(s, req, get);
	} else if ((get && strcmp(req->path, "/v1/profile") == 0) ||
	           (!get && strcmp(req->path, "/v1/profile/converge") == 0)) {
		req->route = get ? "/v1/profile" : "/v1/profile/converge";
		profile_route(s, req, get);
	} else {
		httpd_error(req, ERR_NOTFOUND, "no such route");
	}
	return HTTPD_DONE;
}

int serve_start(const char *host, int port, const struct connguard_limits *limits,
                const char *work_dir, struct serve_stats *stats, struct gpuwatch *gw,
                struct serve **out)
{
	struct serve *s = xcalloc(1, sizeof(*s));
	s->work_dir = work_dir;
	s->gw = gw;
	s->stats = stats;
	ssize_t n = readlink("/proc/self/exe", s->self, sizeof(s->self) - 1);
	if (n > 0)
		s->self[n] = '\0';
	else
		snprintf(s->self, sizeof(s->self), "anvil");
	pthread_mutex_init(&s->mu, NULL);
	struct httpd_config cfg = {
	        .bind = host, .port = port, .threads = 2, .handler = handle, .ctx = s};
	if (limits)
		cfg.limits = *limits;
	int rc = httpd_start(&cfg, &s->httpd);
	if (rc) {
		pthread_mutex_destroy(&s->mu);
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int serve_port(const struct serve *s)
{
	return httpd_port(s->httpd);
}

void serve_set_secret(struct serve *s, const char *secret)
{
	pthread_mutex_lock(&s->mu);
	snprintf(s->secret, sizeof(s->secret), "%s", secret);
	pthread_mutex_unlock(&s->mu);
}

void serve_set_converge(struct serve *s, struct converge *c)
{
	pthread_mutex_lock(&s->mu);
	s->converge = c;
	pthread_mutex_unlock(&s->mu);
}

void serve_set_ranks(struct serve *s, struct serve_rank *ranks, int n)
{
	pthread_mutex_lock(&s->mu);
	struct serve_rank *old = s->ranks;
	int nold = s->nranks;
	s->ranks = ranks;
	s->nranks = n;
	pthread_mutex_unlock(&s->mu);
	serve_ranks_free(old, nold);
}

void serve_stop(struct serve *s)
{
	if (!s)
		return;
	httpd_stop(s->httpd);
	serve_ranks_free(s->ranks, s->nranks);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
