#include "agent/mpi.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/desired.h"
#include "agent/launch.h"
#include "base/buf.h"
#include "base/mem.h"

/* ---- the hostfile ---- */

static const char fallback_prefix[] = "anvil-rank-";

/* Whether Open MPI's hostfile parser reads s whole as a host name; the
 * fallback's own form ("anvil-rank-R") is kept for the fallback. */
static int usable(const char *s)
{
	size_t n = strlen(s), plen = sizeof(fallback_prefix) - 1;
	if (n == 0 || n >= MPI_HOST_MAX ||
	    !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') ||
	      (s[0] >= '0' && s[0] <= '9')))
		return 0;
	if (strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != n ||
	    s[n - 1] == '.')
		return 0;
	return !(strncmp(s, fallback_prefix, plen) == 0 && n > plen &&
	         strspn(s + plen, "0123456789") == n - plen);
}

void mpi_host_name(const char *node, int rank, char *out, size_t outlen)
{
	if (node && usable(node))
		snprintf(out, outlen, "%s", node);
	else
		snprintf(out, outlen, "%s%d", fallback_prefix, rank);
}

char *mpi_hostfile(const char *const *nodes, int n, int slots)
{
	struct buf b;
	buf_init(&b);
	for (int r = 0; r < n; r++) {
		int twice = 0; /* node names are unique in a cluster; the file must be too */
		for (int i = 0; i < n && !twice; i++)
			twice = i != r && nodes[i] && nodes[r] && strcmp(nodes[i], nodes[r]) == 0;
		char name[MPI_HOST_MAX];
		mpi_host_name(twice ? NULL : nodes[r], r, name, sizeof(name));
		buf_printf(&b, "%s slots=%d\n", name, slots);
	}
	return buf_detach(&b);
}

/* The first word of each line that names a rank, in order. */
struct line_iter {
	const char *p;
	const char *word;
	size_t len;
};

static int next_host(struct line_iter *it)
{
	while (*it->p) {
		const char *line = it->p, *eol = strchr(line, '\n');
		it->p = eol ? eol + 1 : line + strlen(line);
		line += strspn(line, " \t");
		size_t len = strcspn(line, " \t\r\n");
		if (len == 0 || line[0] == '#')
			continue;
		it->word = line;
		it->len = len;
		return 1;
	}
	return 0;
}

int mpi_host_rank(const char *hostfile, const char *host)
{
	size_t hlen = strlen(host);
	if (!hostfile || hlen == 0)
		return -1;
	struct line_iter it = {.p = hostfile};
	int r = 0, short_match = -1, nshort = 0;
	for (; next_host(&it); r++) {
		if (it.len == hlen && memcmp(it.word, host, hlen) == 0)
			return r;
		/* Open MPI drops the domain of a name unless told to keep it. */
		const char *dot = memchr(it.word, '.', it.len);
		if (dot && (size_t)(dot - it.word) == hlen && memcmp(it.word, host, hlen) == 0) {
			short_match = r;
			nshort++;
		}
	}
	return nshort == 1 && !strchr(host, '.') ? short_match : -1;
}

/* ---- mpirun's command line ---- */

static void add(char **v, size_t *n, const char *s)
{
	v[(*n)++] = xstrdup(s);
}

static void add_mca(char **v, size_t *n, const char *name, const char *value)
{
	add(v, n, "--mca");
	add(v, n, name);
	add(v, n, value);
}

