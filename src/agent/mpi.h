/* mpi.h - MPI jobs on the node (`anvil run --mpi`, docs/cli.md "MPI"):
 * what each rank runs, the hostfile, and the mpirun line.
 *
 * An MPI job's desired entries say "mpi" (and rank 0's "mpi_hosts": every
 * rank's node name, in rank order). The agent runs, instead of the job's
 * command (mpi_argv):
 *
 *   rank 0:  `anvil _mpirun --slots S --host NODE... -- CMD...`, which
 *            writes the hostfile (one line per rank, S slots each) to
 *            $ANVIL_OUTPUT_DIR/mpi-hostfile, exports ANVIL_MPI_HOSTFILE,
 *            prints the mpirun line on stderr and execs mpirun: the rank's
 *            process is mpirun, and its status is the rank's;
 *   rank N:  `anvil _mpiwait`, a placeholder that waits to be stopped. The
 *            rank exists for its node, cgroup, GPUs and environment: mpirun
 *            starts its daemon (orted) there through `anvil _rsh` (cli/rsh.h),
 *            which execs into the rank, so the daemon and the MPI processes
 *            it starts run as the rank's own processes would.
 *
 * The server ends the gang when rank 0 ends (server/ranks.c, as for a job
 * with a head): the job's status is mpirun's.
 *
 * Host names. A hostfile line names a rank's node by its node name when
 * Open MPI can read it as a host name (letters, digits, '-', '_', '.'),
 * else as "anvil-rank-R"; names are unique. `anvil _rsh HOST` maps HOST
 * back to a rank by its line (mpi_host_rank), so the names need not
 * resolve: no SSH, no DNS. On a machine whose host name is rank 0's node
 * name, mpirun starts rank 0's processes itself; elsewhere through _rsh
 * into rank 0: both run in rank 0.
 *
 * Everything but the two *_main functions is pure, for tests.
 */
#ifndef ANVIL_AGENT_MPI_H
#define ANVIL_AGENT_MPI_H

#include <stddef.h>

#define MPI_HOSTFILE_NAME "mpi-hostfile" /* in the rank's output directory */
#define MPI_HOSTFILE_ENV  "ANVIL_MPI_HOSTFILE"
#define MPI_MAX_HOSTS     1024
#define MPI_HOST_MAX      64 /* bytes of a hostfile name, with its NUL */

/* The name rank's node goes by in the hostfile: node when Open MPI reads it
 * as a host name, else "anvil-rank-RANK". */
void mpi_host_name(const char *node, int rank, char *out, size_t outlen);

/* The hostfile for n ranks on nodes[0..n-1] (rank order), slots each: "NAME
 * slots=S\n" per rank; a name that would repeat one before it is written as
 * "anvil-rank-R". malloc'd; free() it. */
char *mpi_hostfile(const char *const *nodes, int n, int slots);

/* The rank whose hostfile line names host: the line with that name, else
 * the one line whose name's first label (up to a '.') is host; -1 when
 * none, or when several lines match that way. Blank and '#' lines are not
 * ranks. */
int mpi_host_rank(const char *hostfile, const char *host);

struct desired_rank;

/* What mpirun is run with. */
struct mpi_run {
	const char *hostfile; /* its path */
	const char *self;     /* the anvil binary: `SELF _rsh` is the remote launcher */
	int as_root;          /* the rank runs as root: Open MPI wants it said */
	int loopback;         /* the gang is on one machine (MASTER_ADDR is loopback) */
	int binding_set;      /* the job set its own binding policy (OMPI_MCA_...) */
	int btl_set;          /* ... its own list of transports (btl) */
	int btl_if_set;       /* ... its own btl_tcp_if_include/exclude */
	int oob_if_set;       /* ... its own oob_tcp_if_include/exclude */
	char *const *command; /* the job's command, NULL-terminated */
};

/* mpirun's argv, NULL-terminated (free with mpi_argv_free):
 *
 *   mpirun --hostfile H
 *          --mca plm_rsh_agent 'SELF _rsh'   the remote launcher: exec, not ssh
 *          --mca plm_rsh_no_tree_spawn 1     every daemon started from rank 0,
 *                                            which holds the hostfile _rsh reads
 *          --mca orte_keep_fqdn_hostnames 1  host names as the hostfile has them
 *          [--allow-run-as-root]             the rank runs as root
 *          [--bind-to none]                  unless the job set a binding policy
 *          [--mca btl self,tcp --mca btl_tcp_if_include lo
 *           --mca oob_tcp_if_include lo]     a one-machine cluster (anvil up),
 *                                            each unless set (below)
 *          CMD...
 *
 * On one machine every "node" has the same host name, and Open MPI names
 * its processes' shared-memory segments (btl vader) after it: two nodes'
 * processes would take each other's and crash, so on one machine they
 * talk TCP over loopback, which Open MPI leaves out by default (its
 * daemons' session directories: mpi_remote_line). A job that sets the
 * OMPI_MCA_ variable of a default (--env) gets its own instead.
 */
char **mpi_mpirun_argv(const struct mpi_run *r);

/* Whether the gang is on one machine: its MASTER_ADDR (rank 0's node's
 * address, which every rank reaches) is a loopback address. */
int mpi_loopback(const char *master_addr);

/* What `anvil _rsh HOST WORDS...` runs in HOST's rank under /bin/sh -c: the
 * words joined by spaces, as a remote shell reads what ssh sends (mpirun
 * quotes its arguments for one). On one machine (loopback) each daemon
 * first gets a session directory of its own, in its rank's output
 * directory, unless the job chose one (OMPI_MCA_orte_tmpdir_base): Open MPI
 * names the one in /tmp after the host, and daemons of two nodes creating
 * it at once fail ("mkdir ... File exists"). malloc'd; free() it. */
char *mpi_remote_line(char *const *words, int n, int loopback);

/* The argv (NULL-terminated; mpi_argv_free) that runs the rank of desired
 * entry d (agent/desired.h, deepened) with the anvil binary self, or
 * NULL when d is not an MPI job's. */
char **mpi_argv(const struct desired_rank *d, const char *self);
void mpi_argv_free(char **argv);

/* `anvil _mpirun --slots S --host NODE... -- CMD...` (rank 0); returns an
 * exit status only when mpirun could not be started. */
int mpi_run_main(int argc, char **argv);
/* `anvil _mpiwait` (the other ranks): dies of the signal that stops it. */
int mpi_wait_main(int argc, char **argv);

#endif
