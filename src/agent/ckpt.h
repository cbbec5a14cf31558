/* ckpt.h - a checkpointing job's checkpoints, off the node as they are
 * written (docs/operations.md, "Checkpoints leave the node").
 *
 * A job that checkpoints writes into ANVIL_CHECKPOINT_DIR. One checkpoint
 * is one entry of that directory, a file or a directory, and it is
 * COMPLETE once it is there under its final name: a name that does not
 * start with '.' and does not end in ".tmp" or ".partial" (ckpt_complete).
 * So a job writes each checkpoint under such a temporary name and renames
 * it into place; rename(2) makes it appear whole. The agent uploads every
 * complete checkpoint of rank 0 while the job runs (agent/ckptsync.h).
 *
 * Uploaded, a checkpoint is its files, each stored by its content
 * (objects_put: a file the store has already is not sent again, so a
 * checkpoint whose files mostly did not change costs only its new ones),
 * and a manifest stored under the named key ckpt/JOB/NAME:
 *
 *   {"name": NAME, "kind": "dir"|"file", "dirs": [PATH...],
 *    "files": [{"path": PATH, "key": "sha256/...", "size": N, "mode": M}]}
 *
 * PATH is relative to the checkpoint ("" for a checkpoint that is one
 * file). Symbolic links and special files are not part of a checkpoint
 * (left out, and said so in the log).
 *
 * A later attempt, on any node, starts with the newest uploaded checkpoint
 * restored: its ranks' command runs under `anvil _restore --key KEY -- CMD`,
 * which downloads the manifest and its files into ANVIL_CHECKPOINT_DIR
 * (into a hidden directory first, renamed into place once whole), unless a
 * checkpoint of that name is there already (the same node), then execs
 * CMD. Blocking calls; one thread per struct objects. */
#ifndef ANVIL_AGENT_CKPT_H
#define ANVIL_AGENT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "base/objects.h"

#define CKPT_NAME_MAX  128    /* bytes of a checkpoint's name */
#define CKPT_FILES_MAX 100000 /* files in one checkpoint */
#define CKPT_DEPTH_MAX 32     /* directories within directories */

/* Whether name is a complete checkpoint's (above) that may be uploaded:
 * also only letters, digits and "._-+=@", at most CKPT_NAME_MAX bytes. */
int ckpt_complete(const char *name);

/* ckpt/JOB/NAME, the manifest's key, into out. */
void ckpt_key(int64_t job_id, const char *name, char *out, size_t n);

struct ckpt_upload {
	int64_t bytes;      /* of its files */
	int64_t sent_bytes; /* of those the store did not have: sent now */
	int files;
};

/* Uploads the checkpoint dir/name (ckpt_complete) as job job_id's: 0 with
 * *out; else a negative code with why in err. */
int ckpt_upload(struct objects *o, const char *dir, const char *name, int64_t job_id,
                struct ckpt_upload *out, char *err, size_t errlen);

/* Restores the checkpoint whose manifest is key into dir/NAME: 0 (also
 * when dir/NAME is there already, *restored then 0), else a negative code
 * with why in err. */
int ckpt_restore(struct objects *o, const char *key, const char *dir, int *restored, char *err,
                 size_t errlen);

/* `anvil _restore --key KEY -- CMD...` (argv[0] is "_restore"): restores
 * into $ANVIL_CHECKPOINT_DIR with $ANVIL_SERVER, $ANVIL_EXEC_TOKEN and
 * $ANVIL_ATTEMPT_ID, then execs CMD; exits 1 with the reason on stderr
 * when the restore fails (the job must not start over unknowingly). */
int ckpt_restore_main(int argc, char **argv);

#endif
