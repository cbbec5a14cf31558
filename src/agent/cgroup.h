/* cgroup.h - per-rank cgroups: the v1 "pids" (or "freezer") hierarchy
 * that holds every rank, and the "cpu", "memory" and "devices" ones that
 * hold the ranks with limits.
 *
 * A process group is not enough to stop a rank: a process that calls
 * setsid() leaves it. A cgroup keeps every descendant, so stopping a rank
 * signals every pid in its cgroup.procs. The executor (exec.h) creates one
 * cgroup per rank under ROOT = <mount><agent's own cgroup>/anvil/<node>,
 * and the rank's command joins it itself (writes "0" to cgroup.procs)
 * before exec, so nothing it forks can escape.
 *
 * Limits (exec.h, "Limits"): a rank with a CPU or memory limit, or GPU
 * device isolation, also gets a cgroup of the same name under the same
 * path in each hierarchy it needs (cgroup_setup_controller gives that
 * hierarchy's ROOT), written with cgroup_limit_* before the command joins
 * it:
 *
 *   cpu       cpu.cfs_period_us = 100000, cpu.cfs_quota_us = millis * 100
 *   memory    memory.limit_in_bytes (swap is not limited: no memsw)
 *   devices   "c 195:M rwm" denied for every GPU minor M in 0..253 but the
 *             rank's: /dev/nvidiaN of other GPUs cannot be opened (EPERM);
 *             nvidiactl (195:255), nvidia-modeset (195:254), nvidia-uvm
 *             and every other device stay allowed
 *
 * Cost: writing these files is cheap (~1 ms for the 254 device entries);
 * joining a v1 cgroup is not (an RCU grace period, 6-16 ms each), which is
 * why ranks without limits never get these cgroups.
 *
 * cgroup v2 (a host with the unified hierarchy only, or ANVIL_CGROUP=v2):
 * ROOT = <cgroup2 mount><agent's own cgroup>/anvil/<node>, and a rank's
 * one cgroup there both holds it and carries its limits: cpu.max
 * ("quota 100000") and memory.max, with the controller enabled in
 * cgroup.subtree_control from the agent's own cgroup down to ROOT
 * (cgroup_v2_delegate); GPU devices through an eBPF device program
 * (devbpf.h). v2 has no internal processes: when the agent's own cgroup
 * is not the root, the agent moves itself into a leaf of it
 * (anvil-agent-<pid>) before enabling a controller there, as a service
 * with systemd's Delegate=yes does. A controller that the agent's cgroup
 * was not given (cgroup.controllers; on hybrid hosts, one bound to a v1
 * hierarchy) is not available in v2, and the executor falls back to its
 * v1 hierarchy when one is mounted.
 *
 * Where no pids/freezer hierarchy (nor, in auto mode, a v2 one) is
 * mounted, or it is not writable, cgroup_setup() fails and the executor
 * runs without cgroups; the same for each limit's hierarchy and that
 * limit. Functions are thread-safe (no state of their own).
 */
#ifndef ANVIL_AGENT_CGROUP_H
#define ANVIL_AGENT_CGROUP_H

#include <stdint.h>
#include <sys/types.h>

#define CGROUP_CPU_PERIOD_US 100000 /* cpu.cfs_period_us: 100 ms */
#define CGROUP_NVIDIA_MAJOR  195    /* /dev/nvidiaN, nvidiactl, nvidia-modeset */
#define CGROUP_GPU_MINORS    254    /* minors 0..253 are GPUs; 254, 255 are not */

enum cgroup_mode {
	CGROUP_AUTO, /* v1 pids or freezer when mounted, else v2 */
	CGROUP_V1,
	CGROUP_V2,
};

/* Finds a writable hierarchy and creates ROOT for node_name; *root_out is
 * heap-allocated (free it). 0, -ENOTSUP when there is none, or -errno. */
int cgroup_setup(const char *node_name, enum cgroup_mode mode, char **root_out);

/* Whether path lies in a cgroup v2 hierarchy. */
int cgroup_is_v2(const char *path);

/* Lets ROOT's children (rank cgroups) use controller ("cpu", "memory"):
 * 0; -ENOTSUP when the agent's own cgroup was not given it; -EXDEV when
 * ROOT is not below it; -errno. */
int cgroup_v2_delegate(const char *root, const char *controller);

/* The same for the v1 hierarchy of one controller ("cpu", "memory",
 * "devices"): 0, -ENOTSUP when it is not mounted, or -errno. */
int cgroup_setup_controller(const char *controller, const char *node_name, char **root_out);

/* Creates ROOT/leaf (leaf has no '/'); *path_out is heap-allocated. */
int cgroup_create(const char *root, const char *leaf, char **path_out);

/* Opens path/cgroup.procs for writing (O_CLOEXEC); an fd or -errno. */
int cgroup_open_procs(const char *path);

/* Sends sig to every pid in path/cgroup.procs but spare (0: none); the
 * count signalled. SIGKILL with no spare on v2 writes cgroup.kill: the
 * kernel kills everything in the cgroup, what is forking included. The rank's shim is spared: a spare shim (shim.h) lives
 * in its rank's cgroup and must outlive the command to record its exit. */
int cgroup_signal(const char *path, int sig, pid_t spare);

/* Moves the calling process into every cgroup that another process is in
 * (its /proc/PID/cgroup, read through procfd, an open /proc/PID
 * directory) where the caller is not already: each v1 hierarchy with
 * controllers (named ones such as name=systemd are left alone) and v2.
 * For exec into a rank (agent/rankexec.h): what the rank's command is in,
 * its pids cgroup and its limits', the exec'd process is in, so it counts
 * against the rank's limits and is killed with the rank. 0, or the first
 * failure as a negative errno with the cgroup named in err. */
int cgroup_join_like(int procfd, char *err, size_t errlen);

/* Removes the cgroup directory; 0, -EBUSY while processes remain, -errno. */
int cgroup_remove(const char *path);

/* Writes value to path/file in one write(); 0 or -errno. */
int cgroup_write(const char *path, const char *file, const char *value);

/* The limits, each in its own hierarchy's cgroup (see above; v1 or v2 by
 * the path): 0, -errno (-EINVAL from the kernel for a quota above the
 * parent's, say). */
int cgroup_limit_cpu(const char *path, int64_t millis);
int cgroup_limit_memory(const char *path, int64_t bytes);
/* Only the GPUs of minors[0..n) (others ignored) stay open to the
 * cgroup: v1 "devices" rules, or on v2 devbpf_limit_gpus. */
int cgroup_limit_gpus(const char *path, const int *minors, int n);

/* How many processes the kernel's OOM killer has killed in the memory
 * cgroup at path (v1 memory.oom_control, v2 memory.events: "oom_kill");
 * read before the cgroup is removed. The count, or -errno (-ENODATA: the
 * kernel does not say). */
int cgroup_oom_kills(const char *path);

#endif
