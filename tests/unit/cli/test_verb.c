#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "cli/cli.h"
#include "cli/verb.h"

static json_t *load(const char *text)
{
	json_error_t je;
	json_t *v = json_loads(text, 0, &je);
	if (!v)
		FAIL_AT("bad test JSON: %s", je.text);
	return v;
}

static const char job_json[] =
        "{\"id\": 7, \"name\": \"train\", \"queue\": \"default\", \"priority\": 5,"
        " \"state\": \"running\", \"gpus\": 4, \"nodes\": 2,"
        " \"command\": [\"python3\", \"train.py\", \"--msg\", \"it's here\"],"
        " \"env\": {\"A\": \"1\"}, \"cwd\": null, \"grace_ms\": 10000,"
        " \"submit_time_ms\": 1790000000000, \"start_time_ms\": 1790000003000,"
        " \"end_time_ms\": null, \"exit_code\": null, \"reason\": \"\","
        " \"attempts\": [{\"id\": 9, \"number\": 1, \"state\": \"running\","
        "   \"master_addr\": \"127.0.0.1\", \"master_port\": 29507, \"ranks\": ["
        "     {\"rank\": 0, \"node_id\": 1, \"node\": \"node-1\", \"gpus\": [0, 1, 2, 3],"
        "      \"state\": \"running\", \"pid\": 4242, \"exit_code\": null, \"signal\": null},"
        "     {\"rank\": 1, \"node_id\": 2, \"node\": \"node-22\", \"gpus\": [4, 5, 6, 7],"
        "      \"state\": \"running\", \"pid\": 77, \"exit_code\": null, \"signal\": null}]}]}";

TEST(events_table_oldest_first)
{
	/* the server answers newest first */
	json_t *events =
	        load("[{\"id\": 2, \"time_ms\": 1790000060000, \"kind\": \"gpu.fault\", "
	             "\"job_id\": null,"
	             " \"node_id\": 1, \"message\": \"node n1 GPU 2 gpu [xid-48]: XID 48\"},"
	             " {\"id\": 1, \"time_ms\": 1790000000000, \"kind\": \"job.submitted\","
	             " \"job_id\": 7, \"node_id\": null, \"message\": \"job 7 queued\"}]");
	struct buf out;
	buf_init(&out);
	verb_events_render(events, 1790000120000, &out);
	const char *submitted = strstr(out.data, "job.submitted"),
	           *fault = strstr(out.data, "gpu.fault");
	CHECK(strncmp(out.data, "TIME", 4) == 0);
	CHECK(submitted && fault && submitted < fault);
	CHECK(strstr(out.data, "2m00s") != NULL); /* the submission's age */
	CHECK(strstr(out.data, "  7  ") != NULL || strstr(out.data, " 7  job 7") != NULL);
	CHECK(strstr(out.data, "-    node n1 GPU 2") != NULL ||
	      strstr(out.data, "-  node n1") != NULL);
	buf_reset(&out);
	json_t *empty = json_array();
	verb_events_render(empty, 0, &out);
	CHECK_STR(out.data, "no events\n");
	json_decref(empty);
	json_decref(events);
	buf_cleanup(&out);
}

TEST(jobs_table)
{
	char text[4096];
	snprintf(text, sizeof(text),
	         "[%s, {\"id\": 12, \"placement\": [\"node-1:0,1\", \"node-2:0,1\"], \"name\": "
	         "\"\", \"queue\": \"high\", \"state\": \"pending\","
	         " \"gpus\": 8, \"nodes\": 16, \"command\": [\"sleep\", \"1\"],"
	         " \"submit_time_ms\": 1790000060000, \"start_time_ms\": null,"
	         " \"exit_code\": null, \"reason\": \"waiting for 16 nodes with 8 free GPUs\"}]",
	         job_json);
	json_t *jobs = load(text);
	struct buf out;
	buf_init(&out);
	verb_jobs_render(jobs, 1790000125000, &out);
	CHECK_STR(out.data,
	          "ID  NAME   STATE    WHERE  QUEUE    NODES  GPUS/NODE  AGE    "
	          "RUNTIME  EXIT  COMMAND                                REASON\n"
	          " 7  train  running  -      default      2          4  2m05s  "
	          "2m02s       -  python3 train.py --msg 'it'\\''s here'  -\n"
	          "12  -      pending  -      high        16          8  1m05s  "
	          "-           -  sleep 1                                waiting for 16 nodes with "
	          "8 free GPUs\n");
	buf_reset(&out);
	json_t *empty = json_array();
	verb_jobs_render(empty, 0, &out);
	CHECK_STR(out.data, "no jobs\n");
	json_decref(empty);
	json_decref(jobs);
	buf_cleanup(&out);
}

