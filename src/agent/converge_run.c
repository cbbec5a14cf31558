/* converge_run.c - one run of a profile's steps (agent/converge.h): what
 * each check reads, the actions, the commands they run, and the status
 * built through proto/wire.h's tables. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/converge.h"
#include "base/err.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "base/version.h"
#include "gpu/gpu.h"
#include "proto/wire.h"

extern char **environ;

#define FILE_MAX         (4u << 20)  /* /proc/self/mountinfo of a busy host */
#define OUTPUT_KEEP      (64u << 10) /* of a command's output, before the last 4 KiB is kept */
#define READ_TIMEOUT_MS  60000       /* dpkg-query */
#define MOUNT_TIMEOUT_MS 120000
#define APT_TIMEOUT_MS   (30 * 60000)
#define STOP_GRACE_MS    5000

static const char *const state_names[] = {"converging", "converged", "failed", "drifted"};
enum { ST_CONVERGING, ST_CONVERGED, ST_FAILED, ST_DRIFTED };

/* ---- commands ---- */

struct cmd {
	int err; /* 0, or why it could not run or finish: -errno, ERR_TIMEOUT, ERR_BUSY (stopped) */
	int status;     /* its exit status; 128 + N for signal N */
	struct buf out; /* stdout and stderr, the last OUTPUT_KEEP bytes */
};

/* The environment of a step's command: the agent's, in the C locale (its
 * output is read), and apt's non-interactive front end. */
static char **command_env(int apt)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = xcalloc(n + 4, sizeof(char *));
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LC_ALL=", 7) != 0 &&
		    strncmp(environ[i], "LANG=", 5) != 0 &&
		    strncmp(environ[i], "DEBIAN_FRONTEND=", 16) != 0)
			env[k++] = environ[i];
	env[k++] = "LC_ALL=C";
	if (apt)
		env[k++] = "DEBIAN_FRONTEND=noninteractive";
	env[k] = NULL;
	return env;
}

/* A child with the default signal dispositions and none blocked (the
 * agent blocks SIGCHLD, SIGTERM and SIGINT for its signalfd and ignores
 * SIGPIPE), in a process group of its own so that a stop reaches its
 * children (apt-get's dpkg). */
static int spawn(char **argv, int apt, int out_fd, pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
	posix_spawnattr_init(&at);
	sigset_t none, dflt;
	sigemptyset(&none);
	sigemptyset(&dflt);
	const int sigs[] = {SIGPIPE, SIGCHLD, SIGTERM, SIGINT, SIGHUP};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&dflt, sigs[i]);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dflt);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
	                                      POSIX_SPAWN_SETPGROUP);
	char **env = command_env(apt);
	int rc = posix_spawnp(pid, argv[0], &fa, &at, argv, env);
	free(env);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	return -rc;
}

static void keep(struct buf *b, const char *data, size_t n)
{
	buf_add(b, data, n);
	if (b->len > OUTPUT_KEEP) {
		size_t cut = b->len - OUTPUT_KEEP;
		memmove(b->data, b->data + cut, b->len - cut);
		b->len -= cut;
		b->data[b->len] = '\0';
	}
}

/* Ends the command's process group: SIGTERM, then SIGKILL after a grace. */
static void end_group(pid_t pid, int *ws)
{
	kill(-pid, SIGTERM);
	int64_t end = now_ms() + STOP_GRACE_MS;
	while (waitpid(pid, ws, WNOHANG) == 0) {
		if (now_ms() > end) {
			kill(-pid, SIGKILL);
			waitpid(pid, ws, 0);
			return;
		}
		sleep_ms(20);
	}
}

/* Reads the command's output until it closes, the deadline or a stop. */
static int collect(int fd, struct buf *out, int64_t timeout_ms, const atomic_int *stop)
{
	int64_t end = now_ms() + timeout_ms;
	char chunk[4096];
	for (;;) {
		if (stop && atomic_load(stop))
			return ERR_BUSY;
		if (now_ms() > end)
			return ERR_TIMEOUT;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n > 0)
			keep(out, chunk, (size_t)n);
		else if (n == 0 || errno != EINTR)
			return 0;
	}
}

