#include "agent/agent.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/bundles.h"
#include "agent/ckptsync.h"
#include "agent/converge.h"
#include "agent/desired.h"
#include "agent/exec.h"
#include "agent/fence.h"
#include "agent/gpuwatch.h"
#include "agent/hang.h"
#include "agent/ident.h"
#include "agent/launch.h"
#include "agent/serve.h"
#include "agent/streams.h"
#include "agent/syncer.h"
#include "base/buf.h"
#include "base/conf.h"
#include "base/connguard.h"
#include "base/err.h"
#include "base/httpc.h"
#include "base/httpd.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"
#include "gpu/gpu.h"
#include "gpu/rdma.h"

#define SHUTDOWN_GRACE_MS 5000
/* A refused registration (401, 409) is tried again at most this far apart. */
#define REGISTER_RETRY_MAX_MS 10000

/* The config file read when there is one and --config names none. */
#define AGENT_CONFIG_FILE "/etc/anvil/agent.yaml"
#define AGENT_FLAGS_MAX   32

struct agent_opts {
	const char *server, *join_token, *join_token_file, *name, *work_dir, *gpus_file;
	const char *listen, *address, *wait_ms, *log_level, *spare_shims;
	const char *gpu_backend, *gpu_sample_ms, *gpu_check_program, *sysfs_root, *config;
	const char *profile_check_interval, *bundle_keep, *rank_user;
	const char *http[CONNGUARD_NOPTIONS]; /* by connguard_options' index */
	/* By flags[] index: the index in conf's argv of the value in force
	 * when the config file gave it, 0 when the command line did or it is
	 * the default. conf: struct agent's, which keeps the file's errors. */
	int at[AGENT_FLAGS_MAX];
	struct conf *conf;
	int check_only;
	char host[256];
	int port;
	int64_t wait, spares, sample_ms, check_interval_ms, bundle_keep_ms;
	struct connguard_limits limits; /* the http-* flags' */
	enum log_level level;
};

struct agent {
	struct agent_opts o;
	struct conf conf; /* the config file's flags: o's strings borrow from it */
	char *token;
	char *node_file;
	int sigfd;
	struct gpu_backend *gpus;
	struct gpuwatch *watch;
	struct converge *converge;
	struct rdma_port rdma[RDMA_MAX_PORTS];
	int nrdma;
	int gpu_minors[GPU_MAX]; /* N of /dev/nvidiaN by GPU index; -1 unknown */
	struct exec *exec;
	struct serve *serve;
	struct serve_stats stats;
	struct httpc *http;
	struct syncer *sync;
	struct ckptsync *ckpt; /* uploads checkpoints as they are written; NULL: none */
	struct hang *hang;     /* hang detection of ranks with a hang timeout */
	json_t *facts;
	struct ident id;
	char refused[512];           /* the last refusal of a registration, logged once; "": none */
	uint64_t contexts_published; /* exec_context_version last given to serve */
	int64_t next_sweep_ms;       /* of the code bundles (agent/bundles.h) */
};

struct flag {
	const char *name;
	size_t off;
	const char *help; /* NULL: connguard_options' (the http-* flags) */
};

#define OPT(f) offsetof(struct agent_opts, f)
static const struct flag flags[] = {
        {"server", OPT(server), "URL of the anvil server (required)"},
        {"join-token", OPT(join_token), "the cluster's join token"},
        {"join-token-file", OPT(join_token_file), "a file holding the join token"},
        {"name", OPT(name), "node name (default: the hostname)"},
        {"work-dir", OPT(work_dir), "node state, rank logs and outputs (required)"},
        {"gpus-file", OPT(gpus_file), "simulated GPUs (JSON; gpu/sim.h): the sim backend"},
        {"gpu-backend", OPT(gpu_backend),
         "nvml, nvml:LIBRARY, none or sim:FILE (default: sim with --gpus-file, else nvml, "
         "falling back to none without NVIDIA's library or GPUs)"},
        {"gpu-sample-ms", OPT(gpu_sample_ms), "GPU health and metrics sampling period (2000)"},
        {"gpu-check-program", OPT(gpu_check_program),
         "a CUDA program run per GPU by 'anvil node check' (exit 0: pass)"},
        {"sysfs-root", OPT(sysfs_root), "where RDMA devices are read from (/sys)"},
        {"listen", OPT(listen), "HOST:PORT of the agent's HTTP server (127.0.0.1:0)"},
        {"address", OPT(address), "address other nodes reach this one at (127.0.0.1)"},
        {"wait-ms", OPT(wait_ms), "sync long-poll wait in ms (10000)"},
        {"log-level", OPT(log_level), "error, warn, info or debug (info)"},
        {"profile-check-interval", OPT(profile_check_interval),
         "how often the node's profile is checked for drift: 60s, 5m; 0: never (60s)"},
        {"bundle-keep", OPT(bundle_keep),
         "remove a code bundle unused this long: 72h, 168h; 0: keep all (72h)"},
        {"rank-user", OPT(rank_user),
         "the account ranks run as, in namespaces of their own (anvil-job; root: as root)"},
        {"spare-shims", OPT(spare_shims),
         "shims kept ready for the next ranks, 0-8 (auto: one per GPU, 2 to 8)"},
        {"config", OPT(config),
         "YAML of these flags by name (default " AGENT_CONFIG_FILE " if there); flags here win"},
        /* the HTTP server's connections (base/connguard.h), as the server's */
        {"http-max-connections", OPT(http[0]), NULL},
        {"http-max-per-address", OPT(http[1]), NULL},
        {"http-header-timeout", OPT(http[2]), NULL},
        {"http-body-timeout", OPT(http[3]), NULL},
        {"http-body-min-rate", OPT(http[4]), NULL},
        {"http-idle-timeout", OPT(http[5]), NULL},
};
_Static_assert(CONNGUARD_NOPTIONS == 6, "every http-* option has its flag");
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))
_Static_assert(NFLAGS <= AGENT_FLAGS_MAX, "agent_opts.where holds every flag");

