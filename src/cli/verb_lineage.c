/* verb_lineage.c - `anvil lineage`: where a workflow run's results came
 * from and where they went (GET /v1/lineage), as a tree (cli/lineshow.h),
 * the server's JSON or Graphviz text; and `--export EXEC`, an execution's
 * lineage as OpenLineage run events (flow/openlineage.h), written one per
 * line to a file or stdout, or POSTed one by one to an endpoint such as
 * Marquez's (docs/workflows.md, "Lineage"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/httpc.h"
#include "base/jv.h"
#include "base/version.h"
#include "cli/cli.h"
#include "cli/lineshow.h"
#include "cli/verb.h"
#include "flow/openlineage.h"

#define POST_TIMEOUT_MS 30000

static const struct cliargs_opt opts[] = {
        {"downstream", 'd', CLIARGS_FLAG, NULL, "where it went, not where it came from"},
        {"depth", 0, CLIARGS_INT, "N", "at most N edges away (default: no limit)"},
        {"json", 0, CLIARGS_FLAG, NULL, "print the server's graph as JSON"},
        {"dot", 0, CLIARGS_FLAG, NULL, "print the graph as Graphviz text (dot -Tsvg)"},
        {"export", 0, CLIARGS_FLAG, NULL, "EXEC's lineage as OpenLineage run events"},
        {"file", 'o', CLIARGS_STR, "PATH", "--export: write them to PATH, one a line"},
        {"url", 0, CLIARGS_STR, "URL", "--export: POST each to URL"},
        {"namespace", 0, CLIARGS_STR, "NS", "--export: their namespace (default anvil)"},
        {"producer", 0, CLIARGS_STR, "URI", "--export: their producer (default urn:anvil:VERSION)"},
        {NULL, 0, 0, NULL, NULL},
};

/* ---- --export ---- */

static int write_events(const char *path, const json_t *events)
{
	FILE *f = path ? fopen(path, "w") : stdout;
	if (!f) {
		fprintf(stderr, "anvil lineage: cannot write %s: %s\n", path, strerror(errno));
		return CLI_EXIT_FAILED;
	}
	size_t i;
	const json_t *e;
	json_array_foreach (events, i, e) {
		char *s = json_dumps(e, JSON_COMPACT);
		fprintf(f, "%s\n", s ? s : "{}");
		free(s);
	}
	int bad = ferror(f);
	if ((path ? fclose(f) : fflush(f)) != 0)
		bad = 1;
	if (bad) {
		fprintf(stderr, "anvil lineage: cannot write %s: %s\n", path ? path : "stdout",
		        strerror(errno));
		return CLI_EXIT_FAILED;
	}
	if (path)
		printf("%zu event(s) written to %s\n", json_array_size(events), path);
	return CLI_EXIT_OK;
}

/* POSTs each event in turn; the first one refused or not delivered ends
 * it (the events before it were taken). */
static int post_events(const char *url, const json_t *events)
{
	struct httpc *h = httpc_new();
	const char *key = getenv("OPENLINEAGE_API_KEY");
	struct buf resp;
	buf_init(&resp);
	int ret = CLI_EXIT_OK;
	size_t i;
	const json_t *e;
	json_array_foreach (events, i, e) {
		char *body = json_dumps(e, JSON_COMPACT);
		int status = 0;
		buf_reset(&resp);
		int rc = httpc_do(h, "POST", url, key, body, strlen(body), POST_TIMEOUT_MS, &status,
		                  &resp);
		free(body);
		if (rc < 0) {
			fprintf(stderr, "anvil lineage: cannot send event %zu to %s: %s\n", i + 1,
			        url, httpc_error(h));
			ret = CLI_EXIT_UNREACHABLE;
			break;
		}
		if (status < 200 || status > 299) {
			fprintf(stderr,
			        "anvil lineage: %s answered %d to event %zu (%s %s): %.300s\n", url,
			        status, i + 1, verb_str(e, "eventType"),
			        verb_str(json_object_get(e, "job"), "name"),
			        resp.data ? resp.data : "");
			ret = CLI_EXIT_FAILED;
			break;
		}
	}
	if (ret == CLI_EXIT_OK)
		printf("%zu event(s) sent to %s\n", json_array_size(events), url);
	buf_cleanup(&resp);
	httpc_free(h);
	return ret;
}

static int export_events(struct verb_ctx *v, const json_t *graph)
{
	const char *ns = cliargs_str(&v->args, "namespace"),
	           *producer = cliargs_str(&v->args, "producer"),
	           *url = cliargs_str(&v->args, "url");
	struct openlineage_opts o = {.ns = ns ? ns : "anvil",
	                             .producer = producer ? producer : "urn:anvil:" ANVIL_VERSION};
	char err[256];
	json_t *events = openlineage_events(graph, &o, err, sizeof(err));
	if (!events) {
		fprintf(stderr, "anvil lineage: %s\n", err);
		return CLI_EXIT_FAILED;
	}
	int ret = url ? post_events(url, events)
	              : write_events(cliargs_str(&v->args, "file"), events);
	json_decref(events);
	return ret;
}

/* ---- the verb ---- */

