/* up.c - `anvil up`: a whole local cluster in the foreground.
 *
 * Starts `anvil server` and N `anvil agent`s as child processes of this
 * one (each with simulated GPUs described by a generated file), waits until
 * every agent has registered, prints how to use it, and then supervises.
 * A daemon that dies on its own is started again with the same arguments
 * after a backoff (cli/respawn.h), and nothing else is touched: ranks run
 * on under their shims, agents re-sync with the restarted server (same
 * port, same state directory, same tokens), a restarted agent re-adopts its
 * ranks with its own identity file. A daemon that keeps dying at once is
 * given up on: up stops the cluster and exits 1. Ctrl-C (SIGINT) or SIGTERM
 * stops the agents first (they stop their ranks; an agent waiting for its
 * restart is started once more to do so), then the server.
 *
 * Layout under $ANVIL_HOME/up: server/ (state), node-<i>/ (agent work dir
 * and gpus.json), logs/ (each daemon's stderr). The server writes
 * $ANVIL_HOME/client.json, so the CLI needs no flags afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/httpc.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/respawn.h"
#include "gpu/sim.h"

#define UP_MAX_AGENTS 64

/* The server's scheduling options, passed to it as they are (the server
 * checks them, before anything starts: see check_server_flags). */
static const char *const server_flags[] = {"--preempt-min-runtime", "--preempt-max-ratio",
                                           "--preempt-loss-pct", "--preempt-restart-cost",
                                           "--fair-share-half-life"};
#define UP_SERVER_FLAGS (int)(sizeof(server_flags) / sizeof(server_flags[0]))

/* A daemon up runs: the server, or an agent (up.agent[i]). */
struct daemon {
	pid_t pid;             /* 0: not running */
	int64_t restart_at_ms; /* when to start it again; 0: not waiting to */
	struct respawn respawn;
};

struct up {
	char home[PATH_MAX];
	char dir[PATH_MAX + 8];
	int agents;
	int gpus;
	const char *model;
	int port;
	const char *node_timeout;
	const char *log_level;
	const char *server_args[2 * UP_SERVER_FLAGS]; /* flag, value, ... */
	int nserver_args;
	struct daemon server;
	struct daemon agent[UP_MAX_AGENTS];
	char listen[64]; /* the server's: the port it got at its first start */
	char url[128];
	char token[80];
};

static const char up_usage[] =
        "usage: anvil up [--agents N] [--gpus-per-agent G] [--gpu-model NAME] [--port P]\n"
        "                [--home DIR] [--node-timeout DUR] [--log-level LEVEL]\n"
        "                [server scheduling options, below]\n"
        "\n"
        "Runs a whole local cluster in the foreground: a server and N agents with\n"
        "simulated GPUs (backend: sim). A daemon that dies is started again after\n"
        "a backoff (0.5s, doubled up to 30s), and running jobs keep running; one\n"
        "that dies within 10s of its start 5 times in a row stops the cluster.\n"
        "Ctrl-C stops everything.\n"
        "\n"
        "  --agents N            agents (nodes) to start (default 2; 1..64)\n"
        "  --gpus-per-agent G    simulated GPUs per node (default 4; 0..64)\n"
        "  --gpu-model NAME      H200, A100, or any name (default H200)\n"
        "  --port P              server port (default 7070; 0 = any free port)\n"
        "  --home DIR            ANVIL_HOME for this cluster (default $ANVIL_HOME or ~/.anvil)\n"
        "  --node-timeout DUR    how long a silent node stays ready (default 30s)\n"
        "\n"
        "The server's scheduling options are passed to it (see anvil server --help):\n"
        "  --preempt-min-runtime DUR, --preempt-max-ratio N, --preempt-loss-pct N,\n"
        "  --preempt-restart-cost DUR, --fair-share-half-life DUR\n"
        "\n"
        "Afterwards, from any terminal with the same ANVIL_HOME: anvil nodes, anvil run ...\n";

static int up_bad(const char *flag, const char *value, const char *why)
{
	fprintf(stderr, "anvil up: %s: '%s' %s\n", flag, value ? value : "", why);
	return 2;
}

