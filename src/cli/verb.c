#include "cli/verb.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"

int verb_connect(struct verb_ctx *v)
{
	if (v->connected)
		return CLI_EXIT_OK;
	int rc = cliconn_resolve(&v->conn, v->server_flag, v->token_flag);
	v->connected = 1; /* conn needs cleanup either way */
	if (rc < 0) {
		fprintf(stderr, "anvil: %s\n", v->conn.error);
		return CLI_EXIT_UNREACHABLE;
	}
	return CLI_EXIT_OK;
}

void verb_cleanup(struct verb_ctx *v)
{
	if (v->connected)
		cliconn_cleanup(&v->conn);
	v->connected = 0;
	cliargs_cleanup(&v->args);
}

int verb_usage_error(const struct verb_ctx *v, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "anvil %s: %s\n(see `anvil %s --help`)\n", v->verb->name, msg,
	        v->verb->name);
	return CLI_EXIT_USAGE;
}

/* The decimal number in s[0..n) (digits only), at least min. */
static int ref_number(const char *s, size_t n, int64_t min, int64_t *out)
{
	char text[24];
	if (n == 0 || n >= sizeof(text) || strspn(s, "0123456789") < n)
		return ERR_INVALID;
	memcpy(text, s, n);
	text[n] = '\0';
	return parse_i64(text, min, INT64_MAX, out);
}

int verb_job_ref_parse(const char *s, struct verb_job_ref *ref, char *err, size_t errlen)
{
	const char *us = strchr(s, '_');
	size_t head = us ? (size_t)(us - s) : strlen(s);
	struct verb_job_ref r = {.index = -1};
	if (ref_number(s, head, 1, &r.id) != 0 ||
	    (us && ref_number(us + 1, strlen(us + 1), 0, &r.index) != 0)) {
		snprintf(err, errlen,
		         "JOB: \"%.64s\" is not a job: write its id (12) or an array's member as "
		         "ARRAY_INDEX (12_3)",
		         s);
		return ERR_INVALID;
	}
	*ref = r;
	return 0;
}

int verb_job_ref(const struct verb_ctx *v, const char *s, struct verb_job_ref *ref)
{
	char err[256];
	if (verb_job_ref_parse(s, ref, err, sizeof(err)) != 0)
		return verb_usage_error(v, "%s", err);
	return CLI_EXIT_OK;
}

