/* agent/mpi.h: the hostfile and how `anvil _rsh` reads a host back to a
 * rank, mpirun's command line, what each rank of an MPI job runs, and the
 * two processes: `anvil _mpirun` (run here against a stand-in mpirun that
 * records what it was given) and `anvil _mpiwait`. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "agent/mpi.h"
#include "base/jv.h"
#include "base/mem.h"
#include "desired_fixture.h"

/* ---- the hostfile ---- */

TEST(the_hostfile_has_a_line_per_rank_in_rank_order)
{
	const char *nodes[] = {"gpu-a100-3", "node-1", "h200.rack2.example.com"};
	char *text = mpi_hostfile(nodes, 3, 8);
	CHECK_STR(text, "gpu-a100-3 slots=8\nnode-1 slots=8\nh200.rack2.example.com slots=8\n");
	free(text);
}

/* A node name Open MPI would not read as one host name, or one that would
 * repeat, goes by the rank's own name; the fallback's form is reserved. */
TEST(a_name_open_mpi_cannot_take_goes_by_its_rank)
{
	const char *nodes[] = {"bad name", "-dash", "anvil-rank-7", "ok_1",
	                       "ok_1",     "x#y",   "trailing.",    "anvil-rank-x"};
	char *text = mpi_hostfile(nodes, 8, 1);
	CHECK_STR(text, "anvil-rank-0 slots=1\nanvil-rank-1 slots=1\nanvil-rank-2 slots=1\n"
	                "anvil-rank-3 slots=1\nanvil-rank-4 slots=1\nanvil-rank-5 slots=1\n"
	                "anvil-rank-6 slots=1\nanvil-rank-x slots=1\n");
	free(text);
	char name[MPI_HOST_MAX], long_name[80];
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	mpi_host_name(long_name, 12, name, sizeof(name));
	CHECK_STR(name, "anvil-rank-12");
	mpi_host_name("", 3, name, sizeof(name));
	CHECK_STR(name, "anvil-rank-3");
	mpi_host_name("Node-9", 3, name, sizeof(name));
	CHECK_STR(name, "Node-9");
}

TEST(a_host_maps_back_to_its_line)
{
	const char *nodes[] = {"node-1", "node-2", "gpu7.dc.example.com", "bad name"};
	char *text = mpi_hostfile(nodes, 4, 2);
	CHECK_INT(mpi_host_rank(text, "node-1"), 0);
	CHECK_INT(mpi_host_rank(text, "node-2"), 1);
	CHECK_INT(mpi_host_rank(text, "gpu7.dc.example.com"), 2);
	CHECK_INT(mpi_host_rank(text, "gpu7"), 2); /* as Open MPI shortens it */
	CHECK_INT(mpi_host_rank(text, "anvil-rank-3"), 3);
	CHECK_INT(mpi_host_rank(text, "node-3"), -1);
	CHECK_INT(mpi_host_rank(text, "node"), -1);
	CHECK_INT(mpi_host_rank(text, "slots=2"), -1);
	CHECK_INT(mpi_host_rank(text, ""), -1);
	CHECK_INT(mpi_host_rank(NULL, "node-1"), -1);
	free(text);
	/* Comments and blank lines are not ranks; two short matches are none. */
	const char *hand = "# the gang\n\n  a.x slots=1\n\tb slots=1\r\na.y slots=1\nc";
	CHECK_INT(mpi_host_rank(hand, "b"), 1);
	CHECK_INT(mpi_host_rank(hand, "a.y"), 2);
	CHECK_INT(mpi_host_rank(hand, "a"), -1);
	CHECK_INT(mpi_host_rank(hand, "c"), 3);
}

/* ---- mpirun's line ---- */

static int find(char **v, const char *word)
{
	for (int i = 0; v[i]; i++)
		if (strcmp(v[i], word) == 0)
			return i;
	return -1;
}

static int has_mca(char **v, const char *name, const char *value)
{
	for (int i = 0; v[i] && v[i + 1] && v[i + 2]; i++)
		if (strcmp(v[i], "--mca") == 0 && strcmp(v[i + 1], name) == 0)
			return strcmp(v[i + 2], value) == 0;
	return 0;
}