/* A borrowed attempt is marked; a pending job that was requeued runs
 * nowhere even when the server (an older one) names its last node. */
TEST(jobs_table_marks_borrowed_and_requeued)
{
	json_t *jobs = load(
	        "[{\"id\": 4, \"name\": \"b\", \"queue\": \"shared\", \"state\": \"running\","
	        " \"borrowed\": true, \"placement\": [\"node-2:1\", \"node-3:0\"], \"gpus\": 1, "
	        "\"nodes\": 2,"
	        " \"command\": [\"sleep\", \"60\"], \"reason\": \"running\"},"
	        " {\"id\": 3, \"name\": \"a\", \"queue\": \"shared\", \"state\": \"pending\","
	        " \"borrowed\": false, \"placement\": [\"node-1:0\"], \"gpus\": 1, \"nodes\": 1,"
	        " \"command\": [\"sleep\", \"60\"], \"reason\": \"requeued\"}]");
	struct buf out;
	buf_init(&out);
	verb_jobs_render(jobs, 0, &out);
	CHECK_CONTAINS(out.data, "4  b     running (borrowed)  node-2:1 node-3:0  shared ");
	CHECK_CONTAINS(out.data, "3  a     pending             -                  shared ");
	CHECK(strstr(out.data, "node-1") == NULL);
	json_decref(jobs);
	buf_cleanup(&out);
}

/* Each attempt says whether it was borrowed and why it ended. */
TEST(show_attempt_causes)
{
	json_t *job = load(
	        "{\"id\": 5, \"name\": \"\", \"state\": \"running\", \"attempts\": ["
	        " {\"id\": 8, \"number\": 1, \"state\": \"preempted\", \"borrowed\": true,"
	        "  \"end_reason\": \"reclaimed by team a for job 9\", \"ranks\": []},"
	        " {\"id\": 11, \"number\": 2, \"state\": \"failed\", \"borrowed\": false,"
	        "  \"end_reason\": \"rank 0 on node-1 exited non-zero\\u001b\", \"ranks\": []},"
	        " {\"id\": 12, \"number\": 3, \"state\": \"running\", \"borrowed\": false,"
	        "  \"end_reason\": \"GPU 1 of node node-2 quarantined: XID 48\", \"ranks\": []},"
	        " {\"id\": 13, \"number\": 4, \"state\": \"running\", \"borrowed\": true,"
	        "  \"end_reason\": \"\", \"ranks\": []}]}");
	struct buf out;
	buf_init(&out);
	verb_show_render(job, 0, &out);
	CHECK_CONTAINS(out.data, "attempt 1 (id 8): preempted on borrowed quota\n"
	                         "  requeued: reclaimed by team a for job 9\n");
	CHECK_CONTAINS(out.data, "attempt 2 (id 11): failed\n"
	                         "  ended: rank 0 on node-1 exited non-zero?\n");
	CHECK_CONTAINS(out.data, "attempt 3 (id 12): running\n"
	                         "  stopping: GPU 1 of node node-2 quarantined: XID 48\n");
	CHECK_CONTAINS(out.data, "attempt 4 (id 13): running on borrowed quota\n  RANK");
	json_decref(job);
	buf_cleanup(&out);
}

TEST(show_job_with_attempts)
{
	setenv("TZ", "UTC", 1);
	json_t *job = load(job_json);
	struct buf out;
	buf_init(&out);
	verb_show_render(job, 1790000125000, &out);
	CHECK_STR(out.data, "job 7: train\n"
	                    "  state      running\n"
	                    "  queue      default (priority 5)\n"
	                    "  size       2 nodes x 4 GPUs\n"
	                    "  command    python3 train.py --msg 'it'\\''s here'\n"
	                    "  cwd        (the agent's work dir)\n"
	                    "  env        A=1\n"
	                    "  grace      10s\n"
	                    "  submitted  2026-09-21 14:13:20 (2m05s ago)\n"
	                    "  started    2026-09-21 14:13:23 (2m02s ago)\n"
	                    "  ended      -\n"
	                    "  exit code  -\n"
	                    "\n"
	                    "attempt 1 (id 9): running, master 127.0.0.1:29507\n"
	                    "  RANK  NODE     GPUS     STATE     PID  EXIT  SIGNAL\n"
	                    "     0  node-1   0,1,2,3  running  4242     -       -\n"
	                    "     1  node-22  4,5,6,7  running    77     -       -\n");
	json_decref(job);
	buf_cleanup(&out);
}

