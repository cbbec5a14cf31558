/* What the fleet verbs print (cli/fleetshow.h): a plan with every kind of
 * change, no changes, the refresh report, history, one revision, status,
 * and the progress lines of a followed apply. */
#include <string.h>

#include "../test.h"
#include "cli/fleetshow.h"

static json_t *load(const char *text)
{
	json_error_t je;
	json_t *v = json_loads(text, 0, &je);
	if (!v)
		FAIL_AT("bad test JSON: %s (line %d column %d)", je.text, je.line, je.column);
	return v;
}

static const char plan_json[] =
        "{\"fleet\": \"lab\", \"revision\": 3, \"spec_changed\": true, \"changes\": 5,"
        " \"nodes\": {\"add\": [{\"name\": \"h-9\", \"group\": \"h\", \"pool\": \"onprem\","
        "   \"profile\": \"h200\", \"address\": \"10.0.0.9\"}],"
        "  \"remove\": [{\"name\": \"old-1\"}],"
        "  \"change\": [{\"name\": \"h-1\", \"pool\": {\"from\": \"spare\", \"to\": \"onprem\"},"
        "    \"labels\": {\"set\": {\"gpu\": \"h200\"}, \"remove\": [\"x\"]},"
        "    \"profile\": {\"from\": \"h200\", \"to\": \"h200\", \"drain\": true,"
        "     \"changes\": [{\"key\": \"driver\", \"from\": \"550.1\", \"to\": \"560.2\", "
        "\"drain\": true},"
        "                   {\"key\": \"sysctl\", \"from\": {}, \"to\": {\"vm.x\": \"1\"},"
        "                    \"drain\": false}]}},"
        "   {\"name\": \"h-2\", \"restore\": true},"
        "   {\"name\": \"h-3\", \"reconverge\": {\"why\": \"drifted from profile h200\"}}],"
        "  \"unchanged\": 4},"
        " \"queues\": {\"add\": [], \"change\": [{\"name\": \"prod\", \"changes\": [{\"key\":"
        "   \"priority\", \"from\": 90, \"to\": 100}, {\"key\": \"quotas.x\", \"from\": 4,"
        "   \"to\": null}]}], \"unchanged\": 0},"
        " \"teams\": {\"add\": [{\"name\": \"search\", \"weight\": 2}], \"change\": [],"
        "   \"unchanged\": 0},"
        " \"drain\": [\"h-1\"], \"upgrade\": {\"max_unavailable\": 2,"
        "   \"max_unavailable_per_block\": 1, \"validation_timeout_ms\": 900000}}";

TEST(plan_shows_every_kind_of_change)
{
	json_t *plan = load(plan_json);
	struct buf out;
	buf_init(&out);
	fleetshow_plan(plan, &out);
	CHECK_STR(out.data,
	          "fleet lab: planned against revision 3\n"
	          "nodes to add (waiting for their agents to join):\n"
	          "  + h-9  group h, pool onprem, profile h200, address 10.0.0.9\n"
	          "nodes to remove (drained, then kept drained as not in the spec):\n"
	          "  - old-1\n"
	          "nodes to change:\n"
	          "  ~ h-1\n"
	          "             pool spare -> onprem\n"
	          "             labels: set gpu=h200, remove x\n"
	          "             profile h200 -> h200 (rolled out: needs a drain): driver 550.1 -> "
	          "560.2 (needs a drain), sysctl {} -> {\"vm.x\":\"1\"}\n"
	          "  ~ h-2\n"
	          "             back in the spec: returned to service\n"
	          "  ~ h-3\n"
	          "             converge again (in place): drifted from profile h200\n"
	          "queues:\n"
	          "  ~ prod  priority 90 -> 100, quotas.x 4 -> none\n"
	          "teams:\n"
	          "  + search  weight 2\n"
	          "rolling upgrade: 1 node, at most 2 out at once and 1 per block; each cordoned, "
	          "drained, converged, checked within 15m, uncordoned\n"
	          "5 changes.\n");
	buf_cleanup(&out);
	json_decref(plan);
}

