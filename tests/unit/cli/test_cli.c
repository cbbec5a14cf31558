/* cli_main end to end for everything that needs no server: usage errors,
 * help, version, and the exit status for an unreachable server. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>

#include "../test.h"
#include "base/buf.h"
#include "base/util.h"
#include "cli/cli.h"

static char capture_path[] = "/tmp/anvil-cli-XXXXXX";

/* Runs cli_main on "anvil" + the words (NULL-terminated) with stdout and
 * stderr sent to a file; the exit status, and the output in out. */
static int run(struct buf *out, ...)
{
	char *argv[32] = {"anvil"};
	int argc = 1;
	va_list ap;
	va_start(ap, out);
	while ((argv[argc] = va_arg(ap, char *)) != NULL)
		argc++;
	va_end(ap);
	int fd = mkstemp(capture_path);
	CHECK(fd >= 0);
	fflush(NULL);
	int saved_out = dup(1), saved_err = dup(2);
	dup2(fd, 1);
	dup2(fd, 2);
	int rc = cli_main(argc, argv);
	fflush(NULL);
	dup2(saved_out, 1);
	dup2(saved_err, 2);
	close(saved_out);
	close(saved_err);
	close(fd);
	buf_reset(out);
	CHECK_INT(read_file(capture_path, 1 << 20, out), 0);
	unlink(capture_path);
	strcpy(capture_path, "/tmp/anvil-cli-XXXXXX");
	return rc;
}

#define RUN(out, ...) run((out), __VA_ARGS__, (char *)NULL)

static void no_server(void)
{
	setenv("ANVIL_HOME", "/nonexistent/anvil-home", 1);
	unsetenv("ANVIL_SERVER");
	unsetenv("ANVIL_TOKEN");
}

TEST(usage_errors_exit_2_and_name_the_problem)
{
	no_server();
	struct buf o;
	buf_init(&o);
	CHECK_INT(RUN(&o, "run", "--gpus", "abc", "--", "x"), 2);
	CHECK_CONTAINS(o.data, "anvil run: --gpus: \"abc\" is not a number");
	CHECK_INT(RUN(&o, "run", "--"), 2);
	CHECK_CONTAINS(o.data, "anvil run: no command to run");
	CHECK_INT(RUN(&o, "run"), 2);
	CHECK_INT(RUN(&o, "run", "--", ""), 2);
	CHECK_INT(RUN(&o, "run", "--wait", "--json", "--", "x"), 2);
	CHECK_INT(RUN(&o, "jobs", "--frob"), 2);
	CHECK_CONTAINS(o.data, "anvil jobs: unknown option --frob");
	CHECK_INT(RUN(&o, "jobs", "--limit", "ten"), 2);
	CHECK_INT(RUN(&o, "show"), 2);
	CHECK_CONTAINS(o.data, "missing argument");
	CHECK_INT(RUN(&o, "show", "7", "8"), 2);
	CHECK_CONTAINS(o.data, "unexpected argument \"8\"");
	CHECK_INT(RUN(&o, "show", "seven"), 2);
	CHECK_CONTAINS(o.data,
	               "JOB: \"seven\" is not a job: write its id (12) or an array's member");
	CHECK_INT(RUN(&o, "why", "7_x"), 2);
	CHECK_CONTAINS(o.data, "anvil why: JOB: \"7_x\" is not a job");
	CHECK_INT(RUN(&o, "cancel", "1", "x"), 2);
	CHECK_INT(RUN(&o, "logs", "--rank"), 2);
	CHECK_INT(RUN(&o, "frobnicate"), 2);
	CHECK_CONTAINS(o.data, "unknown command \"frobnicate\"");
	CHECK_INT(RUN(&o, "--server"), 2);
	CHECK_INT(RUN(&o, "--server", "http://x", "up"), 2);
	CHECK_INT(RUN(&o, (char *)NULL), 2);
	CHECK_CONTAINS(o.data, "Usage: anvil");
	buf_cleanup(&o);
}