static void run_command(char **argv, int apt, int64_t timeout_ms, const atomic_int *stop,
                        struct cmd *r)
{
	buf_init(&r->out);
	r->err = 0;
	r->status = -1;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0) {
		r->err = -errno;
		return;
	}
	pid_t pid;
	r->err = spawn(argv, apt, fds[1], &pid);
	close(fds[1]);
	if (r->err) {
		close(fds[0]);
		return;
	}
	int ws = 0;
	r->err = collect(fds[0], &r->out, timeout_ms, stop);
	close(fds[0]);
	if (r->err)
		end_group(pid, &ws);
	else
		while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
			;
	r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* "mount -t tmpfs tmpfs /mnt/x" */
static void argv_text(char **argv, struct buf *b)
{
	for (size_t i = 0; argv && argv[i]; i++)
		buf_printf(b, "%s%s", i ? " " : "", argv[i]);
}

static void say_command(char **argv, const struct cmd *r, struct buf *b)
{
	buf_adds(b, "ran `");
	argv_text(argv, b);
	if (r->err == ERR_BUSY)
		buf_adds(b, "`: stopped, the agent is stopping");
	else if (r->err == ERR_TIMEOUT)
		buf_adds(b, "`: no result in time, stopped");
	else if (r->err)
		buf_printf(b, "`: cannot run it: %s", strerror(-r->err));
	else
		buf_printf(b, "`: exit status %d", r->status);
	if (r->out.len)
		buf_printf(b, "\n%s", r->out.data);
}

/* ---- what a check reads ---- */

/* MAJOR:MINOR of the block device dev names (a path, UUID=, LABEL=,
 * PARTUUID=, PARTLABEL=), or 0 when it names none here. */
static int device_id(const char *dev, char *out, size_t cap)
{
	static const char *const tags[][2] = {{"UUID=", "/dev/disk/by-uuid/"},
	                                      {"LABEL=", "/dev/disk/by-label/"},
	                                      {"PARTUUID=", "/dev/disk/by-partuuid/"},
	                                      {"PARTLABEL=", "/dev/disk/by-partlabel/"}};
	char path[512];
	snprintf(path, sizeof(path), "%s", dev);
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++)
		if (strncmp(dev, tags[i][0], strlen(tags[i][0])) == 0)
			snprintf(path, sizeof(path), "%s%s", tags[i][1], dev + strlen(tags[i][0]));
	struct stat st;
	if (path[0] != '/' || stat(path, &st) != 0 || !S_ISBLK(st.st_mode))
		return 0;
	snprintf(out, cap, "%u:%u", major(st.st_rdev), minor(st.st_rdev));
	return 1;
}

struct reading {
	struct step_seen seen;
	struct buf text;
	char dev[32];
};

static void read_check(const struct step *st, const atomic_int *stop, struct reading *r)
{
	memset(&r->seen, 0, sizeof(r->seen));
	buf_init(&r->text);
	struct stat sb;
	switch (st->source) {
	case STEP_READ_FACTS: break;
	case STEP_READ_FILE:
		r->seen.err = read_file(st->read_path, FILE_MAX, &r->text);
		r->seen.text = r->seen.err ? NULL : r->text.data ? r->text.data : "";
		break;
	case STEP_READ_STAT:
		r->seen.err = stat(st->read_path, &sb) != 0 ? -errno
		              : S_ISDIR(sb.st_mode)         ? 0
		                                            : -ENOTDIR;
		break;
	case STEP_READ_COMMAND: {
		struct cmd c;
		run_command(st->read_argv, 0, READ_TIMEOUT_MS, stop, &c);
		r->seen.err = c.err;
		r->seen.status = c.status;
		r->text = c.out; /* taken */
		r->seen.text = c.err ? NULL : r->text.data ? r->text.data : "";
		break;
	}
	}
	if (st->kind == STEP_MOUNT && device_id(st->device, r->dev, sizeof(r->dev)))
		r->seen.device_id = r->dev;
}