char **mpi_mpirun_argv(const struct mpi_run *r)
{
	size_t ncmd = 0;
	while (r->command && r->command[ncmd])
		ncmd++;
	char **v = xcalloc(32 + ncmd, sizeof(*v));
	size_t n = 0;
	add(v, &n, "mpirun");
	add(v, &n, "--hostfile");
	add(v, &n, r->hostfile);
	/* Open MPI splits the agent at blanks (its arguments) and colons (its
	 * alternatives): a binary whose path has one is found on PATH. */
	const char *self = r->self && !strpbrk(r->self, " \t:") ? r->self : "anvil";
	char *agent = xasprintf("%s _rsh", self);
	add_mca(v, &n, "plm_rsh_agent", agent);
	free(agent);
	add_mca(v, &n, "plm_rsh_no_tree_spawn", "1");
	add_mca(v, &n, "orte_keep_fqdn_hostnames", "1");
	if (r->as_root)
		add(v, &n, "--allow-run-as-root");
	if (!r->binding_set) { /* the node is shared: binding to cores would collide */
		add(v, &n, "--bind-to");
		add(v, &n, "none");
	}
	if (r->loopback && !r->btl_set)
		add_mca(v, &n, "btl", "self,tcp");
	if (r->loopback && !r->btl_if_set)
		add_mca(v, &n, "btl_tcp_if_include", "lo");
	if (r->loopback && !r->oob_if_set)
		add_mca(v, &n, "oob_tcp_if_include", "lo");
	for (size_t i = 0; i < ncmd; i++)
		add(v, &n, r->command[i]);
	v[n] = NULL;
	return v;
}

int mpi_loopback(const char *addr)
{
	return addr && (strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
	                strcmp(addr, "localhost") == 0);
}

char *mpi_remote_line(char *const *words, int n, int loopback)
{
	struct buf b;
	buf_init(&b);
	if (loopback)
		buf_adds(&b, ": \"${OMPI_MCA_orte_tmpdir_base:=$ANVIL_OUTPUT_DIR}\"; "
		             "export OMPI_MCA_orte_tmpdir_base; ");
	for (int i = 0; i < n; i++) {
		if (i)
			buf_adds(&b, " ");
		buf_adds(&b, words[i]);
	}
	return buf_detach(&b);
}

/* ---- the agent's side ---- */

char **mpi_argv(const struct desired_rank *d, const char *self)
{
	if (!d->mpi)
		return NULL;
	const struct desired_strv *hosts = &d->mpi_hosts, *cmd = &d->command;
	char **v = xcalloc(8 + 2 * hosts->n + cmd->n, sizeof(*v));
	size_t n = 0;
	add(v, &n, self ? self : "/proc/self/exe");
	if (d->rank != 0 || !hosts->n) {
		add(v, &n, "_mpiwait");
		v[n] = NULL;
		return v;
	}
	add(v, &n, "_mpirun");
	/* A slot per process that mpirun starts on each node: NPROC_PER_NODE,
	 * the rank's GPUs (one when it has none). */
	const char *nproc = desired_var(d, "NPROC_PER_NODE", "1");
	add(v, &n, "--slots");
	add(v, &n, nproc);
	for (size_t i = 0; i < hosts->n; i++) {
		add(v, &n, "--host");
		add(v, &n, hosts->v[i]);
	}
	add(v, &n, "--");
	for (size_t i = 0; i < cmd->n; i++)
		add(v, &n, cmd->v[i]);
	v[n] = NULL;
	return v;
}

