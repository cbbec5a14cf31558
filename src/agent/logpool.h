/* logpool.h - rank log files made ahead of time.
 *
 * Every rank gets a new log file (exec.h), and making a file is the one
 * step of a rank's start whose cost the agent does not control: the
 * filesystem allocates an inode, and on some (ext4 without a journal, as
 * on the build machines here) that scans past every inode deleted in the
 * last minutes, 0.5-1 ms per file on a busy disk. The pool's own thread
 * keeps LOGPOOL_TARGET empty files open in WORK_DIR/spare-logs/, so a
 * start renames two into place (its stdout and stderr logs; no inode
 * allocation) instead, while the next ones are made on another core.
 *
 * logpool_take() renames with RENAME_NOREPLACE, so an existing log still
 * means "this rank ran here" (exec.h: ranks never run twice). Files left
 * by an earlier agent are reused, never deleted (deleting is what makes
 * creating slow). Thread-safe: the owner's thread calls take; the pool's
 * thread only fills.
 */
#ifndef ANVIL_AGENT_LOGPOOL_H
#define ANVIL_AGENT_LOGPOOL_H

#define LOGPOOL_TARGET 64 /* 32 starts' worth */

struct logpool;

/* Starts the pool over dir (created if needed). 0 or a negative errno. */
int logpool_start(const char *dir, struct logpool **out);
/* Stops the thread and closes the files it holds (they stay for reuse). */
void logpool_stop(struct logpool *p);

/* Moves a ready file to path and returns its fd (O_WRONLY|O_APPEND,
 * close-on-exec, >= 3); -EEXIST when path exists (nothing moved);
 * -EAGAIN when the pool is empty (the caller makes the file itself). */
int logpool_take(struct logpool *p, const char *path);

/* Files taken from the pool so far, and starts that found it empty. */
unsigned long long logpool_taken(const struct logpool *p);
unsigned long long logpool_missed(const struct logpool *p);

#endif
