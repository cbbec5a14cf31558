#include "agent/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "agent/devbpf.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/util.h"

#define CGROUP2_MAGIC 0x63677270 /* statfs f_type of a cgroup2 mount */

/* The mount point of the v1 hierarchy that has controller, or of the v2
 * one (controller NULL). */
static int find_mount(const char *controller, char *out, size_t outlen)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	if (!f)
		return -errno;
	char line[1024], dir[PATH_MAX], type[64], opts[512];
	int rc = -ENOTSUP;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%*s %4095s %63s %511s", dir, type, opts) != 3)
			continue;
		if (controller ? strcmp(type, "cgroup") == 0 && list_has(opts, ",", controller)
		               : strcmp(type, "cgroup2") == 0) {
			snprintf(out, outlen, "%s", dir);
			rc = 0;
			break;
		}
	}
	fclose(f);
	return rc;
}

/* This process's own cgroup in the v1 hierarchy that has controller, or
 * in the v2 one (controller NULL: the "0::" line). */
static int find_self(const char *controller, char *out, size_t outlen)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return -errno;
	char line[PATH_MAX + 128];
	int rc = -ENOTSUP;
	while (fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		if (controller ? !list_has(c1 + 1, ",", controller)
		               : strncmp(line, "0:", 2) != 0 || c1[1] != '\0')
			continue;
		c2[1 + strcspn(c2 + 1, "\n")] = '\0';
		snprintf(out, outlen, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
		rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

static int try_controller(const char *controller, const char *node_name, char **root_out)
{
	char mnt[PATH_MAX], self[PATH_MAX], root[PATH_MAX * 2 + 300];
	int rc = find_mount(controller, mnt, sizeof(mnt));
	if (rc)
		return rc;
	rc = find_self(controller, self, sizeof(self));
	if (rc)
		return rc;
	snprintf(root, sizeof(root), "%s%s/anvil/%s", mnt, self, node_name);
	for (char *p = root + strlen(mnt) + strlen(self) + 7; *p; p++)
		if (*p == '/')
			*p = '_';
	rc = mkdir_p(root, 0755);
	if (rc)
		return rc;
	if (access(root, W_OK) != 0)
		return -errno;
	*root_out = xstrdup(root);
	return 0;
}

int cgroup_setup(const char *node_name, enum cgroup_mode mode, char **root_out)
{
	int rc = -ENOTSUP;
	if (mode == CGROUP_AUTO || mode == CGROUP_V1) {
		rc = try_controller("pids", node_name, root_out);
		if (rc)
			rc = try_controller("freezer", node_name, root_out);
	}
	if (rc && (mode == CGROUP_AUTO || mode == CGROUP_V2))
		rc = try_controller(NULL, node_name, root_out);
	return rc;
}

int cgroup_is_v2(const char *path)
{
	struct statfs st;
	return statfs(path, &st) == 0 && st.f_type == CGROUP2_MAGIC;
}

/* Whether dir/file (a word list such as cgroup.controllers) has word. */
static int file_has_word(const char *dir, const char *file, const char *word)
{
	char name[PATH_MAX + 64];
	snprintf(name, sizeof(name), "%s/%s", dir, file);
	struct buf b;
	buf_init(&b);
	int has = read_file(name, 4096, &b) == 0 && list_has(b.data, " \n", word);
	buf_cleanup(&b);
	return has;
}

/* Enables controller for the children of dir: "+controller" into its
 * cgroup.subtree_control, unless it is on already. */
static int enable_below(const char *dir, const char *controller)
{
	if (file_has_word(dir, "cgroup.subtree_control", controller))
		return 0;
	char word[64];
	snprintf(word, sizeof(word), "+%s", controller);
	return cgroup_write(dir, "cgroup.subtree_control", word);
}

/* Moves this process into dir/leaf (made if need be): see cgroup_v2_delegate. */
static int move_self(const char *dir, const char *leaf)
{
	char *path = NULL;
	int rc = cgroup_create(dir, leaf, &path);
	if (rc == 0) {
		char pid[32];
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		rc = cgroup_write(path, "cgroup.procs", pid);
	}
	free(path);
	return rc;
}

int cgroup_v2_delegate(const char *root, const char *controller)
{
	char mnt[PATH_MAX], self[PATH_MAX], top[PATH_MAX * 2];
	int rc = find_mount(NULL, mnt, sizeof(mnt));
	if (rc == 0)
		rc = find_self(NULL, self, sizeof(self));
	if (rc)
		return rc;
	/* TOP, the agent's own cgroup when cgroup_setup made ROOT: ROOT less
	 * its "/anvil/<node>". The agent may have left it for a leaf since. */
	size_t ml = strlen(mnt), rl = strlen(root);
	const char *node = rl > ml ? strrchr(root, '/') : NULL;
	if (!node || strncmp(root, mnt, ml) != 0 || root[ml] != '/' || node - root < 6 ||
	    strncmp(node - 6, "/anvil", 6) != 0)
		return -EXDEV; /* not a ROOT of cgroup_setup in the v2 hierarchy */
	snprintf(top, sizeof(top), "%.*s", (int)(node - 6 - root), root);
	size_t tl = strlen(top);
	if (!file_has_word(top, "cgroup.controllers", controller))
		return -ENOTSUP; /* not given to this cgroup (or bound to a v1 hierarchy) */
	rc = enable_below(top, controller);
	if (rc == -EBUSY && strcmp(top + ml, self) == 0 && self[0]) {
		/* No internal processes: a non-root cgroup whose children have
		 * controllers holds no process itself. The agent leaves for a
		 * leaf of its own, as under systemd's Delegate=yes. */
		char leaf[64];
		snprintf(leaf, sizeof(leaf), "anvil-agent-%d", (int)getpid());
		rc = move_self(top, leaf);
		if (rc == 0)
			rc = enable_below(top, controller);
	}
	/* ... then every directory from there down to ROOT, ROOT included:
	 * rank cgroups are ROOT's children. */
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s", root);
	for (char *p = path + tl; rc == 0 && p && *p;) {
		char *slash = strchr(p + 1, '/');
		if (slash)
			*slash = '\0';
		rc = enable_below(path, controller);
		if (slash)
			*slash = '/';
		p = slash;
	}
	return rc;
}

int cgroup_setup_controller(const char *controller, const char *node_name, char **root_out)
{
	return try_controller(controller, node_name, root_out);
}

int cgroup_create(const char *root, const char *leaf, char **path_out)
{
	char *path = xasprintf("%s/%s", root, leaf);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		int rc = -errno;
		free(path);
		return rc;
	}
	*path_out = path;
	return 0;
}

int cgroup_open_procs(const char *path)
{
	char file[PATH_MAX];
	snprintf(file, sizeof(file), "%s/cgroup.procs", path);
	int fd = open(file, O_WRONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Signals the pid in text[0..len) unless it is spare; 1 when sent. */
static int signal_one(const char *text, size_t len, int sig, pid_t spare)
{
	long pid = 0;
	for (size_t i = 0; i < len; i++) {
		if (text[i] < '0' || text[i] > '9' || pid > INT_MAX / 10)
			return 0;
		pid = pid * 10 + (text[i] - '0');
	}
	return pid > 0 && pid != spare && kill((pid_t)pid, sig) == 0;
}

int cgroup_signal(const char *path, int sig, pid_t spare)
{
	/* v2 (5.14+): one write kills the whole cgroup, forks in flight too;
	 * signal 0 first counts who is there */
	if (sig == SIGKILL && spare <= 0 && cgroup_is_v2(path)) {
		int n = cgroup_signal(path, 0, 0);
		if (n == 0 || cgroup_write(path, "cgroup.kill", "1") == 0)
			return n;
	}
	char file[PATH_MAX];
	snprintf(file, sizeof(file), "%s/cgroup.procs", path);
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	/* One pid per line; a line may straddle two reads. */
	char buf[4096];
	size_t have = 0;
	int n = 0;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		have += (size_t)r;
		char *line = buf, *nl;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			n += signal_one(line, (size_t)(nl - line), sig, spare);
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		memmove(buf, line, have);
		if (have == sizeof(buf))
			have = 0; /* no pid is this long */
	}
	if (have)
		n += signal_one(buf, have, sig, spare);
	close(fd);
	return n;
}

int cgroup_remove(const char *path)
{
	if (rmdir(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int cgroup_write(const char *path, const char *file, const char *value)
{
	char name[PATH_MAX];
	snprintf(name, sizeof(name), "%s/%s", path, file);
	int fd = open(name, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(value);
	ssize_t w = write(fd, value, len);
	int rc = w == (ssize_t)len ? 0 : w < 0 ? -errno : -EIO;
	close(fd);
	return rc;
}

int cgroup_limit_cpu(const char *path, int64_t millis)
{
	if (millis <= 0)
		return -EINVAL;
	char quota[32];
	/* millis thousandths of a CPU: that many 100 us per 100 ms period */
	snprintf(quota, sizeof(quota), "%lld", (long long)millis * (CGROUP_CPU_PERIOD_US / 1000));
	if (cgroup_is_v2(path)) {
		char max[64];
		snprintf(max, sizeof(max), "%s %d", quota, CGROUP_CPU_PERIOD_US);
		return cgroup_write(path, "cpu.max", max);
	}
	char period[32];
	snprintf(period, sizeof(period), "%d", CGROUP_CPU_PERIOD_US);
	int rc = cgroup_write(path, "cpu.cfs_period_us", period);
	return rc ? rc : cgroup_write(path, "cpu.cfs_quota_us", quota);
}

int cgroup_limit_memory(const char *path, int64_t bytes)
{
	if (bytes <= 0)
		return -EINVAL;
	char text[32];
	snprintf(text, sizeof(text), "%lld", (long long)bytes);
	if (cgroup_is_v2(path)) /* RAM, as v1's: swap (memory.swap.max) is left alone */
		return cgroup_write(path, "memory.max", text);
	return cgroup_write(path, "memory.limit_in_bytes", text);
}

int cgroup_oom_kills(const char *path)
{
	/* v1 memory.oom_control and v2 memory.events both carry the line
	 * "oom_kill N" (v1 since Linux 4.13). */
	char name[PATH_MAX + 32];
	snprintf(name, sizeof(name), "%s/%s", path,
	         cgroup_is_v2(path) ? "memory.events" : "memory.oom_control");
	struct buf b;
	buf_init(&b);
	int rc = read_file(name, 4096, &b);
	long long n = -1;
	for (const char *line = rc == 0 ? b.data : NULL; line && n < 0;) {
		char *end = NULL;
		if (strncmp(line, "oom_kill ", 9) == 0)
			n = strtoll(line + 9, &end, 10);
		if (n >= 0 && (end == line + 9 || (*end != '\n' && *end != '\0')))
			n = -1; /* not a number */
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	buf_cleanup(&b);
	if (rc)
		return rc;
	return n < 0 ? -ENODATA : n > INT_MAX ? INT_MAX : (int)n;
}

int cgroup_limit_gpus(const char *path, const int *minors, int n)
{
	if (cgroup_is_v2(path)) /* no devices files there: an eBPF program */
		return devbpf_limit_gpus(path, minors, n);
	int fd, rc = 0;
	char name[PATH_MAX];
	snprintf(name, sizeof(name), "%s/devices.deny", path);
	if ((fd = open(name, O_WRONLY | O_CLOEXEC)) < 0)
		return -errno;
	/* Below an allow-all parent a v1 devices cgroup holds deny exceptions
	 * only, and devices.allow removes an exception only when it is the
	 * same entry: "allow c 195:0" cannot open a hole in "deny c 195:*".
	 * So every other GPU minor is denied on its own (one write each, about
	 * 4 us). nvidiactl, nvidia-modeset and nvidia-uvm stay allowed. */
	for (int m = 0; m < CGROUP_GPU_MINORS && rc == 0; m++) {
		int mine = 0;
		for (int i = 0; i < n && !mine; i++)
			mine = minors[i] == m;
		if (mine)
			continue;
		char entry[32];
		int len = snprintf(entry, sizeof(entry), "c %d:%d rwm", CGROUP_NVIDIA_MAJOR, m);
		ssize_t w = write(fd, entry, (size_t)len);
		if (w != len)
			rc = w < 0 ? -errno : -EIO;
	}
	close(fd);
	return rc;
}

/* The line of hierarchy id in a /proc/PID/cgroup text, as its path; NULL
 * when there is none. The caller frees it. */
static char *hierarchy_path(const char *text, const char *id, size_t idlen)
{
	for (const char *line = text; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		const char *c1 = memchr(line, ':', len);
		const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
		if (c2 && (size_t)(c1 - line) == idlen && memcmp(line, id, idlen) == 0)
			return xstrndup(c2 + 1, len - (size_t)(c2 + 1 - line));
		line = nl ? nl + 1 : NULL;
	}
	return NULL;
}

/* Joins one hierarchy's cgroup path (controllers ctrls, "" for v2). */
static int join_one(const char *ctrls, const char *path, char *err, size_t errlen)
{
	char first[64], mnt[PATH_MAX];
	snprintf(first, sizeof(first), "%.*s", (int)strcspn(ctrls, ","), ctrls);
	int rc = find_mount(*ctrls ? first : NULL, mnt, sizeof(mnt));
	char dir[PATH_MAX * 2];
	snprintf(dir, sizeof(dir), "%s%s", mnt, strcmp(path, "/") == 0 ? "" : path);
	if (rc == 0)
		rc = cgroup_write(dir, "cgroup.procs", "0");
	if (rc)
		snprintf(err, errlen, "cannot join the rank's cgroup %s (%s): %s",
		         *ctrls ? ctrls : "v2", path, strerror(-rc));
	return rc;
}

int cgroup_join_like(int procfd, char *err, size_t errlen)
{
	struct buf theirs, ours;
	buf_init(&theirs);
	buf_init(&ours);
	int rc = -ENOENT;
	int fd = openat(procfd, "cgroup", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char tmp[4096];
		ssize_t n;
		while ((n = read(fd, tmp, sizeof(tmp))) > 0 && theirs.len < 65536)
			buf_add(&theirs, tmp, (size_t)n);
		rc = n < 0 ? -errno : 0;
		close(fd);
	} else {
		rc = -errno;
	}
	if (rc == 0)
		rc = read_file("/proc/self/cgroup", 65536, &ours);
	if (rc)
		snprintf(err, errlen, "cannot read the rank's cgroups: %s",
		         rc == -ESRCH ? "the rank has ended" : strerror(-rc));
	for (const char *line = theirs.data; rc == 0 && line && *line;) {
		const char *nl = strchr(line, '\n');
		char *l = xstrndup(line, nl ? (size_t)(nl - line) : strlen(line));
		line = nl ? nl + 1 : NULL;
		char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2) {
			*c2 = '\0';
			char *mine = hierarchy_path(ours.data, l, (size_t)(c1 - l));
			if (strncmp(c1 + 1, "name=", 5) != 0 &&
			    (!mine || strcmp(mine, c2 + 1) != 0))
				rc = join_one(c1 + 1, c2 + 1, err, errlen);
			free(mine);
		}
		free(l);
	}
	buf_cleanup(&theirs);
	buf_cleanup(&ours);
	return rc;
}
