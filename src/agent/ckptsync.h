/* ckptsync.h - the agent's checkpoint uploader: one thread that sends
 * every complete checkpoint (agent/ckpt.h) of the checkpointing jobs whose
 * rank 0 this node runs to the object store while they run, so that a
 * node that dies loses at most the checkpoint in flight.
 *
 * Every CKPTSYNC_SCAN_MS the thread lists each watched rank's checkpoint
 * directory and uploads the newest complete checkpoint it has not sent
 * (one that a newer one superseded before its turn is skipped: it would
 * never be restored). Only checkpoints written while the attempt runs
 * count (not those a restore or an earlier attempt on this node left).
 *
 * Pacing: the thread runs at nice 19 in the idle I/O class (ioprio_set:
 * its reads wait while the job's own I/O is under way, on the schedulers
 * that honour it, BFQ and CFQ), one file at a time over one connection,
 * and a file the store has already (most of an incremental checkpoint) is
 * not read again beyond its hash.
 *
 * ckptsync_set and ckptsync_newest are called from the agent's thread;
 * both take the uploader's lock only for a copy, never across an upload. */
#ifndef ANVIL_AGENT_CKPTSYNC_H
#define ANVIL_AGENT_CKPTSYNC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define CKPTSYNC_SCAN_MS 1000

struct ckptsync;

/* A rank 0 of a checkpointing job this node runs. */
struct ckptsync_watch {
	int64_t attempt_id, job_id;
	const char *dir;      /* its ANVIL_CHECKPOINT_DIR */
	const char *token;    /* its attempt's exec token */
	const char *restored; /* the checkpoint its start restored (a key); NULL: none */
};

/* Starts the thread, which uploads through server's object API. NULL
 * when no thread could be made (logged: checkpoints then stay here). */
struct ckptsync *ckptsync_start(const char *server);
/* Stops the thread (after the upload under way, if any) and frees c. */
void ckptsync_stop(struct ckptsync *c);
/* The ranks to watch from now on (copied; those not listed are dropped). */
void ckptsync_set(struct ckptsync *c, const struct ckptsync_watch *w, size_t n);
/* The newest checkpoint uploaded for the attempt, as its rank 0's report
 * carries it ({"name", "key", "bytes", "sent_bytes", "files", "time_ms"},
 * a new reference), or NULL. */
json_t *ckptsync_newest(struct ckptsync *c, int64_t attempt_id);

#endif
