/* agent.h - the node agent: `anvil agent`.
 *
 * Registers with the server using the join token, reports the node's facts
 * and GPUs, long-polls /v1/agent/sync and starts and stops rank processes so
 * that what runs matches the server's desired set (docs/api.md).
 */
#ifndef ANVIL_AGENT_H
#define ANVIL_AGENT_H

int agent_main(int argc, char **argv);

#endif
