/* api_util.c - what the API files share: JSON answers, path ids, bodies,
 * flushing before an answer, a create's Idempotency-Key. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/failpoint.h"
#include "base/hash.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/util.h"
#include "server/idem.h"
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
	if (rc == 0)
		return 0;
	/* The change is made in memory and cannot be taken back whole; what
	 * holds is that no agent acts on it before it is written (state.h):
	 * the answer says exactly that (docs/operations.md, "The server"). */
	char msg[400];
	snprintf(msg, sizeof(msg),
	         "accepted but not yet stored: %s; the server keeps it in memory and writes it "
	         "as soon as it can (it retries every 50 ms), and no node acts on it before "
	         "then; if the server restarts first, it is lost: send it again",
	         rc == -ENOSPC || rc == -EDQUOT ? "the server's disk is full" : err_msg(rc));
	httpd_error(req, rc, msg);
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
	return secret_equal(h + 7, want);
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

int api_idem_begin(struct httpd_req *req, struct api_idem *ik, const char *body_sha256)
{
	memset(ik, 0, sizeof(*ik));
	const char *key = httpd_header(req, IDEM_HEADER);
	if (!key)
		return 0;
	char err[256];
	int rc = idem_key_check(key, err, sizeof(err));
	if (rc) {
		httpd_error(req, rc, err);
		return -1;
	}
	/* the credential that sent it: a key is only ever found by its sender */
	const char *auth = httpd_header(req, "Authorization");
	idem_scope(auth ? auth : "", ik->rec.scope);
	snprintf(ik->rec.key, sizeof(ik->rec.key), "%s", key);
	char body[HASH_HEX_LEN + 1];
	if (!body_sha256) {
		hash_sha256(req->body ? req->body : "", req->body ? req->body_len : 0, body);
		body_sha256 = body;
	}
	idem_digest(req->method, req->path, body_sha256, ik->rec.digest);
	ik->has = 1;
	return 0;
}

/* Answers a repeat of a key with its first answer. */
static void replay(struct state *st, struct httpd_req *req, const struct store_idem *r,
                   api_idem_remake remake)
{
	int status = r->status;
	json_t *o = !r->body && remake ? remake(st, r->ref, &status) : NULL;
	if (!r->body && !o) {
		char msg[512];
		snprintf(msg, sizeof(msg),
		         "header '%s': '%.255s' was used for a create whose answer cannot be made "
		         "again (%s); use a new key",
		         IDEM_HEADER, r->key, r->ref[0] ? r->ref : "nothing recorded");
		httpd_error(req, ERR_CONFLICT, msg);
		return;
	}
	if (o)
		api_send_json(req, status, o);
	else
		httpd_json(req, status, r->body);
	httpd_add_header(req, IDEM_REPLAYED_HEADER, "true");
}

int api_idem_seen(struct state *st, struct httpd_req *req, const struct api_idem *ik,
                  api_idem_remake remake)
{
	if (!ik->has)
		return 0;
	struct store_idem r;
	int rc = state_idem_find(st, ik->rec.scope, ik->rec.key, &r);
	if (rc == ERR_NOTFOUND)
		return 0;
	if (rc) {
		httpd_error(req, rc, "cannot read the Idempotency-Key records; try again");
		return 1;
	}
	if (strcmp(r.digest, ik->rec.digest) != 0) {
		char msg[512], keep[32];
		int64_t ms = st->config.idem_keep_ms;
		if (ms % 3600000 == 0)
			snprintf(keep, sizeof(keep), "%lldh", (long long)(ms / 3600000));
		else
			snprintf(keep, sizeof(keep), "%llds", (long long)(ms / 1000));
		snprintf(msg, sizeof(msg),
		         "header '%s': '%.255s' was used for another request (a different method, "
		         "path or body) within the last %s; a new request needs a new key",
		         IDEM_HEADER, ik->rec.key, keep);
		httpd_error(req, ERR_CONFLICT, msg);
	} else {
		replay(st, req, &r, remake);
	}
	free(r.body);
	return 1;
}

/* ik's key for the next flush, with status and either the answer (body)
 * or what the create made (ref). */
static void add_key(struct state *st, const struct api_idem *ik, int status, char *body,
                    const char *ref)
{
	if (!ik->has)
		return;
	struct store_idem r = ik->rec;
	r.status = status;
	r.body = body;
	r.created_ms = 0; /* now */
	if (ref)
		snprintf(r.ref, sizeof(r.ref), "%s", ref);
	state_idem_add(st, &r);
}

void api_idem_ref(struct state *st, const struct api_idem *ik, int status, const char *ref)
{
	add_key(st, ik, status, NULL, ref);
}

int api_idem_answer(struct state *st, struct httpd_req *req, const struct api_idem *ik, int status,
                    json_t *o, int strict)
{
	char *text = jv_dump(o);
	json_decref(o);
	add_key(st, ik, status, text, NULL);
	int rc = state_flush(st);
	if (rc && strict) {
		httpd_error(req, rc, "cannot persist the change");
	} else {
		/* a test's crash between the commit and the answer (failpoint.h) */
		if (rc == 0 && ik->has)
			failpoint_crash("create.flushed");
		httpd_json(req, status, text);
	}
	free(text);
	return rc;
}
