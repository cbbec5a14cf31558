/* streams.h - the agent's side of interactive streams: POST /v1/attach and
 * POST /v1/exec (agent/serve.h; docs/api.md, "Streams").
 *
 * serve.c checks the node secret and finds the running rank; these answer
 * the request. Both prepare the far side first, so a failure is an HTTP
 * error, and only then upgrade (httpd_upgrade); a thread of its own per
 * stream then splices the server's connection to the far side
 * (base/relay.h) without reading the frames:
 *
 *   attach  the session holder's Unix socket (agent/holder.h), connected
 *           to (retried for up to STREAMS_CONNECT_MS while a just-started
 *           holder binds it);
 *   exec    one end of a socketpair whose other end is the exec helper
 *           (agent/rankexec.h), spawned now with the rank's environment
 *           and working directory, in a session of its own, and handed the
 *           rank's /proc/PID; it is reaped when the stream ends.
 *
 * A notice (a session's time limit or idle timeout is near; server/ranks.c)
 * goes to the holder the same way, as a client that sends one NOTICE frame
 * and waits for the holder to close (agent/holder.h), on a short-lived
 * thread of its own, so the agent's main loop never waits for a holder.
 *
 * Called on the HTTP server's threads, and streams_notice on the agent's
 * main thread; nothing here keeps state.
 */
#ifndef ANVIL_AGENT_STREAMS_H
#define ANVIL_AGENT_STREAMS_H

#include "agent/serve.h"
#include "base/httpd.h"

#define STREAMS_CONNECT_MS 3000
#define STREAMS_RETRY_MS   2    /* between tries to connect to a holder not listening yet */
#define STREAMS_NOTICE_MS  3000 /* for the holder to take a notice */

/* Answers req: 101 spliced to the holder at socket_path, or an error. */
void streams_attach(struct httpd_req *req, const char *socket_path);
/* Answers req: 101 spliced to a new exec helper in rank r (self: the anvil
 * binary), or an error. */
void streams_exec(struct httpd_req *req, const char *self, const struct serve_rank *r);
/* Shows text on the terminal of the session whose holder listens at
 * socket_path (and in its log), from a thread of its own; returns at once.
 * A failure is logged. */
void streams_notice(const char *socket_path, const char *text);

#endif
