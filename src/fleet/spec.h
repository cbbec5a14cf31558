/* spec.h - the cluster spec: one YAML file that describes the whole fleet,
 * checked and compiled to a normalized JSON form.
 *
 * The file (docs/fleet.md is its reference; examples/fleet/reference.yaml
 * the reference fleet) names the pools (on-premises, and cloud pools that
 * later bursting will fill), the node profiles (the GPUs a node must show,
 * driver, CUDA and agent versions, mounts and the NVMe cache directory,
 * sysctl settings, packages), the node groups (names and addresses, often
 * as ranges like h200-[01-18], with a pool, a profile, labels and
 * topology), the queues with their team quotas, the teams, and the upgrade
 * policy. Everything is a mapping by name:
 *
 *   name: NAME
 *   pools:    {NAME: {kind: on-prem | cloud, provider, region, instance_type,
 *                     max_nodes, profile, queues}}
 *   profiles: {NAME: {gpu: {model, count}, driver, cuda, agent, mounts:
 *                     [{path, device, fs, options}], cache_dir, sysctl: {K: V},
 *                     packages}}
 *   groups:   {NAME: {pool, profile, nodes, addresses, labels, topology:
 *                     {rack, switch, block}}}
 *   queues:   {NAME: {priority, weight, borrowing, default_time_limit,
 *                     idle_timeout, quotas: {TEAM: GPUS}}}
 *   teams:    {NAME: {weight}}
 *   upgrade:  {max_unavailable, max_unavailable_per_block, validation_timeout}
 *
 * The compiled form has every default filled in, every range expanded and
 * every mapping by name turned into a list in the file's order, each entry
 * with its "name"; it adds "nodes", one entry per node with its address,
 * group, pool, profile and labels (the group's labels and its topology).
 * A queue's entry is the body POST /v1/queues takes (durations in _ms).
 *
 * The check finds every error, not only the first, with the path of the
 * value at fault as the file wrote it ("groups.h200.nodes[1]"): unknown
 * keys, wrong types, values out of range, names and addresses that are not
 * ones, references to pools, profiles, queues and teams that are not
 * there, and a node or address that two groups (or two ranges) both hold.
 *
 * Pure: no I/O (the caller reads the file). One thread per call.
 */
#ifndef ANVIL_FLEET_SPEC_H
#define ANVIL_FLEET_SPEC_H

#include <jansson.h>
#include <stddef.h>

#include "base/schema.h"

#define FLEET_MAX_NODES  10000 /* nodes in one spec: every group together */
#define FLEET_MAX_LABELS 8     /* a node's labels with its topology: the scheduler's bound */

/* Compiles a spec as the YAML reads (src: the document as JSON) into the
 * compiled form; NULL when it has errors, every one of them in errs. The
 * caller owns the result (json_decref). */
json_t *fleet_compile(const json_t *src, struct schema_errors *errs);

/* The YAML front end: parses text (len bytes) and compiles it. On errors
 * returns NULL with each one as a line "FILE:LINE:COLUMN: PATH: what is
 * wrong" in out (of size len_out), in the order of the file. */
json_t *fleet_compile_yaml(const char *file, const char *text, size_t len, char *out,
                           size_t len_out);

#endif
