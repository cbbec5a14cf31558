/* httpc.c - the public calls, the answer's headers, and the choice of a
 * backend by the URL's scheme (httpc.h says why). */
#include "base/httpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/err.h"
#include "base/event_lazy.h"
#include "base/httpc_impl.h"
#include "base/mem.h"
#include "base/util.h"

#define HTTPC_MAX_RESP  (64u << 20)
#define HTTPC_MAX_ERROR (64u << 10) /* a non-2xx body of a file transfer */

void httpc_global_init(void)
{
	event_lazy_load();
}

struct httpc *httpc_new(void)
{
	struct httpc *c = xcalloc(1, sizeof(*c));
	buf_init(&c->headers);
	const char *lib = getenv("ANVIL_HTTP_CLIENT");
	c->curl_always = lib && strcmp(lib, "curl") == 0;
	return c;
}

void httpc_free(struct httpc *c)
{
	if (!c)
		return;
	httpc_event_free(c->event);
	httpc_curl_free(c->curl);
	buf_cleanup(&c->headers);
	free(c->extra);
	free(c->idem_key);
	free(c);
}

void httpc_set_header(struct httpc *c, const char *line)
{
	free(c->extra);
	c->extra = line ? xstrdup(line) : NULL;
}

void httpc_set_retry(struct httpc *c, const char *key, long retry_ms)
{
	free(c->idem_key);
	c->idem_key = key ? xstrdup(key) : NULL;
	c->retry_ms = retry_ms > 0 ? retry_ms : 0;
}

int httpc_tries(const struct httpc *c)
{
	return c->tries;
}

void httpc_on_retry(struct httpc *c, httpc_retry_fn fn, void *ctx)
{
	c->on_retry = fn;
	c->on_retry_ctx = ctx;
}

void httpc_new_key(char key[HTTPC_KEY_LEN + 1])
{
	random_hex(key, HTTPC_KEY_LEN / 2);
}

/* Runs call once on the backend its scheme picks. A failure leaves no
 * headers (there was no answer to read them from). */
static int try_once(struct httpc *c, struct httpc_call *call, int *status)
{
	buf_reset(&c->headers);
	c->error[0] = '\0';
	c->fd_errno = 0;
	call->extra = c->extra;
	call->idem_key = c->idem_key;
	int rc = c->curl_always || strncasecmp(call->url, "https://", 8) == 0
	                 ? httpc_curl_run(c, call, status)
	                 : httpc_event_run(c, call, status);
	if (rc < 0 && c->fd_errno)
		snprintf(c->error, sizeof(c->error), "cannot %s the body: %s",
		         call->put_fd >= 0 ? "read" : "write", strerror(c->fd_errno));
	if (rc < 0)
		buf_reset(&c->headers);
	return rc;
}

/* Whether a try's result means its answer was lost, so that the request
 * may be sent again (httpc_set_retry). */
static int lost(const struct httpc *c, int rc, int status)
{
	if (rc == 0)
		return status == 502 || status == 503 || status == 504;
	return (rc == ERR_UPSTREAM || rc == ERR_TIMEOUT) && !c->fd_errno;
}

/* Puts the call's files and answer back where the first try found them:
 * 0, or -1 when a file cannot be (a pipe): no retry then. */
static int rewind_call(const struct httpc_call *call, off_t put_at, off_t get_at, size_t out_len)
{
	if (call->put_fd >= 0 && (put_at < 0 || lseek(call->put_fd, put_at, SEEK_SET) < 0))
		return -1;
	if (call->get_fd >= 0 && (get_at < 0 || ftruncate(call->get_fd, get_at) < 0 ||
	                          lseek(call->get_fd, get_at, SEEK_SET) < 0))
		return -1;
	if (call->out && call->out->data) {
		call->out->len = out_len;
		call->out->data[out_len] = '\0';
	}
	return 0;
}

/* Runs call, and again while its answer is lost and the handle's retry
 * budget lasts (httpc_set_retry): only a GET or a call with a key. */
