/* rsh.h - `anvil _rsh HOST CMD...`: mpirun's remote launcher in an MPI job
 * (docs/cli.md, "MPI"), in place of ssh.
 *
 * Rank 0 of an MPI job runs mpirun with `--mca plm_rsh_agent 'anvil _rsh'`
 * (agent/mpi.h), so mpirun starts its daemon for each host of the hostfile
 * by running `anvil _rsh HOST orted ...`. _rsh does what ssh would, through
 * `anvil exec` instead of a login: HOST is a line of $ANVIL_MPI_HOSTFILE,
 * whose index is the rank (mpi_host_rank); the words after it are joined
 * with spaces and run by /bin/sh -c inside that rank of $ANVIL_JOB_ID (a
 * remote shell reads them so, and mpirun quotes its arguments for one).
 * stdout and stderr come back apart, stdin is empty (mpirun gives its
 * launcher /dev/null), and _rsh exits with the command's status, or 255
 * when it could not run it, as ssh does.
 *
 * Credentials: $ANVIL_SERVER and $ANVIL_EXEC_TOKEN, which the agent and the
 * server give an MPI job's ranks; the token opens exec streams into the
 * ranks of that attempt and nothing else. The client file and ANVIL_TOKEN
 * are never read. A rank that does not run yet (the gang is starting) is
 * tried again for up to RSH_WAIT_MS.
 */
#ifndef ANVIL_CLI_RSH_H
#define ANVIL_CLI_RSH_H

#include <jansson.h>

#define RSH_WAIT_MS   120000
#define RSH_EXIT_FAIL 255 /* as ssh: _rsh itself failed */

/* The exec request (proto/wire.h wire_exec) that runs words[0..n-1] under
 * /bin/sh -c as mpi_remote_line() joins them, without a terminal or stdin;
 * NULL when n is 0. The caller decrefs it. */
json_t *rsh_request(char *const *words, int n, int loopback);

/* argv[0] is "_rsh". Returns the exit status. */
int rsh_main(int argc, char **argv);

#endif