int verb_job_resolve(struct verb_ctx *v, const struct verb_job_ref *ref, int64_t *id)
{
	if (ref->index < 0) {
		*id = ref->id;
		return CLI_EXIT_OK;
	}
	int ret = verb_connect(v);
	if (ret != CLI_EXIT_OK)
		return ret;
	char path[128];
	snprintf(path, sizeof(path), "/v1/jobs?array=%lld&index=%lld&state=all&limit=1",
	         (long long)ref->id, (long long)ref->index);
	json_t *resp = NULL;
	ret = cliconn_call(&v->conn, "GET", path, NULL, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	const json_t *job = json_array_get(json_object_get(resp, "jobs"), 0);
	if (job) {
		*id = verb_int(job, "id", 0);
	} else {
		fprintf(stderr,
		        "anvil %s: %lld_%lld: no such array member (array %lld has no index "
		        "%lld)\n",
		        v->verb->name, (long long)ref->id, (long long)ref->index,
		        (long long)ref->id, (long long)ref->index);
		ret = CLI_EXIT_FAILED;
	}
	json_decref(resp);
	return ret;
}

int verb_job_arg(struct verb_ctx *v, const char *s, int64_t *id)
{
	struct verb_job_ref ref;
	int ret = verb_job_ref(v, s, &ref);
	return ret == CLI_EXIT_OK ? verb_job_resolve(v, &ref, id) : ret;
}

void verb_job_name(const json_t *job, char *out, size_t len)
{
	const json_t *array = json_object_get(job, "array");
	if (json_is_object(array))
		snprintf(out, len, "%lld_%lld", (long long)verb_int(array, "id", 0),
		         (long long)verb_int(array, "index", 0));
	else
		snprintf(out, len, "%lld", (long long)verb_int(job, "id", -1));
}

void verb_print_json(const json_t *root)
{
	json_dumpf(root, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
}

static int needs_quotes(const char *s)
{
	if (!*s)
		return 1;
	for (; *s; s++)
		if (!strchr("-_./=:,+@%", *s) && !(*s >= 'a' && *s <= 'z') &&
		    !(*s >= 'A' && *s <= 'Z') && !(*s >= '0' && *s <= '9'))
			return 1;
	return 0;
}

void verb_command_line(const json_t *command, size_t max, struct buf *out)
{
	struct buf line;
	buf_init(&line);
	size_t i;
	const json_t *word;
	json_array_foreach (command, i, word) {
		const char *s = json_is_string(word) ? json_string_value(word) : "?";
		if (i > 0)
			buf_adds(&line, " ");
		if (!needs_quotes(s)) {
			buf_adds(&line, s);
			continue;
		}
		buf_adds(&line, "'");
		for (const char *p = s; *p; p++) {
			if (*p == '\'')
				buf_adds(&line, "'\\''");
			else
				buf_add(&line, p, 1);
		}
		buf_adds(&line, "'");
	}
	if (max > 3 && line.len > max)
		buf_printf(out, "%.*s...", (int)(max - 3), line.data);
	else if (line.len)
		buf_add(out, line.data, line.len);
	buf_cleanup(&line);
}

void verb_add_clean(struct buf *out, const char *s)
{
	for (; *s; s++)
		buf_add(out, ((unsigned char)*s < 0x20 || *s == 0x7f) ? "?" : s, 1);
}

int verb_state_final(const char *state)
{
	static const char *const final[] = {"succeeded", "failed", "cancelled", "lost"};
	for (size_t i = 0; state && i < sizeof(final) / sizeof(final[0]); i++)
		if (strcmp(state, final[i]) == 0)
			return 1;
	return 0;
}

int64_t verb_int(const json_t *obj, const char *name, int64_t dflt)
{
	const json_t *v = json_object_get(obj, name);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

const char *verb_str(const json_t *obj, const char *name)
{
	const char *s = json_string_value(json_object_get(obj, name));
	return s ? s : "";
}

int verb_run_exit(const json_t *job)
{
	const char *state = json_string_value(json_object_get(job, "state"));
	if (!state)
		return CLI_EXIT_FAILED;
	if (strcmp(state, "succeeded") == 0)
		return CLI_EXIT_OK;
	if (strcmp(state, "cancelled") == 0)
		return CLI_EXIT_CANCELLED;
	if (strcmp(state, "lost") == 0)
		return CLI_EXIT_LOST;
	int64_t code = verb_int(job, "exit_code", 1);
	/* A failed job never exits 0; codes past a byte cannot be passed on. */
	if (code <= 0)
		return CLI_EXIT_FAILED;
	return code > 255 ? 255 : (int)code;
}

void verb_report_end(int64_t id, const json_t *job)
{
	const char *state = json_string_value(json_object_get(job, "state"));
	const char *reason = json_string_value(json_object_get(job, "reason"));
	if (!state || strcmp(state, "succeeded") == 0)
		return;
	fprintf(stderr, "anvil: job %lld %s", (long long)id, state);
	int64_t code = verb_int(job, "exit_code", -1);
	if (strcmp(state, "failed") == 0 && code >= 0)
		fprintf(stderr, " with exit code %lld", (long long)code);
	if (reason && *reason)
		fprintf(stderr, ": %s", reason);
	fputc('\n', stderr);
}

void verb_print(const struct verb_ctx *v, const json_t *resp, const char *key,
                verb_render_fn render)
{
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(resp);
		return;
	}
	struct buf out;
	buf_init(&out);
	render(key ? json_object_get(resp, key) : resp, wall_ms(), &out);
	fputs(out.data, stdout);
	buf_cleanup(&out);
}

int verb_get_print(struct verb_ctx *v, const char *path, const char *key, verb_render_fn render)
{
	json_t *resp = NULL;
	int ret = cliconn_call(&v->conn, "GET", path, NULL, &resp);
	if (ret != CLI_EXIT_OK)
		return ret;
	verb_print(v, resp, key, render);
	json_decref(resp);
	return CLI_EXIT_OK;
}

const struct cliargs_opt verb_json_opts[] = {
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's JSON"},
        {NULL, 0, 0, NULL, NULL},
};

int verb_job_print(struct verb_ctx *v, const char *tail, verb_render_fn render)
{
	int64_t id;
	int ret = verb_job_arg(v, v->args.pos[0], &id);
	if (ret != CLI_EXIT_OK || (ret = verb_connect(v)) != CLI_EXIT_OK)
		return ret;
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld%s", (long long)id, tail);
	return verb_get_print(v, path, "job", render);
}