static void usage(FILE *f)
{
	fprintf(f, "usage: anvil agent --server URL --work-dir DIR [flags]\n\n");
	for (size_t i = 0; i < NFLAGS; i++) {
		const char *help = flags[i].help;
		for (int k = 0; !help && k < CONNGUARD_NOPTIONS; k++)
			if (strcmp(connguard_options[k].name, flags[i].name) == 0)
				help = connguard_options[k].help;
		fprintf(f, "  --%-22s %s\n", flags[i].name, help);
	}
	fprintf(f, "  --%-22s %s\n", "no-config", "read no config file");
	fprintf(f, "  --%-22s %s\n", "check-config",
	        "validate the config file and flags, and exit");
	fprintf(f, "  --%-22s %s\n", "help", "this text");
}

static int bad_flag(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "anvil agent: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\nrun 'anvil agent --help' for the flags\n");
	return 2;
}

/* The flag named by arg's first len characters after "--"; NULL if none. */
static const struct flag *find_flag(const char *name, size_t len)
{
	for (size_t k = 0; k < NFLAGS; k++)
		if (strlen(flags[k].name) == len && memcmp(flags[k].name, name, len) == 0)
			return &flags[k];
	return NULL;
}

/* Stores --name VALUE / --name=VALUE; 0, 1 for --help, 2 on error. from:
 * the config file argv was read from (conf.h), NULL for the command line. */
static int scan_flags(int argc, char **argv, struct conf *from, struct agent_opts *o)
{
	int rc = 0;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
			return 1;
		if (strcmp(arg, "--check-config") == 0) {
			o->check_only = 1;
			continue;
		}
		if (strcmp(arg, "--no-config") == 0) /* conf_load's to act on */
			continue;
		if (strncmp(arg, "--", 2) != 0)
			return bad_flag("unexpected argument '%s'%s", arg, "");
		const char *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
		const struct flag *f = find_flag(arg + 2, len);
		if (!f && from) {
			conf_error(from, i, "not a flag of anvil agent (see anvil agent --help)");
			rc = 2; /* and the file's other keys still checked */
			i++;    /* past its value */
			continue;
		}
		if (!f)
			return bad_flag("unknown flag '%s'%s", arg, "");
		const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
		if (!val)
			return bad_flag("flag '--%s' needs a value%s", f->name, "");
		*(const char **)((char *)o + f->off) = val;
		o->at[f - flags] = from ? i : 0;
	}
	return rc;
}

/* A refused value of flag name: kept with the config file's errors when
 * the file gave it ("FILE:LINE:COLUMN: name: 'value': why", said in the
 * file's order), else said at once as the command line wrote it. */
static int bad_value(const struct agent_opts *o, const char *name, const char *why)
{
	const struct flag *f = find_flag(name, strlen(name));
	const char *v = *(const char *const *)((const char *)o + f->off);
	int at = o->at[f - flags];
	if (at) {
		conf_error(o->conf, at, "'%s': %s", v ? v : "", why);
		return 2;
	}
	fprintf(stderr, "anvil agent: --%s '%s': %s\nrun 'anvil agent --help' for the flags\n",
	        name, v ? v : "", why);
	return 2;
}

static int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63)
		return 0;
	for (; *s; s++)
		if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') ||
		      ('0' <= *s && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
			return 0;
	return 1;
}

static int check_listen(struct agent_opts *o)
{
	const char *colon = strrchr(o->listen, ':');
	int64_t port;
	if (!colon || colon == o->listen || (size_t)(colon - o->listen) >= sizeof(o->host) ||
	    parse_i64(colon + 1, 0, 65535, &port) != 0)
		return bad_value(o, "listen", "expected HOST:PORT, e.g. 127.0.0.1:0");
	snprintf(o->host, sizeof(o->host), "%.*s", (int)(colon - o->listen), o->listen);
	o->port = (int)port;
	return 0;
}

