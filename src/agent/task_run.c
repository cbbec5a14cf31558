/* task_run.c - `anvil _task`: the wrapper process of a workflow task's
 * rank (task.h says what it does, in order). Single-threaded; every
 * failure of its own is one line on stderr and a non-zero exit. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/bundles.h"
#include "agent/fence.h"
#include "agent/readset.h"
#include "agent/task.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/objects.h"
#include "base/tarball.h"
#include "base/util.h"
#include "objstore/blob.h"

#define TRIES           4 /* an object call that failed upstream, tried again after 1, 2, 4 s */
#define POST_TIMEOUT_MS 30000

/* Within each of those tries: a call whose answer is lost (the server
 * restarts) is sent again, an upload with its one Idempotency-Key, for
 * this long (base/objects.h); with the tries, a server away for about
 * 25 s fails no task. */
#define TASK_RETRY_MS 5000

struct wrapper {
	struct task_doc doc;
	const char *work_dir;
	int64_t grace_ms;
	char **command; /* after "--", rendered (malloc'd), NULL-terminated */
	int64_t attempt_id;
	int64_t node_rank;
	const char *server, *token;
	const char *ckpt_dir; /* ANVIL_CHECKPOINT_DIR */
	char *attempt_dir, *in_dir, *out_dir;
	char *bundle_dir;   /* the unpacked bundle, or NULL */
	struct httpc *http; /* NULL until the first call */
	struct objects obj;
	/* ANVIL_SERVER file://DIR: no server (`anvil wf run --local`): objects
	 * in that store, the outputs written to ANVIL_TASK_REPORT */
	struct blob_store *local;
	char ckpt_hash[HASH_HEX_LEN + 1]; /* the stored checkpoint's at start; "": none */
	int cmd_status;                   /* the command's exit status (128+N: signal N) */
	struct readset *reads;            /* what the command reads of the code, or NULL */
};

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
	char line[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "anvil _task: %s\n", line);
	return -1;
}

/* ---- start: arguments, environment, the server ---- */

#define USAGE "usage: anvil _task --work-dir DIR [--grace-ms N] -- COMMAND..."

/* `_task --work-dir DIR [--grace-ms N] -- COMMAND...` (argv[0] is "_task"). */
static int parse_args(int argc, char **argv, struct wrapper *w)
{
	w->grace_ms = 10000;
	int i = 1;
	while (i < argc && strcmp(argv[i], "--") != 0) {
		const char *flag = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(flag, "--work-dir") == 0 && v)
			w->work_dir = v;
		else if (!(strcmp(flag, "--grace-ms") == 0 && v &&
		           parse_i64(v, 0, 3600000, &w->grace_ms) == 0))
			return fail("argument '%s': " USAGE " (the agent runs it for a workflow "
			            "task's rank)",
			            flag);
		i += 2;
	}
	if (!w->work_dir || i + 1 >= argc)
		return fail(USAGE);
	int n = argc - i - 1;
	w->command = xcalloc((size_t)n + 1, sizeof(*w->command));
	for (int k = 0; k < n; k++)
		w->command[k] = xstrdup(argv[i + 1 + k]);
	return 0;
}

static int read_env(struct wrapper *w)
{
	char err[512];
	if (task_doc_parse(getenv(TASK_DOC_ENV), &w->doc, err, sizeof(err)))
		return fail("%s", err);
	const char *a = getenv("ANVIL_ATTEMPT_ID"), *r = getenv("NODE_RANK");
	if (!a || parse_i64(a, 1, INT64_MAX, &w->attempt_id))
		return fail("ANVIL_ATTEMPT_ID: '%s' is not an attempt id", a ? a : "(not set)");
	if (r && parse_i64(r, 0, 1048576, &w->node_rank))
		return fail("NODE_RANK: '%s' is not a rank", r);
	w->server = getenv("ANVIL_SERVER");
	w->token = getenv("ANVIL_EXEC_TOKEN");
	w->ckpt_dir = getenv("ANVIL_CHECKPOINT_DIR");
	if (w->doc.checkpoint && (!w->ckpt_dir || !*w->ckpt_dir))
		return fail("the task has checkpoint key '%s' but ANVIL_CHECKPOINT_DIR is not set "
		            "(the job must be submitted with checkpointing)",
		            w->doc.checkpoint);
	return 0;
}

