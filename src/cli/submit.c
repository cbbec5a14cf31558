#include "cli/submit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/verb.h"
#include "model/fields.h"
#include "proto/wire.h"

/* ---- what is never exported ---- */

/* Variables that describe the client's host or login session, which a rank
 * on another machine does not share: exported, they would point it at
 * sockets, displays and directories that are not there, or tell it that it
 * runs where it does not. A name ending in '*' is a prefix. docs/cli.md
 * lists them with the same reasons. */
static const struct never {
	const char *name;
	const char *why;
} never[] = {
        {"ANVIL_*", "it configures the client (its server, its token) or anvil sets it per rank"},
        {"HOSTNAME", "it names the client's host, and a rank runs on another"},
        {"HOST", "it names the client's host, and a rank runs on another"},
        {"PWD", "the job's working directory is sent on its own (--cwd)"},
        {"OLDPWD", "it is the client shell's previous directory"},
        {"SHLVL", "it counts the client's nested shells"},
        {"_", "it is the client shell's last command"},
        {"TERM", "it describes the client's terminal; a rank writes to a log file"},
        {"TERMCAP", "it describes the client's terminal; a rank writes to a log file"},
        {"TERM_PROGRAM*", "it describes the client's terminal; a rank writes to a log file"},
        {"COLORTERM", "it describes the client's terminal; a rank writes to a log file"},
        {"COLUMNS", "it describes the client's terminal; a rank writes to a log file"},
        {"LINES", "it describes the client's terminal; a rank writes to a log file"},
        {"TMUX", "it points at the client's terminal multiplexer"},
        {"TMUX_PANE", "it points at the client's terminal multiplexer"},
        {"STY", "it points at the client's terminal multiplexer"},
        {"WINDOW", "it points at the client's terminal multiplexer"},
        {"DISPLAY", "it points at the client's graphical session"},
        {"WAYLAND_DISPLAY", "it points at the client's graphical session"},
        {"XAUTHORITY", "it points at the client's graphical session"},
        {"DBUS_SESSION_BUS_ADDRESS", "it points at the client's login session"},
        {"XDG_RUNTIME_DIR", "it points at the client's login session"},
        {"XDG_SESSION_*", "it points at the client's login session"},
        {"SSH_*", "it describes the client's SSH connection or points at its SSH agent"},
        {"NCCL_IB_HCA", "it names the client's network ports; the agent sets the node's"},
        {"NCCL_SOCKET_IFNAME", "it names the client's network ports; the agent sets the node's"},
};

const char *submit_never_exported(const char *name)
{
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
		const char *p = never[i].name;
		size_t n = strlen(p);
		if (p[n - 1] == '*' ? strncmp(name, p, n - 1) == 0 : strcmp(name, p) == 0)
			return never[i].why;
	}
	for (size_t i = 0; wire_rank_env[i]; i++)
		if (strcmp(name, wire_rank_env[i]) == 0)
			return "anvil sets it for each rank";
	return NULL;
}

/* ---- --export ---- */

/* --export's names (a copy of the list, cut at the commas), or NULL for
 * ALL; an empty array for NONE. */
static int export_names(const char *spec, char ***out, char *err, size_t errlen)
{
	*out = NULL;
	if (!spec || strcasecmp(spec, "ALL") == 0)
		return 0;
	char **names = xcalloc(strlen(spec) + 2, sizeof(*names)); /* a name per comma */
	*out = names;
	if (strcasecmp(spec, "NONE") == 0)
		return 0;
	size_t n = 0;
	for (const char *p = spec;; p++) {
		size_t len = strcspn(p, ",");
		char *name = xstrndup(p, len);
		names[n++] = name;
		const char *why = submit_never_exported(name);
		if (!*name || strchr(name, '=') || strcasecmp(name, "ALL") == 0 ||
		    strcasecmp(name, "NONE") == 0) {
			snprintf(err, errlen,
			         "--export: '%s' is not a variable name (it takes ALL, NONE or "
			         "VAR[,VAR...]; --env K=V sets a value)",
			         name);
			return ERR_INVALID;
		}
		if (why) {
			snprintf(err, errlen, "--export: %s is never exported: %s", name, why);
			return ERR_INVALID;
		}
		p += len;
		if (!*p)
			return 0;
	}
}

