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
 * What an archive may hold (tarball_check), checked after every pack and
 * before every unpack, so that nothing unpacked reaches outside the
 * directory it is unpacked into:
 *   - regular files, directories and symbolic links; a hard link only to
 *     a regular file before it in the archive (packs store none); no
 *     device, FIFO, sparse file or other member type;
 *   - names relative, without "..", each once, none under a symbolic
 *     link of the archive (so every member lands where its name says);
 *   - a symbolic link's target relative, and inside the archive's root
 *     when followed as the kernel does from the link's own directory:
 *     ".." goes up from where the path has got to, through the archive's
 *     other symbolic links (at most 40 in a row), names the archive does
 *     not hold taken as directories. "sub/x -> ../lib" is kept; "x ->
 *     /etc", "x -> ../../y" at the root, and "up -> ." with "x -> up/.."
 *     are refused.
 * A refusal names the member and its target: the pack fails (its output
 * file is left to the caller) or nothing is unpacked.
 *
 * Unpacking never restores owners and gives files the time of unpacking
 * (so a restored checkpoint looks new, not 1970). Each call blocks until
 * tar ends; a failure's message names what was packed or unpacked and
 * says why: what the check refused, or tar's own first line.
 * Thread-safe (posix_spawn).
 */
#ifndef ANVIL_TARBALL_H
#define ANVIL_TARBALL_H

#include <jansson.h>
#include <stddef.h>

/* Packs everything under dir (itself as "./") into the file out. */
int tarball_pack_dir(const char *dir, const char *out, char *err, size_t errlen);
/* Packs the n files named (relative to dir; sorted here by byte order)
 * into the file out; directories named are stored without their contents. */
int tarball_pack_list(const char *dir, char *const *files, size_t n, const char *out, char *err,
                      size_t errlen);
/* Unpacks the archive at path into the existing directory dir, once
 * tarball_check accepted it (else nothing is written there). */
int tarball_unpack(const char *path, const char *dir, char *err, size_t errlen);
/* Whether the archive at path holds only what an archive may (above): 0,
 * ERR_INVALID with the first member at fault and why in err, or -errno
 * when it cannot be read. */
int tarball_check(const char *path, char *err, size_t errlen);
/* The index of the archive open on fd (read with pread: its offset is
 * left alone), once tarball_check's rules accept it: {NAME: VALUE} for
 * every member, NAME as the archive holds it without "./" or a trailing
 * "/" ("" is the root), VALUE "f:<sha256 of its bytes>" for a regular file
 * (a hard link: its target's), "l:<target>" for a symbolic link, "d" for
 * a directory; every directory that a name implies is there too, packed
 * or not. What the workflow cache compares bundles by (flow/codeset.h).
 * 0, or tarball_check's errors; *out: json_decref it. */
int tarball_index(int fd, json_t **out, char *err, size_t errlen);

#endif
