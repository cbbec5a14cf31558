/* hostlist.h - ranges of node names and addresses, as a fleet spec writes
 * them, expanded.
 *
 *   h200-[01-18]        h200-01, h200-02, ... h200-18
 *   10.0.1.[1-10]       10.0.1.1 ... 10.0.1.10
 *   gpu-[1-3,7,10-11]   gpu-1, gpu-2, gpu-3, gpu-7, gpu-10, gpu-11
 *   r[1-2]-n[1-2]       r1-n1, r1-n2, r2-n1, r2-n2 (the last range varies fastest)
 *
 * A range's numbers keep the width of its first bound ("01" pads to two
 * digits); a pattern without brackets is the one name it spells. What a
 * name may hold is the caller's to check; this only expands. Pure: no I/O.
 */
#ifndef ANVIL_FLEET_HOSTLIST_H
#define ANVIL_FLEET_HOSTLIST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define HOSTLIST_MAX_RANGES 8 /* bracketed ranges in one pattern */

/* How many names pattern spells: its count, or -1 with why in err (a
 * bracket left open, a bound that is not a number, a range that runs
 * backwards, more than max names). Nothing is allocated for the names. */
int64_t hostlist_count(const char *pattern, int64_t max, char *err, size_t errlen);

/* Appends every name pattern spells to out (a JSON array), in order: 0,
 * or -1 with why in err and out unchanged (hostlist_count's errors). */
int hostlist_expand(const char *pattern, int64_t max, json_t *out, char *err, size_t errlen);

#endif
