/* peer.c - agent URLs checked against the address they come from (peer.h). */
#include "server/peer.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/err.h"
#include "base/util.h"

#define HOST_MAX 253 /* a DNS name's length */

int peer_url_host(const char *url, char *host, size_t len, char *err, size_t errlen)
{
	const char *p = NULL;
	if (strncmp(url, "http://", 7) == 0)
		p = url + 7;
	else if (strncmp(url, "https://", 8) == 0)
		p = url + 8;
	if (!p) {
		text_printf(err, errlen, "is not an http:// or https:// URL");
		return ERR_INVALID;
	}
	const char *end;
	if (*p == '[') { /* an IPv6 literal */
		end = strchr(++p, ']');
		if (!end || (end[1] && end[1] != ':' && end[1] != '/')) {
			text_printf(err, errlen, "has an IPv6 address without its closing ']'");
			return ERR_INVALID;
		}
	} else {
		end = p + strcspn(p, ":/?#");
	}
	size_t n = (size_t)(end - p);
	if (n == 0 || n > HOST_MAX || n >= len || memchr(p, '@', n)) {
		text_printf(err, errlen, "has no host (or one longer than %d characters)",
		            HOST_MAX);
		return ERR_INVALID;
	}
	memcpy(host, p, n);
	host[n] = '\0';
	return 0;
}

/* The address in text as 16 bytes (IPv4 as IPv4-mapped IPv6): 0, or -1
 * when text is no IP literal. */
static int as_v6(const char *text, unsigned char out[16])
{
	struct in_addr v4;
	if (inet_pton(AF_INET, text, &v4) == 1) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &v4, 4);
		return 0;
	}
	struct in6_addr v6;
	if (inet_pton(AF_INET6, text, &v6) == 1) {
		memcpy(out, &v6, 16);
		return 0;
	}
	return -1;
}

int peer_same(const char *a, const char *b)
{
	unsigned char x[16], y[16];
	return as_v6(a, x) == 0 && as_v6(b, y) == 0 && memcmp(x, y, 16) == 0;
}

/* 1 when the name host resolves to peer (among its addresses). */
static int resolves_to(const char *host, const char *peer)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return 0;
	int found = 0;
	for (const struct addrinfo *ai = res; ai && !found; ai = ai->ai_next) {
		char text[INET6_ADDRSTRLEN];
		const void *a =
		        ai->ai_family == AF_INET
		                ? (const void *)&((struct sockaddr_in *)(void *)ai->ai_addr)
		                          ->sin_addr
		                : (const void *)&((struct sockaddr_in6 *)(void *)ai->ai_addr)
		                          ->sin6_addr;
		if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
		    inet_ntop(ai->ai_family, a, text, sizeof(text)))
			found = peer_same(text, peer);
	}
	freeaddrinfo(res);
	return found;
}

int peer_url_check(const char *field, const char *url, const char *peer, char *err, size_t errlen)
{
	if (!url || !*url)
		return 0;
	char host[HOST_MAX + 1], why[160];
	if (peer_url_host(url, host, sizeof(host), why, sizeof(why))) {
		text_printf(err, errlen, "field '%s': '%.255s' %s", field, url, why);
		return ERR_INVALID;
	}
	unsigned char bytes[16];
	int literal = as_v6(host, bytes) == 0;
	if (peer && *peer && (literal ? peer_same(host, peer) : resolves_to(host, peer)))
		return 0;
	text_printf(err, errlen,
	            "field '%s': '%.255s' points at %s%s, not at %s, the address this request "
	            "comes from: the server reads logs, opens exec streams and runs node checks "
	            "only at the address a node registered from (an agent on a machine with "
	            "several addresses listens on, or gives --address, the one it reaches the "
	            "server from)",
	            field, url, host, literal ? "" : " (a name that does not resolve to it)",
	            peer && *peer ? peer : "(unknown)");
	return ERR_INVALID;
}
