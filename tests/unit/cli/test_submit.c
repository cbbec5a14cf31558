/* `anvil run`'s body (cli/submit.h): built from verb_run's options through
 * the submit table the server validates with, the client's environment as
 * --export says, less what is never exported, and the working directory. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/mem.h"
#include "cli/submit.h"
#include "cli/verb.h"
#include "proto/wire.h"

static char *const client_env[] = {
        "LR=3e-4",
        "PATH=/home/ann/venv/bin:/usr/bin",
        "HOME=/home/ann",
        "ANVIL_TOKEN=secret-token",
        "ANVIL_SERVER=http://head:7070",
        "HOSTNAME=laptop",
        "PWD=/home/ann/proj",
        "SSH_AUTH_SOCK=/tmp/ssh-x/agent.1",
        "CUDA_VISIBLE_DEVICES=0",
        "DISPLAY=:0",
        "_=/usr/bin/anvil",
        "LR=shadowed",
        NULL,
};

struct built {
	int rc;
	json_t *body;
	char err[512];
	struct buf notes;
};

/* submit_body() for `anvil run ARGS` (NULL-terminated) in envp and cwd. */
static struct built build(const char *const *args, char *const *envp, const char *cwd)
{
	struct built b = {0};
	buf_init(&b.notes);
	int argc = 0;
	while (args[argc])
		argc++;
	char **argv = xcalloc((size_t)argc + 1, sizeof(*argv));
	for (int i = 0; i < argc; i++)
		argv[i] = xstrdup(args[i]);
	struct cliargs a;
	char err[256];
	if (cliargs_parse(&a, verb_run.opts, verb_run.flags, argc, argv, err, sizeof(err)))
		FAIL_AT("parse: %s", err);
	b.rc = submit_body(&a, envp, cwd, &b.body, &b.notes, b.err, sizeof(b.err));
	if (b.rc == 0) {
		char why[256];
		if (wire_check(b.body, &wire_submit, why, sizeof(why)))
			FAIL_AT("the server's table refuses the body: %s", why);
	}
	cliargs_cleanup(&a);
	for (int i = 0; i < argc; i++)
		free(argv[i]);
	free(argv);
	return b;
}

static void built_free(struct built *b)
{
	json_decref(b->body);
	buf_cleanup(&b->notes);
}

static char *names(const json_t *body, const char *key)
{
	struct buf out;
	buf_init(&out);
	const json_t *v = json_object_get(body, key);
	size_t i;
	const char *k;
	json_t *e;
	if (json_is_array(v))
		json_array_foreach (v, i, e)
			buf_printf(&out, "%s%s", out.len ? " " : "", json_string_value(e));
	else
		json_object_foreach ((json_t *)v, k, e)
			buf_printf(&out, "%s%s", out.len ? " " : "", k);
	return buf_detach(&out);
}

