/* base/conf.h: a daemon's YAML config file as the flags its parser reads,
 * each with where it was written; which file is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "base/conf.h"
#include "base/err.h"

static const char *const switches[] = {"full-sync", NULL};

static int parse(const char *yaml, struct conf *c, char *err, size_t len)
{
	return conf_parse("s.yaml", yaml, strlen(yaml), switches, c, err, len);
}

TEST(keys_become_flags_with_their_positions)
{
	struct conf c;
	char err[1024] = "";
	CHECK_INT(parse("listen: 0.0.0.0:7070\n"
	                "threads: 4\n"
	                "full-sync: true\n"
	                "ratio: 0.5\n"
	                "verbose: false\n",
	                &c, err, sizeof(err)),
	          0);
	CHECK_STR(c.file, "s.yaml");
	static const char *const want[] = {"s.yaml",    "--listen",    "0.0.0.0:7070", "--threads",
	                                   "4",         "--full-sync", "--ratio",      "0.5",
	                                   "--verbose", "false"};
	CHECK_INT(c.argc, (int)(sizeof(want) / sizeof(want[0])));
	for (int i = 0; i < c.argc; i++)
		CHECK_STR(c.argv[i], want[i]);
	CHECK(c.argv[c.argc] == NULL);
	CHECK_STR(conf_where(&c, 1), "s.yaml:1:1"); /* a flag: its key */
	CHECK_STR(conf_where(&c, 2), "s.yaml:1:9"); /* a value: itself */
	CHECK_STR(conf_where(&c, 5), "s.yaml:3:1"); /* a switch: its key */
	CHECK(conf_where(&c, c.argc) == NULL);
	CHECK(conf_where(NULL, 1) == NULL); /* the command line's arguments */
	conf_free(&c);
	CHECK(c.argv == NULL && c.argc == 0);
}

TEST(a_switch_that_is_false_is_left_out_and_an_empty_file_says_nothing)
{
	struct conf c;
	char err[1024] = "";
	CHECK_INT(parse("full-sync: false\n", &c, err, sizeof(err)), 0);
	CHECK_INT(c.argc, 1);
	conf_free(&c);
	CHECK_INT(parse("# nothing yet\n", &c, err, sizeof(err)), 0);
	CHECK_INT(c.argc, 1);
	conf_free(&c);
}

/* Everything conf_report() writes, as one string. */
static char *report(const struct conf *c, int *n)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	*n = conf_report(c, f);
	fclose(f);
	return text;
}

TEST(every_error_of_the_file_with_its_position)
{
	struct conf c;
	char err[4096] = "";
	int n;
	CHECK_INT(parse("listen: [a, b]\n"
	                "check-config: true\n"
	                "full-sync: yes please\n"
	                "--threads: 2\n"
	                "home:\n"
	                "threads: 4\n",
	                &c, err, sizeof(err)),
	          0);
	CHECK_INT(conf_errors(&c), 5);
	char *text = report(&c, &n);
	CHECK_INT(n, 5);
	CHECK_STR(text, "s.yaml:1:9: listen: should be one value (text, a number or a boolean), "
	                "not a list\n"
	                "s.yaml:2:1: check-config: is given on the command line only\n"
	                "s.yaml:3:12: full-sync: is a switch: true or false, not text\n"
	                "s.yaml:4:1: --threads: is an option's name with its dashes: write "
	                "the name alone\n"
	                "s.yaml:5:6: home: should be one value (text, a number or a boolean), not "
	                "empty\n");
	free(text);
	/* the keys that could be flags are, for the daemon's parser to check */
	CHECK_INT(c.argc, 3);
	CHECK_STR(c.argv[1], "--threads");
	CHECK_STR(c.argv[2], "4");
	conf_free(&c);
	CHECK_INT(parse("[listen]\n", &c, err, sizeof(err)), 0);
	text = report(&c, &n);
	CHECK_STR(text, "s.yaml:1:1: should be a mapping of option names to values, not a list\n");
	free(text);
	conf_free(&c);
	CHECK_INT(parse("a: 1\na: 2\n", &c, err, sizeof(err)), ERR_INVALID);
	CHECK_STR(err, "s.yaml:2:1: 'a' is given twice\n");
	CHECK(c.argv == NULL);
}

