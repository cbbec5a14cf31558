/* api_util.c - what the API files share: JSON answers, path ids, bodies,
 * flushing before an answer. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jv.h"
#include "base/util.h"
#include "server/server.h"

void api_send_json(struct httpd_req *req, int status, json_t *o)
{
	char *text = jv_dump(o);
	httpd_json(req, status, text);
	free(text);
	json_decref(o);
}

/* Parses "/v1/jobs/17/logs" style ids; 0 when not a positive integer. */
int64_t api_path_id(const char *seg, size_t len)
{
	char tmp[24];
	if (len == 0 || len >= sizeof(tmp))
		return 0;
	memcpy(tmp, seg, len);
	tmp[len] = '\0';
	int64_t v;
	return parse_i64(tmp, 1, INT64_MAX, &v) == 0 ? v : 0;
}

int api_flush_or_fail(struct state *st, struct httpd_req *req)
{
	int rc = state_flush(st);
	if (rc)
		httpd_error(req, rc, "cannot persist the change");
	return rc;
}

json_t *api_body(struct httpd_req *req, const struct jv_field *fields)
{
	char err[256];
	json_t *body = NULL;
	int rc = jv_parse_object(req->body, req->body_len, &body, err, sizeof(err));
	if (rc == 0)
		rc = jv_check(body, fields, err, sizeof(err));
	if (rc) {
		httpd_error(req, rc, err);
		json_decref(body);
		return NULL;
	}
	return body;
}

int api_token_ok(struct httpd_req *req, const char *want)
{
	const char *h = httpd_header(req, "Authorization");
	if (!h || strncmp(h, "Bearer ", 7) != 0 || !want || !*want) /* "": revoked */
		return 0;
	h += 7;
	size_t n = strlen(want);
	if (strlen(h) != n)
		return 0;
	unsigned char diff = 0; /* constant time: no early exit on a mismatch */
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(h[i] ^ want[i]);
	return diff == 0;
}

int api_join_ok(struct server *s, struct httpd_req *req, char *why, size_t len)
{
	const char *h = httpd_header(req, "Authorization");
	const char *bearer = h && strncmp(h, "Bearer ", 7) == 0 ? h + 7 : NULL;
	pthread_mutex_lock(&s->join_mu);
	int rc = jointoken_check(&s->join, bearer, wall_ms(), why, len);
	pthread_mutex_unlock(&s->join_mu);
	return rc;
}

void api_poll_drop(struct node *n, const char *why)
{
	struct httpd_req *w = n->waiter;
	if (!w)
		return;
	n->waiter = NULL;
	httpd_error(w, ERR_AUTH, why);
	httpd_resume(w);
}