TEST(added_queues_read_as_settings)
{
	json_t *plan = load("{\"fleet\": \"lab\", \"revision\": 1, \"changes\": 1, \"nodes\": {},"
	                    " \"queues\": {\"add\": [{\"name\": \"prod\", \"priority\": 100,"
	                    " \"borrowing\": false, \"default_time_limit_ms\": 259200000,"
	                    " \"quotas\": {\"a\": 8, \"b\": 4}}]}, \"teams\": {}, \"drain\": []}");
	struct buf out;
	buf_init(&out);
	fleetshow_plan(plan, &out);
	CHECK_CONTAINS(out.data, "  + prod  priority 100, borrowing false, default time limit 72h, "
	                         "quotas a=8 b=4\n");
	buf_cleanup(&out);
	json_decref(plan);
}

TEST(plan_without_changes)
{
	json_t *plan =
	        load("{\"fleet\": \"lab\", \"revision\": 0, \"spec_changed\": false,"
	             " \"changes\": 0, \"nodes\": {\"add\": [], \"remove\": [], \"change\": []},"
	             " \"queues\": {}, \"teams\": {}, \"drain\": []}");
	struct buf out;
	buf_init(&out);
	fleetshow_plan(plan, &out);
	CHECK_STR(out.data, "fleet lab: planned against a cluster no spec was applied to\n"
	                    "no changes: the cluster matches the spec.\n");
	buf_cleanup(&out);
	json_decref(plan);
}

TEST(refresh_lists_drift)
{
	json_t *d = load("{\"counts\": {\"profiled\": 3, \"converged\": 1, \"converging\": 0,"
	                 " \"unreported\": 0, \"drifted\": 1, \"failed\": 1, \"mismatched\": 1},"
	                 " \"nodes\": [{\"name\": \"h-2\", \"state\": \"drifted\", \"issues\":"
	                 "  [\"drifted from profile p at step 'sysctl vm.x'\","
	                 "   \"driver: the profile pins 1, the node reports 2\"]}]}");
	struct buf out;
	buf_init(&out);
	fleetshow_refresh(d, &out);
	CHECK_STR(out.data, "3 nodes with a profile: 1 converged, 0 converging, 0 unreported, 1 "
	                    "drifted, 1 failed; 1 with facts that differ from it\n"
	                    "NODE  STATE    DRIFT\n"
	                    "h-2   drifted  drifted from profile p at step 'sysctl vm.x'\n"
	                    "-     -        driver: the profile pins 1, the node reports 2\n");
	buf_cleanup(&out);
	json_decref(d);
}

TEST(history_and_status)
{
	json_t *revs =
	        load("[{\"id\": 2, \"time_ms\": 0, \"who\": \"ops\", \"result\": \"applied\","
	             " \"rollback_of\": 1, \"summary\": \"1 queue\"}]");
	struct buf out;
	buf_init(&out);
	fleetshow_history(revs, 0, &out);
	CHECK_CONTAINS(out.data, "REV  APPLIED");
	CHECK_CONTAINS(out.data, "ops  applied (rollback to 1)  1 queue\n");
	buf_reset(&out);
	json_t *st = load(
	        "{\"revision\": {\"id\": 2, \"fleet\": \"lab\", \"who\": \"ops\", \"time_ms\": 0,"
	        " \"result\": \"rolling out\"},"
	        " \"rollout\": {\"revision\": 2, \"state\": \"running\", \"done\": 1, \"total\": 2,"
	        "  \"reason\": \"\", \"policy\": {\"max_unavailable\": 1, "
	        "\"max_unavailable_per_block\":"
	        "  1, \"validation_timeout_ms\": 600000}, \"nodes\": [{\"name\": \"h-1\", "
	        "\"phase\":"
	        "  \"done\", \"since_ms\": 1000, \"detail\": \"\"}, {\"name\": \"h-2\", \"phase\":"
	        "  \"validating\", \"since_ms\": 4000, \"detail\": \"\"}]},"
	        " \"nodes\": [{\"name\": \"h-1\", \"joined\": true, \"profile\": \"p\", \"state\":"
	        "  \"ready\", \"reason\": \"\"}, {\"name\": \"h-2\", \"joined\": true, \"profile\":"
	        "  \"p\", \"state\": \"drained\", \"reason\": \"rollout of revision 2\"},"
	        "  {\"name\": \"h-3\", \"joined\": false, \"profile\": \"p\", \"state\": \"not "
	        "joined\","
	        "   \"reason\": \"waiting for its agent to join\"}]}");
	fleetshow_status(st, 10000, &out);
	CHECK_CONTAINS(out.data,
	               "rollout of revision 2: running, 1 of 2 nodes done (at most 1 out, "
	               "1 per block; checks within 10m)\n");
	CHECK_CONTAINS(out.data, "  h-2   validating  6s");
	CHECK_CONTAINS(out.data, "nodes: 3 in the spec, 2 joined, 1 ready\n");
	CHECK_CONTAINS(out.data, "  h-3   p        not joined  waiting for its agent to join\n");
	buf_cleanup(&out);
	json_decref(st);
	json_decref(revs);
}

