/* verb_logs.c - `anvil logs`, and the output of a job's ranks that it and
 * `anvil run --wait` print: every rank's stdout and stderr (or one rank's)
 * as whole lines, labeled "R: " when more than one rank is shown (as
 * `srun -l` does), a rank's stdout on stdout and its stderr on stderr;
 * with follow, until the job is final and everything is printed.
 *
 * Each (rank, stream) is read from its own offset with GET
 * /v1/jobs/ID/logs?rank=R&stream=S&attempt=N. One pass reads one chunk of
 * each, so lines interleave in the order they arrive (cli/lines.h keeps
 * them whole), and a pass that got anything is followed by another at once.
 * After an empty pass the client asks for the job (GET /v1/jobs/ID) and
 * sleeps, 150 ms doubling to 1 s while nothing comes. Order matters at the
 * end: the job is seen final first, then every stream is read until a pass
 * comes back empty, so the last lines written before the job ended are
 * never cut off. A new attempt (a retry) is read from its start once the
 * old one's output is drained.
 *
 * --tail N: the first read of each stream asks for its last N lines
 * (tail=N), and the answer's X-Anvil-Next-Offset says where to go on from.
 *
 * Every loop here goes on only while bytes come, so it ends only if each
 * answer's next offset moves past its bytes: one that does not (a peer's
 * mistake) ends the read with an error (next_offset), never a loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/lines.h"
#include "cli/verb.h"

#define LOGS_CHUNK       (1 << 20)
#define LOGS_POLL_MS     150
#define LOGS_POLL_MAX_MS 1000
#define LOGS_MAX_RANKS   1024 /* the server's bound */

/* One rank's stdout or stderr. */
struct stream {
	int rank;
	int err; /* stderr: printed on stderr */
	int64_t offset;
	int tail_due; /* the next read asks for the last lines */
	int broken;   /* could not be read once it mattered: skipped */
	int warned;
	struct lines lines;
};

struct follow {
	struct verb_ctx *v;
	int64_t job;
	const struct verb_logs_opts *o;
	int64_t attempt; /* the number being read; 0 before the first */
	json_t *last;    /* the latest job object */
	struct stream *s;
	int ns;
	int final_seen; /* the job was final before the current pass */
	int draining;   /* reading an attempt that has ended */
	int broken;     /* a stream could not be read */
	struct buf out;
};

static int64_t latest_attempt(const json_t *job)
{
	const json_t *attempts = json_object_get(job, "attempts");
	size_t n = json_array_size(attempts);
	return n ? verb_int(json_array_get(attempts, n - 1), "number", (int64_t)n) : 0;
}