static int run(struct httpc *c, struct httpc_call *call, int *status)
{
	int may = c->retry_ms > 0 && (c->idem_key || strcmp(call->method, "GET") == 0);
	off_t put_at = may && call->put_fd >= 0 ? lseek(call->put_fd, 0, SEEK_CUR) : -1;
	off_t get_at = may && call->get_fd >= 0 ? lseek(call->get_fd, 0, SEEK_CUR) : -1;
	size_t out_len = call->out ? call->out->len : 0;
	int64_t deadline = now_ms() + c->retry_ms;
	long gap = HTTPC_RETRY_FIRST_MS;
	c->tries = 0;
	for (;;) {
		c->tries++;
		int rc = try_once(c, call, status);
		if (!may || !lost(c, rc, rc ? 0 : *status))
			return rc;
		int64_t left = deadline - now_ms();
		if (left <= 0 || rewind_call(call, put_at, get_at, out_len) < 0)
			return rc;
		if (c->on_retry) {
			char why[HTTPC_ERROR_MAX];
			if (rc)
				snprintf(why, sizeof(why), "%s", c->error);
			else
				snprintf(why, sizeof(why), "it answered %d", *status);
			c->on_retry(c->on_retry_ctx, c->tries + 1, why);
		}
		sleep_ms(gap < left ? gap : left);
		gap = gap * 2 < HTTPC_RETRY_GAP_MS ? gap * 2 : HTTPC_RETRY_GAP_MS;
	}
}

int httpc_do(struct httpc *c, const char *method, const char *url, const char *token,
             const char *body, size_t body_len, long timeout_ms, int *status, struct buf *out)
{
	struct httpc_call call = {
	        .method = method,
	        .url = url,
	        .token = token,
	        .content_type = "application/json",
	        .body = body,
	        .body_len = body_len,
	        .put_fd = -1,
	        .get_fd = -1,
	        .timeout_ms = timeout_ms,
	        .connect_ms = timeout_ms < 5000 ? timeout_ms : 5000,
	        .out = out,
	        .out_max = HTTPC_MAX_RESP,
	};
	return run(c, &call, status);
}

int httpc_get_file(struct httpc *c, const char *url, const char *token, int fd, long idle_ms,
                   int *status, struct buf *err_body)
{
	struct httpc_call call = {
	        .method = "GET",
	        .url = url,
	        .token = token,
	        .content_type = "application/json",
	        .put_fd = -1,
	        .get_fd = fd,
	        .connect_ms = idle_ms < 10000 ? idle_ms : 10000,
	        .idle_ms = idle_ms,
	        .out = err_body,
	        .out_max = HTTPC_MAX_ERROR,
	};
	return run(c, &call, status);
}

int httpc_put_file(struct httpc *c, const char *url, const char *token, int fd, int64_t size,
                   long idle_ms, int *status, struct buf *out)
{
	struct httpc_call call = {
	        .method = "PUT",
	        .url = url,
	        .token = token,
	        .content_type = "application/octet-stream",
	        .put_fd = fd,
	        .put_size = size,
	        .get_fd = -1,
	        .connect_ms = idle_ms < 10000 ? idle_ms : 10000,
	        .idle_ms = idle_ms,
	        .out = out,
	        .out_max = HTTPC_MAX_RESP,
	};
	return run(c, &call, status);
}

const char *httpc_error(const struct httpc *c)
{
	return c->error;
}

const char *httpc_header(const struct httpc *c, const char *name, char *out, size_t outlen)
{
	size_t nlen = strlen(name);
	const char *p = c->headers.data, *end = p ? p + c->headers.len : NULL;
	while (p && p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *next = eol ? eol + 1 : end;
		if ((size_t)(next - p) > nlen && strncasecmp(p, name, nlen) == 0 &&
		    p[nlen] == ':') {
			const char *v = p + nlen + 1, *ve = eol ? eol : end;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			if (outlen == 0)
				return out;
			size_t len = (size_t)(ve - v) < outlen - 1 ? (size_t)(ve - v) : outlen - 1;
			memcpy(out, v, len);
			out[len] = '\0';
			return out;
		}
		p = next;
	}
	return NULL;
}
