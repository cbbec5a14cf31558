#include "agent/fence.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/sigsafe.h"
#include "base/util.h"

#define COVERS_MAX 2 /* the work directory's, this binary's */

struct fence {
	struct fence_account acct;
	char *covers[COVERS_MAX]; /* covers[0]: the work directory's */
	int ncovers;
	char *self; /* this binary, bound into each view: the account cannot reach it */
};

/* ---- the account ---- */

static int lookup(const char *user, struct fence_account *a, char *err, size_t errlen)
{
	char buf[16384];
	struct passwd pw, *res = NULL;
	if (getpwnam_r(user, &pw, buf, sizeof(buf), &res) != 0 || !res) {
		snprintf(err, errlen,
		         "rank-user: the account '%s' does not exist on this node: create it "
		         "(useradd --system --user-group --no-create-home --shell "
		         "/usr/sbin/nologin %s; make demo and anvil fleet bootstrap do) or name "
		         "another with --rank-user; ranks never run as root by default",
		         user, user);
		return ERR_NOTFOUND;
	}
	snprintf(a->name, sizeof(a->name), "%s", user);
	a->uid = pw.pw_uid;
	a->gid = pw.pw_gid;
	int n = FENCE_GROUPS_MAX;
	if (getgrouplist(user, pw.pw_gid, a->groups, &n) < 0)
		n = FENCE_GROUPS_MAX; /* more than we keep: the first ones */
	a->ngroups = n;
	return 0;
}

const struct fence_account *fence_account(const struct fence *f)
{
	return &f->acct;
}

const char *fence_cover(const struct fence *f)
{
	return f->covers[0];
}

const char *fence_self(const struct fence *f)
{
	return f->self;
}

/* ---- what the account can reach ---- */

static int in_groups(const struct fence_account *a, gid_t g)
{
	if (g == a->gid)
		return 1;
	for (int i = 0; i < a->ngroups; i++)
		if (a->groups[i] == g)
			return 1;
	return 0;
}

/* Whether the account has the execute (search) bit of sb: its owner's,
 * its group's or others', as the kernel picks. */
static int has_x(const struct fence_account *a, const struct stat *sb)
{
	if (sb->st_uid == a->uid)
		return (sb->st_mode & S_IXUSR) != 0;
	if (in_groups(a, sb->st_gid))
		return (sb->st_mode & S_IXGRP) != 0;
	return (sb->st_mode & S_IXOTH) != 0;
}

static int searchable(const struct fence_account *a, const char *dir)
{
	struct stat sb;
	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
		return 0;
	return a->uid == 0 || has_x(a, &sb);
}

/* The length of the first directory on the way to path ("/a", "/a/b", ...,
 * and path itself with whole) that the account cannot search; 0 when it
 * can search every one. */
static size_t closed_prefix(const struct fence_account *a, const char *path, int whole)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		if (!*s && !whole)
			return 0;
		char c = *s;
		*s = '\0';
		int ok = searchable(a, p);
		*s = c;
		if (!ok)
			return (size_t)(s - p);
		if (!c)
			return 0;
	}
}

int fence_can_enter(const struct fence *f, const char *path)
{
	return path[0] == '/' && closed_prefix(&f->acct, path, 1) == 0;
}

int fence_can_exec(const struct fence *f, const char *path)
{
	const struct fence_account *a = &f->acct;
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	struct stat sb;
	if (!slash || (size_t)(slash - path) >= sizeof(dir) || stat(path, &sb) != 0 ||
	    !S_ISREG(sb.st_mode))
		return 0;
	snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	if (!fence_can_enter(f, dir))
		return 0;
	if (a->uid == 0)
		return (sb.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)) != 0;
	return has_x(a, &sb);
}

/* The directory to cover: the first one on the way to work (resolved)
 * that the account cannot search, else work itself. Under /tmp, which the
 * rank sees as its own, the cover is made there: /tmp/<first>. */
static char *cover_of(const struct fence_account *a, const char *work)
{
	if (strncmp(work, "/tmp/", 5) == 0) {
		size_t len = 5 + strcspn(work + 5, "/");
		return xstrndup(work, len);
	}
	size_t n = closed_prefix(a, work, 0);
	return n ? xstrndup(work, n) : xstrdup(work);
}

/* Ranks run this binary (session holder, task wrapper, launcher, MPI's
 * helpers): where the account cannot reach it (a build under /root, a
 * checkout under /tmp), it is bound into each view, read-only, at its own
 * path under a cover of its own, or under the work directory's when one
 * holds the other. */
