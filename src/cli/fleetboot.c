/* fleetboot.c - `anvil fleet bootstrap` (fleetboot.h): the machines, ssh
 * as a child process per step, the worker threads, the report and the
 * wait for the nodes to join. What is run on a machine is
 * fleet/bootstrap.h's. */
#include "cli/fleetboot.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/hash.h"
#include "base/jv.h"
#include "base/mem.h"
#include "base/util.h"
#include "base/ydoc.h"
#include "cli/cli.h"
#include "fleet/bootstrap.h"
#include "fleet/spec.h"

extern char **environ;

#define BINARY_MAX       (1LL << 30)  /* bytes of the anvil binary sent */
#define OUTPUT_MAX       (64 << 10)   /* bytes of a step's stdout or stderr kept */
#define STEP_TIMEOUT_MS  (10 * 60000) /* one step, the binary's copy included */
#define JOIN_TIMEOUT_MS  (2 * 60000)  /* --timeout's default for bootstrap */
#define JOIN_POLL_MS     500
#define PARALLEL_DEFAULT 10
#define PARALLEL_MAX     256
#define SERVER_CONFIG    "/etc/anvil/server.yaml"

/* One machine: what it gets, and how its bootstrap went. */
struct host {
	const struct bootstrap_target *t;
	char *config; /* its agent.yaml */
	struct bootstrap_want want;
	enum bootstrap_outcome outcome;
	json_t *steps;      /* [{"step", "outcome", "detail"}] */
	int64_t took_ms;    /* the steps, together */
	int64_t started_ms; /* when its agent was (re)started (now_ms); 0: it was not */
	int64_t joined_ms;  /* after how long its node was there; -1: not (yet) */
};

struct run {
	struct verb_ctx *v;
	struct bootstrap_config cfg;
	struct bootstrap_ssh ssh;
	struct bootstrap_targets targets;
	struct buf binary, token, unit; /* the files every machine gets */
	struct host *hosts;
	size_t nhosts;
	int dry_run, json;
	pthread_mutex_t lock; /* next, and stdout */
	size_t next;
};

/* ---- ssh as a child process ---- */

struct pipes {
	int in[2], out[2], err[2];
};

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Starts argv with the pipes as its stdin, stdout and stderr; the pid, or
 * -1 with errno. */
static pid_t spawn_ssh(char **argv, struct pipes *p)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p->in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, p->out[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p->err[1], 2);
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close_fd(&p->in[0]);
	close_fd(&p->out[1]);
	close_fd(&p->err[1]);
	errno = rc;
	return rc ? -1 : pid;
}

/* Appends what fd has to b (its last OUTPUT_MAX bytes kept); 0 at EOF. */
static int drain(int fd, struct buf *b)
{
	char chunk[8192];
	ssize_t n = read(fd, chunk, sizeof(chunk));
	if (n <= 0)
		return n < 0 && (errno == EINTR || errno == EAGAIN);
	if (b->len + (size_t)n > OUTPUT_MAX) {
		size_t cut = b->len + (size_t)n - OUTPUT_MAX;
		cut = cut > b->len ? b->len : cut;
		memmove(b->data, b->data + cut, b->len - cut);
		b->len -= cut;
		b->data[b->len] = '\0';
	}
	buf_add(b, chunk, (size_t)n);
	return 1;
}

/* Feeds in (len bytes) to the child's stdin and reads its output until it
 * closes both; 0, or -ETIMEDOUT past the deadline. */