/* The object client, made on first use. */
static int connect_server(struct wrapper *w)
{
	if (w->http || w->local)
		return 0;
	if (w->server && strncmp(w->server, "file://", 7) == 0) {
		char err[512];
		if (geteuid() != getuid()) /* fenced, still root's: not a store of the node's */
			return fail("ANVIL_SERVER: a fenced task does not open %s", w->server);
		if (blob_open(w->server, &w->local, err, sizeof(err)) != 0)
			return fail("the local object store %s: %s", w->server, err);
		return 0;
	}
	if (!w->server || !*w->server)
		return fail("ANVIL_SERVER is not set (the agent sets it for a task's rank)");
	if (!w->token || !*w->token)
		return fail("ANVIL_EXEC_TOKEN is not set (the server sets it for a task's rank)");
	w->http = httpc_new();
	w->obj = (struct objects){.server = w->server,
	                          .token = w->token,
	                          .attempt_id = w->attempt_id,
	                          .http = w->http,
	                          .retry_ms = TASK_RETRY_MS};
	return 0;
}

static int retryable(int rc)
{
	return rc == ERR_UPSTREAM || rc == ERR_TIMEOUT;
}

enum object_op { OP_GET, OP_STAT, OP_PUT, OP_PUT_NAMED };

/* The call on the local store. */
static int local_call(struct wrapper *w, enum object_op op, const char *key, const char *path,
                      char out_key[OBJECTS_KEY_MAX], struct objects_info *info)
{
	struct blob_info b = {0};
	int rc = 0;
	switch (op) {
	case OP_GET: rc = blob_get_file(w->local, key, path, &b); break;
	case OP_STAT: rc = blob_stat(w->local, key, &b); break;
	case OP_PUT: rc = blob_put_file(w->local, path, out_key, &b); break;
	case OP_PUT_NAMED: rc = blob_put_named_file(w->local, key, path, &b); break;
	}
	if (rc == 0 && info) {
		info->size = b.size;
		snprintf(info->sha256, sizeof(info->sha256), "%s", b.sha256);
		info->uploaded = op == OP_PUT || op == OP_PUT_NAMED;
	}
	if (rc && rc != ERR_NOTFOUND)
		snprintf(w->obj.error, sizeof(w->obj.error), "%s %s: %s", blob_uri(w->local),
		         key ? key : path, err_msg(rc));
	return rc;
}

/* One object call, tried again (after 1, 2, 4 s) while the server is
 * away or answers 5xx: a server restart must not fail a task. */
static int object_call(struct wrapper *w, enum object_op op, const char *key, const char *path,
                       char out_key[OBJECTS_KEY_MAX], struct objects_info *info)
{
	int rc = connect_server(w);
	if (rc == 0 && w->local)
		return local_call(w, op, key, path, out_key, info);
	for (int t = 0; rc == 0; t++) {
		switch (op) {
		case OP_GET: rc = objects_get(&w->obj, key, path, info); break;
		case OP_STAT: rc = objects_stat(&w->obj, key, info); break;
		case OP_PUT: rc = objects_put(&w->obj, path, out_key, info); break;
		case OP_PUT_NAMED: rc = objects_put_named(&w->obj, key, path, info); break;
		}
		if (!retryable(rc) || t + 1 == TRIES)
			return rc;
		sleep_ms(1000LL << t);
		rc = 0;
	}
	return rc;
}

static int get_object(struct wrapper *w, const char *key, const char *path,
                      struct objects_info *info)
{
	return object_call(w, OP_GET, key, path, NULL, info);
}

static int stat_object(struct wrapper *w, const char *key, struct objects_info *info)
{
	return object_call(w, OP_STAT, key, NULL, NULL, info);
}

