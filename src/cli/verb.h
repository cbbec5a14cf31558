/* verb.h - the client verbs and what they share.
 *
 * Each verb is one file (verb_run.c, verb_jobs.c, ...) exporting a const
 * struct verb: its name, its option table, how many positionals it takes,
 * its help text and the function that does the work. cli.c keeps the table of
 * verbs and does the common part (parse, --help, positional count) before
 * calling verb->fn with a struct verb_ctx. Verb functions return the process
 * exit status (CLI_EXIT_*), having printed any message themselves.
 *
 * The *_render functions turn the server's JSON into the human tables and
 * are pure (the caller passes the clock), so tests can check them directly.
 * Single-threaded; strings in a ctx borrow from argv.
 */
#ifndef ANVIL_VERB_H
#define ANVIL_VERB_H

#include <jansson.h>
#include <stdint.h>

#include "base/buf.h"
#include "cli/cliargs.h"
#include "cli/cliconn.h"

struct verb_ctx {
	const struct verb *verb;
	struct cliargs args;
	const char *server_flag; /* --server after the verb, else before it */
	const char *token_flag;
	struct cliconn conn; /* valid after verb_connect() */
	int connected;
};

typedef int (*verb_fn)(struct verb_ctx *v);

struct verb {
	const char *name;
	verb_fn fn;
	const struct cliargs_opt *opts;
	int flags;            /* CLIARGS_* */
	int min_pos, max_pos; /* positionals (after the options are removed) */
	const char *usage;    /* what follows "anvil NAME " in the usage line */
	const char *summary;  /* one line for `anvil help` */
	const char *help;     /* description, ends with a newline */
};

extern const struct verb verb_run, verb_jobs, verb_show, verb_logs, verb_cancel, verb_nodes,
        verb_why, verb_queue, verb_team, verb_node, verb_events, verb_shell, verb_attach, verb_exec,
        verb_wf, verb_lineage, verb_fleet;

/* Resolves the server (cliconn_resolve). CLI_EXIT_OK, or prints why not and
 * returns CLI_EXIT_UNREACHABLE. */
int verb_connect(struct verb_ctx *v);
void verb_cleanup(struct verb_ctx *v);

