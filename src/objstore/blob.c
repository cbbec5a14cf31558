#include "objstore/blob.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crypto_lazy.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/objects.h"
#include "base/util.h"

struct blob_store {
	char *uri;
	char *dir;
};

/* mkdir -p of the directory that holds path. */
static int make_parents(const char *path)
{
	char *dir = xstrdup(path);
	char *slash = strrchr(dir, '/');
	int rc = 0;
	if (slash && slash != dir) {
		*slash = '\0';
		rc = mkdir_p(dir, 0755);
	}
	free(dir);
	return rc;
}

int blob_open(const char *uri, struct blob_store **out, char *err, size_t errlen)
{
	if (strncmp(uri, "file://", 7) != 0 || uri[7] != '/') {
		snprintf(err, errlen,
		         "object store '%.200s': only file:///ABSOLUTE/DIR is supported (s3:// "
		         "comes "
		         "with the cache tier)",
		         uri);
		return ERR_INVALID;
	}
	/* 0700: the store holds every job's code, outputs and checkpoints, for
	 * its daemon only (what is below it may then be 0755 and 0644) */
	int rc = mkdir_p(uri + 7, 0700);
	if (rc) {
		snprintf(err, errlen, "object store %s: %s", uri, strerror(-rc));
		return rc;
	}
	struct blob_store *s = xcalloc(1, sizeof(*s));
	s->uri = xstrdup(uri);
	s->dir = xstrdup(uri + 7);
	*out = s;
	return 0;
}

void blob_close(struct blob_store *s)
{
	if (!s)
		return;
	free(s->uri);
	free(s->dir);
	free(s);
}

const char *blob_uri(const struct blob_store *s)
{
	return s->uri;
}

int blob_key_check(const char *key, char *err, size_t errlen)
{
	size_t n = strlen(key);
	const char *why = NULL;
	if (n == 0 || n > 512)
		why = "1 to 512 characters";
	else if (key[0] == '/' || key[n - 1] == '/' || strstr(key, "//"))
		why = "no leading, trailing or double '/'";
	else if (strstr(key, "..") || strstr(key, ".meta") || strstr(key, ".tmp."))
		why = "no '..', and no part ending .meta or holding .tmp.";
	else if (strncmp(key, "sha256/", 7) == 0 || strncmp(key, "staging/", 8) == 0 ||
	         strcmp(key, "sha256") == 0 || strcmp(key, "staging") == 0)
		why = "sha256/ and staging/ are the store's own (content keys, uploads)";
	for (const char *c = key; !why && *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			why = "no control bytes (a newline, a tab, ...)";
	for (const char *c = key; !why && *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '.' || *c == '_' || *c == '-' || *c == '/'))
			why = "letters, digits and . _ - / only";
	if (!why)
		return 0;
	snprintf(err, errlen, "object key '%.80s': %s", key, why);
	return ERR_INVALID;
}

/* A suffix no other call's temporary name has: this process's id and a
 * count of the calls that asked (threads share the store). */
static unsigned long unique(void)
{
	static unsigned long counter;
	return __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
}

static void hex_of(const unsigned char *md, unsigned int n, char out[65])
{
	for (unsigned int i = 0; i < n && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	out[64] = '\0';
}

/* Copies from fd in to a temporary file beside final, hashing; then fsync
 * and rename onto final. */
static int copy_atomic(int in, const char *final, struct blob_info *info)
{
	int rc = make_parents(final);
	if (rc)
		return rc;
	char *tmp = xasprintf("%s.tmp.%d.%lu", final, (int)getpid(), unique());
	int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		rc = -errno;
		free(tmp);
		return rc;
	}
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	char buf[1 << 16];
	ssize_t n;
	info->size = 0;
	while (rc == 0 && (n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			rc = errno == EINTR ? 0 : -errno;
			continue;
		}
		EVP_DigestUpdate(md, buf, (size_t)n);
		info->size += n;
		for (ssize_t off = 0; off < n && rc == 0;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0 && errno != EINTR)
				rc = -errno;
			off += w > 0 ? w : 0;
		}
	}
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dn = 0;
	EVP_DigestFinal_ex(md, digest, &dn);
	EVP_MD_CTX_free(md);
	hex_of(digest, dn, info->sha256);
	if (rc == 0 && fsync(out) < 0)
		rc = -errno;
	if (close(out) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, final) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	free(tmp);
	return rc;
}

