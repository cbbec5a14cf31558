/* task.c - the task wrapper's pure parts: the document, where inputs go,
 * rendering, and the argv the agent runs (task.h). The process is in
 * task_run.c. */
#include "agent/task.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/bundles.h"
#include "agent/desired.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/objects.h"
#include "flow/spec.h"

/* ---- the document ---- */

__attribute__((format(printf, 3, 4))) static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return ERR_INVALID;
}

static int name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	return n >= 1 && n <= TASK_NAME_MAX &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* An optional integer field: 0 when absent. */
static int get_int(const json_t *o, const char *key, int64_t *out, char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return bad(err, errlen, "field '%s': must be a non-negative integer", key);
	*out = json_integer_value(v);
	return 0;
}

/* An optional string field, copied: NULL when absent. */
static int get_str(const json_t *o, const char *key, size_t max, char **out, char *err,
                   size_t errlen)
{
	const json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max)
		return bad(err, errlen, "field '%s': must be a string of 1 to %zu characters", key,
		           max);
	*out = xstrdup(json_string_value(v));
	return 0;
}

/* A content key, either form, as "sha256/<64 hex>" (malloc'd). */
static int content_key(const json_t *v, const char *what, char **out, char *err, size_t errlen)
{
	const char *s = json_string_value(v);
	char canon[OBJECTS_KEY_MAX], hex[HASH_HEX_LEN + 1];
	if (!s || !objects_key_hash(s, hex))
		return bad(err, errlen,
		           "%s: '%.100s' is not a content key (sha256/ and 64 hex digits)", what,
		           s ? s : "(not a string)");
	snprintf(canon, sizeof(canon), "sha256/%s", hex);
	*out = xstrdup(canon);
	return 0;
}

static int parse_kind(const char *s, enum task_kind *k)
{
	static const char *const names[] = {"file", "dir", "value"};
	for (int i = 0; i < 3; i++)
		if (s && strcmp(s, names[i]) == 0) {
			*k = (enum task_kind)i;
			return 0;
		}
	return ERR_INVALID;
}

/* "tasks.T.outputs.K" into its names. */
static int split_ref(struct task_fetch *f)
{
	const char *r = f->ref;
	if (strncmp(r, "tasks.", 6) != 0)
		return ERR_INVALID;
	const char *t = r + 6, *dot = strchr(t, '.');
	if (!dot || (size_t)(dot - t) > TASK_NAME_MAX || strncmp(dot, ".outputs.", 9) != 0)
		return ERR_INVALID;
	snprintf(f->task, sizeof(f->task), "%.*s", (int)(dot - t), t);
	snprintf(f->output, sizeof(f->output), "%.63s", dot + 9);
	return name_ok(f->task) && name_ok(f->output) && strlen(dot + 9) <= TASK_NAME_MAX
	               ? 0
	               : ERR_INVALID;
}

static int parse_fetch_item(const json_t *o, size_t i, struct task_fetch *f, char *err,
                            size_t errlen)
{
	if (!json_is_object(o))
		return bad(err, errlen, "fetch[%zu]: must be an object", i);
	const char *ref = json_string_value(json_object_get(o, "ref"));
	if (!ref || strlen(ref) > 200)
		return bad(err, errlen,
		           "fetch[%zu].ref: must be a string (tasks.TASK.outputs.NAME)", i);
	f->ref = xstrdup(ref);
	if (split_ref(f))
		return bad(err, errlen, "fetch[%zu].ref: '%s' is not tasks.TASK.outputs.NAME", i,
		           ref);
	const char *kind = json_string_value(json_object_get(o, "kind"));
	if (parse_kind(kind, &f->kind) || f->kind == TASK_VALUE)
		return bad(err, errlen, "fetch[%zu].kind: must be \"file\" or \"dir\"", i);
	const json_t *list = json_object_get(o, "list");
	if (list && !json_is_boolean(list))
		return bad(err, errlen, "fetch[%zu].list: must be true or false", i);
	f->list = json_is_true(list);
	const json_t *keys = json_object_get(o, "keys");
	size_t n = json_array_size(keys);
	if (!json_is_array(keys) || n > TASK_KEYS_MAX || (!f->list && n != 1))
		return bad(err, errlen, "fetch[%zu].keys: must be an array of %s content keys", i,
		           f->list ? "at most 100000" : "exactly one (not a list)");
	f->keys = xcalloc(n + 1, sizeof(*f->keys));
	for (size_t k = 0; k < n; k++) {
		char what[48];
		snprintf(what, sizeof(what), "fetch[%zu].keys[%zu]", i, k);
		if (content_key(json_array_get(keys, k), what, &f->keys[k], err, errlen))
			return ERR_INVALID;
		f->nkeys++;
	}
	return 0;
}