static void free_names(char **names)
{
	for (size_t i = 0; names && names[i]; i++)
		free(names[i]);
	free(names);
}

static int listed(char *const *names, const char *name)
{
	for (size_t i = 0; names[i]; i++)
		if (strcmp(names[i], name) == 0)
			return 1;
	return 0;
}

static int env_has(char *const *envp, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
			return 1;
	return 0;
}

/* Adds name=value to env and name to exported. The first of two entries of
 * one name wins, as with getenv(). JSON holds UTF-8 only. */
static void export_one(const char *name, const char *value, json_t *env, json_t *exported,
                       struct buf *notes)
{
	if (json_object_get(env, name))
		return;
	char *bad_name = jv_utf8_fix(name), *bad_value = jv_utf8_fix(value);
	if (bad_name || bad_value)
		buf_printf(notes, "--export: %s is not exported: its %s is not UTF-8 text\n",
		           bad_name ? bad_name : name, bad_name ? "name" : "value");
	else {
		json_object_set_new(env, name, json_string(value));
		json_array_append_new(exported, json_string(name));
	}
	free(bad_name);
	free(bad_value);
}

/* The client's variables that go with the job, into env and exported. */
static int export_env(const char *spec, char *const *envp, json_t *env, json_t *exported,
                      struct buf *notes, char *err, size_t errlen)
{
	char **names;
	int rc = export_names(spec, &names, err, errlen);
	for (size_t i = 0; rc == 0 && envp && envp[i]; i++) {
		const char *eq = strchr(envp[i], '=');
		if (!eq || eq == envp[i])
			continue;
		char *name = xstrndup(envp[i], (size_t)(eq - envp[i]));
		if (names ? listed(names, name) : !submit_never_exported(name))
			export_one(name, eq + 1, env, exported, notes);
		free(name);
	}
	for (size_t i = 0; rc == 0 && names && names[i]; i++)
		if (!env_has(envp, names[i]))
			buf_printf(notes, "--export: %s is not set here, so not exported\n",
			           names[i]);
	free_names(names);
	return rc;
}

/* --env K=V on top of what was exported: no longer exported, but set. */
static void set_env(const struct cliargs_value *kv, json_t *env, json_t *exported)
{
	for (size_t i = 0; i < kv->nlist; i++) {
		const char *eq = strchr(kv->list[i], '=');
		char *name = xstrndup(kv->list[i], (size_t)(eq - kv->list[i]));
		json_object_set_new(env, name, json_string(eq + 1)); /* the last one wins */
		size_t k;
		json_t *e;
		json_array_foreach (exported, k, e)
			if (strcmp(json_string_value(e), name) == 0) {
				json_array_remove(exported, k);
				break;
			}
		free(name);
	}
}

/* "env" and "exported" of body. */
static int add_env(const struct cliargs *a, char *const *envp, json_t *body, struct buf *notes,
                   char *err, size_t errlen)
{
	json_t *env = json_object(), *exported = json_array();
	int rc = export_env(cliargs_str(a, "export"), envp, env, exported, notes, err, errlen);
	set_env(cliargs_get(a, "env"), env, exported);
	int64_t max = wire_field(&wire_submit, "env")->max;
	if (rc == 0 && (int64_t)json_object_size(env) > max) {
		snprintf(err, errlen,
		         "--export: %zu variables to send, more than the %lld a job's environment "
		         "holds; name the ones the job needs (--export VAR,...) or send none "
		         "(--export NONE)",
		         json_object_size(env), (long long)max);
		rc = ERR_INVALID;
	}
	if (rc == 0 && json_object_size(env))
		wire_set(body, &wire_submit, "env", json_incref(env));
	if (rc == 0 && json_array_size(exported))
		wire_set(body, &wire_submit, "exported", json_incref(exported));
	json_decref(env);
	json_decref(exported);
	return rc;
}

/* ---- the working directory ---- */