/* Each flag's value alone, every error said: 0 or 2. */
static int check_values(struct agent_opts *o)
{
	int rc = 0;
	if (o->server && strncmp(o->server, "http", 4) != 0)
		rc = bad_value(o, "server", "must be an http:// URL");
	if (!valid_name(o->name))
		rc = bad_value(o, "name", "use 1-63 letters, digits, '-', '_' or '.'");
	if (parse_i64(o->wait_ms, 0, 600000, &o->wait) != 0)
		rc = bad_value(o, "wait-ms", "expected milliseconds in [0, 600000]");
	if (strcmp(o->spare_shims, "auto") == 0)
		o->spares = -1; /* one per GPU: every rank that can run at once has one */
	else if (parse_i64(o->spare_shims, 0, EXEC_SPARES_MAX, &o->spares) != 0)
		rc = bad_value(o, "spare-shims", "expected auto or a count in [0, 8]");
	if (parse_i64(o->gpu_sample_ms, 100, 3600000, &o->sample_ms) != 0)
		rc = bad_value(o, "gpu-sample-ms", "expected milliseconds in [100, 3600000]");
	if (parse_duration_ms(o->profile_check_interval, &o->check_interval_ms) != 0 ||
	    (o->check_interval_ms != 0 &&
	     (o->check_interval_ms < 1000 || o->check_interval_ms > 86400000)))
		rc = bad_value(o, "profile-check-interval",
		               "expected a duration from 1s to 24h (60s, 5m), or 0 for never");
	if (parse_duration_ms(o->bundle_keep, &o->bundle_keep_ms) != 0 ||
	    (o->bundle_keep_ms != 0 &&
	     (o->bundle_keep_ms < BUNDLES_KEEP_MIN_MS || o->bundle_keep_ms > 365LL * 86400000)))
		rc = bad_value(
		        o, "bundle-keep",
		        "expected a duration from 1h to 8760h (72h, 168h), or 0 to keep all");
	if (log_level_parse(o->log_level, &o->level) != 0)
		rc = bad_value(o, "log-level", "expected error, warn, info or debug");
	for (int k = 0; k < CONNGUARD_NOPTIONS; k++) {
		const char *why = NULL, *name = connguard_options[k].name;
		if (o->http[k] && connguard_option_set(&o->limits, name, o->http[k], &why))
			rc = bad_value(o, name, why);
	}
	if (check_listen(o))
		rc = 2;
	return rc;
}

static int check_flags(struct agent_opts *o, char *hostname, size_t hostlen)
{
	if (!o->name) {
		if (gethostname(hostname, hostlen - 1) != 0)
			snprintf(hostname, hostlen, "node");
		hostname[strcspn(hostname, ".")] = '\0';
		o->name = hostname;
	}
	int rc = check_values(o);
	if (!o->server)
		rc = bad_flag("--server is required (or server: in the config file)%s%s", "", "");
	if (!o->work_dir || !*o->work_dir)
		rc = bad_flag("--work-dir is required (or work-dir: in the config file)%s%s", "",
		              "");
	if (o->join_token && o->join_token_file)
		rc = bad_flag("give --join-token or --join-token-file, not both%s%s", "", "");
	if (o->gpu_backend && o->gpus_file)
		rc = bad_flag("give --gpus-file or --gpu-backend, not both%s%s", "", "");
	return rc;
}

/* Where the join token could be read by others than the agent's user: on
 * the command line (every process on the node, ranks included, reads
 * /proc/PID/cmdline) or in a file others may read. Said, not refused: a
 * test or a first try may do either. */
static void warn_token_exposed(const struct agent *a)
{
	const struct flag *f = find_flag("join-token", strlen("join-token"));
	struct stat sb;
	if (a->o.join_token && !a->o.at[f - flags])
		log_warn("the join token is on the command line, where every process on this "
		         "node can read it (ps, /proc/PID/cmdline): give --join-token-file, a "
		         "file of mode 0600, instead");
	else if (a->o.join_token_file && stat(a->o.join_token_file, &sb) == 0 && (sb.st_mode & 077))
		log_warn("the join token file=%s has mode 0%03o: others than its owner can read "
		         "it; chmod 0600 it",
		         a->o.join_token_file, (unsigned)(sb.st_mode & 0777));
}

/* Reads the join token from its flag or file (trailing whitespace cut):
 * the file again before each registration, so that a token an operator
 * rotated and copied in is used without a restart. A flag's is read once:
 * the command line is overwritten once read (hide_join_token). */
static int load_token(struct agent *a)
{
	static int warned;
	if (!warned++)
		warn_token_exposed(a);
	if (a->o.join_token) {
		if (!a->token)
			a->token = xstrdup(a->o.join_token);
		return 0;
	}
	if (!a->o.join_token_file)
		return 0;
	struct buf b;
	buf_init(&b);
	int rc = read_file(a->o.join_token_file, 4096, &b);
	if (rc) {
		log_error("cannot read the join token file=%s error=\"%s\"", a->o.join_token_file,
		          strerror(-rc));
		buf_cleanup(&b);
		return rc;
	}
	while (b.len && strchr(" \t\r\n", b.data[b.len - 1]))
		b.data[--b.len] = '\0';
	free(a->token);
	a->token = buf_detach(&b);
	return 0;
}

/* Blocks the signals the loop reads from a signalfd. Before any thread
 * starts, so that every thread inherits the mask. */
static int signals_setup(struct agent *a)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	signal(SIGPIPE, SIG_IGN);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	a->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	return a->sigfd < 0 ? -errno : 0;
}

/* Reads pending signals; 1 when one asks the agent to stop. */
static int drain_signals(struct agent *a)
{
	struct signalfd_siginfo si;
	int stop = 0;
	while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
			log_info("stopping on signal=%s", si.ssi_signo == SIGTERM ? "TERM" : "INT");
			stop = 1;
		}
	}
	return stop;
}

