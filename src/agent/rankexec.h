/* rankexec.h - the exec helper: `anvil _exec --fd S --proc P --pid N`, a command run
 * inside a running rank (anvil exec; docs/api.md, "Streams").
 *
 * The agent's exec endpoint (agent/streams.h) spawns it with the rank's
 * environment and working directory (agent/exec.h, exec_context), in a
 * session of its own, with fd S one end of a socketpair whose other end the
 * agent splices to the client, and fd P the rank's command's /proc/N
 * directory, opened by the agent while the rank ran (so a reused pid can
 * never be mistaken for it; the helper's pidfd of N is checked against it).
 * The helper:
 *
 *   1. joins every cgroup the rank's command is in (cgroup_join_like): the
 *      rank's pids cgroup, so what it runs is killed with the rank and
 *      cannot outlive it (the executor signals the whole cgroup when a
 *      rank stops or ends), and its limits' cgroups, so it counts against
 *      them. A join that fails ends the exec with an ERROR frame;
 *   2. reads the exec request, the first frame (proto/wire.h wire_exec);
 *   3. runs its command: in a new terminal (tty; forkpty, the client's
 *      size, its TERM), or with pipes, stdout and stderr apart, stdin from
 *      the client (stdin) or /dev/null; either way in a process group of
 *      its own (a terminal's session);
 *   4. relays frames (proto/stream.h) until the command exits, then what
 *      is left of its output (until EOF, or 200 ms of quiet: a background
 *      job may hold the pipes), then EXIT with its status (128+N for
 *      signal N), and exits 0. Output is read only as fast as the client
 *      takes it;
 *   5. when the client goes away first, hangs the command up (SIGHUP to its
 *      process group, as a closed terminal would) and exits. Whatever is
 *      left running stays in the rank's cgroup and ends with the rank;
 *   6. when the rank's command ends first (the rank is over), kills the
 *      command's process group: on a node without cgroups, that is what
 *      keeps an exec from outliving its rank (what the command left in the
 *      background after the exec ended is then not stopped, as a rank's
 *      own processes that leave its process group are not).
 *
 * Single-threaded, one poll() loop.
 */
#ifndef ANVIL_AGENT_RANKEXEC_H
#define ANVIL_AGENT_RANKEXEC_H

#define RANKEXEC_OUT_MAX (1 << 20) /* output queued for the client before reading stops */

/* argv[0] is "_exec". Returns the process's exit status. */
int rankexec_main(int argc, char **argv);

#endif
