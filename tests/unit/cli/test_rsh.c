/* cli/rsh.h: `anvil _rsh HOST CMD...`, mpirun's launcher in an MPI job: the
 * exec request it sends, and that it refuses (exit 255, as ssh) to run
 * outside an MPI job's rank or for a host that is not in the hostfile,
 * before it connects anywhere. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "base/jv.h"
#include "base/mem.h"
#include "cli/rsh.h"
#include "proto/wire.h"

TEST(the_request_runs_the_words_under_sh_without_stdin)
{
	char *words[] = {"orted", "-mca", "ess", "\"env\"", NULL};
	json_t *req = rsh_request(words, 4, 0);
	char err[256];
	CHECK_INT(wire_check(req, &wire_exec, err, sizeof(err)), 0);
	const json_t *cmd = json_object_get(req, "command");
	CHECK_INT((int)json_array_size(cmd), 3);
	CHECK_STR(json_string_value(json_array_get(cmd, 0)), "/bin/sh");
	CHECK_STR(json_string_value(json_array_get(cmd, 1)), "-c");
	CHECK_STR(json_string_value(json_array_get(cmd, 2)), "orted -mca ess \"env\"");
	CHECK(!jv_bool(req, "tty", 1));
	CHECK(!jv_bool(req, "stdin", 1));
	json_decref(req);
	req = rsh_request(words, 1, 1); /* one machine: a session directory per node */
	CHECK_CONTAINS(json_string_value(json_array_get(json_object_get(req, "command"), 2)),
	               "export OMPI_MCA_orte_tmpdir_base; orted");
	json_decref(req);
	CHECK(rsh_request(words, 0, 0) == NULL);
}

/* Runs rsh_main(args) in a child with env (NAME=VALUE strings, NULL-ended)
 * as its only ANVIL_ variables; its exit status, its stderr in err. */
static int rsh(char **args, char **env, char *err, size_t errlen)
{
	int p[2];
	CHECK_INT(pipe(p), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		dup2(p[1], 2);
		static const char *const vars[] = {"ANVIL_SERVER", "ANVIL_EXEC_TOKEN",
		                                   "ANVIL_JOB_ID", "ANVIL_MPI_HOSTFILE",
		                                   "ANVIL_TOKEN"};
		for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
			unsetenv(vars[i]);
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		int argc = 0;
		while (args[argc])
			argc++;
		_exit(rsh_main(argc, args));
	}
	close(p[1]);
	size_t have = 0;
	ssize_t n;
	while ((n = read(p[0], err + have, errlen - 1 - have)) > 0)
		have += (size_t)n;
	err[have] = '\0';
	close(p[0]);
	int ws = 0;
	CHECK_INT(waitpid(pid, &ws, 0), pid);
	CHECK(WIFEXITED(ws));
	return WEXITSTATUS(ws);
}

TEST(outside_an_mpi_jobs_rank_it_refuses)
{
	char err[1024];
	char *args[] = {"_rsh", "node-2", "orted", NULL};
	CHECK_INT(rsh(args, NULL, err, sizeof(err)), RSH_EXIT_FAIL);
	CHECK_CONTAINS(err, "$ANVIL_SERVER is not set");
	char *env[] = {"ANVIL_SERVER=http://127.0.0.1:1", NULL};
	CHECK_INT(rsh(args, env, err, sizeof(err)), RSH_EXIT_FAIL);
	CHECK_CONTAINS(err, "$ANVIL_EXEC_TOKEN is not set");
	char *nohost[] = {"_rsh", "node-2", NULL};
	CHECK_INT(rsh(nohost, NULL, err, sizeof(err)), RSH_EXIT_FAIL);
	CHECK_CONTAINS(err, "usage: anvil _rsh HOST CMD...");
}

TEST(a_host_that_is_not_in_the_hostfile_is_refused)
{
	char path[] = "/tmp/anvil-test-rsh-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, "node-1 slots=1\nnode-2 slots=1\n", 30) == 30);
	close(fd);
	char *hostfile = xasprintf("ANVIL_MPI_HOSTFILE=%s", path);
	char *env[] = {"ANVIL_SERVER=http://127.0.0.1:1", "ANVIL_EXEC_TOKEN=t", "ANVIL_JOB_ID=7",
	               hostfile, NULL};
	char err[1024];
	char *args[] = {"_rsh", "node-3", "orted", NULL};
	CHECK_INT(rsh(args, env, err, sizeof(err)), RSH_EXIT_FAIL);
	CHECK_CONTAINS(err, "no host node-3 in the hostfile");
	char *bad_job[] = {"ANVIL_SERVER=http://127.0.0.1:1", "ANVIL_EXEC_TOKEN=t",
	                   "ANVIL_JOB_ID=seven", hostfile, NULL};
	CHECK_INT(rsh(args, bad_job, err, sizeof(err)), RSH_EXIT_FAIL);
	CHECK_CONTAINS(err, "is not a job id");
	unlink(path);
	free(hostfile);
}

/* A known host, but no server there: it says so and exits 255. */
TEST(a_server_that_cannot_be_reached_is_a_failure_of_rsh)
{
	char path[] = "/tmp/anvil-test-rsh-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, "node-1 slots=1\n", 15) == 15);
	close(fd);
	char *hostfile = xasprintf("ANVIL_MPI_HOSTFILE=%s", path);
	char *env[] = {"ANVIL_SERVER=http://127.0.0.1:1", "ANVIL_EXEC_TOKEN=t", "ANVIL_JOB_ID=7",
	               hostfile, NULL};
	char err[1024];
	char *args[] = {"_rsh", "node-1", "true", NULL};
	CHECK_INT(rsh(args, env, err, sizeof(err)), RSH_EXIT_FAIL);
	CHECK_CONTAINS(err, "$ANVIL_SERVER");
	unlink(path);
	free(hostfile);
}

TEST_MAIN()