static int pump(struct pipes *p, const char *in, size_t len, struct buf *out, struct buf *err,
                int64_t deadline)
{
	size_t off = 0;
	if (len == 0)
		close_fd(&p->in[1]);
	while (p->out[0] >= 0 || p->err[0] >= 0) {
		struct pollfd fds[3] = {
		        {p->out[0], POLLIN, 0}, {p->err[0], POLLIN, 0}, {p->in[1], POLLOUT, 0}};
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(fds, 3, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
			return -errno;
		if (fds[0].revents && !drain(p->out[0], out))
			close_fd(&p->out[0]);
		if (fds[1].revents && !drain(p->err[0], err))
			close_fd(&p->err[0]);
		if (fds[2].revents & POLLOUT) {
			size_t chunk = len - off > 65536 ? 65536 : len - off;
			ssize_t n = write(p->in[1], in + off, chunk);
			off += n > 0 ? (size_t)n : 0;
			if ((n < 0 && errno != EAGAIN && errno != EINTR) || off == len)
				close_fd(&p->in[1]); /* all sent, or ssh went away: it says why */
		} else if (fds[2].revents) {
			close_fd(&p->in[1]);
		}
	}
	return 0;
}

/* Runs script on the machine at address with in on its stdin: the exit
 * status (255: ssh's own failure; -1: it did not exit), output in out and
 * err. */
static int run_script(struct run *r, const char *address, const char *script, const char *in,
                      size_t len, struct buf *out, struct buf *err)
{
	struct pipes p = {{-1, -1}, {-1, -1}, {-1, -1}};
	char *command = bootstrap_remote_command(&r->cfg, script);
	char **argv = bootstrap_ssh_argv(&r->ssh, address, command);
	free(command);
	int status = -1;
	if (pipe2(p.in, O_CLOEXEC) || pipe2(p.out, O_CLOEXEC) || pipe2(p.err, O_CLOEXEC)) {
		buf_printf(err, "cannot make a pipe: %s", strerror(errno));
		goto out;
	}
	fcntl(p.in[1], F_SETFL, O_NONBLOCK);
	pid_t pid = spawn_ssh(argv, &p);
	if (pid < 0) {
		buf_printf(err, "cannot run ssh (openssh-client): %s", strerror(errno));
		goto out;
	}
	if (pump(&p, in, len, out, err, now_ms() + STEP_TIMEOUT_MS) == -ETIMEDOUT) {
		kill(pid, SIGKILL);
		buf_printf(err, "\nthe step took longer than %d minutes: stopped",
		           STEP_TIMEOUT_MS / 60000);
	}
	int ws;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
out:
	for (int i = 0; i < 2; i++) {
		close_fd(&p.in[i]);
		close_fd(&p.out[i]);
		close_fd(&p.err[i]);
	}
	bootstrap_argv_free(argv);
	return status;
}

/* ---- one machine ---- */

static void record(struct host *h, const char *step, enum bootstrap_outcome o, const char *detail)
{
	json_array_append_new(h->steps, json_pack("{s:s,s:s,s:s}", "step", step, "outcome",
	                                          bootstrap_outcome_name(o), "detail", detail));
	if (o == BOOTSTRAP_FAILED || (o == BOOTSTRAP_CHANGED && h->outcome == BOOTSTRAP_OK))
		h->outcome = o;
}

/* Runs one step's script: its outcome, recorded. */
static enum bootstrap_outcome step(struct run *r, struct host *h, const char *name,
                                   const char *script, int file, struct buf *out)
{
	const struct buf *in = file == BOOTSTRAP_BINARY  ? &r->binary
	                       : file == BOOTSTRAP_TOKEN ? &r->token
	                       : file == BOOTSTRAP_UNIT  ? &r->unit
	                                                 : NULL;
	const char *data = file == BOOTSTRAP_CONFIG ? h->config : in ? in->data : "";
	size_t len = file == BOOTSTRAP_CONFIG ? strlen(h->config) : in ? in->len : 0;
	struct buf err;
	buf_init(&err);
	buf_reset(out);
	int status = run_script(r, h->t->address, script, data, len, out, &err);
	char *detail;
	enum bootstrap_outcome o = bootstrap_outcome_of(status, out->data ? out->data : "",
	                                                err.data ? err.data : "", &detail);
	record(h, name, o, detail);
	free(detail);
	buf_cleanup(&err);
	return o;
}

/* inspect: what the machine has, into seen; 0 or -1 (recorded). */
static int inspect(struct run *r, struct host *h, struct bootstrap_seen *seen)
{
	struct buf out;
	buf_init(&out);
	char *script = bootstrap_inspect_script(&r->cfg);
	char why[200];
	int rc = -1;
	struct bootstrap_seen got;
	if (step(r, h, "inspect", script, -1, &out) == BOOTSTRAP_FAILED)
		goto out;
	json_t *last = json_array_get(h->steps, json_array_size(h->steps) - 1);
	if (bootstrap_parse_seen(out.data ? out.data : "", &got, why, sizeof(why))) {
		json_object_set_new(last, "outcome", json_string("failed"));
		json_object_set_new(last, "detail", json_string(why));
		h->outcome = BOOTSTRAP_FAILED;
		goto out;
	}
	char *d =
	        xasprintf("uid %ld, %s, agent %s", got.uid, got.systemd ? "systemd" : "no systemd",
	                  got.running ? "running" : "not running");
	json_object_set_new(last, "detail", json_string(d));
	free(d);
	*seen = got;
	rc = 0;
out:
	free(script);
	buf_cleanup(&out);
	return rc;
}

static void bootstrap_host(struct run *r, struct host *h)
{
	int64_t t0 = now_ms();
	struct bootstrap_seen seen;
	struct bootstrap_plan plan = {NULL, 0};
	struct buf out;
	buf_init(&out);
	if (inspect(r, h, &seen))
		goto out;
	bootstrap_plan(&r->cfg, &seen, &h->want, &plan);
	for (size_t i = 0; i < plan.n; i++) {
		const struct bootstrap_step *s = &plan.v[i];
		if (r->dry_run || !s->script) {
			int check = strcmp(s->name, "check-config") == 0;
			record(h, s->name, s->script && !check ? BOOTSTRAP_CHANGED : BOOTSTRAP_OK,
			       check && r->dry_run ? "not run with --dry-run" : s->detail);
			continue;
		}
		if (strcmp(s->name, "start") == 0)
			h->started_ms = now_ms();
		if (step(r, h, s->name, s->script, s->file, &out) == BOOTSTRAP_FAILED) {
			h->started_ms = 0;
			break;
		}
	}
out:
	h->took_ms = now_ms() - t0;
	bootstrap_plan_free(&plan);
	buf_cleanup(&out);
}

/* ---- the report ---- */

static const char *outcome_word(const struct run *r, enum bootstrap_outcome o)
{
	return r->dry_run && o == BOOTSTRAP_CHANGED ? "would change" : bootstrap_outcome_name(o);
}

static void print_host(const struct run *r, const struct host *h)
{
	const struct bootstrap_target *t = h->t;
	printf("%s%s%s: %s (%.1fs)\n", t->name ? t->name : t->address, t->name ? " " : "",
	       t->name ? t->address : "", outcome_word(r, h->outcome), (double)h->took_ms / 1000);
	size_t i;
	json_t *s;
	json_array_foreach (h->steps, i, s) {
		const char *o = json_string_value(json_object_get(s, "outcome"));
		enum bootstrap_outcome e = strcmp(o, "changed") == 0 ? BOOTSTRAP_CHANGED
		                           : strcmp(o, "ok") == 0    ? BOOTSTRAP_OK
		                                                     : BOOTSTRAP_FAILED;
		printf("  %-13s %-13s %s\n", json_string_value(json_object_get(s, "step")),
		       outcome_word(r, e), json_string_value(json_object_get(s, "detail")));
	}
	fflush(stdout);
}

static void *worker(void *arg)
{
	struct run *r = arg;
	for (;;) {
		pthread_mutex_lock(&r->lock);
		size_t i = r->next++;
		pthread_mutex_unlock(&r->lock);
		if (i >= r->nhosts)
			return NULL;
		bootstrap_host(r, &r->hosts[i]);
		pthread_mutex_lock(&r->lock);
		if (!r->json)
			print_host(r, &r->hosts[i]);
		pthread_mutex_unlock(&r->lock);
	}
}

/* Every machine, up to parallel at once. */
static void run_all(struct run *r, int64_t parallel)
{
	size_t n = (size_t)parallel < r->nhosts ? (size_t)parallel : r->nhosts;
	pthread_t *th = xcalloc(n, sizeof(*th));
	size_t started = 0;
	for (; started < n; started++)
		if (pthread_create(&th[started], NULL, worker, r))
			break;
	if (started == 0) /* no thread at all: this one does the work */
		worker(r);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
}

/* ---- waiting for the nodes ---- */

/* The node of the listing that is h's machine: by name, else by address. */
static const json_t *node_of(const json_t *nodes, const struct host *h)
{
	size_t i;
	json_t *n;
	json_array_foreach (nodes, i, n) {
		const char *key = h->t->name ? "name" : "address";
		const char *want = h->t->name ? h->t->name : h->t->address;
		if (strcmp(verb_str(n, key), want) == 0)
			return n;
	}
	return NULL;
}

/* Marks the machines whose node is there (and, for an agent it started,
 * sent its facts since: facts_ms_ago); the number still waited for. */
static size_t mark_joined(struct run *r, const json_t *nodes)
{
	size_t waiting = 0;
	for (size_t i = 0; i < r->nhosts; i++) {
		struct host *h = &r->hosts[i];
		if (h->outcome == BOOTSTRAP_FAILED || h->joined_ms >= 0)
			continue;
		const json_t *n = node_of(nodes, h);
		int64_t since = h->started_ms ? now_ms() - h->started_ms : INT64_MAX;
		/* a (re)started agent: by the facts it sends first, not by any
		 * sync (the old agent's last one may come after the start began) */
		int fresh = !h->started_ms || verb_int(n, "facts_ms_ago", INT64_MAX) < since;
		if (n && strcmp(verb_str(n, "state"), "lost") != 0 && fresh) {
			h->joined_ms = h->started_ms ? since : 0;
			if (!r->json && h->started_ms)
				printf("%s: joined as node %s (%s) %.1fs after its agent started\n",
				       h->t->address, verb_str(n, "name"), verb_str(n, "state"),
				       (double)since / 1000);
			else if (!r->json)
				printf("%s: registered as node %s (%s)\n", h->t->address,
				       verb_str(n, "name"), verb_str(n, "state"));
		} else {
			waiting++;
		}
	}
	fflush(stdout);
	return waiting;
}

static int wait_joined(struct run *r)
{
	const struct cliargs_value *t = cliargs_get(&r->v->args, "timeout");
	int64_t deadline = now_ms() + (t->set ? t->num : JOIN_TIMEOUT_MS);
	for (;;) {
		json_t *resp = NULL;
		int ret = cliconn_call(&r->v->conn, "GET", "/v1/nodes", NULL, &resp);
		if (ret != CLI_EXIT_OK)
			return ret;
		size_t waiting = mark_joined(r, json_object_get(resp, "nodes"));
		json_decref(resp);
		if (!waiting)
			return CLI_EXIT_OK;
		if (now_ms() >= deadline)
			break;
		sleep_ms(JOIN_POLL_MS);
	}
	for (size_t i = 0; i < r->nhosts; i++) {
		const struct host *h = &r->hosts[i];
		if (h->outcome != BOOTSTRAP_FAILED && h->joined_ms < 0)
			fprintf(stderr,
			        "anvil fleet: %s: no node %s registered within --timeout: see the "
			        "agent's log there (journalctl -u " BOOTSTRAP_UNIT_NAME
			        ", or %s/agent.log without systemd)\n",
			        h->t->address, h->t->name ? h->t->name : "for it", r->cfg.work_dir);
	}
	return CLI_EXIT_FAILED;
}

/* ---- options and files ---- */

/* The join token file: --join-token-file, else the server's on this
 * machine: the state-dir of /etc/anvil/server.yaml, then
 * /var/lib/anvil/server, then $ANVIL_HOME/server (~/.anvil/server). NULL
 * with the places tried printed. The caller frees it. */
static char *token_path(struct verb_ctx *v)
{
	const char *given = cliargs_str(&v->args, "join-token-file");
	if (given)
		return xstrdup(given);
	char *tried[3] = {NULL, xstrdup("/var/lib/anvil/server/join.token"), NULL};
	struct buf text;
	buf_init(&text);
	struct ydoc doc;
	char err[256];
	if (read_file(SERVER_CONFIG, 1 << 20, &text) == 0 &&
	    ydoc_parse(text.data ? text.data : "", text.len, &doc, err, sizeof(err)) == 0) {
		const char *dir = json_string_value(json_object_get(doc.root, "state-dir"));
		tried[0] = dir ? xasprintf("%s/join.token", dir) : NULL;
		ydoc_free(&doc);
	}
	buf_cleanup(&text);
	const char *home = getenv("ANVIL_HOME");
	tried[2] = home && *home ? xasprintf("%s/server/join.token", home)
	                         : xasprintf("%s/.anvil/server/join.token",
	                                     getenv("HOME") ? getenv("HOME") : "");
	char *found = NULL;
	for (int i = 0; i < 3 && !found; i++)
		if (tried[i] && access(tried[i], R_OK) == 0)
			found = xstrdup(tried[i]);
	if (!found)
		fprintf(stderr,
		        "anvil fleet: bootstrap: no join token found (tried %s%s%s, %s): give "
		        "--join-token-file FILE, a copy of the server's STATE_DIR/join.token\n",
		        tried[0] ? tried[0] : "", tried[0] ? ", " : "", tried[1], tried[2]);
	for (int i = 0; i < 3; i++)
		free(tried[i]);
	return found;
}

/* Reads path into b (at most cap bytes): 0, or -1 with why printed. */
static int read_input(const char *what, const char *path, int64_t cap, struct buf *b)
{
	int rc = read_file(path, (size_t)cap, b);
	if (rc)
		fprintf(stderr, "anvil fleet: bootstrap: cannot read the %s %s: %s\n", what, path,
		        rc == -EFBIG ? "too large" : strerror(-rc));
	return rc ? -1 : 0;
}

/* The join token as the server this command asks gives it to an admin (GET /v1/join-token),
 * rotated first when it expired (it admits nothing then, so nothing loses
 * by it; not in a dry run): 0 with it in r->token, or -1 (the server could
 * not be asked, or is one from before the route) to look for the file. */
static int token_from_server(struct run *r)
{
	if (cliargs_str(&r->v->args, "join-token-file") || !r->v->connected)
		return -1; /* not connected: --agent-server with --no-wait asks it nothing */
	struct buf b;
	buf_init(&b);
	int status = 0;
	json_t *o = NULL;
	if (cliconn_do(&r->v->conn, "GET", "/v1/join-token", NULL, &status, &b) == 0 &&
	    status == 200)
		o = json_loadb(b.data ? b.data : "", b.len, 0, NULL);
	if (json_is_true(json_object_get(o, "expired")) && !r->dry_run) {
		json_t *empty = json_object();
		json_decref(o);
		o = NULL;
		buf_reset(&b);
		if (cliconn_do(&r->v->conn, "POST", "/v1/join-token/rotate", empty, &status, &b) ==
		            0 &&
		    status == 200)
			o = json_loadb(b.data ? b.data : "", b.len, 0, NULL);
		json_decref(empty);
		if (o)
			fprintf(stderr,
			        "anvil fleet: bootstrap: the join token had expired; rotated "
			        "it (anvil node token)\n");
	}
	const char *token = jv_str(o, "token", NULL);
	if (token && *token)
		buf_adds(&r->token, token);
	json_decref(o);
	buf_cleanup(&b);
	return r->token.len ? 0 : -1;
}

static int load_files(struct run *r)
{
	const char *bin = cliargs_str(&r->v->args, "binary");
	if (read_input("binary", bin ? bin : "/proc/self/exe", BINARY_MAX, &r->binary))
		return -1;
	char *tpath = token_from_server(r) == 0 ? NULL : token_path(r->v);
	int rc = r->token.len ? 0
	         : tpath      ? read_input("join token file", tpath, 4096, &r->token)
	                      : -1;
	while (rc == 0 && r->token.len && strchr(" \t\r\n", r->token.data[r->token.len - 1]))
		r->token.data[--r->token.len] = '\0';
	if (rc == 0 && r->token.len == 0) {
		fprintf(stderr, "anvil fleet: bootstrap: the join token file %s is empty\n", tpath);
		rc = -1;
	}
	free(tpath);
	if (rc)
		return -1;
	buf_adds(&r->token, "\n");
	char *unit = bootstrap_unit(&r->cfg);
	buf_adds(&r->unit, unit);
	free(unit);
	return 0;
}

/* The targets: a spec FILE's nodes, or ADDR[=NAME] arguments. */
static int load_targets(struct run *r, char **pos, int npos)
{
	const char *groups = cliargs_str(&r->v->args, "group"),
	           *nodes = cliargs_str(&r->v->args, "node");
	char err[512];
	int spec = npos == 1 && (strstr(pos[0], ".yaml") || strstr(pos[0], ".yml") ||
	                         strcmp(pos[0], "-") == 0 || access(pos[0], F_OK) == 0);
	if (!spec && (groups || nodes))
		return verb_usage_error(r->v, "bootstrap: --node and --group choose from a spec "
		                              "FILE, not from ADDR arguments");
	if (!spec) {
		for (int i = 0; i < npos; i++)
			if (bootstrap_parse_target(pos[i], &r->targets, err, sizeof(err)))
				return verb_usage_error(r->v, "bootstrap: %s", err);
		return CLI_EXIT_OK;
	}
	struct buf text;
	buf_init(&text);
	const char *path = strcmp(pos[0], "-") == 0 ? "/dev/stdin" : pos[0];
	if (read_input("spec", path, 4 << 20, &text))
		return CLI_EXIT_FAILED;
	char *errs = xmalloc(64 << 10);
	json_t *fleet =
	        fleet_compile_yaml(pos[0], text.data ? text.data : "", text.len, errs, 64 << 10);
	int ret = CLI_EXIT_OK;
	if (!fleet) {
		fputs(errs, stderr);
		ret = CLI_EXIT_FAILED;
	} else if (bootstrap_from_spec(fleet, groups, nodes, &r->targets, err, sizeof(err))) {
		fprintf(stderr, "anvil fleet: bootstrap: %s: %s\n", pos[0], err);
		ret = CLI_EXIT_FAILED;
	}
	json_decref(fleet);
	free(errs);
	buf_cleanup(&text);
	return ret;
}

/* The options into r->cfg and r->ssh; CLI_EXIT_OK or a usage error. */
static int configure(struct run *r)
{
	struct cliargs *a = &r->v->args;
	const char *dirs[][2] = {{"prefix", BOOTSTRAP_PREFIX},
	                         {"config-dir", BOOTSTRAP_CONFIG_DIR},
	                         {"unit-dir", BOOTSTRAP_UNIT_DIR},
	                         {"work-dir", BOOTSTRAP_WORK_DIR}};
	const char **to[] = {&r->cfg.prefix, &r->cfg.config_dir, &r->cfg.unit_dir,
	                     &r->cfg.work_dir};
	for (size_t i = 0; i < 4; i++)
		*to[i] = cliargs_str(a, dirs[i][0]) ? cliargs_str(a, dirs[i][0]) : dirs[i][1];
	const struct cliargs_value *o = cliargs_get(a, "agent-option");
	r->cfg.options = o->list;
	r->cfg.noptions = o->nlist;
	r->cfg.sudo = cliargs_flag(a, "sudo");
	const struct cliargs_value *port = cliargs_get(a, "ssh-port");
	if (port->set && (port->num < 1 || port->num > 65535))
		return verb_usage_error(r->v, "--ssh-port %lld: not a port from 1 to 65535",
		                        (long long)port->num);
	r->ssh.port = port->set ? port->num : 0;
	r->ssh.user = cliargs_str(a, "ssh-user");
	r->ssh.identity = cliargs_str(a, "identity");
	const struct cliargs_value *so = cliargs_get(a, "ssh-option");
	r->ssh.options = so->list;
	r->ssh.noptions = so->nlist;
	static const char *const once[] = {"node", "group"};
	for (size_t i = 0; i < 2; i++)
		if (cliargs_get(a, once[i])->set > 1)
			return verb_usage_error(
			        r->v, "--%s: give it once, with a list (a,b or a-[01-04])",
			        once[i]);
	return CLI_EXIT_OK;
}

/* The agents' server: --agent-server, else the CLI's own; checked with the
 * paths and options, and against each machine's address. */
static int server_for_agents(struct run *r, int wait)
{
	const char *url = cliargs_str(&r->v->args, "agent-server");
	if (!url || wait) {
		int ret = verb_connect(r->v);
		if (ret != CLI_EXIT_OK)
			return ret;
	}
	r->cfg.server = url ? url : r->v->conn.server;
	char err[512];
	if (bootstrap_config_check(&r->cfg, err, sizeof(err)))
		return verb_usage_error(r->v, "bootstrap: %s", err);
	for (size_t i = 0; i < r->targets.n; i++)
		if (!bootstrap_server_reachable(r->cfg.server, r->targets.v[i].address))
			return verb_usage_error(r->v,
			                        "bootstrap: the agents would join %s, a loopback "
			                        "address that machine "
			                        "%s cannot reach: give --agent-server URL (or "
			                        "--server) with an address "
			                        "the machines reach",
			                        r->cfg.server, r->targets.v[i].address);
	return CLI_EXIT_OK;
}

static void hosts_init(struct run *r)
{
	r->nhosts = r->targets.n;
	r->hosts = xcalloc(r->nhosts, sizeof(*r->hosts));
	struct bootstrap_want common;
	const struct buf *files[] = {&r->binary, NULL, &r->token, &r->unit};
	for (int f = 0; f < BOOTSTRAP_NFILES; f++)
		if (files[f]) {
			hash_sha256(files[f]->data ? files[f]->data : "", files[f]->len,
			            common.hash[f]);
			common.size[f] = (int64_t)files[f]->len;
		}
	for (size_t i = 0; i < r->nhosts; i++) {
		struct host *h = &r->hosts[i];
		h->t = &r->targets.v[i];
		h->config = bootstrap_agent_config(&r->cfg, h->t);
		h->want = common;
		hash_sha256(h->config, strlen(h->config), h->want.hash[BOOTSTRAP_CONFIG]);
		h->want.size[BOOTSTRAP_CONFIG] = (int64_t)strlen(h->config);
		h->steps = json_array();
		h->joined_ms = -1;
	}
}

static void print_json(const struct run *r)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < r->nhosts; i++) {
		const struct host *h = &r->hosts[i];
		json_array_append_new(
		        arr,
		        json_pack("{s:s,s:s?,s:s,s:O,s:I,s:o}", "address", h->t->address, "name",
		                  h->t->name, "outcome", bootstrap_outcome_name(h->outcome),
		                  "steps", h->steps, "took_ms", (json_int_t)h->took_ms, "joined_ms",
		                  h->joined_ms >= 0 ? json_integer(h->joined_ms) : json_null()));
	}
	json_t *o = json_pack("{s:b,s:o}", "dry_run", r->dry_run, "hosts", arr);
	verb_print_json(o);
	json_decref(o);
}

