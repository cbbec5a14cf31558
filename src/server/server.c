/* server.c - `anvil server`: flags, tokens, the HTTP API, the housekeeping
 * loop (long-poll deadlines, silent nodes) and orderly shutdown.
 *
 * Threads: MHD's pool runs the handlers; one housekeeping thread ticks every
 * 50 ms; the fleet's checker threads run node checks; main waits for a
 * signal. All cluster state is behind state.mu.
 */
#include "server/server.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/conf.h"
#include "base/connguard.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/jv.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "objstore/blob.h"
#include "sched/sched.h"
#include "server/idem.h"

#define OBJECT_MAX_DEFAULT (256LL << 30) /* --object-max-size */

struct server_config {
	char state_dir[PATH_MAX + 16];
	char home[PATH_MAX];
	char bind[64];
	int port;
	int64_t node_timeout_ms;
	int full_sync;
	int threads;
	int64_t preempt_min_runtime_ms;
	int64_t preempt_max_ratio;
	int64_t preempt_loss_pct;
	int64_t preempt_restart_cost_ms;
	int64_t half_life_ms;
	int64_t session_warning_ms;
	int64_t idem_keep_ms;
	char objects[PATH_MAX + 16]; /* "": file://STATE_DIR/objects */
	int64_t object_max;
	int64_t join_ttl_ms;
	int approve_nodes;
	int bind_node_address;
	int rank_lease; /* ranks stop themselves a node timeout after their node's last sync */
	struct connguard_limits http; /* the http-* options */
	enum log_level level;
};

static const char usage[] =
        "usage: anvil server [options]\n"
        "\n"
        "Runs the control plane: the API, the state database and the scheduler.\n"
        "\n"
        "  --state-dir DIR      database and tokens (default $ANVIL_HOME/server)\n"
        "  --listen ADDR:PORT   where the API listens (default 127.0.0.1:7070; port 0 = any)\n"
        "  --node-timeout DUR   a node silent this long is lost (default 30s; 1s..1h)\n"
        "  --rank-lease on|off  a node's ranks stop by themselves when their agent has not\n"
        "                       reached the server for the node timeout, so a requeued job\n"
        "                       never overlaps its lost attempt (default on)\n"
        "  --threads N          HTTP worker threads (default 2; 1..64)\n"
        "  --full-sync          fsync every commit (survives power loss, slower)\n"
        "  --home DIR           where to write client.json (default $ANVIL_HOME or ~/.anvil)\n"
        "  --log-level LEVEL    error, warn, info or debug (default info)\n"
        "  --objects URI        the object store: code bundles, task outputs, checkpoints\n"
        "                       (default file://STATE_DIR/objects)\n"
        "  --object-max-size N  the largest object an upload may store (default 256Gi;\n"
        "                       bytes, or with K/M/G/T, Ki/Mi/Gi/Ti)\n"
        "  --config FILE        read options from FILE: YAML, the long option names as\n"
        "                       keys (default /etc/anvil/server.yaml when it exists);\n"
        "                       flags on the command line win over it\n"
        "  --no-config          read no config file\n"
        "  --check-config       validate the config file and options, and exit\n"
        "  --preempt-min-runtime DUR  attempts younger than this are never preempted for\n"
        "                             priority (5m; reclaim of borrowed quota ignores it)\n"
        "  --preempt-max-ratio N      a job may stop lower-priority work holding up to N\n"
        "                             times the GPUs it asks for (2; 0 = only by the loss\n"
        "                             limit)\n"
        "  --preempt-loss-pct N       ... more only if that loses at most N% of the GPU-time\n"
        "                             the job has waited (50; 0 = no limit)\n"
        "  --preempt-restart-cost DUR what stopping an attempt costs per GPU beyond its\n"
        "                             lost work, in victim choice and that limit (10m)\n"
        "  --fair-share-half-life DUR half-life of the usage behind fair share (24h)\n"
        "  --session-warning DUR      a session's terminal is warned this long before its\n"
        "                             time limit or idle timeout ends it (1m; at most half\n"
        "                             of either; 1s..1h)\n"
        "  --idempotency-keep DUR     how long a create's Idempotency-Key is remembered,\n"
        "                             with its first answer (24h; 1s..720h)\n"
        "\n"
        "Node identity (docs/operations.md, \"Node identity\"):\n"
        "  --join-token-ttl DUR       how long a join token admits new nodes from when it\n"
        "                             is made or rotated (24h; 0 = forever)\n"
        "  --approve-nodes            a new node takes no work until `anvil node approve`\n"
        "  --bind-node-address        a node's secret is good only from the address it\n"
        "                             registered from (moving it takes `anvil node reset`)\n"
        "\n"
        "The HTTP server's connections (the agent has the same options):\n";