static void reading_cleanup(struct reading *r)
{
	buf_cleanup(&r->text);
}

/* ---- actions ---- */

static int write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, text, strlen(text));
	int rc = n < 0 ? -errno : (size_t)n == strlen(text) ? 0 : -EIO;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* The step's action after its check read seen; what it did goes to did.
 * 0 when it ran to success. */
static int act(const struct step *st, const struct step_seen *seen,
               const struct converge_run_opts *o, struct buf *did)
{
	int rc = 0;
	if ((st->act == STEP_ACT_MKDIR || (st->act == STEP_ACT_COMMAND && st->act_path)) &&
	    (rc = mkdir_p(st->act_path, 0755)) == 0 && st->act == STEP_ACT_MKDIR)
		rc = chmod(st->act_path, 0755) < 0 ? -errno : 0;
	if (rc) {
		buf_printf(did, "mkdir -p %s: %s", st->act_path, strerror(-rc));
		return rc;
	}
	if (st->act == STEP_ACT_MKDIR) {
		buf_printf(did, "made %s (0755)", st->act_path);
	} else if (st->act == STEP_ACT_WRITE) {
		rc = write_text(st->act_path, st->act_text);
		buf_printf(did, "wrote %.*s to %s%s%s", (int)strcspn(st->act_text, "\n"),
		           st->act_text, st->act_path, rc ? ": " : "", rc ? strerror(-rc) : "");
	} else if (st->act == STEP_ACT_COMMAND) {
		char **argv = steps_action_argv(st, seen, o->apt_simulate);
		if (!argv)
			return ERR_CONFLICT; /* nothing to run: the check will say */
		struct cmd c;
		run_command(argv, st->apt, st->apt ? APT_TIMEOUT_MS : MOUNT_TIMEOUT_MS, o->stop,
		            &c);
		say_command(argv, &c, did);
		rc = c.err ? c.err : c.status ? ERR_UPSTREAM : 0;
		buf_cleanup(&c.out);
		steps_argv_free(argv);
	}
	return rc;
}

/* ---- one step ---- */

static void detail_set(char *detail, size_t len, struct buf *b)
{
	size_t at = b->data ? steps_tail(b->data, b->len) : 0;
	snprintf(detail, len, "%s", b->data ? b->data + at : "");
}

/* Runs step st: its status word, and what it found and did in detail. */
static const char *run_step(const struct step *st, const struct steps_facts *f,
                            const struct converge_run_opts *o, char *detail, size_t len)
{
	struct reading r;
	read_check(st, o->stop, &r);
	enum step_verdict v = steps_judge(st, f, &r.seen, detail, len);
	if (v == STEP_HOLDS || v == STEP_CANNOT || o->check_only) {
		reading_cleanup(&r);
		return v == STEP_HOLDS ? "ok" : "failed";
	}
	struct buf b;
	buf_init(&b);
	buf_printf(&b, "%s; ", detail);
	int rc = act(st, &r.seen, o, &b);
	reading_cleanup(&r);
	if (rc == 0 || rc == ERR_CONFLICT) {
		read_check(st, o->stop, &r);
		v = steps_judge(st, f, &r.seen, detail, len);
		reading_cleanup(&r);
		buf_printf(&b, "%snow: %s", b.len && b.data[b.len - 1] == '\n' ? "" : "\n", detail);
		if (v != STEP_HOLDS && o->apt_simulate && st->apt)
			buf_printf(&b, " (a dry run: %s=1)", CONVERGE_APT_SIMULATE_ENV);
	}
	detail_set(detail, len, &b);
	buf_cleanup(&b);
	return rc == 0 && v == STEP_HOLDS ? "changed" : "failed";
}

/* ---- the status ---- */