TEST(every_option_is_one_field_of_the_servers_table)
{
	const char *args[] = {"--gpus",
	                      "2",
	                      "--nodes",
	                      "3",
	                      "--queue",
	                      "q",
	                      "--team",
	                      "vision",
	                      "--time",
	                      "1h",
	                      "--gpu-type",
	                      "h200",
	                      "--gpu-mem",
	                      "80G",
	                      "--pool",
	                      "batch",
	                      "--selector",
	                      "disk=nvme",
	                      "--cpus",
	                      "0.5",
	                      "--memory",
	                      "16G",
	                      "--checkpointing",
	                      "--priority",
	                      "-5",
	                      "--name",
	                      "train",
	                      "--grace",
	                      "30s",
	                      "--cwd",
	                      "/data",
	                      "-e",
	                      "A=1",
	                      "--export",
	                      "NONE",
	                      "--head",
	                      "ray start --head --port=$ANVIL_HEAD_PORT --block",
	                      "--worker",
	                      "ray start --address=$ANVIL_HEAD_ADDR --block",
	                      "--head-timeout",
	                      "2m",
	                      "--mpi", /* the server refuses it with --head; the client copies */
	                      "--requeue",
	                      "--max-restarts",
	                      "5",
	                      "--hang-timeout",
	                      "10m",
	                      "--",
	                      "python3",
	                      "train.py",
	                      NULL};
	struct built b = build(args, client_env, "/home/ann/proj");
	CHECK_INT(b.rc, 0);
	char *text = jv_dump(b.body);
	CHECK_STR(text, "{\"command\":[\"python3\",\"train.py\"],\"gpus\":2,\"nodes\":3,"
	                "\"queue\":\"q\",\"team\":\"vision\",\"priority\":-5,\"name\":\"train\","
	                "\"grace_ms\":30000,\"time_limit_ms\":3600000,\"gpu_type\":\"h200\","
	                "\"min_gpu_memory_bytes\":85899345920,\"pool\":\"batch\","
	                "\"selectors\":{\"disk\":\"nvme\"},\"checkpointing\":true,\"cpus\":0.5,"
	                "\"memory_bytes\":17179869184,"
	                "\"head\":\"ray start --head --port=$ANVIL_HEAD_PORT --block\","
	                "\"worker\":\"ray start --address=$ANVIL_HEAD_ADDR --block\","
	                "\"head_timeout_ms\":120000,\"mpi\":true,\"requeue\":true,"
	                "\"max_restarts\":5,\"hang_timeout_ms\":600000,\"cwd\":\"/data\","
	                "\"env\":{\"A\":\"1\"}}");
	/* every field of the table but "exported" (nothing was), "after" and
	 * "array" (their own syntax: below) and "session" (anvil shell's, not
	 * an option) has its option */
	for (const struct wire_field *f = wire_submit.fields; f->name; f++)
		if (strcmp(f->name, "exported") != 0 && strcmp(f->name, "after") != 0 &&
		    strcmp(f->name, "array") != 0 && strcmp(f->name, "session") != 0 &&
		    !json_object_get(b.body, f->name))
			FAIL_AT("no option of anvil run sets field '%s'", f->name);
	free(text);
	built_free(&b);
	const char *whole[] = {"--cpus", "4", "true", NULL};
	b = build(whole, NULL, "/");
	CHECK(json_is_integer(json_object_get(b.body, "cpus")));
	built_free(&b);
	const char *bad[] = {"--cpus", "half", "true", NULL};
	b = build(bad, NULL, "/");
	CHECK_INT(b.rc, ERR_INVALID);
	CHECK_STR(b.err, "--cpus: \"half\" is not a number like 0.5 or 4");
	built_free(&b);
}

/* --no-requeue sends requeue false; neither option sends nothing, so that
 * the server's default (requeue a checkpointing job) holds. */
TEST(no_requeue_sends_false_and_no_option_leaves_the_default)
{
	const char *no[] = {"--no-requeue", "true", NULL};
	struct built b = build(no, NULL, "/");
	CHECK_INT(b.rc, 0);
	CHECK(json_is_false(json_object_get(b.body, "requeue")));
	built_free(&b);
	const char *none[] = {"--checkpointing", "true", NULL};
	b = build(none, NULL, "/");
	CHECK_INT(b.rc, 0);
	CHECK(json_object_get(b.body, "requeue") == NULL);
	CHECK(json_object_get(b.body, "max_restarts") == NULL);
	built_free(&b);
}

/* The default, ALL: the whole environment, less what is never exported
 * (the token above all), the first of two entries of a name. */
TEST(export_all_sends_the_environment_but_never_the_token)
{
	const char *args[] = {"sh", "-c", "echo $LR", NULL};
	struct built b = build(args, client_env, "/home/ann/proj");
	CHECK_INT(b.rc, 0);
	char *sent = names(b.body, "env"), *exported = names(b.body, "exported");
	CHECK_STR(sent, "LR PATH HOME");
	CHECK_STR(exported, "LR PATH HOME");
	CHECK_STR(jv_str(json_object_get(b.body, "env"), "LR", ""), "3e-4");
	CHECK_STR(jv_str(b.body, "cwd", ""), "/home/ann/proj");
	CHECK_STR(b.notes.data ? b.notes.data : "", "");
	char *text = jv_dump(b.body);
	CHECK(strstr(text, "secret-token") == NULL);
	free(text);
	free(sent);
	free(exported);
	built_free(&b);
}