static int parse_fetch(const json_t *doc, struct task_doc *d, char *err, size_t errlen)
{
	const json_t *a = json_object_get(doc, "fetch");
	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) > TASK_FETCH_MAX)
		return bad(err, errlen, "field 'fetch': must be an array of at most %d items",
		           TASK_FETCH_MAX);
	d->fetch = xcalloc(json_array_size(a) + 1, sizeof(*d->fetch));
	for (size_t i = 0; i < json_array_size(a); i++) {
		struct task_fetch *f = &d->fetch[d->nfetch++];
		if (parse_fetch_item(json_array_get(a, i), i, f, err, errlen))
			return ERR_INVALID;
		for (size_t j = 0; j < i; j++)
			if (strcmp(d->fetch[j].ref, f->ref) == 0)
				return bad(err, errlen, "fetch[%zu].ref: '%s' is fetched twice", i,
				           f->ref);
	}
	return 0;
}

static int parse_render_env(const json_t *doc, struct task_doc *d, char *err, size_t errlen)
{
	const json_t *a = json_object_get(doc, "render_env");
	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) > 4096)
		return bad(err, errlen, "field 'render_env': must be an array of variable names");
	d->render_env = xcalloc(json_array_size(a) + 1, sizeof(*d->render_env));
	for (size_t i = 0; i < json_array_size(a); i++) {
		const char *s = json_string_value(json_array_get(a, i));
		if (!s || !*s || strchr(s, '=') || strlen(s) > 255)
			return bad(err, errlen, "render_env[%zu]: must be a variable's name", i);
		d->render_env[d->nrender++] = xstrdup(s);
	}
	return 0;
}

static int parse_outputs(const json_t *doc, struct task_doc *d, char *err, size_t errlen)
{
	const json_t *o = json_object_get(doc, "outputs");
	if (!o)
		return 0;
	if (!json_is_object(o) || json_object_size(o) > TASK_OUTPUTS_MAX)
		return bad(err, errlen, "field 'outputs': must be an object of at most %d outputs",
		           TASK_OUTPUTS_MAX);
	d->outputs = xcalloc(json_object_size(o) + 1, sizeof(*d->outputs));
	const char *name;
	const json_t *v;
	json_object_foreach ((json_t *)o, name, v) {
		struct task_output *out = &d->outputs[d->noutputs];
		if (!name_ok(name))
			return bad(err, errlen, "outputs: '%.80s' is not an output's name", name);
		if (parse_kind(json_string_value(v), &out->kind))
			return bad(err, errlen,
			           "outputs.%s: must be \"file\", \"dir\" or \"value\"", name);
		snprintf(out->name, sizeof(out->name), "%s", name);
		d->noutputs++;
	}
	return 0;
}

static int parse_doc(const json_t *doc, struct task_doc *d, char *err, size_t errlen)
{
	if (get_int(doc, "exec", &d->exec, err, errlen) ||
	    get_int(doc, "run", &d->run, err, errlen) ||
	    get_int(doc, "index", &d->index, err, errlen) ||
	    get_int(doc, "rank_outputs", &d->rank_outputs, err, errlen) ||
	    get_str(doc, "task", 255, &d->task, err, errlen) ||
	    get_str(doc, "checkpoint", 512, &d->checkpoint, err, errlen) ||
	    get_str(doc, "code_dir", 4095, &d->code_dir, err, errlen))
		return ERR_INVALID;
	const json_t *trace = json_object_get(doc, "trace");
	if (trace && !json_is_boolean(trace))
		return bad(err, errlen, "field 'trace': must be true or false");
	d->trace = json_is_true(trace);
	if (d->code_dir && d->code_dir[0] != '/')
		return bad(err, errlen, "field 'code_dir': '%.100s' is not an absolute path",
		           d->code_dir);
	const json_t *b = json_object_get(doc, "bundle");
	if (b && !json_is_null(b) && content_key(b, "field 'bundle'", &d->bundle, err, errlen))
		return ERR_INVALID;
	if (d->checkpoint && strncmp(d->checkpoint, "sha256/", 7) == 0)
		return bad(err, errlen, "field 'checkpoint': '%.100s' is a content key, not a name",
		           d->checkpoint);
	return parse_fetch(doc, d, err, errlen) || parse_render_env(doc, d, err, errlen) ||
	                       parse_outputs(doc, d, err, errlen)
	               ? ERR_INVALID
	               : 0;
}

