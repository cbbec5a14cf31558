#include "proto/wire.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct wire_field sync_request_fields[] = {
        {"node_id", JV_INT, 1, 1, INT64_MAX, "the node's id, from register"},
        {"generation", JV_INT, 0, 0, INT64_MAX,
         "the generation of the last answer the agent applied"},
        {"wait_ms", JV_INT, 0, 0, 600000,
         "how long the server may hold the poll (capped at half the node timeout)"},
        {"facts", JV_OBJECT, 0, 0, 0, "the node's facts as in register, while they changed"},
        {"ranks", JV_ARRAY, 0, 0, 100000,
         "a report (below) of every rank started and not yet acknowledged"},
        {"health", JV_OBJECT, 0, 0, 0, "the GPU health report, while it changed"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field report_fields[] = {
        {"attempt_id", JV_INT, 1, 1, INT64_MAX, "the attempt the rank belongs to"},
        {"rank", JV_INT, 1, 0, 1023, "the rank's number in its attempt"},
        {"state", JV_STRING, 1, 1, 31, "`starting`, `running`, `exited` or `failed_to_start`"},
        {"pid", JV_INT, 0, 0, INT32_MAX, "the rank's process, once it runs"},
        {"exit_code", JV_INT, 0, 0, 255, "with `exited`: the exit status (255 when lost)"},
        {"signal", JV_INT, 0, 0, 128, "with `exited`: the signal that killed it, else 0"},
        {"error", JV_STRING, 0, 0, 4096,
         "with `failed_to_start`, or `exited` when the agent lost the rank: why"},
        {"checkpoint_ms", JV_INT, 0, 0, INT64_MAX,
         "wall-clock time of the rank's newest checkpoint"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field sync_answer_fields[] = {
        {"generation", JV_INT, 1, INT64_MIN, INT64_MAX,
         "the node's generation: changes whenever its desired set does"},
        {"node_timeout_ms", JV_INT, 0, 0, INT64_MAX,
         "how long the node may be silent before it is marked lost"},
        {"ranks", JV_ARRAY, 1, 0, 0,
         "a desired entry (below) for every rank the node should run now"},
        {NULL, 0, 0, 0, 0, NULL},
};

static const struct wire_field desired_fields[] = {
        {"attempt_id", JV_INT, 1, 1, INT64_MAX, "the attempt; attempt ids are never reused"},
        {"job_id", JV_INT, 0, 0, INT64_MAX, "the attempt's job"},
        {"rank", JV_INT, 1, 0, 1 << 20, "the rank's number in its attempt"},
        {"command", JV_STRINGS, 1, 1, 1024, "the program and its arguments"},
        {"cwd", JV_STRING, 0, 0, 4096, "the work directory; `null`: the agent's"},
        {"gpus", JV_ARRAY, 0, 0, 1024, "the indexes of the node's GPUs the rank gets"},
        {"grace_ms", JV_INT, 0, 0, 600000, "from SIGTERM to SIGKILL when it is stopped"},
        {"env", JV_STRING_MAP, 0, 0, 4096, "the rank's environment (below)"},
        {"cpu_millis", JV_INT, 0, 1, 1LL << 40,
         "CPU time in thousandths of a CPU, when the job set `cpus`"},
        {"memory_bytes", JV_INT, 0, 1, INT64_MAX,
         "the memory limit, when the job set `memory_bytes`"},
        {"session", JV_BOOL, 0, 0, 0,
         "an interactive session: the agent runs the command under a session holder"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The defaults are the server's (server/jobs.c); what only the server can
 * check (the queue exists, the command's program and the selectors are not
 * empty, env names, exported names are in env) is said in the meaning. */
static const struct wire_field submit_fields[] = {
        {"command", JV_STRINGS, 1, 1, 1024, "the program and its arguments; the program not empty"},
        {"gpus", JV_INT, 0, 1, WIRE_MAX_GPUS,
         "whole GPUs per node; default 1 (CPU-only jobs are not scheduled yet)"},
        {"nodes", JV_INT, 0, 1, 1024, "nodes, one rank on each; default 1"},
        {"queue", JV_STRING, 0, 1, 63, "an existing queue; default `default`"},
        {"team", JV_STRING, 0, 1, 63,
         "whose quota and fair share it counts against; default `default`"},
        {"priority", JV_INT, 0, -1000, 1000, "priority within the queue; default 0"},
        {"name", JV_STRING, 0, 0, 128, "a name to show in listings; default `\"\"`"},
        {"env", JV_STRING_MAP, 0, 0, 1024,
         "the ranks' environment (below): names not empty and without `=`"},
        {"exported", JV_STRINGS, 0, 0, 1024,
         "names in `env` that the client exported from its own environment (below)"},
        {"cwd", JV_STRING, 0, 1, 4096,
         "the working directory on the nodes, an absolute path; default: the attempt's "
         "output directory"},
        {"grace_ms", JV_INT, 0, 0, 600000, "SIGTERM-to-SIGKILL grace when stopping; default 10000"},
        {"time_limit_ms", JV_INT, 0, 1000, 366LL * 24 * 3600 * 1000,
         "the attempt is stopped when it is reached; lets the scheduler backfill; default: "
         "the queue's"},
        {"gpu_type", JV_STRING, 0, 1, 95,
         "a GPU model, matched case-insensitively on the model's last word (`h200` matches "
         "`NVIDIA H200`); default: any"},
        {"min_gpu_memory_bytes", JV_INT, 0, 0, 1LL << 50,
         "memory every assigned GPU must have; default 0"},
        {"pool", JV_STRING, 0, 1, 63, "only nodes in this pool; default: any"},
        {"selectors", JV_STRING_MAP, 0, 0, 4,
         "labels every node must carry (`{\"disk\": \"nvme\"}`): keys not empty and without "
         "`=`, values not empty"},
        {"checkpointing", JV_BOOL, 0, 0, 0,
         "the job checkpoints: preferred as a preemption victim (it loses less); default false"},
        {"cpus", JV_NUMBER, 0, 10, 1024 * 1000, /* CFS gives no less than 1 ms per 100 ms */
         "CPU time per rank, in CPUs (`0.5`, `4`), kept to the thousandth; a CFS quota "
         "(below); default: no limit"},
        {"memory_bytes", JV_INT, 0, 4LL << 20, 64LL << 40,
         "memory per rank; past it the kernel reclaims, then OOM-kills a process of the rank "
         "(SIGKILL: exit code 137 when it is the command); default: no limit"},
        {"session", JV_BOOL, 0, 0, 0,
         "an interactive session (`anvil shell`): the command runs in a terminal that "
         "`attach` streams reach; default false"},
        {NULL, 0, 0, 0, 0, NULL},
};

/* The first frame of an exec stream (proto/stream.h, STREAM_EXEC): what to
 * run in the rank. The exec helper on the node validates it. */
static const struct wire_field exec_fields[] = {
        {"command", JV_STRINGS, 1, 1, 1024, "the program and its arguments; the program not empty"},
        {"tty", JV_BOOL, 0, 0, 0,
         "run it in a terminal (stdout and stderr are one); default false"},
        {"stdin", JV_BOOL, 0, 0, 0,
         "the client sends stdin frames; without, stdin is /dev/null; default false"},
        {"rows", JV_INT, 0, 1, 65535, "with `tty`: the terminal's rows; default 24"},
        {"cols", JV_INT, 0, 1, 65535, "with `tty`: the terminal's columns; default 80"},
        {"term", JV_STRING, 0, 1, 128, "with `tty`: TERM for the command; default the rank's"},
        {NULL, 0, 0, 0, 0, NULL},
};

const struct wire_record wire_sync_request = {"sync_request", sync_request_fields};
const struct wire_record wire_report = {"report", report_fields};
const struct wire_record wire_sync_answer = {"sync_answer", sync_answer_fields};
const struct wire_record wire_desired = {"desired", desired_fields};
const struct wire_record wire_submit = {"submit", submit_fields};
const struct wire_record wire_exec = {"exec", exec_fields};

const struct wire_record *const wire_records[] = {
        &wire_sync_request, &wire_report, &wire_sync_answer, &wire_desired, &wire_submit,
        &wire_exec,         NULL,
};

const char *const wire_rank_env[] = {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NNODES",
        "NODE_RANK",
        "NPROC_PER_NODE",
        "WORLD_SIZE",
        "ANVIL_JOB_ID",
        "ANVIL_ATTEMPT",
        "ANVIL_ATTEMPT_ID",
        "ANVIL_NODE",
        "ANVIL_JOB_NAME",
        "ANVIL_CHECKPOINTING",
        NULL,
};

const struct wire_field *wire_field(const struct wire_record *r, const char *name)
{
	for (const struct wire_field *f = r->fields; f->name; f++)
		if (strcmp(f->name, name) == 0)
			return f;
	return NULL;
}

static int has_type(const json_t *v, enum jv_type t)
{
	switch (t) {
	case JV_STRING: return json_is_string(v);
	case JV_INT: return json_is_integer(v);
	case JV_BOOL: return json_is_boolean(v);
	case JV_STRINGS:
	case JV_ARRAY: return json_is_array(v);
	case JV_OBJECT:
	case JV_STRING_MAP: return json_is_object(v);
	case JV_NUMBER: return json_is_number(v);
	}
	return 0;
}

void wire_set(json_t *o, const struct wire_record *r, const char *name, json_t *v)
{
	const struct wire_field *f = wire_field(r, name);
	/* A programming error, caught by every test that builds the record. */
	if (!f || !v || !(has_type(v, f->type) || (json_is_null(v) && !f->required))) {
		fprintf(stderr, "anvil: %s record: field '%s' is %s\n", r->name, name,
		        f ? "of the wrong type" : "not in its table");
		abort();
	}
	json_object_set_new(o, name, v);
}

/* r's table as jv_check() takes it, in fields[WIRE_MAX_FIELDS + 1]. */
static void jv_fields(const struct wire_record *r, struct jv_field *fields)
{
	size_t n = 0;
	for (const struct wire_field *f = r->fields; f->name; f++) {
		assert(n < WIRE_MAX_FIELDS);
		fields[n++] = (struct jv_field){f->name, f->type, f->required, f->min, f->max};
	}
	fields[n] = (struct jv_field){NULL, 0, 0, 0, 0};
}

int wire_check(const json_t *o, const struct wire_record *r, char *err, size_t errlen)
{
	struct jv_field fields[WIRE_MAX_FIELDS + 1];
	jv_fields(r, fields);
	return jv_check(o, fields, err, errlen);
}

int wire_check_each(const json_t *o, const char *key, const struct wire_record *r, char *err,
                    size_t errlen)
{
	struct jv_field fields[WIRE_MAX_FIELDS + 1];
	jv_fields(r, fields);
	return jv_check_each(o, key, fields, err, errlen);
}

json_t *wire_known(const json_t *o, const struct wire_record *r)
{
	json_t *out = json_object();
	for (const struct wire_field *f = r->fields; json_is_object(o) && f->name; f++) {
		json_t *v = json_object_get(o, f->name);
		if (v)
			json_object_set(out, f->name, v);
	}
	return out;
}
