/* desired.h - a rank the server wants on this node, read from its JSON once.
 *
 * Each entry of a sync answer's "ranks" (proto/wire.h, wire_desired) is
 * parsed here into a struct desired_rank, at the sync boundary
 * (agent/syncer.c); past it the syncer and the launchers (agent/launch.h,
 * mpi.h, task.h, the executor's exec_spec) read the record, never the
 * JSON. The parse is one table in desired.c (JSON name, type, offset into
 * the struct, default): a new desired field is a member here, a line
 * there, and its consumer.
 *
 * Two depths, because an answer lists the node's whole set every time and
 * nearly all of it is running already:
 *   desired_parse   the fields the syncer keeps of EVERY entry of every
 *                   answer applied (the table's "held" lines: the rank's
 *                   key, job, session, GPUs, notice and own variables).
 *                   Unchecked and never failing: a wrong type reads as
 *                   the default, as the entry is not checked until the
 *                   rank is to start.
 *   desired_deepen  the rest, for a rank about to start (or be described,
 *                   exec_describe): checks the entry against wire_desired
 *                   first, then reads the other lines.
 *
 * Ownership and lifetime: a record holds one reference to its JSON entry;
 * its strings and JSON members are borrowed from that entry and live until
 * desired_cleanup. The arrays it makes (command.v, mpi_hosts.v,
 * gpus.index) are its own, freed by desired_cleanup; their strings are
 * still the entry's. What desired_envv returns is the caller's.
 *
 * The maps the agent passes on as they are stay JSON (env, notice), but
 * only this file reads them (desired_var, desired_envv, desired_notice).
 *
 * Pure (no I/O, no state); any one thread per record, the agent's main
 * thread in practice.
 */
#ifndef ANVIL_AGENT_DESIRED_H
#define ANVIL_AGENT_DESIRED_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* A NULL-terminated array of borrowed strings: n of them. */
struct desired_strv {
	const char **v;
	size_t n;
};

/* The node's GPUs (by index) a rank gets. */
struct desired_gpus {
	uint64_t mask; /* the integers of "gpus" from 0 to 63 (held) */
	/* every element in order, one that is not an integer as -1 (deepened;
	 * NULL before) */
	int64_t *index;
	size_t n;
};

struct desired_rank {
	/* held: read from every entry (desired_parse) */
	int64_t attempt_id; /* -1: absent (an entry the start refuses) */
	int rank;           /* -1: absent */
	int64_t job_id;
	int session;
	struct desired_gpus gpus;
	const json_t *env;    /* its own variables, the server's; NULL: none */
	const json_t *notice; /* a session's notice (desired_notice); NULL: none */
	const char *restore;  /* the checkpoint restored at its start (agent/ckpt.h); NULL: none */
	int64_t hang_timeout_ms; /* no progress this long: hung (agent/hang.h); 0: never */
	/* deepened: read for a rank to start (desired_deepen) */
	struct desired_strv command;
	const char *cwd; /* NULL: the attempt's output directory */
	int64_t grace_ms;
	const char *env_base; /* the key in the answer's "envs"; NULL: none */
	int64_t cpu_millis, memory_bytes;
	const char *head_addr, *head, *worker; /* a job with a head (agent/launch.h) */
	int64_t head_timeout_ms;
	int mpi;
	struct desired_strv mpi_hosts;
	int task;
	int as_root;
#ifdef ANVIL_FIELD_PROBE
	const char *probe; /* ANVIL_PROBE in the rank's environment; NULL: none */
#endif
	/* the parse's own */
	json_t *entry; /* one reference */
	int deep;      /* desired_deepen succeeded */
};

/* Reads the held fields of entry into r (zeroed first); r takes a
 * reference to entry. Never fails; desired_cleanup in any case. */
void desired_parse(const json_t *entry, struct desired_rank *r);

/* Checks r's entry against wire_desired and reads the rest of it: 0, or
 * ERR_INVALID with why (naming the field), r then only held. */
int desired_deepen(struct desired_rank *r, char *why, size_t whylen);

void desired_cleanup(struct desired_rank *r);

/* The value of variable key in the entry's own "env" (the server's
 * variables, never env_base's), or dflt. Borrowed from the entry. */
const char *desired_var(const struct desired_rank *r, const char *key, const char *dflt);

/* The rank's environment as the executor takes it ("KEY=VALUE",
 * NULL-terminated; free each and the array): the shared one its entry
 * names (env_base, a key of the answer's envs) under its own env, then the
 * agent's variables in extra (a string map) that neither set. NULL, with
 * why, when the entry names an environment the answer lacks or one that
 * is not all strings. A deepened r. */
char **desired_envv(const struct desired_rank *r, const json_t *envs, const json_t *extra,
                    char *why, size_t whylen);

/* A session's notice: 1 with its id and text (borrowed from the entry),
 * 0 when r has none, ERR_INVALID with why when it fails wire_notice. */
int desired_notice(const struct desired_rank *r, int64_t *id, const char **text, char *why,
                   size_t whylen);

#endif