/* One registration: with the node's own secret when the agent has one for
 * this name (it registers the node again, from a new address say, and
 * keeps it), else or when that is refused with the join token. 0 with the
 * identity saved, or the error of the last try with why in err. */
static int register_once(struct agent *a, char *err, size_t errlen)
{
	struct ident id;
	int rc = ERR_AUTH;
	if (a->id.secret[0] && strcmp(a->id.name, a->o.name) == 0)
		rc = ident_register(a->http, a->o.server, a->id.secret, a->facts, &id, err, errlen);
	if (rc == ERR_AUTH) {
		if (a->o.join_token_file)
			load_token(a);
		if (!a->token) {
			snprintf(err, errlen,
			         "no join token (--join-token or --join-token-file) and no usable "
			         "identity in %s",
			         a->node_file);
			return ERR_AUTH;
		}
		rc = ident_register(a->http, a->o.server, a->token, a->facts, &id, err, errlen);
	}
	if (rc)
		return rc;
	snprintf(id.name, sizeof(id.name), "%s", a->o.name);
	a->id = id;
	rc = ident_save(a->node_file, &a->id);
	if (rc)
		log_warn("cannot save the identity file=%s error=\"%s\"", a->node_file,
		         strerror(-rc));
	log_info("registered node=%s node_id=%lld", a->o.name, (long long)id.node_id);
	a->refused[0] = '\0';
	return 0;
}

/* Says once (until it changes, or registering works) why the server
 * refused the registration, and what to do about it. */
static void say_refused(struct agent *a, int rc, const char *err)
{
	if (strncmp(a->refused, err, sizeof(a->refused) - 1) == 0)
		return;
	snprintf(a->refused, sizeof(a->refused), "%.*s", (int)sizeof(a->refused) - 1, err);
	if (rc == ERR_CONFLICT)
		log_error("cannot register: node %s is registered already and this agent holds no "
		          "valid secret for it (%s/node.json lost, or from another server): an "
		          "admin re-admits it with `anvil node reset %s`; retrying with backoff "
		          "reason=\"%s\"",
		          a->o.name, a->o.work_dir, a->o.name, err);
	else
		log_error("cannot register: %s; retrying with backoff", err);
}

/* Registers (register_once). At start it retries with backoff while the
 * server is unreachable (up to 1 s apart) or refuses the credentials (401,
 * 409: until an admin rotates the token or resets the node; up to
 * REGISTER_RETRY_MAX_MS apart); later the syncer's backoff does that.
 * 0, 1 when a signal asked to stop, or a negative code. */
static int register_node(struct agent *a, int at_start)
{
	int64_t backoff = 50;
	int logged = 0;
	for (;;) {
		char err[768];
		int rc = register_once(a, err, sizeof(err));
		if (rc == 0)
			return 0;
		int refused = rc == ERR_AUTH || rc == ERR_CONFLICT;
		if (refused && a->token)
			say_refused(a, rc, err); /* an admin's move ends it: retried */
		else if (refused || rc == ERR_INVALID || !at_start)
			log_error("cannot register: %s", err);
		else if (!logged++)
			log_warn("server unreachable, retrying up to every 1 s reason=\"%s\"", err);
		if (!at_start || rc == ERR_INVALID || (refused && !a->token))
			return rc;
		int64_t cap = refused ? REGISTER_RETRY_MAX_MS : 1000;
		struct pollfd p = {.fd = a->sigfd, .events = POLLIN};
		if (poll(&p, 1, (int)backoff) > 0 && drain_signals(a))
			return 1;
		backoff = backoff * 2 > cap ? cap : backoff * 2;
	}
}

static int identity(struct agent *a)
{
	char err[512];
	int rc = ident_load(a->node_file, &a->id, err, sizeof(err));
	if (rc == 0 && strcmp(a->id.name, a->o.name) == 0) {
		log_info("identity from file=%s node_id=%lld", a->node_file,
		         (long long)a->id.node_id);
		return 0;
	}
	if (rc == 0)
		log_warn("identity file=%s is for node=%s, registering as node=%s", a->node_file,
		         a->id.name, a->o.name);
	else if (rc != -ENOENT)
		log_warn("ignoring the identity file: %s", err);
	return register_node(a, 1);
}

