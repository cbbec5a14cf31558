#include <stdlib.h>

#include "../test.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/cliconn.h"

/* A fresh ANVIL_HOME with an optional client.json; no variables set. */
static void home_with(const char *client_json)
{
	static char dir[64];
	snprintf(dir, sizeof(dir), "/tmp/anvil-cliconn-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	setenv("ANVIL_HOME", dir, 1);
	unsetenv("ANVIL_SERVER");
	unsetenv("ANVIL_TOKEN");
	if (client_json) {
		char *path = cliconn_file_path();
		CHECK_INT(write_file_atomic(path, client_json, strlen(client_json), 0600), 0);
		free(path);
	}
}

static void home_cleanup(void)
{
	rm_rf(getenv("ANVIL_HOME"));
}

TEST(file_path_follows_anvil_home_then_home)
{
	setenv("ANVIL_HOME", "/x/y", 1);
	char *p = cliconn_file_path();
	CHECK_STR(p, "/x/y/client.json");
	free(p);
	unsetenv("ANVIL_HOME");
	setenv("HOME", "/home/u", 1);
	p = cliconn_file_path();
	CHECK_STR(p, "/home/u/.anvil/client.json");
	free(p);
}

TEST(file_gives_server_and_token)
{
	home_with("{\"server\": \"http://127.0.0.1:4000/\", \"token\": \"tok\", \"extra\": 1}");
	struct cliconn c;
	CHECK_INT(cliconn_resolve(&c, NULL, NULL), 0);
	CHECK_STR(c.server, "http://127.0.0.1:4000");
	CHECK_STR(c.token, "tok");
	CHECK_CONTAINS(c.server_from, "client.json");
	CHECK_CONTAINS(c.token_from, "client.json");
	cliconn_cleanup(&c);
	home_cleanup();
}

TEST(env_beats_file_and_flag_beats_env)
{
	home_with("{\"server\": \"http://file:1\", \"token\": \"filetok\"}");
	setenv("ANVIL_SERVER", "envhost:2", 1);
	struct cliconn c;
	CHECK_INT(cliconn_resolve(&c, NULL, NULL), 0);
	CHECK_STR(c.server, "http://envhost:2"); /* no scheme means http */
	CHECK_STR(c.server_from, "$ANVIL_SERVER");
	CHECK_STR(c.token, "filetok"); /* mixed sources */
	cliconn_cleanup(&c);
	setenv("ANVIL_TOKEN", "envtok", 1);
	CHECK_INT(cliconn_resolve(&c, "https://flag:3", NULL), 0);
	CHECK_STR(c.server, "https://flag:3");
	CHECK_STR(c.server_from, "--server");
	CHECK_STR(c.token, "envtok");
	CHECK_STR(c.token_from, "$ANVIL_TOKEN");
	cliconn_cleanup(&c);
	CHECK_INT(cliconn_resolve(&c, NULL, "flagtok"), 0);
	CHECK_STR(c.token, "flagtok");
	CHECK_STR(c.token_from, "--token");
	cliconn_cleanup(&c);
	home_cleanup();
}

TEST(empty_variable_counts_as_unset)
{
	home_with("{\"server\": \"http://file:1\"}");
	setenv("ANVIL_SERVER", "", 1);
	struct cliconn c;
	CHECK_INT(cliconn_resolve(&c, NULL, NULL), 0);
	CHECK_STR(c.server, "http://file:1");
	CHECK(c.token == NULL);
	cliconn_cleanup(&c);
	home_cleanup();
}

TEST(no_server_anywhere_says_how_to_configure)
{
	home_with(NULL);
	struct cliconn c;
	CHECK_INT(cliconn_resolve(&c, NULL, NULL), ERR_NOTFOUND);
	CHECK_CONTAINS(c.error, "--server");
	CHECK_CONTAINS(c.error, "ANVIL_SERVER");
	CHECK_CONTAINS(c.error, "client.json");
	cliconn_cleanup(&c);
	home_cleanup();
}

TEST(malformed_file_is_reported_only_when_needed)
{
	home_with("{\"server\": ");
	struct cliconn c;
	CHECK_INT(cliconn_resolve(&c, NULL, NULL), ERR_INVALID);
	CHECK_CONTAINS(c.error, "client.json: malformed");
	cliconn_cleanup(&c);
	/* Flags cover both values: the file is never read. */
	CHECK_INT(cliconn_resolve(&c, "http://a:1", "t"), 0);
	cliconn_cleanup(&c);
	home_cleanup();
	home_with("{\"server\": 42}");
	CHECK_INT(cliconn_resolve(&c, NULL, NULL), ERR_INVALID);
	CHECK_CONTAINS(c.error, "field 'server' is not a string");
	cliconn_cleanup(&c);
	home_cleanup();
}

TEST(describe_uses_the_server_message)
{
	home_with(NULL);
	struct cliconn c;
	CHECK_INT(cliconn_resolve(&c, "http://a:1", "t"), 0);
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "{\"error\": {\"code\": \"invalid\", \"message\": \"field 'gpus': -1 is "
	             "below the minimum 0\"}}");
	cliconn_describe(&c, 400, &b);
	CHECK_STR(c.error, "field 'gpus': -1 is below the minimum 0");
	buf_reset(&b);
	buf_adds(&b, "{\"error\": {\"code\": \"unauthorized\", \"message\": \"wrong token\"}}");
	cliconn_describe(&c, 401, &b);
	CHECK_STR(c.error, "wrong token (token from --token)");
	buf_reset(&b);
	buf_adds(&b, "<html>\x1b[2J bad gateway</html>\nmore");
	cliconn_describe(&c, 502, &b);
	CHECK_STR(c.error, "the server answered HTTP 502: <html>?[2J bad gateway</html>");
	buf_reset(&b);
	cliconn_describe(&c, 500, &b);
	CHECK_STR(c.error, "the server answered HTTP 500");
	buf_cleanup(&b);
	cliconn_cleanup(&c);
	home_cleanup();
}

TEST(unreachable_names_address_and_source)
{
	home_with(NULL);
	httpc_global_init();
	setenv("ANVIL_SERVER", "http://127.0.0.1:1", 1);
	struct cliconn c;
	CHECK_INT(cliconn_resolve(&c, NULL, NULL), 0);
	json_t *out = NULL;
	CHECK_INT(cliconn_call(&c, "GET", "/v1/jobs", NULL, &out), CLI_EXIT_UNREACHABLE);
	CHECK_CONTAINS(c.error,
	               "cannot reach the server at http://127.0.0.1:1 (from $ANVIL_SERVER)");
	cliconn_cleanup(&c);
	home_cleanup();
}

TEST(query_escape)
{
	struct buf b;
	buf_init(&b);
	cliconn_escape(&b, "run ning&x=1/é");
	CHECK_STR(b.data, "run%20ning%26x%3D1%2F%C3%A9");
	buf_cleanup(&b);
}

TEST_MAIN()
