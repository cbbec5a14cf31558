/* verb_logs.c - `anvil logs`: print a rank's log, and follow it (-f) until
 * the job is final and nothing more is left to read.
 *
 * The client asks GET /v1/jobs/ID/logs with an offset and counts the bytes
 * it got to find the next offset. It cannot see the X-Anvil-Next-Offset and
 * X-Anvil-Job-State headers (httpc does not hand back headers), so when
 * caught up it asks GET /v1/jobs/ID for the state. Order matters at the end:
 * the state is seen final first, then the log is read until empty, so the
 * last lines written before the job ended are never cut off.
 */
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/verb.h"

#define LOGS_CHUNK   (1 << 20)
#define LOGS_POLL_MS 150

struct follow {
	struct verb_ctx *v;
	int64_t job;
	int64_t rank;
	int64_t offset;
	int64_t attempt_id; /* of the latest attempt seen; -1 before any */
	json_t *last;       /* the latest job object */
	int warned;
};

/* Reads one chunk from f->offset and writes it to stdout. CLI_EXIT_OK with
 * *got bytes and *status; CLI_EXIT_UNREACHABLE (printed) on transport. */
static int read_chunk(struct follow *f, int *status, size_t *got)
{
	char path[160];
	snprintf(path, sizeof(path), "/v1/jobs/%lld/logs?rank=%lld&offset=%lld&limit=%d",
	         (long long)f->job, (long long)f->rank, (long long)f->offset, LOGS_CHUNK);
	struct buf body;
	buf_init(&body);
	*got = 0;
	if (cliconn_do(&f->v->conn, "GET", path, NULL, status, &body) < 0) {
		fprintf(stderr, "anvil: %s\n", f->v->conn.error);
		buf_cleanup(&body);
		return CLI_EXIT_UNREACHABLE;
	}
	if (*status >= 200 && *status <= 299 && body.len) {
		fwrite(body.data, 1, body.len, stdout);
		fflush(stdout);
		*got = body.len;
		f->offset += (int64_t)body.len;
	} else if (*status < 200 || *status > 299) {
		cliconn_describe(&f->v->conn, *status, &body);
	}
	buf_cleanup(&body);
	return CLI_EXIT_OK;
}

/* Refreshes f->last; a new attempt (a retry) restarts its log from 0. */
static int refresh_job(struct follow *f)
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
	const json_t *attempts = json_object_get(f->last, "attempts");
	size_t n = json_array_size(attempts);
	int64_t id = n ? verb_int(json_array_get(attempts, n - 1), "id", -1) : -1;
	if (id >= 0 && f->attempt_id >= 0 && id != f->attempt_id) {
		fprintf(stderr, "anvil: job %lld: attempt %lld started; its log follows\n",
		        (long long)f->job,
		        (long long)verb_int(json_array_get(attempts, n - 1), "number", 0));
		f->offset = 0;
	}
	if (id >= 0)
		f->attempt_id = id;
	return CLI_EXIT_OK;
}

static int final(const struct follow *f)
{
	return verb_state_final(json_string_value(json_object_get(f->last, "state")));
}

/* A log error while the job still runs may pass (no attempt yet, the agent
 * restarting); a malformed request or bad token will not get better. */
static int error_is_lasting(int status)
{
	return status == 400 || status == 401 || status == 403;
}

static int follow_loop(struct follow *f)
{
	int final_seen = 0;
	for (;;) {
		int status = 0;
		size_t got = 0;
		int ret = read_chunk(f, &status, &got);
		if (ret != CLI_EXIT_OK)
			return ret;
		int ok = status >= 200 && status <= 299;
		if (ok && got > 0)
			continue;
		if (!ok && (final_seen || error_is_lasting(status))) {
			fprintf(stderr, "anvil: %s\n", f->v->conn.error);
			return CLI_EXIT_FAILED;
		}
		if (!ok && status >= 500 && !f->warned++)
			fprintf(stderr, "anvil: still trying to read the log: %s\n",
			        f->v->conn.error);
		if (final_seen)
			return CLI_EXIT_OK;
		if ((ret = refresh_job(f)) != CLI_EXIT_OK)
			return ret;
		if (final(f))
			final_seen = 1; /* read once more: the last lines */
		else
			sleep_ms(LOGS_POLL_MS);
	}
}

/* Without -f: read until a read comes back empty. */
static int read_all(struct follow *f)
{
	for (;;) {
		int status = 0;
		size_t got = 0;
		int ret = read_chunk(f, &status, &got);
		if (ret != CLI_EXIT_OK)
			return ret;
		if (status < 200 || status > 299) {
			fprintf(stderr, "anvil: %s\n", f->v->conn.error);
			return CLI_EXIT_FAILED;
		}
		if (got == 0)
			return CLI_EXIT_OK;
	}
}

int verb_logs_stream(struct verb_ctx *v, int64_t job, int64_t rank, int follow, json_t **job_out)
{
	struct follow f = {.v = v, .job = job, .rank = rank, .attempt_id = -1};
	int ret = verb_connect(v);
	if (ret == CLI_EXIT_OK)
		ret = follow ? follow_loop(&f) : read_all(&f);
	if (job_out)
		*job_out = f.last;
	else
		json_decref(f.last);
	return ret;
}

static const struct cliargs_opt opts[] = {
        {"follow", 'f', CLIARGS_FLAG, NULL, "keep printing until the job ends"},
        {"rank", 'r', CLIARGS_INT, "R", "whose log (default 0)"},
        {NULL, 0, 0, NULL, NULL},
};

static int logs_fn(struct verb_ctx *v)
{
	int64_t id;
	int ret = verb_job_id(v, v->args.pos[0], &id);
	if (ret != CLI_EXIT_OK)
		return ret;
	const struct cliargs_value *rank = cliargs_get(&v->args, "rank");
	return verb_logs_stream(v, id, rank->set ? rank->num : 0, cliargs_flag(&v->args, "follow"),
	                        NULL);
}

const struct verb verb_logs = {
        .name = "logs",
        .fn = logs_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 1,
        .usage = "[-f] [--rank R] JOB",
        .summary = "print a rank's log (stdout and stderr) of a job's latest attempt",
        .help = "Prints rank R's combined stdout and stderr of JOB's latest attempt. With -f,\n"
                "keeps printing as the log grows, until the job has ended and everything is\n"
                "printed (polling every 150 ms while there is nothing new).\n",
};
