#include "base/objects.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/mem.h"
#include "base/util.h"

#define STAT_TIMEOUT_MS 30000

/* The last failure, in o->error (cut to fit: paths and keys can be long). */
__attribute__((format(printf, 2, 3))) static void say(struct objects *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(o->error, sizeof(o->error), fmt, ap);
	va_end(ap);
}

static int hex_run(const char *s, size_t n)
{
	return strlen(s) >= n && strspn(s, "0123456789abcdef") >= n;
}

int objects_key_hash(const char *key, char hex[HASH_HEX_LEN + 1])
{
	if (strncmp(key, "sha256/", 7) != 0)
		return 0;
	const char *k = key + 7;
	if (strlen(k) == 64 && hex_run(k, 64)) {
		memcpy(hex, k, 65);
		return 1;
	}
	if (strlen(k) == 65 && hex_run(k, 2) && k[2] == '/' && hex_run(k + 3, 62)) {
		memcpy(hex, k, 2);
		memcpy(hex + 2, k + 3, 63);
		return 1;
	}
	return 0;
}

int objects_key_canon(const char *key, char *out, size_t outlen, char *err, size_t errlen)
{
	char hex[HASH_HEX_LEN + 1];
	int n;
	if (objects_key_hash(key, hex))
		n = snprintf(out, outlen, "sha256/%s", hex);
	else if (strncmp(key, "sha256/", 7) == 0)
		n = -1;
	else
		n = snprintf(out, outlen, "%s", key);
	if (n < 0) {
		snprintf(err, errlen,
		         "object key '%.100s': a content key is sha256/ and 64 lower-case hex "
		         "digits (or sha256/XX/ and the other 62)",
		         key);
		return ERR_INVALID;
	}
	if ((size_t)n >= outlen) {
		snprintf(err, errlen, "object key '%.100s...': longer than %zu characters", key,
		         outlen - 1);
		return ERR_INVALID;
	}
	return 0;
}

/* The URL of key (checked to be made of URL-safe characters). */
static char *key_url(struct objects *o, const char *key, const char *query)
{
	if (!*key ||
	    strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") !=
	            strlen(key)) {
		snprintf(o->error, sizeof(o->error),
		         "object key '%.100s': letters, digits and . _ - / only", key);
		return NULL;
	}
	return xasprintf("%s/v1/objects/%s%s", o->server, key, query ? query : "");
}

/* What every call sends and how it is retried; key: an upload's
 * Idempotency-Key, NULL for a read. done() undoes it for the httpc's
 * next user. */
static void set_attempt(struct objects *o, const char *key)
{
	char line[64];
	snprintf(line, sizeof(line), "X-Anvil-Attempt: %lld", (long long)o->attempt_id);
	httpc_set_header(o->http, o->attempt_id > 0 ? line : NULL);
	httpc_set_retry(o->http, key, o->retry_ms);
}

static void done(struct objects *o)
{
	httpc_set_header(o->http, NULL);
	httpc_set_retry(o->http, NULL, 0);
}

/* Describes a transfer that failed, or a non-2xx answer, in o->error. */
static int failed(struct objects *o, const char *what, const char *key, int rc, int status,
                  const struct buf *body)
{
	if (rc) {
		say(o, "%s %s: the server at %s: %s", what, key, o->server, httpc_error(o->http));
		return rc;
	}
	json_t *doc = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
	const char *msg =
	        json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
	say(o, "%s %s: the server answered %d: %.300s", what, key, status,
	    msg         ? msg
	    : body->len ? body->data
	                : "(no body)");
	json_decref(doc);
	return status == 404   ? ERR_NOTFOUND
	       : status == 401 ? ERR_AUTH
	       : status == 413 ? ERR_TOOBIG
	       : status == 400 ? ERR_INVALID
	                       : ERR_UPSTREAM;
}