TEST(mpirun_gets_the_hostfile_anvil_as_its_launcher_and_the_command_last)
{
	char *cmd[] = {"python3", "train.py", "--lr", "3", NULL};
	struct mpi_run r = {.hostfile = "/w/output/7/mpi-hostfile",
	                    .self = "/usr/local/bin/anvil",
	                    .command = cmd};
	char **v = mpi_mpirun_argv(&r);
	CHECK_STR(v[0], "mpirun");
	CHECK_STR(v[find(v, "--hostfile") + 1], "/w/output/7/mpi-hostfile");
	CHECK(has_mca(v, "plm_rsh_agent", "/usr/local/bin/anvil _rsh"));
	CHECK(has_mca(v, "plm_rsh_no_tree_spawn", "1"));
	CHECK(has_mca(v, "orte_keep_fqdn_hostnames", "1"));
	CHECK_STR(v[find(v, "--bind-to") + 1], "none");
	CHECK_INT(find(v, "--allow-run-as-root"), -1);
	CHECK(!has_mca(v, "btl", "self,tcp")); /* several machines: Open MPI's choice */
	CHECK(!has_mca(v, "btl_tcp_if_include", "lo"));
	int c = find(v, "python3");
	CHECK(c > 0);
	CHECK_STR(v[c + 3], "3");
	CHECK(v[c + 4] == NULL);
	mpi_argv_free(v);
}

TEST(mpirun_on_one_machine_as_root_and_what_the_job_set_itself)
{
	char *cmd[] = {"a.out", NULL};
	struct mpi_run r = {.hostfile = "h",
	                    .self = "/opt/my tools/anvil",
	                    .as_root = 1,
	                    .loopback = 1,
	                    .command = cmd};
	char **v = mpi_mpirun_argv(&r);
	CHECK(find(v, "--allow-run-as-root") > 0);
	CHECK(has_mca(v, "btl", "self,tcp"));
	CHECK(has_mca(v, "btl_tcp_if_include", "lo"));
	CHECK(has_mca(v, "oob_tcp_if_include", "lo"));
	/* Open MPI splits the agent at blanks: such a path is found on PATH. */
	CHECK(has_mca(v, "plm_rsh_agent", "anvil _rsh"));
	mpi_argv_free(v);
	r.binding_set = r.btl_set = r.btl_if_set = r.oob_if_set = 1;
	v = mpi_mpirun_argv(&r);
	CHECK_INT(find(v, "--bind-to"), -1);
	CHECK_INT(find(v, "btl"), -1);
	CHECK_INT(find(v, "btl_tcp_if_include"), -1);
	CHECK_INT(find(v, "oob_tcp_if_include"), -1);
	mpi_argv_free(v);
}

TEST(the_remote_line_is_the_words_as_a_shell_reads_them)
{
	char *words[] = {"orted", "-mca", "orte_hnp_uri", "\"1.0;tcp://10.0.0.1:5000\"", NULL};
	char *line = mpi_remote_line(words, 4, 0);
	CHECK_STR(line, "orted -mca orte_hnp_uri \"1.0;tcp://10.0.0.1:5000\"");
	free(line);
	line = mpi_remote_line(words, 1, 1);
	CHECK_STR(line, ": \"${OMPI_MCA_orte_tmpdir_base:=$ANVIL_OUTPUT_DIR}\"; "
	                "export OMPI_MCA_orte_tmpdir_base; orted");
	free(line);
	CHECK(mpi_loopback("127.0.0.1"));
	CHECK(mpi_loopback("127.3.2.1"));
	CHECK(mpi_loopback("::1"));
	CHECK(!mpi_loopback("10.0.0.1"));
	CHECK(!mpi_loopback("1271.0.0.1"));
	CHECK(!mpi_loopback(NULL));
}

/* ---- what each rank runs ---- */

static json_t *parse(const char *text)
{
	json_t *o = NULL;
	char err[256];
	if (jv_parse_object(text, strlen(text), &o, err, sizeof(err)))
		FAIL_AT("bad fixture: %s", err);
	return o;
}

TEST(rank_zero_runs_mpirun_and_the_others_wait)
{
	json_t *d0 = parse("{\"attempt_id\": 4, \"rank\": 0, \"command\": [\"a.out\", \"-n\"],"
	                   " \"mpi\": true, \"mpi_hosts\": [\"node-1\", \"node-2\"],"
	                   " \"env\": {\"NPROC_PER_NODE\": \"8\"}}");
	char **v = mpi_argv(desired_fx(d0), "/bin/anvil");
	const char *want0[] = {"/bin/anvil", "_mpirun", "--slots", "8",     "--host", "node-1",
	                       "--host",     "node-2",  "--",      "a.out", "-n",     NULL};
	for (int i = 0; want0[i]; i++)
		CHECK_STR(v[i], want0[i]);
	CHECK(v[11] == NULL);
	mpi_argv_free(v);
	json_t *d1 = parse("{\"attempt_id\": 4, \"rank\": 1, \"command\": [\"a.out\"],"
	                   " \"mpi\": true}");
	v = mpi_argv(desired_fx(d1), "/bin/anvil");
	CHECK_STR(v[0], "/bin/anvil");
	CHECK_STR(v[1], "_mpiwait");
	CHECK(v[2] == NULL);
	mpi_argv_free(v);
	json_t *plain = parse("{\"attempt_id\": 4, \"rank\": 0, \"command\": [\"a.out\"]}");
	CHECK(mpi_argv(desired_fx(plain), "/bin/anvil") == NULL);
	json_decref(d0);
	json_decref(d1);
	json_decref(plain);
}

