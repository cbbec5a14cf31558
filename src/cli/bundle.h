/* bundle.h - code bundles: the working tree a workflow runs, packed into
 * one deterministic tar (base/tarball.h) and stored once in the object
 * store under its content key (`anvil wf run`; docs/workflows.md, "How a
 * task runs on a node").
 *
 * Which files (bundle_list):
 *   - inside a git work tree: the files git tracks under dir (`git ls-files
 *     -z`), their content as it is on disk; a tracked file deleted from the
 *     disk, and a submodule, are left out;
 *   - otherwise: every regular file and symbolic link under dir, never
 *     under a directory named .git;
 *   - in both cases minus what dir/.anvilignore excludes (bundle_ignore).
 * The same files with the same contents make the same bundle, whatever
 * their times, owners or umask: touching a file changes nothing, changing
 * a byte changes the key.
 *
 * .anvilignore is read as .gitignore is: one pattern per line, '#'
 * comments, blank lines skipped; "!" re-includes; a trailing "/" matches
 * directories only; a pattern with a "/" elsewhere is matched against the
 * path from dir (a leading "/" only anchors it), one without against each
 * name at any depth; "*", "?" and "[...]" as fnmatch(3) has them, within
 * one name, and "**" across directories. The last pattern that matches
 * decides, and nothing under an excluded directory comes back.
 *
 * Single-threaded, as the CLI is; the pure matcher is for tests too.
 */
#ifndef ANVIL_CLI_BUNDLE_H
#define ANVIL_CLI_BUNDLE_H

#include <stddef.h>

#include "base/objects.h"

struct cliconn;

/* The patterns of an .anvilignore. */
struct bundle_ignore;

struct bundle_ignore *bundle_ignore_parse(const char *text);
void bundle_ignore_free(struct bundle_ignore *ig);
/* Whether path (relative to the bundle's root, no leading "/") is
 * excluded, itself or through a directory above it; is_dir: path is a
 * directory. NULL ig excludes nothing. */
int bundle_ignored(const struct bundle_ignore *ig, const char *path, int is_dir);

/* The files of a bundle, relative to its root, sorted. */
struct bundle_files {
	char **v;
	size_t n;
	int from_git; /* listed by git (else by walking the tree) */
};

/* Lists the files of dir's bundle (above): 0, or an error with why in err. */
int bundle_list(const char *dir, struct bundle_files *out, char *err, size_t errlen);
void bundle_files_free(struct bundle_files *f);

/* Packs dir's bundle into the file out. */
int bundle_pack(const char *dir, const char *out, char *err, size_t errlen);
/* Stores the packed bundle at path through c's server: key gets its
 * content key; info->uploaded says whether the bytes were sent (0: stored
 * once already). */
int bundle_upload(struct cliconn *c, const char *path, char key[OBJECTS_KEY_MAX],
                  struct objects_info *info, char *err, size_t errlen);
/* Both: dir's bundle, packed into a temporary file, stored, and the file
 * removed. 0 with the key, or a negative code with the message in err. */
int bundle_store(struct cliconn *c, const char *dir, char key[80], char *err, size_t errlen);

/* A temporary file for a packed bundle that goes with this process however
 * it ends (a CLI killed while it uploads leaves no bundle-sized file
 * behind): an unnamed file (O_TMPFILE) in $TMPDIR (else /tmp), reached by
 * its path /proc/PID/fd/FD, which tar, a child, can open too. Where the
 * file system has no unnamed files, a named one, removed by
 * bundle_tmp_close. */
struct bundle_tmp {
	int fd;
	int named; /* path is a directory entry of its own */
	char path[4096];
};
/* 0, or a negative errno with why in err. */
int bundle_tmp_open(struct bundle_tmp *t, char *err, size_t errlen);
void bundle_tmp_close(struct bundle_tmp *t);

#endif