int server_default_home(char *out, size_t n);
int server_default_home(char *out, size_t n)
{
	const char *h = getenv("ANVIL_HOME");
	if (h && *h)
		return snprintf(out, n, "%s", h) >= (int)n ? ERR_TOOBIG : 0;
	const char *home = getenv("HOME");
	return snprintf(out, n, "%s/.anvil", home && *home ? home : "/root") >= (int)n ? ERR_TOOBIG
	                                                                               : 0;
}

static int parse_listen(const char *v, struct server_config *c)
{
	const char *colon = strrchr(v, ':');
	int64_t port;
	if (!colon || (size_t)(colon - v) >= sizeof(c->bind) || colon == v ||
	    parse_i64(colon + 1, 0, 65535, &port))
		return ERR_INVALID;
	snprintf(c->bind, sizeof(c->bind), "%.*s", (int)(colon - v), v);
	c->port = (int)port;
	return 0;
}

/* "256Gi", "10G", "1048576": bytes (K/M/G/T powers of 1000, Ki/Mi/Gi/Ti
 * of 1024), from 1 MiB to 1 PiB. */
static int parse_size(const char *v, int64_t *out)
{
	char *end = NULL;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || n < 1)
		return ERR_INVALID;
	static const char units[] = "KMGT";
	const char *u = *end ? strchr(units, *end) : NULL;
	int64_t mult = 1;
	if (*end && !u)
		return ERR_INVALID;
	if (u) {
		int bin = end[1] == 'i';
		if (end[1 + bin] != '\0')
			return ERR_INVALID;
		for (const char *p = units; p <= u; p++)
			mult *= bin ? 1024 : 1000;
	}
	if (n > (1LL << 50) / mult || n * mult < (1LL << 20))
		return ERR_INVALID;
	*out = n * mult;
	return 0;
}

/* The config file read when there is one and --config names none. */
#define SERVER_CONFIG_FILE "/etc/anvil/server.yaml"

/* Options that take no value; a config file writes them `full-sync: true`. */
static const char *const switches[] = {"full-sync", "approve-nodes", "bind-node-address", NULL};

static const char unknown_option[] = "is not an option of anvil server (see --help)";

/* A refused option, argv[i] (the flag, or its value when value is set).
 * from: the config file it came from, which keeps the error to say it
 * with the file's others, in their order (conf_report); NULL for the
 * command line, whose error is said at once. */
static int bad(struct conf *from, int i, const char *flag, const char *value, const char *why)
{
	if (from) {
		if (value)
			conf_error(from, i, "'%s' %s", value, why);
		else
			conf_error(from, i, "%s", why);
		return 2;
	}
	fprintf(stderr, "anvil server: %s: ", flag);
	if (value)
		fprintf(stderr, "'%s' ", value);
	fprintf(stderr, "%s\n", why);
	return 2;
}

static void config_defaults(struct server_config *c)
{
	memset(c, 0, sizeof(*c)); /* every option starts at its default, full_sync off */
	server_default_home(c->home, sizeof(c->home));
	c->state_dir[0] = '\0';
	snprintf(c->bind, sizeof(c->bind), "127.0.0.1");
	c->port = 7070;
	c->node_timeout_ms = 30000;
	c->rank_lease = 1;
	c->threads = 2;
	c->preempt_min_runtime_ms = SCHED_DEFAULT_MIN_RUNTIME_MS;
	c->preempt_max_ratio = SCHED_DEFAULT_PREEMPT_RATIO;
	c->preempt_loss_pct = SCHED_DEFAULT_PREEMPT_LOSS_PCT;
	c->preempt_restart_cost_ms = SCHED_DEFAULT_RESTART_COST_MS;
	c->half_life_ms = 24 * 3600 * 1000LL;
	c->session_warning_ms = 60 * 1000;
	c->idem_keep_ms = IDEM_KEEP_DEFAULT_MS;
	c->object_max = OBJECT_MAX_DEFAULT;
	c->join_ttl_ms = 24 * 3600 * 1000LL; /* as kubeadm's bootstrap tokens */
	connguard_limits_default(&c->http);
	c->level = LOG_INFO;
}