/* The file of key, plus suffix: a content key (either form) lives at
 * sha256/<2 hex>/<62 hex>, so that no directory holds every object. */
static char *file_of(const struct blob_store *s, const char *key, const char *suffix)
{
	char hex[HASH_HEX_LEN + 1];
	if (objects_key_hash(key, hex))
		return xasprintf("%s/sha256/%.2s/%s%s", s->dir, hex, hex + 2, suffix);
	return xasprintf("%s/%s%s", s->dir, key, suffix);
}

static char *path_of(const struct blob_store *s, const char *key)
{
	return file_of(s, key, "");
}

/* <key>.meta: {"size", "sha256"}, written atomically after the data
 * (through a temporary name of this call's own). */
static int write_meta(const struct blob_store *s, const char *key, const struct blob_info *info)
{
	char *path = file_of(s, key, ".meta");
	char *tmp = xasprintf("%s.tmp.%d.%lu", path, (int)getpid(), unique());
	char *text = xasprintf("{\"size\": %lld, \"sha256\": \"%s\"}\n", (long long)info->size,
	                       info->sha256);
	int rc = write_file_atomic(tmp, text, strlen(text), 0644);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	free(text);
	free(tmp);
	free(path);
	return rc;
}

int blob_stat(struct blob_store *s, const char *key, struct blob_info *info)
{
	char *path = file_of(s, key, ".meta");
	FILE *f = fopen(path, "r");
	free(path);
	if (!f)
		return errno == ENOENT ? ERR_NOTFOUND : -errno;
	char text[256];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	json_t *o = NULL;
	char err[64];
	if (jv_parse_object(text, n, &o, err, sizeof(err)))
		return ERR_UPSTREAM;
	info->size = jv_int(o, "size", -1);
	snprintf(info->sha256, sizeof(info->sha256), "%s", jv_str(o, "sha256", ""));
	json_decref(o);
	if (info->size < 0 || strlen(info->sha256) != 64)
		return ERR_UPSTREAM;
	/* the record without its data (removed by hand, or by a cleanup that
	 * stopped half way) is no object: a reader must not count on it */
	char *data = file_of(s, key, "");
	struct stat sb;
	int rc = stat(data, &sb) != 0       ? (errno == ENOENT ? ERR_NOTFOUND : -errno)
	         : sb.st_size != info->size ? ERR_UPSTREAM
	                                    : 0;
	free(data);
	return rc;
}

int blob_put_file(struct blob_store *s, const char *path, char key[80], struct blob_info *info)
{
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	/* hash into a staging name, then move it to its content's key */
	char *staging = xasprintf("%s/staging/%d-%lu", s->dir, (int)getpid(), unique());
	int rc = copy_atomic(in, staging, info);
	close(in);
	if (rc == 0) {
		snprintf(key, 80, "sha256/%s", info->sha256);
		char *final = path_of(s, key);
		struct blob_info have;
		if (blob_stat(s, key, &have) == 0 && have.size == info->size) {
			unlink(staging); /* stored once already */
		} else {
			rc = make_parents(final);
			if (rc == 0 && rename(staging, final) < 0)
				rc = -errno;
			if (rc == 0)
				rc = write_meta(s, key, info);
		}
		free(final);
	}
	if (rc)
		unlink(staging);
	free(staging);
	return rc;
}

