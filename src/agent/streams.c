#include "agent/streams.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/fence.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/relay.h"
#include "base/util.h"
#include "proto/stream.h"

#define HELPER_EXIT_MS 3000 /* for the helper to exit once its stream is closed */

/* ---- attach ---- */

/* Connects to the holder's socket, retrying while a just-started holder
 * has not bound it yet; an fd or a negative errno. */
static int connect_holder(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	int64_t deadline = now_ms() + STREAMS_CONNECT_MS;
	for (;;) {
		/* The socket is in the rank's own directory, which the rank
		 * writes: a link there (to another session's socket) is not
		 * followed, and only a socket is connected to, through the
		 * file opened here. */
		int rc = 0, fd = -1, at = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		struct stat sb;
		if (at < 0)
			rc = -errno;
		else if (fstat(at, &sb) != 0 || !S_ISSOCK(sb.st_mode))
			rc = -ECONNREFUSED;
		else if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
			rc = -errno;
		if (rc == 0) {
			snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", at);
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
				close(at);
				return fd;
			}
			rc = -errno;
		}
		if (fd >= 0)
			close(fd);
		if (at >= 0)
			close(at);
		if ((rc != -ENOENT && rc != -ECONNREFUSED) || now_ms() >= deadline)
			return rc;
		/* A holder binds its socket some 10 ms after its start (the
		 * binary's start-up), and an attach at the start of a session
		 * (anvil shell) waits for that: a failed connect costs
		 * microseconds, so try often. */
		sleep_ms(STREAMS_RETRY_MS);
	}
}

static void attach_stream(const struct httpd_stream *st, void *ctx)
{
	int *fd = ctx;
	if (st)
		relay_run(st->fd, *fd, NULL, 0, st->extra, st->extra_len, NULL);
	close(*fd);
	free(fd);
}

void streams_attach(struct httpd_req *req, const char *socket_path)
{
	int fd = connect_holder(socket_path);
	if (fd < 0) {
		char msg[600];
		text_printf(msg, sizeof(msg), "the session's holder does not answer at %s: %s",
		            socket_path, strerror(-fd));
		httpd_error(req, ERR_CONFLICT, msg);
		return;
	}
	int *box = xmalloc(sizeof(*box));
	*box = fd;
	httpd_upgrade(req, STREAM_UPGRADE, attach_stream, box);
}

/* ---- notices ---- */

struct notice {
	char *path, *text;
};

/* Sends the NOTICE frame, then reads (and drops: the scrollback a new
 * client gets) until the holder closes, which it does once it has shown
 * the notice; closing first could lose the frame, as the holder drops a
 * client whose socket is gone before reading what it sent. */
static int send_notice(int fd, const char *text)
{
	struct buf b;
	buf_init(&b);
	stream_put_text(&b, STREAM_NOTICE, text);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	int rc = relay_write_all(fd, b.data, b.len, STREAMS_NOTICE_MS);
	buf_cleanup(&b);
	int64_t deadline = now_ms() + STREAMS_NOTICE_MS;
	while (rc == 0) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - now_ms();
		if (left <= 0 || poll(&p, 1, (int)left) == 0)
			return -ETIMEDOUT;
		char sink[16384];
		ssize_t n = read(fd, sink, sizeof(sink));
		if (n == 0)
			return 0;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			rc = -errno;
	}
	return rc;
}

static void *notice_thread(void *arg)
{
	struct notice *n = arg;
	int fd = connect_holder(n->path);
	int rc = fd < 0 ? fd : send_notice(fd, n->text);
	if (rc)
		log_warn("session notice not delivered socket=%s error=\"%s\"", n->path,
		         strerror(-rc));
	if (fd >= 0)
		close(fd);
	free(n->path);
	free(n->text);
	free(n);
	return NULL;
}

void streams_notice(const char *socket_path, const char *text)
{
	struct notice *n = xmalloc(sizeof(*n));
	n->path = xstrdup(socket_path);
	n->text = xstrdup(text);
	pthread_attr_t at;
	pthread_t t;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &at, notice_thread, n);
	pthread_attr_destroy(&at);
	if (rc) {
		log_warn("session notice not delivered socket=%s error=\"%s\"", socket_path,
		         strerror(rc));
		free(n->path);
		free(n->text);
		free(n);
	}
}