/* Sets the option f ("--listen") to v: NULL, or why v is refused
 * (unknown_option when there is no option f). */
static const char *set_option(struct server_config *c, const char *f, const char *v)
{
	int64_t n;
	if (strcmp(f, "--state-dir") == 0)
		snprintf(c->state_dir, sizeof(c->state_dir), "%s", v);
	else if (strcmp(f, "--home") == 0)
		snprintf(c->home, sizeof(c->home), "%s", v);
	else if (strcmp(f, "--listen") == 0) {
		if (parse_listen(v, c))
			return "is not ADDR:PORT with a port from 0 to 65535";
	} else if (strcmp(f, "--node-timeout") == 0) {
		if (parse_duration_ms(v, &c->node_timeout_ms) || c->node_timeout_ms < 1000 ||
		    c->node_timeout_ms > 3600000)
			return "is not a duration from 1s to 1h";
	} else if (strcmp(f, "--rank-lease") == 0) {
		if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
			return "is not on or off";
		c->rank_lease = strcmp(v, "on") == 0;
	} else if (strcmp(f, "--threads") == 0) {
		if (parse_i64(v, 1, 64, &n))
			return "is not a number from 1 to 64";
		c->threads = (int)n;
	} else if (strcmp(f, "--preempt-min-runtime") == 0) {
		if (parse_duration_ms(v, &c->preempt_min_runtime_ms))
			return "is not a duration such as 0s, 30s or 5m";
	} else if (strcmp(f, "--preempt-max-ratio") == 0) {
		if (parse_i64(v, 0, 1000000, &c->preempt_max_ratio))
			return "is not a number from 0 to 1000000";
	} else if (strcmp(f, "--preempt-loss-pct") == 0) {
		if (parse_i64(v, 0, 100000, &c->preempt_loss_pct))
			return "is not a percentage from 0 to 100000";
	} else if (strcmp(f, "--preempt-restart-cost") == 0) {
		if (parse_duration_ms(v, &c->preempt_restart_cost_ms))
			return "is not a duration such as 0s, 30s or 10m";
	} else if (strcmp(f, "--fair-share-half-life") == 0) {
		if (parse_duration_ms(v, &c->half_life_ms) || c->half_life_ms < 1000)
			return "is not a duration of at least 1s";
	} else if (strcmp(f, "--session-warning") == 0) {
		if (parse_duration_ms(v, &c->session_warning_ms) || c->session_warning_ms < 1000 ||
		    c->session_warning_ms > 3600000)
			return "is not a duration from 1s to 1h";
	} else if (strcmp(f, "--idempotency-keep") == 0) {
		if (parse_duration_ms(v, &c->idem_keep_ms) || c->idem_keep_ms < IDEM_KEEP_MIN_MS ||
		    c->idem_keep_ms > IDEM_KEEP_MAX_MS)
			return "is not a duration from 1s to 720h (30 days)";
	} else if (strcmp(f, "--objects") == 0) {
		if (strncmp(v, "file:///", 8) != 0 || strlen(v) >= sizeof(c->objects))
			return "is not file:///ABSOLUTE/DIR (s3:// comes with the cache tier)";
		snprintf(c->objects, sizeof(c->objects), "%s", v);
	} else if (strcmp(f, "--object-max-size") == 0) {
		if (parse_size(v, &c->object_max))
			return "is not a size from 1Mi to 1Pi (bytes, or 10G, 256Gi)";
	} else if (strcmp(f, "--join-token-ttl") == 0) {
		if (parse_duration_ms(v, &c->join_ttl_ms) ||
		    (c->join_ttl_ms != 0 && c->join_ttl_ms < 1000) ||
		    c->join_ttl_ms > JOINTOKEN_TTL_MAX_MS)
			return "is not a duration from 1s to 87840h, or 0 for a token that never "
			       "expires";
	} else if (strcmp(f, "--log-level") == 0) {
		if (log_level_parse(v, &c->level))
			return "is not one of error, warn, info, debug";
	} else {
		const char *why = NULL;
		int rc = strncmp(f, "--", 2) == 0 ? connguard_option_set(&c->http, f + 2, v, &why)
		                                  : ERR_NOTFOUND;
		if (rc == ERR_NOTFOUND)
			return unknown_option;
		return why;
	}
	return NULL;
}

