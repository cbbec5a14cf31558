/* readset.c - the paths a command looks up under a tree, recorded through
 * a seccomp listener (readset.h). */
#include "agent/readset.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/mem.h"
#include "flow/codeset.h"

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#define X32_BIT     0x40000000u /* x32 calls: this architecture's number, another ABI */
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

#define HOPS_MAX 40 /* symbolic links followed in a row, as Linux's */

/* A call that looks a path up: its path is argument `path` (relative to
 * the descriptor in argument `dirfd`, or to the working directory when
 * dirfd is -1); or one that lists the directory open on argument `list`. */
struct call {
	long nr;
	int dirfd, path, list;
};

static const struct call calls[] = {
#ifdef __NR_open
        {__NR_open, -1, 0, -1},
#endif
#ifdef __NR_creat
        {__NR_creat, -1, 0, -1},
#endif
#ifdef __NR_stat
        {__NR_stat, -1, 0, -1},
#endif
#ifdef __NR_lstat
        {__NR_lstat, -1, 0, -1},
#endif
#ifdef __NR_access
        {__NR_access, -1, 0, -1},
#endif
#ifdef __NR_readlink
        {__NR_readlink, -1, 0, -1},
#endif
#ifdef __NR_getdents
        {__NR_getdents, -1, -1, 0},
#endif
#ifdef __NR_openat2
        {__NR_openat2, 0, 1, -1},
#endif
#ifdef __NR_faccessat2
        {__NR_faccessat2, 0, 1, -1},
#endif
        {__NR_openat, 0, 1, -1},     {__NR_newfstatat, 0, 1, -1}, {__NR_statx, 0, 1, -1},
        {__NR_faccessat, 0, 1, -1},  {__NR_readlinkat, 0, 1, -1}, {__NR_execve, -1, 0, -1},
        {__NR_execveat, 0, 1, -1},   {__NR_chdir, -1, 0, -1},     {__NR_getdents64, -1, -1, 0},
};
#define NCALLS (sizeof(calls) / sizeof(calls[0]))

struct readset {
	char *root; /* real path, no trailing '/' */
	size_t rootlen;
	int fd;       /* the listener, -1 none */
	json_t *keys; /* KEY -> true */
	size_t bytes; /* of the keys */
	char why[300];
	struct seccomp_notif *req;
	struct seccomp_notif_resp *resp;
	size_t req_size, resp_size;
};

__attribute__((format(printf, 2, 3))) static void incomplete(struct readset *rs, const char *fmt,
                                                             ...)
{
	if (rs->why[0])
		return; /* the first reason is the one given */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rs->why, sizeof(rs->why), fmt, ap);
	va_end(ap);
}

struct readset *readset_new(const char *root)
{
	char *real = realpath(root, NULL);
	if (!real)
		return NULL;
	struct readset *rs = xcalloc(1, sizeof(*rs));
	rs->root = real;
	rs->rootlen = strlen(real);
	if (rs->rootlen == 1) /* "/" */
		rs->rootlen = 0;
	rs->fd = -1;
	rs->keys = json_object();
	return rs;
}

void readset_free(struct readset *rs)
{
	if (!rs)
		return;
	if (rs->fd >= 0)
		close(rs->fd);
	json_decref(rs->keys);
	free(rs->req);
	free(rs->resp);
	free(rs->root);
	free(rs);
}

/* ---- the child's side ---- */

int readset_install(int sock)
{
#ifndef NATIVE_ARCH
	close(sock);
	return -ENOSYS;
#else
	struct sock_filter f[8 + 2 * NCALLS];
	unsigned short n = 0;
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
	                                      offsetof(struct seccomp_data, arch));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
	                                      offsetof(struct seccomp_data, nr));
#ifdef X32_BIT
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
#endif
	for (size_t i = 0; i < NCALLS; i++) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
		                                      (unsigned)calls[i].nr, 0, 1);
		f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
	}
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = {.len = n, .filter = f};
	/* The wrapper gave up root and with it its dumpable flag, which this
	 * child inherited: without it, its memory (execve's path) could not
	 * be read; exec sets it anyway. */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	int fd = -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)
		fd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
		                  SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	int rc = fd < 0 ? -errno : 0;
	if (fd >= 0) {
		char data = 'L';
		struct iovec iov = {.iov_base = &data, .iov_len = 1};
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		memset(&u, 0, sizeof(u));
		struct msghdr msg = {.msg_iov = &iov,
		                     .msg_iovlen = 1,
		                     .msg_control = u.buf,
		                     .msg_controllen = sizeof(u.buf)};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
		if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0)
			rc = -errno;
		close(fd);
	}
	close(sock);
	return rc;