/* The summary line, and the exit status. */
static int summary(const struct run *r, int wait_ret, int waited)
{
	size_t count[3] = {0, 0, 0}, joined = 0;
	for (size_t i = 0; i < r->nhosts; i++) {
		count[r->hosts[i].outcome]++;
		joined += r->hosts[i].joined_ms >= 0;
	}
	if (r->json)
		print_json(r);
	else
		printf("bootstrap: %zu machine%s: %zu %s, %zu ok, %zu failed%s", r->nhosts,
		       r->nhosts == 1 ? "" : "s", count[BOOTSTRAP_CHANGED],
		       r->dry_run ? "would change" : "changed", count[BOOTSTRAP_OK],
		       count[BOOTSTRAP_FAILED], waited ? "; " : "\n");
	if (!r->json && waited)
		printf("%zu of %zu node%s registered\n", joined,
		       count[BOOTSTRAP_CHANGED] + count[BOOTSTRAP_OK],
		       count[BOOTSTRAP_CHANGED] + count[BOOTSTRAP_OK] == 1 ? "" : "s");
	if (count[BOOTSTRAP_FAILED])
		return CLI_EXIT_FAILED;
	return waited ? wait_ret : CLI_EXIT_OK;
}

static void run_free(struct run *r)
{
	for (size_t i = 0; i < r->nhosts; i++) {
		free(r->hosts[i].config);
		json_decref(r->hosts[i].steps);
	}
	free(r->hosts);
	bootstrap_targets_free(&r->targets);
	buf_cleanup(&r->binary);
	buf_cleanup(&r->token);
	buf_cleanup(&r->unit);
	pthread_mutex_destroy(&r->lock);
}