/* --env sets a variable over an exported one: then it is set, not exported. */
TEST(env_options_apply_on_top_of_the_export)
{
	const char *args[] = {"-e", "LR=1e-3", "-e", "ANVIL_TOKEN=on-purpose", "true", NULL};
	struct built b = build(args, client_env, "/");
	CHECK_STR(jv_str(json_object_get(b.body, "env"), "LR", ""), "1e-3");
	CHECK_STR(jv_str(json_object_get(b.body, "env"), "ANVIL_TOKEN", ""), "on-purpose");
	char *exported = names(b.body, "exported");
	CHECK_STR(exported, "PATH HOME");
	free(exported);
	built_free(&b);
}

TEST(export_none_and_a_list)
{
	const char *none[] = {"--export", "NONE", "true", NULL};
	struct built b = build(none, client_env, "/");
	CHECK(json_object_get(b.body, "env") == NULL);
	CHECK(json_object_get(b.body, "exported") == NULL);
	built_free(&b);
	const char *list[] = {"--export", "LR,NOT_SET_HERE", "true", NULL};
	b = build(list, client_env, "/");
	CHECK_INT(b.rc, 0);
	char *sent = names(b.body, "env");
	CHECK_STR(sent, "LR");
	free(sent);
	CHECK_STR(b.notes.data, "--export: NOT_SET_HERE is not set here, so not exported\n");
	built_free(&b);
}

