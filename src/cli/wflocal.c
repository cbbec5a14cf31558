/* wflocal.c - `anvil wf run --local` (wflocal.h). */
#include "cli/wflocal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/hash.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/tarball.h"
#include "base/util.h"
#include "cli/bundle.h"
#include "cli/cli.h"
#include "cli/local.h"
#include "cli/wfshow.h"
#include "flow/codeset.h"
#include "flow/engine.h"
#include "objstore/blob.h"
#include "store/flowcache.h"
#include "store/store.h"

struct runner {
	struct verb_ctx *v;
	char *dir;     /* ANVIL_HOME/local */
	char *objects; /* file://DIR/objects */
	char self[4096];
	char cwd[4096];
	char code_dir[4096]; /* --code DIR, absolute; "" without code */
	struct store *db;
	struct blob_store *store;
	struct flow_exec *x;
};

/* A number from the local database's counter `name`, n of them reserved. */
static int64_t next_id(struct store *db, const char *name, int64_t n)
{
	char *v = NULL;
	int64_t id = 1;
	if (store_meta_get(db, name, &v) == 0 && v)
		parse_i64(v, 1, INT64_MAX, &id);
	free(v);
	char next[32];
	snprintf(next, sizeof(next), "%lld", (long long)id + (long long)n);
	store_meta_set(db, name, next);
	return id;
}

static int open_runner(struct runner *w, struct verb_ctx *v)
{
	w->v = v;
	char *client = cliconn_file_path(); /* ANVIL_HOME/client.json: local/ beside it */
	char *slash = strrchr(client, '/');
	*slash = '\0';
	w->dir = xasprintf("%s/local", client);
	free(client);
	w->objects = xasprintf("file://%s/objects", w->dir);
	ssize_t n = readlink("/proc/self/exe", w->self, sizeof(w->self) - 1);
	w->self[n > 0 ? n : 0] = '\0';
	if (!getcwd(w->cwd, sizeof(w->cwd)))
		w->cwd[0] = '\0';
	char err[512];
	char *db = xasprintf("%s/flows.db", w->dir);
	int rc = mkdir_p(w->dir, 0755);
	if (rc == 0)
		rc = store_open(db, 0, &w->db);
	if (rc == 0)
		rc = blob_open(w->objects, &w->store, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "%s", err_msg(rc));
	if (rc)
		fprintf(stderr, "anvil wf run --local: cannot use %s: %s\n", db, err);
	free(db);
	return rc;
}

static void close_runner(struct runner *w)
{
	flow_exec_free(w->x);
	blob_close(w->store);
	store_close(w->db);
	free(w->objects);
	free(w->dir);
}

/* "sha256/<hex>" of the tree's bundle, as `anvil wf run` would store it,
 * and its index (flow/codeset.h; NULL when it cannot be made: the cache
 * then compares whole bundles). */
static int code_hash(const char *dir, char out[80], json_t **index)
{
	struct bundle_tmp t;
	char err[512], hex[HASH_HEX_LEN + 1];
	int rc = bundle_tmp_open(&t, err, sizeof(err));
	if (rc == 0 && (rc = bundle_pack(dir, t.path, err, sizeof(err))) != 0)
		fprintf(stderr, "anvil wf run --local: the code in %s: %s\n", dir, err);
	else if (rc)
		fprintf(stderr, "anvil wf run --local: %s\n", err);
	int64_t size;
	if (rc == 0 && (rc = hash_file_sha256(t.path, hex, &size)) == 0)
		snprintf(out, 80, "sha256/%s", hex);
	int fd = rc == 0 ? open(t.path, O_RDONLY | O_CLOEXEC) : -1;
	if (fd >= 0 && tarball_index(fd, index, err, sizeof(err)) != 0)
		*index = NULL;
	else if (fd >= 0)
		codeset_add_listings(*index);
	if (fd >= 0)
		close(fd);
	bundle_tmp_close(&t);
	return rc;
}

/* The run's job body as the wrapper runs it here (wflocal.h). */
static json_t *local_body(struct runner *w, const struct flow_run *r, const json_t *t,
                          json_t *fetch, const char *report)
{
	json_t *body = flow_job_body(w->x, r, t);
	json_t *doc = flow_task_doc(w->x, r, t, fetch);
	json_object_del(doc, "bundle");                 /* the code is here */
	if (jv_bool(doc, "trace", 0) && w->code_dir[0]) /* what it reads of it, recorded */
		json_object_set_new(doc, "code_dir", json_string(w->code_dir));
	else
		json_object_del(doc, "trace");
	json_t *cmd = json_pack("[s,s,s,s,s,s,s]", w->self, "_task", "--work-dir", w->dir,
	                        "--grace-ms", "10000", "--");
	json_array_extend(cmd, json_object_get(body, "command"));
	json_object_set_new(body, "command", cmd);
	json_t *env = json_object_get(body, "env");
	char *text = jv_dump(doc);
	json_object_set_new(env, "ANVIL_TASK", json_string(text));
	json_object_set_new(env, "ANVIL_SERVER", json_string(w->objects));
	json_object_set_new(env, "ANVIL_TASK_REPORT", json_string(report));
	json_object_set_new(env, "ANVIL_EXEC_TOKEN", json_string("local"));
	free(text);
	json_decref(doc);
	json_object_set_new(body, "cwd", json_string(w->cwd));
	json_object_del(body, "gpus"); /* one rank, with what this machine has */
	json_object_del(body, "nodes");
	json_object_del(body, "queue");
	json_object_del(body, "priority");
	return body;
}