static json_t *text(const char *s)
{
	char *fixed = jv_utf8_fix(s);
	json_t *v = json_string(fixed ? fixed : s);
	free(fixed);
	return v ? v : json_string("");
}

static json_t *step_json(const char *name, const char *status, const char *detail)
{
	const struct wire_record *r = &wire_profile_step;
	json_t *o = json_object();
	wire_set(o, r, "name", text(name));
	wire_set(o, r, "status", json_string(status));
	if (detail && *detail)
		wire_set(o, r, "detail", text(detail));
	return o;
}

static json_t *status_json(const char *hash, int state, json_t *steps)
{
	const struct wire_record *r = &wire_profile_status;
	json_t *o = json_object();
	wire_set(o, r, "hash", text(hash));
	wire_set(o, r, "state", json_string(state_names[state]));
	wire_set(o, r, "steps", steps);
	wire_set(o, r, "time_ms", json_integer(wall_ms()));
	return o;
}

json_t *converge_refused(const char *hash, const char *why)
{
	json_t *steps = json_array();
	json_array_append_new(steps, step_json("profile", "failed", why));
	/* what is sent must pass the table, or the server refuses the sync */
	size_t n = hash ? strlen(hash) : 0;
	return status_json(n >= 1 && n <= 64 ? hash : "invalid", ST_FAILED, steps);
}

static void progress(const struct converge_run_opts *o, const char *hash, const json_t *steps)
{
	if (!o->progress)
		return;
	json_t *st = status_json(hash, ST_CONVERGING, json_deep_copy(steps));
	o->progress(o->ctx, st);
	json_decref(st);
}

static int end_state(const struct converge_run_opts *o, int failed)
{
	if (!failed)
		return ST_CONVERGED;
	if (!o->check_only)
		return ST_FAILED;
	const char *prev = jv_str(o->prev, "state", "");
	return strcmp(prev, "failed") == 0 ? ST_FAILED : ST_DRIFTED;
}

json_t *converge_run(const json_t *profile, const struct steps_facts *facts,
                     const struct converge_run_opts *o)
{
	char why[512];
	const char *hash = jv_str(profile, "hash", "");
	struct steps *s = NULL;
	if (wire_check(profile, &wire_profile, why, sizeof(why)) != 0 ||
	    steps_from_profile(json_object_get(profile, "spec"), &s, why, sizeof(why)) != 0)
		return converge_refused(hash, why);
	json_t *steps = json_array();
	char *detail = xmalloc(STEPS_DETAIL_MAX);
	int failed = 0;
	if (!o->check_only)
		progress(o, hash, steps); /* under way */
	for (size_t i = 0; i < s->n; i++) {
		const struct step *st = &s->v[i];
		if (failed && !o->check_only) {
			json_array_append_new(
			        steps, step_json(st->name, "skipped", "an earlier step failed"));
			continue;
		}
		const char *status = run_step(st, facts, o, detail, STEPS_DETAIL_MAX);
		failed |= strcmp(status, "failed") == 0;
		json_array_append_new(steps, step_json(st->name, status, detail));
		if (!o->check_only)
			progress(o, hash, steps);
	}
	free(detail);
	steps_free(s);
	return status_json(hash, end_state(o, failed), steps);
}

void converge_facts(const struct gpu_backend *b, struct steps_facts *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->agent, sizeof(out->agent), "%s", ANVIL_VERSION);
	if (!b)
		return;
	out->gpus = gpu_count(b);
	for (int i = 0; i < out->gpus && i < STEPS_GPUS_MAX; i++) {
		struct gpu_info info;
		if (gpu_info(b, i, &info) == 0)
			snprintf(out->gpu_models[i], sizeof(out->gpu_models[i]), "%s", info.name);
	}
	snprintf(out->driver, sizeof(out->driver), "%s", gpu_driver_version(b));
	snprintf(out->cuda, sizeof(out->cuda), "%s", gpu_cuda_version(b));
}
