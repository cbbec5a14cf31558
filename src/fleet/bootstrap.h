/* bootstrap.h - what `anvil fleet bootstrap` does to a machine over SSH,
 * as data: the machines, the files each gets, and the shell scripts that
 * inspect it and bring it to them; pure.
 *
 * The machines (targets) are the nodes of a cluster spec's on-premises
 * groups, each with its name and address (bootstrap_from_spec; --node and
 * --group pick some), or ADDR[=NAME] arguments (bootstrap_parse_target).
 * Each gets four files:
 *
 *   binary   PREFIX/anvil                          0755  the running anvil
 *   config   CONFIG_DIR/agent.yaml                 0644  bootstrap_agent_config()
 *   token    CONFIG_DIR/join.token                 0600  the cluster's join token
 *   unit     UNIT_DIR/anvil-agent.service          0644  bootstrap_unit(): the
 *            repository's deploy/systemd/anvil-agent.service, built in, with
 *            the paths above
 *
 * and these steps, each one SSH command whose script prints its outcome
 * as its last line of output ("ok DETAIL" or "changed DETAIL"; a non-zero
 * exit is a failure, its stderr the reason):
 *
 *   inspect       read only: uid, systemd or not (/run/systemd/system), which
 *                 directories exist, each file's SHA-256, whether the agent
 *                 runs (and its unit is enabled); parsed by bootstrap_parse_seen
 *   dirs          mkdir -p the directories missing
 *   binary, config, token, unit
 *                 only the files whose SHA-256 differs: the content comes on
 *                 the command's stdin into a temporary name beside the file,
 *                 is checked against its SHA-256 (a cut connection installs
 *                 nothing), and renamed over the file (a running binary can
 *                 be replaced; the token never appears on a command line)
 *   account       the account ranks run as (anvil-job; agent/fence.h), made
 *                 with useradd when the machine lacks it
 *   check-config  PREFIX/anvil agent --config CONFIG_DIR/agent.yaml --check-config
 *   start         with systemd: daemon-reload when the unit changed, enable,
 *                 then restart when a file changed and the agent runs, start
 *                 when it does not; without systemd (containers, test hosts):
 *                 the agent detached (setsid nohup), its pid in
 *                 WORK_DIR/agent.pid and its output in WORK_DIR/agent.log,
 *                 stopped first (SIGTERM) to restart it
 *
 * bootstrap_plan() makes the list from what inspect saw: a step with
 * nothing to do has no script and is "ok" as it stands, so a machine
 * already bootstrapped costs one inspect, one check and no change.
 *
 * Every string that reaches a script or a file is checked first (paths of
 * a safe alphabet, names and addresses by the spec's rules, agent options
 * as KEY=VALUE on one line) and quoted for sh or YAML. Pure: no I/O, no
 * clock. Returned strings and lists are the caller's to free.
 */
#ifndef ANVIL_FLEET_BOOTSTRAP_H
#define ANVIL_FLEET_BOOTSTRAP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

#define BOOTSTRAP_UNIT_NAME   "anvil-agent" /* the systemd unit (.service) */
#define BOOTSTRAP_RANK_USER   "anvil-job"   /* agent/fence.h's default account */
#define BOOTSTRAP_OPTIONS_MAX 32            /* --agent-option KEY=VALUE */
#define BOOTSTRAP_PATH_MAX    200           /* --prefix, --config-dir, ... */

/* One machine: its address (what ssh connects to and the agent's
 * address:) and its node name (NULL: the agent takes its host name). */
struct bootstrap_target {
	char *address;
	char *name;
};

struct bootstrap_targets {
	struct bootstrap_target *v;
	size_t n;
};

/* Parses ADDR or ADDR=NAME into out (appended). 0, or -1 with the
 * argument, its part at fault and why in err. */
int bootstrap_parse_target(const char *arg, struct bootstrap_targets *out, char *err,
                           size_t errlen);

/* The nodes of a compiled spec (fleet_compile's form) in its order, those
 * of its on-premises pools, limited to the groups named in groups (a
 * comma list; NULL: all) and the nodes named in nodes (a comma list of
 * names or ranges like gpu-[01-04]; NULL: all), appended to out. 0, or -1
 * with the option, the value and why in err (a group or node the spec
 * lacks, a chosen node whose group has no addresses, nothing chosen) and
 * out unchanged. */
int bootstrap_from_spec(const json_t *fleet, const char *groups, const char *nodes,
                        struct bootstrap_targets *out, char *err, size_t errlen);

void bootstrap_targets_free(struct bootstrap_targets *t);

/* What the run sets for every machine (borrowed strings). */
struct bootstrap_config {
	const char *server;         /* the URL the agents join */
	const char *prefix;         /* the binary's directory: /usr/local/bin */
	const char *config_dir;     /* agent.yaml and join.token: /etc/anvil */
	const char *unit_dir;       /* /etc/systemd/system */
	const char *work_dir;       /* the agent's work-dir: /var/lib/anvil/agent */
	const char *const *options; /* --agent-option KEY=VALUE, in order */
	size_t noptions;
	int sudo; /* run the scripts through sudo -n */
};

#define BOOTSTRAP_PREFIX     "/usr/local/bin"
#define BOOTSTRAP_CONFIG_DIR "/etc/anvil"
#define BOOTSTRAP_UNIT_DIR   "/etc/systemd/system"
#define BOOTSTRAP_WORK_DIR   "/var/lib/anvil/agent"