/* Stores path by content (name NULL: key gets it) or under name. */
static int put_object(struct wrapper *w, const char *name, const char *path,
                      char key[OBJECTS_KEY_MAX], struct objects_info *info)
{
	return object_call(w, name ? OP_PUT_NAMED : OP_PUT, name, path, key, info);
}

/* ---- 1. the bundle ---- */

static int is_dir(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Under the lock: download, check, unpack into a scratch tree, rename it
 * in. A scratch left by a killed rank is removed first. */
static int unpack_bundle(struct wrapper *w, const char *final)
{
	char *scratch = xasprintf("%s.partial", final), *tar = xasprintf("%s/bundle.tar", scratch);
	char *tree = xasprintf("%s/tree", scratch);
	char err[700];
	struct objects_info info;
	int rc = rm_rf(scratch);
	if (rc == 0)
		rc = mkdir_p(tree, 0755);
	if (rc)
		fail("cannot make %s: %s", tree, strerror(-rc));
	else if ((rc = get_object(w, w->doc.bundle, tar, &info)))
		fail("the code bundle: %s", w->obj.error);
	else if ((rc = tarball_unpack(tar, tree, err, sizeof(err))))
		fail("the code bundle %s: %s", w->doc.bundle, err);
	else if (rename(tree, final) < 0)
		rc = fail("the code bundle: cannot rename %s to %s: %s", tree, final,
		          strerror(errno));
	else
		fprintf(stderr, "anvil _task: code bundle %s (%lld bytes) unpacked into %s\n",
		        w->doc.bundle, (long long)info.size, final);
	rm_rf(scratch);
	free(tar);
	free(tree);
	free(scratch);
	return rc ? -1 : 0;
}

static int fetch_bundle(struct wrapper *w)
{
	if (!w->doc.bundle)
		return 0;
	char hex[HASH_HEX_LEN + 1];
	objects_key_hash(w->doc.bundle, hex);
	char *dir = xasprintf("%s/bundles", w->work_dir);
	w->bundle_dir = xasprintf("%s/%s", dir, hex);
	/* under the lock: found or unpacked (renamed there whole, so complete),
	 * then marked used, so that no sweep takes it (agent/bundles.h) */
	int rc = mkdir_p(dir, 0755);
	int fd = rc ? rc : bundles_lock(dir, hex, 0);
	if (fd < 0)
		rc = fail("cannot lock %s/%s.lock: %s", dir, hex, strerror(-fd));
	else if (!is_dir(w->bundle_dir)) /* another rank may have done it meanwhile */
		rc = unpack_bundle(w, w->bundle_dir);
	if (rc == 0 && (rc = bundles_touch(w->bundle_dir)))
		fail("cannot mark %s used: %s", w->bundle_dir, strerror(-rc));
	if (fd >= 0)
		close(fd); /* and the lock with it */
	free(dir);
	return rc;
}

/* ---- 2. inputs ---- */

static int fetch_one(struct wrapper *w, const struct task_fetch *f, size_t k)
{
	const char *dest = f->paths[k];
	char *parent = xstrdup(dest);
	*strrchr(parent, '/') = '\0';
	int rc = mkdir_p(parent, 0755);
	char *tar = f->kind == TASK_DIR ? xasprintf("%s.tar", dest) : NULL;
	char err[700];
	struct objects_info info;
	if (rc)
		rc = fail("input %s: cannot make %s: %s", f->ref, parent, strerror(-rc));
	else if ((rc = get_object(w, f->keys[k], tar ? tar : dest, &info)))
		fail("input %s: %s", f->ref, w->obj.error);
	else if (tar && (rc = mkdir_p(dest, 0755)))
		fail("input %s: cannot make %s: %s", f->ref, dest, strerror(-rc));
	else if (tar && (rc = tarball_unpack(tar, dest, err, sizeof(err))))
		fail("input %s (%s): %s", f->ref, f->keys[k], err);
	if (tar)
		unlink(tar);
	free(tar);
	free(parent);
	return rc ? -1 : 0;
}

static int fetch_inputs(struct wrapper *w)
{
	task_fetch_paths(&w->doc, w->in_dir);
	for (size_t i = 0; i < w->doc.nfetch; i++) {
		const struct task_fetch *f = &w->doc.fetch[i];
		if (f->list) { /* its directory, even for an empty list */
			char *d = xasprintf("%s/%s/%s", w->in_dir, f->task, f->output);
			int rc = mkdir_p(d, 0755);
			if (rc)
				fail("input %s: cannot make %s: %s", f->ref, d, strerror(-rc));
			free(d);
			if (rc)
				return -1;
		}
		for (size_t k = 0; k < f->nkeys; k++)
			if (fetch_one(w, f, k))
				return -1;
	}
	return 0;
}

/* The command's arguments and the render_env variables, rendered. */
static void render(struct wrapper *w)
{
	for (size_t i = 0; w->command[i]; i++) {
		char *r = task_render(w->command[i], w->doc.fetch, w->doc.nfetch);
		free(w->command[i]);
		w->command[i] = r;
	}
	for (size_t i = 0; i < w->doc.nrender; i++) {
		const char *v = getenv(w->doc.render_env[i]);
		if (!v)
			continue;
		char *r = task_render(v, w->doc.fetch, w->doc.nfetch);
		setenv(w->doc.render_env[i], r, 1);
		free(r);
	}
}

/* ---- 4. and 6. the checkpoint ---- */

/* 1 when dir has no entries (or cannot be read: nothing to save). */
#define RESTORE_ASIDE ".anvil-restore"

/* Empty but for a restore's scratch (RESTORE_ASIDE). */
static int dir_empty(const char *dir)
{
	DIR *d = opendir(dir);
	int empty = 1;
	struct dirent *de;
	while (d && empty && (de = readdir(d)))
		empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		        strcmp(de->d_name, RESTORE_ASIDE) == 0;
	if (d)
		closedir(d);
	return empty;
}

/* Moves every entry of from into to (the same file system); with to NULL,
 * removes them instead. 0 or the first negative errno. */
static int move_entries(const char *from, const char *to)
{
	DIR *d = opendir(from);
	if (!d)
		return -errno;
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char *src = xasprintf("%s/%s", from, de->d_name);
		char *dst = to ? xasprintf("%s/%s", to, de->d_name) : NULL;
		rc = dst ? (rename(src, dst) < 0 ? -errno : 0) : rm_rf(src);
		free(src);
		free(dst);
	}
	closedir(d);
	return rc;
}

