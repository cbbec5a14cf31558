#include "cli/bundle.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/mem.h"
#include "base/tarball.h"
#include "base/util.h"
#include "cli/cliconn.h"

#define IGNORE_FILE      ".anvilignore"
#define IGNORE_MAX       (1 << 20)  /* bytes of an .anvilignore */
#define GIT_LIST_MAX     (64 << 20) /* bytes of git's file list */
#define BUNDLE_FILES_MAX 1000000

extern char **environ;

/* ---- .anvilignore ---- */

/* A path or pattern split at '/', empty parts dropped: v[i] point into buf. */
struct segs {
	char *buf;
	char **v;
	size_t n;
};

static void split(const char *s, struct segs *out)
{
	out->buf = xstrdup(s);
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == '/';
	out->v = xcalloc(cap + 1, sizeof(*out->v));
	out->n = 0;
	char *save = NULL;
	for (char *t = strtok_r(out->buf, "/", &save); t; t = strtok_r(NULL, "/", &save))
		out->v[out->n++] = t;
}

static void segs_free(struct segs *s)
{
	free(s->buf);
	free(s->v);
}

struct pattern {
	struct segs segs; /* "**" is a segment of its own */
	int negate;
	int dir_only;
	int anchored; /* had a '/' before its end: matched from the root */
};

struct bundle_ignore {
	struct pattern *v;
	size_t n, cap;
};

/* One line of the file into a pattern: 0, or 1 for nothing (blank, comment). */
static int parse_line(char *line, struct pattern *p)
{
	size_t len = strlen(line);
	while (len && strchr(" \t\r", line[len - 1]) && !(len > 1 && line[len - 2] == '\\'))
		line[--len] = '\0';
	if (!len || line[0] == '#')
		return 1;
	memset(p, 0, sizeof(*p));
	if (line[0] == '!') {
		p->negate = 1;
		line++, len--;
	} else if (line[0] == '\\') { /* "\#", "\!": the character itself */
		line++, len--;
	}
	if (len && line[len - 1] == '/') {
		p->dir_only = 1;
		line[--len] = '\0';
	}
	if (!len)
		return 1;
	p->anchored = strchr(line, '/') != NULL;
	split(line, &p->segs);
	if (p->segs.n == 0) {
		segs_free(&p->segs);
		return 1;
	}
	return 0;
}

struct bundle_ignore *bundle_ignore_parse(const char *text)
{
	struct bundle_ignore *ig = xcalloc(1, sizeof(*ig));
	char *copy = xstrdup(text ? text : ""), *save = NULL;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		struct pattern p;
		if (parse_line(line, &p))
			continue;
		XGROW(ig->v, ig->n, ig->cap);
		ig->v[ig->n++] = p;
	}
	free(copy);
	return ig;
}

void bundle_ignore_free(struct bundle_ignore *ig)
{
	if (!ig)
		return;
	for (size_t i = 0; i < ig->n; i++)
		segs_free(&ig->v[i].segs);
	free(ig->v);
	free(ig);
}

/* Pattern segments against path segments; "**" takes any number of them. */
static int match_segs(char *const *pat, size_t np, char *const *path, size_t nq)
{
	if (np == 0)
		return nq == 0;
	if (strcmp(pat[0], "**") == 0) {
		for (size_t k = 0; k <= nq; k++)
			if (match_segs(pat + 1, np - 1, path + k, nq - k))
				return 1;
		return 0;
	}
	return nq > 0 && fnmatch(pat[0], path[0], 0) == 0 &&
	       match_segs(pat + 1, np - 1, path + 1, nq - 1);
}

static int matches(const struct pattern *p, char *const *segs, size_t n)
{
	if (p->anchored)
		return match_segs(p->segs.v, p->segs.n, segs, n);
	return n > 0 && match_segs(p->segs.v, p->segs.n, segs + n - 1, 1);
}

