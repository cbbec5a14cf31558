/* devbpf.h - GPU device isolation on cgroup v2: a small eBPF program
 * attached to a rank's v2 cgroup.
 *
 * cgroup v2 has no devices.allow/deny files; the kernel asks the eBPF
 * programs of type BPF_PROG_TYPE_CGROUP_DEVICE attached to a cgroup and its
 * ancestors (attach type BPF_CGROUP_DEVICE) whether a process in it may
 * open or mknod a device node, and the access is denied (EPERM) unless
 * every one of them allows it. This module builds that program for one
 * rank: it denies char 195:M (CGROUP_NVIDIA_MAJOR) for every GPU minor M in
 * 0..253 (CGROUP_GPU_MINORS) but the rank's own, the same rule as the v1
 * "devices" cgroup in cgroup.h; nvidiactl (195:255), nvidia-modeset
 * (195:254), nvidia-uvm and every other device stay allowed.
 *
 * The program is loaded and attached with the raw bpf(2) syscall (no
 * libbpf): a chain of compares, one per allowed minor. Once attached it
 * lives as long as the cgroup does (the cgroup holds the only reference),
 * so removing the rank's cgroup frees it (once the kernel releases the
 * cgroup); there is nothing to detach.
 *
 * Cost: one BPF_PROG_LOAD and one BPF_PROG_ATTACH, about 0.1 ms for no
 * minors and 0.5 ms for 64 (the verifier walks every branch of the
 * chain; measured on kernel 6.18); each device open in the cgroup then
 * runs the program (nanoseconds). Needs CAP_SYS_ADMIN (from 5.8, CAP_BPF
 * and CAP_NET_ADMIN will do) and a kernel with cgroup device programs
 * (4.15 or later; before 5.11 the program is charged to RLIMIT_MEMLOCK).
 * Thread-safe: no state of its own.
 */
#ifndef ANVIL_AGENT_DEVBPF_H
#define ANVIL_AGENT_DEVBPF_H

#define DEVBPF_MAX_MINORS 64 /* compares the program may hold */

/* Lets processes in the cgroup v2 directory `path` open only the GPU
 * device nodes of minors[0..n) among char 195:0..253; every other device
 * stays allowed. n may be 0 (every GPU denied; minors may then be NULL);
 * minors of 254 and above are not GPUs and change nothing. Processes that
 * are already in the cgroup are covered at once, as are their children.
 * A second call on the same cgroup attaches a second program: both must
 * allow an open, so it can only narrow what the first allowed.
 * 0, -EINVAL for n outside 0..DEVBPF_MAX_MINORS or a negative minor,
 * -EBADF where path is not a v2 cgroup (a v1 one, a plain directory), or
 * another -errno (-ENOENT, -EPERM without the privileges). */
int devbpf_limit_gpus(const char *path, const int *minors, int n);

#endif