/* Checks c: the server an http(s) URL, the paths absolute and of letters,
 * digits and / . _ + - (no '..'), each option KEY=VALUE with a key of
 * lower-case letters, digits and '-' that bootstrap does not set itself
 * and a value on one line. 0, or -1 with the option, the value and why. */
int bootstrap_config_check(const struct bootstrap_config *c, char *err, size_t errlen);

/* Whether an agent on the machine at address could reach the server at
 * url: not when url's host is a loopback one (127.*, localhost, ::1) and
 * address is not. */
int bootstrap_server_reachable(const char *url, const char *address);

enum bootstrap_file {
	BOOTSTRAP_BINARY,
	BOOTSTRAP_CONFIG,
	BOOTSTRAP_TOKEN,
	BOOTSTRAP_UNIT,
	BOOTSTRAP_NFILES,
};

/* "binary", "config", "token", "unit": the step's name. */
const char *bootstrap_file_name(enum bootstrap_file f);
/* The file's path on the machine (the caller frees it). */
char *bootstrap_file_path(const struct bootstrap_config *c, enum bootstrap_file f);

/* The machine's agent.yaml: server, join-token-file, work-dir, address,
 * name (when the target has one), listen 0.0.0.0:7071, then the options
 * (one given there replaces the default of the same key). */
char *bootstrap_agent_config(const struct bootstrap_config *c, const struct bootstrap_target *t);

/* The systemd unit: the built-in deploy/systemd/anvil-agent.service with
 * its paths (/usr/local/bin/anvil, /etc/anvil/agent.yaml,
 * /etc/anvil/join.token) replaced by c's. */
char *bootstrap_unit(const struct bootstrap_config *c);

/* ---- inspect ---- */

/* The inspect step's script. */
char *bootstrap_inspect_script(const struct bootstrap_config *c);

/* What inspect saw on a machine. */
struct bootstrap_seen {
	long uid;
	int systemd; /* /run/systemd/system exists: systemd is the init */
	int running; /* the agent runs (systemd: the unit is active; else its pid) */
	int enabled; /* systemd: the unit is enabled */
	int missing; /* directories that do not exist */
	int account; /* the ranks' account (BOOTSTRAP_RANK_USER) exists */
	char hash[BOOTSTRAP_NFILES][HASH_HEX_LEN + 1]; /* "" when the file is not there */
};

/* Parses inspect's output. 0, or -1 with the line at fault in err. */
int bootstrap_parse_seen(const char *out, struct bootstrap_seen *s, char *err, size_t errlen);

/* ---- the plan for one machine ---- */

/* What is installed: each file's SHA-256 and size, and the config's text
 * (the only one that differs between machines; the caller has the rest). */
struct bootstrap_want {
	char hash[BOOTSTRAP_NFILES][HASH_HEX_LEN + 1];
	int64_t size[BOOTSTRAP_NFILES];
};

struct bootstrap_step {
	char name[16]; /* dirs, binary, config, token, unit, check-config, start */
	char *script;  /* NULL: nothing to do, "ok" with detail */
	int file;      /* the enum bootstrap_file whose content goes on stdin, or -1 */
	char *detail;  /* what it does (or found), for the report and --dry-run */
};

struct bootstrap_plan {
	struct bootstrap_step *v;
	size_t n;
};

/* The steps after inspect, in order: dirs, the four files, check-config,
 * start. */
void bootstrap_plan(const struct bootstrap_config *c, const struct bootstrap_seen *seen,
                    const struct bootstrap_want *want, struct bootstrap_plan *out);
void bootstrap_plan_free(struct bootstrap_plan *p);

/* ---- running a step ---- */

/* The remote command for a script: sh -c 'SCRIPT', through sudo -n when
 * c->sudo. */
char *bootstrap_remote_command(const struct bootstrap_config *c, const char *script);

/* How ssh is run (borrowed strings). */
struct bootstrap_ssh {
	const char *user;           /* -l; NULL: ssh's default */
	int64_t port;               /* -p; 0: ssh's default */
	const char *identity;       /* -i; NULL: none */
	const char *const *options; /* -o KEY=VALUE, first: ssh takes the first value given */
	size_t noptions;
};

/* ssh's argv (NULL-ended; free each and the array with
 * bootstrap_argv_free): BatchMode=yes (never a prompt), ConnectTimeout
 * 10 s, -T, then the host and the command. */
char **bootstrap_ssh_argv(const struct bootstrap_ssh *s, const char *address, const char *command);
void bootstrap_argv_free(char **argv);

enum bootstrap_outcome {
	BOOTSTRAP_OK,
	BOOTSTRAP_CHANGED,
	BOOTSTRAP_FAILED,
};

/* "ok", "changed", "failed". */
const char *bootstrap_outcome_name(enum bootstrap_outcome o);

/* A step's outcome from its command's exit status (status: the exit code,
 * or -1 when it did not exit normally) and output: the script's last line
 * "changed DETAIL" or "ok DETAIL" on exit 0; failed otherwise, with ssh's
 * own message when ssh failed (255). The detail (the caller frees it): the
 * last line's rest, or the failure's last lines of stderr (else stdout). */
enum bootstrap_outcome bootstrap_outcome_of(int status, const char *out, const char *errout,
                                            char **detail);

#endif
