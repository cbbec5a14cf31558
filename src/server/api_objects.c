/* api_objects.c - the object API: /v1/objects/KEY (docs/api.md,
 * "Objects"), the HTTP face of the object store (objstore/blob.h) that code
 * bundles, task inputs and outputs and checkpoints travel through.
 *
 *   GET  KEY           the bytes; X-Anvil-Size and X-Anvil-Sha256 say what
 *                      they must be (HEAD: only that)
 *   GET  KEY?stat=1    {"key", "size", "sha256"}
 *   PUT  sha256/HEX    stores the body by its content, refused unless its
 *                      SHA-256 is HEX; an existing object is not rewritten
 *   PUT  OTHER         a named put: replaces the object
 *
 * A PUT takes an Idempotency-Key (put_object).
 *
 * Bodies are never held in memory: httpd spools a PUT's body to a file in
 * the server's upload directory (api_objects_spool, asked before the body
 * is read, which is also where a caller without the right is turned away
 * before it sends gigabytes), and a GET answers from the stored file.
 *
 * Who may: the admin token, everything; an attempt's exec token (with
 * X-Anvil-Attempt: its id) while the attempt is not final, content keys
 * and the named keys at or under its job's checkpoint key (the task
 * document's "checkpoint"), and for a checkpointing job ckpt/JOB/...
 * (its uploaded checkpoints, agent/ckpt.h), nothing else. The state lock is held only to
 * check that; the store's calls run outside it, on the HTTP thread.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/hash.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/objects.h"
#include "base/util.h"
#include "objstore/blob.h"
#include "server/idem.h"
#include "server/server.h"

#define KEY_MAX 600 /* bytes of a key here, with its NUL (blob_key_check allows 512) */

/* A request's key (a content key in its one form) and what kind it is. */
struct object_key {
	const char *given; /* as the request wrote it */
	char key[KEY_MAX];
	int content; /* sha256/...: named by its hash */
	char hex[HASH_HEX_LEN + 1];
};

/* The first escape of a control byte in a path (httpd leaves them as
 * written: base/httpd.h), or NULL. */
static const char *control_escape(const char *s)
{
	for (const char *p = strchr(s, '%'); p; p = strchr(p + 1, '%')) {
		if (!isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2]))
			continue;
		char hex[3] = {p[1], p[2], '\0'};
		unsigned long v = strtoul(hex, NULL, 16);
		if (v < 0x20 || v == 0x7f)
			return p;
	}
	return NULL;
}

static int parse_key(const char *rest, struct object_key *k, char *err, size_t errlen)
{
	k->given = rest;
	const char *ctl = control_escape(rest);
	if (ctl) {
		/* refused, not cut: decoded, a%00b would be stored as a */
		snprintf(err, errlen,
		         "object key '%.200s': holds %.3s, %s; a key is letters, digits and "
		         ". _ - / only",
		         rest, ctl, strncmp(ctl, "%00", 3) == 0 ? "a NUL byte" : "a control byte");
		return ERR_INVALID;
	}
	if (objects_key_canon(rest, k->key, sizeof(k->key), err, errlen))
		return ERR_INVALID;
	k->content = objects_key_hash(k->key, k->hex);
	return k->content ? 0 : blob_key_check(k->key, err, errlen);
}

/* Whether key is the checkpoint key ckpt or under it. */
static int under(const char *key, const char *ckpt)
{
	size_t n = ckpt ? strlen(ckpt) : 0;
	return n && strncmp(key, ckpt, n) == 0 && (key[n] == '\0' || key[n] == '/');
}

int api_objects_exec_ok(struct state *st, const char *token, int64_t attempt_id, const char *key)
{
	char hex[HASH_HEX_LEN + 1];
	const struct attempt *a = state_attempt(st, attempt_id);
	const struct job *j = a ? state_job(st, a->job_id) : NULL;
	char ckpt[40];
	snprintf(ckpt, sizeof(ckpt), "ckpt/%lld", (long long)(j ? j->id : 0));
	return a && j && token && a->exec_token[0] && !job_state_final(a->state) &&
	       secret_equal(token, a->exec_token) &&
	       (objects_key_hash(key, hex) || under(key, jv_str(j->task, "checkpoint", NULL)) ||
	        (j->checkpointing && under(key, ckpt)));
}

/* Whether req carries the exec token of a live attempt that may touch k. */
static int exec_token_may(struct server *s, struct httpd_req *req, const struct object_key *k)
{
	const char *h = httpd_header(req, "X-Anvil-Attempt");
	const char *auth = httpd_header(req, "Authorization");
	int64_t id = 0;
	if (!h || parse_i64(h, 1, INT64_MAX, &id) || !auth || strncmp(auth, "Bearer ", 7) != 0)
		return 0;
	state_lock(&s->state);
	int ok = api_objects_exec_ok(&s->state, auth + 7, id, k->key);
	state_unlock(&s->state);
	return ok;
}

