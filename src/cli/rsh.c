#include "cli/rsh.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/mpi.h"
#include "base/mem.h"
#include "base/util.h"
#include "cli/attach.h"
#include "cli/verb.h"
#include "proto/wire.h"

#define HOSTFILE_MAX (1 << 20)

json_t *rsh_request(char *const *words, int n, int loopback)
{
	if (n <= 0)
		return NULL;
	char *line = mpi_remote_line(words, n, loopback);
	json_t *req = json_object();
	wire_set(req, &wire_exec, "command", json_pack("[s,s,s]", "/bin/sh", "-c", line));
	wire_set(req, &wire_exec, "tty", json_false());
	wire_set(req, &wire_exec, "stdin", json_false());
	free(line);
	return req;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "anvil _rsh: %s\n", msg); /* one line, one write: mpirun shows it */
	return RSH_EXIT_FAIL;
}

/* The variable name's value, or NULL (said) when it is unset or empty. */
static const char *need(const char *name)
{
	const char *v = getenv(name);
	if (v && *v)
		return v;
	fail("$%s is not set: _rsh is mpirun's launcher inside an `anvil run --mpi` job", name);
	return NULL;
}

/* HOST's rank in the hostfile at path: 0.., or -1 (said). */
static int rank_of(const char *path, const char *host)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		fail("cannot read the hostfile %s: %s", path, strerror(errno));
		return -1;
	}
	char *text = xmalloc(HOSTFILE_MAX + 1);
	size_t n = fread(text, 1, HOSTFILE_MAX, f);
	fclose(f);
	text[n] = '\0';
	int r = mpi_host_rank(text, host);
	free(text);
	if (r < 0)
		fail("no host %s in the hostfile %s", host, path);
	return r;
}

int rsh_main(int argc, char **argv)
{
	if (argc < 3 || argv[1][0] == '-')
		return fail("usage: anvil _rsh HOST CMD... (mpirun's launcher in an MPI job)");
	const char *server = need("ANVIL_SERVER"), *token = need("ANVIL_EXEC_TOKEN");
	const char *job = server && token ? need("ANVIL_JOB_ID") : NULL;
	const char *hostfile = job ? need(MPI_HOSTFILE_ENV) : NULL;
	int64_t id = 0;
	if (!hostfile)
		return RSH_EXIT_FAIL;
	if (parse_i64(job, 1, INT64_MAX, &id))
		return fail("$ANVIL_JOB_ID: '%s' is not a job id", job);
	int rank = rank_of(hostfile, argv[1]);
	if (rank < 0)
		return RSH_EXIT_FAIL;
	struct verb_ctx v = {0};
	/* From the rank's environment only: never the client file's admin token. */
	cliconn_resolve(&v.conn, server, token);
	v.connected = 1;
	free(v.conn.server_from);
	free(v.conn.token_from);
	v.conn.server_from = xstrdup("$ANVIL_SERVER");
	v.conn.token_from = xstrdup("$ANVIL_EXEC_TOKEN");
	json_t *req = rsh_request(argv + 2, argc - 2, mpi_loopback(getenv("MASTER_ADDR")));
	struct attach_opts o = {
	        .job = id, .rank = rank, .exec = req, .retry_conflict_ms = RSH_WAIT_MS};
	struct attach_result r = attach_run(&v, &o);
	json_decref(req);
	verb_cleanup(&v);
	if (r.end == ATTACH_EXITED && r.code >= 0 && r.code <= 255)
		return r.code;
	if (r.end == ATTACH_LOST)
		fprintf(stderr,
		        "anvil _rsh: the stream to rank %d of job %lld (%s) ended before "
		        "the command's exit status\n",
		        rank, (long long)id, argv[1]);
	return RSH_EXIT_FAIL;
}
