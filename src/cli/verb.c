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

int verb_job_id(const struct verb_ctx *v, const char *s, int64_t *id)
{
	char err[256];
	if (cliargs_parse_int("JOB", s, id, err, sizeof(err)) < 0)
		return verb_usage_error(v, "%s", err);
	return CLI_EXIT_OK;
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
	int ret = verb_job_id(v, v->args.pos[0], &id);
	if (ret != CLI_EXIT_OK || (ret = verb_connect(v)) != CLI_EXIT_OK)
		return ret;
	char path[64];
	snprintf(path, sizeof(path), "/v1/jobs/%lld%s", (long long)id, tail);
	return verb_get_print(v, path, "job", render);
}
