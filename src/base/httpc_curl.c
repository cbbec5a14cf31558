/* httpc_curl.c - httpc's libcurl backend: https:// URLs (an OpenLineage
 * endpoint behind TLS), and every URL when $ANVIL_HTTP_CLIENT=curl.
 * libcurl is loaded on the first such call (base/curl_lazy.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/curl_lazy.h"
#include "base/err.h"
#include "base/httpc_impl.h"
#include "base/mem.h"

struct httpc_curl {
	CURL *h;
	char errbuf[CURL_ERROR_SIZE];
	/* the running call */
	struct httpc *c;
	const struct httpc_call *call;
	int overflow;
};

void httpc_curl_free(struct httpc_curl *k)
{
	if (!k)
		return;
	curl_easy_cleanup(k->h);
	free(k);
}

static struct httpc_curl *curl_of(struct httpc *c)
{
	if (c->curl)
		return c->curl;
	curl_lazy_load();
	struct httpc_curl *k = xcalloc(1, sizeof(*k));
	k->h = curl_easy_init();
	if (!k->h) {
		fprintf(stderr, "anvil: curl_easy_init failed\n");
		abort();
	}
	return c->curl = k;
}

/* A 2xx body to the call's file; any other body into out, up to its cap:
 * past it an error for httpc_do, cut for a file transfer. */
static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct httpc_curl *k = ud;
	const struct httpc_call *call = k->call;
	size_t n = size * nmemb;
	long code = 0;
	curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &code);
	if (call->get_fd < 0 || code < 200 || code > 299) {
		if (call->out->len + n <= call->out_max)
			buf_add(call->out, ptr, n);
		else if (call->get_fd < 0) {
			k->overflow = 1;
			return 0;
		}
		return n;
	}
	for (size_t off = 0; off < n;) {
		ssize_t w = write(call->get_fd, ptr + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			k->c->fd_errno = errno;
			return 0;
		}
		off += (size_t)w;
	}
	return n;
}

/* One header line at a time; a status line starts a new answer (after a
 * 100 Continue or a redirect only the last one's headers count). */
static size_t on_header(char *ptr, size_t size, size_t nitems, void *ud)
{
	struct httpc_curl *k = ud;
	struct buf *headers = &k->c->headers;
	size_t n = size * nitems;
	if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0)
		buf_reset(headers);
	else if (headers->len + n <= HTTPC_MAX_HEADERS)
		buf_add(headers, ptr, n);
	return n;
}

static size_t on_read(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct httpc_curl *k = ud;
	for (;;) {
		ssize_t n = read(k->call->put_fd, ptr, size * nmemb);
		if (n >= 0)
			return (size_t)n;
		if (errno != EINTR) {
			k->c->fd_errno = errno;
			return CURL_READFUNC_ABORT;
		}
	}
}

/* The request's headers; the caller frees the list after the transfer. */
static struct curl_slist *header_list(const struct httpc_call *call)
{
	struct curl_slist *hdrs = NULL;
	char line[512];
	if (call->token && *call->token) {
		snprintf(line, sizeof(line), "Authorization: Bearer %s", call->token);
		hdrs = curl_slist_append(hdrs, line);
	}
	snprintf(line, sizeof(line), "Content-Type: %s", call->content_type);
	hdrs = curl_slist_append(hdrs, line);
	/* No "100 Continue" round trip for small bodies; an upload keeps it:
	 * the server may refuse one (401, 413) before it is sent. */
	if (call->put_fd < 0)
		hdrs = curl_slist_append(hdrs, "Expect:");
	if (call->extra)
		hdrs = curl_slist_append(hdrs, call->extra);
	if (call->idem_key && strlen(call->idem_key) < sizeof(line) - 20) {
		snprintf(line, sizeof(line), "Idempotency-Key: %s", call->idem_key);
		hdrs = curl_slist_append(hdrs, line);
	}
	return hdrs;
}

/* The call's method, body and deadlines on the reset handle. */
static void set_transfer(CURL *h, const struct httpc_call *call)
{
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, call->method);
	if (call->put_fd >= 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)call->put_size);
	} else if (call->body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, call->body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)call->body_len);
	} else if (strcmp(call->method, "GET") == 0) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	}
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, call->connect_ms);
	if (call->timeout_ms > 0)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, call->timeout_ms);
	if (call->idle_ms > 0) {
		long secs = call->idle_ms / 1000 > 0 ? call->idle_ms / 1000 : 1;
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, secs);
	}
}

int httpc_curl_run(struct httpc *c, const struct httpc_call *call, int *status)
{
	struct httpc_curl *k = curl_of(c);
	CURL *h = k->h;
	curl_easy_reset(h);
	k->errbuf[0] = '\0';
	k->c = c;
	k->call = call;
	k->overflow = 0;
	struct curl_slist *hdrs = header_list(call);
	curl_easy_setopt(h, CURLOPT_URL, call->url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, k->errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, k);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, k);
	curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(h, CURLOPT_READDATA, k);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	set_transfer(h, call);
	CURLcode cc = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	k->call = NULL;
	if (cc != CURLE_OK) {
		snprintf(c->error, sizeof(c->error), "%s",
		         k->errbuf[0] ? k->errbuf : curl_easy_strerror(cc));
		if (k->overflow) {
			snprintf(c->error, sizeof(c->error), "the answer is larger than %zu bytes",
			         call->out_max);
			return ERR_TOOBIG;
		}
		return cc == CURLE_OPERATION_TIMEDOUT ? ERR_TIMEOUT : ERR_UPSTREAM;
	}
	long code = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	*status = (int)code;
	return 0;
}
