#include "agent/desired.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "proto/wire.h"

enum type {
	T_I64,  /* int64_t */
	T_INT,  /* int */
	T_BOOL, /* int, 0 or 1 */
	T_STR,  /* const char *, borrowed */
	T_STRV, /* struct desired_strv */
	T_GPUS, /* struct desired_gpus */
	T_JSON, /* const json_t *, borrowed */
};

#define AT(member) offsetof(struct desired_rank, member)

/* The desired entry's fields the agent reads (proto/wire.c, wire_desired,
 * checks them; wire_desired may have more, which the agent does not use).
 * held: read from every entry of every answer (desired_parse), else only
 * for a rank to start (desired_deepen). dflt: an absent integer's value. */
static const struct field {
	const char *name;
	enum type type;
	size_t offset;
	int held;
	int64_t dflt;
} fields[] = {
        {"attempt_id", T_I64, AT(attempt_id), 1, -1},
        {"rank", T_INT, AT(rank), 1, -1},
        {"job_id", T_I64, AT(job_id), 1, 0},
        {"session", T_BOOL, AT(session), 1, 0},
        {"gpus", T_GPUS, AT(gpus), 1, 0},
        {"env", T_JSON, AT(env), 1, 0},
        {"notice", T_JSON, AT(notice), 1, 0},
        {"restore", T_STR, AT(restore), 1, 0},
        {"hang_timeout_ms", T_I64, AT(hang_timeout_ms), 1, 0},
        {"command", T_STRV, AT(command), 0, 0},
        {"cwd", T_STR, AT(cwd), 0, 0},
        {"grace_ms", T_I64, AT(grace_ms), 0, 10000},
        {"env_base", T_STR, AT(env_base), 0, 0},
        {"cpu_millis", T_I64, AT(cpu_millis), 0, 0},
        {"memory_bytes", T_I64, AT(memory_bytes), 0, 0},
        {"head_addr", T_STR, AT(head_addr), 0, 0},
        {"head", T_STR, AT(head), 0, 0},
        {"worker", T_STR, AT(worker), 0, 0},
        {"head_timeout_ms", T_I64, AT(head_timeout_ms), 0, 300000},
        {"mpi", T_BOOL, AT(mpi), 0, 0},
        {"mpi_hosts", T_STRV, AT(mpi_hosts), 0, 0},
        {"task", T_BOOL, AT(task), 0, 0},
        {"as_root", T_BOOL, AT(as_root), 0, 0},
#ifdef ANVIL_FIELD_PROBE
        {"probe", T_STR, AT(probe), 0, 0},
#endif
};

#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static void read_strv(const json_t *v, struct desired_strv *out)
{
	size_t n = json_array_size(v), i;
	const json_t *x;
	out->v = xcalloc(n + 1, sizeof(*out->v));
	out->n = 0;
	json_array_foreach ((json_t *)v, i, x)
		if (json_is_string(x))
			out->v[out->n++] = json_string_value(x);
}

/* Held: the mask only (what every answer needs); deep: every element. */
static void read_gpus(const json_t *v, struct desired_gpus *out, int deep)
{
	size_t i;
	const json_t *g;
	if (deep)
		out->index = xcalloc(json_array_size(v) + 1, sizeof(*out->index));
	json_array_foreach ((json_t *)v, i, g) {
		int64_t x = json_is_integer(g) ? (int64_t)json_integer_value(g) : -1;
		if (x >= 0 && x < 64)
			out->mask |= 1ull << x;
		if (deep)
			out->index[out->n++] = x;
	}
}

static void read_field(const json_t *entry, const struct field *f, struct desired_rank *r, int deep)
{
	void *at = (char *)r + f->offset;
	const json_t *v = json_object_get(entry, f->name);
	switch (f->type) {
	case T_I64:
		*(int64_t *)at = json_is_integer(v) ? (int64_t)json_integer_value(v) : f->dflt;
		break;
	case T_INT:
		*(int *)at = json_is_integer(v) ? (int)json_integer_value(v) : (int)f->dflt;
		break;
	case T_BOOL: *(int *)at = json_is_boolean(v) ? json_is_true(v) : (int)f->dflt; break;
	case T_STR: *(const char **)at = json_is_string(v) ? json_string_value(v) : NULL; break;
	case T_STRV: read_strv(v, at); break;
	case T_GPUS: read_gpus(v, at, deep); break;
	case T_JSON: *(const json_t **)at = v; break;
	}
}