/* ---- exec ---- */

struct helper {
	int fd; /* our end of its socketpair */
	pid_t pid;
};

/* The helper exits once its socket closes; one that does not is killed. */
static void reap(pid_t pid)
{
	int64_t deadline = now_ms() + HELPER_EXIT_MS;
	while (waitpid(pid, NULL, WNOHANG) == 0) {
		if (now_ms() >= deadline) {
			log_warn("exec helper did not exit, killing it pid=%d", (int)pid);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			return;
		}
		sleep_ms(10);
	}
}

static void exec_stream(const struct httpd_stream *st, void *ctx)
{
	struct helper *hp = ctx;
	if (st)
		relay_run(st->fd, hp->fd, NULL, 0, st->extra, st->extra_len, NULL);
	close(hp->fd);
	reap(hp->pid);
	free(hp);
}

/* fd moved to at least 10 (close-on-exec): the spawn's dup2s onto 3 and 4
 * must not clobber each other. */
static int high(int fd)
{
	if (fd < 0 || fd >= 10)
		return fd;
	int to = fcntl(fd, F_DUPFD_CLOEXEC, 10);
	close(fd);
	return to;
}

/* Spawns `SELF _exec --fd 3 --proc 4 --pid PID` in the rank's environment (its
 * loader's variables set aside: fence_env_stash) and
 * working directory, in a session of its own, with default signals (the
 * agent blocks and ignores some, which a child would inherit). */
static int spawn_helper(const char *self, const struct serve_rank *r, int sock, int procfd,
                        pid_t *pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	posix_spawn_file_actions_adddup2(&fa, sock, 3);
	posix_spawn_file_actions_adddup2(&fa, procfd, 4);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
	if (r->cwd)
		posix_spawn_file_actions_addchdir_np(&fa, r->cwd);
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
	                                      POSIX_SPAWN_SETSID);
	char rank_pid[24];
	snprintf(rank_pid, sizeof(rank_pid), "%d", r->pid);
	char *argv[] = {(char *)self, "_exec", "--fd", "3", "--proc", "4", "--pid", rank_pid, NULL};
	/* it starts as root: nothing of the rank's may steer its loader
	 * (agent/fence.h); it puts the variables back for the command */
	char **env = fence_env_stash((char *const *)r->env);
	int rc = posix_spawn(pid, self, &fa, &at, argv, env);
	fence_plan_free(env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	return -rc;
}

void streams_exec(struct httpd_req *req, const char *self, const struct serve_rank *r)
{
	char path[64], msg[600];
	snprintf(path, sizeof(path), "/proc/%d", r->pid);
	/* Opened while the rank runs: the helper reads this process's cgroups
	 * even if the pid were reused later. */
	int procfd = high(open(path, O_PATH | O_DIRECTORY | O_CLOEXEC));
	int sp[2] = {-1, -1};
	if (procfd < 0) {
		httpd_error(req, ERR_CONFLICT, "the rank's command has ended");
		return;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
		httpd_error(req, -errno, NULL);
		close(procfd);
		return;
	}
	sp[1] = high(sp[1]);
	pid_t pid = 0;
	int rc = spawn_helper(self, r, sp[1], procfd, &pid);
	close(sp[1]);
	close(procfd);
	if (rc) {
		text_printf(msg, sizeof(msg),
		            "cannot start a command in the rank (working directory %s): %s",
		            r->cwd ? r->cwd : "?", strerror(-rc));
		httpd_error(req, rc == -ENOENT ? ERR_CONFLICT : rc, msg);
		close(sp[0]);
		return;
	}
	log_info("exec helper started attempt=%lld rank=%d pid=%d", (long long)r->attempt_id,
	         r->rank, (int)pid);
	struct helper *hp = xmalloc(sizeof(*hp));
	hp->fd = sp[0];
	hp->pid = pid;
	httpd_upgrade(req, STREAM_UPGRADE, exec_stream, hp);
}
