/* main.c - anvil is one binary; the first argument picks the role.
 *
 *   anvil server ...   the control plane (src/server)
 *   anvil agent ...    a node agent (src/agent)
 *   anvil up ...       a whole local cluster: server + N agents (src/cli/up.c)
 *   anvil VERB ...     a client command over the server's API (src/cli)
 *
 * and two hidden roles the agent starts on a node:
 *
 *   anvil _session -- CMD       an interactive session's holder (agent/holder.h)
 *   anvil _exec --fd S --proc P a command run in a rank (agent/rankexec.h)
 *   anvil _launch ...             the launcher of each rank of a job with a head
 *                                 (agent/launch.h)
 *   anvil _mpirun ... -- CMD      rank 0 of an MPI job: the hostfile, then mpirun
 *   anvil _mpiwait                the other ranks of an MPI job (agent/mpi.h)
 *   anvil _task ... -- CMD        a workflow task's rank: bundle, inputs,
 *                                 checkpoint, outputs (agent/task.h)
 *   anvil _restore --key K -- CMD a checkpointing job's rank: its newest uploaded
 *                                 checkpoint restored, then CMD (agent/ckpt.h)
 *   anvil _stacks --out F ...     a hung rank's stacks, into its log (agent/hang.h)
 *   anvil _converge ...           one run of a fleet profile's steps, as the
 *                                 agent runs them (agent/converge.h)
 *
 * and one that mpirun starts on rank 0 of an MPI job:
 *
 *   anvil _rsh HOST CMD...        mpirun's remote launcher: exec into HOST's
 *                                 rank (cli/rsh.h)
 */
#include <stdio.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/ckpt.h"
#include "agent/converge.h"
#include "agent/hang.h"
#include "agent/holder.h"
#include "agent/launch.h"
#include "agent/mpi.h"
#include "agent/rankexec.h"
#include "agent/task.h"
#include "cli/cli.h"
#include "cli/rsh.h"
#include "server/server.h"

int main(int argc, char **argv)
{
	if (argc < 2)
		return cli_main(argc, argv);
	const char *role = argv[1];
	if (strcmp(role, "server") == 0)
		return server_main(argc - 1, argv + 1);
	if (strcmp(role, "agent") == 0)
		return agent_main(argc - 1, argv + 1);
	if (strcmp(role, "up") == 0)
		return up_main(argc - 1, argv + 1);
	if (strcmp(role, "_launch") == 0)
		return launch_main(argc - 1, argv + 1);
	if (strcmp(role, "_session") == 0)
		return holder_main(argc - 1, argv + 1);
	if (strcmp(role, "_exec") == 0)
		return rankexec_main(argc - 1, argv + 1);
	if (strcmp(role, "_mpirun") == 0)
		return mpi_run_main(argc - 1, argv + 1);
	if (strcmp(role, "_mpiwait") == 0)
		return mpi_wait_main(argc - 1, argv + 1);
	if (strcmp(role, "_task") == 0)
		return task_main(argc - 1, argv + 1);
	if (strcmp(role, "_restore") == 0)
		return ckpt_restore_main(argc - 1, argv + 1);
	if (strcmp(role, "_stacks") == 0)
		return hang_stacks_main(argc - 1, argv + 1);
	if (strcmp(role, "_converge") == 0)
		return converge_main(argc - 1, argv + 1);
	if (strcmp(role, "_rsh") == 0)
		return rsh_main(argc - 1, argv + 1);
	return cli_main(argc, argv);
}