/* The daemon's parser adds what it refuses of the arguments made; every
 * error, the file's own and the parser's, comes out in the file's order,
 * a flag's at its key and a value's at the value. */
TEST(the_parsers_errors_join_the_files_in_its_order)
{
	struct conf c;
	char err[1024] = "";
	int n;
	CHECK_INT(parse("listen: nowhere\n"
	                "full-sync: maybe\n"
	                "colour: blue\n"
	                "threads: 65\n",
	                &c, err, sizeof(err)),
	          0);
	CHECK_INT(conf_errors(&c), 1);
	static const char *const want[] = {"s.yaml", "--listen",  "nowhere", "--colour",
	                                   "blue",   "--threads", "65"};
	CHECK_INT(c.argc, 7);
	for (int i = 0; i < c.argc; i++)
		CHECK_STR(c.argv[i], want[i]);
	conf_error(&c, 6, "'%s' is not a number from 1 to 64", c.argv[6]);
	conf_error(&c, 3, "is not an option");
	conf_error(&c, 2, "'%s' is not ADDR:PORT", c.argv[2]);
	conf_error(&c, 99, "not an argument: ignored");
	char *text = report(&c, &n);
	CHECK_INT(n, 4);
	CHECK_STR(text, "s.yaml:1:9: listen: 'nowhere' is not ADDR:PORT\n"
	                "s.yaml:2:12: full-sync: is a switch: true or false, not text\n"
	                "s.yaml:3:1: colour: is not an option\n"
	                "s.yaml:4:10: threads: '65' is not a number from 1 to 64\n");
	free(text);
	conf_free(&c);
	struct conf none = {0}; /* no file read: nothing to say */
	CHECK_INT(conf_errors(&none), 0);
	text = report(&none, &n);
	CHECK_INT(n, 0);
	free(text);
}

TEST(which_file_is_read)
{
	char dflt[] = "/tmp/anvil-conf-XXXXXX";
	int fd = mkstemp(dflt);
	CHECK(fd >= 0);
	close(fd);
	char *none[] = {"anvil", "--threads", "2", NULL};
	char *named[] = {"anvil", "--config", "mine.yaml", NULL};
	char *eq[] = {"anvil", "--config=other.yaml", NULL};
	char *off[] = {"anvil", "--no-config", NULL};
	CHECK_STR(conf_choose(3, none, dflt), dflt); /* the default, when it is there */
	CHECK_STR(conf_choose(3, named, dflt), "mine.yaml");
	CHECK_STR(conf_choose(2, eq, dflt), "other.yaml");
	CHECK(conf_choose(2, off, dflt) == NULL);
	unlink(dflt);
	CHECK(conf_choose(3, none, dflt) == NULL); /* gone: none */
}

TEST(load_says_what_it_could_not_do)
{
	struct conf c;
	char err[1024];
	char *missing[] = {"anvil", "--config", NULL};
	CHECK_INT(conf_load(2, missing, "anvil server", NULL, switches, &c, err, sizeof(err)),
	          ERR_INVALID);
	CHECK_STR(err, "anvil server: --config needs a FILE (--no-config reads none)\n");
	char *gone[] = {"anvil", "--config", "/nonexistent/s.yaml", NULL};
	CHECK(conf_load(3, gone, "anvil server", NULL, switches, &c, err, sizeof(err)) != 0);
	CHECK_STR(err, "anvil server: cannot read the config file /nonexistent/s.yaml: No such "
	               "file or directory\n");
	char *nothing[] = {"anvil", NULL};
	CHECK_INT(conf_load(1, nothing, "anvil server", "/nonexistent/default.yaml", switches, &c,
	                    err, sizeof(err)),
	          0);
	CHECK(c.file == NULL && c.argc == 0);
	conf_free(&c);
}

TEST_MAIN()