#endif
}

/* ---- the wrapper's side ---- */

int readset_attach(struct readset *rs, int sock)
{
	char data = 0;
	struct iovec iov = {.iov_base = &data, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr msg = {.msg_iov = &iov,
	                     .msg_iovlen = 1,
	                     .msg_control = u.buf,
	                     .msg_controllen = sizeof(u.buf)};
	ssize_t got;
	do
		got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (got < 0 && errno == EINTR);
	int e = got < 0 ? errno : 0;
	close(sock);
	struct cmsghdr *cm = got > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
	if (!cm || cm->cmsg_type != SCM_RIGHTS) {
		incomplete(rs, "the kernel refused the filter that records them (seccomp)%s%s",
		           e ? ": " : "", e ? strerror(e) : "");
		return e ? -e : -ENOSYS;
	}
	memcpy(&rs->fd, CMSG_DATA(cm), sizeof(int));
	struct seccomp_notif_sizes sizes = {0};
	if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) {
		e = errno;
		incomplete(rs, "seccomp's notification sizes: %s", strerror(e));
		close(rs->fd);
		rs->fd = -1;
		return -e;
	}
	rs->req_size =
	        sizes.seccomp_notif > sizeof(*rs->req) ? sizes.seccomp_notif : sizeof(*rs->req);
	rs->resp_size = sizes.seccomp_notif_resp > sizeof(*rs->resp) ? sizes.seccomp_notif_resp
	                                                             : sizeof(*rs->resp);
	rs->req = xcalloc(1, rs->req_size);
	rs->resp = xcalloc(1, rs->resp_size);
	return 0;
}

int readset_fd(const struct readset *rs)
{
	return rs ? rs->fd : -1;
}

/* ---- one call ---- */

static const struct call *call_of(int nr)
{
	for (size_t i = 0; i < NCALLS; i++)
		if (calls[i].nr == nr)
			return &calls[i];
	return NULL;
}

/* The text at addr in process pid's memory, up to its NUL, into out
 * (PATH_MAX bytes). 0, or -errno. */
static int read_path(pid_t pid, uint64_t addr, char *out)
{
	char mem[64];
	snprintf(mem, sizeof(mem), "/proc/%d/mem", (int)pid);
	int fd = open(mem, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t got = 0;
	int rc = -ENAMETOOLONG;
	while (got < PATH_MAX) {
		/* up to the end of the page: the next one may not be mapped */
		size_t want = 4096 - (size_t)((addr + got) % 4096);
		if (want > PATH_MAX - got)
			want = PATH_MAX - got;
		ssize_t n = pread(fd, out + got, want, (off_t)(addr + got));
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		char *nul = memchr(out + got, '\0', (size_t)n);
		got += (size_t)n;
		if (nul) {
			rc = 0;
			break;
		}
	}
	close(fd);
	return rc;
}

/* Where /proc/PID/WHAT leads (a directory descriptor, the working
 * directory), into out (PATH_MAX bytes). 0, or -errno. */
static int proc_link(pid_t pid, const char *what, char *out)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/%d/%s", (int)pid, what);
	ssize_t n = readlink(link, out, PATH_MAX - 1);
	if (n < 0)
		return -errno;
	out[n] = '\0';
	return 0;
}

static void keep(struct readset *rs, const char *key)
{
	if (json_object_get(rs->keys, key))
		return;
	size_t len = strlen(key);
	if (len > CODESET_PATH_MAX) {
		incomplete(rs, "the path '%.100s...' is longer than %d bytes", key,
		           CODESET_PATH_MAX);
		return;
	}
	if (json_object_size(rs->keys) >= CODESET_KEYS_MAX || rs->bytes + len > READSET_BYTES_MAX) {
		incomplete(rs, "the command looked up more than %d paths of the tree (%zu bytes)",
		           CODESET_KEYS_MAX, rs->bytes + len);
		return;
	}
	rs->bytes += len + 1;
	json_object_set_new(rs->keys, key, json_true());
}

