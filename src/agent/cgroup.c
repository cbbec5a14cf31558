#include "agent/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/util.h"

/* 1 when the comma-separated list has the token. */
static int has_token(const char *list, const char *token)
{
	size_t n = strlen(token);
	for (const char *p = list; p && *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == n && strncmp(p, token, n) == 0)
			return 1;
		p = comma ? comma + 1 : NULL;
	}
	return 0;
}

/* The mount point of the v1 hierarchy that has controller. */
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
		if (strcmp(type, "cgroup") == 0 && has_token(opts, controller)) {
			snprintf(out, outlen, "%s", dir);
			rc = 0;
			break;
		}
	}
	fclose(f);
	return rc;
}

/* This process's own cgroup in the hierarchy that has controller. */
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
		if (!has_token(c1 + 1, controller))
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

int cgroup_setup(const char *node_name, char **root_out)
{
	int rc = try_controller("pids", node_name, root_out);
	if (rc)
		rc = try_controller("freezer", node_name, root_out);
	return rc;
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

int cgroup_signal(const char *path, int sig)
{
	char file[PATH_MAX];
	snprintf(file, sizeof(file), "%s/cgroup.procs", path);
	FILE *f = fopen(file, "re");
	if (!f)
		return 0;
	int n = 0;
	char line[32];
	while (fgets(line, sizeof(line), f)) {
		char *end;
		long pid = strtol(line, &end, 10);
		if (end != line && pid > 0 && kill((pid_t)pid, sig) == 0)
			n++;
	}
	fclose(f);
	return n;
}

int cgroup_remove(const char *path)
{
	if (rmdir(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}