/* Exported variables are listed by name (the server never sends their
 * values), wrapped under the label; the ones set with --env show K=V. */
TEST(show_lists_exported_names)
{
	json_t *job = load("{\"id\": 4, \"state\": \"pending\", \"env\": {\"A\": \"1\"},"
	                   " \"exported\": [\"LR\", \"PATH\", \"HOME\", \"LANG\","
	                   " \"VIRTUAL_ENV\", \"PYTHONPATH\", \"HF_HOME\", \"WANDB_PROJECT\","
	                   " \"TOKENIZERS_PARALLELISM\", \"OMP_NUM_THREADS\", \"BAD\\u001b\"],"
	                   " \"attempts\": []}");
	struct buf out;
	buf_init(&out);
	verb_show_render(job, 0, &out);
	CHECK_CONTAINS(out.data, "  env        A=1\n"
	                         "  exported   LR PATH HOME LANG VIRTUAL_ENV PYTHONPATH HF_HOME "
	                         "WANDB_PROJECT\n"
	                         "             TOKENIZERS_PARALLELISM OMP_NUM_THREADS BAD?\n"
	                         "  grace");
	json_decref(job);
	buf_cleanup(&out);
}

TEST(show_says_an_mpi_job_is_one)
{
	json_t *job = load("{\"id\": 5, \"state\": \"running\", \"mpi\": true,"
	                   " \"command\": [\"a.out\"], \"attempts\": []}");
	struct buf out;
	buf_init(&out);
	verb_show_render(job, 0, &out);
	CHECK_CONTAINS(out.data, "  command    a.out\n"
	                         "  mpi        mpirun on rank 0 over every rank's node (anvil run "
	                         "--mpi)\n");
	json_decref(job);
	buf_cleanup(&out);
}

TEST(show_pending_job_says_why)
{
	json_t *job = load("{\"id\": 3, \"name\": \"x\\u001b[2J\", \"state\": \"pending\","
	                   " \"reason\": \"queue 'default' is full\", \"attempts\": []}");
	struct buf out;
	buf_init(&out);
	verb_show_render(job, 0, &out);
	CHECK_CONTAINS(out.data, "job 3: x?[2J\n");
	CHECK_CONTAINS(out.data, "  reason     queue 'default' is full\n");
	CHECK_CONTAINS(out.data, "no attempts yet\n");
	json_decref(job);
	buf_cleanup(&out);
}

TEST(nodes_table)
{
	json_t *nodes = load(
	        "[{\"id\": 1, \"name\": \"node-1\", \"address\": \"127.0.0.1\", \"state\": "
	        "\"ready\","
	        "  \"last_seen_ms_ago\": 12, \"gpus_total\": 4, \"gpus_allocated\": 1,"
	        "  \"gpus\": [{\"model\": \"NVIDIA H200\"}, {\"model\": \"NVIDIA H200\"}]},"
	        " {\"id\": 10, \"name\": \"n10\", \"address\": \"10.0.0.10\", \"state\": \"lost\","
	        "  \"last_seen_ms_ago\": 93000, \"gpus_total\": 16, \"gpus_allocated\": 0,"
	        "  \"gpus\": [{\"model\": \"A100\"}, {\"model\": \"H200\"}, {\"model\": "
	        "\"A100\"}]},"
	        " {\"id\": 11, \"name\": \"cpu\", \"state\": \"cordoned\", \"gpus_total\": 0,"
	        "  \"gpus_allocated\": 0, \"gpus\": []}]");
	struct buf out;
	buf_init(&out);
	verb_nodes_render(nodes, 0, &out);
	CHECK_STR(out.data,
	          "ID  NAME    STATE     GPUS  ALLOC  MODEL        ADDRESS    LAST SEEN  REASON\n"
	          " 1  node-1  ready        4    1/4  NVIDIA H200  127.0.0.1  12ms ago   -\n"
	          "10  n10     lost        16   0/16  A100, H200   10.0.0.10  1m33s ago  -\n"
	          "11  cpu     cordoned     0    0/0  -            -          -          -\n");
	json_decref(nodes);
	buf_cleanup(&out);
}

