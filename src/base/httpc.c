#include "base/httpc.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"

#define HTTPC_MAX_RESP (64u << 20)

struct httpc {
	CURL *curl;
	char errbuf[CURL_ERROR_SIZE];
	struct buf *out;
	int overflow;
};

void httpc_global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct httpc *httpc_new(void)
{
	struct httpc *c = xcalloc(1, sizeof(*c));
	c->curl = curl_easy_init();
	if (!c->curl) {
		fprintf(stderr, "anvil: curl_easy_init failed\n");
		abort();
	}
	return c;
}

void httpc_free(struct httpc *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
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

int httpc_do(struct httpc *c, const char *method, const char *url, const char *token,
             const char *body, size_t body_len, long timeout_ms, int *status, struct buf *out)
{
	CURL *h = c->curl;
	curl_easy_reset(h);
	c->errbuf[0] = '\0';
	c->out = out;
	c->overflow = 0;
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