/* The stored checkpoint into an empty ANVIL_CHECKPOINT_DIR: unpacked into
 * RESTORE_ASIDE inside it (the directory itself may be a mount point of
 * the rank's fence: agent/fence.h), then its entries moved up, and the
 * scratch removed last. A restore cut short leaves the scratch: the next
 * one finds it and starts again from an emptied directory. */
static int restore_checkpoint(struct wrapper *w)
{
	if (!w->doc.checkpoint)
		return 0;
	struct objects_info info;
	int rc = stat_object(w, w->doc.checkpoint, &info);
	if (rc == ERR_NOTFOUND)
		return 0; /* the first attempt: nothing saved yet */
	if (rc)
		return fail("checkpoint: %s", w->obj.error);
	memcpy(w->ckpt_hash, info.sha256, sizeof(w->ckpt_hash));
	char *aside = xasprintf("%s/" RESTORE_ASIDE, w->ckpt_dir),
	     *tar = xasprintf("%s/ckpt.tar", w->attempt_dir);
	struct stat sb;
	int cut_short = lstat(aside, &sb) == 0;
	if (!cut_short && !dir_empty(w->ckpt_dir)) {
		free(aside);
		free(tar);
		return 0; /* this node has it (or newer): the command decides */
	}
	if (cut_short)
		move_entries(w->ckpt_dir, NULL);
	char err[700];
	if ((rc = mkdir_p(aside, 0755)))
		fail("checkpoint: cannot make %s: %s", aside, strerror(-rc));
	else if ((rc = get_object(w, w->doc.checkpoint, tar, &info)))
		fail("checkpoint: %s", w->obj.error);
	else if ((rc = tarball_unpack(tar, aside, err, sizeof(err))))
		fail("checkpoint %s: %s", w->doc.checkpoint, err);
	else if ((rc = move_entries(aside, w->ckpt_dir)))
		fail("checkpoint: cannot move %s into %s: %s", aside, w->ckpt_dir, strerror(-rc));
	else
		fprintf(stderr, "anvil _task: checkpoint %s (%lld bytes) restored into %s\n",
		        w->doc.checkpoint, (long long)info.size, w->ckpt_dir);
	memcpy(w->ckpt_hash, info.sha256, sizeof(w->ckpt_hash));
	if (rc == 0)
		rm_rf(aside);
	unlink(tar);
	free(tar);
	free(aside);
	return rc ? -1 : 0;
}