/* Prints "anvil VERB: <message>" and a pointer to --help; CLI_EXIT_USAGE. */
int verb_usage_error(const struct verb_ctx *v, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
/* A job as a user names it, and as `anvil jobs` prints it: JOB (12), or
 * ARRAY_INDEX (12_3), an array's member by the array's id and its index.
 * Every verb that takes a job reads it with verb_job_ref_parse. */
struct verb_job_ref {
	int64_t id;    /* the job's id; with an index, the array's */
	int64_t index; /* the member's index; -1: none given */
};
/* Parses s (digits, then optionally "_" and digits): 0, or ERR_INVALID
 * with the message in err ("JOB: "12_x" is not a job: ..."). Pure. */
int verb_job_ref_parse(const char *s, struct verb_job_ref *ref, char *err, size_t errlen);
/* verb_job_ref_parse for a verb's argument: CLI_EXIT_OK or a usage error
 * (printed). */
int verb_job_ref(const struct verb_ctx *v, const char *s, struct verb_job_ref *ref);
/* The id of the job ref names: ref->id, or for ARRAY_INDEX the member's,
 * which the server is asked for (GET /v1/jobs?array=ID&index=I; connects
 * first). CLI_EXIT_OK, or the failure printed: CLI_EXIT_FAILED when the
 * array has no member of that index. */
int verb_job_resolve(struct verb_ctx *v, const struct verb_job_ref *ref, int64_t *id);
/* Both: a JOB argument to its job's id. */
int verb_job_arg(struct verb_ctx *v, const char *s, int64_t *id);
/* "12" or "12_3": how a listing names job j (its array's id and its
 * index for a member), into out. */
void verb_job_name(const json_t *job, char *out, size_t len);

/* Pretty-prints the server's JSON to stdout. */
void verb_print_json(const json_t *root);
/* Appends an argv-style array as a shell would read it back ('quoted'
 * where needed), cut to max characters with "..." (0: no cut). */
void verb_command_line(const json_t *command, size_t max, struct buf *out);
/* Appends s with control characters shown as '?' (terminal safety). */
void verb_add_clean(struct buf *out, const char *s);
/* Whether a job state is final: succeeded, failed, cancelled, lost. */
int verb_state_final(const char *state);
/* The integer field name of obj, or dflt when absent or null. */
int64_t verb_int(const json_t *obj, const char *name, int64_t dflt);
/* The string field name of obj, or "" when absent or null. */
const char *verb_str(const json_t *obj, const char *name);

/* The exit status of `anvil run --wait` for a final job: 0 succeeded, the
 * job's exit_code (1-255) failed, 130 cancelled, 75 lost; 1 otherwise. */
int verb_run_exit(const json_t *job);
/* Says on stderr how a final job that did not succeed ended ("anvil: job 7
 * failed with exit code 3: rank 1 on node-2 exited non-zero"). */
void verb_report_end(int64_t id, const json_t *job);

struct attach_result;
/* The exit status of `anvil shell` and `anvil attach` once the stream to
 * rank of job ended as r says (cli/attach.h); says why on stderr when it
 * was not the shell's own exit: stopped by the cluster, detached, or lost
 * (then the job's end, if any). */
int verb_attach_finish(struct verb_ctx *v, int64_t job, int64_t rank,
                       const struct attach_result *r);

/* What verb_logs_stream prints (verb_logs.c says how it reads). */
struct verb_logs_opts {
	int64_t rank; /* only this rank's output; -1: every rank's, labeled "R: " */
	int follow;   /* keep reading until the job is final and all is printed */
	int64_t tail; /* > 0: each stream starts with its last tail lines */
};
#define VERB_LOGS_TAIL_MAX      100000 /* lines: the server's bound */
#define VERB_LOGS_FAILURE_LINES 20

/* Prints the output of job's latest attempt: each rank's stdout on stdout
 * and stderr on stderr, in whole lines. The exit status: CLI_EXIT_FAILED
 * also when a stream could not be read. On return *job_out (when not NULL)
 * holds the last job object seen, or NULL (json_decref it). */
int verb_logs_stream(struct verb_ctx *v, int64_t job, const struct verb_logs_opts *o,
                     json_t **job_out);
/* The rank a failed job failed on: the one its reason names ("rank 1 on
 * node-2 exited non-zero"), else the first that failed to start or exited
 * with the job's code; -1 when none (or the job did not fail). */
int64_t verb_logs_failed_rank(const json_t *job);
/* After a job failed on another rank than shown_rank (the one whose
 * output was printed; -1: all were): prints that rank's last
 * VERB_LOGS_FAILURE_LINES lines of stdout, then of stderr, labeled, on
 * stderr under a line that says whose they are. */
void verb_logs_failure(struct verb_ctx *v, const json_t *job, int64_t shown_rank);

/* Human renderings of {"jobs": [...]}'s array, one JOB, and the nodes array.
 * now_ms is the wall clock in epoch milliseconds. */
/* The job listing: an array the server grouped as one row ("12_[0-29%8]",
 * its members counted by state), a member listed alone as "12_3". */
void verb_jobs_render(const json_t *jobs, int64_t now_ms, struct buf *out);
void verb_show_render(const json_t *job, int64_t now_ms, struct buf *out);
void verb_nodes_render(const json_t *nodes, int64_t now_ms, struct buf *out);
void verb_why_render(const json_t *job, int64_t now_ms, struct buf *out);
void verb_queues_render(const json_t *resp, int64_t now_ms, struct buf *out);
void verb_events_render(const json_t *events, int64_t now_ms, struct buf *out);
/* The one line `anvil cancel ARRAY` prints for the answer of
 * POST /v1/jobs/ID/cancel?array=1: how many members it cancelled. */
void verb_cancel_report(const json_t *resp, struct buf *out);

/* Renders a listing or an object for people. */
typedef void (*verb_render_fn)(const json_t *v, int64_t now_ms, struct buf *out);
/* GETs path and prints the answer: its JSON with --json, else render() of
 * the answer's member `key` (the whole answer when key is NULL). Returns the
 * verb's exit status. */
int verb_get_print(struct verb_ctx *v, const char *path, const char *key, verb_render_fn render);
/* Prints an answer already in hand the same way. */
void verb_print(const struct verb_ctx *v, const json_t *resp, const char *key,
                verb_render_fn render);
/* For verbs whose one positional is a job id: GET /v1/jobs/ID<tail> ("" or
 * "/why") and print its "job" with render (or the JSON with --json). */
int verb_job_print(struct verb_ctx *v, const char *tail, verb_render_fn render);
/* The option table of verbs whose only option is --json. */
extern const struct cliargs_opt verb_json_opts[];

#endif
