/* fence.h - what stands between a rank and the node, and between ranks.
 *
 * A fenced rank (the default when the agent runs as root) runs:
 *
 *   - in a PID namespace of its own, whose init is the rank's shim
 *     (agent/shim.h): the rank sees and can signal only its own processes,
 *     and /proc shows only them; `anvil exec` enters it (agent/rankexec.h);
 *   - in a mount namespace of its own, made by the command's child just
 *     before exec: a fresh /proc; a private /tmp (the rank's directory,
 *     WORK_DIR/rank/<attempt>-<rank>, made by the executor, mode 01777) and a
 *     private /dev/shm (tmpfs); the agent's work directory covered by an
 *     empty tmpfs in which only the rank's own directories (its output,
 *     checkpoint, rank and task directories, its two logs read-only, the
 *     code bundles for a task) are bound back, at their own paths. Where a
 *     directory above the work directory is closed to the rank's account
 *     (/root, a 0700 temporary directory), the cover is that directory:
 *     the rank sees an empty one there with just the path down to its own
 *     directories. The agent's own binary, which ranks run (session holder,
 *     task wrapper, launcher), is bound in read-only the same way when the
 *     account could not reach it. Mounts are private, nosuid and nodev;
 *   - as the agent's rank account (`--rank-user`, by default anvil-job),
 *     with its groups, and with no_new_privs: a setuid binary does not
 *     raise it again. Root only where the job's queue allows it.
 *
 * So a rank reads none of the agent's state (node.json, the journal,
 * other ranks' logs and directories) and, being another user than the
 * daemons, none of their 0600 files (tokens, the server's database); it
 * cannot see, trace or signal another job's processes.
 *
 * The shim, init of the rank's PID namespace, also makes the mount
 * namespace once, when it starts (fence_shim_enter: every mount private, a
 * new /proc): a spare shim does that ahead of time, since making and
 * ending a mount namespace costs some 10 ms of a rank's start otherwise.
 * The plan of a rank's view is made by the executor before the fork, as a
 * NULL-terminated list of steps (strings: the shim's launch carries
 * strings), and carried out in the command's child by fence_enter(), in
 * the shim's mount namespace; once the rank has ended, the shim takes its
 * mounts away again (fence_leave), ready for the next rank. Both make
 * async-signal-safe calls only (the child of a vfork, a forked shim). A
 * step is one letter and its argument:
 *
 *   oPATH        open PATH (O_PATH) as the next source, before anything
 *                covers it
 *   bN:PATH      bind source N on PATH (nosuid, nodev); rN:PATH read-only
 *   sPATH        mount an empty tmpfs on PATH, mode 01777 (/dev/shm)
 *   cPATH        mount an empty tmpfs on PATH, mode 0755 (the cover)
 *   dPATH        make the directory PATH, 0755 (one that exists is fine)
 *   fPATH        make the empty file PATH (a mount point for a file)
 *   n            no_new_privs
 *   uUID:GID:G,G set the groups, then the gid, then the uid (all three ids)
 *   UUID:GID:G,G the same but only the real ids: the effective ones stay
 *                root, so that the task wrapper may unpack a code bundle
 *                before it drops them itself (agent/task.h); the exec is
 *                then secure (AT_SECURE): the loader ignores LD_PRELOAD
 *
 * The executor owns struct fence; one thread uses it.
 */
#ifndef ANVIL_AGENT_FENCE_H
#define ANVIL_AGENT_FENCE_H

#include <stddef.h>
#include <sys/types.h>

#define FENCE_DEFAULT_USER "anvil-job"
#define FENCE_GROUPS_MAX   32
#define FENCE_SOURCES_MAX  16 /* o steps in one plan */

struct fence;

/* The rank's account, as resolved at fence_new. */
struct fence_account {
	char name[64];
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[FENCE_GROUPS_MAX];
};

/* A fence for the ranks an agent runs over work_dir, as user (NULL: the
 * default account). 0; ERR_NOTFOUND with err set when the account does
 * not exist; -EPERM when the agent is not root (no fence possible: ranks
 * run as the agent's own user, the caller says so). A user of "root" is
 * allowed: ranks then run as root, still in their namespaces. */
int fence_new(const char *user, const char *work_dir, struct fence **out, char *err, size_t errlen);
void fence_free(struct fence *f);
const struct fence_account *fence_account(const struct fence *f);
/* The directory the rank's view covers with an empty tmpfs to hide the
 * work directory (borrowed). */
const char *fence_cover(const struct fence *f);
/* This binary's path when the account cannot reach it where it is (a build
 * under /root, a checkout under /tmp): each view then has it bound,
 * read-only, at that path, under a cover of its own. NULL otherwise. */
const char *fence_self(const struct fence *f);

/* 1 when the account can reach the directory path (each directory on the
 * way searchable by it, by the mode bits); 0 otherwise. */
int fence_can_enter(const struct fence *f, const char *path);
/* 1 when the account can execute the regular file path (reach it and
 * have an execute bit of its own, its group's or others'). */
int fence_can_exec(const struct fence *f, const char *path);

/* One directory or file of the node a rank sees, at its own path. */
struct fence_bind {
	const char *path;
	int read_only;
	int file; /* a file, not a directory */
};

/* How a rank's account is taken. */
enum fence_run_as { FENCE_AS_ACCOUNT, FENCE_AS_ROOT, FENCE_AS_ACCOUNT_REAL };

/* The steps of a rank's fence: tmp_dir becomes its /tmp, binds[0..n) are
 * bound back under the cover (each must lie under it; a bind elsewhere
 * is skipped). The caller frees the list (fence_plan_free). */
char **fence_plan(const struct fence *f, const char *tmp_dir, const struct fence_bind *binds, int n,
                  enum fence_run_as as);
void fence_plan_free(char **plan);

/* anvil's own programs that start as root on a rank's behalf with the
 * rank's environment (the task wrapper, the exec helper) are exec'd with
 * the variables the loader and libc would act on (LD_*, MALLOC_*,
 * GCONV_PATH, ... and PATH) set aside as ANVIL_STASH_NAME=VALUE and a
 * PATH of the system's; the program puts them back once it has become the
 * rank's account, before it runs the rank's command. */
int fence_env_unsafe(const char *kv);
/* A copy of env so set aside; free it with fence_plan_free. */
char **fence_env_stash(char *const *env);
/* Puts the set-aside variables of this process's environment back. */
void fence_env_unstash(void);

/* In a shim that is the init of a new PID namespace, once: a mount
 * namespace of its own, every mount in it private, a new /proc (of the PID
 * namespace). 0, or a negative errno. Async-signal-safe. */
int fence_shim_enter(void);

/* In the command's child, after fork or vfork and before exec, in a
 * shim's namespace that fence_shim_enter made: async-signal-safe. Carries
 * out plan; 0, or -errno with the failed step written to err_fd as
 * "anvil: cannot fence the rank: STEP: REASON". */
int fence_enter(char *const *plan, int err_fd);

/* In the shim, once the rank has ended: detaches the plan's mounts, last
 * first, leaving its namespace as fence_shim_enter made it. */
void fence_leave(char *const *plan);

#endif