static int save_checkpoint(struct wrapper *w)
{
	if (!w->doc.checkpoint || w->node_rank != 0 || dir_empty(w->ckpt_dir))
		return 0;
	char *tar = xasprintf("%s/ckpt-save.tar", w->attempt_dir);
	char err[700], hex[HASH_HEX_LEN + 1];
	struct objects_info info;
	int rc = tarball_pack_dir(w->ckpt_dir, tar, err, sizeof(err));
	if (rc)
		fail("checkpoint: %s", err);
	else if ((rc = hash_file_sha256(tar, hex, NULL)))
		fail("checkpoint: cannot read %s: %s", tar, strerror(-rc));
	else if (strcmp(hex, w->ckpt_hash) == 0)
		fprintf(stderr, "anvil _task: checkpoint %s unchanged, not saved\n",
		        w->doc.checkpoint);
	else if ((rc = put_object(w, w->doc.checkpoint, tar, NULL, &info)))
		fail("checkpoint: %s", w->obj.error);
	else
		fprintf(stderr, "anvil _task: checkpoint %s saved (%lld bytes)\n",
		        w->doc.checkpoint, (long long)info.size);
	unlink(tar);
	free(tar);
	return rc ? -1 : 0;
}

/* ---- 5. the command ---- */

/* The command's exit status; 128+N when signal N ended it, as a shell says. */
static int status_of(int ws)
{
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* With a read set to record (readset.h): its socket pair, the child's
 * end in sv[1]; else both -1. The wrapper becomes the subreaper of the
 * command's processes, so that one whose parent ended stays its
 * descendant, whose calls it may read. */
static void trace_prepare(struct wrapper *w, int sv[2])
{
	sv[0] = sv[1] = -1;
	if (!w->reads)
		return;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		fprintf(stderr, "anvil _task: cannot record what the command reads: %s\n",
		        strerror(errno));
		readset_free(w->reads);
		w->reads = NULL;
		sv[0] = sv[1] = -1;
		return;
	}
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

static pid_t start_command(struct wrapper *w, const sigset_t *orig)
{
	int sv[2];
	trace_prepare(w, sv);
	fflush(stderr);
	pid_t pid = fork();
	if (pid != 0) {
		if (sv[1] >= 0)
			close(sv[1]);
		if (pid > 0 && sv[0] >= 0)
			readset_attach(w->reads, sv[0]); /* the child sends it before its exec */
		else if (sv[0] >= 0)
			close(sv[0]);
		return pid;
	}
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, orig, NULL);
	if (w->bundle_dir && chdir(w->bundle_dir) < 0) {
		dprintf(2, "anvil _task: cannot change directory to %s: %s\n", w->bundle_dir,
		        strerror(errno));
		_exit(127);
	}
	int rc = 0;
	if (sv[1] >= 0) {
		close(sv[0]);
		rc = readset_install(sv[1]);
	}
	if (rc)
		dprintf(2, "anvil _task: cannot record what the command reads: %s\n",
		        strerror(-rc));
	execvp(w->command[0], w->command);
	dprintf(2, "anvil _task: cannot run '%s': %s\n", w->command[0], strerror(errno));
	_exit(127);
}

/* The next stop signal, within wait ms; 0 when none came. Meanwhile the
 * command's calls that the read set records are served. */