static int open_gpus(struct agent *a)
{
	char spec[PATH_MAX + 8], err[768];
	if (a->o.gpus_file)
		snprintf(spec, sizeof(spec), "sim:%s", a->o.gpus_file);
	else
		snprintf(spec, sizeof(spec), "%s", a->o.gpu_backend ? a->o.gpu_backend : "nvml");
	int rc = gpu_open(spec, &a->gpus, err, sizeof(err));
	if (rc == ERR_NOTFOUND && !a->o.gpu_backend) {
		/* the default on a machine without NVIDIA's driver: say it once */
		log_info("no NVIDIA GPUs: %s; running with no GPUs", err);
		rc = gpu_open("none", &a->gpus, err, sizeof(err));
	}
	if (rc) {
		log_error("%s", err);
		return rc;
	}
	atomic_store(&a->stats.gpus, gpu_count(a->gpus));
	log_info("gpus backend=%s count=%d driver=%s", gpu_backend_name(a->gpus),
	         gpu_count(a->gpus), gpu_driver_version(a->gpus));
	struct gpu_info infos[GPU_MAX];
	int n = gpu_count(a->gpus);
	for (int i = 0; i < n; i++)
		a->gpu_minors[i] = gpu_info(a->gpus, i, &infos[i]) == 0 ? infos[i].minor : -1;
	a->nrdma = rdma_scan(a->o.sysfs_root, infos, n, a->rdma, RDMA_MAX_PORTS);
	if (a->nrdma < 0) {
		log_warn("cannot read RDMA devices root=%s error=\"%s\"", a->o.sysfs_root,
		         strerror(-a->nrdma));
		a->nrdma = 0;
	}
	for (int i = 0; i < a->nrdma; i++)
		if (a->rdma[i].error[0])
			log_warn("rdma port skipped dev=%s port=%d reason=\"%s\"", a->rdma[i].dev,
			         a->rdma[i].port, a->rdma[i].error);
	return 0;
}

/* NCCL's interface variables for a rank, from the RDMA ports near its GPUs. */
static void rank_env(void *ctx, uint64_t mask, json_t *env)
{
	struct agent *a = ctx;
	if (a->nrdma == 0)
		return;
	char hca[1024], ifname[1024];
	if (rdma_nccl_env(a->rdma, a->nrdma, mask, hca, sizeof(hca), ifname, sizeof(ifname)) <= 0)
		return;
	if (hca[0])
		json_object_set_new(env, "NCCL_IB_HCA", json_string(hca));
	if (ifname[0])
		json_object_set_new(env, "NCCL_SOCKET_IFNAME", json_string(ifname));
}

/* Tells the watcher which GPUs the desired ranks use (resets wait for
 * idle GPUs; the metrics name the job on each). */
/* Tells the checkpoint uploader which checkpointing ranks 0 run here. */
static void watch_checkpoints(struct agent *a, const struct desired_rank *ranks, size_t nranks)
{
	struct ckptsync_watch *w = xcalloc(nranks ? nranks : 1, sizeof(*w));
	char **dirs = xcalloc(nranks ? nranks : 1, sizeof(*dirs));
	size_t n = 0;
	for (size_t i = 0; i < nranks; i++) {
		const struct desired_rank *d = &ranks[i];
		const char *token = desired_var(d, "ANVIL_EXEC_TOKEN", NULL);
		if (d->rank != 0 || !token || !desired_var(d, "ANVIL_CHECKPOINTING", NULL) ||
		    desired_var(d, "ANVIL_TASK", NULL)) /* a task's wrapper saves its own */
			continue;
		dirs[n] = exec_checkpoint_dir(a->o.work_dir, d->job_id);
		w[n] = (struct ckptsync_watch){.attempt_id = d->attempt_id,
		                               .job_id = d->job_id,
		                               .dir = dirs[n],
		                               .token = token,
		                               .restored = d->restore};
		n++;
	}
	ckptsync_set(a->ckpt, w, n);
	for (size_t i = 0; i < n; i++)
		free(dirs[i]);
	free(dirs);
	free(w);
}

static int64_t hung_ms(void *ctx, int64_t attempt_id, int rank)
{
	return hang_ms(((struct agent *)ctx)->hang, attempt_id, rank);
}

static json_t *checkpoint_of(void *ctx, int64_t attempt_id)
{
	struct agent *a = ctx;
	return ckptsync_newest(a->ckpt, attempt_id);
}

static void on_desired(void *ctx, const struct desired_rank *ranks, size_t nranks)
{
	struct agent *a = ctx;
	watch_checkpoints(a, ranks, nranks);
	hang_set(a->hang, ranks, nranks);
	if (!a->watch)
		return;
	struct gpuwatch_use use[GPU_MAX];
	int n = 0;
	for (size_t i = 0; i < nranks && n < GPU_MAX; i++) {
		if (!ranks[i].gpus.mask)
			continue;
		use[n++] = (struct gpuwatch_use){
		        .gpus = ranks[i].gpus.mask,
		        .job_id = ranks[i].job_id,
		        .job_name = desired_var(&ranks[i], "ANVIL_JOB_NAME", ""),
		};
	}
	gpuwatch_set_usage(a->watch, use, n);
}

static int64_t gpu_idle_ms(void *ctx, uint64_t gpus)
{
	struct agent *a = ctx;
	return a->watch ? gpuwatch_idle_ms(a->watch, gpus) : -1;
}

/* A session's notice, to its holder (agent/holder.h) and so its terminal. */
static void notice(void *ctx, int64_t attempt_id, int rank, const char *text)
{
	struct agent *a = ctx;
	char *sock = exec_session_socket(a->exec, attempt_id, rank);
	streams_notice(sock, text);
	free(sock);
}

/* The answer's profile, to the convergence worker. */
static void on_profile(void *ctx, const json_t *profile)
{
	struct agent *a = ctx;
	converge_set_profile(a->converge, profile);
}

/* The convergence worker (agent/converge.h), with the facts its
 * check-only steps compare: the GPUs as found at start. */