TEST(export_refuses_what_is_never_exported_and_values)
{
	static const char *const cases[][2] = {
	        {"LR,ANVIL_TOKEN",
	         "--export: ANVIL_TOKEN is never exported: it configures the client (its server, "
	         "its token) or anvil sets it per rank"},
	        {"SSH_AUTH_SOCK", "--export: SSH_AUTH_SOCK is never exported: it describes the "
	                          "client's SSH connection or points at its SSH agent"},
	        {"MASTER_ADDR", "--export: MASTER_ADDR is never exported: anvil sets it for each "
	                        "rank"},
	        {"LR=1", "--export: 'LR=1' is not a variable name"},
	        {"ALL,LR", "--export: 'ALL' is not a variable name"},
	        {"LR,,PATH", "--export: '' is not a variable name"},
	        {"", "--export: '' is not a variable name"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[] = {"--export", cases[i][0], "true", NULL};
		struct built b = build(args, client_env, "/");
		CHECK_INT(b.rc, ERR_INVALID);
		CHECK_CONTAINS(b.err, cases[i][1]);
		built_free(&b);
	}
}

TEST(never_exported_names_and_prefixes)
{
	static const char *const never[] = {"ANVIL_TOKEN",
	                                    "ANVIL_SERVER",
	                                    "ANVIL_HOME",
	                                    "ANVIL_JOB_ID",
	                                    "HOSTNAME",
	                                    "PWD",
	                                    "OLDPWD",
	                                    "SHLVL",
	                                    "_",
	                                    "TERM",
	                                    "TERM_PROGRAM_VERSION",
	                                    "DISPLAY",
	                                    "SSH_CONNECTION",
	                                    "XDG_RUNTIME_DIR",
	                                    "XDG_SESSION_ID",
	                                    "TMUX",
	                                    "NCCL_SOCKET_IFNAME",
	                                    "WORLD_SIZE",
	                                    NULL};
	for (size_t i = 0; never[i]; i++)
		if (!submit_never_exported(never[i]))
			FAIL_AT("%s may be exported", never[i]);
	for (size_t i = 0; wire_rank_env[i]; i++)
		CHECK(submit_never_exported(wire_rank_env[i]) != NULL);
	static const char *const fine[] = {
	        "PATH",       "HOME",        "LR",         "HOSTNAMES",       "LD_LIBRARY_PATH",
	        "NCCL_DEBUG", "VIRTUAL_ENV", "PYTHONPATH", "TERMINFO_DIRS_X", "MY_ANVIL_TOKEN",
	        NULL};
	for (size_t i = 0; fine[i]; i++)
		if (submit_never_exported(fine[i]))
			FAIL_AT("%s is never exported", fine[i]);
}

/* Not UTF-8: a JSON string cannot hold it, so it stays behind, said. */
TEST(a_value_that_is_not_utf8_stays_behind)
{
	char *const envp[] = {"GOOD=yes", "BAD=caf\xe9", NULL};
	const char *args[] = {"true", NULL};
	struct built b = build(args, envp, "/");
	CHECK_INT(b.rc, 0);
	char *sent = names(b.body, "env");
	CHECK_STR(sent, "GOOD");
	free(sent);
	CHECK_STR(b.notes.data, "--export: BAD is not exported: its value is not UTF-8 text\n");
	built_free(&b);
}

TEST(too_many_variables_are_refused_with_a_way_out)
{
	int64_t max = wire_field(&wire_submit, "env")->max;
	char **envp = xcalloc((size_t)max + 2, sizeof(*envp));
	for (int64_t i = 0; i <= max; i++)
		envp[i] = xasprintf("V%lld=x", (long long)i);
	const char *args[] = {"true", NULL};
	struct built b = build(args, envp, "/");
	CHECK_INT(b.rc, ERR_INVALID);
	CHECK_CONTAINS(b.err, "--export: 1025 variables to send, more than the 1024");
	CHECK_CONTAINS(b.err, "--export NONE");
	built_free(&b);
	for (int64_t i = 0; i <= max; i++)
		free(envp[i]);
	free(envp);
}

TEST(cwd_is_the_current_directory_or_relative_to_it)
{
	static const char *const cases[][3] = {
	        /* --cwd, current directory, sent */
	        {NULL, "/home/ann/proj", "/home/ann/proj"},
	        {"data", "/home/ann/proj", "/home/ann/proj/data"},
	        {"data", "/", "/data"},
	        {"/scratch/run1", "/home/ann/proj", "/scratch/run1"},
	        {"/scratch/run1", NULL, "/scratch/run1"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[] = {"--cwd", cases[i][0], "true", NULL};
		struct built b = build(cases[i][0] ? args : args + 2, NULL, cases[i][1]);
		CHECK_INT(b.rc, 0);
		CHECK_STR(jv_str(b.body, "cwd", ""), cases[i][2]);
		built_free(&b);
	}
	const char *relative[] = {"--cwd", "data", "true", NULL};
	struct built b = build(relative, NULL, NULL);
	CHECK_INT(b.rc, ERR_INVALID);
	CHECK_CONTAINS(b.err, "the current directory cannot be told");
	built_free(&b);
}

TEST(after_and_array_specs)
{
	json_t *o = NULL;
	char err[256];
	CHECK_INT(submit_after("5,6:any,7:failed", &o, err, sizeof(err)), 0);
	char *t = jv_dump(o);
	CHECK_STR(t, "[{\"job\":5,\"when\":\"ok\"},{\"job\":6,\"when\":\"any\"},"
	             "{\"job\":7,\"when\":\"failed\"}]");
	free(t);
	json_decref(o);
	/* an array's member as ARRAY_INDEX keeps its index until anvil run
	 * asks the server for the member's id */
	CHECK_INT(submit_after("5,12_3:any", &o, err, sizeof(err)), 0);
	t = jv_dump(o);
	CHECK_STR(t, "[{\"job\":5,\"when\":\"ok\"},{\"job\":12,\"when\":\"any\",\"index\":3}]");
	free(t);
	json_decref(o);
	CHECK_INT(submit_after("12_x", &o, err, sizeof(err)), ERR_INVALID);
	CHECK(strstr(err, "--after 12_x: write JOB") != NULL);
	CHECK_INT(submit_after("5:soon", &o, err, sizeof(err)), ERR_INVALID);
	CHECK(strstr(err, "--after 5:soon: write JOB[:ok|:any|:failed]") != NULL);
	CHECK_INT(submit_after("0", &o, err, sizeof(err)), ERR_INVALID);
	CHECK_INT(submit_after(",", &o, err, sizeof(err)), ERR_INVALID);

	CHECK_INT(submit_array("0-3,7,10-14:2%2", &o, err, sizeof(err)), 0);
	t = jv_dump(o);
	CHECK_STR(t, "{\"indices\":[0,1,2,3,7,10,12,14],\"max_running\":2}");
	free(t);
	json_decref(o);
	CHECK_INT(submit_array("9", &o, err, sizeof(err)), 0);
	CHECK_INT(json_integer_value(json_object_get(o, "max_running")), 0);
	json_decref(o);
	static const char *const bad[] = {"5-1", "a", "1-", "%2", "0-3%0", "0-20000", "1,,x", NULL};
	for (int i = 0; bad[i]; i++) {
		if (submit_array(bad[i], &o, err, sizeof(err)) != ERR_INVALID)
			FAIL_AT("--array %s was accepted", bad[i]);
		CHECK(strstr(err, "--array ") != NULL);
	}
}

TEST_MAIN()