/* "cwd": --cwd, relative to the current directory, or the current one. */
static int add_cwd(const struct cliargs *a, const char *cwd, json_t *body, char *err, size_t errlen)
{
	const char *dir = cliargs_str(a, "cwd");
	if (dir && !*dir) {
		snprintf(err, errlen, "--cwd: the directory must not be empty");
		return ERR_INVALID;
	}
	if ((!dir || dir[0] != '/') && !cwd) {
		snprintf(err, errlen,
		         "the current directory cannot be told (was it removed?): pass --cwd with "
		         "an absolute path");
		return ERR_INVALID;
	}
	char *path = !dir            ? xstrdup(cwd)
	             : dir[0] == '/' ? xstrdup(dir)
	                             : xasprintf("%s%s%s", cwd,
	                                         cwd[strlen(cwd) - 1] == '/' ? "" : "/", dir);
	char *shown = jv_utf8_fix(path);
	int rc = shown ? ERR_INVALID : 0;
	if (shown)
		snprintf(err, errlen,
		         "the working directory %s is not UTF-8 text, which JSON holds only: pass "
		         "--cwd with one that is",
		         shown);
	else
		wire_set(body, &wire_submit, "cwd", json_string(path));
	free(shown);
	free(path);
	return rc;
}

/* ---- the options that are one field each ---- */

/* Each option here is one field of the body, copied by the field's type in
 * wire_submit: an integer, a duration's milliseconds or a size's bytes; a
 * string; KEY=VALUE pairs as an object; a flag as true; a number ("0.5").
 * Not here: command, env, exported and cwd (above). */
static const struct copy {
	const char *opt;
	const char *field;
} copies[] = {
        {"gpus", "gpus"},
        {"nodes", "nodes"},
        {"queue", "queue"},
        {"team", "team"},
        {"priority", "priority"},
        {"name", "name"},
        {"grace", "grace_ms"},
        {"time", "time_limit_ms"},
        {"gpu-type", "gpu_type"},
        {"gpu-mem", "min_gpu_memory_bytes"},
        {"pool", "pool"},
        {"selector", "selectors"},
        {"checkpointing", "checkpointing"},
        {"cpus", "cpus"},
        {"memory", "memory_bytes"},
        {"head", "head"},
        {"worker", "worker"},
        {"head-timeout", "head_timeout_ms"},
        {"mpi", "mpi"},
        {"requeue", "requeue"},
        {"max-restarts", "max_restarts"},
        {"hang-timeout", "hang_timeout_ms"},
};

static json_t *kv_object(const struct cliargs_value *kv)
{
	json_t *obj = json_object();
	for (size_t i = 0; i < kv->nlist; i++) {
		const char *eq = strchr(kv->list[i], '=');
		char *key = xstrndup(kv->list[i], (size_t)(eq - kv->list[i]));
		json_object_set_new(obj, key, json_string(eq + 1)); /* the last one wins */
		free(key);
	}
	return obj;
}

/* A plain decimal number ("0.5", "4"), as an integer when it is whole;
 * NULL when s is not one. The server says what the bounds are. */
static json_t *number(const char *s)
{
	size_t n = strspn(s, "0123456789.");
	char *end = NULL;
	double v = n ? strtod(s, &end) : -1;
	if (!n || end != s + n || s[n] != '\0')
		return NULL;
	return v < 1e15 && v == (double)(int64_t)v ? json_integer((int64_t)v) : json_real(v);
}

/* The value of option c as its field's type; NULL with err when it is not
 * one (a number that is not), or for a type no option copies. */
static json_t *copied(const struct copy *c, const struct cliargs_value *v, char *err, size_t errlen)
{
	const struct wire_field *f = wire_field(&wire_submit, c->field);
	json_t *out = NULL;
	switch (f ? f->type : JV_OBJECT) {
	case JV_INT: return json_integer(v->num);
	case JV_STRING: return json_string(v->str);
	case JV_STRING_MAP: return kv_object(v);
	case JV_BOOL: return json_true();
	case JV_NUMBER:
		out = number(v->str);
		if (!out)
			snprintf(err, errlen, "--%s: \"%s\" is not a number like 0.5 or 4", c->opt,
			         v->str);
		return out;
	case JV_STRINGS:
	case JV_ARRAY:
	case JV_OBJECT: break;
	}
	snprintf(err, errlen, "--%s: no option copies field '%s'", c->opt, c->field);
	return NULL;
}

