/* cli.h - client verbs (`anvil run|jobs|show|logs|cancel|nodes`) and
 * `anvil up`, a whole local cluster in the foreground.
 */
#ifndef ANVIL_CLI_H
#define ANVIL_CLI_H

/* argv[0] is the program, argv[1] the verb. */
int cli_main(int argc, char **argv);
/* argv[0] is "up". */
int up_main(int argc, char **argv);

#endif