int server_default_home(char *out, size_t n);

/* 1 if f is one of the server's options that up passes on (set once). */
static int server_flag(struct up *u, const char *f, const char *v)
{
	for (int k = 0; k < UP_SERVER_FLAGS; k++) {
		if (strcmp(f, server_flags[k]) != 0)
			continue;
		for (int a = 0; a < u->nserver_args; a += 2)
			if (strcmp(u->server_args[a], f) == 0) {
				u->server_args[a + 1] = v;
				return 1;
			}
		u->server_args[u->nserver_args++] = server_flags[k];
		u->server_args[u->nserver_args++] = v;
		return 1;
	}
	return 0;
}

static int up_flags(int argc, char **argv, struct up *u)
{
	u->agents = 2;
	u->gpus = 4;
	u->model = "H200";
	u->port = 7070;
	u->node_timeout = "30s";
	u->log_level = "info";
	server_default_home(u->home, sizeof(u->home));
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i];
		if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
			fputs(up_usage, stdout);
			exit(0);
		}
		const char *v = i + 1 < argc ? argv[++i] : NULL;
		int64_t n, ms;
		if (!v)
			return up_bad(f, "", "needs a value");
		if (strcmp(f, "--agents") == 0) {
			if (parse_i64(v, 1, UP_MAX_AGENTS, &n))
				return up_bad(f, v, "is not a number from 1 to 64");
			u->agents = (int)n;
		} else if (strcmp(f, "--gpus-per-agent") == 0) {
			if (parse_i64(v, 0, 64, &n))
				return up_bad(f, v, "is not a number from 0 to 64");
			u->gpus = (int)n;
		} else if (strcmp(f, "--gpu-model") == 0) {
			if (!*v || strlen(v) > 80)
				return up_bad(f, v, "must be 1 to 80 characters");
			u->model = v;
		} else if (strcmp(f, "--port") == 0) {
			if (parse_i64(v, 0, 65535, &n))
				return up_bad(f, v, "is not a port from 0 to 65535");
			u->port = (int)n;
		} else if (strcmp(f, "--home") == 0) {
			snprintf(u->home, sizeof(u->home), "%s", v);
		} else if (strcmp(f, "--node-timeout") == 0) {
			if (parse_duration_ms(v, &ms) || ms < 1000)
				return up_bad(f, v, "is not a duration of at least 1s");
			u->node_timeout = v;
		} else if (strcmp(f, "--log-level") == 0) {
			u->log_level = v;
		} else if (!server_flag(u, f, v)) {
			return up_bad(f, NULL, "is not an option of anvil up (see --help)");
		}
	}
	snprintf(u->dir, sizeof(u->dir), "%s/up", u->home);
	return 0;
}

/* Forks and execs this binary with argv as daemon d, stderr (and stdout)
 * appended to logfile. 0 or a negative errno. */