static int get_job(struct follow *f)
{
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld", (long long)f->job);
	json_t *resp = NULL;
	int ret = cliconn_call(&f->v->conn, "GET", path, NULL, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	json_decref(f->last);
	f->last = json_incref(json_object_get(resp, "job"));
	json_decref(resp);
	return CLI_EXIT_OK;
}

static int job_final(const json_t *job)
{
	return verb_state_final(json_string_value(json_object_get(job, "state")));
}

/* The streams to read: the chosen rank's, or every rank's (labeled when
 * there is more than one). */
static void streams_make(struct follow *f)
{
	int64_t nranks = verb_int(f->last, "nodes", 1);
	if (nranks < 1 || nranks > LOGS_MAX_RANKS)
		nranks = 1;
	int one = f->o->rank >= 0;
	f->ns = one ? 2 : (int)nranks * 2;
	f->s = xcalloc((size_t)f->ns, sizeof(*f->s));
	for (int i = 0; i < f->ns; i++) {
		struct stream *s = &f->s[i];
		s->rank = one ? (int)f->o->rank : i / 2;
		s->err = i % 2;
		s->tail_due = f->o->tail > 0;
		lines_init(&s->lines, one || nranks == 1 ? -1 : s->rank);
	}
}

static void print_out(struct follow *f, int err)
{
	if (!f->out.len)
		return;
	FILE *to = err ? stderr : stdout;
	fwrite(f->out.data, 1, f->out.len, to);
	fflush(to);
	buf_reset(&f->out);
}

/* Prints the partial lines still held: their stream or attempt is over. */
static void streams_flush(struct follow *f)
{
	for (int i = 0; i < f->ns; i++) {
		lines_flush(&f->s[i].lines, &f->out);
		print_out(f, f->s[i].err);
	}
}

static const char *stream_name(const struct stream *s)
{
	return s->err ? "stderr" : "stdout";
}

/* Where s goes on after an answer of len bytes: the peer's
 * X-Anvil-Next-Offset, or the offset read from plus len without one. An
 * offset that does not move past the bytes it came with (or goes back) is
 * the peer's mistake, the server's or the node agent's: read again from
 * there, it would answer the same bytes for ever, so it is refused (-1,
 * said) instead of followed. A tail ends at least its own length in. */
static int next_offset(struct follow *f, const struct stream *s, size_t len, int64_t *at)
{
	char next[32];
	int64_t from = s->tail_due ? 0 : s->offset;
	int64_t least = s->tail_due ? (int64_t)len : from + (len > 0);
	if (!cliconn_header(&f->v->conn, "X-Anvil-Next-Offset", next, sizeof(next)) ||
	    parse_i64(next, 0, INT64_MAX, at) != 0)
		*at = from + (int64_t)len;
	if (*at >= least)
		return 0;
	char where[48] = "as its last lines";
	if (!s->tail_due)
		snprintf(where, sizeof(where), "from offset %lld", (long long)from);
	fprintf(stderr,
	        "anvil: cannot read rank %d's %s: the server sent %zu bytes %s with "
	        "X-Anvil-Next-Offset %lld, which %s (a fault of the server or of the node's "
	        "agent); stopping rather than reading them again\n",
	        s->rank, stream_name(s), len, where, (long long)*at,
	        len ? "does not advance past them" : "goes back");
	return -1;
}

/* Reads one chunk of s and prints the lines it completes. CLI_EXIT_OK
 * with *got bytes and *status; CLI_EXIT_UNREACHABLE (printed) on
 * transport; CLI_EXIT_FAILED (printed) when the peer's next offset does
 * not advance. */
static int read_chunk(struct follow *f, struct stream *s, int *status, size_t *got)
{
	char path[200];
	snprintf(path, sizeof(path),
	         "/v1/jobs/%lld/logs?rank=%d&stream=%s&attempt=%lld&limit=%d&%s=%lld",
	         (long long)f->job, s->rank, stream_name(s), (long long)f->attempt, LOGS_CHUNK,
	         s->tail_due ? "tail" : "offset",
	         (long long)(s->tail_due ? f->o->tail : s->offset));
	struct buf body;
	buf_init(&body);
	*got = 0;
	if (cliconn_do(&f->v->conn, "GET", path, NULL, status, &body) < 0) {
		fprintf(stderr, "anvil: %s\n", f->v->conn.error);
		buf_cleanup(&body);
		return CLI_EXIT_UNREACHABLE;
	}
	if (*status >= 200 && *status <= 299) {
		int64_t at;
		if (next_offset(f, s, body.len, &at) != 0) {
			buf_cleanup(&body);
			return CLI_EXIT_FAILED;
		}
		s->offset = at;
		s->tail_due = 0;
		*got = body.len;
		lines_feed(&s->lines, body.data, body.len, &f->out);
		print_out(f, s->err);
	} else {
		cliconn_describe(&f->v->conn, *status, &body);
	}
	buf_cleanup(&body);
	return CLI_EXIT_OK;
}

/* A log error while the job still runs may pass (no attempt yet, the agent
 * restarting); a malformed request or bad token will not get better. */
static int error_is_lasting(int status)
{
	return status == 400 || status == 401 || status == 403;
}

/* One chunk of every stream; *got: the bytes read in all. */
static int pass(struct follow *f, size_t *got)
{
	*got = 0;
	for (int i = 0; f->attempt && i < f->ns; i++) {
		struct stream *s = &f->s[i];
		int status = 0;
		size_t n = 0;
		if (s->broken)
			continue;
		int ret = read_chunk(f, s, &status, &n);
		if (ret != CLI_EXIT_OK)
			return ret;
		*got += n;
		if (status >= 200 && status <= 299)
			continue;
		if (error_is_lasting(status)) {
			fprintf(stderr, "anvil: %s\n", f->v->conn.error);
			return CLI_EXIT_FAILED;
		}
		if (!f->o->follow || f->final_seen || f->draining) {
			fprintf(stderr, "anvil: cannot read rank %d's %s: %s\n", s->rank,
			        stream_name(s), f->v->conn.error);
			s->broken = f->broken = 1;
		} else if (!s->warned++) {
			fprintf(stderr, "anvil: still trying to read rank %d's %s: %s\n", s->rank,
			        stream_name(s), f->v->conn.error);
		}
	}
	return CLI_EXIT_OK;
}

/* Passes until one comes back empty. */
static int drain(struct follow *f)
{
	size_t got;
	int ret;
	while ((ret = pass(f, &got)) == CLI_EXIT_OK && got > 0)
		;
	return ret;
}

/* The job has a newer attempt than the one read: finish reading that
 * (it has ended), then read the new one from its start. */
static int next_attempt(struct follow *f, int64_t number)
{
	if (f->attempt) {
		f->draining = 1;
		int ret = drain(f);
		f->draining = 0;
		if (ret != CLI_EXIT_OK)
			return ret;
		streams_flush(f);
		fprintf(stderr, "anvil: job %lld: attempt %lld started; its output follows\n",
		        (long long)f->job, (long long)number);
	}
	for (int i = 0; i < f->ns; i++) {
		struct stream *s = &f->s[i];
		s->offset = 0;
		s->tail_due = !f->attempt && f->o->tail > 0;
		s->broken = s->warned = 0;
	}
	f->attempt = number;
	return CLI_EXIT_OK;
}

/* Asks for the job: a new attempt, or the end. */
static int refresh(struct follow *f)
{
	int ret = get_job(f);
	if (ret != CLI_EXIT_OK)
		return ret;
	int64_t n = latest_attempt(f->last);
	if (n > f->attempt && (ret = next_attempt(f, n)) != CLI_EXIT_OK)
		return ret;
	f->final_seen = job_final(f->last);
	return CLI_EXIT_OK;
}

static int follow_loop(struct follow *f)
{
	int64_t idle = LOGS_POLL_MS;
	for (;;) {
		size_t got = 0;
		int ret = pass(f, &got);
		if (ret != CLI_EXIT_OK)
			return ret;
		if (got > 0) {
			idle = LOGS_POLL_MS;
			continue;
		}
		if (f->final_seen)
			return CLI_EXIT_OK; /* drained after the end */
		if ((ret = refresh(f)) != CLI_EXIT_OK)
			return ret;
		if (!f->final_seen) { /* else read once more: the last lines */
			sleep_ms(idle);
			idle = idle * 2 > LOGS_POLL_MAX_MS ? LOGS_POLL_MAX_MS : idle * 2;
		}
	}
}

int verb_logs_stream(struct verb_ctx *v, int64_t job, const struct verb_logs_opts *o,
                     json_t **job_out)
{
	struct follow f = {.v = v, .job = job, .o = o};
	buf_init(&f.out);
	int ret = verb_connect(v);
	if (ret == CLI_EXIT_OK)
		ret = get_job(&f);
	if (ret == CLI_EXIT_OK) {
		streams_make(&f);
		f.final_seen = job_final(f.last);
		next_attempt(&f, latest_attempt(f.last)); /* the first: nothing to drain */
		ret = o->follow ? follow_loop(&f) : drain(&f);
		streams_flush(&f);
	}
	if (ret == CLI_EXIT_OK && f.broken)
		ret = CLI_EXIT_FAILED;
	for (int i = 0; i < f.ns; i++)
		lines_cleanup(&f.s[i].lines);
	free(f.s);
	buf_cleanup(&f.out);
	if (job_out)
		*job_out = f.last;
	else
		json_decref(f.last);
	return ret;
}

int64_t verb_logs_failed_rank(const json_t *job)
{
	if (strcmp(verb_str(job, "state"), "failed") != 0)
		return -1;
	const char *reason = verb_str(job, "reason");
	char *end = NULL;
	long long r = strncmp(reason, "rank ", 5) == 0 ? strtoll(reason + 5, &end, 10) : -1;
	if (end && end > reason + 5 && strncmp(end, " on ", 4) == 0 && r >= 0)
		return r;
	/* Another wording: the first rank that failed to start or exited
	 * with the job's code. */
	const json_t *attempts = json_object_get(job, "attempts");
	const json_t *ranks =
	        json_object_get(json_array_get(attempts, json_array_size(attempts) - 1), "ranks");
	int64_t code = verb_int(job, "exit_code", 0);
	for (size_t i = 0; i < json_array_size(ranks); i++) {
		const json_t *k = json_array_get(ranks, i);
		if (strcmp(verb_str(k, "state"), "failed_to_start") == 0 ||
		    (code && verb_int(k, "exit_code", 0) == code))
			return verb_int(k, "rank", (int64_t)i);
	}
	return -1;
}

/* Appends rank's last lines of one stream, labeled, to out; 0, or -1 with
 * the reason printed. */
static int tail_of(struct verb_ctx *v, const json_t *job, int64_t rank, const char *stream,
                   struct buf *out)
{
	char path[200];
	snprintf(path, sizeof(path), "/v1/jobs/%lld/logs?rank=%lld&stream=%s&attempt=%lld&tail=%d",
	         (long long)verb_int(job, "id", 0), (long long)rank, stream,
	         (long long)latest_attempt(job), VERB_LOGS_FAILURE_LINES);
	struct buf body;
	buf_init(&body);
	int status = 0, rc = cliconn_do(&v->conn, "GET", path, NULL, &status, &body);
	if (rc == 0 && (status < 200 || status > 299)) {
		cliconn_describe(&v->conn, status, &body);
		rc = -1;
	}
	if (rc == 0) {
		struct lines l;
		lines_init(&l, (int)rank);
		lines_feed(&l, body.data, body.len, out);
		lines_flush(&l, out);
		lines_cleanup(&l);
	} else {
		fprintf(stderr, "anvil: cannot read rank %lld's %s: %s\n", (long long)rank, stream,
		        v->conn.error);
	}
	buf_cleanup(&body);
	return rc ? -1 : 0;
}

void verb_logs_failure(struct verb_ctx *v, const json_t *job, int64_t shown_rank)
{
	int64_t rank = verb_logs_failed_rank(job);
	if (rank < 0 || shown_rank < 0 || rank == shown_rank || !latest_attempt(job))
		return;
	struct buf out;
	buf_init(&out);
	if (tail_of(v, job, rank, "stdout", &out) == 0 &&
	    tail_of(v, job, rank, "stderr", &out) == 0) {
		if (out.len)
			fprintf(stderr,
			        "anvil: rank %lld failed; its last lines (stdout, then stderr):\n",
			        (long long)rank);
		else
			fprintf(stderr, "anvil: rank %lld failed without any output\n",
			        (long long)rank);
		fwrite(out.data ? out.data : "", 1, out.len, stderr);
	}
	buf_cleanup(&out);
}

static const struct cliargs_opt opts[] = {
        {"follow", 'f', CLIARGS_FLAG, NULL, "keep printing until the job ends"},
        {"rank", 'r', CLIARGS_INT, "R", "only this rank's output (default: every rank's)"},
        {"tail", 'n', CLIARGS_INT, "N", "start with the last N lines of each rank's streams"},
        {NULL, 0, 0, NULL, NULL},
};

static int logs_fn(struct verb_ctx *v)
{
	int64_t id;
	int ret = verb_job_arg(v, v->args.pos[0], &id);
	if (ret != CLI_EXIT_OK)
		return ret;
	const struct cliargs_value *rank = cliargs_get(&v->args, "rank");
	const struct cliargs_value *tail = cliargs_get(&v->args, "tail");
	if (rank->set && (rank->num < 0 || rank->num >= LOGS_MAX_RANKS))
		return verb_usage_error(v, "--rank: %lld is not a rank (0 to %d)",
		                        (long long)rank->num, LOGS_MAX_RANKS - 1);
	if (tail->set && (tail->num < 1 || tail->num > VERB_LOGS_TAIL_MAX))
		return verb_usage_error(v, "--tail: %lld lines: give 1 to %d", (long long)tail->num,
		                        VERB_LOGS_TAIL_MAX);
	struct verb_logs_opts o = {.rank = rank->set ? rank->num : -1,
	                           .follow = cliargs_flag(&v->args, "follow"),
	                           .tail = tail->set ? tail->num : 0};
	json_t *job = NULL;
	ret = verb_logs_stream(v, id, &o, &job);
	if (o.follow && job && job_final(job))
		verb_logs_failure(v, job, o.rank);
	json_decref(job);
	return ret;
}

const struct verb verb_logs = {
        .name = "logs",
        .fn = logs_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 1,
        .usage = "[-f] [--rank R] [--tail N] JOB",
        .summary = "print the output (stdout and stderr) of a job's ranks, latest attempt",
        .help = "Prints the output of JOB's latest attempt: every rank's, each line led by its\n"
                "rank (\"1: \") when the job has more than one, or rank R's alone. A rank's\n"
                "stdout goes to stdout and its stderr to stderr, in whole lines, in the order\n"
                "they are read (the order of one rank's stdout lines relative to its stderr\n"
                "lines is not kept). With --tail, each stream starts with its last N lines.\n"
                "With -f, keeps printing as the output grows, until the job has ended and\n"
                "everything is printed (polling every 150 ms to 1 s while nothing comes);\n"
                "a job that failed on a rank not shown then ends with that rank's last\n"
                "lines on stderr. JOB is a job's id, or an array's member as ARRAY_INDEX\n"
                "(12_3).\n",
};
