#include "agent/devbpf.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "base/log.h"

/* The program, for allowed minors A, B, ... (r1: struct bpf_cgroup_dev_ctx):
 *
 *    0  r2 = *(u32 *)(r1 + access_type)
 *    1  r2 &= 0xffff                        the device type (the access is above)
 *    2  if r2 != BPF_DEVCG_DEV_CHAR goto allow
 *    3  r2 = *(u32 *)(r1 + major)
 *    4  if r2 != CGROUP_NVIDIA_MAJOR goto allow
 *    5  r2 = *(u32 *)(r1 + minor)
 *    6  if r2 >= CGROUP_GPU_MINORS goto allow   nvidiactl, nvidia-modeset
 *    7  if r2 == A goto allow
 *       if r2 == B goto allow ...
 *       r0 = 0; exit                            deny: EPERM
 *  allow:
 *       r0 = 1; exit
 *
 * Every access (read, write, mknod) is denied alike, as "rwm" in v1. The
 * loads are 32-bit, which zero-extends, so the 64-bit compares see the
 * fields' values. Jump offsets count from the next instruction. */
#define PROG_HEAD 7 /* instructions before the compares */
#define PROG_MAX  (PROG_HEAD + DEVBPF_MAX_MINORS + 4)
#define PROG_LOG  4096 /* verifier log kept on a failed load */

#define INSN(c, dst, src, o, i)                                                                    \
	((struct bpf_insn){.code = (c), .dst_reg = (dst), .src_reg = (src), .off = (o), .imm = (i)})
#define LDX_W(dst, src, o)   INSN(BPF_LDX | BPF_MEM | BPF_W, dst, src, o, 0)
#define AND_K(dst, i)        INSN(BPF_ALU64 | BPF_AND | BPF_K, dst, 0, 0, i)
#define MOV_K(dst, i)        INSN(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, i)
#define JMP_K(op, dst, i, o) INSN(BPF_JMP | (op) | BPF_K, dst, 0, o, i)
#define EXIT()               INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

struct prog {
	struct bpf_insn insn[PROG_MAX];
	int len;
};

static void emit(struct prog *p, struct bpf_insn insn)
{
	p->insn[p->len++] = insn;
}

/* if r2 <op> imm goto target */
static void emit_jump(struct prog *p, uint8_t op, int32_t imm, int target)
{
	emit(p, JMP_K(op, BPF_REG_2, imm, (int16_t)(target - p->len - 1)));
}

static void build(struct prog *p, const int *minors, int n)
{
	int allowed = 0;
	for (int i = 0; i < n; i++)
		allowed += minors[i] < CGROUP_GPU_MINORS;
	int allow = PROG_HEAD + allowed + 2;
	p->len = 0;
	emit(p, LDX_W(BPF_REG_2, BPF_REG_1, offsetof(struct bpf_cgroup_dev_ctx, access_type)));
	emit(p, AND_K(BPF_REG_2, 0xffff));
	emit_jump(p, BPF_JNE, BPF_DEVCG_DEV_CHAR, allow);
	emit(p, LDX_W(BPF_REG_2, BPF_REG_1, offsetof(struct bpf_cgroup_dev_ctx, major)));
	emit_jump(p, BPF_JNE, CGROUP_NVIDIA_MAJOR, allow);
	emit(p, LDX_W(BPF_REG_2, BPF_REG_1, offsetof(struct bpf_cgroup_dev_ctx, minor)));
	emit_jump(p, BPF_JGE, CGROUP_GPU_MINORS, allow);
	for (int i = 0; i < n; i++)
		if (minors[i] < CGROUP_GPU_MINORS)
			emit_jump(p, BPF_JEQ, minors[i], allow);
	emit(p, MOV_K(BPF_REG_0, 0));
	emit(p, EXIT());
	emit(p, MOV_K(BPF_REG_0, 1)); /* allow */
	emit(p, EXIT());
}

static int sys_bpf(enum bpf_cmd cmd, union bpf_attr *attr)
{
	return (int)syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

/* A program fd, or -errno; the verifier's log goes to log when given. */
static int load(const struct prog *p, char *log, size_t loglen)
{
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
	attr.insns = (uint64_t)(uintptr_t)p->insn;
	attr.insn_cnt = (uint32_t)p->len;
	attr.license = (uint64_t)(uintptr_t) "GPL";
	/* Shown by `bpftool cgroup tree`: whose program denies a device. */
	memcpy(attr.prog_name, "anvil_gpus", sizeof("anvil_gpus"));
	if (log) {
		log[0] = '\0';
		attr.log_buf = (uint64_t)(uintptr_t)log;
		attr.log_size = (uint32_t)loglen;
		attr.log_level = 1;
	}
	int fd = sys_bpf(BPF_PROG_LOAD, &attr);
	return fd < 0 ? -errno : fd;
}

/* The line the verifier states its reason on: the log's last, but for the
 * statistics ("processed N insns ...") that it may add after it. */
static const char *reason(char *log)
{
	const char *line = log;
	for (char *p = log; *p; p++) {
		if (*p != '\n')
			continue;
		*p = '\0';
		if (p[1] == '\0' || strncmp(p + 1, "processed ", 10) == 0)
			break;
		line = p + 1;
	}
	return line;
}

/* A rejected program is our bug, not the machine's, and the code alone
 * would not say what the verifier disliked: load it again with a log (only
 * then, so a good load costs nothing more) and report the verifier's
 * reason. */
static void report_rejection(const struct prog *p, int rc)
{
	char log[PROG_LOG];
	if (load(p, log, sizeof(log)) >= 0) /* cannot happen: the same program */
		return;
	log[sizeof(log) - 1] = '\0';
	log_error("devbpf: the verifier rejected the GPU device program: %s (%s)", reason(log),
	          strerror(-rc));
}

int devbpf_limit_gpus(const char *path, const int *minors, int n)
{
	if (!path || n < 0 || n > DEVBPF_MAX_MINORS || (n > 0 && !minors))
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (minors[i] < 0)
			return -EINVAL;
	struct prog p;
	build(&p, minors, n);
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	int prog_fd = -1, rc = 0;
	int cg_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg_fd < 0)
		return -errno;
	if ((prog_fd = load(&p, NULL, 0)) < 0) {
		rc = prog_fd;
		if (rc == -EINVAL || rc == -EACCES) /* the verifier's codes */
			report_rejection(&p, rc);
		goto out;
	}
	attr.target_fd = (uint32_t)cg_fd;
	attr.attach_bpf_fd = (uint32_t)prog_fd;
	attr.attach_type = BPF_CGROUP_DEVICE;
	/* BPF_F_ALLOW_MULTI: the kernel runs the cgroup's own programs and
	 * those of every ancestor that attached with this flag (systemd does,
	 * for DeviceAllow= and its default policy), and an open needs them all
	 * to allow it: a parent's policy keeps applying and ours narrows it.
	 * The flag on ours is what keeps that true below: a later program on
	 * this cgroup or a child adds to ours instead of replacing it (under
	 * BPF_F_ALLOW_OVERRIDE a child's program would replace ours and could
	 * open the GPUs again). Caveats of the kernel's rules: a parent's
	 * program attached with ALLOW_OVERRIDE yields to ours, and one attached
	 * with no flag makes this attach fail (-EPERM). */
	attr.attach_flags = BPF_F_ALLOW_MULTI;
	if (sys_bpf(BPF_PROG_ATTACH, &attr) < 0)
		rc = -errno;
out:
	/* The attachment holds the program: closing our fd does not free it. */
	if (prog_fd >= 0)
		close(prog_fd);
	close(cg_fd);
	return rc;
}
