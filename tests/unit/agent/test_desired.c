/* agent/desired.h: a desired entry read once into its record: the held
 * fields of every entry without a check, the rest only when deepened
 * (after wire_desired's check), and what only the record reads of the
 * entry's maps (its variables, its environment, its notice). */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "agent/desired.h"
#include "base/err.h"

static json_t *json_of(const char *text)
{
	json_error_t je;
	json_t *v = json_loads(text, 0, &je);
	if (!v)
		FAIL_AT("bad JSON in the test: %s", je.text);
	return v;
}

static const char full[] =
        "{\"attempt_id\": 9, \"job_id\": 4, \"rank\": 2, \"command\": [\"python3\", \"a.py\"],"
        " \"cwd\": \"/src\", \"gpus\": [1, 3, \"x\", 70], \"grace_ms\": 5000,"
        " \"env\": {\"NPROC_PER_NODE\": \"2\", \"A\": \"own\"}, \"env_base\": \"j1\","
        " \"cpu_millis\": 1500, \"memory_bytes\": 1048576, \"head_addr\": \"10.0.0.1:9\","
        " \"head\": \"h\", \"worker\": \"w\", \"head_timeout_ms\": 60000, \"session\": true,"
        " \"mpi\": true, \"mpi_hosts\": [\"n1\", \"n2\"], \"task\": false,"
        " \"notice\": {\"id\": 7, \"text\": \"ends soon\"}, \"as_root\": true,"
        " \"from_a_newer_server\": 1}";

TEST(every_entry_is_read_for_what_the_syncer_keeps_only)
{
	json_t *e = json_of(full);
	struct desired_rank r;
	desired_parse(e, &r);
	json_decref(e); /* the record holds its own reference */
	CHECK_INT(r.attempt_id, 9);
	CHECK_INT(r.rank, 2);
	CHECK_INT(r.job_id, 4);
	CHECK_INT(r.session, 1);
	CHECK_INT((long long)r.gpus.mask, (1 << 1) | (1 << 3));
	CHECK(r.gpus.index == NULL);
	CHECK_STR(desired_var(&r, "NPROC_PER_NODE", "1"), "2");
	CHECK_STR(desired_var(&r, "MISSING", "d"), "d");
	/* not read until the rank is to start */
	CHECK(r.command.v == NULL && r.cwd == NULL && r.head_addr == NULL && !r.mpi);
	CHECK_INT(r.grace_ms, 0);
	CHECK_INT(r.deep, 0);
	desired_cleanup(&r);
}

TEST(a_rank_to_start_reads_the_rest_once_checked)
{
	json_t *e = json_of(full);
	struct desired_rank r;
	char why[256] = "";
	desired_parse(e, &r);
	json_decref(e);
	CHECK_INT(desired_deepen(&r, why, sizeof(why)), 0);
	CHECK_INT(r.deep, 1);
	CHECK_INT((long long)r.command.n, 2);
	CHECK_STR(r.command.v[1], "a.py");
	CHECK(r.command.v[2] == NULL);
	CHECK_STR(r.cwd, "/src");
	CHECK_INT(r.grace_ms, 5000);
	CHECK_STR(r.env_base, "j1");
	CHECK_INT(r.cpu_millis, 1500);
	CHECK_INT(r.memory_bytes, 1048576);
	CHECK_STR(r.head_addr, "10.0.0.1:9");
	CHECK_STR(r.head, "h");
	CHECK_STR(r.worker, "w");
	CHECK_INT(r.head_timeout_ms, 60000);
	CHECK_INT(r.mpi, 1);
	CHECK_INT((long long)r.mpi_hosts.n, 2);
	CHECK_STR(r.mpi_hosts.v[1], "n2");
	CHECK_INT(r.task, 0);
	CHECK_INT(r.as_root, 1);
	/* every GPU element in order, one that is no integer as -1 */
	CHECK_INT((long long)r.gpus.n, 4);
	CHECK_INT(r.gpus.index[0], 1);
	CHECK_INT(r.gpus.index[2], -1);
	CHECK_INT(r.gpus.index[3], 70);
	CHECK_INT((long long)r.gpus.mask, (1 << 1) | (1 << 3));
	desired_cleanup(&r);
}

TEST(defaults_of_what_an_entry_leaves_out)
{
	json_t *e = json_of("{\"attempt_id\": 3, \"rank\": 0, \"command\": [\"true\"]}");
	struct desired_rank r;
	char why[256] = "";
	desired_parse(e, &r);
	json_decref(e);
	CHECK_INT(desired_deepen(&r, why, sizeof(why)), 0);
	CHECK_INT(r.grace_ms, 10000);
	CHECK_INT(r.head_timeout_ms, 300000);
	CHECK_INT(r.job_id, 0);
	CHECK(r.cwd == NULL && r.env == NULL && r.notice == NULL && r.env_base == NULL);
	CHECK_INT((long long)r.gpus.n, 0);
	CHECK_INT((long long)r.mpi_hosts.n, 0);
	CHECK(r.mpi_hosts.v != NULL && r.mpi_hosts.v[0] == NULL);
	desired_cleanup(&r);
	/* unchecked, a key of the wrong type is as absent: it matches no rank */
	e = json_of("{\"attempt_id\": \"9\", \"rank\": null, \"session\": 1, \"gpus\": 3}");
	desired_parse(e, &r);
	json_decref(e);
	CHECK_INT(r.attempt_id, -1);
	CHECK_INT(r.rank, -1);
	CHECK_INT(r.session, 0);
	CHECK_INT((long long)r.gpus.mask, 0);
	desired_cleanup(&r);
	desired_cleanup(&r); /* cleaned up twice: nothing left to free */
}