/* Applies argv's options to c. from: the config file argv was read from
 * (conf.h), which keeps each error with its position; NULL for the command
 * line. --config FILE and --no-config were conf_load's to act on. */
static int parse_flags(int argc, char **argv, struct conf *from, struct server_config *c,
                       int *check_only)
{
	int rc = 0; /* a file's errors are all said; the command line stops at its first */
	for (int i = 1; i < argc && (rc == 0 || from); i++) {
		const char *f = argv[i];
		if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
			fputs(usage, stdout);
			for (int k = 0; k < CONNGUARD_NOPTIONS; k++)
				printf("  --%s V\n        %s\n", connguard_options[k].name,
				       connguard_options[k].help);
			exit(0);
		}
		if (strcmp(f, "--full-sync") == 0) {
			c->full_sync = 1;
			continue;
		}
		if (strcmp(f, "--approve-nodes") == 0 || strcmp(f, "--bind-node-address") == 0) {
			*(strcmp(f, "--approve-nodes") == 0 ? &c->approve_nodes
			                                    : &c->bind_node_address) = 1;
			continue;
		}
		if (strcmp(f, "--check-config") == 0) {
			*check_only = 1;
			continue;
		}
		if (strcmp(f, "--no-config") == 0 || strncmp(f, "--config=", 9) == 0)
			continue;
		const char *v = i + 1 < argc ? argv[++i] : NULL;
		if (!v)
			return bad(from, i, f, NULL, "needs a value");
		if (strcmp(f, "--config") == 0)
			continue;
		const char *why = set_option(c, f, v);
		if (why == unknown_option)
			rc = bad(from, i - 1, f, NULL, why);
		else if (why)
			rc = bad(from, i, f, v, why);
	}
	return rc;
}

/* The options: the defaults, then the config file's, then the command
 * line's (which win). config_file gets the file read, or "none". */
static int configure(int argc, char **argv, struct server_config *c, int *check_only,
                     char *config_file, size_t len)
{
	struct conf from;
	char err[8192];
	config_defaults(c);
	if (conf_load(argc, argv, "anvil server", SERVER_CONFIG_FILE, switches, &from, err,
	              sizeof(err))) {
		fputs(err, stderr);
		return 2;
	}
	/* the file's errors all, in its order; then the command line's first */
	parse_flags(from.argc, from.argv, &from, c, check_only);
	int file = conf_report(&from, stderr) ? 2 : 0;
	int rc = parse_flags(argc, argv, NULL, c, check_only);
	rc = file ? file : rc;
	snprintf(config_file, len, "%s", from.file ? from.file : "none");
	conf_free(&from);
	if (!c->state_dir[0])
		snprintf(c->state_dir, sizeof(c->state_dir), "%s/server", c->home);
	return rc;
}

/* Why `t` (trailing white space already cut) is no token, or NULL. */
static const char *token_problem(const char *t, size_t len)
{
	if (len < SERVER_TOKEN_MIN)
		return "is shorter than 32 characters";
	if (len > SERVER_TOKEN_MAX)
		return "is longer than 128 characters";
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)t[i];
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		         (ch >= '0' && ch <= '9') || (ch != 0 && strchr("._~+/=-", ch));
		if (!ok)
			return "holds a character other than letters, digits and ._~+/=-";
	}
	return NULL;
}

/* ---- files for the server alone ----
 *
 * The state directory holds every credential of the cluster (admin.token,
 * join.token; the nodes' secrets and the exec tokens in anvil.db), every
 * job's environment (anvil.db) and every stored object: it is the
 * server's alone, 0700, its token files and database 0600, whatever the
 * umask. Each is created that way (write_file_atomic, store_open,
 * blob_open, the upload spool); what an older version left looser is
 * tightened at start, and the log says so, once per file. */

/* Takes path to at most mode, saying so when it was looser. */
static void tighten(const char *path, unsigned mode)
{
	unsigned was = 0;
	int rc = tighten_mode(path, mode, &was);
	if (rc == 1)
		log_warn("tightened the mode of path=%s from=0%03o to=0%03o: it holds the "
		         "cluster's credentials or state, for the server's user only",
		         path, was, was & mode);
	else if (rc < 0 && rc != -ENOENT)
		log_warn("cannot tighten the mode of path=%s to=0%03o err=%s", path, mode,
		         err_msg(rc));
}

