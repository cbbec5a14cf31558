/* checkpoint.h - the database's WAL checkpoints, off the writer's path.
 *
 * In WAL mode a commit appends pages to the log, and a checkpoint copies
 * them back into the database file, with an fsync of each: 10-20 ms on a
 * virtual disk. SQLite's own automatic checkpoint runs inside the commit
 * that crossed its threshold, so every thousand pages one request of the
 * server (which commits with its state lock held) stalled the whole
 * cluster for that long: every agent waiting for its answer.
 *
 * The checkpointer moves that work to a thread of its own with its own
 * connection: the writer's commit hook (sqlite3_wal_hook) wakes it each
 * time the log has grown by CHECKPOINT_PAGES pages, and it runs a PASSIVE
 * checkpoint, which copies what no reader still needs and never blocks a
 * writer (nor does a writer ever wait for it). When the log is fully
 * copied, the next commit starts it again from the beginning; under
 * steady commits that moment is rare (each checkpoint ends a few commits
 * behind), so the log grows, a checkpoint per CHECKPOINT_PAGES of it,
 * until commits pause. Past CHECKPOINT_INLINE_PAGES the commit that sees
 * it checkpoints itself, as SQLite would. Durability is unchanged: the commit's own sync (none
 * with synchronous=NORMAL, the log's with FULL) is what makes a write
 * durable; the checkpoint moves committed pages only.
 */
#ifndef ANVIL_STORE_CHECKPOINT_H
#define ANVIL_STORE_CHECKPOINT_H

#include <sqlite3.h>

#define CHECKPOINT_PAGES        1000  /* SQLite's default threshold */
#define CHECKPOINT_INLINE_PAGES 20000 /* ~80 MB of log: the writer does it */

struct checkpointer;

/* Takes over db's (the writer's connection to path) checkpoints. 0, or
 * -EIO with db keeping SQLite's own (the checkpointer's connection or
 * thread could not start). */
int checkpointer_start(sqlite3 *db, const char *path, struct checkpointer **out);
/* Stops the thread and closes its connection; db checkpoints itself again
 * (its close checkpoints what is left). NULL is a no-op. */
void checkpointer_stop(struct checkpointer *c);
/* Checkpoints run by the thread so far. */
unsigned long checkpointer_runs(struct checkpointer *c);

#endif
