/* What `anvil wf ls` and `anvil wf show` print (cli/wfshow.h), from the
 * server's JSON: the DAG's needs on each task's first line, a sweep's
 * children with their parameters and values, cache status, and why a run
 * did not succeed. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "../test_json.h"
#include "cli/wfshow.h"

static const char *const exec_json =
        "{\"id\": 3, \"name\": \"demo\", \"state\": \"failed\", \"submit_ms\": 1000,"
        " \"end_ms\": 61000, \"runs\": 4, \"counts\": {\"succeeded\": 2, \"cached\": 1,"
        " \"failed\": 1}, \"bundle\": \"sha256/0123456789abcdef\", \"reason\":"
        " \"task report failed: job 9 failed: exit 1\","
        " \"workflow\": {\"tasks\": [{\"name\": \"prep\"}, {\"name\": \"train\","
        " \"needs\": [\"prep\"]}, {\"name\": \"report\", \"needs\": [\"train\"]}]},"
        " \"run_list\": ["
        " {\"label\": \"prep\", \"task_index\": 0, \"index\": 0, \"state\": \"cached\","
        "  \"tries\": 0, \"cached_exec\": 1, \"cached_from\": 1, \"params\": {},"
        "  \"outputs\": {\"data\": {\"kind\": \"dir\", \"key\": \"sha256/x\"}}},"
        " {\"label\": \"train[0]\", \"task_index\": 1, \"index\": 0, \"state\": \"succeeded\","
        "  \"tries\": 1, \"job_id\": 7, \"node\": \"node-1\", \"start_ms\": 2000,"
        "  \"end_ms\": 4000, \"params\": {\"scale\": 1}, \"outputs\": {\"score\":"
        "  {\"kind\": \"value\", \"value\": \"5050\"}}, \"cache\": \"miss: no earlier result\"},"
        " {\"label\": \"train[1]\", \"task_index\": 1, \"index\": 1, \"state\": \"succeeded\","
        "  \"tries\": 2, \"job_id\": 8, \"node\": \"node-2\", \"start_ms\": 2000,"
        "  \"end_ms\": 5000, \"params\": {\"scale\": 2}, \"outputs\": {\"score\":"
        "  {\"kind\": \"value\", \"value\": \"10100\"}}, \"why\": \"job 6 failed: exit 1\"},"
        " {\"label\": \"report\", \"task_index\": 2, \"index\": 0, \"state\": \"failed\","
        "  \"tries\": 1, \"job_id\": 9, \"node\": \"node-1\", \"start_ms\": 6000,"
        "  \"end_ms\": 7000, \"params\": {}, \"why\": \"job 9 failed: exit 1\"}]}";

TEST(show_draws_the_runs_with_their_needs_params_outputs_and_cache)
{
	json_t *x = test_json(exec_json);
	struct buf out;
	buf_init(&out);
	wfshow_exec(x, 100000, &out);
	CHECK_CONTAINS(out.data, "workflow 3 (demo): failed, 3/4 ok, 1 failed\n");
	CHECK_CONTAINS(out.data, ", code sha256/0123456789");
	CHECK_CONTAINS(out.data, "reason: task report failed: job 9 failed: exit 1\n");
	CHECK_CONTAINS(out.data, "TASK      NEEDS  STATE      TRIES  JOB  NODE    TIME");
	CHECK_CONTAINS(out.data, "prep      -      cached         0  -    -");
	CHECK_CONTAINS(out.data, "hit (exec 1, run 1)");
	CHECK_CONTAINS(out.data, "train[0]  prep   succeeded      1  7    node-1  2s    scale=1  "
	                         "score=5050");
	CHECK_CONTAINS(out.data, "train[1]  prep   succeeded      2  8    node-2  3s    scale=2");
	CHECK_CONTAINS(out.data, "report    train  failed");
	/* why, for what did not succeed only (train[1]'s retry is not repeated) */
	CHECK_CONTAINS(out.data, "\nreport: job 9 failed: exit 1\n");
	CHECK(strstr(out.data, "train[1]: job 6") == NULL);
	buf_cleanup(&out);
	json_decref(x);
}

TEST(ls_lists_executions_with_their_progress)
{
	json_t *body = test_json("{\"workflows\": [{\"id\": 2, \"name\": \"demo\", \"state\":"
	                         " \"running\", \"submit_ms\": 1000, \"runs\": 5, \"counts\":"
	                         " {\"succeeded\": 2, \"running\": 3}}]}");
	json_t *list = json_object_get(body, "workflows");
	struct buf out;
	buf_init(&out);
	wfshow_list(list, 11000, &out);
	CHECK_CONTAINS(out.data, "ID  NAME  STATE    RUNS    SUBMITTED");
	CHECK_CONTAINS(out.data, " 2  demo  running  2/5 ok");
	CHECK_CONTAINS(out.data, "10s");
	buf_cleanup(&out);
	json_decref(body);
	list = json_array();
	buf_init(&out);
	wfshow_list(list, 0, &out);
	CHECK_STR(out.data, "no workflow executions\n");
	buf_cleanup(&out);
	json_decref(list);
}

TEST_MAIN()
