/* task.h - a workflow task's rank on its node: the wrapper `anvil _task`,
 * a hidden verb of the anvil binary (docs/workflows.md, "How a task runs
 * on a node").
 *
 * The server flags a workflow task's desired entries with "task" and gives
 * each rank the task document in ANVIL_TASK (JSON, made by the workflow
 * engine) and the attempt's exec token in ANVIL_EXEC_TOKEN. The agent runs
 * the rank as `SELF _task --work-dir WORK_DIR --grace-ms G -- COMMAND...`
 * (task_argv) with ANVIL_SERVER added. The wrapper then:
 *
 *   1. bundle    unpacks the code bundle once per node under
 *                WORK_DIR/bundles/<hex>/ (a lock file keeps concurrent
 *                ranks from racing; a temporary tree renamed into place),
 *                which becomes the command's working directory;
 *   2. inputs    downloads each fetched upstream output into
 *                WORK_DIR/tasks/<attempt>/in/<task>/<output> (a "dir" is a
 *                tar, unpacked; a list has one path per key, .../<i>) and
 *                renders every {{ ref }} of a fetched ref in the command's
 *                arguments and the render_env variables into those paths
 *                (task_render; other templates stay as written);
 *   3. outputs   gives the command ANVIL_OUTPUT_DIR=WORK_DIR/tasks/<attempt>/out;
 *   4. restore   with a checkpoint key: an empty ANVIL_CHECKPOINT_DIR gets
 *                the stored checkpoint (a tar), unpacked aside and renamed
 *                in, so a killed restore leaves it empty;
 *   5. runs      the command as its child, in the wrapper's process group
 *                (the agent's stop signal reaches both); a stop signal is
 *                caught, and the command is killed after 3/4 of the grace,
 *                leaving the rest for 6;
 *   6. saves     on NODE_RANK 0, whatever the command's end: the checkpoint
 *                directory, packed, when not empty and changed since the
 *                restore, to the checkpoint key;
 *   7. publishes on the outputs rank, if the command exited 0: each
 *                declared output (a value's text, a file's or a
 *                directory's content key) to the object store and then to
 *                POST /v1/workflows/runs/RUN/outputs, with, when the
 *                document says "trace", the files of the bundle (or of
 *                code_dir) the command and its children looked up, read
 *                or listed while 5 ran, as readset.h recorded them on
 *                that rank;
 *
 * and exits with the command's status (128+N for signal N); a failure of
 * its own is one line on stderr, "anvil _task: ...", and a non-zero exit
 * (the command's status if that was not 0, else 1). A stop signal before
 * the command starts ends the wrapper at once.
 *
 * The document's parts (task_doc_parse) and the rendering are pure, for
 * tests; task_main is the process; task_argv runs in the agent's main
 * thread.
 */
#ifndef ANVIL_AGENT_TASK_H
#define ANVIL_AGENT_TASK_H

#include <stddef.h>
#include <stdint.h>

#define TASK_DOC_ENV     "ANVIL_TASK"
#define TASK_VALUE_MAX   (64 * 1024) /* bytes of a "value" output */
#define TASK_FETCH_MAX   1000        /* fetch items of a document */
#define TASK_KEYS_MAX    100000      /* keys of one fetch item */
#define TASK_OUTPUTS_MAX 1000        /* declared outputs */
#define TASK_NAME_MAX    63          /* a task's or an output's name */

enum task_kind { TASK_FILE, TASK_DIR, TASK_VALUE };

struct desired_rank;

/* An upstream output to download: "ref" is tasks.TASK.outputs.OUTPUT. */
struct task_fetch {
	char *ref;
	char task[TASK_NAME_MAX + 1];
	char output[TASK_NAME_MAX + 1];
	enum task_kind kind; /* TASK_FILE or TASK_DIR */
	int list;            /* one path per key, else exactly one key */
	char **keys;         /* content keys, "sha256/<64 hex>" */
	size_t nkeys;
	char **paths; /* task_fetch_paths: where each key goes */
	char *joined; /* task_fetch_paths: what its templates render to */
};

struct task_output {
	char name[TASK_NAME_MAX + 1];
	enum task_kind kind;
};

/* ANVIL_TASK, parsed; unknown keys are ignored, absent optional ones are
 * 0 or NULL. */
struct task_doc {
	int64_t exec, run, index;
	char *task;           /* the task's name; NULL: not given */
	int64_t rank_outputs; /* the NODE_RANK that publishes the outputs */
	char *bundle;         /* the code bundle's content key, or NULL */
	struct task_fetch *fetch;
	size_t nfetch;
	char **render_env; /* names of variables whose values are rendered */
	size_t nrender;
	struct task_output *outputs;
	size_t noutputs;
	char *checkpoint; /* the named key of the checkpoint, or NULL */
	int trace;        /* record the files of the bundle the command reads (readset.h) */
	char *code_dir;   /* the code's tree when there is no bundle (wf run --local), or NULL */
};

/* Parses the document: 0, or ERR_INVALID with the field and the reason in
 * err ("fetch[1].keys[0]: ..."). d needs task_doc_cleanup either way. */
int task_doc_parse(const char *text, struct task_doc *d, char *err, size_t errlen);
void task_doc_cleanup(struct task_doc *d);

/* Sets each fetch item's paths under in_dir (in_dir/TASK/OUTPUT, or for a
 * list in_dir/TASK/OUTPUT/I) and what it renders to (the path, or a list's
 * paths joined by spaces). */
void task_fetch_paths(struct task_doc *d, const char *in_dir);

/* text with every {{ ref }} whose ref is a fetch item's replaced by that
 * item's rendering; other templates, and an unclosed "{{", are left as
 * written. malloc'd; free() it. */
char *task_render(const char *text, const struct task_fetch *fetch, size_t nfetch);

/* The argv (NULL-terminated; task_argv_free) that runs the rank of
 * desired record d (agent/desired.h, deepened) under the wrapper at
 * self, or NULL when d is not a task's. */
char **task_argv(const struct desired_rank *d, const char *self, const char *work_dir);
void task_argv_free(char **argv);
/* When the task of desired record d needs nothing of its wrapper but its
 * code bundle, and that bundle is already unpacked on this node: the
 * tree (malloc'd), for the agent to start the command in directly, as
 * the wrapper would, without a second process start per task. NULL: run
 * the wrapper (task_argv). */
char *task_direct_cwd(const struct desired_rank *d, const char *work_dir);

/* `anvil _task --work-dir DIR [--grace-ms G] -- COMMAND...`: the wrapper
 * process; returns its exit status. */
int task_main(int argc, char **argv);

#endif
