/* codeset.h - which files of a code bundle a cached task depends on, and
 * whether another bundle holds the same ones (docs/workflows.md, "The
 * task cache"). Pure: no I/O. The task cache (store/flowcache.c) calls it
 * with the bundles' indexes and the read sets the task wrapper recorded.
 *
 * An INDEX is one bundle, as tarball_index (base/tarball.h) makes it:
 * {PATH: VALUE}, PATH relative without "./" ("" is the top), VALUE
 * "f:<sha256>" for a file, "l:<target>" for a symbolic link, "d" for a
 * directory.
 *
 * A VIEW is what a task depends on of a bundle: {KEY: VALUE or null}. A
 * KEY is a PATH the task looked up, with the index's VALUE, or null when
 * the bundle has nothing there (a file that appears there later changes
 * the task: Python looks for many modules that are not there); or a
 * directory it listed, written "DIR/" ("/" for the top), with
 * "ls:<sha256 of its entries' names>" (null when it is not a directory
 * there). A task sees two bundles alike when its view of each is the same.
 */
#ifndef ANVIL_FLOW_CODESET_H
#define ANVIL_FLOW_CODESET_H

#include <jansson.h>
#include <stddef.h>

#define CODESET_PATH_MAX  1024  /* bytes of one KEY or declared path */
#define CODESET_KEYS_MAX  20000 /* KEYs of one recorded read set */
#define CODESET_PATHS_MAX 100   /* paths a task declares */

/* NULL when key is a KEY as the wrapper reports one: relative, at most
 * CODESET_PATH_MAX bytes, no empty, "." or ".." part, one trailing "/" at
 * most ("/" alone: the top's listing); else why not. */
const char *codeset_key_why(const char *key);
/* NULL when path may be declared (cache: {code: [PATH]}): a KEY but the
 * top, a trailing "/" allowed; else why not. */
const char *codeset_path_why(const char *path);

/* Adds each directory's listing to index ("DIR/" and "/" keys with their
 * "ls:" values), so that views of it need not walk the whole index for
 * each listed directory: once per index, before it is shared. */
void codeset_add_listings(json_t *index);
/* The view of index through keys (a JSON array of KEYs, or an object
 * whose keys are used: an earlier view). The caller decrefs. */
json_t *codeset_view(const json_t *index, const json_t *keys);
/* The view of declared paths (a JSON array of texts, a trailing "/"
 * ignored): each path with its VALUE (null when absent), and, for a
 * directory, every path under it, so that a file added there changes
 * the view. The caller decrefs. */
json_t *codeset_declared(const json_t *index, const json_t *paths);
/* How many KEYs differ between views was and now (a KEY in one of them
 * only counts), the first few named in out ("gen.py, lib/new.py (new)
 * and 2 more": "(new)" was absent, "(gone)" is absent now, "(files added
 * or removed)" a listing); "" when none. */
int codeset_diff(const json_t *was, const json_t *now, char *out, size_t len);

#endif
