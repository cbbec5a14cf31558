/* tarball.h - deterministic tar archives: code bundles, "dir" outputs and
 * checkpoints, made and unpacked by GNU tar (fork and exec of `tar`; the
 * tar package is essential on Debian).
 *
 * Deterministic: the same files with the same contents make the same
 * bytes, and so the same content key, whatever their owners, times or
 * umask: entries sorted by name, mtime 0, owner and group 0 without names,
 * modes normalized to 0644/0755 (a file with any execute bit is 0755),
 * hard links stored as files, GNU format, no compression. Symbolic links
 * are kept as links. TAR_OPTIONS in the environment is ignored.
 *
 * Unpacking never restores owners and gives files the time of unpacking
 * (so a restored checkpoint looks new, not 1970); GNU tar refuses members
 * named with "..". Each call blocks until tar ends; a failure's message
 * names what was packed or unpacked and ends with tar's own first line.
 * Thread-safe (posix_spawn).
 */
#ifndef ANVIL_TARBALL_H
#define ANVIL_TARBALL_H

#include <stddef.h>

/* Packs everything under dir (itself as "./") into the file out. */
int tarball_pack_dir(const char *dir, const char *out, char *err, size_t errlen);
/* Packs the n files named (relative to dir; sorted here by byte order)
 * into the file out; directories named are stored without their contents. */
int tarball_pack_list(const char *dir, char *const *files, size_t n, const char *out, char *err,
                      size_t errlen);
/* Unpacks the archive at path into the existing directory dir. */
int tarball_unpack(const char *path, const char *dir, char *err, size_t errlen);

#endif