TEST(run_wait_exit_codes)
{
	const struct {
		const char *job;
		int want;
	} cases[] = {
	        {"{\"state\": \"succeeded\", \"exit_code\": 0}", 0},
	        {"{\"state\": \"failed\", \"exit_code\": 3}", 3},
	        {"{\"state\": \"failed\", \"exit_code\": 137}", 137},
	        {"{\"state\": \"failed\", \"exit_code\": 0}", 1},
	        {"{\"state\": \"failed\", \"exit_code\": null}", 1},
	        {"{\"state\": \"failed\", \"exit_code\": 300}", 255},
	        {"{\"state\": \"cancelled\", \"exit_code\": 143}", 130},
	        {"{\"state\": \"lost\", \"exit_code\": null}", 75},
	        {"{}", 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *job = load(cases[i].job);
		CHECK_INT(verb_run_exit(job), cases[i].want);
		json_decref(job);
	}
	CHECK_INT(CLI_EXIT_CANCELLED, 130);
	CHECK_INT(CLI_EXIT_LOST, 75);
}

/* The rank whose last lines `run --wait --rank R` shows when the job failed
 * elsewhere: the one the reason names, else the first that failed. */
TEST(failed_rank_from_the_reason_or_the_ranks)
{
	const struct {
		const char *job;
		int64_t want;
	} cases[] = {
	        {"{\"state\": \"failed\", \"reason\": \"rank 1 on node-2 exited non-zero\"}", 1},
	        {"{\"state\": \"failed\", \"reason\": \"rank 12 on n was lost: gone\"}", 12},
	        {"{\"state\": \"succeeded\", \"reason\": \"rank 1 on node-2 exited\"}", -1},
	        {"{\"state\": \"failed\", \"reason\": \"rankx\"}", -1},
	        {"{\"state\": \"failed\", \"reason\": \"rank 1x on\"}", -1},
	        {"{\"state\": \"failed\", \"exit_code\": 3, \"reason\": \"?\", \"attempts\": "
	         "[{\"ranks\": ["
	         "{\"rank\": 0, \"state\": \"exited\", \"exit_code\": 143},"
	         "{\"rank\": 1, \"state\": \"exited\", \"exit_code\": 3}]}]}",
	         1},
	        {"{\"state\": \"failed\", \"exit_code\": 127, \"attempts\": [{\"ranks\": ["
	         "{\"rank\": 0, \"state\": \"exited\", \"exit_code\": 0},"
	         "{\"rank\": 1, \"state\": \"failed_to_start\", \"exit_code\": null}]}]}",
	         1},
	        {"{\"state\": \"failed\", \"attempts\": []}", -1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *job = load(cases[i].job);
		CHECK_INT(verb_logs_failed_rank(job), cases[i].want);
		json_decref(job);
	}
}

TEST(command_line_quoting_and_cut)
{
	json_t *cmd = load("[\"sh\", \"-c\", \"echo $HOME\", \"\", \"a=b\"]");
	struct buf out;
	buf_init(&out);
	verb_command_line(cmd, 0, &out);
	CHECK_STR(out.data, "sh -c 'echo $HOME' '' a=b");
	buf_reset(&out);
	verb_command_line(cmd, 10, &out);
	CHECK_STR(out.data, "sh -c '...");
	json_decref(cmd);
	buf_cleanup(&out);
}

TEST(final_states)
{
	CHECK(verb_state_final("succeeded"));
	CHECK(verb_state_final("failed"));
	CHECK(verb_state_final("cancelled"));
	CHECK(verb_state_final("lost"));
	CHECK(!verb_state_final("running"));
	CHECK(!verb_state_final("pending"));
	CHECK(!verb_state_final(NULL));
}

/* An array the server grouped is one row: its span and limit, every
 * member counted by state, the next member's reason; a member listed
 * alone is ARRAY_INDEX. */
TEST(jobs_table_shows_a_grouped_array_as_one_row)
{
	json_t *jobs = load(
	        "[{\"id\": 131, \"name\": \"sweep\", \"queue\": \"default\", \"gpus\": 0,"
	        "  \"nodes\": 1, \"command\": [\"prep.sh\"], \"submit_time_ms\": 1790000000000,"
	        "  \"start_time_ms\": 1790000001000, \"end_time_ms\": null,"
	        "  \"reason\": \"every eligible node runs its limit of 4 CPU-only ranks (1 node)\","
	        "  \"array\": {\"id\": 131, \"max_running\": 10, \"members\": 1000,"
	        "   \"first_index\": 0, \"last_index\": 999,"
	        "   \"states\": {\"pending\": 992, \"running\": 4, \"succeeded\": 4}}},"
	        " {\"id\": 130, \"name\": \"train\", \"queue\": \"default\", \"state\": "
	        "\"running\","
	        "  \"gpus\": 8, \"nodes\": 1, \"command\": [\"train.sh\"], \"placement\": "
	        "[\"node-1:0\"], \"reason\": \"\"},"
	        " {\"id\": 40, \"name\": \"m\", \"queue\": \"default\", \"state\": \"failed\","
	        "  \"gpus\": 1, \"nodes\": 1, \"command\": [\"x\"], \"exit_code\": 3,"
	        "  \"array\": {\"id\": 37, \"index\": 3, \"max_running\": 0}}]");
	struct buf out;
	buf_init(&out);
	verb_jobs_render(jobs, 1790000060000, &out);
	CHECK_CONTAINS(out.data, "131_[0-999%10]  sweep  4 running, 992 pending, 4 succeeded  -");
	CHECK_CONTAINS(out.data, "prep.sh   every eligible node runs its limit of 4 CPU-only");
	CHECK_CONTAINS(out.data, "           130  train  running");
	CHECK_CONTAINS(out.data, "          37_3  m      failed");
	json_decref(jobs);
	buf_cleanup(&out);
}

/* JOB and ARRAY_INDEX, as every verb that takes a job reads them. */
TEST(job_references)
{
	const struct {
		const char *text;
		int64_t id, index;
	} good[] = {{"12", 12, -1},
	            {"131_50", 131, 50},
	            {"7_0", 7, 0},
	            {"9223372036854775807", INT64_MAX, -1}};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct verb_job_ref r = {0, 0};
		char err[256] = "";
		CHECK_INT(verb_job_ref_parse(good[i].text, &r, err, sizeof(err)), 0);
		CHECK_INT(r.id, good[i].id);
		CHECK_INT(r.index, good[i].index);
	}
	const char *bad[] = {"",
	                     "x",
	                     "12_",
	                     "_3",
	                     "12_x",
	                     "0",
	                     "0_1",
	                     "-12",
	                     "+12",
	                     " 12",
	                     "12 ",
	                     "12_-1",
	                     "12_3_4",
	                     "12__3",
	                     "1.5",
	                     "12_+3",
	                     "99999999999999999999"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct verb_job_ref r = {5, 5};
		char err[256] = "";
		if (verb_job_ref_parse(bad[i], &r, err, sizeof(err)) == 0)
			FAIL_AT("\"%s\" was taken for a job", bad[i]);
		CHECK_INT(r.id, 5); /* untouched */
		CHECK_CONTAINS(err, "is not a job");
		CHECK_CONTAINS(err, "ARRAY_INDEX (12_3)");
	}
}

/* `anvil cancel ARRAY`: one line, with how many members it cancelled. */
TEST(cancel_an_array_says_it_on_one_line)
{
	json_t *resp = load("{\"job\": {\"id\": 131, \"grace_ms\": 10000},"
	                    " \"array\": {\"id\": 131, \"members\": 1000, \"cancelled\": 990,"
	                    " \"stopping\": 4, \"ended\": 6}}");
	struct buf out;
	buf_init(&out);
	verb_cancel_report(resp, &out);
	CHECK_STR(out.data, "cancelled array 131: 994 of its 1000 members (6 had ended); 4 running "
	                    "get SIGTERM, SIGKILL after 10s\n");
	json_decref(resp);
	resp = load("{\"job\": {\"id\": 5}, \"array\": {\"id\": 5, \"members\": 3,"
	            " \"cancelled\": 0, \"stopping\": 0, \"ended\": 3}}");
	buf_reset(&out);
	verb_cancel_report(resp, &out);
	CHECK_STR(out.data, "array 5: all 3 members had already ended; nothing to cancel\n");
	json_decref(resp);
	buf_cleanup(&out);
}

/* A member held behind one that waits for CPU room is not said to wait
 * for a member to end. */
TEST(why_a_held_array_member_waits)
{
	json_t *job = load("{\"id\": 140, \"name\": \"sweep\", \"state\": \"pending\", \"gpus\": 0,"
	                   " \"nodes\": 1, \"queue\": \"default\", \"team\": \"default\","
	                   " \"reason\": \"array 131: 4 of its jobs run (limit %10); the next in"
	                   " line waits: every eligible node runs its limit of 4 CPU-only ranks"
	                   " (1 node)\"}");
	struct buf out;
	buf_init(&out);
	verb_why_render(job, 0, &out);
	CHECK_CONTAINS(out.data, "is pending: array 131: 4 of its jobs run (limit %10)");
	CHECK_CONTAINS(out.data, "estimated start: unknown (a CPU-only job starts when");
	json_decref(job);
	job = load("{\"id\": 140, \"state\": \"pending\", \"gpus\": 1, \"nodes\": 1,"
	           " \"reason\": \"array 131: 10 of its jobs run, its limit (%10)\"}");
	buf_reset(&out);
	verb_why_render(job, 0, &out);
	CHECK_CONTAINS(out.data, "estimated start: when a running member of its array ends");
	json_decref(job);
	buf_cleanup(&out);
}

TEST_MAIN()