int submit_after(const char *spec, json_t **out, char *err, size_t errlen)
{
	json_t *after = json_array();
	char *copy = xstrdup(spec), *save = NULL;
	int rc = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');
		const char *when = colon ? colon + 1 : "ok";
		if (colon)
			*colon = '\0';
		struct verb_job_ref ref;
		char why[256];
		if (verb_job_ref_parse(tok, &ref, why, sizeof(why)) ||
		    (strcmp(when, "ok") != 0 && strcmp(when, "any") != 0 &&
		     strcmp(when, "failed") != 0)) {
			snprintf(
			        err, errlen,
			        "--after %.64s: write JOB[:ok|:any|:failed][,...] (a job, 12 or an "
			        "array's member 12_3, and whether it must succeed, end, or fail; "
			        "ok "
			        "when not said)",
			        spec);
			rc = ERR_INVALID;
		} else {
			json_t *a = json_pack("{s:I,s:s}", "job", (json_int_t)ref.id, "when", when);
			if (ref.index >= 0) /* resolved by anvil run (verb_run.c) */
				json_object_set_new(a, "index", json_integer(ref.index));
			json_array_append_new(after, a);
		}
	}
	free(copy);
	if (rc || json_array_size(after) == 0) {
		if (!rc)
			snprintf(err, errlen, "--after: name at least one job");
		json_decref(after);
		return ERR_INVALID;
	}
	*out = after;
	return 0;
}

/* One part of --array: "7", "0-29" or "0-29:2" appended to indices. */
static int array_part(char *part, json_t *indices)
{
	int64_t lo, hi, step = 1;
	char *dash = strchr(part, '-'), *colon = strchr(part, ':');
	if (colon) {
		*colon = '\0';
		if (parse_i64(colon + 1, 1, SUBMIT_ARRAY_MAX_INDEX, &step))
			return ERR_INVALID;
	}
	if (dash)
		*dash = '\0';
	if (parse_i64(part, 0, SUBMIT_ARRAY_MAX_INDEX, &lo) ||
	    (dash ? parse_i64(dash + 1, lo, SUBMIT_ARRAY_MAX_INDEX, &hi) : (hi = lo, 0)))
		return ERR_INVALID;
	for (int64_t i = lo; i <= hi; i += step) {
		if (json_array_size(indices) >= SUBMIT_ARRAY_MAX)
			return ERR_TOOBIG;
		json_array_append_new(indices, json_integer(i));
	}
	return 0;
}

int submit_array(const char *spec, json_t **out, char *err, size_t errlen)
{
	char *copy = xstrdup(spec), *save = NULL;
	char *pct = strchr(copy, '%');
	int64_t max = 0;
	int rc = 0;
	if (pct) {
		*pct = '\0';
		rc = parse_i64(pct + 1, 1, SUBMIT_ARRAY_MAX, &max) ? ERR_INVALID : 0;
	}
	json_t *indices = json_array();
	for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0;
	     tok = strtok_r(NULL, ",", &save))
		rc = array_part(tok, indices);
	free(copy);
	if (rc == 0 && json_array_size(indices) == 0)
		rc = ERR_INVALID;
	if (rc) {
		snprintf(err, errlen,
		         rc == ERR_TOOBIG ? "--array %.64s: more than %d jobs"
		                          : "--array %.64s: write indices as 0-29, 1,5,9 or "
		                            "0-98:2, and a limit "
		                            "on how many run at once as %%8 (at most %d jobs)",
		         spec, SUBMIT_ARRAY_MAX);
		json_decref(indices);
		return ERR_INVALID;
	}
	*out = json_pack("{s:o,s:I}", "indices", indices, "max_running", (json_int_t)max);
	return 0;
}

/* ---- --field NAME=VALUE ---- */

static json_t *field_bool(const char *s)
{
	if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0 || strcmp(s, "yes") == 0)
		return json_true();
	if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0 || strcmp(s, "no") == 0)
		return json_false();
	return NULL;
}

/* A JSON value of type t, written as JSON ('["a","b"]', '{"k":"v"}'). */
static json_t *field_json(const char *s, enum jv_type t)
{
	json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);
	int fits = t == JV_STRINGS || t == JV_ARRAY ? json_is_array(v) : json_is_object(v);
	if (!fits) {
		json_decref(v);
		return NULL;
	}
	return v;
}

/* VALUE as the type of field f; NULL with why when it is not one. The
 * bounds are the server's to check, in the same words as for any body. */