/* Runs r's command here; its status. */
static void run_job(struct runner *w, struct flow_run *r, const json_t *t, json_t *fetch)
{
	char label[96];
	flow_run_label(w->x, r, label, sizeof(label));
	char *report = xasprintf("%s/report-%lld.json", w->dir, (long long)r->id);
	unlink(report);
	json_t *body = local_body(w, r, t, fetch, report);
	if (r->tries)
		printf("== %s: running (try %d)\n", label, r->tries + 1);
	else
		printf("== %s: running\n", label);
	fflush(stdout);
	flow_started(w->x, r, r->id, wall_ms());
	int status = local_run_as(w->v, body, r->id);
	json_t *rep = json_load_file(report, 0, NULL);
	json_t *outputs = json_incref(json_object_get(rep, "outputs"));
	const json_t *reads = json_object_get(rep, "reads");
	if (json_is_array(reads))
		r->reads = json_deep_copy(reads);
	json_decref(rep);
	char why[96];
	snprintf(why, sizeof(why), "its command exited with status %d", status);
	flow_ended(w->x, r, status == 0, stop_signal() != 0, outputs, why, wall_ms());
	if (r->state == FLOW_SUCCEEDED && r->cache_key[0])
		flowcache_record(w->db, w->store, w->x, r, wall_ms());
	printf("== %s: %s%s%s\n", label, flow_state_name(r->state), r->why[0] ? ": " : "", r->why);
	fflush(stdout);
	json_decref(outputs);
	json_decref(body);
	unlink(report);
	free(report);
}

static void start(struct runner *w, struct flow_run *r)
{
	char err[512], label[96];
	flow_run_label(w->x, r, label, sizeof(label));
	json_t *t = flow_rendered(w->x, r, err, sizeof(err));
	if (!t) {
		flow_failed(w->x, r, err, wall_ms());
		printf("== %s: failed: %s\n", label, err);
		return;
	}
	json_t *fetch = flow_fetch(w->x, r);
	if (flowcache_enabled(t) &&
	    flowcache_lookup(w->db, w->store, w->x, r, t, fetch, wall_ms())) {
		printf("== %s: cached (from local execution %lld)\n", label,
		       (long long)r->cached_exec);
		json_decref(fetch);
	} else {
		run_job(w, r, t, fetch); /* takes fetch */
	}
	json_decref(t);
}

/* Until every run is final: what may start, one at a time; the backoff of
 * a retry waited out. */
static void drive(struct runner *w)
{
	struct flow_exec *x = w->x;
	int *ready = xcalloc((size_t)x->nruns, sizeof(int));
	while (!flow_settle(x, wall_ms())) {
		if (stop_signal() && !x->cancel)
			flow_cancel(x, wall_ms());
		int n = flow_next(x, wall_ms(), ready, 1);
		if (n == 1) {
			start(w, x->runs[ready[0]]);
			continue;
		}
		int64_t due = 0;
		for (int i = 0; i < x->nruns; i++)
			if (x->runs[i]->state == FLOW_WAITING && (!due || x->runs[i]->due_ms < due))
				due = x->runs[i]->due_ms;
		int64_t wait = due - wall_ms();
		sleep_ms(wait > 0 && wait < 1000 ? wait : wait > 0 ? 1000 : 1);
	}
	free(ready);
}

int wflocal_run(struct verb_ctx *v, json_t *wf, int no_cache, const char *code_dir)
{
	struct runner w = {0};
	int rc = open_runner(&w, v);
	char code[80] = "";
	json_t *index = NULL;
	if (rc == 0 && code_dir)
		rc = code_hash(code_dir, code, &index);
	if (rc == 0 && code_dir && !realpath(code_dir, w.code_dir))
		w.code_dir[0] = '\0';
	w.x = rc == 0 ? flow_exec_new(wf) : NULL;
	if (w.x)
		w.x->code_index = index;
	else
		json_decref(index);
	json_decref(wf);
	if (!w.x) {
		close_runner(&w);
		return CLI_EXIT_FAILED;
	}
	w.x->id = next_id(w.db, "local_exec_next", 1);
	int64_t first = next_id(w.db, "local_run_next", w.x->nruns);
	for (int i = 0; i < w.x->nruns; i++)
		w.x->runs[i]->id = first + i;
	w.x->no_cache = no_cache;
	w.x->submit_ms = wall_ms();
	snprintf(w.x->bundle, sizeof(w.x->bundle), "%s", code);
	/* --json: the execution alone on stdout, the rest (what the runs and
	 * their commands print) on stderr */
	int json = cliargs_flag(&v->args, "json"), saved = json ? dup(STDOUT_FILENO) : -1;
	if (saved >= 0)
		dup2(STDERR_FILENO, STDOUT_FILENO);
	printf("local workflow %lld (%s): %d task(s), %d run(s), in %s\n", (long long)w.x->id,
	       w.x->name, w.x->ntasks, w.x->nruns, w.cwd);
	stop_signals_catch();
	drive(&w);
	fflush(stdout);
	if (saved >= 0) {
		dup2(saved, STDOUT_FILENO);
		close(saved);
	}
	json_t *doc = flow_exec_json(w.x, 1);
	if (json) {
		verb_print_json(doc);
	} else {
		struct buf out;
		buf_init(&out);
		wfshow_exec(doc, wall_ms(), &out);
		printf("\n%s", out.data ? out.data : "");
		buf_cleanup(&out);
	}
	json_decref(doc);
	int ret = w.x->state == FLOW_SUCCEEDED   ? CLI_EXIT_OK
	          : w.x->state == FLOW_CANCELLED ? CLI_EXIT_CANCELLED
	                                         : CLI_EXIT_FAILED;
	close_runner(&w);
	return ret;
}
