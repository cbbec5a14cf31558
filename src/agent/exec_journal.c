/* exec_journal.c - the ranks' records in the journal (agent/journal.h):
 * the lines the agent writes, what the shims' lines tell a running rank,
 * old segments compacted, and a restarted executor's replay: the ranks
 * read back and adopted, and the cgroups no record tells of stopped.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/exec_int.h"
#include "agent/journal.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define STARTING_LOST_MS 5000 /* an adopted rank whose shim never recorded its pid */

/* Rank records live in the journal (agent/journal.h). The agent writes a
 * rank's line before its shim starts (with "error" if it could not start),
 * a snapshot of its final state when the segment its lines are in goes,
 * and "forgotten" when exec_forget drops it; the shim appends "shim" and
 * "pgid" once the command runs and "wait_status" when it ends. */

/* The rank's whole record as the agent knows it: its start line, and what
 * a snapshot carries of its end. */
static json_t *record_line(const struct exec_rank *r, int with_end)
{
	json_t *o =
	        json_pack("{s:I,s:i,s:I,s:I,s:I}", "attempt_id", (json_int_t)r->attempt_id, "rank",
	                  r->rank, "job_id", (json_int_t)r->job_id, "grace_ms",
	                  (json_int_t)r->grace_ms, "start_time_ms", (json_int_t)r->start_wall_ms);
	if (r->error && !r->lost)
		json_object_set_new(o, "error", json_string(r->error));
	if (with_end && r->have_status)
		json_object_set_new(o, "wait_status", json_integer(r->wait_status));
	else if (with_end && r->lost)
		json_object_set_new(o, "lost", json_string(r->error ? r->error : "lost"));
	if (with_end && r->oom_kills > 0)
		json_object_set_new(o, "oom_kills", json_integer(r->oom_kills));
	if (with_end && r->pgid > 0 && r->shim != 0)
		json_object_set_new(o, "pgid", json_integer(r->pgid));
	return o;
}

int exec_journal_put(struct exec *e, json_t *o)
{
	char *text = jv_dump(o);
	json_decref(o);
	int rc = journal_append(e->journal, text, strlen(text));
	free(text);
	return rc;
}

/* Appends the rank's line; its shim then appends to the same segment. */
int exec_journal_write(struct exec *e, struct exec_rank *r, int with_end)
{
	int rc = exec_journal_put(e, record_line(r, with_end));
	r->seg = journal_seq(e->journal);
	return rc;
}

/* What the shim recorded: its pid and the command's group (once), and
 * the wait status. */
static void learn(struct exec_rank *r, const json_t *o)
{
	int64_t shim = jv_int(o, "shim", 0), pgid = jv_int(o, "pgid", 0);
	if (r->shim == 0 && shim > 0 && pgid > 0 && shim <= INT32_MAX && pgid <= INT32_MAX) {
		r->shim = (pid_t)shim;
		r->pgid = (pid_t)pgid;
	}
	json_t *st = json_object_get(o, "wait_status");
	if (json_is_integer(st)) {
		r->wait_status = (int)json_integer_value(st);
		r->have_status = 1;
	}
}

/* Everything a line says about a rank being loaded (exec_new). */
static void load_fields(struct exec_rank *r, const json_t *o, uint64_t seq)
{
	if (json_object_get(o, "start_time_ms")) {
		r->job_id = jv_int(o, "job_id", 0);
		r->grace_ms = jv_int(o, "grace_ms", 10000);
		r->start_wall_ms = jv_int(o, "start_time_ms", 0);
		r->seg = seq;
	}
	const char *error = jv_str(o, "error", NULL), *lost = jv_str(o, "lost", NULL);
	if (error || lost) {
		free(r->error);
		r->error = xstrdup(error ? error : lost);
		r->lost = !error;
	}
	int64_t oom = jv_int(o, "oom_kills", 0); /* note_oom's, exec.c */
	if (oom > r->oom_kills && oom <= INT32_MAX)
		r->oom_kills = (int)oom;
	if (json_is_integer(json_object_get(o, "pgid")) && !json_object_get(o, "shim"))
		r->pgid = (pid_t)jv_int(o, "pgid", 0); /* a snapshot's: the group is gone */
	learn(r, o);
}

/* journal_read's callback: while loading, builds the ranks; later, tells
 * running ranks what their shims recorded. */
static void on_line(void *ctx, uint64_t seq, json_t *o)
{
	struct exec *e = ctx;
	int64_t attempt_id = jv_int(o, "attempt_id", 0), rank = jv_int(o, "rank", -1);
	if (attempt_id <= 0 || rank < 0 || rank > (1 << 20))
		return;
	size_t i;
	struct exec_rank *r = exec_rank_find(e, attempt_id, (int)rank, &i);
	if (json_object_get(o, "forgotten")) {
		if (r && e->loading)
			exec_rank_drop(e, i);
		return;
	}
	if (e->loading) {
		if (!r)
			r = exec_rank_add(e, attempt_id, (int)rank);
		load_fields(r, o, seq);
	} else if (r && r->state == EXEC_RUNNING) {
		learn(r, o);
	}
}

