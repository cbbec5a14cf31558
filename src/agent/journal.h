/* journal.h - the agent's rank records: append-only JSON lines.
 *
 * One file per agent instead of one per rank (on ext4, creating an inode is
 * the costliest step of a rank's start). WORK_DIR/ranks-<seq>.jsonl are
 * the segments, oldest first; the highest seq is current. Each line is one
 * JSON object {"attempt_id":A,"rank":R,...}, written with one write()
 * through an O_APPEND fd, so lines never interleave and a crash leaves at
 * most a partial last line, which readers skip until its newline comes.
 * Later keys win; a line with "forgotten" drops the rank. Segments are
 * the agent's alone (0600, also when an older version made them looser).
 *
 * Writers: the agent (journal_append: a rank's start, a failure, a
 * snapshot, "forgotten") and the shims, which append their "shim"/"pgid"
 * and "wait_status" lines through the fd of the segment that was current
 * when their rank started (journal_fd) and keep it while the rank runs. So
 * a segment can only go (journal_drop) once no running rank writes to it,
 * and after the executor has copied the lines that still matter (a
 * snapshot per rank) into the current one. The current segment rolls to a
 * new one past JOURNAL_ROLL_BYTES.
 *
 * Owned by the executor's thread (exec_journal.c); not thread-safe.
 */
#ifndef ANVIL_AGENT_JOURNAL_H
#define ANVIL_AGENT_JOURNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_ROLL_BYTES (1 << 20)

struct journal;

/* Called for each complete line that is a JSON object, in file order;
 * seq is the line's segment. The line is borrowed. */
typedef void (*journal_fn)(void *ctx, uint64_t seq, json_t *line);

/* Opens the segments in dir (the current one created if none). */
int journal_open(const char *dir, struct journal **out);
void journal_free(struct journal *j);

/* The lines added since the last call (the first call: every line). */
void journal_read(struct journal *j, journal_fn fn, void *ctx);

/* Appends line (len bytes, no newline) to the current segment; rolls to a
 * new segment first when the current one is full. 0 or a negative errno. */
int journal_append(struct journal *j, const char *line, size_t len);

uint64_t journal_seq(const struct journal *j); /* the current segment */
int journal_fd(const struct journal *j);       /* its fd (> 2, O_APPEND, O_CLOEXEC) */

/* Up to max seqs of the segments before the current one, oldest first;
 * returns how many there are. */
size_t journal_old(const struct journal *j, uint64_t *seqs, size_t max);
/* Closes and removes an old segment. */
void journal_drop(struct journal *j, uint64_t seq);

/* For tests: roll past bytes instead of JOURNAL_ROLL_BYTES. */
void journal_set_roll(struct journal *j, int64_t bytes);

#endif