/* The verdict on path itself: the last pattern that matches decides. */
static int decide(const struct bundle_ignore *ig, char *const *segs, size_t n, int is_dir)
{
	int out = 0;
	for (size_t i = 0; i < ig->n; i++) {
		const struct pattern *p = &ig->v[i];
		if ((!p->dir_only || is_dir) && matches(p, segs, n))
			out = !p->negate;
	}
	return out;
}

int bundle_ignored(const struct bundle_ignore *ig, const char *path, int is_dir)
{
	if (!ig || ig->n == 0)
		return 0;
	struct segs s;
	split(path, &s);
	int out = 0;
	for (size_t k = 1; k < s.n && !out; k++) /* the directories above it */
		out = decide(ig, s.v, k, 1);
	if (!out)
		out = decide(ig, s.v, s.n, is_dir);
	segs_free(&s);
	return out;
}

/* ---- the list of files ---- */

static void add_file(struct bundle_files *f, size_t *cap, const char *path)
{
	XGROW(f->v, f->n, *cap);
	f->v[f->n++] = xstrdup(path);
}

/* A regular file or a symbolic link (what a bundle holds). */
static int bundled_kind(const char *root, const char *rel)
{
	char *full = xasprintf("%s/%s", root, rel);
	struct stat sb;
	int ok = lstat(full, &sb) == 0 && (S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode));
	free(full);
	return ok;
}

static int walk(const char *root, const char *rel, const struct bundle_ignore *ig,
                struct bundle_files *f, size_t *cap, char *err, size_t errlen)
{
	char *dirpath = *rel ? xasprintf("%s/%s", root, rel) : xstrdup(root);
	DIR *d = opendir(dirpath);
	int rc = 0;
	if (!d) {
		rc = -errno;
		snprintf(err, errlen, "cannot read directory %s: %s", dirpath, strerror(errno));
	}
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		const char *name = de->d_name;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strcmp(name, ".git") == 0)
			continue;
		char *child = *rel ? xasprintf("%s/%s", rel, name) : xstrdup(name);
		char *full = xasprintf("%s/%s", root, child);
		struct stat sb;
		if (lstat(full, &sb) == 0 && S_ISDIR(sb.st_mode)) {
			if (!bundle_ignored(ig, child, 1))
				rc = walk(root, child, ig, f, cap, err, errlen);
		} else if (lstat(full, &sb) == 0 && (S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)) &&
		           !bundle_ignored(ig, child, 0)) {
			add_file(f, cap, child);
		}
		free(full);
		free(child);
		if (rc == 0 && f->n > BUNDLE_FILES_MAX) {
			snprintf(err, errlen,
			         "%s: more than %d files: list what to leave out in %s", root,
			         BUNDLE_FILES_MAX, IGNORE_FILE);
			rc = ERR_TOOBIG;
		}
	}
	if (d)
		closedir(d);
	free(dirpath);
	return rc;
}

/* `git -C dir ls-files -z` into out: 0, or -1 when dir is not in a git
 * work tree (or git is missing). */
