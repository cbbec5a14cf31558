#include "agent/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define MANIFEST_MAX (64 << 20) /* bytes of a manifest we read back */

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

int ckpt_complete(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > CKPT_NAME_MAX || name[0] == '.' || ends_with(name, ".tmp") ||
	    ends_with(name, ".partial"))
		return 0;
	return strspn(name,
	              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=@") == n;
}

void ckpt_key(int64_t job_id, const char *name, char *out, size_t n)
{
	snprintf(out, n, "ckpt/%lld/%s", (long long)job_id, name);
}

/* ---- upload ---- */

struct walk {
	struct objects *o;
	json_t *files, *dirs;
	struct ckpt_upload up;
	char *err;
	size_t errlen;
};

static int put_file(struct walk *w, const char *path, const char *rel, mode_t mode)
{
	if (w->up.files >= CKPT_FILES_MAX) {
		snprintf(w->err, w->errlen, "more than %d files", CKPT_FILES_MAX);
		return ERR_TOOBIG;
	}
	char key[OBJECTS_KEY_MAX];
	struct objects_info info;
	int rc = objects_put(w->o, path, key, &info);
	if (rc) {
		snprintf(w->err, w->errlen, "%s: %s", path, w->o->error);
		return rc;
	}
	json_array_append_new(w->files,
	                      json_pack("{s:s,s:s,s:I,s:i}", "path", rel, "key", key, "size",
	                                (json_int_t)info.size, "mode", (int)(mode & 0777)));
	w->up.files++;
	w->up.bytes += info.size;
	if (info.uploaded)
		w->up.sent_bytes += info.size;
	return 0;
}

static int walk_dir(struct walk *w, const char *path, const char *rel, int depth);