/* {"size", "sha256"} of an answer into info; 0 or ERR_UPSTREAM. */
static int parse_info(struct objects *o, const char *key, const struct buf *body,
                      struct objects_info *info)
{
	json_t *doc = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
	json_t *size = json_object_get(doc, "size");
	const char *sha = json_string_value(json_object_get(doc, "sha256"));
	int ok = json_is_integer(size) && json_integer_value(size) >= 0 && hash_hex_ok(sha);
	if (ok) {
		info->size = json_integer_value(size);
		memcpy(info->sha256, sha, HASH_HEX_LEN + 1);
	} else {
		snprintf(o->error, sizeof(o->error),
		         "object %s: the server's answer has no size and sha256: %.200s", key,
		         body->len ? body->data : "(empty)");
	}
	json_decref(doc);
	return ok ? 0 : ERR_UPSTREAM;
}

int objects_stat(struct objects *o, const char *key, struct objects_info *info)
{
	char canon[600];
	int rc = objects_key_canon(key, canon, sizeof(canon), o->error, sizeof(o->error));
	char *url = rc ? NULL : key_url(o, canon, "?stat=1");
	if (!url)
		return ERR_INVALID;
	struct buf body;
	buf_init(&body);
	int status = 0;
	set_attempt(o, NULL);
	rc = httpc_do(o->http, "GET", url, o->token, NULL, 0, STAT_TIMEOUT_MS, &status, &body);
	done(o);
	if (rc || status != 200)
		rc = failed(o, "stat of", canon, rc, status, &body);
	else
		rc = parse_info(o, canon, &body, info);
	buf_cleanup(&body);
	free(url);
	return rc;
}

/* Checks the downloaded file at tmp against what the server said and, for
 * a content key, what the key says. */
static int check_download(struct objects *o, const char *key, const char *tmp,
                          struct objects_info *got)
{
	char size_h[32], sha_h[80], want[HASH_HEX_LEN + 1];
	int rc = hash_file_sha256(tmp, got->sha256, &got->size);
	if (rc) {
		say(o, "object %s: cannot read %s back: %s", key, tmp, strerror(-rc));
		return rc;
	}
	const char *sh = httpc_header(o->http, "X-Anvil-Sha256", sha_h, sizeof(sha_h));
	const char *sz = httpc_header(o->http, "X-Anvil-Size", size_h, sizeof(size_h));
	int64_t size = -1;
	if (sz)
		parse_i64(sz, 0, INT64_MAX, &size);
	if (objects_key_hash(key, want) && strcmp(want, got->sha256) != 0)
		rc = ERR_UPSTREAM;
	else if (sh && strcmp(sh, got->sha256) != 0)
		rc = ERR_UPSTREAM;
	else if (sz && size != got->size)
		rc = ERR_UPSTREAM;
	if (rc)
		snprintf(o->error, sizeof(o->error),
		         "object %.300s: the download is corrupt: %lld bytes with SHA-256 %.64s, "
		         "the server said %.24s bytes with %.64s",
		         key, (long long)got->size, got->sha256, sz ? sz : "?", sh ? sh : "?");
	return rc;
}

int objects_get(struct objects *o, const char *key, const char *path, struct objects_info *info)
{
	char canon[600];
	int rc = objects_key_canon(key, canon, sizeof(canon), o->error, sizeof(o->error));
	char *url = rc ? NULL : key_url(o, canon, NULL);
	if (!url)
		return ERR_INVALID;
	char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		say(o, "object %s: cannot create %s: %s", canon, tmp, strerror(errno));
		goto out;
	}
	struct buf body;
	buf_init(&body);
	int status = 0;
	set_attempt(o, NULL);
	rc = httpc_get_file(o->http, url, o->token, fd, OBJECTS_IDLE_MS, &status, &body);
	done(o);
	if (close(fd) < 0 && rc == 0) {
		rc = -errno;
		say(o, "object %s: cannot write %s: %s", canon, tmp, strerror(errno));
	} else if (rc || status != 200) {
		rc = failed(o, "download of", canon, rc, status, &body);
	} else {
		struct objects_info got = {0};
		rc = check_download(o, canon, tmp, &got);
		if (rc == 0 && rename(tmp, path) < 0) {
			rc = -errno;
			say(o, "object %s: cannot rename it to %s: %s", canon, path,
			    strerror(errno));
		}
		if (rc == 0)
			*info = got;
	}
	buf_cleanup(&body);
	if (rc)
		unlink(tmp);
