/* Agent URLs against the address a request comes from (server/peer.h):
 * hosts out of URLs, addresses compared as addresses, names resolved, and
 * refusals that name the field, the value and the reason. */
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "server/peer.h"

static const char *host_of(const char *url)
{
	static char host[300];
	char err[200];
	host[0] = '\0';
	return peer_url_host(url, host, sizeof(host), err, sizeof(err)) ? NULL : host;
}

TEST(url_hosts)
{
	CHECK_STR(host_of("http://10.0.0.5:7071"), "10.0.0.5");
	CHECK_STR(host_of("http://10.0.0.5"), "10.0.0.5");
	CHECK_STR(host_of("https://gpu-01.dc1:7071/x"), "gpu-01.dc1");
	CHECK_STR(host_of("http://[::1]:7071"), "::1");
	CHECK_STR(host_of("http://[fe80::1]/"), "fe80::1");
	CHECK(host_of("ftp://10.0.0.5") == NULL);
	CHECK(host_of("10.0.0.5:7071") == NULL);
	CHECK(host_of("http://:7071") == NULL);
	CHECK(host_of("http://[::1:7071") == NULL);
	CHECK(host_of("http://user@10.0.0.9:7071") == NULL); /* no userinfo games */
}

TEST(addresses_compare_as_addresses)
{
	CHECK(peer_same("10.0.0.5", "10.0.0.5"));
	CHECK(peer_same("::ffff:10.0.0.5", "10.0.0.5"));
	CHECK(peer_same("::1", "0:0:0:0:0:0:0:1"));
	CHECK(!peer_same("10.0.0.5", "10.0.0.6"));
	CHECK(!peer_same("127.0.0.1", "::1"));
	CHECK(!peer_same("localhost", "127.0.0.1")); /* not literals */
	CHECK(!peer_same("", ""));
}

TEST(url_check_accepts_the_peer_and_names_that_resolve_to_it)
{
	char err[600];
	CHECK_INT(peer_url_check("agent_url", "http://127.0.0.1:40123", "127.0.0.1", err,
	                         sizeof(err)),
	          0);
	CHECK_INT(peer_url_check("agent_url", "", "127.0.0.1", err, sizeof(err)), 0);
	/* "localhost" resolves to 127.0.0.1 (and ::1) on every machine */
	CHECK_INT(peer_url_check("agent_url", "http://localhost:1", "127.0.0.1", err, sizeof(err)),
	          0);
}

TEST(url_check_refuses_another_address)
{
	char err[600];
	CHECK_INT(
	        peer_url_check("agent_url", "http://10.9.9.9:7071", "127.0.0.1", err, sizeof(err)),
	        ERR_INVALID);
	CHECK_CONTAINS(err, "field 'agent_url': 'http://10.9.9.9:7071' points at 10.9.9.9, not at "
	                    "127.0.0.1, the address this request comes from");
	CHECK_INT(peer_url_check("facts.agent_url", "http://localhost:1", "127.0.0.2", err,
	                         sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "field 'facts.agent_url': 'http://localhost:1' points at localhost (a "
	                    "name that does not resolve to it), not at 127.0.0.2");
	CHECK_INT(peer_url_check("agent_url", "gopher://x", "127.0.0.1", err, sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "field 'agent_url': 'gopher://x' is not an http:// or https:// URL");
	CHECK_INT(peer_url_check("agent_url", "http://127.0.0.1:1", "", err, sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "(unknown)");
}

TEST_MAIN()