/* Drops the last part of the path in b. */
static void pop(struct buf *b)
{
	char *slash = b->len ? strrchr(b->data, '/') : NULL;
	b->len = slash ? (size_t)(slash - b->data) : 0;
	b->data[b->len] = '\0';
}

/* Where the walk of a path has got to: above the root, `out` is the
 * absolute path so far; inside, `rel` is the path relative to the root. */
struct walk {
	struct readset *rs;
	struct buf out, rel;
	int inside;
	int missing; /* rel names nothing */
	int hops;
};

/* One part of the path (neither empty nor "."); a symbolic link of the
 * tree returns its target (malloc'd), to be walked before the rest. */
static char *step(struct walk *w, const char *part, size_t len)
{
	int dots = len == 2 && part[0] == '.' && part[1] == '.';
	if (!w->inside) {
		if (dots) {
			pop(&w->out);
		} else {
			buf_add(&w->out, "/", 1);
			buf_add(&w->out, part, len);
		}
		w->inside = w->out.len == w->rs->rootlen &&
		            memcmp(w->out.data, w->rs->root, w->out.len) == 0;
		return NULL;
	}
	if (dots && w->rel.len == 0) { /* above the root again */
		w->inside = 0;
		buf_reset(&w->out);
		buf_add(&w->out, w->rs->root, w->rs->rootlen);
		pop(&w->out);
		return NULL;
	}
	if (dots) {
		pop(&w->rel);
		return NULL;
	}
	size_t before = w->rel.len;
	if (w->rel.len)
		buf_add(&w->rel, "/", 1);
	buf_add(&w->rel, part, len);
	char *full = xasprintf("%s/%s", w->rs->root, w->rel.data);
	struct stat sb;
	char target[PATH_MAX];
	ssize_t n = -1;
	if (lstat(full, &sb) != 0)
		w->missing = 1;
	else if (S_ISLNK(sb.st_mode))
		n = readlink(full, target, sizeof(target) - 1);
	free(full);
	if (n < 0)
		return NULL;
	target[n] = '\0';
	keep(w->rs, w->rel.data); /* the link: its target is in the index */
	w->rel.len = before;
	w->rel.data[before] = '\0';
	if (++w->hops > HOPS_MAX)
		return NULL;    /* a loop: the kernel refuses it */
	if (target[0] == '/') { /* out of the tree (a bundle holds none) */
		w->inside = 0;
		buf_reset(&w->out);
	}
	return xstrdup(target);
}

/* The path (absolute) that a call looked up, or the directory it listed,
 * kept as a KEY when it lies under the root. Above the root it is read as
 * text ("a/../b" is "b": the root's own path has no links); below it, it
 * is followed as the kernel does, through the tree's own symbolic links
 * (each of them kept), to the path looked up or to its first part that is
 * missing. */
static void record_path(struct readset *rs, const char *abs, int listing)
{
	struct walk w = {.rs = rs, .inside = rs->rootlen == 0};
	buf_init(&w.out);
	buf_init(&w.rel);
	buf_adds(&w.out, "");
	buf_adds(&w.rel, "");
	char *rest = xstrdup(abs);
	size_t at = 0;
	while (rest[at] && !w.missing) {
		size_t len = strcspn(rest + at, "/");
		const char *part = rest + at;
		size_t next = at + len + (rest[at + len] == '/');
		char *target = len && !(len == 1 && part[0] == '.') ? step(&w, part, len) : NULL;
		if (!target) {
			at = next;
			continue;
		}
		char *joined = xasprintf("%s/%s", target, rest + next);
		free(target);
		free(rest);
		rest = joined;
		at = 0;
	}
	if (w.inside && (w.rel.len || listing)) {
		if (listing && !w.missing)
			buf_adds(&w.rel, "/");
		keep(rs, w.rel.len ? w.rel.data : "/");
	}
	free(rest);
	buf_cleanup(&w.out);
	buf_cleanup(&w.rel);
}

/* Records the call of req, when it is one that looks a path up under the
 * root. */
