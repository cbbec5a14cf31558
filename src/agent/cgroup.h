/* cgroup.h - per-rank cgroups (v1 "pids" or "freezer" hierarchy).
 *
 * A process group is not enough to stop a rank: a process that calls
 * setsid() leaves it. A cgroup keeps every descendant, so stopping a rank
 * signals every pid in its cgroup.procs. The executor (exec.c) creates one
 * cgroup per rank under ROOT = <mount><agent's own cgroup>/anvil/<node>,
 * and the rank's command joins it itself (writes "0" to cgroup.procs)
 * before exec, so nothing it forks can escape.
 *
 * Where no v1 pids/freezer hierarchy is mounted, or it is not writable,
 * cgroup_setup() fails and the executor runs without cgroups. cgroup v2 is
 * not supported yet. Functions are thread-safe (no state of their own).
 */
#ifndef ANVIL_AGENT_CGROUP_H
#define ANVIL_AGENT_CGROUP_H

#include <sys/types.h>

/* Finds a writable hierarchy and creates ROOT for node_name; *root_out is
 * heap-allocated (free it). 0, -ENOTSUP when there is none, or -errno. */
int cgroup_setup(const char *node_name, char **root_out);

/* Creates ROOT/leaf (leaf has no '/'); *path_out is heap-allocated. */
int cgroup_create(const char *root, const char *leaf, char **path_out);

/* Opens path/cgroup.procs for writing (O_CLOEXEC); an fd or -errno. */
int cgroup_open_procs(const char *path);

/* Sends sig to every pid in path/cgroup.procs but spare (0: none); the
 * count signalled. The rank's shim is spared: a spare shim (shim.h) lives
 * in its rank's cgroup and must outlive the command to record its exit. */
int cgroup_signal(const char *path, int sig, pid_t spare);

/* Removes the cgroup directory; 0, -EBUSY while processes remain, -errno. */
int cgroup_remove(const char *path);

#endif
