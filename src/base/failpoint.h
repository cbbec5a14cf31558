/* failpoint.h - named points where a test makes a process fail on purpose.
 *
 * A test arms points through the environment of the process it starts:
 *
 *   ANVIL_FAILPOINT="NAME[@N][,NAME[@N]...]"
 *
 * and the code asks at each point whether this pass is the one to fail:
 * failpoint_hit(NAME) is 1 on the Nth pass through NAME (the first when N
 * is not given) and 0 on every other, so a test picks exactly which write,
 * commit or answer goes wrong, without timing. failpoint_crash(NAME) ends
 * the process there, as kill -9 would (_exit: no atexit handlers, no
 * flushing of stdio, no orderly shutdown), with status FAILPOINT_EXIT.
 *
 * Unarmed (the variable unset, as in production), a point costs one load.
 * The variable is read once, at the first point reached; a malformed one
 * arms nothing and is said once on stderr. Thread-safe: counts are atomic.
 *
 * The points, where they are (grep failpoint_ for the rest):
 *   create.flushed  server: a create with an Idempotency-Key was written
 *                   (state_flush), before its answer is sent (api_util.c)
 *   jobs.admitted   server: new jobs were committed (jobs_admit), before
 *                   their first cycle and the handler's flush (jobs.c)
 */
#ifndef ANVIL_FAILPOINT_H
#define ANVIL_FAILPOINT_H

#define FAILPOINT_ENV  "ANVIL_FAILPOINT"
#define FAILPOINT_EXIT 86 /* the status failpoint_crash exits with */

/* 1 when this pass through name is the armed one, else 0. */
int failpoint_hit(const char *name);
/* _exit(FAILPOINT_EXIT) when failpoint_hit(name), saying so on stderr. */
void failpoint_crash(const char *name);

#endif