static int git_ls_files(const char *dir, struct buf *out)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	char *argv[] = {"git", "-C", (char *)dir, "ls-files", "-z", NULL};
	pid_t pid;
	int rc = posix_spawnp(&pid, "git", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	char chunk[65536];
	ssize_t n;
	while (rc == 0 && (n = read(pfd[0], chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || out->len + (size_t)n > GIT_LIST_MAX)
			break; /* git is waited for below; a list cut short is refused */
		buf_add(out, chunk, (size_t)n);
	}
	close(pfd[0]);
	int ws = 0;
	if (rc == 0)
		while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
			;
	return rc == 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : -1;
}

static int by_bytes(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir's .anvilignore, or NULL when it has none. */
static int read_ignore(const char *dir, struct bundle_ignore **out, char *err, size_t errlen)
{
	char *path = xasprintf("%s/%s", dir, IGNORE_FILE);
	struct buf b;
	buf_init(&b);
	int rc = read_file(path, IGNORE_MAX, &b);
	if (rc == 0)
		*out = bundle_ignore_parse(b.data ? b.data : "");
	else if (rc != -ENOENT)
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
	buf_cleanup(&b);
	free(path);
	return rc == -ENOENT ? 0 : rc;
}

int bundle_list(const char *dir, struct bundle_files *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	struct bundle_ignore *ig = NULL;
	int rc = read_ignore(dir, &ig, err, errlen);
	if (rc)
		return rc;
	struct buf git;
	buf_init(&git);
	size_t cap = 0;
	if (git_ls_files(dir, &git) == 0) {
		out->from_git = 1;
		for (size_t off = 0; off < git.len; off += strlen(git.data + off) + 1) {
			const char *p = git.data + off;
			if (*p && bundled_kind(dir, p) && !bundle_ignored(ig, p, 0))
				add_file(out, &cap, p);
		}
	} else {
		rc = walk(dir, "", ig, out, &cap, err, errlen);
	}
	buf_cleanup(&git);
	bundle_ignore_free(ig);
	if (rc)
		bundle_files_free(out);
	else if (out->n)
		qsort(out->v, out->n, sizeof(*out->v), by_bytes);
	return rc;
}

void bundle_files_free(struct bundle_files *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->v[i]);
	free(f->v);
	memset(f, 0, sizeof(*f));
}

/* ---- packing and storing ---- */

int bundle_pack(const char *dir, const char *out, char *err, size_t errlen)
{
	struct bundle_files f;
	int rc = bundle_list(dir, &f, err, errlen);
	if (rc)
		return rc;
	rc = tarball_pack_list(dir, f.v, f.n, out, err, errlen);
	size_t len = strlen(err);
	if (rc == ERR_INVALID && len < errlen) /* a member refused (tarball.h) */
		snprintf(err + len, errlen - len,
		         " (a bundle keeps only the links that stay inside it: make this one "
		         "relative to a file of the tree, or leave it out with %s)",
		         IGNORE_FILE);
	bundle_files_free(&f);
	return rc;
}

int bundle_upload(struct cliconn *c, const char *path, char key[OBJECTS_KEY_MAX],
                  struct objects_info *info, char *err, size_t errlen)
{
	if (!c->http) /* the conn makes its connection on its first call */
		c->http = httpc_new();
	struct objects o = {
	        .server = c->server, .token = c->token, .http = c->http, .retry_ms = c->retry_ms};
	int rc = objects_put(&o, path, key, info);
	if (rc)
		snprintf(err, errlen, "code bundle: %s", o.error);
	return rc;
}

int bundle_tmp_open(struct bundle_tmp *t, char *err, size_t errlen)
{
	const char *dir = getenv("TMPDIR");
	dir = dir && *dir ? dir : "/tmp";
	t->named = 0;
	t->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (t->fd >= 0) {
		snprintf(t->path, sizeof(t->path), "/proc/%d/fd/%d", (int)getpid(), t->fd);
		return 0;
	}
	snprintf(t->path, sizeof(t->path), "%s/anvil-bundle-XXXXXX", dir);
	t->fd = mkostemp(t->path, O_CLOEXEC);
	if (t->fd < 0) {
		int rc = -errno;
		snprintf(err, errlen, "cannot make a temporary file in %s: %s", dir,
		         strerror(errno));
		t->named = 0; /* nothing to remove: bundle_tmp_close is a no-op */
		return rc;
	}
	t->named = 1;
	return 0;
}

void bundle_tmp_close(struct bundle_tmp *t)
{
	if (t->named)
		unlink(t->path);
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
}

int bundle_store(struct cliconn *c, const char *dir, char key[80], char *err, size_t errlen)
{
	struct bundle_tmp t;
	char why[512];
	int rc = bundle_tmp_open(&t, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "code bundle: %s", why);
		return rc;
	}
	struct objects_info info;
	rc = bundle_pack(dir, t.path, err, errlen);
	if (rc == 0)
		rc = bundle_upload(c, t.path, key, &info, err, errlen);
	bundle_tmp_close(&t);
	return rc;
}