TEST(a_bad_entry_is_refused_naming_the_field)
{
	json_t *e = json_of("{\"attempt_id\": 3, \"rank\": 0, \"command\": [\"true\"],"
	                    " \"grace_ms\": -1}");
	struct desired_rank r;
	char why[256] = "";
	desired_parse(e, &r);
	json_decref(e);
	CHECK_INT(desired_deepen(&r, why, sizeof(why)), ERR_INVALID);
	CHECK(strstr(why, "grace_ms") != NULL);
	CHECK_INT(r.deep, 0);
	CHECK(r.command.v == NULL);
	CHECK_INT(r.attempt_id, 3); /* what is held stays */
	desired_cleanup(&r);
	e = json_of("{\"attempt_id\": 3, \"rank\": 0}");
	desired_parse(e, &r);
	json_decref(e);
	CHECK_INT(desired_deepen(&r, why, sizeof(why)), ERR_INVALID);
	CHECK(strstr(why, "command") != NULL);
	desired_cleanup(&r);
}

static char *joined(char **envv)
{
	size_t len = 1;
	for (size_t i = 0; envv[i]; i++)
		len += strlen(envv[i]) + 1;
	char *s = calloc(1, len);
	for (size_t i = 0; envv[i]; i++) {
		if (i)
			strcat(s, "|");
		strcat(s, envv[i]);
	}
	return s;
}

static void envv_free(char **envv)
{
	for (size_t i = 0; envv && envv[i]; i++)
		free(envv[i]);
	free(envv);
}

TEST(the_environment_is_the_shared_one_under_its_own_then_the_agents)
{
	json_t *e = json_of("{\"attempt_id\": 3, \"rank\": 0, \"command\": [\"true\"],"
	                    " \"env\": {\"A\": \"own\", \"B\": \"own\"}, \"env_base\": \"j1\"}");
	json_t *envs = json_of("{\"j1\": {\"A\": \"job\", \"C\": \"job\"}}");
	json_t *extra = json_of("{\"C\": \"agent\", \"D\": \"agent\", \"B\": \"agent\"}");
	struct desired_rank r;
	char why[256] = "";
	desired_parse(e, &r);
	CHECK_INT(desired_deepen(&r, why, sizeof(why)), 0);
	char **envv = desired_envv(&r, envs, extra, why, sizeof(why));
	CHECK(envv != NULL);
	char *s = joined(envv);
	CHECK_STR(s, "C=job|A=own|B=own|D=agent");
	free(s);
	envv_free(envv);
	/* a key the answer's envs lack */
	json_object_del(envs, "j1");
	CHECK(desired_envv(&r, envs, extra, why, sizeof(why)) == NULL);
	CHECK(strstr(why, "env_base") != NULL);
	/* one that is not all strings */
	json_object_set_new(envs, "j1", json_pack("{s:i}", "N", 1));
	CHECK(desired_envv(&r, envs, extra, why, sizeof(why)) == NULL);
	CHECK(strstr(why, "'N'") != NULL);
	desired_cleanup(&r);
	json_decref(e);
	json_decref(envs);
	json_decref(extra);
}

TEST(a_notice_is_read_once_checked)
{
	json_t *e = json_of(full);
	struct desired_rank r;
	char why[256] = "";
	int64_t id = 0;
	const char *text = NULL;
	desired_parse(e, &r);
	CHECK_INT(desired_notice(&r, &id, &text, why, sizeof(why)), 1);
	CHECK_INT(id, 7);
	CHECK_STR(text, "ends soon");
	desired_cleanup(&r);
	json_object_set_new(e, "notice", json_pack("{s:i}", "id", 8));
	desired_parse(e, &r);
	CHECK_INT(desired_notice(&r, &id, &text, why, sizeof(why)), ERR_INVALID);
	CHECK(strstr(why, "text") != NULL);
	CHECK_INT(id, 7); /* untouched */
	desired_cleanup(&r);
	json_object_del(e, "notice");
	desired_parse(e, &r);
	CHECK_INT(desired_notice(&r, &id, &text, why, sizeof(why)), 0);
	desired_cleanup(&r);
	json_decref(e);
}

/* The throw-away field "probe" (built with ANVIL_FIELD_PROBE): the rank
 * sees it as ANVIL_PROBE, over the job's own; without it, nothing. */
TEST(a_probe_reaches_the_rank_as_anvil_probe)
{
	json_t *e = json_of("{\"attempt_id\": 3, \"rank\": 0, \"command\": [\"true\"],"
	                    " \"env\": {\"ANVIL_PROBE\": \"job's\"}, \"probe\": \"p-1\"}");
	struct desired_rank r;
	char why[256] = "";
	desired_parse(e, &r);
	json_decref(e);
	CHECK_INT(desired_deepen(&r, why, sizeof(why)), 0);
	char **envv = desired_envv(&r, NULL, NULL, why, sizeof(why));
	char *s = joined(envv);
#ifdef ANVIL_FIELD_PROBE
	CHECK_STR(r.probe, "p-1");
	CHECK_STR(s, "ANVIL_PROBE=job's|ANVIL_PROBE=p-1"); /* the last one counts */
#else
	CHECK_STR(s, "ANVIL_PROBE=job's");
#endif
	free(s);
	envv_free(envv);
	desired_cleanup(&r);
}

TEST_MAIN()