/* Reads what shims have appended, for ranks that have no socket to tell. */
void exec_journal_refresh(struct exec *e)
{
	int need = 0;
	for (size_t i = 0; i < e->n && !need; i++)
		need = e->ranks[i]->state == EXEC_RUNNING && e->ranks[i]->sock < 0;
	if (need)
		journal_read(e->journal, on_line, e);
}

/* Old journal segments go once no running rank's shim writes to them;
 * what they say of ranks not yet forgotten moves to the current one. */
void exec_journal_compact(struct exec *e)
{
	uint64_t old[4];
	size_t n = journal_old(e->journal, old, 4);
	for (size_t k = 0; k < n && k < 4; k++) {
		int busy = 0;
		for (size_t i = 0; i < e->n && !busy; i++)
			busy = e->ranks[i]->seg == old[k] && e->ranks[i]->state == EXEC_RUNNING;
		if (busy)
			continue;
		int rc = 0;
		for (size_t i = 0; i < e->n && rc == 0; i++)
			if (e->ranks[i]->seg == old[k])
				rc = exec_journal_write(e, e->ranks[i], 1);
		if (rc == 0)
			journal_drop(e->journal, old[k]);
	}
}

void exec_set_journal_roll(struct exec *e, int64_t bytes)
{
	journal_set_roll(e->journal, bytes);
}

/* A rank loaded from the journal: final, or
 * running under a shim that is not our child, polled from now on. */
static void adopt(struct exec *e, struct exec_rank *r)
{
	if (r->cgroup && access(r->cgroup, F_OK) != 0) {
		free(r->cgroup);
		r->cgroup = NULL;
	}
	for (int i = 0; i < EXEC_LIMITS; i++) {
		char *path = e->limit_root[i] ? xasprintf("%s/%lld-%d", e->limit_root[i],
		                                          (long long)r->attempt_id, r->rank)
		                              : NULL;
		for (int k = 0; path && k < i; k++)
			if (r->limits[k] && strcmp(r->limits[k], path) == 0)
				path[0] = '\0'; /* the same directory as an earlier one */
		if (path && path[0] && access(path, F_OK) == 0)
			r->limits[i] = path;
		else
			free(path);
	}
	if (r->error && !r->lost) {
		exec_rank_move(r, EXEC_FAILED);
	} else if (r->lost) {
		exec_set_final(r, 0, r->error);
	} else { /* running, as exec_rank_add made it */
		if (r->shim == 0)
			r->lost_at = now_ms() + STARTING_LOST_MS; /* the shim may still write it */
		exec_poll_running(e, r, now_ms(), 0);
	}
	log_info("rank adopted attempt=%lld rank=%d job=%lld state=%s pid=%d",
	         (long long)r->attempt_id, r->rank, (long long)r->job_id,
	         r->state == EXEC_RUNNING ? "running" : "final", (int)r->pgid);
}

/* What a restarted agent finds in its cgroup root: the spares of the one
 * before it, removed; and a rank's group (<attempt>-<rank>) that no record
 * tells of, because the journal lost its lines (damaged, or removed).
 * Nothing could report that rank's end or stop it when asked, so its
 * processes are stopped now and the rank is reported lost, which the
 * server acts on as for any lost rank. One pass, after the journal. */
static void stale_cgroups_remove(struct exec *e)
{
	DIR *d = e->cgroup_root ? opendir(e->cgroup_root) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "spare-", 6) == 0) {
			char *path = xasprintf("%s/%s", e->cgroup_root, de->d_name);
			log_info("removing a stale spare cgroup=%s", path);
			exec_doom_cgroup(e, path);
			continue;
		}
		char head[32];
		const char *dash = strchr(de->d_name, '-');
		size_t len = dash ? (size_t)(dash - de->d_name) : 0;
		int64_t attempt, rank;
		if (len == 0 || len >= sizeof(head))
			continue;
		memcpy(head, de->d_name, len);
		head[len] = '\0';
		if (parse_i64(head, 1, INT64_MAX, &attempt) != 0 ||
		    parse_i64(dash + 1, 0, 1 << 20, &rank) != 0 ||
		    exec_rank_find(e, attempt, (int)rank, NULL))
			continue;
		struct exec_rank *r = exec_rank_add(e, attempt, (int)rank);
		log_warn("a rank that no journal record tells of: stopping it attempt=%lld rank=%d "
		         "cgroup=%s",
		         (long long)attempt, (int)rank, r->cgroup);
		exec_set_final(r, 0,
		               "the agent lost its record of this rank (its journal was damaged or "
		               "removed) and stopped its processes");
		exec_doom_cgroup(e, r->cgroup);
		r->cgroup = NULL;
		exec_journal_write(e, r, 1);
	}
	if (d)
		closedir(d);
	/* A killed process leaves its cgroup a moment after the signal. */
	for (int tries = 0; e->ndoomed && tries < 20; tries++) {
		sleep_ms(5);
		exec_tidy_doomed(e);
	}
}

void exec_journal_load(struct exec *e)
{
	e->loading = 1;
	journal_read(e->journal, on_line, e);
	e->loading = 0;
	stale_cgroups_remove(e);
	for (size_t i = 0; i < e->n; i++)
		adopt(e, e->ranks[i]);
}