static void cover_self(struct fence *f)
{
	char self[PATH_MAX];
	if (!realpath("/proc/self/exe", self))
		return;
	char *cover = cover_of(&f->acct, self);
	int reachable = strcmp(cover, self) == 0 && fence_can_exec(f, self);
	if (reachable ||
	    strcmp(cover, self) == 0) { /* a mode the account lacks: said by the agent */
		free(cover);
		return;
	}
	f->self = xstrdup(self);
	if (path_within(f->covers[0], cover)) { /* the shallower one covers both */
		free(f->covers[0]);
		f->covers[0] = cover;
	} else if (path_within(cover, f->covers[0])) {
		free(cover);
	} else {
		f->covers[f->ncovers++] = cover;
	}
}

int fence_new(const char *user, const char *work_dir, struct fence **out, char *err, size_t errlen)
{
	if (geteuid() != 0) {
		snprintf(err, errlen, "the agent is not root: ranks run as its own user, unfenced");
		return -EPERM;
	}
	struct fence *f = xcalloc(1, sizeof(*f));
	int rc = lookup(user ? user : FENCE_DEFAULT_USER, &f->acct, err, errlen);
	char work[PATH_MAX];
	if (rc == 0 && !realpath(work_dir, work)) {
		rc = -errno;
		snprintf(err, errlen, "work-dir: %s: %s", work_dir, strerror(errno));
	}
	if (rc == 0 && strcmp(work, "/tmp") == 0) {
		snprintf(err, errlen,
		         "work-dir: /tmp cannot be a work directory: each rank has "
		         "a /tmp of its own");
		rc = ERR_INVALID;
	}
	if (rc) {
		free(f);
		return rc;
	}
	f->covers[f->ncovers++] = cover_of(&f->acct, work);
	cover_self(f);
	*out = f;
	return 0;
}

void fence_free(struct fence *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->ncovers; i++)
		free(f->covers[i]);
	free(f->self);
	free(f);
}

/* ---- the plan ---- */

struct plan {
	char **v;
	size_t n, cap;
};

static void push(struct plan *p, char *step)
{
	if (p->n + 2 > p->cap) {
		p->cap = p->cap ? p->cap * 2 : 32;
		p->v = xrealloc(p->v, p->cap * sizeof(*p->v));
	}
	p->v[p->n++] = step;
	p->v[p->n] = NULL;
}

/* dPATH, once per plan. */
static void push_dir(struct plan *p, const char *path, size_t len)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->v[i][0] == 'd' && strlen(p->v[i] + 1) == len &&
		    strncmp(p->v[i] + 1, path, len) == 0)
			return;
	push(p, xasprintf("d%.*s", (int)len, path));
}

/* Strictly below dir: a bind's place under a cover. */
static int under(const char *path, const char *dir)
{
	return path_within(path, dir) && strcmp(path, dir) != 0;
}

static char *ids(const struct fence_account *a, char kind)
{
	char groups[FENCE_GROUPS_MAX * 12] = "";
	size_t len = 0;
	for (int i = 0; i < a->ngroups && len + 12 < sizeof(groups); i++)
		len += (size_t)snprintf(groups + len, sizeof(groups) - len, "%s%u", i ? "," : "",
		                        (unsigned)a->groups[i]);
	return xasprintf("%c%u:%u:%s", kind, (unsigned)a->uid, (unsigned)a->gid, groups);
}