/* `anvil fleet history REV` prints the spec as the YAML it was: its lines,
 * indentation and tabs kept, a CRLF file's CRs dropped, and no other
 * control character reaching the terminal. */
TEST(one_revision_shows_its_yaml_line_by_line)
{
	json_t *rev = json_pack(
	        "{s:i,s:s,s:i,s:s,s:s,s:s,s:s,s:s}", "id", 3, "fleet", "lab", "time_ms", 0, "who",
	        "ops", "file", "fleet.yaml", "summary", "1 queue", "result", "applied", "text",
	        "name: lab\r\nqueues:\n  prod: {priority: 100}\t# tab\n  bad: \"\x1b[2J\"\n");
	struct buf out;
	buf_init(&out);
	fleetshow_revision(rev, 0, &out);
	CHECK_CONTAINS(out.data, "revision 3 of fleet lab\n");
	CHECK_CONTAINS(out.data, "  file       fleet.yaml\n");
	CHECK_CONTAINS(out.data, "\n\nname: lab\nqueues:\n  prod: {priority: 100}\t# tab\n"
	                         "  bad: \"?[2J\"\n");
	CHECK(strchr(out.data, '\r') == NULL && strchr(out.data, 0x1b) == NULL);
	buf_cleanup(&out);
	json_decref(rev);
}

TEST(progress_says_each_change_once)
{
	json_t *watch = load("{\"h-1\": true, \"h-2\": true}"), *seen = json_object();
	json_t *st =
	        load("{\"rollout\": {\"revision\": 1, \"state\": \"running\", \"nodes\":"
	             " [{\"name\": \"h-1\", \"phase\": \"draining\", \"detail\": \"\"},"
	             "  {\"name\": \"h-2\", \"phase\": \"queued\", \"detail\": \"\"}]},"
	             " \"nodes\": [{\"name\": \"h-1\", \"state\": \"draining\", \"reason\": \"r\"},"
	             "  {\"name\": \"h-2\", \"state\": \"ready\", \"reason\": \"\"}]}");
	struct buf out;
	buf_init(&out);
	CHECK_INT(fleetshow_progress(st, 1, watch, seen, &out), 2);
	CHECK_STR(out.data, "  h-1  draining\n  h-2  queued: waiting for its turn\n");
	buf_reset(&out);
	CHECK_INT(fleetshow_progress(st, 1, watch, seen, &out), 0);
	json_object_set_new(
	        json_array_get(json_object_get(json_object_get(st, "rollout"), "nodes"), 0),
	        "phase", json_string("converging"));
	CHECK_INT(fleetshow_progress(st, 1, watch, seen, &out), 1);
	CHECK_STR(out.data, "  h-1  converging\n");
	buf_cleanup(&out);
	json_decref(st);
	json_decref(watch);
	json_decref(seen);
}

TEST_MAIN()