int fleetboot_run(struct verb_ctx *v)
{
	struct run r;
	memset(&r, 0, sizeof(r));
	r.v = v;
	pthread_mutex_init(&r.lock, NULL);
	buf_init(&r.binary);
	buf_init(&r.token);
	buf_init(&r.unit);
	r.dry_run = cliargs_flag(&v->args, "dry-run");
	r.json = cliargs_flag(&v->args, "json");
	const struct cliargs_value *par = cliargs_get(&v->args, "parallel");
	int wait = !r.dry_run && !cliargs_flag(&v->args, "no-wait");
	int ret = configure(&r);
	if (ret == CLI_EXIT_OK && par->set && (par->num < 1 || par->num > PARALLEL_MAX))
		ret = verb_usage_error(v, "--parallel %lld: from 1 to %d machines at once",
		                       (long long)par->num, PARALLEL_MAX);
	if (ret == CLI_EXIT_OK)
		ret = load_targets(&r, v->args.pos + 1, v->args.npos - 1);
	if (ret == CLI_EXIT_OK)
		ret = server_for_agents(&r, wait);
	if (ret == CLI_EXIT_OK && load_files(&r))
		ret = CLI_EXIT_FAILED;
	if (ret != CLI_EXIT_OK)
		goto out;
	hosts_init(&r);
	signal(SIGPIPE, SIG_IGN); /* ssh gone while its stdin is written: EPIPE */
	run_all(&r, par->set ? par->num : PARALLEL_DEFAULT);
	int wait_ret = CLI_EXIT_OK;
	if (wait)
		wait_ret = wait_joined(&r);
	ret = summary(&r, wait_ret, wait);
out:
	run_free(&r);
	return ret;
}
