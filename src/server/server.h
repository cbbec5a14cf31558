/* server.h - the control plane: `anvil server`. */
#ifndef ANVIL_SERVER_H
#define ANVIL_SERVER_H

int server_main(int argc, char **argv);

#endif
