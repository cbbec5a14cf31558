/* respawn.c - the restart policy of `anvil up` (cli/respawn.h). */
#include "cli/respawn.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

void respawn_started(struct respawn *r, int64_t now_ms)
{
	r->started_ms = now_ms;
}

enum respawn_verdict respawn_exited(struct respawn *r, int64_t now_ms, int64_t *delay_ms)
{
	int64_t ran = now_ms - r->started_ms;
	if (ran >= RESPAWN_STEADY_MS) {
		r->delay_ms = RESPAWN_FIRST_MS;
		r->quick = 0;
	} else {
		r->delay_ms = r->delay_ms == 0                    ? RESPAWN_FIRST_MS
		              : r->delay_ms >= RESPAWN_MAX_MS / 2 ? RESPAWN_MAX_MS
		                                                  : 2 * r->delay_ms;
		r->quick = ran < RESPAWN_QUICK_MS ? r->quick + 1 : 0;
	}
	if (r->quick >= RESPAWN_QUICK_LIMIT)
		return RESPAWN_GIVE_UP;
	*delay_ms = r->delay_ms;
	return RESPAWN_AGAIN;
}

int respawn_capped(const struct respawn *r)
{
	return r->delay_ms >= RESPAWN_MAX_MS;
}

void respawn_status_text(int wait_status, char *out, size_t n)
{
	if (WIFEXITED(wait_status))
		snprintf(out, n, "exited with status %d", WEXITSTATUS(wait_status));
	else if (WIFSIGNALED(wait_status))
		snprintf(out, n, "was killed by signal %d (%s)", WTERMSIG(wait_status),
		         strsignal(WTERMSIG(wait_status)));
	else
		snprintf(out, n, "ended (wait status 0x%x)", (unsigned)wait_status);
}