/* 0 when req may touch k, else ERR_AUTH with why in err. */
static int may(struct server *s, struct httpd_req *req, const struct object_key *k, char *err,
               size_t errlen)
{
	if (api_token_ok(req, s->admin_token) || exec_token_may(s, req, k))
		return 0;
	snprintf(err, errlen,
	         "this call needs the admin token, or an exec token (ANVIL_EXEC_TOKEN, with "
	         "X-Anvil-Attempt: ANVIL_ATTEMPT_ID) of an attempt still running, for content "
	         "keys and its task's checkpoint key");
	return ERR_AUTH;
}

int64_t api_objects_spool(struct httpd_req *req, void *ctx)
{
	struct server *s = ctx;
	static const char prefix[] = "/v1/objects/";
	if (strcmp(req->method, "PUT") != 0 || strncmp(req->path, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	req->route = "objects_put";
	struct object_key k;
	char err[512];
	int rc = parse_key(req->path + sizeof(prefix) - 1, &k, err, sizeof(err));
	if (rc == 0)
		rc = may(s, req, &k, err, sizeof(err));
	const char *idem = httpd_header(req, IDEM_HEADER); /* refused before the body, too */
	if (rc == 0 && idem)
		rc = idem_key_check(idem, err, sizeof(err));
	const char *cl = httpd_header(req, "Content-Length");
	int64_t len = 0;
	if (rc == 0 && cl && parse_i64(cl, 0, INT64_MAX, &len) == 0 && len > s->object_max) {
		snprintf(err, sizeof(err),
		         "body: %lld bytes, larger than the limit of %lld bytes "
		         "(anvil server --object-max-size)",
		         (long long)len, (long long)s->object_max);
		rc = ERR_TOOBIG;
	}
	if (rc == 0)
		return s->object_max;
	httpd_error(req, rc, err);
	return -1;
}

static json_t *info_json(const struct object_key *k, const struct blob_info *info, int stored)
{
	json_t *o = json_pack("{s:s,s:I,s:s}", "key", k->key, "size", (json_int_t)info->size,
	                      "sha256", info->sha256);
	if (stored >= 0)
		json_object_set_new(o, "stored", json_boolean(stored));
	return o;
}

static void send_info(struct httpd_req *req, int status, const struct object_key *k,
                      const struct blob_info *info, int stored)
{
	api_send_json(req, status, info_json(k, info, stored));
}

/* A failure of the store, answered: 404 when there is no such object. */
static void store_failed(struct httpd_req *req, const struct object_key *k, int rc,
                         const char *what)
{
	char msg[KEY_MAX + 200];
	if (rc == ERR_NOTFOUND)
		snprintf(msg, sizeof(msg), "no object %s", k->key);
	else if (rc == ERR_UPSTREAM)
		snprintf(msg, sizeof(msg),
		         "object %s is corrupt in the store (its size or hash "
		         "differs from its record)",
		         k->key);
	else if (rc == -ENOSPC || rc == -EDQUOT)
		snprintf(msg, sizeof(msg),
		         "object %s: cannot %s it: %s (make room in the state directory's "
		         "file system, then send it again)",
		         k->key, what, err_msg(rc));
	else
		snprintf(msg, sizeof(msg), "object %s: cannot %s it: %s", k->key, what,
		         err_msg(rc));
	if (rc != ERR_NOTFOUND)
		log_error("object store failed key=%s op=%s err=%s", k->key, what, err_msg(rc));
	httpd_error(req, rc, msg);
}

static void get_object(struct server *s, struct httpd_req *req, const struct object_key *k)
{
	const char *stat_q = httpd_query(req, "stat");
	struct blob_info info;
	if (stat_q && strcmp(stat_q, "0") != 0) {
		req->route = "objects_stat";
		int rc = blob_stat(s->state.objects, k->key, &info);
		if (rc)
			store_failed(req, k, rc, "stat");
		else
			send_info(req, 200, k, &info, -1);
		return;
	}
	req->route = "objects_get";
	int fd = -1;
	int rc = blob_read_fd(s->state.objects, k->key, &fd, &info);
	if (rc) {
		store_failed(req, k, rc, "read");
		return;
	}
	char size[24];
	snprintf(size, sizeof(size), "%lld", (long long)info.size);
	httpd_send_fd(req, 200, fd, (uint64_t)info.size);
	httpd_add_header(req, "X-Anvil-Size", size);
	httpd_add_header(req, "X-Anvil-Sha256", info.sha256);
}

/* Stores a content key's upload (info: its hash and size): the answer
 * and its status, or NULL when it is answered already (refused). */
static json_t *put_content(struct server *s, struct httpd_req *req, const struct object_key *k,
                           const struct blob_info *info, int *status)
{
	if (strcmp(info->sha256, k->hex) != 0) {
		char msg[KEY_MAX + 200];
		snprintf(
		        msg, sizeof(msg),
		        "object key '%.200s': the body's SHA-256 is %s (%lld bytes), not the key's",
		        k->given, info->sha256, (long long)info->size);
		httpd_error(req, ERR_INVALID, msg);
		return NULL;
	}
	struct blob_info have;
	if (blob_stat(s->state.objects, k->key, &have) == 0 && have.size == info->size) {
		*status = 200;
		return info_json(k, &have, 0); /* stored once already */
	}
	char key[80];
	struct blob_info put = *info;
	int rc = blob_put_file(s->state.objects, req->body_path, key, &put);
	if (rc) {
		store_failed(req, k, rc, "store");
		return NULL;
	}
	*status = 201;
	return info_json(k, &put, 1);
}

static json_t *put_named(struct server *s, struct httpd_req *req, const struct object_key *k,
                         int *status)
{
	struct blob_info info;
	char other[KEY_MAX + 2];
	/* one named put at a time: two of one key could mix data and record,
	 * and a and a/b could each pass the other's check */
	pthread_mutex_lock(&s->objects_mu);
	int rc = blob_key_conflict(s->state.objects, k->key, other, sizeof(other));
	if (rc == 0)
		rc = blob_put_named_file(s->state.objects, k->key, req->body_path, &info);
	pthread_mutex_unlock(&s->objects_mu);
	if (rc == ERR_CONFLICT) {
		char msg[2 * KEY_MAX + 200];
		snprintf(msg, sizeof(msg),
		         "object key '%s': %s '%s'; a key is an object or a prefix of objects, "
		         "never both",
		         k->key,
		         other[strlen(other) - 1] == '/' ? "is a prefix of the objects under"
		                                         : "is under the existing object",
		         other);
		httpd_error(req, rc, msg);
		return NULL;
	}
	if (rc) {
		store_failed(req, k, rc, "store");
		return NULL;
	}
	*status = 200;
	return info_json(k, &info, 1);
}

/* A PUT, with its Idempotency-Key when it has one (server/idem.h): a
 * content key's repeat is harmless anyway, but a named key's is not (a
 * retried checkpoint save must not put back an older one over a newer),
 * and every create takes the key alike. The key is written, with the
 * answer, once the object is stored: a crash between the two leaves an
 * object without its key, and the repeat stores the same bytes again. */
static void put_object(struct server *s, struct httpd_req *req, const struct object_key *k)
{
	struct blob_info info = {0};
	int keyed = httpd_header(req, IDEM_HEADER) != NULL;
	if (k->content || keyed) {
		int rc = hash_file_sha256(req->body_path, info.sha256, &info.size);
		if (rc) {
			store_failed(req, k, rc, "read the upload of");
			return;
		}
	}
	struct api_idem ik;
	if (api_idem_begin(req, &ik, info.sha256))
		return;
	state_lock(&s->state);
	int seen = api_idem_seen(&s->state, req, &ik, NULL);
	state_unlock(&s->state);
	if (seen)
		return;
	int status = 0;
	json_t *o =
	        k->content ? put_content(s, req, k, &info, &status) : put_named(s, req, k, &status);
	if (!o)
		return;
	if (!ik.has) {
		api_send_json(req, status, o);
		return;
	}
	state_lock(&s->state);
	/* a repeat that ran alongside may have been first: its answer stands */
	if (api_idem_seen(&s->state, req, &ik, NULL))
		json_decref(o);
	else
		api_idem_answer(&s->state, req, &ik, status, o, 0);
	state_unlock(&s->state);
}

void api_objects(struct server *s, struct httpd_req *req, const char *rest)
{
	const char *m = req->method;
	int get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0, put = strcmp(m, "PUT") == 0;
	req->route = put ? "objects_put" : "objects_get";
	struct object_key k;
	char err[512];
	int rc = get || put ? parse_key(rest, &k, err, sizeof(err)) : ERR_NOTFOUND;
	if (rc == ERR_NOTFOUND)
		snprintf(err, sizeof(err), "use GET, HEAD or PUT on /v1/objects/KEY");
	if (rc == 0)
		rc = may(s, req, &k, err, sizeof(err));
	if (rc == 0 && put && !req->body_path) {
		rc = ERR_INVALID; /* not spooled: the spool callback refused it */
		snprintf(err, sizeof(err), "body: the upload was not received");
	}
	if (rc)
		httpd_error(req, rc, err);
	else if (get)
		get_object(s, req, &k);
	else
		put_object(s, req, &k);
}