/* One entry under a checkpoint directory: a file, a directory, or left out. */
static int walk_entry(struct walk *w, const char *path, const char *rel, int depth)
{
	struct stat sb;
	if (lstat(path, &sb) < 0) {
		snprintf(w->err, w->errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	if (S_ISREG(sb.st_mode))
		return put_file(w, path, rel, sb.st_mode);
	if (S_ISDIR(sb.st_mode)) {
		json_array_append_new(w->dirs, json_string(rel));
		return walk_dir(w, path, rel, depth + 1);
	}
	log_warn("checkpoint: not a file or directory, left out path=%s", path);
	return 0;
}

static int walk_dir(struct walk *w, const char *path, const char *rel, int depth)
{
	if (depth > CKPT_DEPTH_MAX) {
		snprintf(w->err, w->errlen, "%s: deeper than %d directories", path, CKPT_DEPTH_MAX);
		return ERR_TOOBIG;
	}
	DIR *d = opendir(path);
	if (!d) {
		snprintf(w->err, w->errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *p = xasprintf("%s/%s", path, e->d_name);
		char *r = *rel ? xasprintf("%s/%s", rel, e->d_name) : xstrdup(e->d_name);
		rc = walk_entry(w, p, r, depth);
		free(p);
		free(r);
	}
	closedir(d);
	return rc;
}

/* The manifest, written to a hidden file beside the checkpoint (never a
 * complete checkpoint itself) and stored under its named key. */
static int put_manifest(struct walk *w, const char *dir, const char *name, int64_t job_id,
                        int is_dir)
{
	json_t *m = json_pack("{s:s,s:s,s:O,s:O}", "name", name, "kind", is_dir ? "dir" : "file",
	                      "dirs", w->dirs, "files", w->files);
	char *text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	char *tmp = xasprintf("%s/.anvil-manifest-%s", dir, name);
	int rc = text ? write_file_atomic(tmp, text, strlen(text), 0600) : ERR_INVALID;
	free(text);
	if (rc) {
		snprintf(w->err, w->errlen, "cannot write %s: %s", tmp, err_msg(rc));
	} else {
		char key[CKPT_NAME_MAX + 48];
		struct objects_info info;
		ckpt_key(job_id, name, key, sizeof(key));
		if ((rc = objects_put_named(w->o, key, tmp, &info)))
			snprintf(w->err, w->errlen, "%s: %s", key, w->o->error);
	}
	unlink(tmp);
	free(tmp);
	return rc;
}

int ckpt_upload(struct objects *o, const char *dir, const char *name, int64_t job_id,
                struct ckpt_upload *out, char *err, size_t errlen)
{
	struct walk w = {
	        .o = o, .files = json_array(), .dirs = json_array(), .err = err, .errlen = errlen};
	char *path = xasprintf("%s/%s", dir, name);
	struct stat sb;
	int rc = lstat(path, &sb) < 0 ? -errno : 0;
	if (rc)
		snprintf(err, errlen, "%s: %s", path, strerror(-rc));
	else if (S_ISDIR(sb.st_mode))
		rc = walk_dir(&w, path, "", 0);
	else if (S_ISREG(sb.st_mode))
		rc = put_file(&w, path, "", sb.st_mode);
	else
		snprintf(err, errlen, "%s: not a file or directory", path), rc = ERR_INVALID;
	if (rc == 0)
		rc = put_manifest(&w, dir, name, job_id, S_ISDIR(sb.st_mode));
	if (rc == 0)
		*out = w.up;
	json_decref(w.files);
	json_decref(w.dirs);
	free(path);
	return rc;
}

/* ---- restore ---- */

/* Whether rel is a path a manifest may name: relative, no "..", no "//". */
static int safe_rel(const char *rel)
{
	if (rel[0] == '/' || strstr(rel, "//"))
		return 0;
	for (const char *p = rel; *p; p = strchr(p, '/') ? strchr(p, '/') + 1 : p + strlen(p))
		if (strncmp(p, "..", 2) == 0 && (p[2] == '/' || p[2] == '\0'))
			return 0;
	return 1;
}

static int restore_files(struct objects *o, const json_t *m, const char *into, char *err,
                         size_t errlen)
{
	size_t i;
	json_t *x;
	json_array_foreach (json_object_get(m, "dirs"), i, x) {
		const char *rel = json_string_value(x);
		if (!rel || !safe_rel(rel)) {
			snprintf(err, errlen, "the manifest names a bad directory");
			return ERR_INVALID;
		}
		char *p = xasprintf("%s/%s", into, rel);
		int rc = mkdir_p(p, 0755);
		free(p);
		if (rc) {
			snprintf(err, errlen, "cannot make %s/%s: %s", into, rel, err_msg(rc));
			return rc;
		}
	}
	json_array_foreach (json_object_get(m, "files"), i, x) {
		const char *rel = jv_str(x, "path", NULL), *key = jv_str(x, "key", NULL);
		if (!rel || !key || !safe_rel(rel)) {
			snprintf(err, errlen, "the manifest names a bad file");
			return ERR_INVALID;
		}
		char *p = *rel ? xasprintf("%s/%s", into, rel) : xstrdup(into);
		struct objects_info info;
		int rc = objects_get(o, key, p, &info);
		if (rc == 0)
			chmod(p, (mode_t)(jv_int(x, "mode", 0644) & 0777));
		else
			snprintf(err, errlen, "%s (%s): %s", rel, key, o->error);
		free(p);
		if (rc)
			return rc;
	}
	return 0;
}

int ckpt_restore(struct objects *o, const char *key, const char *dir, int *restored, char *err,
                 size_t errlen)
{
	*restored = 0;
	const char *name = strrchr(key, '/');
	name = name ? name + 1 : key;
	if (!ckpt_complete(name)) {
		snprintf(err, errlen, "'%s' is not a checkpoint's key", key);
		return ERR_INVALID;
	}
	char *final = xasprintf("%s/%s", dir, name), *tmp = xasprintf("%s/.restore-%s", dir, name);
	char *mpath = xasprintf("%s/.restore-%s.manifest", dir, name);
	struct objects_info info;
	json_t *m = NULL;
	int rc = 0;
	if (access(final, F_OK) == 0)
		goto out; /* this node has it */
	if ((rc = objects_get(o, key, mpath, &info))) {
		snprintf(err, errlen, "%s: %s", key, o->error);
		goto out;
	}
	struct buf text;
	buf_init(&text);
	rc = read_file(mpath, MANIFEST_MAX, &text);
	if (rc)
		snprintf(err, errlen, "cannot read %s: %s", mpath, err_msg(rc));
	else
		rc = jv_parse_object(text.data, text.len, &m, err, errlen);
	buf_cleanup(&text);
	if (rc)
		goto out;
	rm_rf(tmp);
	int is_dir = strcmp(jv_str(m, "kind", ""), "dir") == 0;
	if (is_dir && (rc = mkdir_p(tmp, 0755)))
		snprintf(err, errlen, "cannot make %s: %s", tmp, err_msg(rc));
	if (rc == 0 && (rc = restore_files(o, m, tmp, err, errlen)) == 0 &&
	    rename(tmp, final) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
	}
	if (rc)
		rm_rf(tmp);
	else
		*restored = 1;
out:
	unlink(mpath);
	json_decref(m);
	free(final);
	free(tmp);
	free(mpath);
	return rc;
}

#define RESTORE_USAGE "usage: anvil _restore --key KEY -- COMMAND..."

int ckpt_restore_main(int argc, char **argv)
{
	if (argc < 5 || strcmp(argv[1], "--key") != 0 || strcmp(argv[3], "--") != 0) {
		fprintf(stderr, "%s\n", RESTORE_USAGE);
		return 2;
	}
	const char *key = argv[2], *dir = getenv("ANVIL_CHECKPOINT_DIR");
	const char *server = getenv("ANVIL_SERVER"), *token = getenv("ANVIL_EXEC_TOKEN");
	const char *att = getenv("ANVIL_ATTEMPT_ID");
	int64_t attempt = 0;
	if (!dir || !server || !token || !att || parse_i64(att, 1, INT64_MAX, &attempt)) {
		fprintf(stderr,
		        "anvil _restore: ANVIL_CHECKPOINT_DIR, ANVIL_SERVER, ANVIL_EXEC_TOKEN "
		        "and ANVIL_ATTEMPT_ID must be set (the agent sets them)\n");
		return 1;
	}
	struct httpc *h = httpc_new();
	struct objects o = {.server = server,
	                    .token = token,
	                    .attempt_id = attempt,
	                    .http = h,
	                    .retry_ms = 60000};
	char err[1024];
	int restored;
	int64_t t0 = now_ms();
	int rc = ckpt_restore(&o, key, dir, &restored, err, sizeof(err));
	httpc_free(h);
	if (rc) {
		fprintf(stderr, "anvil _restore: cannot restore checkpoint %s: %s\n", key, err);
		return 1;
	}
	if (restored)
		fprintf(stderr, "anvil: checkpoint %s restored into %s in %lld ms\n", key, dir,
		        (long long)(now_ms() - t0));
	execvp(argv[4], argv + 4);
	fprintf(stderr, "anvil _restore: cannot run '%s': %s\n", argv[4], strerror(errno));
	return 127;
}