static int spawn(struct daemon *d, char *const *argv, const char *logfile)
{
	int fd = open(logfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	int rc = pid < 0 ? -errno : 0;
	close(fd);
	if (rc == 0) {
		d->pid = pid;
		d->restart_at_ms = 0;
		respawn_started(&d->respawn, now_ms());
	}
	return rc;
}

static int read_client(struct up *u)
{
	char *path = xasprintf("%s/client.json", u->home);
	struct buf b;
	buf_init(&b);
	int rc = read_file(path, 4096, &b);
	json_t *o = rc == 0 ? json_loads(b.data, 0, NULL) : NULL;
	rc = ERR_NOTFOUND;
	if (o && jv_str(o, "server", NULL) && jv_str(o, "token", NULL)) {
		snprintf(u->url, sizeof(u->url), "%s", jv_str(o, "server", ""));
		snprintf(u->token, sizeof(u->token), "%s", jv_str(o, "token", ""));
		rc = 0;
	}
	json_decref(o);
	buf_cleanup(&b);
	free(path);
	return rc;
}

/* Runs `anvil server --check-config` with the options up passes on, so
 * that a bad one is refused with the server's own words before anything
 * starts. 0 if they are fine. */
static int check_server_flags(struct up *u)
{
	if (u->nserver_args == 0)
		return 0;
	char *argv[5 + 2 * UP_SERVER_FLAGS] = {"anvil", "server", "--check-config", "--no-config"};
	int n = 4;
	for (int a = 0; a < u->nserver_args; a++)
		argv[n++] = (char *)u->server_args[a];
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (fd >= 0)
			dup2(fd, STDOUT_FILENO);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return ERR_UPSTREAM;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : ERR_INVALID;
}

/* Starts the server on u->listen; does not wait for it. */
static int spawn_server(struct up *u)
{
	char *state = xasprintf("%s/server", u->dir);
	char *log = xasprintf("%s/logs/server.log", u->dir);
	/* --no-config: a local cluster is what up says, whatever this
	 * machine's /etc/anvil/server.yaml holds */
	char *argv[14 + 2 * UP_SERVER_FLAGS] = {"anvil",          "server",
	                                        "--state-dir",    state,
	                                        "--listen",       u->listen,
	                                        "--home",         u->home,
	                                        "--node-timeout", (char *)u->node_timeout,
	                                        "--log-level",    (char *)u->log_level,
	                                        "--no-config"};
	for (int a = 0; a < u->nserver_args; a++)
		argv[13 + a] = (char *)u->server_args[a];
	int rc = spawn(&u->server, argv, log);
	free(state);
	free(log);
	return rc;
}

/* The first start: waits for the server's client file, and keeps the port
 * it got (--port 0) for its restarts, where the agents and the client file
 * expect it. */
static int start_server(struct up *u)
{
	char *client = xasprintf("%s/client.json", u->home);
	unlink(client); /* a stale file must not be mistaken for this server's */
	free(client);
	snprintf(u->listen, sizeof(u->listen), "127.0.0.1:%d", u->port);
	int rc = spawn_server(u);
	if (rc == 0)
		rc = ERR_TIMEOUT;
	for (int i = 0; i < 200 && u->server.pid > 0; i++) {
		if (read_client(u) == 0) {
			rc = 0;
			break;
		}
		if (waitpid(u->server.pid, NULL, WNOHANG) == u->server.pid) {
			u->server.pid = 0;
			rc = ERR_UPSTREAM;
			break;
		}
		sleep_ms(50);
	}
	const char *port = strrchr(u->url, ':');
	if (rc == 0 && port)
		snprintf(u->listen, sizeof(u->listen), "127.0.0.1:%s", port + 1);
	if (rc)
		fprintf(stderr, "anvil up: the server did not start; see %s/logs/server.log\n",
		        u->dir);
	return rc;
}

static int start_agent(struct up *u, int i)
{
	char *work = xasprintf("%s/node-%d", u->dir, i + 1);
	char *gpus = xasprintf("%s/gpus.json", work);
	char *name = xasprintf("node-%d", i + 1);
	char *join = xasprintf("%s/server/join.token", u->dir);
	char *log = xasprintf("%s/logs/%s.log", u->dir, name);
	int rc = mkdir_p(work, 0755);
	if (rc == 0)
		rc = gpu_sim_write_file(gpus, u->gpus, u->model, i);
	if (rc == 0) {
		char *argv[] = {"anvil",
		                "agent",
		                "--server",
		                u->url,
		                "--join-token-file",
		                join,
		                "--name",
		                name,
		                "--work-dir",
		                work,
		                "--gpus-file",
		                gpus,
		                "--log-level",
		                (char *)u->log_level,
		                "--no-config",
		                NULL};
		rc = spawn(&u->agent[i], argv, log);
	}
	if (rc)
		fprintf(stderr, "anvil up: cannot start agent %s: %s\n", name, err_msg(rc));
	free(work);
	free(gpus);
	free(name);
	free(join);
	free(log);
	return rc;
}

static int ready_nodes(struct up *u)
{
	struct httpc *c = httpc_new();
	struct buf b;
	buf_init(&b);
	int status = 0, ready = -1;
	char *url = xasprintf("%s/v1/nodes", u->url);
	if (httpc_do(c, "GET", url, u->token, NULL, 0, 2000, &status, &b) == 0 && status == 200) {
		json_t *o = json_loads(b.data, 0, NULL);
		size_t i;
		json_t *n;
		ready = 0;
		json_array_foreach (json_object_get(o, "nodes"), i, n)
			ready += strcmp(jv_str(n, "state", ""), "ready") == 0;
		json_decref(o);
	}
	free(url);
	buf_cleanup(&b);
	httpc_free(c);
	return ready;
}

/* The join token the agents read (SERVER_DIR/join.token) admits new nodes
 * for --join-token-ttl (24h) from when it was made: an up started again
 * days later with more agents has it rotated first (an expired token
 * admits nothing, so nothing else loses by it). 0, or an error (said). */
static int fresh_join_token(struct up *u)
{
	struct httpc *c = httpc_new();
	struct buf b;
	buf_init(&b);
	int status = 0, rc;
	char *url = xasprintf("%s/v1/join-token", u->url);
	rc = httpc_do(c, "GET", url, u->token, NULL, 0, 5000, &status, &b);
	json_t *o = rc == 0 && status == 200 ? json_loadb(b.data, b.len, 0, NULL) : NULL;
	if (rc == 0 && !o)
		rc = ERR_UPSTREAM;
	if (rc == 0 && json_is_true(json_object_get(o, "expired"))) {
		char *rotate = xasprintf("%s/rotate", url);
		buf_reset(&b);
		rc = httpc_do(c, "POST", rotate, u->token, "{}", 2, 5000, &status, &b);
		if (rc == 0 && status != 200)
			rc = ERR_UPSTREAM;
		if (rc == 0)
			printf("anvil up: the join token had expired; rotated it for the agents\n");
		free(rotate);
	}
	if (rc)
		fprintf(stderr, "anvil up: cannot get a valid join token from the server: %s\n",
		        status && status != 200 ? (b.data ? b.data : "?") : err_msg(rc));
	json_decref(o);
	free(url);
	buf_cleanup(&b);
	httpc_free(c);
	return rc;
}

static struct daemon *daemon_at(struct up *u, int i)
{
	return i < 0 ? &u->server : &u->agent[i];
}

/* i: -1 for the server, else agent i. */
static void daemon_name(int i, char *out, size_t n)
{
	if (i < 0)
		snprintf(out, n, "the server");
	else
		snprintf(out, n, "agent node-%d", i + 1);
}

static int launch(struct up *u, int i)
{
	return i < 0 ? spawn_server(u) : start_agent(u, i);
}

/* pid was reaped: which daemon it was (marked not running), or -2. */
static int reaped(struct up *u, pid_t pid)
{
	for (int i = -1; i < u->agents; i++)
		if (daemon_at(u, i)->pid == pid) {
			daemon_at(u, i)->pid = 0;
			return i;
		}
	return -2;
}

/* What the log at path (its last 4 KiB) says last about an error: its last
 * line at level error, else its last line; "" when it is empty. Why a
 * daemon that up gives up on kept dying. */
static void last_log_error(const char *path, char *out, size_t n)
{
	char tail[4097];
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	off_t size = lseek(fd, 0, SEEK_END);
	off_t from = size > 4096 ? size - 4096 : 0;
	ssize_t got = size > 0 ? pread(fd, tail, (size_t)(size - from), from) : 0;
	close(fd);
	if (got <= 0)
		return;
	tail[got] = '\0';
	const char *pick = NULL, *last = NULL;
	for (char *line = tail, *end; *line; line = end + 1) {
		end = strchr(line, '\n');
		if (!end)
			end = line + strlen(line) - 1;
		else
			*end = '\0';
		if (!*line || (line == tail && from > 0)) /* cut */
			continue;
		last = line;
		if (strstr(line, " error "))
			pick = line;
	}
	snprintf(out, n, "%s", pick ? pick : last ? last : "");
}

/* Daemon i (pid) died without being told to (how: its status in words):
 * its restart is scheduled, or up gives up on it. 0, or 1 when it gives up
 * (said). */
static int on_death(struct up *u, int i, pid_t pid, const char *how)
{
	struct daemon *d = daemon_at(u, i);
	char name[48];
	daemon_name(i, name, sizeof(name));
	if (pid > 0)
		snprintf(name + strlen(name), sizeof(name) - strlen(name), " (pid %d)", (int)pid);
	char *log = i < 0 ? xasprintf("%s/logs/server.log", u->dir)
	                  : xasprintf("%s/logs/node-%d.log", u->dir, i + 1);
	int64_t now = now_ms(), ran = now - d->respawn.started_ms, delay = 0;
	int rc = respawn_exited(&d->respawn, now, &delay) == RESPAWN_GIVE_UP;
	if (rc) {
		fprintf(stderr,
		        "anvil up: %s %s; it died within %ds of its start %d times in a row, so "
		        "anvil up gives up on it and stops the cluster; see %s\n",
		        name, how, RESPAWN_QUICK_MS / 1000, RESPAWN_QUICK_LIMIT, log);
		char last[512];
		last_log_error(log, last, sizeof(last));
		if (last[0])
			fprintf(stderr, "anvil up: its log says: %s\n", last);
	} else {
		d->restart_at_ms = now + delay;
		char quick[64] = "";
		if (d->respawn.quick)
			snprintf(quick, sizeof(quick), "; quick failure %d of %d", d->respawn.quick,
			         RESPAWN_QUICK_LIMIT);
		fprintf(stderr,
		        "anvil up: %s %s after %.1fs; starting it again in %.1fs%s%s (see %s)\n",
		        name, how, (double)ran / 1000, (double)delay / 1000,
		        respawn_capped(&d->respawn) ? ", the longest wait" : "", quick, log);
	}
	free(log);
	return rc;
}

/* Starts each daemon whose wait is over, the server first. 0, or 1 when
 * up gives up on one that cannot even be started. */
static int restart_due(struct up *u)
{
	int64_t now = now_ms();
	for (int i = -1; i < u->agents; i++) {
		struct daemon *d = daemon_at(u, i);
		if (d->pid || !d->restart_at_ms || now < d->restart_at_ms)
			continue;
		char name[32];
		daemon_name(i, name, sizeof(name));
		int rc = launch(u, i);
		if (rc == 0) {
			fprintf(stderr, "anvil up: started %s again (pid %d)\n", name, (int)d->pid);
			continue;
		}
		char how[128];
		snprintf(how, sizeof(how), "could not be started (%s)", err_msg(rc));
		respawn_started(&d->respawn, now); /* a quick failure */
		if (on_death(u, i, 0, how))
			return 1;
	}
	return 0;
}

/* Until the agent d blocks SIGTERM or exits, at most 10 s. It blocks it
 * (to read it from a signalfd) before it adopts its ranks; a SIGTERM that
 * came before would end it with its ranks left running. */
static void await_signal_mask(struct daemon *d)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
	for (int t = 0; t < 200; t++) {
		unsigned long long blocked = 0;
		char line[256];
		FILE *f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f))
			if (strncmp(line, "SigBlk:", 7) == 0) {
				blocked = strtoull(line + 7, NULL, 16);
				break;
			}
		if (f)
			fclose(f);
		if (blocked & (1ULL << (SIGTERM - 1)))
			return;
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			d->pid = 0;
			return;
		}
		sleep_ms(50);
	}
}

