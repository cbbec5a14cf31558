/* holder.h - the session holder: `anvil _session -- CMD...`, the command of
 * an interactive session's rank (anvil shell; agent/exec.h, "Sessions").
 *
 * The executor starts it in place of CMD, so it is the rank's process: its
 * cgroup, GPUs, environment, working directory, shim, time limit and stop
 * are the rank's, and it outlives an agent restart as any rank does. It:
 *
 *   - runs CMD in a new terminal (forkpty; 24x80 until a client says
 *     otherwise), falling back to /bin/bash, then /bin/sh, with a note,
 *     when CMD is one word that the node does not have (the client's
 *     $SHELL may not exist there);
 *   - listens on the Unix socket $ANVIL_SESSION_SOCKET (mode 0600, in a
 *     directory only the agent's user opens); each connection is a client
 *     speaking frames (proto/stream.h): STDIN goes to the terminal, RESIZE
 *     sets its size (the last one wins; the kernel sends SIGWINCH),
 *     STDIN_EOF types the terminal's EOF character; NOTICE (from the
 *     agent, on a connection of its own: agent/streams.h) goes to every
 *     other client as NOTICE and into the log and scrollback as a line
 *     "anvil: TEXT", and then that connection is closed; anything else,
 *     or a bad frame, drops that client only;
 *   - reads the terminal all the time (with or without clients): every
 *     byte goes to its stdout (the rank's log holds the session), into a
 *     scrollback of HOLDER_SCROLLBACK bytes that a new client gets first
 *     (so it sees where the session was), and to every client as STDOUT;
 *     a client that falls HOLDER_CLIENT_BACKLOG behind is dropped;
 *   - when CMD exits: reads what is left on the terminal (until it is
 *     closed, or 200 ms pass without output: a background job may hold it
 *     open), sends EXIT with CMD's status to every client, removes the
 *     socket and exits with that status (128+N for signal N);
 *   - on SIGTERM, SIGINT or SIGHUP (the rank is being stopped): hangs up
 *     CMD's session (SIGHUP, as a closed terminal would) and goes on until
 *     CMD has exited; the executor's SIGKILL after the grace ends it all.
 *
 * Single-threaded, one poll() loop; nothing in it blocks but the writes to
 * its own stdout (a file).
 */
#ifndef ANVIL_AGENT_HOLDER_H
#define ANVIL_AGENT_HOLDER_H

#define HOLDER_SCROLLBACK     (64 * 1024)
#define HOLDER_CLIENTS_MAX    16
#define HOLDER_CLIENT_BACKLOG (1 << 20) /* bytes queued for one client */

/* argv[0] is "_session"; CMD follows "--". Returns the exit status. */
int holder_main(int argc, char **argv);

#endif
