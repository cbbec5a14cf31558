/* bundles.h - the code bundles unpacked on a node, and their removal once
 * unused.
 *
 * A workflow task's code bundle is unpacked once per node into
 * WORK_DIR/bundles/<hex>/ (the task wrapper, agent/task.h, under the lock
 * file WORK_DIR/bundles/<hex>.lock), and every task of that code runs in
 * it. A team that changes its code a hundred times a day leaves a hundred
 * trees there; without removal they fill the node's disk.
 *
 * A bundle's directory's modification time is when a task last started in
 * it: the wrapper (under the lock, after finding or unpacking it) and the
 * agent's direct start (agent/task.h, task_direct_cwd) touch it. The
 * agent's sweep removes a bundle when (1) it was not touched for keep_ms,
 * (2) no process on the node has its working directory in it (a task of
 * that code still running, however long ago it started), and (3) its lock
 * is free (no wrapper is unpacking or touching it). The tree is renamed
 * away under the lock, so a task starting afterwards finds no bundle and
 * unpacks it again, never a tree half removed; the removal itself then
 * runs without the lock. keep_ms is far longer than a task's start (at
 * least BUNDLES_KEEP_MIN_MS), so a task that touched its bundle is in it
 * before the bundle could be taken.
 *
 * Leftovers go too, under the same lock: the scratch tree of an unpack
 * that was killed (<hex>.partial), a tree a sweep renamed away but did not
 * finish removing (.gone-<hex>), and a lock file whose bundle is gone.
 *
 * Not thread-safe with itself: one sweep at a time per work dir. */
#ifndef ANVIL_AGENT_BUNDLES_H
#define ANVIL_AGENT_BUNDLES_H

#include <stdint.h>

#define BUNDLES_KEEP_DEFAULT_MS (72LL * 3600 * 1000) /* three days unused */
#define BUNDLES_KEEP_MIN_MS     (3600LL * 1000)
/* How often the agent sweeps: at start, then this often. */
#define BUNDLES_SWEEP_EVERY_MS (3600LL * 1000)

struct bundles_sweep {
	int removed;   /* bundles renamed away and removed */
	int in_use;    /* old enough, but some process works in it, or its lock is held */
	int kept;      /* used within keep_ms */
	int leftovers; /* .partial / .gone- trees and lock files without a bundle removed */
};

/* Opens and locks BUNDLES_DIR/<hex>.lock exclusively: the wrapper while
 * it finds, unpacks and touches a bundle, the direct start while it finds
 * and touches one, the sweep while it judges one. The lock is on the file
 * that is at that path once locked (the sweep unlinks a removed bundle's
 * lock file while it holds it: a waiter on the old file tries again).
 * Returns the descriptor (close it to unlock) or a negative errno;
 * -EWOULDBLOCK when nonblock is set and another holds it. */
int bundles_lock(const char *bundles_dir, const char *hex, int nonblock);

/* Marks the bundle directory dir used now (its modification time); 0 or a
 * negative errno (-ENOENT: there is no such bundle). */
int bundles_touch(const char *dir);

/* One sweep of WORK_DIR/bundles by the rules above, at wall-clock time
 * now_s (seconds since the epoch, as file times are). keep_ms 0: keep
 * every bundle (only leftovers go). proc_root is where processes' working
 * directories are read (/proc; a test passes its own tree of PID/cwd
 * links). remove: also remove the trees renamed away (else they are left
 * as .gone-<hex> for a later sweep or another thread). Fills out (may be
 * NULL); 0, or a negative errno when the bundles directory cannot be read
 * (-ENOENT, none yet, is 0).
 *
 * The locks are held in the calling thread: call it from the thread that
 * forks the node's processes (a child forked meanwhile in another thread
 * would inherit a lock, and hold it while it lives). */
int bundles_sweep(const char *work_dir, int64_t keep_ms, int64_t now_s, const char *proc_root,
                  int remove, struct bundles_sweep *out);

/* A task attempt's directory (WORK_DIR/tasks/<attempt id>: its inputs,
 * outputs before upload, checkpoint archives) goes with its wrapper; one
 * whose wrapper was killed (a rank stopped past its grace) stays. Such a
 * directory is stale once no rank of its attempt is in the agent's table
 * and it is older than BUNDLES_TASK_MIN_AGE_S. bundles_sweep_start renames
 * each one running(ctx, id) denies to WORK_DIR/tasks/.gone-<id>, and
 * removes it with the bundles. */
#define BUNDLES_TASK_MIN_AGE_S 600

/* The agent's sweep: bundles_sweep() with /proc at the time now, then the
 * stale task directories, logged when it removed anything, the trees then
 * removed in a detached thread (the main loop must not wait on large
 * trees); nothing while the last sweep's trees are still being removed.
 * From the agent's main thread. */
void bundles_sweep_start(const char *work_dir, int64_t keep_ms,
                         int (*running)(void *ctx, int64_t attempt_id), void *ctx);

#endif
