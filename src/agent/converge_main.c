/* converge_main.c - `anvil _converge`: one run of a profile's steps on
 * this machine, the same runner as the agent's (agent/converge.h), for
 * tests and for an operator who wants to see what converging would do. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/converge.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/jv.h"
#include "base/util.h"
#include "gpu/gpu.h"
#include "proto/wire.h"

#define USAGE                                                                                      \
	"usage: anvil _converge --profile FILE --work-dir DIR [--check-only] "                     \
	"[--gpus-file FILE | --gpu-backend SPEC]"

struct args {
	const char *profile, *work_dir, *gpus_file, *gpu_backend;
	int check_only;
};

static int usage(const char *why, const char *arg)
{
	fprintf(stderr, "anvil _converge: %s%s%s\n%s\n", why, arg ? ": " : "", arg ? arg : "",
	        USAGE);
	return 2;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		const char **slot = strcmp(f, "--profile") == 0       ? &a->profile
		                    : strcmp(f, "--work-dir") == 0    ? &a->work_dir
		                    : strcmp(f, "--gpus-file") == 0   ? &a->gpus_file
		                    : strcmp(f, "--gpu-backend") == 0 ? &a->gpu_backend
		                                                      : NULL;
		if (strcmp(f, "--check-only") == 0) {
			a->check_only = 1;
		} else if (!slot) {
			return usage("unknown argument", f);
		} else if (!v) {
			return usage("a value is missing", f);
		} else {
			*slot = v;
			i++;
		}
	}
	if (!a->profile || !a->work_dir)
		return usage("--profile and --work-dir are required", NULL);
	if (a->gpus_file && a->gpu_backend)
		return usage("give --gpus-file or --gpu-backend, not both", NULL);
	return 0;
}

/* The file as the sync answer's profile: {hash, name, spec} as it is, or
 * a compiled profile alone (`anvil fleet check --json`'s profiles[i]),
 * named by its "name" and hashed as its compact JSON with sorted keys. */
static json_t *read_profile(const char *path)
{
	struct buf b;
	buf_init(&b);
	json_t *o = NULL;
	char err[512];
	int rc = read_file(path, 1u << 20, &b);
	if (rc == 0)
		rc = jv_parse_object(b.data ? b.data : "", b.len, &o, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "%s", strerror(-rc));
	buf_cleanup(&b);
	if (rc) {
		fprintf(stderr, "anvil _converge: --profile %s: %s\n", path, err);
		return NULL;
	}
	if (json_object_get(o, "spec"))
		return o;
	char *canon = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	char hex[HASH_HEX_LEN + 1];
	hash_sha256(canon, strlen(canon), hex);
	free(canon);
	const char *name = jv_str(o, "name", "local");
	json_t *p = json_pack("{s:s,s:s,s:o}", "hash", hex, "name", name, "spec", o);
	return p;
}

static int open_facts(const struct args *a, struct steps_facts *facts)
{
	char spec[4200], err[768];
	if (a->gpus_file)
		snprintf(spec, sizeof(spec), "sim:%s", a->gpus_file);
	else
		snprintf(spec, sizeof(spec), "%s", a->gpu_backend ? a->gpu_backend : "nvml");
	struct gpu_backend *b = NULL;
	int rc = gpu_open(spec, &b, err, sizeof(err));
	if (rc == ERR_NOTFOUND && !a->gpu_backend)
		rc = gpu_open("none", &b, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "anvil _converge: %s\n", err);
		return rc;
	}
	converge_facts(b, facts);
	gpu_close(b);
	return 0;
}

int converge_main(int argc, char **argv)
{
	struct args a = {0};
	int rc = parse_args(argc, argv, &a);
	if (rc)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	struct steps_facts facts;
	json_t *profile = read_profile(a.profile);
	if (!profile || open_facts(&a, &facts) != 0 || mkdir_p(a.work_dir, 0755) != 0) {
		json_decref(profile);
		return 1;
	}
	json_t *kept_profile = NULL, *kept = NULL;
	char err[512];
	converge_load(a.work_dir, &kept_profile, &kept, err, sizeof(err));
	const char *env = getenv(CONVERGE_APT_SIMULATE_ENV);
	int same = kept && strcmp(jv_str(kept, "hash", ""), jv_str(profile, "hash", "")) == 0;
	struct converge_run_opts o = {.check_only = a.check_only,
	                              .apt_simulate = env && strcmp(env, "1") == 0,
	                              .prev = same ? kept : NULL};
	json_t *st = converge_run(profile, &facts, &o);
	char *text = json_dumps(st, JSON_INDENT(2));
	printf("%s\n", text);
	free(text);
	rc = converge_save(a.work_dir, profile, st);
	if (rc)
		fprintf(stderr, "anvil _converge: cannot write %s/%s: %s\n", a.work_dir,
		        CONVERGE_FILE, strerror(-rc));
	int converged = strcmp(jv_str(st, "state", ""), "converged") == 0;
	json_decref(st);
	json_decref(kept);
	json_decref(kept_profile);
	json_decref(profile);
	return converged && rc == 0 ? 0 : 1;
}