static void tighten_state(const char *dir)
{
	static const char *const files[] = {"admin.token", "join.token", "anvil.db", "anvil.db-wal",
	                                    "anvil.db-shm"};
	tighten(dir, 0700);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char *path = xasprintf("%s/%s", dir, files[i]);
		tighten(path, 0600);
		free(path);
	}
}

/* Reads the token in dir/name, creating it (0600) at first start. A file
 * that is there but holds no valid token is an error, not replaced: the
 * agents or the CLI may hold what it was meant to say. */
static int load_token(const char *dir, const char *name, char out[SERVER_TOKEN_MAX + 1])
{
	char *path = xasprintf("%s/%s", dir, name);
	struct buf b;
	buf_init(&b);
	int rc = read_file(path, 4096, &b);
	if (rc == -ENOENT) {
		random_hex(out, 32);
		char line[70];
		snprintf(line, sizeof(line), "%s\n", out);
		rc = write_file_atomic(path, line, strlen(line), 0600);
		if (rc)
			log_error("cannot write the token file path=%s err=%s", path, err_msg(rc));
	} else if (rc) {
		log_error("cannot read the token file path=%s err=%s", path, err_msg(rc));
	} else {
		while (b.len && strchr(" \t\r\n", b.data[b.len - 1]))
			b.data[--b.len] = '\0';
		const char *why = token_problem(b.data ? b.data : "", b.len);
		if (why) {
			log_error("bad token file path=%s length=%zu: it %s; %s", path, b.len, why,
			          "remove it to have a new one made, and give that to the agents "
			          "and the CLI");
			rc = ERR_INVALID;
		} else {
			memcpy(out, b.data, b.len + 1);
		}
	}
	buf_cleanup(&b);
	free(path);
	return rc;
}

static int write_client_file(const struct server_config *c, const struct server *s)
{
	if (mkdir_p(c->home, 0700))
		return -errno;
	json_t *o = json_pack("{s:s,s:s}", "server", s->url, "token", s->admin_token);
	char *text = jv_dump(o);
	char *path = xasprintf("%s/client.json", c->home);
	int rc = write_file_atomic(path, text, strlen(text), 0600);
	if (rc)
		log_error("cannot write client file path=%s err=%s", path, err_msg(rc));
	free(path);
	free(text);
	json_decref(o);
	return rc;
}

/* The fleet's calls to agents (server/fleet.h): a node converged to its
 * profile is validated by the same check as POST /v1/nodes/NAME/check, and
 * an agent whose node failed or drifted is asked to converge again (an
 * apply's "reconverge"), outside the state lock, by CHECKERS threads, one
 * call each at a time. Shutdown waits for a call in flight (at most its
 * timeout). */
#define CHECKERS 2

/* An agent to ask to converge again, if one waits: 1 when one was asked. */
static int converge_one(struct server *s)
{
	int64_t id = 0;
	char hash[72], why[300] = "";
	state_lock(&s->state);
	int rc = state_node_next_converge(&s->state, &id, hash, sizeof(hash));
	state_unlock(&s->state);
	if (rc)
		return 0;
	rc = api_nodes_converge(s, id, hash, why, sizeof(why));
	state_lock(&s->state);
	state_node_converge_asked(&s->state, id, hash, rc, why);
	state_flush(&s->state);
	state_unlock(&s->state);
	return 1;
}

static void *checker(void *arg)
{
	struct server *s = arg;
	while (!s->stopping) {
		int64_t id = 0;
		char hash[72], text[300] = "";
		json_t *expect = NULL, *result = NULL;
		if (converge_one(s))
			continue;
		state_lock(&s->state);
		int rc = state_node_next_check(&s->state, wall_ms(), &id, hash, sizeof(hash),
		                               &expect);
		state_unlock(&s->state);
		if (rc) {
			sleep_ms(100);
			continue;
		}
		rc = api_nodes_check(s, id, expect, &result, text, sizeof(text));
		if (rc == 0)
			api_nodes_check_text(result, text, sizeof(text));
		state_lock(&s->state);
		state_node_checked(&s->state, id, hash, rc == 0 && jv_bool(result, "ok", 0), text,
		                   1);
		state_flush(&s->state);
		state_unlock(&s->state);
		json_decref(result);
	}
	return NULL;
}

