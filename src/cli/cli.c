#include "cli/cli.h"
#include <stdio.h>
int cli_main(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "cli: building\n"); return 1; }
int up_main(int argc, char **argv) { (void)argc; (void)argv; return 1; }