void desired_parse(const json_t *entry, struct desired_rank *r)
{
	memset(r, 0, sizeof(*r));
	r->entry = json_incref((json_t *)entry);
	for (size_t i = 0; i < NFIELDS; i++)
		if (fields[i].held)
			read_field(entry, &fields[i], r, 0);
}

int desired_deepen(struct desired_rank *r, char *why, size_t whylen)
{
	json_t *known = wire_known(r->entry, &wire_desired);
	int rc = wire_check(known, &wire_desired, why, whylen);
	json_decref(known);
	if (rc)
		return rc;
	/* checked: the held fields read the same again, but for the GPUs'
	 * every element, which only a start needs */
	r->gpus = (struct desired_gpus){0};
	for (size_t i = 0; i < NFIELDS; i++)
		if (!fields[i].held || fields[i].type == T_GPUS)
			read_field(r->entry, &fields[i], r, 1);
	r->deep = 1;
	return 0;
}

void desired_cleanup(struct desired_rank *r)
{
	free(r->command.v);
	free(r->mpi_hosts.v);
	free(r->gpus.index);
	json_decref(r->entry);
	memset(r, 0, sizeof(*r));
}

const char *desired_var(const struct desired_rank *r, const char *key, const char *dflt)
{
	return jv_str(r->env, key, dflt);
}

/* The answer's shared environment r names, in *base (NULL: none named):
 * 0, or ERR_INVALID with why. */
static int env_base(const struct desired_rank *r, const json_t *envs, const json_t **base,
                    char *why, size_t whylen)
{
	const char *k;
	const json_t *v;
	*base = NULL;
	if (!r->env_base)
		return 0;
	*base = json_object_get(envs, r->env_base);
	if (!json_is_object(*base)) {
		snprintf(why, whylen, "field 'env_base': '%.23s' is not in the answer's envs",
		         r->env_base);
		return ERR_INVALID;
	}
	json_object_foreach ((json_t *)*base, k, v) {
		if (!json_is_string(v)) {
			snprintf(why, whylen, "envs['%.23s']: variable '%.64s' is not a string",
			         r->env_base, k);
			return ERR_INVALID;
		}
	}
	return 0;
}

char **desired_envv(const struct desired_rank *r, const json_t *envs, const json_t *extra,
                    char *why, size_t whylen)
{
	const json_t *env = r->env, *base, *v;
	const char *k;
	if (env_base(r, envs, &base, why, whylen) != 0)
		return NULL;
	size_t i = 0;
	char **envv = xcalloc(json_object_size(base) + json_object_size(env) +
	                              json_object_size(extra) + 2,
	                      sizeof(char *));
	json_object_foreach ((json_t *)base, k, v) {
		if (!json_object_get(env, k))
			envv[i++] = xasprintf("%s=%s", k, json_string_value(v));
	}
	json_object_foreach ((json_t *)env, k, v)
		envv[i++] = xasprintf("%s=%s", k, json_string_value(v));
	json_object_foreach ((json_t *)extra, k, v) {
		if (!json_object_get(env, k) && !json_object_get(base, k))
			envv[i++] = xasprintf("%s=%s", k, json_string_value(v));
	}
#ifdef ANVIL_FIELD_PROBE
	/* last: the executor keeps the last value of a name (exec_env_set) */
	if (r->probe)
		envv[i++] = xasprintf("ANVIL_PROBE=%s", r->probe);
#endif
	envv[i] = NULL;
	return envv;
}

int desired_notice(const struct desired_rank *r, int64_t *id, const char **text, char *why,
                   size_t whylen)
{
	if (!r->notice)
		return 0;
	if (wire_check(r->notice, &wire_notice, why, whylen) != 0)
		return ERR_INVALID;
	*id = jv_int(r->notice, "id", 0);
	*text = jv_str(r->notice, "text", "");
	return 1;
}