static void *housekeeping(void *arg)
{
	struct server *s = arg;
	while (!s->stopping) {
		state_lock(&s->state);
		int64_t now = now_ms();
		agentproto_expire(s, now);
		api_wait_check(s, now);
		state_check_nodes(&s->state, now);
		state_schedule_tick(&s->state, now);
		state_flush(&s->state);
		state_idem_prune(&s->state);
		state_unlock(&s->state);
		sleep_ms(50);
	}
	return NULL;
}

/* The object store, and the directory uploads arrive in (emptied: what a
 * killed server left there is nobody's). */
static int open_objects(struct server *s, const struct server_config *c, char *uploads, size_t len)
{
	char abs[PATH_MAX];
	if (!realpath(c->state_dir, abs)) {
		log_error("cannot resolve state dir path=%s err=%s", c->state_dir, strerror(errno));
		return -errno;
	}
	char *uri = c->objects[0] ? xstrdup(c->objects) : xasprintf("file://%s/objects", abs);
	char err[512];
	int rc = blob_open(uri, &s->state.objects, err, sizeof(err));
	if (rc)
		log_error("cannot open the object store uri=%s err=\"%s\"", uri, err);
	else
		log_info("object store uri=%s max_bytes=%lld", uri, (long long)c->object_max);
	if (rc == 0 &&
	    !c->objects[0]) /* the default, in the state dir; one given is left as made */
		tighten(uri + strlen("file://"), 0700);
	free(uri);
	s->object_max = c->object_max;
	snprintf(uploads, len, "%s/uploads", abs);
	rm_rf(uploads);
	return rc;
}

/* The admin token, and the join token with its record (jointoken.h). */
static int open_join_token(struct server *s, const struct server_config *c)
{
	char join[SERVER_TOKEN_MAX + 1], err[PATH_MAX + 200];
	int rc = load_token(c->state_dir, "admin.token", s->admin_token);
	if (rc == 0)
		rc = load_token(c->state_dir, "join.token", join);
	if (rc)
		return rc;
	snprintf(s->state_dir, sizeof(s->state_dir), "%s", c->state_dir);
	s->join_ttl_ms = c->join_ttl_ms;
	s->approve_nodes = c->approve_nodes;
	s->bind_node_address = c->bind_node_address;
	rc = jointoken_load(c->state_dir, join, c->join_ttl_ms, wall_ms(), &s->join, err,
	                    sizeof(err));
	if (rc)
		log_error("cannot open the join token: %s", err);
	else
		log_info("join token expires_ms=%lld approve_nodes=%d bind_node_address=%d",
		         (long long)s->join.expires_ms, s->approve_nodes, s->bind_node_address);
	return rc;
}

static int open_all(struct server *s, const struct server_config *c)
{
	int rc = mkdir_p(c->state_dir, 0700);
	if (rc) {
		log_error("cannot create state dir path=%s err=%s", c->state_dir, err_msg(rc));
		return rc;
	}
	tighten_state(c->state_dir);
	if ((rc = open_join_token(s, c)))
		return rc;
	char *db = xasprintf("%s/anvil.db", c->state_dir);
	rc = state_open(&s->state, db, c->full_sync, c->node_timeout_ms);
	if (rc)
		log_error("cannot open the state database path=%s err=%s (a damaged file is left "
		          "as it is: restore it from a backup, or move it away to start empty)",
		          db, err_msg(rc));
	free(db);
	if (rc)
		return rc;
	s->state_open = 1;
	s->state.wake = agentproto_wake;
	s->state.config.preempt_min_runtime_ms = c->preempt_min_runtime_ms;
	s->state.config.preempt_max_ratio = (int)c->preempt_max_ratio;
	s->state.config.preempt_loss_pct = (int)c->preempt_loss_pct;
	s->state.config.preempt_restart_cost_ms = c->preempt_restart_cost_ms;
	s->state.config.usage_half_life_ms = c->half_life_ms;
	s->state.config.session_warning_ms = c->session_warning_ms;
	s->state.config.idem_keep_ms = c->idem_keep_ms;
	s->state.config.rank_lease = c->rank_lease;
	/* A lease runs from when its sync was sent (agent/lease.h): held up to
	 * H, renewals come 2H apart at worst, and a rank is sent SIGTERM a
	 * quarter of the lease before its end, so 2H must stay below three
	 * quarters of it. */
	s->max_wait_ms = c->rank_lease ? c->node_timeout_ms / 4 : c->node_timeout_ms / 2;
	char uploads[PATH_MAX + 32];
	if ((rc = open_objects(s, c, uploads, sizeof(uploads))))
		return rc;
	struct httpd_config hc = {.bind = c->bind,
	                          .port = c->port,
	                          .threads = c->threads,
	                          .handler = server_handle,
	                          .ctx = s,
	                          .spool = api_objects_spool,
	                          .spool_dir = uploads,
	                          .limits = c->http};
	rc = httpd_start(&hc, &s->http);
	if (rc)
		return rc;
	snprintf(s->url, sizeof(s->url), "http://%s:%d", c->bind, httpd_port(s->http));
	return write_client_file(c, s);
}