out:
	free(tmp);
	free(url);
	return rc;
}

/* PUT the file at path (size bytes) to key; the answer's info. */
static int put(struct objects *o, const char *key, const char *path, int64_t size,
               struct objects_info *info)
{
	char *url = key_url(o, key, NULL);
	if (!url)
		return ERR_INVALID;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int rc = -errno;
		say(o, "cannot open %s: %s", path, strerror(errno));
		free(url);
		return rc;
	}
	struct buf body;
	buf_init(&body);
	int status = 0;
	char key_hdr[HTTPC_KEY_LEN + 1];
	httpc_new_key(key_hdr); /* one upload: its retries send the same */
	set_attempt(o, key_hdr);
	int rc = httpc_put_file(o->http, url, o->token, fd, size, OBJECTS_IDLE_MS, &status, &body);
	done(o);
	close(fd);
	if (rc || (status != 200 && status != 201))
		rc = failed(o, "upload of", key, rc, status, &body);
	else
		rc = parse_info(o, key, &body, info);
	buf_cleanup(&body);
	free(url);
	return rc;
}

/* The file's hash and size, or the failure in o->error. */
static int hash_local(struct objects *o, const char *path, struct objects_info *mine)
{
	int rc = hash_file_sha256(path, mine->sha256, &mine->size);
	if (rc)
		say(o, "cannot read %s: %s", path, strerror(-rc));
	return rc;
}

int objects_put(struct objects *o, const char *path, char key[OBJECTS_KEY_MAX],
                struct objects_info *info)
{
	struct objects_info mine = {0}, theirs = {0};
	int rc = hash_local(o, path, &mine);
	if (rc)
		return rc;
	char k[OBJECTS_KEY_MAX];
	snprintf(k, sizeof(k), "sha256/%s", mine.sha256);
	rc = objects_stat(o, k, &theirs);
	if (rc == 0 && theirs.size == mine.size && strcmp(theirs.sha256, mine.sha256) == 0) {
		mine.uploaded = 0; /* stored once already */
	} else if (rc == 0 || rc == ERR_NOTFOUND) {
		rc = put(o, k, path, mine.size, &theirs);
		if (rc == 0 && strcmp(theirs.sha256, mine.sha256) != 0) {
			snprintf(o->error, sizeof(o->error),
			         "upload of %s: the server stored SHA-256 %s", k, theirs.sha256);
			rc = ERR_UPSTREAM;
		}
		mine.uploaded = 1;
	}
	if (rc)
		return rc;
	memcpy(key, k, sizeof(k));
	*info = mine;
	return 0;
}

int objects_put_named(struct objects *o, const char *key, const char *path,
                      struct objects_info *info)
{
	struct objects_info mine = {0}, theirs = {0};
	int rc = hash_local(o, path, &mine);
	if (rc == 0)
		rc = put(o, key, path, mine.size, &theirs);
	if (rc == 0 && (strcmp(theirs.sha256, mine.sha256) != 0 || theirs.size != mine.size)) {
		snprintf(
		        o->error, sizeof(o->error),
		        "upload of %s: the server stored %lld bytes with SHA-256 %s, not %lld with "
		        "%s (was the file changing?)",
		        key, (long long)theirs.size, theirs.sha256, (long long)mine.size,
		        mine.sha256);
		rc = ERR_UPSTREAM;
	}
	if (rc == 0) {
		mine.uploaded = 1;
		*info = mine;
	}
	return rc;
}