int blob_key_conflict(struct blob_store *s, const char *key, char *other, size_t len)
{
	char *path = path_of(s, key);
	char *rel = path + strlen(s->dir) + 1; /* the key, in its file's name */
	struct stat sb;
	int rc = 0;
	/* an object at a prefix (a/b's a) is a file where a directory must be */
	for (char *p = strchr(rel, '/'); p && rc == 0; p = strchr(p + 1, '/')) {
		*p = '\0';
		int found = stat(path, &sb) == 0;
		if (found && !S_ISDIR(sb.st_mode)) {
			snprintf(other, len, "%s", rel);
			rc = ERR_CONFLICT;
		}
		*p = '/';
		if (!found)
			break; /* nor anything deeper */
	}
	/* objects under it (a's a/b) are a directory where its file must be;
	 * an empty one, what deleting them left, is removed */
	if (rc == 0 && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && rmdir(path) < 0) {
		snprintf(other, len, "%s/", rel);
		rc = ERR_CONFLICT;
	}
	free(path);
	return rc;
}

/* A named put's checks: the key's rules, and no object in its way. */
static int named_ok(struct blob_store *s, const char *key)
{
	char err[128];
	if (blob_key_check(key, err, sizeof(err)))
		return ERR_INVALID;
	return blob_key_conflict(s, key, err, sizeof(err));
}

int blob_put_named(struct blob_store *s, const char *key, const void *data, size_t len,
                   struct blob_info *info)
{
	int rc = named_ok(s, key);
	if (rc)
		return rc;
	char *tmpsrc = xasprintf("%s/staging/src-%d-%lu", s->dir, (int)getpid(), unique());
	rc = make_parents(tmpsrc);
	int fd = rc ? -1 : open(tmpsrc, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		rc = rc ? rc : -errno;
	for (size_t off = 0; rc == 0 && off < len;) {
		ssize_t w = write(fd, (const char *)data + off, len - off);
		if (w < 0 && errno != EINTR)
			rc = -errno;
		off += w > 0 ? (size_t)w : 0;
	}
	if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
		rc = -errno;
	char *final = path_of(s, key);
	if (rc == 0)
		rc = copy_atomic(fd, final, info);
	if (rc == 0)
		rc = write_meta(s, key, info);
	if (fd >= 0)
		close(fd);
	unlink(tmpsrc);
	free(tmpsrc);
	free(final);
	return rc;
}

int blob_put_named_file(struct blob_store *s, const char *key, const char *path,
                        struct blob_info *info)
{
	int rc = named_ok(s, key);
	if (rc)
		return rc;
	int in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	char *final = path_of(s, key);
	rc = copy_atomic(in, final, info);
	close(in);
	if (rc == 0)
		rc = write_meta(s, key, info);
	free(final);
	return rc;
}

int blob_read_fd(struct blob_store *s, const char *key, int *fd, struct blob_info *info)
{
	struct blob_info want;
	int rc = blob_stat(s, key, &want);
	if (rc)
		return rc;
	char *src = path_of(s, key);
	int in = open(src, O_RDONLY | O_CLOEXEC);
	free(src);
	if (in < 0)
		return errno == ENOENT ? ERR_NOTFOUND : -errno;
	struct stat sb;
	if (fstat(in, &sb) < 0 || sb.st_size != want.size) {
		close(in);
		return ERR_UPSTREAM; /* corrupt: never hand out other bytes */
	}
	*fd = in;
	*info = want;
	return 0;
}

int blob_get_file(struct blob_store *s, const char *key, const char *path, struct blob_info *info)
{
	struct blob_info want;
	int rc = blob_stat(s, key, &want);
	if (rc)
		return rc;
	char *src = path_of(s, key);
	int in = open(src, O_RDONLY | O_CLOEXEC);
	free(src);
	if (in < 0)
		return errno == ENOENT ? ERR_NOTFOUND : -errno;
	rc = copy_atomic(in, path, info);
	close(in);
	if (rc == 0 && (info->size != want.size || strcmp(info->sha256, want.sha256) != 0)) {
		unlink(path); /* corrupt: never hand out other bytes */
		rc = ERR_UPSTREAM;
	}
	return rc;
}

int blob_delete(struct blob_store *s, const char *key)
{
	char *meta = file_of(s, key, ".meta"), *data = path_of(s, key);
	int rc = 0;
	if (unlink(meta) < 0 && errno != ENOENT)
		rc = -errno;
	if (unlink(data) < 0 && errno != ENOENT && rc == 0)
		rc = -errno;
	free(meta);
	free(data);
	return rc;
}
