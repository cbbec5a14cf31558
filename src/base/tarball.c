#include "base/tarball.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"

extern char **environ;

/* The options that make an archive deterministic (tarball.h). */
static const char *const pack_opts[] = {
        "--format=gnu",    "--sort=name",        "--mtime=@0",         "--owner=0", "--group=0",
        "--numeric-owner", "--mode=u=rwX,go=rX", "--hard-dereference", NULL,
};

/* The environment tar runs with: ours, with byte-order names and without
 * TAR_OPTIONS (which would change what it writes). */
static char **tar_env(void)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = xcalloc(n + 2, sizeof(*env));
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "TAR_OPTIONS=", 12) != 0 &&
		    strncmp(environ[i], "LC_ALL=", 7) != 0)
			env[k++] = environ[i];
	env[k++] = "LC_ALL=C";
	env[k] = NULL;
	return env;
}

/* A file that is gone once closed (for tar's stderr), or -1. */
static int scratch_fd(void)
{
	const char *t = getenv("TMPDIR");
	char *path = xasprintf("%s/anvil-tar-XXXXXX", t && *t ? t : "/tmp");
	int fd = mkostemp(path, O_CLOEXEC);
	if (fd >= 0)
		unlink(path);
	free(path);
	return fd;
}

/* tar's first line of complaint, from its stderr file. */
static void first_line(int fd, char *out, size_t len)
{
	out[0] = '\0';
	if (fd < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return;
	ssize_t n = read(fd, out, len - 1);
	out[n > 0 ? n : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

/* Runs tar with argv; 0 when it exits 0, else ERR_UPSTREAM (-errno when
 * it cannot be started) with "WHAT: why" in err. */
static int run_tar(char *const *argv, const char *what, char *err, size_t errlen)
{
	int efd = scratch_fd();
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (efd >= 0)
		posix_spawn_file_actions_adddup2(&fa, efd, 2);
	char **env = tar_env();
	pid_t pid;
	int rc = posix_spawnp(&pid, "tar", &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	if (rc != 0) {
		snprintf(err, errlen, "%s: cannot run tar: %s", what, strerror(rc));
		if (efd >= 0)
			close(efd);
		return -rc;
	}
	int ws = 0;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	char line[300];
	first_line(efd, line, sizeof(line));
	if (efd >= 0)
		close(efd);
	if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
		return 0;
	if (WIFSIGNALED(ws))
		snprintf(err, errlen, "%s: tar was killed by signal %d", what, WTERMSIG(ws));
	else
		snprintf(err, errlen, "%s: tar exited with status %d: %s", what, WEXITSTATUS(ws),
		         line[0] ? line : "(it said nothing)");
	return ERR_UPSTREAM;
}

/* argv of a pack into out from dir, then the caller's extra words. */
static char **pack_argv(const char *dir, const char *out, char *const *extra, size_t nextra)
{
	char **v = xcalloc(16 + nextra, sizeof(*v));
	size_t n = 0;
	v[n++] = "tar";
	v[n++] = "--create";
	for (size_t i = 0; pack_opts[i]; i++)
		v[n++] = (char *)pack_opts[i];
	v[n++] = "--file";
	v[n++] = (char *)out;
	v[n++] = "--directory";
	v[n++] = (char *)dir;
	for (size_t i = 0; i < nextra; i++)
		v[n++] = extra[i];
	v[n] = NULL;
	return v;
}

/* tarball_check on what was packed or is to be unpacked, its refusal
 * said as "WHAT: why". */
static int check(const char *path, const char *what, char *err, size_t errlen)
{
	char why[600];
	int rc = tarball_check(path, why, sizeof(why));
	if (rc)
		snprintf(err, errlen, "%s: %s", what, why);
	return rc;
}

int tarball_pack_dir(const char *dir, const char *out, char *err, size_t errlen)
{
	char *extra[] = {"."};
	char **argv = pack_argv(dir, out, extra, 1);
	char *what = xasprintf("packing %s", dir);
	int rc = run_tar(argv, what, err, errlen);
	if (rc == 0)
		rc = check(out, what, err, errlen);
	free(what);
	free(argv);
	return rc;
}

static int by_bytes(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names, sorted and NUL-separated, in a file of their own (its path
 * to free in *path). */
static int write_list(char *const *files, size_t n, char **path)
{
	char **sorted = xcalloc(n + 1, sizeof(*sorted));
	if (n)
		memcpy(sorted, files, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), by_bytes);
	const char *t = getenv("TMPDIR");
	*path = xasprintf("%s/anvil-tar-list-XXXXXX", t && *t ? t : "/tmp");
	int fd = mkostemp(*path, O_CLOEXEC);
	int rc = fd < 0 ? -errno : 0;
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	for (size_t i = 0; f && i < n; i++)
		fwrite(sorted[i], 1, strlen(sorted[i]) + 1, f);
	if (f && fclose(f) != 0)
		rc = -errno;
	free(sorted);
	return rc;
}

int tarball_pack_list(const char *dir, char *const *files, size_t n, const char *out, char *err,
                      size_t errlen)
{
	char *list = NULL;
	int rc = write_list(files, n, &list);
	if (rc) {
		snprintf(err, errlen, "packing %s: cannot write the list of files: %s", dir,
		         strerror(-rc));
		free(list);
		return rc;
	}
	char *extra[] = {"--no-recursion", "--null", "--verbatim-files-from", "--files-from", list};
	char **argv = pack_argv(dir, out, extra, 5);
	char *what = xasprintf("packing %zu files of %s", n, dir);
	rc = run_tar(argv, what, err, errlen);
	if (rc == 0)
		rc = check(out, what, err, errlen);
	free(what);
	free(argv);
	unlink(list);
	free(list);
	return rc;
}

int tarball_unpack(const char *path, const char *dir, char *err, size_t errlen)
{
	char *argv[] = {
	        "tar",       "--extract",       "--file",  (char *)path,         "--directory",
	        (char *)dir, "--no-same-owner", "--touch", "--no-overwrite-dir", NULL};
	char *what = xasprintf("unpacking %s into %s", path, dir);
	int rc = check(path, what, err, errlen);
	if (rc == 0)
		rc = run_tar(argv, what, err, errlen);
	free(what);
	return rc;
}
