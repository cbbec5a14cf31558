#include "base/httpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/curl_lazy.h"
#include "base/err.h"
#include "base/mem.h"

#define HTTPC_MAX_RESP  (64u << 20)
#define HTTPC_MAX_ERROR (64u << 10) /* a non-2xx body of a file transfer */

struct httpc {
	CURL *curl;
	char errbuf[CURL_ERROR_SIZE];
	struct buf *out;
	int overflow;
	struct buf headers; /* the last answer's header lines, "Name: value\r\n" */
	char *extra;        /* httpc_set_header's line, or NULL */
	/* a file transfer: the descriptor, and a failed write's errno */
	int fd;
	int fd_errno;
};

void httpc_global_init(void)
{
	curl_lazy_load();
}

struct httpc *httpc_new(void)
{
	curl_lazy_load();
	struct httpc *c = xcalloc(1, sizeof(*c));
	c->curl = curl_easy_init();
	if (!c->curl) {
		fprintf(stderr, "anvil: curl_easy_init failed\n");
		abort();
	}
	buf_init(&c->headers);
	return c;
}

void httpc_free(struct httpc *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	buf_cleanup(&c->headers);
	free(c->extra);
	free(c);
}

void httpc_set_header(struct httpc *c, const char *line)
{
	free(c->extra);
	c->extra = line ? xstrdup(line) : NULL;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct httpc *c = ud;
	size_t n = size * nmemb;
	if (c->out->len + n > HTTPC_MAX_RESP) {
		c->overflow = 1;
		return 0;
	}
	buf_add(c->out, ptr, n);
	return n;
}

/* One header line at a time; a status line starts a new answer (after a
 * 100 Continue or a redirect only the last one's headers count). */
static size_t on_header(char *ptr, size_t size, size_t nitems, void *ud)
{
	struct httpc *c = ud;
	size_t n = size * nitems;
	if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0)
		buf_reset(&c->headers);
	else if (c->headers.len + n <= HTTPC_MAX_HEADERS)
		buf_add(&c->headers, ptr, n);
	return n;
}

/* What every request does first: reset the handle and the answer's
 * state, and set the URL, method, headers and callbacks. The header list
 * is the caller's to free after the transfer. */
static struct curl_slist *prepare(struct httpc *c, const char *method, const char *url,
                                  const char *token, const char *content_type)
{
	CURL *h = c->curl;
	curl_easy_reset(h);
	c->errbuf[0] = '\0';
	c->overflow = 0;
	c->fd = -1;
	c->fd_errno = 0;
	buf_reset(&c->headers);
	struct curl_slist *hdrs = NULL;
	char auth[512];
	if (token && *token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		hdrs = curl_slist_append(hdrs, auth);
	}
	char ctype[128];
	snprintf(ctype, sizeof(ctype), "Content-Type: %s", content_type);
	hdrs = curl_slist_append(hdrs, ctype);
	/* No "100 Continue" round trip for small bodies; an upload keeps it:
	 * the server may refuse one (401, 413) before it is sent. */
	if (strcmp(content_type, "application/octet-stream") != 0)
		hdrs = curl_slist_append(hdrs, "Expect:");
	if (c->extra)
		hdrs = curl_slist_append(hdrs, c->extra);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	return hdrs;
}

/* Runs the prepared transfer: 0 with *status, or the failure. */
static int perform(struct httpc *c, struct curl_slist *hdrs, int *status)
{
	CURLcode cc = curl_easy_perform(c->curl);
	curl_slist_free_all(hdrs);
	c->out = NULL;
	if (cc != CURLE_OK) {
		if (c->fd_errno)
			snprintf(c->errbuf, sizeof(c->errbuf), "cannot write the body: %s",
			         strerror(c->fd_errno));
		else if (!c->errbuf[0])
			snprintf(c->errbuf, sizeof(c->errbuf), "%s", curl_easy_strerror(cc));
		if (c->overflow)
			return ERR_TOOBIG;
		return cc == CURLE_OPERATION_TIMEDOUT ? ERR_TIMEOUT : ERR_UPSTREAM;
	}
	long code = 0;
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &code);
	*status = (int)code;
	return 0;
}

int httpc_do(struct httpc *c, const char *method, const char *url, const char *token,
             const char *body, size_t body_len, long timeout_ms, int *status, struct buf *out)
{
	struct curl_slist *hdrs = prepare(c, method, url, token, "application/json");
	CURL *h = c->curl;
	c->out = out;
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	} else if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	}
	return perform(c, hdrs, status);
}

/* A file transfer's deadlines: connecting, and moving nothing for idle_ms. */
static void idle_limits(CURL *h, long idle_ms)
{
	long secs = idle_ms / 1000 > 0 ? idle_ms / 1000 : 1;
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, idle_ms < 10000 ? idle_ms : 10000);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, secs);
}

/* A 2xx body to the file, another into c->out (capped). */
static size_t on_file_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct httpc *c = ud;
	size_t n = size * nmemb;
	long code = 0;
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &code);
	if (code < 200 || code > 299) {
		if (c->out->len + n <= HTTPC_MAX_ERROR)
			buf_add(c->out, ptr, n);
		return n;
	}
	for (size_t off = 0; off < n;) {
		ssize_t w = write(c->fd, ptr + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			c->fd_errno = errno;
			return 0;
		}
		off += (size_t)w;
	}
	return n;
}

int httpc_get_file(struct httpc *c, const char *url, const char *token, int fd, long idle_ms,
                   int *status, struct buf *err_body)
{
	struct curl_slist *hdrs = prepare(c, "GET", url, token, "application/json");
	CURL *h = c->curl;
	c->out = err_body;
	c->fd = fd;
	curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_file_data);
	idle_limits(h, idle_ms);
	return perform(c, hdrs, status);
}

static size_t on_read(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct httpc *c = ud;
	for (;;) {
		ssize_t n = read(c->fd, ptr, size * nmemb);
		if (n >= 0)
			return (size_t)n;
		if (errno != EINTR) {
			c->fd_errno = errno;
			return CURL_READFUNC_ABORT;
		}
	}
}

int httpc_put_file(struct httpc *c, const char *url, const char *token, int fd, int64_t size,
                   long idle_ms, int *status, struct buf *out)
{
	struct curl_slist *hdrs = prepare(c, "PUT", url, token, "application/octet-stream");
	CURL *h = c->curl;
	c->out = out;
	c->fd = fd;
	curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(h, CURLOPT_READDATA, c);
	curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
	idle_limits(h, idle_ms);
	int rc = perform(c, hdrs, status);
	if (rc == ERR_UPSTREAM && c->fd_errno)
		snprintf(c->errbuf, sizeof(c->errbuf), "cannot read the body: %s",
		         strerror(c->fd_errno));
	return rc;
}

const char *httpc_error(const struct httpc *c)
{
	return c->errbuf;
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