static int start_converge(struct agent *a)
{
	struct steps_facts facts;
	converge_facts(a->gpus, &facts);
	const char *sim = getenv(CONVERGE_APT_SIMULATE_ENV);
	struct converge_config cc = {.work_dir = a->o.work_dir,
	                             .facts = &facts,
	                             .check_interval_ms = a->o.check_interval_ms,
	                             .apt_simulate = sim && strcmp(sim, "1") == 0};
	int rc = converge_start(&cc, &a->converge);
	if (rc)
		log_error("cannot start converging the node's profile error=\"%s\"", err_msg(rc));
	return rc;
}

/* Ranks run fenced (agent/fence.h) when the agent is root. */
static int fence_ranks(struct agent *a, const char *work)
{
	char err[1024], self[PATH_MAX];
	struct fence *f = NULL;
	const char *off = getenv("ANVIL_FENCE");
	if (off && strcmp(off, "off") == 0) { /* as ANVIL_CGROUP=off: to measure, to debug */
		log_warn("ranks are not fenced reason=\"ANVIL_FENCE=off: they run as root and can "
		         "reach the node and each other\"");
		return 0;
	}
	int rc = fence_new(a->o.rank_user, work, &f, err, sizeof(err));
	if (rc == -EPERM) {
		log_warn("ranks are not fenced reason=\"%s\"", err);
		return 0;
	}
	if (rc) {
		log_error("cannot fence ranks: %s", err);
		return rc;
	}
	const struct fence_account *acct = fence_account(f);
	log_info("ranks run fenced user=%s uid=%u cover=%s", acct->name, (unsigned)acct->uid,
	         fence_cover(f));
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (fence_self(f)) {
		log_info("ranks cannot reach this binary where it is: each rank's view has it "
		         "bound in, read-only path=%s",
		         fence_self(f));
	} else if (n > 0 && acct->uid != 0) {
		self[n] = '\0';
		if (!fence_can_exec(f, self))
			log_warn("the account ranks run as cannot run this binary (its mode): "
			         "sessions, workflow tasks, MPI and --head jobs will fail to start "
			         "path=%s user=%s",
			         self, acct->name);
	}
	exec_set_fence(a->exec, f);
	return 0;
}

/* Everything before the loop: 0, 1 when stopped by a signal, or an error. */
static int setup(struct agent *a)
{
	static char work[PATH_MAX];
	int rc = mkdir_p(a->o.work_dir, 0755);
	if (rc || !realpath(a->o.work_dir, work)) {
		log_error("cannot create the work dir=%s error=\"%s\"", a->o.work_dir,
		          strerror(rc ? -rc : errno));
		return rc ? rc : -errno;
	}
	a->o.work_dir = work;
	a->node_file = xasprintf("%s/node.json", work);
	/* the node secret: 0600 as ident_save writes it, also when an older
	 * version wrote it looser (the rank journal sees to its own files) */
	unsigned was = 0;
	if (tighten_mode(a->node_file, 0600, &was) == 1)
		log_warn("tightened the mode of path=%s from=0%03o to=0600: it holds the node "
		         "secret, for the agent's user only",
		         a->node_file, was);
	if ((rc = open_gpus(a)) || (rc = load_token(a)))
		return rc;
	if ((rc = exec_new(work, a->o.name, &a->exec))) {
		log_error("cannot open the executor dir=%s error=\"%s\"", work, err_msg(rc));
		return rc;
	}
	if ((rc = fence_ranks(a, work)))
		return rc;
	int spares = (int)a->o.spares;
	if (spares < 0)
		spares = gpu_count(a->gpus) < 2                 ? 2
		         : gpu_count(a->gpus) > EXEC_SPARES_MAX ? EXEC_SPARES_MAX
		                                                : gpu_count(a->gpus);
	exec_set_spares(a->exec, spares);
	struct gpuwatch_config wc = {.gpus = a->gpus,
	                             .work_dir = work,
	                             .node_name = a->o.name,
	                             .sample_ms = a->o.sample_ms,
	                             .check_program = a->o.gpu_check_program};
	if ((rc = gpuwatch_start(&wc, &a->watch))) {
		log_error("cannot start the GPU watcher error=\"%s\"", err_msg(rc));
		return rc;
	}
	if ((rc = start_converge(a)))
		return rc;
	if ((rc = serve_start(a->o.host, a->o.port, &a->o.limits, work, &a->stats, a->watch,
	                      &a->serve)))
		return rc;
	serve_set_converge(a->serve, a->converge);
	const char *host = strcmp(a->o.host, "0.0.0.0") == 0 ? a->o.address : a->o.host;
	char url[320];
	snprintf(url, sizeof(url), "http://%s:%d", host, serve_port(a->serve));
	log_info("listening url=%s node=%s work_dir=%s", url, a->o.name, work);
	a->facts = ident_facts(a->o.name, a->o.address, url, a->gpus,
	                       rdma_ports_json(a->rdma, a->nrdma));
	a->http = httpc_new();
	if ((rc = identity(a)))
		return rc;
	serve_set_secret(a->serve, a->id.secret);
	struct syncer_config sc = {.server = a->o.server,
	                           .wait_ms = a->o.wait,
	                           .exec = a->exec,
	                           .stats = &a->stats,
	                           .rank_env = rank_env,
	                           .on_desired = on_desired,
	                           .gpu_idle_ms = gpu_idle_ms,
	                           .notice = notice,
	                           .on_profile = on_profile,
	                           .checkpoint = checkpoint_of,
	                           .hung_ms = hung_ms,
	                           .gpu_minors = a->gpu_minors,
	                           .ngpu_minors = gpu_count(a->gpus),
	                           .ctx = a};
	a->sync = syncer_new(&sc);
	a->ckpt = ckptsync_start(a->o.server);
	a->hang = hang_new(a->exec, launch_self(), gpu_idle_ms, a);
	syncer_set_identity(a->sync, a->id.node_id, a->id.secret);
	syncer_set_facts(a->sync, json_incref(a->facts));
	/* a status kept from before a restart goes with the first sync */
	syncer_set_profile_status(a->sync, converge_status(a->converge));
	return 0;
}