/* ---- the processes ---- */

static char *tmpdir(void)
{
	char tmpl[] = "/tmp/anvil-test-mpi-XXXXXX";
	CHECK(mkdtemp(tmpl) != NULL);
	return xstrdup(tmpl);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return xstrdup("");
	char *b = xcalloc(65536, 1);
	size_t n = fread(b, 1, 65535, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

/* _mpirun writes the hostfile into the rank's output directory, exports
 * its path, and execs the mpirun on PATH: here a script that writes down
 * its arguments and the variable, and exits 7 (the rank's status). */
TEST(mpirun_process_writes_the_hostfile_and_execs_mpirun)
{
	char *dir = tmpdir();
	char *fake = xasprintf("%s/mpirun", dir), *seen = xasprintf("%s/seen", dir);
	FILE *f = fopen(fake, "w");
	CHECK(f != NULL);
	fprintf(f,
	        "#!/bin/sh\n{ echo \"$ANVIL_MPI_HOSTFILE\"; for a in \"$@\"; do echo \"[$a]\"; "
	        "done; } > %s\nexit 7\n",
	        seen);
	fclose(f);
	CHECK_INT(chmod(fake, 0755), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char *path = xasprintf("%s:/usr/bin:/bin", dir);
		setenv("PATH", path, 1);
		setenv("ANVIL_OUTPUT_DIR", dir, 1);
		setenv("MASTER_ADDR", "10.1.2.3", 1);
		unsetenv("OMPI_MCA_hwloc_base_binding_policy");
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2); /* the mpirun line goes to the rank's stderr */
		char *args[] = {"_mpirun",  "--slots", "2",     "--host", "node-1", "--host",
		                "bad name", "--",      "a.out", "it's",   NULL};
		_exit(mpi_run_main(10, args));
	}
	int ws = 0;
	CHECK_INT(waitpid(pid, &ws, 0), pid);
	CHECK(WIFEXITED(ws));
	CHECK_INT(WEXITSTATUS(ws), 7);
	char *hostfile = xasprintf("%s/%s", dir, MPI_HOSTFILE_NAME);
	char *text = slurp(hostfile);
	CHECK_STR(text, "node-1 slots=2\nanvil-rank-1 slots=2\n");
	free(text);
	text = slurp(seen);
	char *want = xasprintf("%s\n[--hostfile]\n[%s]\n", hostfile, hostfile);
	CHECK(strncmp(text, want, strlen(want)) == 0);
	CHECK_CONTAINS(text, "[plm_rsh_agent]\n[");
	CHECK_CONTAINS(text, " _rsh]\n");
	CHECK_CONTAINS(text, "[none]\n[a.out]\n[it's]\n");
	free(want);
	free(text);
	char *cmd = xasprintf("rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
	free(cmd);
	free(hostfile);
	free(fake);
	free(seen);
	free(dir);
}

TEST(mpirun_process_refuses_what_the_agent_would_not_send)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		char *args[] = {"_mpirun", "--slots", "0", "--host", "n", "--", "a.out", NULL};
		_exit(mpi_run_main(7, args));
	}
	int ws = 0;
	CHECK_INT(waitpid(pid, &ws, 0), pid);
	CHECK(WIFEXITED(ws));
	CHECK_INT(WEXITSTATUS(ws), 2);
}

/* The placeholder dies of the stop, even when it was started with the stop
 * signals blocked and ignored. */
TEST(the_placeholder_waits_for_its_stop)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		sigset_t all;
		sigfillset(&all);
		sigprocmask(SIG_BLOCK, &all, NULL);
		signal(SIGTERM, SIG_IGN);
		char *args[] = {"_mpiwait", NULL};
		_exit(mpi_wait_main(1, args));
	}
	usleep(200000);
	int ws = 0;
	CHECK_INT(waitpid(pid, &ws, WNOHANG), 0); /* still waiting */
	CHECK_INT(kill(pid, SIGTERM), 0);
	CHECK_INT(waitpid(pid, &ws, 0), pid);
	CHECK(WIFSIGNALED(ws));
	CHECK_INT(WTERMSIG(ws), SIGTERM);
}

TEST_MAIN()