char **fence_plan(const struct fence *f, const char *tmp_dir, const struct fence_bind *binds, int n,
                  enum fence_run_as as)
{
	struct plan p = {0};
	int src[FENCE_SOURCES_MAX], nsrc = 0;
	/* the sources first, before anything covers them (in the shim's
	 * namespace: a bind's source must be a mount of the namespace it is
	 * bound in) */
	struct fence_bind all[FENCE_SOURCES_MAX];
	int nall = 0, cover_of_bind[FENCE_SOURCES_MAX];
	for (int i = 0; i < n && nall < FENCE_SOURCES_MAX - 2; i++)
		all[nall++] = binds[i];
	if (f->self)
		all[nall++] = (struct fence_bind){f->self, 1, 1};
	push(&p, xasprintf("o%s", tmp_dir));
	for (int i = 0; i < nall; i++)
		for (int c = 0; c < f->ncovers; c++)
			if (under(all[i].path, f->covers[c])) {
				cover_of_bind[nsrc] = c;
				src[nsrc++] = i;
				push(&p, xasprintf("o%s", all[i].path));
				break;
			}
	push(&p, xstrdup("b0:/tmp"));
	push(&p, xstrdup("s/dev/shm"));
	for (int c = 0; c < f->ncovers; c++) {
		if (strncmp(f->covers[c], "/tmp/", 5) == 0) /* inside the private /tmp */
			push_dir(&p, f->covers[c], strlen(f->covers[c]));
		push(&p, xasprintf("c%s", f->covers[c]));
	}
	for (int k = 0; k < nsrc; k++) {
		const struct fence_bind *b = &all[src[k]];
		size_t clen = strlen(f->covers[cover_of_bind[k]]);
		for (const char *s = b->path + clen + 1; (s = strchr(s, '/')); s++)
			push_dir(&p, b->path, (size_t)(s - b->path));
		if (b->file)
			push(&p, xasprintf("f%s", b->path));
		else
			push_dir(&p, b->path, strlen(b->path));
		push(&p, xasprintf("%c%d:%s", b->read_only ? 'r' : 'b', k + 1, b->path));
	}
	push(&p, xstrdup("n"));
	if (as != FENCE_AS_ROOT && f->acct.uid != 0)
		push(&p, ids(&f->acct, as == FENCE_AS_ACCOUNT_REAL ? 'U' : 'u'));
	return p.v;
}

void fence_plan_free(char **plan)
{
	for (size_t i = 0; plan && plan[i]; i++)
		free(plan[i]);
	free(plan);
}

/* ---- the environment of anvil's programs that start as root ---- */

#define STASH_PREFIX "ANVIL_STASH_"
#define SAFE_PATH    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* glibc's list of what a secure exec drops (its unsecvars.h), and PATH. */
int fence_env_unsafe(const char *kv)
{
	static const char *const names[] = {
	        "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES",      "LOCALDOMAIN",
	        "LOCPATH",    "NIS_PATH",    "NLSPATH",        "RESOLV_HOST_CONF", "RES_OPTIONS",
	        "TMPDIR",     "TZDIR",       "PATH",
	};
	if (strncmp(kv, "LD_", 3) == 0 || strncmp(kv, "MALLOC_", 7) == 0)
		return 1;
	size_t klen = strcspn(kv, "=");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == klen && strncmp(kv, names[i], klen) == 0)
			return 1;
	return 0;
}

char **fence_env_stash(char *const *env)
{
	struct plan p = {0};
	for (size_t i = 0; env && env[i]; i++)
		push(&p, fence_env_unsafe(env[i]) ? xasprintf(STASH_PREFIX "%s", env[i])
		                                  : xstrdup(env[i]));
	push(&p, xstrdup(SAFE_PATH));
	return p.v;
}

void fence_env_unstash(void)
{
	static const char prefix[] = STASH_PREFIX;
	size_t n = 0;
	for (char **e = environ; *e; e++)
		n += strncmp(*e, prefix, sizeof(prefix) - 1) == 0;
	char **kept = xcalloc(n + 1, sizeof(*kept));
	n = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, prefix, sizeof(prefix) - 1) == 0)
			kept[n++] = xstrdup(*e);
	for (size_t i = 0; i < n; i++) {
		char *eq = strchr(kept[i], '=');
		if (eq) {
			*eq = '\0';
			unsetenv(kept[i]);
			setenv(kept[i] + sizeof(prefix) - 1, eq + 1, 1);
		}
		free(kept[i]);
	}
	free(kept);
}

/* ---- in the child: async-signal-safe from here on ---- */

static int failed(int fd, const char *step, int err)
{
	sigsafe_put(fd, "anvil: cannot fence the rank: ");
	sigsafe_put(fd, step);
	sigsafe_put_errno(fd, ": ", err);
	return -err;
}

/* Decimal digits at *s up to a stop character; -1 when none or too big. */
static long number(const char **s)
{
	long v = 0;
	const char *p = *s;
	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9') {
		if (v > INT_MAX / 10)
			return -1;
		v = v * 10 + (*p++ - '0');
	}
	*s = p;
	return v;
}

/* "/proc/self/fd/N" in out. */
static void fd_path(char *out, size_t cap, int fd)
{
	static const char prefix[] = "/proc/self/fd/";
	char digits[24];
	const char *d = sigsafe_fmt_long(digits + sizeof(digits) - 1, fd);
	digits[sizeof(digits) - 1] = '\0';
	size_t pl = sizeof(prefix) - 1, dl = strlen(d);
	if (pl + dl + 1 > cap)
		return;
	memcpy(out, prefix, pl);
	memcpy(out + pl, d, dl + 1);
}