/* Sends SIGTERM to each running agent and waits for it. One that did not
 * exit 0 (an agent exits 0 once it has stopped its ranks) is marked to be
 * started once more. */
static void stop_agents(struct up *u)
{
	for (int i = 0; i < u->agents; i++)
		if (u->agent[i].pid > 0)
			kill(u->agent[i].pid, SIGTERM);
	for (int i = 0; i < u->agents; i++) {
		struct daemon *d = &u->agent[i];
		int st = 0;
		if (d->pid <= 0)
			continue;
		if (waitpid(d->pid, &st, 0) == d->pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			d->restart_at_ms = now_ms();
		d->pid = 0;
	}
}

/* Stops the agents (they stop their ranks), then the server. An agent that
 * was down (killed, or waiting for its restart) is started once more and
 * stopped, so that its ranks do not outlive the cluster; not one up gave
 * up on, which would die at once again. */
static void stop_all(struct up *u)
{
	stop_agents(u);
	int again = 0;
	for (int i = 0; i < u->agents; i++) {
		struct daemon *d = &u->agent[i];
		if (!d->restart_at_ms)
			continue;
		d->restart_at_ms = 0;
		fprintf(stderr, "anvil up: starting agent node-%d once more to stop its ranks\n",
		        i + 1);
		if (start_agent(u, i) == 0) {
			await_signal_mask(d);
			again = 1;
		}
	}
	if (again)
		stop_agents(u);
	if (u->server.pid > 0) {
		kill(u->server.pid, SIGTERM);
		waitpid(u->server.pid, NULL, 0);
		u->server.pid = 0;
	}
}

/* Restarts daemons that die on their own until a signal, or until one keeps
 * dying at once; returns the exit status. */
static int supervise(struct up *u)
{
	while (!stop_signal()) {
		int st;
		pid_t pid;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			int i = reaped(u, pid);
			if (i == -2)
				continue;
			if (stop_signal()) {
				/* A Ctrl-C on the terminal reaches the daemons too: an
				 * agent it stopped exits 0 with its ranks stopped. One
				 * that ended otherwise is started once more by
				 * stop_all(), to stop its ranks. */
				if (i >= 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
					u->agent[i].restart_at_ms = now_ms();
				continue;
			}
			char how[128];
			respawn_status_text(st, how, sizeof(how));
			if (on_death(u, i, pid, how))
				return 1;
		}
		if (!stop_signal() && restart_due(u))
			return 1;
		sleep_ms(100);
	}
	printf("anvil up: stopping (signal %d)\n", stop_signal());
	return 0;
}

static int bring_up(struct up *u)
{
	char *logs = xasprintf("%s/logs", u->dir);
	/* ANVIL_HOME holds client.json and the server's state: the user's own */
	int rc = mkdir_p(u->home, 0700);
	if (rc == 0)
		rc = mkdir_p(logs, 0755);
	free(logs);
	if (rc || (rc = start_server(u)) || (rc = fresh_join_token(u)))
		return rc;
	for (int i = 0; i < u->agents && rc == 0; i++)
		rc = start_agent(u, i);
	for (int t = 0; rc == 0 && t < 300 && !stop_signal(); t++) {
		if (ready_nodes(u) >= u->agents)
			return 0;
		pid_t pid = waitpid(-1, NULL, WNOHANG);
		if (pid > 0 && reaped(u, pid) != -2)
			return ERR_UPSTREAM; /* a daemon died while starting */
		sleep_ms(50);
	}
	return rc ? rc : ERR_TIMEOUT;
}

int up_main(int argc, char **argv)
{
	struct up u;
	memset(&u, 0, sizeof(u));
	int rc = up_flags(argc, argv, &u);
	if (rc)
		return rc;
	if (check_server_flags(&u))
		return 2; /* the server said what is wrong */
	httpc_global_init();
	stop_signals_catch();
	signal(SIGPIPE, SIG_IGN);
	rc = bring_up(&u);
	if (rc) {
		fprintf(stderr, "anvil up: the cluster did not come up (%s); logs in %s/logs\n",
		        err_msg(rc), u.dir);
		stop_all(&u);
		return 1;
	}
	printf("anvil up: ready: server %s, %d node(s) x %d simulated %s GPU(s) (backend: sim)\n"
	       "anvil up: ANVIL_HOME=%s  logs: %s/logs\n"
	       "anvil up: try `anvil nodes` and `anvil run --gpus 1 -- sh -c 'echo "
	       "$CUDA_VISIBLE_DEVICES'`"
	       " in another terminal; Ctrl-C stops the cluster\n",
	       u.url, u.agents, u.gpus, u.model, u.home, u.dir);
	fflush(stdout);
	rc = supervise(&u);
	stop_all(&u);
	return rc;
}
