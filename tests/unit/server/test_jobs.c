/* test_jobs.c - a submission's validation (server/jobs.c) where no field
 * table can say it: the command's arguments and the environment's
 * NAME=VALUE strings must fit one exec (proto/wire.h, WIRE_MAX_ARG and
 * WIRE_MAX_EXEC), or the job is refused with the field, the size and the
 * limit, instead of being accepted and failing with E2BIG on its node. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "state_fixture.h"

/* A string of n 'x's (to free). */
static char *xs(size_t n)
{
	char *s = xmalloc(n + 1);
	memset(s, 'x', n);
	s[n] = '\0';
	return s;
}

/* Submits {"command": [...argv], "env": env}: 0, or the refusal with err. */
static int submit(struct sfx *f, const char *const *argv, int argc, json_t *env, char *err,
                  size_t errlen)
{
	json_t *cmd = json_array();
	for (int i = 0; i < argc; i++)
		json_array_append_new(cmd, json_string(argv[i]));
	json_t *body = json_pack("{s:o,s:i}", "command", cmd, "gpus", 1);
	if (env)
		json_object_set_new(body, "env", env);
	struct job *j = NULL;
	err[0] = '\0';
	int rc = state_submit(&f->st, body, &j, err, errlen);
	json_decref(body);
	CHECK(rc != 0 || j != NULL);
	sfx_flush(f);
	return rc;
}

TEST(an_argument_fits_one_exec_or_is_refused_naming_it)
{
	struct sfx *f = sfx_open(1, 1);
	char err[512];
	char *fits = xs(WIRE_MAX_ARG - 1), *over = xs(WIRE_MAX_ARG);
	const char *ok[] = {"sh", "-c", fits};
	CHECK_INT(submit(f, ok, 3, NULL, err, sizeof(err)), 0);
	const char *bad[] = {"sh", "-c", "true", over};
	CHECK_INT(submit(f, bad, 4, NULL, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "field 'command[3]': 131072 bytes, over the limit of 131071 bytes for one "
	               "argument (Linux's MAX_ARG_STRLEN, 131072 with its NUL)");
	free(fits);
	free(over);
	sfx_close(f);
}

TEST(an_environment_string_counts_its_name_and_is_refused_naming_it)
{
	struct sfx *f = sfx_open(1, 1);
	char err[512];
	const char *cmd[] = {"true"};
	/* "BIG=" and the value: 131071 bytes in all fit, one more does not */
	char *fits = xs(WIRE_MAX_ARG - 1 - 4), *over = xs(WIRE_MAX_ARG - 4);
	CHECK_INT(submit(f, cmd, 1, json_pack("{s:s}", "BIG", fits), err, sizeof(err)), 0);
	CHECK_INT(
	        submit(f, cmd, 1, json_pack("{s:s,s:s}", "A", "1", "BIG", over), err, sizeof(err)),
	        ERR_INVALID);
	CHECK_STR(err, "field 'env': 'BIG' is 131072 bytes as NAME=VALUE, over the limit of "
	               "131071 bytes for one environment string (Linux's MAX_ARG_STRLEN, 131072 "
	               "with its NUL)");
	free(fits);
	free(over);
	sfx_close(f);
}

/* Strings that each fit but together pass WIRE_MAX_EXEC. */
TEST(command_and_environment_together_fit_one_exec)
{
	struct sfx *f = sfx_open(1, 1);
	char err[512];
	char *part = xs(100000);
	const char *cmd[] = {"sh", "-c", "true", part, part, part, part};
	/* 11 + 4 * 100001 + 2 * 100003 ("A=", the value, its NUL) */
	json_t *env = json_pack("{s:s,s:s}", "A", part, "B", part);
	CHECK_INT(submit(f, cmd, 7, env, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "fields 'command' and 'env': 600021 bytes together (each string with its "
	               "NUL), over the limit of 524288 bytes for one exec");
	CHECK_INT(submit(f, cmd, 7, json_pack("{s:s}", "A", part), err, sizeof(err)), 0);
	free(part);
	sfx_close(f);
}

TEST_MAIN()
