/* peer.h - whether a URL a node sends points at the address it speaks from.
 *
 * The server reads a node's logs, opens exec and attach streams and runs
 * node checks at the agent_url the node's agent sent, with the node's
 * secret. So that a registration cannot send those (and their secrets) to
 * a third machine, agent_url must name the address the registration came
 * from: an IP literal equal to it, or a host name that resolves to it.
 *
 * peer_url_host and peer_same are pure; peer_url_check may resolve a name
 * (getaddrinfo: call it outside the state lock). Thread-safe.
 */
#ifndef ANVIL_PEER_H
#define ANVIL_PEER_H

#include <stddef.h>

/* The host of an http:// or https:// URL ("10.0.0.5", "::1" without its
 * brackets, "gpu-01"): 0, or ERR_INVALID with why in err. */
int peer_url_host(const char *url, char *host, size_t len, char *err, size_t errlen);

/* 1 when a and b are the same IP address (text forms compared as
 * addresses: "::ffff:10.0.0.5" is "10.0.0.5"), else 0; 0 when either is
 * not an IP literal. */
int peer_same(const char *a, const char *b);

/* Whether url (the value of field, "" allowed: no endpoint) points at
 * peer: 0, or ERR_INVALID with a message naming the field, the value and
 * the reason in err. */
int peer_url_check(const char *field, const char *url, const char *peer, char *err, size_t errlen);

#endif