TEST(node_verb_usage_errors_before_any_request)
{
	no_server(); /* a usage error must come before the server is looked for (exit 3) */
	struct buf o;
	buf_init(&o);
	CHECK_INT(RUN(&o, "node", "cordon", "n1", "--force"), 2);
	CHECK_CONTAINS(o.data, "anvil node: --force is not an option of `anvil node cordon` (only "
	                       "of: uncordon)");
	CHECK_INT(RUN(&o, "node", "check", "n1", "--reason", "x"), 2);
	CHECK_CONTAINS(o.data, "--reason is not an option of `anvil node check` (only of: cordon, "
	                       "drain, uncordon)");
	CHECK_INT(RUN(&o, "node", "fault", "n1", "xid", "xid=79"), 2);
	CHECK_CONTAINS(o.data, "anvil node: fault: --gpu INDEX is required");
	CHECK_INT(RUN(&o, "node", "fault", "n1", "--gpu", "2", "xid", "xid79"), 2);
	CHECK_CONTAINS(o.data, "anvil node: fault: \"xid79\" is not KEY=VALUE (e.g. xid=79)");
	CHECK_INT(RUN(&o, "node", "fault", "n1", "--gpu", "2"), 2);
	CHECK_CONTAINS(o.data, "missing argument (usage: anvil node fault NODE --gpu I KIND");
	CHECK_INT(RUN(&o, "node", "drain"), 2);
	CHECK_CONTAINS(o.data, "missing argument (usage: anvil node drain NODE [--reason TEXT])");
	CHECK_INT(RUN(&o, "node", "check", "n1", "extra"), 2);
	CHECK_CONTAINS(o.data, "too many arguments (usage: anvil node check NODE");
	CHECK_INT(RUN(&o, "node", "reboot", "n1"), 2);
	CHECK_CONTAINS(o.data, "\"reboot\" is not show, cordon, drain, uncordon, label, check, "
	                       "fault, reset, approve or token");
	CHECK_INT(RUN(&o, "node", "token", "n1"), 2);
	CHECK_CONTAINS(o.data,
	               "too many arguments (usage: anvil node token [--rotate [--ttl DUR]])");
	CHECK_INT(RUN(&o, "node", "token", "--ttl", "1h"), 2);
	CHECK_CONTAINS(o.data, "--ttl goes with --rotate");
	CHECK_INT(RUN(&o, "node", "reset"), 2);
	CHECK_CONTAINS(o.data, "missing argument (usage: anvil node reset NODE)");
	CHECK_INT(RUN(&o, "node", "approve", "n1", "--reason", "x"), 2);
	CHECK_CONTAINS(o.data, "--reason is not an option of `anvil node approve`");
	CHECK_INT(RUN(&o, "nodes", "list"), 2);
	CHECK_CONTAINS(o.data, "anvil nodes: \"list\" is not show");
	CHECK_INT(RUN(&o, "nodes", "show"), 2);
	CHECK_CONTAINS(o.data, "show: missing NODE");
	/* well-formed: it gets as far as looking for the server */
	CHECK_INT(RUN(&o, "node", "uncordon", "n1", "--force", "--reason", "fixed"), 3);
	CHECK_INT(RUN(&o, "node", "fault", "n1", "--gpu", "2", "ecc", "uncorrectable=1"), 3);
	CHECK_INT(RUN(&o, "nodes", "show", "n1"), 3);
	CHECK_INT(RUN(&o, "node", "token", "--rotate", "--ttl", "0"), 3);
	CHECK_INT(RUN(&o, "node", "reset", "n1"), 3);
	buf_cleanup(&o);
}

TEST(help_everywhere)
{
	no_server();
	struct buf o;
	buf_init(&o);
	CHECK_INT(RUN(&o, "help"), 0);
	CHECK_CONTAINS(o.data, "Exit status:");
	CHECK_CONTAINS(o.data, "  nodes");
	CHECK_INT(RUN(&o, "--help"), 0);
	CHECK_CONTAINS(o.data, "Commands:");
	static const char *const verbs[] = {"run",    "jobs",  "show", "logs",
	                                    "cancel", "nodes", "node"};
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		char usage[64];
		snprintf(usage, sizeof(usage), "Usage: anvil %s", verbs[i]);
		CHECK_INT(RUN(&o, verbs[i], "--help"), 0);
		CHECK_CONTAINS(o.data, usage);
		CHECK_CONTAINS(o.data, "--server URL");
		CHECK_CONTAINS(o.data, "3    no server configured");
		CHECK_INT(RUN(&o, "help", verbs[i]), 0);
		CHECK_CONTAINS(o.data, usage);
	}
	CHECK_INT(RUN(&o, "run", "-h"), 0);
	CHECK_CONTAINS(o.data, "130    it was cancelled");
	CHECK_INT(RUN(&o, "show", "--help"), 0); /* --help wins over a missing JOB */
	CHECK_INT(RUN(&o, "help", "nope"), 2);
	buf_cleanup(&o);
}

TEST(version)
{
	struct buf o;
	buf_init(&o);
	CHECK_INT(RUN(&o, "version"), 0);
	CHECK(strncmp(o.data, "anvil ", 6) == 0);
	CHECK_INT(RUN(&o, "--version"), 0);
	CHECK(strncmp(o.data, "anvil ", 6) == 0);
	buf_cleanup(&o);
}

TEST(no_server_or_unreachable_exit_3)
{
	no_server();
	struct buf o;
	buf_init(&o);
	CHECK_INT(RUN(&o, "jobs"), 3);
	CHECK_CONTAINS(o.data, "anvil: no server configured");
	CHECK_INT(RUN(&o, "--server", "http://127.0.0.1:1", "nodes"), 3);
	CHECK_CONTAINS(o.data, "cannot reach the server at http://127.0.0.1:1 (from --server)");
	CHECK_INT(RUN(&o, "show", "3", "--server=127.0.0.1:1"), 3);
	CHECK_CONTAINS(o.data, "http://127.0.0.1:1 (from --server)");
	setenv("ANVIL_SERVER", "http://127.0.0.1:1", 1);
	setenv("ANVIL_RETRY_FOR", "300ms", 1); /* a create tries again: not for long here */
	CHECK_INT(RUN(&o, "run", "--gpus", "-1", "--", "true"), 3);
	CHECK_CONTAINS(o.data, "(from $ANVIL_SERVER)");
	CHECK_CONTAINS(o.data, "sending it again with the same Idempotency-Key for up to 1s");
	CHECK_CONTAINS(o.data, "with one Idempotency-Key");
	buf_cleanup(&o);
}

TEST_MAIN()