static json_t *field_value(const struct jv_field *f, const char *s, const char **why)
{
	int64_t n;
	json_t *v = NULL;
	switch (f->type) {
	case JV_STRING: return json_string(s);
	case JV_INT:
		if (parse_i64(s, INT64_MIN, INT64_MAX, &n) == 0)
			return json_integer(n);
		*why = "is not an integer";
		return NULL;
	case JV_BOOL:
		v = field_bool(s);
		*why = "is not true or false";
		return v;
	case JV_NUMBER:
		v = number(s);
		*why = "is not a number like 0.5 or 4";
		return v;
	case JV_STRINGS:
	case JV_ARRAY:
		v = field_json(s, f->type);
		*why = "is not a JSON array (write it as [\"a\", \"b\"])";
		return v;
	case JV_OBJECT:
	case JV_STRING_MAP:
		v = field_json(s, f->type);
		*why = "is not a JSON object (write it as {\"key\": \"value\"})";
		return v;
	}
	return NULL;
}

/* Each --field NAME=VALUE into body: any field of the job that a client
 * may set (model/fields.h, fields_client), by its name and type, so that
 * a field is reachable from here without an option of its own. */
static int add_fields(const struct cliargs *a, json_t *body, char *err, size_t errlen)
{
	if (!cliargs_has(a, "field"))
		return 0;
	const struct cliargs_value *kv = cliargs_get(a, "field");
	for (size_t i = 0; i < kv->nlist; i++) {
		const char *arg = kv->list[i], *eq = strchr(arg, '=');
		char *name = xstrndup(arg, (size_t)(eq - arg));
		const struct jv_field *f = fields_client(name);
		const char *why = fields_find(fields_job, name)
		                          ? "is a field of the job that only the server sets"
		                          : "is not a field of a job (docs/api.md, POST /v1/jobs)";
		json_t *v = f ? field_value(f, eq + 1, &why) : NULL;
		if (!v)
			snprintf(err, errlen, "--field %s: '%s' %s", arg, f ? eq + 1 : name, why);
		else if (wire_field(&wire_submit, name))
			wire_set(body, &wire_submit, name, v);
		else /* the table's own field (FIELD_MORE): checked by the server with it */
			json_object_set_new(body, name, v);
		free(name);
		if (!v)
			return ERR_INVALID;
	}
	return 0;
}

int submit_body(const struct cliargs *a, char *const *envp, const char *cwd, json_t **out,
                struct buf *notes, char *err, size_t errlen)
{
	json_t *body = json_object(), *cmd = json_array();
	for (int i = 0; i < a->nrest; i++)
		json_array_append_new(cmd, json_string(a->rest[i]));
	wire_set(body, &wire_submit, "command", cmd);
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < sizeof(copies) / sizeof(copies[0]); i++) {
		if (!cliargs_has(a, copies[i].opt))
			continue; /* a verb without it (anvil shell has no --head) */
		const struct cliargs_value *v = cliargs_get(a, copies[i].opt);
		if (!v->set)
			continue; /* the server's default stays the default */
		json_t *val = copied(&copies[i], v, err, errlen);
		if (val)
			wire_set(body, &wire_submit, copies[i].field, val);
		else
			rc = ERR_INVALID;
	}
	if (rc == 0 && cliargs_has(a, "no-requeue") && cliargs_flag(a, "no-requeue"))
		wire_set(body, &wire_submit, "requeue", json_false());
	if (rc == 0)
		rc = add_cwd(a, cwd, body, err, errlen);
	if (rc == 0)
		rc = add_env(a, envp, body, notes, err, errlen);
	json_t *x = NULL;
	const char *spec = cliargs_has(a, "after") ? cliargs_str(a, "after") : NULL;
	if (rc == 0 && spec && (rc = submit_after(spec, &x, err, errlen)) == 0)
		wire_set(body, &wire_submit, "after", x);
	spec = cliargs_has(a, "array") ? cliargs_str(a, "array") : NULL;
	if (rc == 0 && spec && (rc = submit_array(spec, &x, err, errlen)) == 0)
		wire_set(body, &wire_submit, "array", x);
	if (rc == 0) /* last: a field named wins over the option that sets it */
		rc = add_fields(a, body, err, errlen);
	if (rc) {
		json_decref(body);
		return rc;
	}
	*out = body;
	return 0;
}
