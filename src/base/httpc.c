#include "base/httpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/curl_lazy.h"
#include "base/err.h"
#include "base/mem.h"

#define HTTPC_MAX_RESP (64u << 20)

struct httpc {
	CURL *curl;
	char errbuf[CURL_ERROR_SIZE];
	struct buf *out;
	int overflow;
	struct buf headers; /* the last answer's header lines, "Name: value\r\n" */
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
	free(c);
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

int httpc_do(struct httpc *c, const char *method, const char *url, const char *token,
             const char *body, size_t body_len, long timeout_ms, int *status, struct buf *out)
{
	CURL *h = c->curl;
	curl_easy_reset(h);
	c->errbuf[0] = '\0';
	c->out = out;
	c->overflow = 0;
	buf_reset(&c->headers);
	struct curl_slist *hdrs = NULL;
	char auth[512];
	if (token && *token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		hdrs = curl_slist_append(hdrs, auth);
	}
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	hdrs = curl_slist_append(hdrs, "Expect:");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	} else if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	}
	CURLcode cc = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	c->out = NULL;
	if (cc != CURLE_OK) {
		if (!c->errbuf[0])
			snprintf(c->errbuf, sizeof(c->errbuf), "%s", curl_easy_strerror(cc));
		if (c->overflow)
			return ERR_TOOBIG;
		return cc == CURLE_OPERATION_TIMEDOUT ? ERR_TIMEOUT : ERR_UPSTREAM;
	}
	long code = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	*status = (int)code;
	return 0;
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