static void reregister(struct agent *a)
{
	int rc = register_node(a, 0);
	if (rc) {
		syncer_register_failed(a->sync, rc == ERR_AUTH || rc == ERR_CONFLICT);
		return;
	}
	serve_set_secret(a->serve, a->id.secret);
	syncer_set_identity(a->sync, a->id.node_id, a->id.secret);
	syncer_set_facts(a->sync, json_incref(a->facts));
	/* a server that forgot the node may have forgotten its status too */
	syncer_set_profile_status(a->sync, converge_status(a->converge));
}

/* The running ranks' contexts, for exec and attach (serve.h), when they changed. */
static void publish_contexts(struct agent *a)
{
	uint64_t v = exec_context_version(a->exec);
	if (v == a->contexts_published)
		return;
	a->contexts_published = v;
	size_t n = exec_count(a->exec), k = 0;
	struct serve_rank *ranks = xcalloc(n ? n : 1, sizeof(*ranks));
	for (size_t i = 0; i < n; i++) {
		struct exec_context c;
		if (exec_context(a->exec, i, &c) != 0)
			continue;
		size_t nenv = 0;
		while (c.env[nenv])
			nenv++;
		char **env = xcalloc(nenv + 1, sizeof(char *));
		for (size_t j = 0; j < nenv; j++)
			env[j] = xstrdup(c.env[j]);
		ranks[k++] = (struct serve_rank){.attempt_id = c.attempt_id,
		                                 .rank = c.rank,
		                                 .pid = c.pid,
		                                 .env = env,
		                                 .cwd = c.cwd ? xstrdup(c.cwd) : NULL};
	}
	serve_set_ranks(a->serve, ranks, (int)k);
}

static void publish(struct agent *a)
{
	publish_contexts(a);
	atomic_store(&a->stats.ranks_running, exec_running(a->exec));
	atomic_store(&a->stats.ranks_started_total, (long long)exec_started_total(a->exec));
	atomic_store(&a->stats.ranks_started_spare_total,
	             (long long)exec_started_spare_total(a->exec));
	atomic_store(&a->stats.shims_reused_total, (long long)exec_reused_total(a->exec));
}

static int64_t earliest(int64_t x, int64_t y)
{
	if (x < 0)
		return y;
	if (y < 0)
		return x;
	return x < y ? x : y;
}

/* The event loop: until SIGTERM or SIGINT. */
/* Whether a rank of the attempt is in the executor's table (bundles.h). */
static int attempt_known(void *ctx, int64_t attempt_id)
{
	struct agent *a = ctx;
	struct exec_status st;
	for (size_t i = 0; i < exec_count(a->exec); i++) {
		exec_get(a->exec, i, &st);
		if (st.attempt_id == attempt_id)
			return 1;
	}
	return 0;
}

static void run(struct agent *a)
{
	for (;;) {
		if (now_ms() >= a->next_sweep_ms) {
			bundles_sweep_start(a->o.work_dir, a->o.bundle_keep_ms, attempt_known, a);
			a->next_sweep_ms = now_ms() + BUNDLES_SWEEP_EVERY_MS;
		}
		if (syncer_needs_register(a->sync))
			reregister(a);
		if (hang_check(a->hang, now_ms()))
			syncer_changed(a->sync);
		syncer_step(a->sync);
		publish(a);
		int64_t t = earliest(exec_next_poll_ms(a->exec), syncer_next_ms(a->sync));
		t = earliest(t, hang_next_ms(a->hang, now_ms()));
		int fds[4] = {a->sigfd, exec_fd(a->exec), gpuwatch_fd(a->watch),
		              converge_fd(a->converge)};
		int ready[4] = {0, 0, 0, 0};
		syncer_wait(a->sync, fds, 4, t, ready);
		if (ready[0] && drain_signals(a))
			return;
		if (ready[2])
			syncer_set_health(a->sync, gpuwatch_report(a->watch));
		if (ready[3])
			syncer_set_profile_status(a->sync, converge_status(a->converge));
		if (exec_poll(a->exec) > 0)
			syncer_changed(a->sync);
	}
}