int task_doc_parse(const char *text, struct task_doc *d, char *err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	json_error_t je;
	json_t *doc = text ? json_loads(text, 0, &je) : NULL;
	int rc;
	if (!text)
		rc = bad(err, errlen,
		         "%s is not set (the agent sets it for a workflow task's rank)",
		         TASK_DOC_ENV);
	else if (!json_is_object(doc))
		rc = bad(err, errlen, "%s: not a JSON object: %s", TASK_DOC_ENV,
		         doc ? "another value" : je.text);
	else
		rc = parse_doc(doc, d, err, errlen);
	json_decref(doc);
	return rc;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

void task_doc_cleanup(struct task_doc *d)
{
	for (size_t i = 0; i < d->nfetch; i++) {
		struct task_fetch *f = &d->fetch[i];
		free(f->ref);
		free_strv(f->keys, f->nkeys);
		free_strv(f->paths, f->paths ? f->nkeys : 0);
		free(f->joined);
	}
	/* the item being parsed when parsing failed counts in nfetch too */
	free(d->fetch);
	free_strv(d->render_env, d->nrender);
	free(d->outputs);
	free(d->task);
	free(d->bundle);
	free(d->checkpoint);
	free(d->code_dir);
	memset(d, 0, sizeof(*d));
}

/* ---- where inputs go, and rendering ---- */

void task_fetch_paths(struct task_doc *d, const char *in_dir)
{
	for (size_t i = 0; i < d->nfetch; i++) {
		struct task_fetch *f = &d->fetch[i];
		struct buf joined;
		buf_init(&joined);
		f->paths = xcalloc(f->nkeys + 1, sizeof(*f->paths));
		for (size_t k = 0; k < f->nkeys; k++) {
			f->paths[k] =
			        f->list ? xasprintf("%s/%s/%s/%zu", in_dir, f->task, f->output, k)
			                : xasprintf("%s/%s/%s", in_dir, f->task, f->output);
			buf_printf(&joined, "%s%s", k ? " " : "", f->paths[k]);
		}
		f->joined = joined.data ? buf_detach(&joined) : xstrdup("");
	}
}

char *task_render(const char *text, const struct task_fetch *fetch, size_t nfetch)
{
	struct buf out;
	buf_init(&out);
	const char *p = text;
	char ref[256];
	const char *start, *end;
	while (flow_template_next(p, ref, sizeof(ref), &start, &end) == 1) {
		const struct task_fetch *hit = NULL;
		for (size_t i = 0; i < nfetch && !hit; i++)
			if (fetch[i].joined && strcmp(fetch[i].ref, ref) == 0)
				hit = &fetch[i];
		buf_add(&out, p, (size_t)(hit ? start - p : end - p));
		if (hit)
			buf_adds(&out, hit->joined);
		p = end;
	}
	buf_adds(&out, p);
	return out.data ? buf_detach(&out) : xstrdup("");
}

/* ---- the agent's side ---- */

char **task_argv(const struct desired_rank *d, const char *self, const char *work_dir)
{
	if (!d->task)
		return NULL;
	char **v = xcalloc(8 + d->command.n, sizeof(*v));
	size_t n = 0;
	v[n++] = xstrdup(self ? self : "/proc/self/exe");
	v[n++] = xstrdup("_task");
	v[n++] = xstrdup("--work-dir");
	v[n++] = xstrdup(work_dir);
	v[n++] = xstrdup("--grace-ms");
	v[n++] = xasprintf("%lld", (long long)d->grace_ms);
	v[n++] = xstrdup("--");
	for (size_t i = 0; i < d->command.n; i++)
		v[n++] = xstrdup(d->command.v[i]);
	v[n] = NULL;
	return v;
}

char *task_direct_cwd(const struct desired_rank *d, const char *work_dir)
{
	const char *text = desired_var(d, TASK_DOC_ENV, NULL);
	if (!d->task || !text)
		return NULL;
	struct task_doc doc = {0};
	char err[256], hex[HASH_HEX_LEN + 1];
	char *dir = NULL;
	if (task_doc_parse(text, &doc, err, sizeof(err)) == 0 && doc.bundle && !doc.nfetch &&
	    !doc.nrender && !doc.noutputs && !doc.checkpoint && !doc.trace &&
	    objects_key_hash(doc.bundle, hex)) {
		/* found (renamed there whole: complete) and marked used under its
		 * lock, not waited for: a busy lock leaves it to the wrapper */
		struct stat sb;
		char *bundles = xasprintf("%s/bundles", work_dir);
		dir = xasprintf("%s/%s", bundles, hex);
		int fd = bundles_lock(bundles, hex, 1);
		if (fd < 0 || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
		    bundles_touch(dir) != 0) {
			free(dir);
			dir = NULL;
		}
		if (fd >= 0)
			close(fd);
		free(bundles);
	}
	task_doc_cleanup(&doc);
	return dir;
}

void task_argv_free(char **argv)
{
	for (size_t i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}
