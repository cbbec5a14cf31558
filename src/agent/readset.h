/* readset.h - the files of a directory (a task's code bundle) that a
 * command and its children look up, read and list while it runs: the
 * read set by which the task cache keys a task (docs/workflows.md, "The
 * task cache"; flow/codeset.h says what the keys are). The task wrapper
 * (task_run.c) records it on the rank that reports the outputs.
 *
 * How: a seccomp filter with a user-notification listener. The command's
 * child installs it (readset_install: after fork, before exec, under
 * no_new_privs, which needs no privilege) for the calls that look a path
 * up (open, creat, openat, openat2, stat, lstat, newfstatat, statx,
 * access, faccessat, faccessat2, readlink, readlinkat, execve, execveat,
 * chdir) or list a directory (getdents, getdents64), and hands the
 * listener to the wrapper over a socket; every child of the command
 * inherits the filter. The wrapper (readset_serve, from its wait loop)
 * takes each such call, reads its path from the caller's memory
 * (/proc/PID/mem: the caller runs under the wrapper's own account and is
 * its descendant, the wrapper being its subreaper), resolves it against
 * the caller's working directory or directory descriptor and the tree's
 * own symbolic links, keeps it when it lies in the tree, and lets the
 * call go on as it was (SECCOMP_USER_NOTIF_FLAG_CONTINUE): nothing is
 * denied or changed; the kernel carries the call out. A path looked up
 * and not found is kept too (the first part of it that is missing): a
 * file that appears there later would change what the command does, as a
 * module that Python looked for.
 *
 * Why not fanotify: it needs CAP_SYS_ADMIN, which the wrapper has given
 * up when the command starts (drop_root in task_run.c), so the watch
 * would be set up as root beforehand and would see every process of the
 * node that uses the shared bundle directory; and it reports no lookup
 * that failed. Why not ptrace: it stops the command at every call, and
 * the command may want a debugger of its own.
 *
 * The set is incomplete (readset_keys says why; the cache then keys the
 * task by its whole bundle) when a call comes from another architecture
 * (a 32-bit program), when the caller's memory or directory cannot be
 * read (it made itself non-dumpable), or past CODESET_KEYS_MAX keys or
 * READSET_BYTES_MAX bytes of them. Not seen at all: files opened through
 * io_uring, and a tree reached through a symbolic link from outside it.
 * Each recorded call costs a round trip to the wrapper (microseconds):
 * a command that opens millions of files pays for it.
 *
 * Single-threaded: the wrapper's.
 */
#ifndef ANVIL_AGENT_READSET_H
#define ANVIL_AGENT_READSET_H

#include <jansson.h>
#include <stddef.h>

#define READSET_BYTES_MAX (768 * 1024) /* of all keys: the report's body is at most 1 MiB */

struct readset;

/* A recorder of the paths under root (resolved to its real path). NULL,
 * with errno, when root cannot be resolved. readset_free frees it. */
struct readset *readset_new(const char *root);
void readset_free(struct readset *rs);

/* In the child, after fork and before exec: installs the filter and sends
 * its listener over the socket sock (a SOCK_SEQPACKET or SOCK_STREAM Unix
 * socket), then closes sock. 0, or -errno when the kernel refuses (the
 * command then runs unrecorded, and the wrapper learns it from the
 * socket's end). */
int readset_install(int sock);
/* In the wrapper once the child is forked: the listener from sock (which
 * it closes), or why not, recorded as why the set is incomplete. 0 or
 * -errno. */
int readset_attach(struct readset *rs, int sock);
/* The listener, to poll for POLLIN; -1 when there is none. */
int readset_fd(const struct readset *rs);
/* Records and lets go on every call waiting on the listener. */
void readset_serve(struct readset *rs);
/* Closes the listener once the command has ended: a call of a process it
 * left behind fails (ENOSYS) instead of waiting for the wrapper. */
void readset_stop(struct readset *rs);
/* The keys recorded, sorted: a JSON array of codeset.h KEYs (the caller
 * decrefs); NULL when the set is incomplete, with why in why. */
json_t *readset_keys(const struct readset *rs, char *why, size_t len);

#endif
