#include <stdarg.h>
#include <stdint.h>

#include "../test.h"
#include "base/err.h"
#include "cli/cliargs.h"

static const struct cliargs_opt opts[] = {
        {"gpus", 0, CLIARGS_INT, "G", "gpus"},         {"name", 0, CLIARGS_STR, "NAME", "name"},
        {"env", 'e', CLIARGS_KV, "K=V", "env"},        {"grace", 0, CLIARGS_DURATION, "D", "grace"},
        {"follow", 'f', CLIARGS_FLAG, NULL, "follow"}, {"rank", 'r', CLIARGS_INT, "R", "rank"},
        {"memory", 0, CLIARGS_SIZE, "SIZE", "memory"}, {NULL, 0, 0, NULL, NULL},
};

/* Parses the words up to NULL; they stay alive until the next call. */
static char *words[32];
static int parse(struct cliargs *a, int flags, char *err, size_t errlen, ...)
{
	va_list ap;
	va_start(ap, errlen);
	int n = 0;
	while ((words[n] = va_arg(ap, char *)) != NULL)
		n++;
	va_end(ap);
	return cliargs_parse(a, opts, flags, n, words, err, errlen);
}

#define PARSE(a, flags, err, ...) parse((a), (flags), (err), sizeof(err), __VA_ARGS__, (char *)NULL)

TEST(numbers_flags_and_positionals)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--gpus", "4", "7", "-f", "--name=x", "-r3"), 0);
	CHECK_INT(cliargs_get(&a, "gpus")->num, 4);
	CHECK_STR(cliargs_str(&a, "name"), "x");
	CHECK(cliargs_flag(&a, "follow"));
	CHECK_INT(cliargs_get(&a, "rank")->num, 3);
	CHECK_INT(a.npos, 1);
	CHECK_STR(a.pos[0], "7");
	CHECK(!a.has_rest);
	CHECK(cliargs_str(&a, "server") == NULL);
	cliargs_cleanup(&a);
}

TEST(negative_number_is_a_value_not_a_flag)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--gpus", "-1", "--rank", "-2"), 0);
	CHECK_INT(cliargs_get(&a, "gpus")->num, -1);
	CHECK_INT(cliargs_get(&a, "rank")->num, -2);
	cliargs_cleanup(&a);
}

TEST(bad_number_names_flag_value_and_reason)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--gpus", "abc"), ERR_INVALID);
	CHECK_STR(err, "--gpus: \"abc\" is not a number");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--gpus=99999999999999999999"), ERR_INVALID);
	CHECK_STR(err, "--gpus: \"99999999999999999999\" is out of range");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--gpus", "4x"), ERR_INVALID);
	CHECK_CONTAINS(err, "is not a number");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--gpus", ""), ERR_INVALID);
	cliargs_cleanup(&a);
}

TEST(unknown_and_missing)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--gpu", "1"), ERR_INVALID);
	CHECK_STR(err, "unknown option --gpu");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "-x"), ERR_INVALID);
	CHECK_STR(err, "unknown option -x");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--name"), ERR_INVALID);
	CHECK_STR(err, "--name needs a value (NAME)");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--follow=yes"), ERR_INVALID);
	CHECK_CONTAINS(err, "--follow takes no value");
	cliargs_cleanup(&a);
}

TEST(env_is_repeatable_and_checked)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--env", "A=1", "-e", "B=x=y", "--env=C="), 0);
	const struct cliargs_value *v = cliargs_get(&a, "env");
	CHECK_INT(v->nlist, 3);
	CHECK_STR(v->list[0], "A=1");
	CHECK_STR(v->list[1], "B=x=y");
	CHECK_STR(v->list[2], "C=");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--env", "NOEQUALS"), ERR_INVALID);
	CHECK_STR(err, "--env: \"NOEQUALS\" is not K=V");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--env", "=v"), ERR_INVALID);
	cliargs_cleanup(&a);
}

TEST(duration_keeps_sign_for_the_server)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--grace", "1.5s"), 0);
	CHECK_INT(cliargs_get(&a, "grace")->num, 1500);
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--grace", "-2m"), 0);
	CHECK_INT(cliargs_get(&a, "grace")->num, -120000);
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--grace", "soon"), ERR_INVALID);
	CHECK_CONTAINS(err, "--grace: \"soon\" is not a duration");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--grace", "--5s"), ERR_INVALID);
	cliargs_cleanup(&a);
}