static int next_signal(struct wrapper *w, int sigfd, int64_t wait)
{
	struct pollfd p[2] = {{.fd = sigfd, .events = POLLIN},
	                      {.fd = readset_fd(w->reads), .events = POLLIN}};
	if (poll(p, p[1].fd >= 0 ? 2 : 1, (int)wait) <= 0)
		return 0;
	if (p[1].revents)
		readset_serve(w->reads);
	struct signalfd_siginfo si;
	if (!(p[0].revents & POLLIN) || read(sigfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		return 0;
	return (int)si.ssi_signo;
}

/* Waits for the command. A stop signal reached the whole process group
 * when the wrapper leads it (under the agent); else it is passed on. The
 * command is killed once 3/4 of the grace have passed since, so that the
 * checkpoint has the rest. */
static int wait_command(struct wrapper *w, pid_t pid, int sigfd)
{
	int leader = getpgrp() == getpid();
	int64_t kill_at = 0;
	for (;;) {
		int ws;
		pid_t got = waitpid(pid, &ws, WNOHANG);
		if (got == pid)
			return status_of(ws);
		int64_t now = now_ms(), wait = 1000;
		if (kill_at && now >= kill_at) {
			fprintf(stderr,
			        "anvil _task: the command outlived 3/4 of its %lld ms grace: "
			        "killed, to leave time for the checkpoint\n",
			        (long long)w->grace_ms);
			kill(pid, SIGKILL);
			kill_at = 0;
		} else if (kill_at) {
			wait = kill_at - now < wait ? kill_at - now : wait;
		}
		int sig = next_signal(w, sigfd, wait);
		if (sig > 0 && sig != SIGCHLD) {
			if (!leader)
				kill(pid, sig);
			if (!kill_at)
				kill_at = now_ms() + w->grace_ms * 3 / 4;
		}
	}
}

static int run_command(struct wrapper *w)
{
	sigset_t mask, orig;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	/* From here a stop signal waits for us: the command ends first, then
	 * the checkpoint is saved. */
	sigprocmask(SIG_BLOCK, &mask, &orig);
	int sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sigfd < 0)
		return fail("cannot wait for signals: %s", strerror(errno));
	pid_t pid = start_command(w, &orig);
	if (pid < 0) {
		close(sigfd);
		return fail("cannot start the command: %s", strerror(errno));
	}
	w->cmd_status = wait_command(w, pid, sigfd);
	readset_stop(w->reads);
	close(sigfd);
	return 0;
}

/* On the rank that reports the outputs of a task whose document says
 * "trace": a recorder of what the command reads of the bundle (or, run
 * here by `anvil wf run --local`, of the code's tree). */
static void trace_open(struct wrapper *w)
{
	const char *root = w->bundle_dir ? w->bundle_dir : w->doc.code_dir;
	if (!w->doc.trace || !root || w->node_rank != w->doc.rank_outputs)
		return;
	w->reads = readset_new(root);
	if (!w->reads)
		fprintf(stderr, "anvil _task: cannot record what the command reads of %s: %s\n",
		        root, strerror(errno));
}

/* The read set for the report: NULL, saying why, when it is incomplete
 * (the cache then keys the task by its whole bundle). */
static json_t *trace_keys(struct wrapper *w)
{
	if (!w->reads)
		return NULL;
	char why[400];
	json_t *keys = readset_keys(w->reads, why, sizeof(why));
	if (keys)
		fprintf(stderr, "anvil _task: the command looked up %zu paths of its code\n",
		        json_array_size(keys));
	else
		fprintf(stderr,
		        "anvil _task: the files the command read of its code are not all "
		        "known (%s): its cached result depends on the whole bundle\n",
		        why);
	return keys;
}

/* ---- 7. outputs ---- */

/* The declared output o as its JSON record, uploaded; NULL after saying why. */
static json_t *publish_one(struct wrapper *w, const struct task_output *o)
{
	static const char *const kinds[] = {"file", "dir", "value"};
	char *path = xasprintf("%s/%s", w->out_dir, o->name);
	struct stat sb;
	json_t *rec = NULL;
	if (stat(path, &sb) < 0) {
		fail("output '%s' was not written: $ANVIL_OUTPUT_DIR/%s does not exist", o->name,
		     o->name);
	} else if ((o->kind == TASK_DIR) != S_ISDIR(sb.st_mode) ||
	           (o->kind != TASK_DIR && !S_ISREG(sb.st_mode))) {
		fail("output '%s' is declared %s, but $ANVIL_OUTPUT_DIR/%s is %s", o->name,
		     kinds[o->kind], o->name,
		     S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
	} else if (o->kind == TASK_VALUE) {
		struct buf b;
		buf_init(&b);
		int rc = read_file(path, TASK_VALUE_MAX, &b);
		size_t len = b.len;
		if (len && b.data[len - 1] == '\n')
			len--;
		json_t *text = rc ? NULL : json_stringn(b.data ? b.data : "", len);
		if (rc == -EFBIG)
			fail("output '%s' is a value of %lld bytes: at most %d (declare it a file)",
			     o->name, (long long)sb.st_size, TASK_VALUE_MAX);
		else if (rc)
			fail("output '%s': cannot read %s: %s", o->name, path, strerror(-rc));
		else if (!text)
			fail("output '%s': a value must be UTF-8 text (declare it a file)",
			     o->name);
		else
			rec = json_pack("{s:s,s:o}", "kind", "value", "value", text);
		buf_cleanup(&b);
	} else {
		char *tar = o->kind == TASK_DIR
		                    ? xasprintf("%s/%s.out.tar", w->attempt_dir, o->name)
		                    : NULL;
		char err[700], key[OBJECTS_KEY_MAX];
		struct objects_info info;
		if (tar && tarball_pack_dir(path, tar, err, sizeof(err)))
			fail("output '%s': %s", o->name, err);
		else if (put_object(w, NULL, tar ? tar : path, key, &info))
			fail("output '%s': %s", o->name, w->obj.error);
		else
			rec = json_pack("{s:s,s:s,s:I,s:s}", "kind", kinds[o->kind], "key", key,
			                "size", (json_int_t)info.size, "sha256", info.sha256);
		if (tar)
			unlink(tar);
		free(tar);
	}
	free(path);
	return rec;
}

/* POST /v1/workflows/runs/RUN/outputs, tried again while the server is
 * away; with the read set when it was recorded whole (reads, or NULL). */
static int post_outputs(struct wrapper *w, json_t *outputs, json_t *reads)
{
	if (connect_server(w))
		return -1;
	if (w->local) { /* no server: the runner reads them from a file */
		const char *path = getenv("ANVIL_TASK_REPORT");
		json_t *report = json_pack("{s:O,s:O?}", "outputs", outputs, "reads", reads);
		char *text = jv_dump(report);
		json_decref(report);
		int rc = path ? write_file_atomic(path, text, strlen(text), 0644) : ERR_INVALID;
		free(text);
		return rc ? fail("the outputs: cannot write ANVIL_TASK_REPORT (%s): %s",
		                 path ? path : "not set", err_msg(rc))
		          : 0;
	}
	json_t *body =
	        json_pack("{s:I,s:O}", "attempt_id", (json_int_t)w->attempt_id, "outputs", outputs);
	if (reads)
		json_object_set(body, "reads", reads);
	char *text = jv_dump(body);
	char *url =
	        xasprintf("%s/v1/workflows/runs/%lld/outputs", w->server, (long long)w->doc.run);
	char line[64];
	snprintf(line, sizeof(line), "X-Anvil-Attempt: %lld", (long long)w->attempt_id);
	struct buf out;
	buf_init(&out);
	int rc = 0, status = 0;
	for (int t = 0; t < TRIES; t++) {
		buf_reset(&out);
		httpc_set_header(w->http, line);
		rc = httpc_do(w->http, "POST", url, w->token, text, strlen(text), POST_TIMEOUT_MS,
		              &status, &out);
		httpc_set_header(w->http, NULL);
		if (rc == 0 && status < 500)
			break;
		if (t + 1 < TRIES)
			sleep_ms(1000LL << t);
	}
	if (rc)
		fail("the outputs: the server at %s: %s", w->server, httpc_error(w->http));
	else if (status != 200)
		rc = fail("the outputs: POST %s answered %d: %.400s", url, status,
		          out.data ? out.data : "");
	buf_cleanup(&out);
	free(url);
	free(text);
	json_decref(body);
	return rc ? -1 : 0;
}

static int publish_outputs(struct wrapper *w)
{
	if ((w->doc.noutputs == 0 && !w->reads) || w->node_rank != w->doc.rank_outputs)
		return 0;
	json_t *outputs = json_object();
	int bad = 0;
	for (size_t i = 0; i < w->doc.noutputs; i++) {
		json_t *rec = publish_one(w, &w->doc.outputs[i]);
		if (rec)
			json_object_set_new(outputs, w->doc.outputs[i].name, rec);
		bad |= rec == NULL;
	}
	json_t *reads = bad ? NULL : trace_keys(w);
	int rc = bad ? -1 : w->doc.run > 0 ? post_outputs(w, outputs, reads) : 0;
	json_decref(reads);
	json_decref(outputs);
	return rc;
}

/* ---- the whole ---- */

/* Under a fence the wrapper starts as the rank's account with root's
 * effective ids (agent/fence.h, step U): the code bundle, which the node's
 * tasks share, is unpacked as root. From here on the wrapper is the
 * account for good, and what the agent set aside for that first exec
 * (ANVIL_STASH_NAME=VALUE: the loader's variables and PATH) is the
 * command's environment again. */
static int drop_root(void)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (geteuid() == 0 && uid != 0 &&
	    (setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0))
		return fail("cannot become uid %u: %s", (unsigned)uid, strerror(errno));
	fence_env_unstash();
	return 0;
}

/* The per-attempt directory, fresh: in/ and an empty out/. A fenced rank's
 * is made by the agent and bound into its view: only what is inside goes. */
static int make_attempt_dir(struct wrapper *w)
{
	w->attempt_dir = xasprintf("%s/tasks/%lld", w->work_dir, (long long)w->attempt_id);
	w->in_dir = xasprintf("%s/in", w->attempt_dir);
	w->out_dir = xasprintf("%s/out", w->attempt_dir);
	rm_rf(w->in_dir);
	rm_rf(w->out_dir);
	int rc = mkdir_p(w->in_dir, 0755);
	if (rc == 0)
		rc = mkdir_p(w->out_dir, 0755);
	if (rc)
		return fail("cannot make %s: %s", w->out_dir, strerror(-rc));
	setenv("ANVIL_OUTPUT_DIR", w->out_dir, 1);
	return 0;
}

static void wrapper_free(struct wrapper *w)
{
	if (w->attempt_dir)
		rm_rf(w->attempt_dir);
	for (size_t i = 0; w->command && w->command[i]; i++)
		free(w->command[i]);
	free(w->command);
	task_doc_cleanup(&w->doc);
	readset_free(w->reads);
	httpc_free(w->http);
	blob_close(w->local);
	free(w->attempt_dir);
	free(w->in_dir);
	free(w->out_dir);
	free(w->bundle_dir);
}

int task_main(int argc, char **argv)
{
	struct wrapper w = {0};
	signal(SIGPIPE, SIG_IGN);
	int rc = parse_args(argc, argv, &w);
	if (rc == 0)
		rc = read_env(&w);
	if (rc == 0)
		rc = fetch_bundle(&w);
	if (rc == 0)
		rc = drop_root();
	if (rc == 0)
		rc = make_attempt_dir(&w);
	if (rc == 0)
		rc = fetch_inputs(&w);
	if (rc == 0) {
		render(&w);
		rc = restore_checkpoint(&w);
	}
	if (rc == 0) {
		trace_open(&w);
		rc = run_command(&w);
	}
	if (rc) { /* the command never ran */
		wrapper_free(&w);
		return 1;
	}
	int after = save_checkpoint(&w);
	if (w.cmd_status == 0 && publish_outputs(&w))
		after = -1;
	int status = w.cmd_status ? w.cmd_status : after ? 1 : 0;
	wrapper_free(&w);
	return status;
}