void mpi_argv_free(char **argv)
{
	for (size_t i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}

/* ---- anvil _mpirun ---- */

struct run_opts {
	int slots;
	const char *hosts[MPI_MAX_HOSTS];
	int nhosts;
	char **command;
};

static int parse_run(int argc, char **argv, struct run_opts *o, char *err, size_t errlen)
{
	*o = (struct run_opts){.slots = 0};
	int i = 1;
	for (; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		if (!v) {
			snprintf(err, errlen, "%s needs a value", argv[i]);
			return -1;
		} else if (strcmp(argv[i], "--slots") == 0) {
			long s = strtol(v, &end, 10);
			o->slots = end != v && !*end && s >= 1 && s <= 1024 ? (int)s : -1;
		} else if (strcmp(argv[i], "--host") == 0 && o->nhosts < MPI_MAX_HOSTS) {
			o->hosts[o->nhosts++] = v;
		} else {
			snprintf(err, errlen, "unknown option %s (or too many hosts)", argv[i]);
			return -1;
		}
	}
	o->command = i + 1 < argc ? argv + i + 1 : NULL;
	if (o->slots < 1 || o->nhosts == 0 || !o->command) {
		snprintf(err, errlen,
		         "needs --slots 1-1024, --host NODE for each rank, and -- CMD");
		return -1;
	}
	return 0;
}

static int env_set_any(const char *a, const char *b)
{
	return getenv(a) || (b && getenv(b));
}

/* A word as a shell reads it back: bare when safe, else '...'. */
static void shell_word(struct buf *b, const char *s)
{
	if (*s &&
	    strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
	            strlen(s)) {
		buf_adds(b, s);
		return;
	}
	buf_adds(b, "'");
	for (; *s; s++) {
		if (*s == '\'')
			buf_adds(b, "'\\''");
		else
			buf_printf(b, "%c", *s);
	}
	buf_adds(b, "'");
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			close(fd);
			return -e;
		}
		off += (size_t)w;
	}
	return close(fd) < 0 ? -errno : 0;
}

int mpi_run_main(int argc, char **argv)
{
	struct run_opts o;
	char err[256];
	if (parse_run(argc, argv, &o, err, sizeof(err))) {
		fprintf(stderr, "anvil _mpirun: %s (it is run by the agent: docs/cli.md, MPI)\n",
		        err);
		return 2;
	}
	const char *dir = getenv("ANVIL_OUTPUT_DIR");
	if (!dir || !*dir) {
		fprintf(stderr, "anvil _mpirun: ANVIL_OUTPUT_DIR is not set\n");
		return 127;
	}
	char *path = xasprintf("%s/%s", dir, MPI_HOSTFILE_NAME);
	char *text = mpi_hostfile(o.hosts, o.nhosts, o.slots);
	int rc = write_file(path, text);
	free(text);
	if (rc) {
		fprintf(stderr, "anvil _mpirun: cannot write the hostfile %s: %s\n", path,
		        strerror(-rc));
		free(path);
		return 127;
	}
	setenv(MPI_HOSTFILE_ENV, path, 1);
	struct mpi_run r = {
	        .hostfile = path,
	        .self = launch_self(),
	        .as_root = geteuid() == 0,
	        .loopback = mpi_loopback(getenv("MASTER_ADDR")),
	        .binding_set = env_set_any("OMPI_MCA_hwloc_base_binding_policy", NULL),
	        .btl_set = env_set_any("OMPI_MCA_btl", NULL),
	        .btl_if_set =
	                env_set_any("OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_btl_tcp_if_exclude"),
	        .oob_if_set =
	                env_set_any("OMPI_MCA_oob_tcp_if_include", "OMPI_MCA_oob_tcp_if_exclude"),
	        .command = o.command,
	};
	char **v = mpi_mpirun_argv(&r);
	struct buf line;
	buf_init(&line);
	for (size_t i = 0; v[i]; i++) {
		if (i)
			buf_adds(&line, " ");
		shell_word(&line, v[i]);
	}
	fprintf(stderr, "anvil: %s\n", line.data);
	buf_cleanup(&line);
	execvp(v[0], v);
	fprintf(stderr,
	        "anvil _mpirun: cannot run mpirun: %s (Open MPI's mpirun must be on the rank's "
	        "PATH, as Debian's openmpi-bin puts it)\n",
	        strerror(errno));
	mpi_argv_free(v);
	free(path);
	return 127;
}

/* ---- anvil _mpiwait ---- */

int mpi_wait_main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	/* Whatever the agent's shim left blocked or ignored, a stop must end
	 * this process: its status (143) does not count once mpirun ended. */
	static const int stops[] = {SIGTERM, SIGINT, SIGHUP};
	sigset_t none;
	sigemptyset(&none);
	for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
		signal(stops[i], SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (;;)
		pause();
}