TEST(size_takes_binary_units)
{
	static const struct {
		const char *text;
		int64_t bytes;
	} good[] = {
	        {"4096", 4096},       {"512M", 512LL << 20}, {"16G", 16LL << 30},
	        {"16g", 16LL << 30},  {"1.5T", 3LL << 39},   {"1.5TiB", 3LL << 39},
	        {"80GB", 80LL << 30}, {"4Ki", 4096},         {".5K", 512},
	        {"100B", 100},        {"2P", 2LL << 50},
	};
	char err[256] = "";
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int64_t v = -1;
		CHECK_INT(cliargs_parse_size("--memory", good[i].text, &v, err, sizeof(err)), 0);
		CHECK_INT(v, good[i].bytes);
	}
	static const char *const bad[] = {"",      "G",   "-1G", "+1G", " 1G", "1e3", "0x10",
	                                  "1.2.3", "1GG", "1Gb", "inf", "1 G", "16X", "1BiB"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t v = 7;
		CHECK_INT(cliargs_parse_size("--memory", bad[i], &v, err, sizeof(err)),
		          ERR_INVALID);
		CHECK_INT(v, 7); /* untouched */
		CHECK_CONTAINS(err, "is not a size");
	}
	int64_t v = 0;
	CHECK_INT(cliargs_parse_size("--memory", "9000000P", &v, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "--memory: \"9000000P\" is out of range");
	/* As an option type: the number in num, the text in str. */
	struct cliargs a;
	CHECK_INT(PARSE(&a, 0, err, "--memory=64M"), 0);
	CHECK_INT(cliargs_get(&a, "memory")->num, 64LL << 20);
	CHECK_STR(cliargs_str(&a, "memory"), "64M");
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--memory", "lots"), ERR_INVALID);
	CHECK_STR(err, "--memory: \"lots\" is not a size (examples: 16G, 512M, 1.5T, 4096)");
	cliargs_cleanup(&a);
}

TEST(double_dash_and_stop_at_positional)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--gpus", "2", "--", "python3", "--gpus", "9"), 0);
	CHECK(a.has_rest);
	CHECK_INT(a.nrest, 3);
	CHECK_STR(a.rest[1], "--gpus");
	CHECK_INT(cliargs_get(&a, "gpus")->num, 2);
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, CLIARGS_STOP_AT_POSITIONAL, err, "-f", "python3", "-f", "x"), 0);
	CHECK_INT(a.nrest, 3);
	CHECK_STR(a.rest[0], "python3");
	CHECK_INT(cliargs_get(&a, "follow")->set, 1);
	cliargs_cleanup(&a);
	CHECK_INT(PARSE(&a, 0, err, "--"), 0);
	CHECK(a.has_rest);
	CHECK_INT(a.nrest, 0);
	cliargs_cleanup(&a);
}

TEST(globals_on_every_table)
{
	struct cliargs a;
	char err[256] = "";
	CHECK_INT(PARSE(&a, 0, err, "--server", "http://x:1", "--token=t", "-h"), 0);
	CHECK_STR(cliargs_str(&a, "server"), "http://x:1");
	CHECK_STR(cliargs_str(&a, "token"), "t");
	CHECK(cliargs_flag(&a, "help"));
	cliargs_cleanup(&a);
	/* No verb table at all: only the globals. */
	char *w[] = {"--server", "s", "jobs", "--json"};
	CHECK_INT(cliargs_parse(&a, NULL, CLIARGS_STOP_AT_POSITIONAL, 4, w, err, sizeof(err)), 0);
	CHECK_STR(cliargs_str(&a, "server"), "s");
	CHECK_INT(a.nrest, 2);
	cliargs_cleanup(&a);
}

TEST(help_lists_options_and_globals)
{
	struct buf b;
	buf_init(&b);
	cliargs_help(opts, &b);
	CHECK_CONTAINS(b.data, "--gpus G");
	CHECK_CONTAINS(b.data, "-e, --env K=V");
	CHECK_CONTAINS(b.data, "--server URL");
	CHECK_CONTAINS(b.data, "-h, --help");
	buf_cleanup(&b);
}

TEST_MAIN()
