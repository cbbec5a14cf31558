/* fleetboot.h - `anvil fleet bootstrap`: installs and starts the agent on
 * machines over SSH (docs/fleet.md, "Bootstrapping nodes").
 *
 * The machines come from a cluster spec (its on-premises nodes, --node
 * and --group to pick) or from ADDR[=NAME] arguments; what each gets and
 * the scripts that do it are fleet/bootstrap.h's. This file does the I/O:
 * it runs the system's ssh client (BatchMode, so never a prompt) once per
 * step, with a file's content on its stdin, for up to --parallel machines
 * at once (one thread each, each step a child process it waits for), prints
 * each machine's steps as it finishes (ok, changed, failed with the
 * step's stderr), then, unless --no-wait, waits for each machine's node to
 * be registered with the server (GET /v1/nodes) and says how long that
 * took. --dry-run inspects each machine (read only) and prints what would
 * change.
 *
 * Called from the fleet verb (verb_fleet.c) on the CLI's one thread; the
 * worker threads it starts end before it returns.
 */
#ifndef ANVIL_CLI_FLEETBOOT_H
#define ANVIL_CLI_FLEETBOOT_H

#include "cli/verb.h"

/* Runs `anvil fleet bootstrap` with v's options and its positionals after
 * the subcommand (a spec FILE, or ADDR[=NAME]...). Returns the exit status:
 * 0 when every machine is ok or changed (and joined, when waiting). */
int fleetboot_run(struct verb_ctx *v);

#endif
