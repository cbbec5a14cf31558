#include "cli/cliconn.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/httpc.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/cli.h"

#define CLICONN_FILE_MAX   (64u << 10)
#define CLICONN_TIMEOUT_MS 30000

char *cliconn_file_path(void)
{
	const char *home = getenv("ANVIL_HOME");
	if (home && *home)
		return xasprintf("%s/client.json", home);
	home = getenv("HOME");
	if (!home || !*home) {
		struct passwd *pw = getpwuid(getuid());
		home = pw && pw->pw_dir ? pw->pw_dir : ".";
	}
	return xasprintf("%s/.anvil/client.json", home);
}

/* Takes one value from a flag or a variable; empty counts as unset. */
static void take(char **val, char **from, const char *s, const char *source)
{
	if (*val || !s || !*s)
		return;
	*val = xstrdup(s);
	*from = xstrdup(source);
}

static int file_field(struct cliconn *c, const json_t *root, const char *name, char **val,
                      char **from)
{
	const json_t *v = json_object_get(root, name);
	if (!v || *val)
		return 0;
	if (!json_is_string(v)) {
		snprintf(c->error, sizeof(c->error), "%s: field '%s' is not a string", c->file,
		         name);
		return ERR_INVALID;
	}
	take(val, from, json_string_value(v), c->file);
	return 0;
}

/* Fills what flags and variables left unset from the client file; a
 * missing file is not an error here. */
static int read_client_file(struct cliconn *c)
{
	struct buf text;
	buf_init(&text);
	json_t *root = NULL;
	int rc = read_file(c->file, CLICONN_FILE_MAX, &text);
	if (rc == -ENOENT) {
		rc = 0;
		goto out;
	}
	if (rc < 0) {
		snprintf(c->error, sizeof(c->error), "cannot read %s: %s", c->file, err_msg(rc));
		rc = ERR_INVALID;
		goto out;
	}
	json_error_t je;
	root = json_loadb(text.data, text.len, 0, &je);
	if (!json_is_object(root)) {
		snprintf(c->error, sizeof(c->error),
		         "%s: malformed, expected a JSON object (line %d column %d: %s)", c->file,
		         je.line, je.column, root ? "not an object" : je.text);
		rc = ERR_INVALID;
		goto out;
	}
	rc = file_field(c, root, "server", &c->server, &c->server_from);
	if (rc == 0)
		rc = file_field(c, root, "token", &c->token, &c->token_from);
out:
	json_decref(root);
	buf_cleanup(&text);
	return rc;
}

/* "host:port" means http; trailing slashes go. */
static void normalize_server(struct cliconn *c)
{
	if (!strstr(c->server, "://")) {
		char *s = xasprintf("http://%s", c->server);
		free(c->server);
		c->server = s;
	}
	size_t n = strlen(c->server);
	while (n > 0 && c->server[n - 1] == '/')
		c->server[--n] = '\0';
}

int cliconn_resolve(struct cliconn *c, const char *server_flag, const char *token_flag)
{
	memset(c, 0, sizeof(*c));
	c->timeout_ms = CLICONN_TIMEOUT_MS;
	c->retry_ms = CLICONN_RETRY_MS;
	c->file = cliconn_file_path();
	const char *retry = getenv(CLICONN_RETRY_ENV);
	int64_t ms = 0;
	if (retry && *retry) {
		if (parse_duration_ms(retry, &ms) || ms > 3600000) {
			snprintf(c->error, sizeof(c->error),
			         "$%s: '%.40s' is not a duration from 0s to 1h (such as 30s or 2m)",
			         CLICONN_RETRY_ENV, retry);
			return ERR_INVALID;
		}
		c->retry_ms = (long)ms;
	}
	take(&c->server, &c->server_from, server_flag, "--server");
	take(&c->token, &c->token_from, token_flag, "--token");
	take(&c->server, &c->server_from, getenv("ANVIL_SERVER"), "$ANVIL_SERVER");
	take(&c->token, &c->token_from, getenv("ANVIL_TOKEN"), "$ANVIL_TOKEN");
	if (!c->server || !c->token) {
		int rc = read_client_file(c);
		if (rc < 0)
			return rc;
	}
	if (!c->server) {
		snprintf(c->error, sizeof(c->error),
		         "no server configured: pass --server URL, set ANVIL_SERVER, or start a "
		         "cluster with `anvil up` (it writes %s%s)",
		         c->file, access(c->file, F_OK) == 0 ? ", which has no \"server\"" : "");
		return ERR_NOTFOUND;
	}
	normalize_server(c);
	return 0;
}

void cliconn_cleanup(struct cliconn *c)
{
	httpc_free(c->http);
	free(c->server);
	free(c->token);
	free(c->server_from);
	free(c->token_from);
	free(c->file);
	memset(c, 0, sizeof(*c));
}