/* The export's options make sense together, and only with --export. */
static int check_export(struct verb_ctx *v, int whole)
{
	const char *url = cliargs_str(&v->args, "url"), *ns = cliargs_str(&v->args, "namespace"),
	           *producer = cliargs_str(&v->args, "producer");
	if (!whole)
		return verb_usage_error(v, "--export takes an execution id (EXEC), not \"%s\"",
		                        v->args.pos[0]);
	if (cliargs_flag(&v->args, "json") || cliargs_flag(&v->args, "dot") ||
	    cliargs_flag(&v->args, "downstream") || cliargs_get(&v->args, "depth")->set)
		return verb_usage_error(v,
		                        "--export takes --file, --url, --namespace and --producer "
		                        "only");
	if (url && cliargs_str(&v->args, "file"))
		return verb_usage_error(v, "--file or --url, not both");
	if (url && strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
		return verb_usage_error(v, "--url %s: expected an http:// or https:// URL", url);
	if (ns && !*ns)
		return verb_usage_error(v, "--namespace: must not be empty");
	if (producer && (!strchr(producer, ':') || strchr(producer, ' ')))
		return verb_usage_error(v, "--producer %s: expected a URI (scheme:...)", producer);
	return CLI_EXIT_OK;
}

static int check_show(struct verb_ctx *v, int whole)
{
	static const char *const only_export[] = {"file", "url", "namespace", "producer"};
	for (size_t i = 0; i < sizeof(only_export) / sizeof(only_export[0]); i++)
		if (cliargs_get(&v->args, only_export[i])->set)
			return verb_usage_error(v, "--%s goes with --export", only_export[i]);
	if (cliargs_flag(&v->args, "json") && cliargs_flag(&v->args, "dot"))
		return verb_usage_error(v, "--json or --dot, not both");
	const struct cliargs_value *depth = cliargs_get(&v->args, "depth");
	if (depth->set && (depth->num < 0 || depth->num > 1000000))
		return verb_usage_error(v, "--depth %lld: expected 0 to 1000000",
		                        (long long)depth->num);
	if (whole && !cliargs_flag(&v->args, "json") && !cliargs_flag(&v->args, "dot"))
		return verb_usage_error(v, "a tree starts from one run: give EXEC/TASK (a whole "
		                           "execution with --json, --dot or --export)");
	return CLI_EXIT_OK;
}

static void print_graph(struct verb_ctx *v, const json_t *graph)
{
	if (cliargs_flag(&v->args, "json")) {
		verb_print_json(graph);
		return;
	}
	struct buf out;
	buf_init(&out);
	if (cliargs_flag(&v->args, "dot"))
		lineshow_dot(graph, &out);
	else
		lineshow_tree(graph, &out);
	fputs(out.data ? out.data : "", stdout);
	buf_cleanup(&out);
}

static int lineage_fn(struct verb_ctx *v)
{
	int exporting = cliargs_flag(&v->args, "export"), whole = 0;
	struct buf path;
	buf_init(&path);
	buf_adds(&path, "/v1/lineage?");
	char err[512];
	int ret = CLI_EXIT_OK;
	if (lineshow_query(v->args.pos[0], &path, &whole, err, sizeof(err)) != 0)
		ret = verb_usage_error(v, "%s", err);
	if (ret == CLI_EXIT_OK)
		ret = exporting ? check_export(v, whole) : check_show(v, whole);
	if (ret == CLI_EXIT_OK && cliargs_flag(&v->args, "downstream"))
		buf_adds(&path, "&direction=downstream");
	if (ret == CLI_EXIT_OK && cliargs_get(&v->args, "depth")->set)
		buf_printf(&path, "&depth=%lld", (long long)cliargs_get(&v->args, "depth")->num);
	if (ret == CLI_EXIT_OK && exporting) /* its runs, and the URIs they were given */
		buf_adds(&path, "&direction=upstream&depth=1");
	if (ret == CLI_EXIT_OK)
		ret = verb_connect(v);
	json_t *graph = NULL;
	if (ret == CLI_EXIT_OK)
		ret = cliconn_call(&v->conn, "GET", path.data, NULL, &graph);
	if (ret == CLI_EXIT_OK)
		ret = exporting ? export_events(v, graph) : (print_graph(v, graph), CLI_EXIT_OK);
	json_decref(graph);
	buf_cleanup(&path);
	return ret;
}

const struct verb verb_lineage = {
        .name = "lineage",
        .fn = lineage_fn,
        .opts = opts,
        .min_pos = 1,
        .max_pos = 1,
        .usage = "EXEC/TASK[INDEX] | OBJECT | URI [--downstream] [--depth N] [--json|--dot] | "
                 "--export EXEC [--file PATH|--url URL]",
        .summary = "where a workflow run's results came from and went; OpenLineage export",
        .help = "Prints the lineage of a workflow run (EXEC/TASK, EXEC/TASK[I] in a sweep),\n"
                "an object (sha256/<hex>) or an input URI (s3://...) as a tree: upstream,\n"
                "what it came from (the runs it needed, the objects it read and who wrote\n"
                "them, the run a cached result came from), or with --downstream where it\n"
                "went. Each run shows its state, job, node, exit status and code hash.\n"
                "--json prints the graph with every attempt's record (command, environment\n"
                "with secrets removed, nodes, GPUs, times); --dot prints it for Graphviz.\n"
                "\n"
                "--export EXEC writes the execution as OpenLineage run events (START, then\n"
                "COMPLETE, FAIL or ABORT for each attempt), one JSON a line to stdout or\n"
                "--file PATH, or POSTs each to --url (Marquez: http://HOST:5000/api/v1/lineage;\n"
                "$OPENLINEAGE_API_KEY, if set, is sent as a bearer token).\n"
                "\n"
                "What is recorded and how secrets are removed: docs/workflows.md, \"Lineage\".\n",
};
