/* lease.h - a node's lease on its ranks: how long they may run without
 * their agent reaching the server (self-fencing, docs/operations.md).
 *
 * The agent renews the lease after every sync the server answered: the
 * lease runs until the moment that request was SENT plus the server's
 * lease_ms (the sync answer's field), so it never outlasts the server's
 * own view of the node (the server counts its node timeout from when the
 * request ARRIVED, or later). The lease lives in one small file,
 * WORK_DIR/lease, rewritten in place (never replaced: every rank's shim
 * holds an fd of it, inherited or passed with its launch, and a restarted
 * agent opens the same inode). Each rank's shim reads it while its command
 * runs (agent/shim.c): grace_ms before the lease ends it sends the rank
 * SIGTERM, at its end SIGKILL, whether the agent is alive, stopped or
 * dead. So a rank on a node cut off from the server has surely stopped by
 * the time the server, a lease after its last contact, starts a
 * replacement elsewhere.
 *
 * The record is ASCII, fixed width: "END LEN END\n", END the lease's end
 * in CLOCK_BOOTTIME milliseconds (0: no lease; ranks run unfenced), LEN
 * its length. It is written by one pwrite and read by one pread; END twice
 * lets a reader that raced a write see the mismatch and read again.
 *
 * lease_open, lease_renew: the agent's thread that owns the executor.
 * lease_read, lease_now_ms: async-signal-safe, for the shims. */
#ifndef ANVIL_AGENT_LEASE_H
#define ANVIL_AGENT_LEASE_H

#include <stdint.h>

#define LEASE_RECORD_LEN 63 /* 20 + 1 + 20 + 1 + 20 + "\n" */

/* WORK_DIR/lease, opened read-write (created 0600, O_CLOEXEC): an fd, or
 * a negative errno. A new file holds no lease. */
int lease_open(const char *work_dir);
/* Writes a lease that ends at end_ms (CLOCK_BOOTTIME) and lasts len_ms;
 * end_ms 0: none. 0, or a negative errno. */
int lease_renew(int fd, int64_t end_ms, int64_t len_ms);
/* The lease in fd: 1 with *end_ms and *len_ms set; 0 when fd holds none
 * (empty, a zero end, or not a record); -1 while a write races the read
 * (read again). Async-signal-safe. */
int lease_read(int fd, int64_t *end_ms, int64_t *len_ms);
/* CLOCK_BOOTTIME in milliseconds (counts suspend, never steps back).
 * Async-signal-safe. */
int64_t lease_now_ms(void);

#endif
