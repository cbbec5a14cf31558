#include "agent/agent.h"
#include <stdio.h>
int agent_main(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "agent: building\n"); return 1; }
