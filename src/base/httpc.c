/* httpc.c - the public calls, the answer's headers, and the choice of a
 * backend by the URL's scheme (httpc.h says why). */
#include "base/httpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/event_lazy.h"
#include "base/httpc_impl.h"
#include "base/mem.h"

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
	free(c);
}

void httpc_set_header(struct httpc *c, const char *line)
{
	free(c->extra);
	c->extra = line ? xstrdup(line) : NULL;
}

/* Runs call on the backend its scheme picks. A failure leaves no headers
 * (there was no answer to read them from). */
static int run(struct httpc *c, struct httpc_call *call, int *status)
{
	buf_reset(&c->headers);
	c->error[0] = '\0';
	c->fd_errno = 0;
	call->extra = c->extra;
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