int cliconn_do(struct cliconn *c, const char *method, const char *path, const json_t *body,
               int *status, struct buf *out)
{
	char *url = xasprintf("%s%s", c->server, path);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (!c->http)
		c->http = httpc_new();
	int rc = httpc_do(c->http, method, url, c->token, text, text ? strlen(text) : 0,
	                  c->timeout_ms, status, out);
	if (rc == ERR_TOOBIG)
		snprintf(c->error, sizeof(c->error), "the answer to %s %s is too large", method,
		         path);
	else if (rc < 0)
		snprintf(c->error, sizeof(c->error), "cannot reach the server at %s (from %s): %s",
		         c->server, c->server_from, httpc_error(c->http));
	free(text);
	free(url);
	return rc;
}

const char *cliconn_header(const struct cliconn *c, const char *name, char *out, size_t outlen)
{
	return c->http ? httpc_header(c->http, name, out, outlen) : NULL;
}

/* Copies at most max bytes of s up to the first newline, with control
 * characters shown as '?', so a message cannot drive the terminal. */
static void clean_copy(char *dst, size_t dstlen, const char *s, size_t max)
{
	size_t n = 0;
	for (; s[n] && s[n] != '\n' && n < max && n + 1 < dstlen; n++)
		dst[n] = ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) ? '?' : s[n];
	dst[n] = '\0';
}

void cliconn_describe(struct cliconn *c, int status, const struct buf *body)
{
	json_t *root = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
	const json_t *msg = json_object_get(json_object_get(root, "error"), "message");
	char text[512];
	if (json_is_string(msg))
		clean_copy(text, sizeof(text), json_string_value(msg), sizeof(text));
	else if (body->len) {
		int n = snprintf(text, sizeof(text), "the server answered HTTP %d: ", status);
		clean_copy(text + n, sizeof(text) - (size_t)n, body->data, 200);
	} else
		snprintf(text, sizeof(text), "the server answered HTTP %d", status);
	if (status == 401 && c->token)
		snprintf(c->error, sizeof(c->error), "%s (token from %s)", text, c->token_from);
	else if (status == 401)
		snprintf(c->error, sizeof(c->error),
		         "%s (no token: pass --token, set ANVIL_TOKEN, or put \"token\" in %s)",
		         text, c->file);
	else
		snprintf(c->error, sizeof(c->error), "%s", text);
	json_decref(root);
}

int cliconn_call(struct cliconn *c, const char *method, const char *path, const json_t *body,
                 json_t **out)
{
	struct buf resp;
	buf_init(&resp);
	int status = 0, ret = CLI_EXIT_FAILED;
	int rc = cliconn_do(c, method, path, body, &status, &resp);
	if (rc < 0) {
		ret = rc == ERR_TOOBIG ? CLI_EXIT_FAILED : CLI_EXIT_UNREACHABLE;
		goto fail;
	}
	if (status < 200 || status > 299) {
		cliconn_describe(c, status, &resp);
		goto fail;
	}
	json_error_t je;
	json_t *root = json_loadb(resp.data ? resp.data : "", resp.len, 0, &je);
	if (!json_is_object(root)) {
		json_decref(root);
		snprintf(c->error, sizeof(c->error),
		         "the server's answer to %s %s is not a JSON object (%s)", method, path,
		         je.text);
		goto fail;
	}
	buf_cleanup(&resp);
	*out = root;
	return CLI_EXIT_OK;
fail:
	fprintf(stderr, "anvil: %s\n", c->error);
	buf_cleanup(&resp);
	return ret;
}

/* The first retry of a create is said, so that a wait is not silent. */
static void say_retry(void *ctx, int try, const char *why)
{
	const struct cliconn *c = ctx;
	if (try == 2)
		fprintf(stderr,
		        "anvil: no answer from the server at %s (%s); sending it again with the "
		        "same Idempotency-Key for up to %lds\n",
		        c->server, why, (c->retry_ms + 999) / 1000);
}

int cliconn_create(struct cliconn *c, const char *method, const char *path, const json_t *body,
                   json_t **out)
{
	char key[HTTPC_KEY_LEN + 1];
	httpc_new_key(key);
	if (!c->http)
		c->http = httpc_new();
	httpc_set_retry(c->http, key, c->retry_ms);
	httpc_on_retry(c->http, say_retry, c);
	int ret = cliconn_call(c, method, path, body, out);
	int tries = httpc_tries(c->http);
	httpc_set_retry(c->http, NULL, 0);
	httpc_on_retry(c->http, NULL, NULL);
	if (ret != CLI_EXIT_OK && tries > 1)
		fprintf(stderr,
		        "anvil: sent %d times within %lds with one Idempotency-Key (the answers "
		        "were lost); the server makes it at most once: look before sending it "
		        "again (`anvil jobs`, `anvil wf list`)\n",
		        tries, (c->retry_ms + 999) / 1000);
	return ret;
}

void cliconn_escape(struct buf *out, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("-._~", ch))
			buf_add(out, s, 1);
		else
			buf_printf(out, "%%%c%c", hex[ch >> 4], hex[ch & 15]);
	}
}