/* Stops every rank (grace capped) and reports the outcome once. */
static void shutdown_ranks(struct agent *a)
{
	int n = exec_running(a->exec);
	if (n)
		log_info("stopping ranks count=%d grace_cap_ms=%d", n, SHUTDOWN_GRACE_MS);
	exec_stop_all(a->exec, SHUTDOWN_GRACE_MS);
	int64_t end = now_ms() + SHUTDOWN_GRACE_MS + 1000;
	while (exec_running(a->exec) > 0 && now_ms() < end) {
		struct pollfd p[2] = {{.fd = a->sigfd, .events = POLLIN},
		                      {.fd = exec_fd(a->exec), .events = POLLIN}};
		poll(p, 2, (int)earliest(exec_next_poll_ms(a->exec), 50));
		drain_signals(a);
		exec_poll(a->exec);
	}
	if (exec_running(a->exec) > 0)
		log_warn("ranks still running at exit count=%d", exec_running(a->exec));
	if (a->sync)
		syncer_flush(a->sync, 1000);
}

static void teardown(struct agent *a)
{
	syncer_free(a->sync);
	ckptsync_stop(a->ckpt);
	hang_free(a->hang);
	httpc_free(a->http);
	serve_stop(a->serve);
	converge_stop(a->converge);
	gpuwatch_stop(a->watch);
	exec_free(a->exec);
	gpu_close(a->gpus);
	json_decref(a->facts);
	free(a->node_file);
	free(a->token);
	if (a->sigfd >= 0)
		close(a->sigfd);
}

/* The flags: the defaults, then the config file's, then the command
 * line's (which win), checked. 0, 1 after --help, 2 on an error (said). */
static int configure(struct agent *a, int argc, char **argv, char *hostname, size_t len)
{
	a->o = (struct agent_opts){.listen = "127.0.0.1:0",
	                           .address = "127.0.0.1",
	                           .wait_ms = "10000",
	                           .spare_shims = "auto",
	                           .gpu_sample_ms = "2000",
	                           .profile_check_interval = "60s",
	                           .bundle_keep = "72h",
	                           .sysfs_root = "/sys",
	                           .log_level = "info"};
	connguard_limits_default(&a->o.limits);
	char err[8192];
	if (conf_load(argc, argv, "anvil agent", AGENT_CONFIG_FILE, NULL, &a->conf, err,
	              sizeof(err))) {
		fputs(err, stderr);
		return 2;
	}
	a->o.conf = &a->conf;
	int file = scan_flags(a->conf.argc, a->conf.argv, &a->conf, &a->o);
	int rc = scan_flags(argc, argv, NULL, &a->o);
	if (rc == 1)
		usage(stdout);
	if (rc == 2)
		conf_report(&a->conf, stderr); /* the file's too */
	if (rc)
		return rc;
	rc = check_flags(&a->o, hostname, len); /* the command line's errors, said at once */
	if (conf_report(&a->conf, stderr))      /* the file's, all, in its order */
		file = 2;
	return file ? file : rc;
}

static void print_config(const struct agent *a)
{
	const struct agent_opts *o = &a->o;
	char http[512];
	connguard_limits_text(&o->limits, http, sizeof(http));
	printf("configuration ok: config=%s server=%s work-dir=%s name=%s listen=%s:%d "
	       "address=%s gpu-backend=%s wait-ms=%lld spare-shims=%s profile-check-interval=%s "
	       "bundle-keep=%s rank-user=%s log-level=%s %s\n",
	       a->conf.file ? a->conf.file : "none", o->server, o->work_dir, o->name, o->host,
	       o->port, o->address,
	       o->gpu_backend ? o->gpu_backend
	       : o->gpus_file ? "sim"
	                      : "nvml",
	       (long long)o->wait, o->spare_shims, o->profile_check_interval, o->bundle_keep,
	       o->rank_user ? o->rank_user : FENCE_DEFAULT_USER, o->log_level, http);
}

/* A join token given on the command line is overwritten there once read:
 * /proc/PID/cmdline is open to every user, and the ranks' shims are
 * copies of this process, each the first process a rank sees. */
static void hide_join_token(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		char *v = NULL;
		if (strcmp(argv[i], "--join-token") == 0 && i + 1 < argc)
			v = argv[++i];
		else if (strncmp(argv[i], "--join-token=", 13) == 0)
			v = argv[i] + 13;
		if (v)
			memset(v, 'x', strlen(v));
	}
}

int agent_main(int argc, char **argv)
{
	struct agent a = {.sigfd = -1, .contexts_published = UINT64_MAX};
	char hostname[256] = "";
	int rc = configure(&a, argc, argv, hostname, sizeof(hostname));
	if (rc || a.o.check_only) {
		if (rc == 0)
			print_config(&a);
		conf_free(&a.conf);
		return rc == 1 ? 0 : rc;
	}
	log_init("agent", a.o.level);
	if (a.conf.file)
		log_info("config file=%s", a.conf.file);
	httpd_nofile_raise();
	if ((rc = signals_setup(&a))) {
		log_error("cannot set up signals error=\"%s\"", strerror(-rc));
		conf_free(&a.conf);
		return 1;
	}
	httpc_global_init();
	rc = setup(&a);
	hide_join_token(argc, argv);
	if (rc == 0)
		run(&a);
	if (rc == 0 || rc == 1)
		shutdown_ranks(&a);
	teardown(&a);
	conf_free(&a.conf);
	log_info("exiting status=%d", rc == 0 || rc == 1 ? 0 : 1);
	return rc == 0 || rc == 1 ? 0 : 1;
}