static int bind(const char *step, const int *src, int nsrc)
{
	const char *s = step + 1;
	long i = number(&s);
	if (i < 0 || i >= nsrc || *s != ':')
		return -EINVAL;
	char from[64] = "";
	fd_path(from, sizeof(from), src[i]);
	const char *to = s + 1;
	if (mount(from, to, NULL, MS_BIND, NULL) < 0)
		return -errno;
	unsigned long fl = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
	if (step[0] == 'r')
		fl |= MS_RDONLY;
	return mount(NULL, to, NULL, fl, NULL) < 0 ? -errno : 0;
}

int fence_shim_enter(void)
{
	if (unshare(CLONE_NEWNS) < 0)
		return -errno;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -errno;
	return mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ? -errno
	                                                                                  : 0;
}

/* uUID:GID:G,G... or U...: the groups, then the gid, then the uid. */
static int become(const char *step)
{
	const char *s = step + 1;
	long uid = number(&s), gid = -1;
	if (uid >= 0 && *s++ == ':')
		gid = number(&s);
	if (gid < 0 || *s++ != ':')
		return -EINVAL;
	gid_t groups[FENCE_GROUPS_MAX];
	size_t n = 0;
	while (*s && n < FENCE_GROUPS_MAX) {
		long g = number(&s);
		if (g < 0 || (*s && *s++ != ','))
			return -EINVAL;
		groups[n++] = (gid_t)g;
	}
	/* the system calls themselves: glibc's wrappers would change every
	 * thread of the process it believes this is (the shim is a copy of
	 * the multithreaded agent), signalling each and waiting for it */
	int real_only = step[0] == 'U';
	long g = gid, u = uid, keep = -1;
	if (syscall(SYS_setgroups, (long)n, groups) < 0 ||
	    syscall(SYS_setresgid, g, real_only ? keep : g, real_only ? keep : g) < 0 ||
	    syscall(SYS_setresuid, u, real_only ? keep : u, real_only ? keep : u) < 0)
		return -errno;
	return 0;
}

static int step(const char *st, int *src, int *nsrc)
{
	const char *arg = st + 1;
	int fd;
	switch (st[0]) {
	case 'o':
		if (*nsrc >= FENCE_SOURCES_MAX)
			return -E2BIG;
		fd = open(arg, O_PATH | O_CLOEXEC | O_NOFOLLOW | O_DIRECTORY);
		if (fd < 0 && errno == ENOTDIR)
			fd = open(arg, O_PATH | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return -errno;
		src[(*nsrc)++] = fd;
		return 0;
	case 'b':
	case 'r': return bind(st, src, *nsrc);
	case 's':
		return mount("tmpfs", arg, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0 ? -errno
		                                                                           : 0;
	case 'c':
		return mount("tmpfs", arg, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0
		               ? -errno
		               : 0;
	case 'd': return mkdir(arg, 0755) < 0 && errno != EEXIST ? -errno : 0;
	case 'f':
		fd = open(arg, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0)
			return -errno;
		close(fd);
		return 0;
	case 'n': return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ? -errno : 0;
	case 'u':
	case 'U': return become(st);
	default: return -EINVAL;
	}
}

/* Whether path lies under one of plan's covers. */
static int covered(char *const *plan, const char *path)
{
	for (size_t i = 0; plan && plan[i]; i++)
		if (plan[i][0] == 'c' && path_within(path, plan[i] + 1))
			return 1;
	return 0;
}

void fence_leave(char *const *plan)
{
	/* a lazy unmount takes the mounts below with it: one for each cover
	 * and its binds, one each for the rest (/tmp, /dev/shm), last first */
	size_t n = 0;
	while (plan && plan[n])
		n++;
	while (n-- > 0) {
		const char *st = plan[n], *to = NULL;
		if (st[0] == 'b' || st[0] == 'r')
			to = strchr(st, ':') ? strchr(st, ':') + 1 : NULL;
		else if (st[0] == 's')
			to = st + 1;
		if (st[0] == 'c' || (to && !covered(plan, to)))
			umount2(st[0] == 'c' ? st + 1 : to, MNT_DETACH);
	}
}

int fence_enter(char *const *plan, int err_fd)
{
	int src[FENCE_SOURCES_MAX], nsrc = 0, rc = 0;
	for (size_t i = 0; plan && plan[i] && rc == 0; i++)
		if ((rc = step(plan[i], src, &nsrc)) != 0)
			failed(err_fd, plan[i], -rc);
	for (int i = 0; i < nsrc; i++)
		close(src[i]);
	return rc;
}
