/* cli.h - the client side of the anvil binary: `anvil run|jobs|show|logs|
 * cancel|nodes|help|version` (cli_main) and `anvil up`, a whole local
 * cluster in the foreground (up_main, src/cli/up.c).
 *
 * cli_main() parses the global options (--server, --token; accepted before
 * or after the verb), picks the verb from a table (src/cli/verb.h) and
 * returns the process exit status below. Human output goes to stdout,
 * errors to stderr as "anvil: <message>" (server errors) or
 * "anvil VERB: <message>" (usage errors). Single-threaded.
 */
#ifndef ANVIL_CLI_H
#define ANVIL_CLI_H

/* Exit statuses of the client verbs (docs/cli.md has the table). */
enum {
	CLI_EXIT_OK = 0,
	CLI_EXIT_FAILED = 1,      /* the server rejected the request, or the thing failed */
	CLI_EXIT_USAGE = 2,       /* unknown option, missing argument, bad number */
	CLI_EXIT_UNREACHABLE = 3, /* no server configured, or it could not be reached */
	CLI_EXIT_LOST = 75,       /* run --wait: the job was lost with its node */
	CLI_EXIT_CANCELLED = 130, /* run --wait: the job was cancelled */
};

/* argv[0] is the program, argv[1] the verb (or a global option). */
int cli_main(int argc, char **argv);
/* argv[0] is "up". */
int up_main(int argc, char **argv);

#endif