int server_main(int argc, char **argv)
{
	struct server_config c;
	int check_only = 0;
	char config_file[PATH_MAX];
	int rc = configure(argc, argv, &c, &check_only, config_file, sizeof(config_file));
	if (rc)
		return rc;
	if (check_only) {
		char http[512];
		connguard_limits_text(&c.http, http, sizeof(http));
		printf("configuration ok: config=%s state-dir=%s listen=%s:%d node-timeout=%lldms "
		       "full-sync=%s preempt-min-runtime=%lldms preempt-max-ratio=%lld "
		       "preempt-loss-pct=%lld preempt-restart-cost=%lldms object-max-size=%lld "
		       "join-token-ttl=%lldms approve-nodes=%s bind-node-address=%s "
		       "idempotency-keep=%lldms rank-lease=%s %s\n",
		       config_file, c.state_dir, c.bind, c.port, (long long)c.node_timeout_ms,
		       c.full_sync ? "on" : "off", (long long)c.preempt_min_runtime_ms,
		       (long long)c.preempt_max_ratio, (long long)c.preempt_loss_pct,
		       (long long)c.preempt_restart_cost_ms, (long long)c.object_max,
		       (long long)c.join_ttl_ms, c.approve_nodes ? "on" : "off",
		       c.bind_node_address ? "on" : "off", (long long)c.idem_keep_ms,
		       c.rank_lease ? "on" : "off", http);
		return 0;
	}
	log_init("server", c.level);
	httpd_nofile_raise();
	httpc_global_init();
	signal(SIGPIPE, SIG_IGN);
	stop_signals_catch();
	struct server *s = xcalloc(1, sizeof(*s));
	pthread_mutex_init(&s->objects_mu, NULL);
	pthread_mutex_init(&s->join_mu, NULL);
	rc = open_all(s, &c);
	if (rc) {
		fprintf(stderr, "anvil server: cannot start: %s (the log above says why)\n",
		        err_msg(rc));
		if (s->http)
			httpd_stop(s->http);
		if (s->state_open)
			state_close(&s->state);
		blob_close(s->state.objects);
		pthread_mutex_destroy(&s->objects_mu);
		pthread_mutex_destroy(&s->join_mu);
		free(s);
		return 1;
	}
	log_info("listening url=%s state_dir=%s config=%s", s->url, c.state_dir, config_file);
	pthread_t hk, checks[CHECKERS];
	pthread_create(&hk, NULL, housekeeping, s);
	for (int i = 0; i < CHECKERS; i++)
		pthread_create(&checks[i], NULL, checker, s);
	while (!stop_signal())
		pause();
	log_info("stopping signal=%d", stop_signal());
	agentproto_release_all(s);
	state_lock(&s->state);
	api_wait_check(s, INT64_MAX); /* stopping: every job long poll answered now */
	state_unlock(&s->state);
	pthread_join(hk, NULL);
	for (int i = 0; i < CHECKERS; i++)
		pthread_join(checks[i], NULL);
	httpd_stop(s->http);
	state_close(&s->state);
	blob_close(s->state.objects);
	pthread_mutex_destroy(&s->objects_mu);
	pthread_mutex_destroy(&s->join_mu);
	free(s->waiters);
	free(s);
	return 0;
}
