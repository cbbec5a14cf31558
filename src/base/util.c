#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"

int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t now_ms(void)
{
	return now_us() / 1000;
}

int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void random_hex(char *out, size_t bytes)
{
	unsigned char raw[64];
	static const char hex[] = "0123456789abcdef";
	while (bytes > 0) {
		size_t n = bytes < sizeof(raw) ? bytes : sizeof(raw);
		size_t got = 0;
		while (got < n) {
			ssize_t r = getrandom(raw + got, n - got, 0);
			if (r > 0)
				got += (size_t)r;
		}
		for (size_t i = 0; i < n; i++) {
			*out++ = hex[raw[i] >> 4];
			*out++ = hex[raw[i] & 15];
		}
		bytes -= n;
	}
	*out = '\0';
}

int mkdir_p(const char *path, unsigned mode)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int fd_above_stdio(int fd)
{
	if (fd < 0 || fd > 2)
		return fd;
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	int rc = hi < 0 ? -errno : hi;
	close(fd);
	return rc;
}

int write_file_atomic(const char *path, const char *data, size_t len, unsigned mode)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* A new file, never one left by a killed process of the same pid,
	 * whose looser mode would show the data until the fchmod: created
	 * with mode (less the umask), so never readable by more than mode
	 * says, and given exactly mode before a byte is written. */
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	int rc = fchmod(fd, mode) < 0 ? -errno : 0;
	size_t off = 0;
	while (rc == 0 && off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto out;
		}
		off += (size_t)w;
	}
	if (rc == 0 && fsync(fd) < 0) {
		rc = -errno;
		goto out;
	}
out:
	close(fd);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc != 0)
		unlink(tmp);
	return rc;
}

int tighten_mode(const char *path, unsigned mode, unsigned *was)
{
	struct stat sb;
	if (stat(path, &sb) < 0)
		return -errno;
	unsigned now = sb.st_mode & 07777;
	if ((now & ~mode) == 0)
		return 0;
	if (chmod(path, now & mode) < 0)
		return -errno;
	if (was)
		*was = now;
	return 1;
}

int list_has(const char *list, const char *seps, const char *item)
{
	size_t n = strlen(item);
	for (const char *p = list; p && *p;) {
		p += strspn(p, seps);
		size_t len = strcspn(p, seps);
		if (len && len == n && strncmp(p, item, n) == 0)
			return 1;
		p += len;
	}
	return 0;
}

int read_file(const char *path, size_t cap, struct buf *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	char chunk[8192];
	for (;;) {
		ssize_t r = read(fd, chunk, sizeof(chunk));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		if (out->len + (size_t)r > cap) {
			rc = -EFBIG;
			break;
		}
		buf_add(out, chunk, (size_t)r);
	}
	close(fd);
	if (rc == 0 && !out->data)
		buf_add(out, "", 0);
	return rc;
}

/* Removes name in the directory dirfd, and everything under it: each
 * directory is opened relative to its parent with O_NOFOLLOW, so a tree
 * that another user can change (a rank's /tmp) cannot redirect the
 * removal elsewhere by swapping a directory for a link. */
static int rm_at(int parent, const char *name)
{
	if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int rc = -errno;
		if (fd >= 0)
			close(fd);
		return rc;
	}
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		int r = rm_at(dirfd(d), e->d_name);
		if (r < 0 && rc == 0)
			rc = r;
	}
	closedir(d);
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT && rc == 0)
		rc = -errno;
	return rc;
}

int rm_rf(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *parent =
	        slash ? xstrndup(path, slash == path ? 1 : (size_t)(slash - path)) : xstrdup(".");
	const char *name = slash ? slash + 1 : path;
	int rc = 0, fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		rc = errno == ENOENT ? 0 : -errno;
	else if (*name)
		rc = rm_at(fd, name);
	if (fd >= 0)
		close(fd);
	free(parent);
	return rc;
}

int secret_equal(const char *a, const char *b)
{
	if (!a || !b)
		return 0;
	size_t n = strlen(b), m = strlen(a);
	unsigned char diff = n != m;
	for (size_t i = 0; i < n && i < m; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0;
}

int path_within(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	if (n && dir[n - 1] == '/') /* "/", or a directory written with its slash */
		n--;
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

int parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	if (!s || !*s)
		return ERR_INVALID;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return ERR_INVALID;
	*out = v;
	return 0;
}

int parse_duration_ms(const char *s, int64_t *out)
{
	if (!s || !*s)
		return ERR_INVALID;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0 || v > 1e9)
		return ERR_INVALID;
	double mult = 1000;
	if (strcmp(end, "ms") == 0)
		mult = 1;
	else if (strcmp(end, "s") == 0 || *end == '\0')
		mult = 1000;
	else if (strcmp(end, "m") == 0)
		mult = 60000;
	else if (strcmp(end, "h") == 0)
		mult = 3600000;
	else
		return ERR_INVALID;
	*out = (int64_t)(v * mult);
	return 0;
}

int text_printf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	if (n < 0 || size == 0 || (size_t)n < size)
		return n;
	/* cut short: back up to the start of the last sequence; drop it if its
	 * lead byte promises more bytes than are left */
	size_t len = strlen(buf), k = len;
	while (k > 0 && len - k < 4 && ((unsigned char)buf[k - 1] & 0xC0) == 0x80)
		k--;
	if (k == 0)
		return n;
	unsigned char lead = (unsigned char)buf[k - 1];
	size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
	if (want > len - (k - 1))
		buf[k - 1] = '\0';
	return n;
}

static struct rlimit nofile_before; /* rlim_max 0: nofile_raise did not run */

int nofile_raise(int64_t *before, int64_t *after)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return -errno;
	*before = *after = (int64_t)rl.rlim_cur;
	rlim_t target = rl.rlim_max;
	if (target == RLIM_INFINITY) { /* the kernel's ceiling, fs.nr_open */
		struct buf b;
		buf_init(&b);
		int64_t nr = 0;
		if (read_file("/proc/sys/fs/nr_open", 64, &b) == 0 && b.data)
			nr = strtoll(b.data, NULL, 10);
		buf_cleanup(&b);
		target = nr > 0 ? (rlim_t)nr : 1048576;
	}
	if (rl.rlim_cur >= target)
		return 0;
	struct rlimit raised = {.rlim_cur = target, .rlim_max = rl.rlim_max};
	if (setrlimit(RLIMIT_NOFILE, &raised) != 0)
		return -errno;
	nofile_before = rl;
	*after = (int64_t)raised.rlim_cur;
	return 0;
}

void nofile_restore(void)
{
	if (nofile_before.rlim_max)
		setrlimit(RLIMIT_NOFILE, &nofile_before);
}

static volatile sig_atomic_t caught_signal;

static void on_stop_signal(int sig)
{
	caught_signal = sig;
}

void stop_signals_catch(void)
{
	struct sigaction sa = {.sa_handler = on_stop_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

int stop_signal(void)
{
	return (int)caught_signal;
}

size_t text_last_lines(const char *s, size_t len, int64_t n)
{
	if (n <= 0)
		return len;
	size_t i = len;
	if (i > 0 && s[i - 1] == '\n')
		i--; /* it ends the last line */
	for (int64_t seen = 0; i > 0; i--)
		if (s[i - 1] == '\n' && ++seen == n)
			return i;
	return 0;
}