static void record(struct readset *rs, const struct seccomp_notif *req)
{
	const struct seccomp_data *d = &req->data;
#ifdef NATIVE_ARCH
	int foreign = d->arch != NATIVE_ARCH;
#else
	int foreign = 1;
#endif
#ifdef X32_BIT
	foreign |= (d->nr & (int)X32_BIT) != 0;
#endif
	if (foreign) {
		incomplete(rs, "process %d made a call of another architecture (a 32-bit program)",
		           (int)req->pid);
		return;
	}
	const struct call *c = call_of(d->nr);
	if (!c)
		return;
	char path[PATH_MAX], base[PATH_MAX], fdname[32];
	int rc;
	if (c->list >= 0) {
		snprintf(fdname, sizeof(fdname), "fd/%d", (int)d->args[c->list]);
		rc = proc_link(req->pid, fdname, base);
		if (rc == 0)
			record_path(rs, base, 1);
		else if (rc != -ENOENT) /* not open: the call fails */
			incomplete(rs, "cannot read process %d's descriptor: %s", (int)req->pid,
			           strerror(-rc));
		return;
	}
	rc = read_path(req->pid, d->args[c->path], path);
	if (rc) {
		incomplete(rs, "cannot read the path of a call of process %d: %s", (int)req->pid,
		           strerror(-rc));
		return;
	}
	if (!path[0]) /* the descriptor itself (AT_EMPTY_PATH): seen when it was opened */
		return;
	if (path[0] == '/') {
		record_path(rs, path, 0);
		return;
	}
	int dirfd = c->dirfd >= 0 ? (int)d->args[c->dirfd] : AT_FDCWD;
	if (dirfd == AT_FDCWD)
		snprintf(fdname, sizeof(fdname), "cwd");
	else
		snprintf(fdname, sizeof(fdname), "fd/%d", dirfd);
	rc = proc_link(req->pid, fdname, base);
	if (rc == -ENOENT && dirfd != AT_FDCWD)
		return; /* not open: the call fails */
	if (rc) {
		incomplete(rs, "cannot read process %d's %s: %s", (int)req->pid, fdname,
		           strerror(-rc));
		return;
	}
	char *abs = xasprintf("%s/%s", base, path);
	record_path(rs, abs, 0);
	free(abs);
}

/* Takes one waiting call, records it and lets it go on. 0, or -1 when
 * the listener is done for. */
static int serve_one(struct readset *rs)
{
	memset(rs->req, 0, rs->req_size);
	if (ioctl(rs->fd, SECCOMP_IOCTL_NOTIF_RECV, rs->req) < 0) {
		if (errno == EINTR || errno == ENOENT) /* the caller went away */
			return 0;
		incomplete(rs, "seccomp's listener: %s", strerror(errno));
		return -1;
	}
	record(rs, rs->req);
	memset(rs->resp, 0, rs->resp_size);
	rs->resp->id = rs->req->id;
	rs->resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	if (ioctl(rs->fd, SECCOMP_IOCTL_NOTIF_SEND, rs->resp) < 0 && errno != ENOENT)
		incomplete(rs, "seccomp's listener: %s", strerror(errno));
	return 0;
}

void readset_serve(struct readset *rs)
{
	for (;;) {
		if (!rs || rs->fd < 0)
			return;
		struct pollfd p = {.fd = rs->fd, .events = POLLIN};
		if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
			return;
		if (serve_one(rs) != 0) {
			close(rs->fd);
			rs->fd = -1;
		}
	}
}

void readset_stop(struct readset *rs)
{
	if (rs && rs->fd >= 0) {
		close(rs->fd);
		rs->fd = -1;
	}
}

static int by_text(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

json_t *readset_keys(const struct readset *rs, char *why, size_t len)
{
	if (rs->why[0]) {
		snprintf(why, len, "%s", rs->why);
		return NULL;
	}
	size_t n = json_object_size(rs->keys), k = 0;
	const char **v = xcalloc(n + 1, sizeof(*v));
	const char *key;
	json_t *ignored;
	json_object_foreach (rs->keys, key, ignored)
		v[k++] = key;
	qsort(v, k, sizeof(*v), by_text);
	json_t *arr = json_array();
	for (size_t i = 0; i < k; i++)
		json_array_append_new(arr, json_string(v[i]));
	free(v);
	return arr;
}
