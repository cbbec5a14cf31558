/* respawn.h - when `anvil up` starts a daemon that died again, and when it
 * gives up on it.
 *
 * `anvil up` (cli/up.c) keeps one struct respawn per daemon it runs (the
 * server, each agent) and asks it, each time that daemon dies without having
 * been told to, how long to wait before starting it again. A daemon that
 * keeps dying at once (a port taken, a state file it cannot read) is given
 * up on after RESPAWN_QUICK_LIMIT quick failures in a row; up then stops the
 * cluster. Restarting is safe because nothing running depends on a daemon
 * being up: ranks live under shims that outlive their agent, a restarted
 * agent re-adopts them, and agents re-sync with a restarted server.
 *
 *            respawn_started()               daemon dies: respawn_exited()
 *   waiting -------------------> running ------------------------------+
 *      ^                                                               |
 *      +----------- RESPAWN_AGAIN: after the delay it returned --------+
 *                   RESPAWN_GIVE_UP: the limit of quick failures reached
 *
 * The delay: RESPAWN_FIRST_MS after a daemon's first failure, doubled after
 * each further one, at most RESPAWN_MAX_MS; a daemon that ran for
 * RESPAWN_STEADY_MS or longer before it died starts over at the first step.
 * A quick failure is a death within RESPAWN_QUICK_MS of the start; any
 * longer run ends the row.
 *
 * Pure: times in, decisions out (the caller forks, waits and sleeps). The
 * caller owns the struct (zeroed is a fresh one); one thread.
 */
#ifndef ANVIL_RESPAWN_H
#define ANVIL_RESPAWN_H

#include <stddef.h>
#include <stdint.h>

#define RESPAWN_FIRST_MS    500
#define RESPAWN_MAX_MS      30000
#define RESPAWN_QUICK_MS    10000
#define RESPAWN_STEADY_MS   60000
#define RESPAWN_QUICK_LIMIT 5

enum respawn_verdict { RESPAWN_AGAIN, RESPAWN_GIVE_UP };

struct respawn {
	int64_t started_ms; /* the daemon's last start */
	int64_t delay_ms;   /* the last wait chosen; 0 before the first failure */
	int quick;          /* quick failures in a row */
};

/* The daemon was started (again) at now_ms. */
void respawn_started(struct respawn *r, int64_t now_ms);

/* The daemon died at now_ms. RESPAWN_AGAIN with *delay_ms set to how long
 * to wait before starting it again, or RESPAWN_GIVE_UP (*delay_ms
 * untouched). */
enum respawn_verdict respawn_exited(struct respawn *r, int64_t now_ms, int64_t *delay_ms);

/* 1 when the last delay is the longest one (RESPAWN_MAX_MS). */
int respawn_capped(const struct respawn *r);

/* A waitpid() status in words: "exited with status 1", "was killed by
 * signal 9 (Killed)". */
void respawn_status_text(int wait_status, char *out, size_t n);

#endif
