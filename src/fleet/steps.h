/* steps.h - a node profile as an ordered list of steps, each a check and an
 * action described as data; pure.
 *
 * The agent converges its node to the profile the server sends
 * (docs/fleet.md, "Converging a node"; agent/converge.h runs the list).
 * This module turns the compiled profile (`anvil fleet check --json`'s
 * profiles[i], the sync answer's profile.spec) into the steps, in this
 * order, each present only when the profile asks for it:
 *
 *   name              reads                     holds when                 action
 *   gpu               the facts' GPUs           count and every model      none (check only)
 *   driver            the facts' driver         the version matches        none (check only)
 *   cuda              the facts' CUDA version   the version matches        none (check only)
 *   agent             the running binary's      the version matches        none (check only)
 *   mount PATH        /proc/self/mountinfo      PATH is that device and    mkdir -p PATH, then
 *                                               fs, with its VFS flags     mount (or remount)
 *   cache_dir PATH    stat(PATH)                a directory                mkdir -p PATH (0755)
 *   sysctl KEY        /proc/sys/KEY             the same words             write the value
 *   packages          dpkg-query -W -f ...      each installed (at its     apt-get install -y
 *                                               pinned version)            --no-install-recommends
 *                                                                          of the missing ones
 *
 * The caller does the reading (struct step_seen), asks steps_judge()
 * whether the check holds, and when it does not and the verdict says an
 * action can fix it, performs the step's action: mkdir, write, or the
 * command steps_action_argv() builds from what was seen. Every string a
 * step carries comes from the profile and has been checked here (absolute
 * paths without '.' or '..' parts, sysctl keys that stay under /proc/sys,
 * devices, file systems, options and packages that cannot be read as a
 * command's option), so that a profile can never make a step touch
 * anything but what it names.
 *
 * Versions (driver, cuda, agent): the version part of what the node
 * reports starts at its first digit (the simulated backend's driver
 * "sim-550.54.15" is 550.54.15). The profile's version matches it when it
 * is equal, or a prefix of it that ends where a part does ('.', '-', '+'
 * or '~' follows): "550" and "550.54" match 550.54.15; "12.4" matches
 * 12.4 and 12.4.1 but not 12.40; "0.1.0" matches the agent 0.1.0-dev. A
 * pin says the version to the precision it gives.
 *
 * Pure: no I/O, no clock. A struct steps owns its strings; one thread at a
 * time per list; the functions that take no list are thread-safe.
 */
#ifndef ANVIL_FLEET_STEPS_H
#define ANVIL_FLEET_STEPS_H

#include <jansson.h>
#include <stddef.h>

#define STEPS_MAX        256  /* steps in one profile: profile_status's bound */
#define STEPS_NAME_MAX   200  /* a step's name, bytes */
#define STEPS_DETAIL_MAX 4096 /* a step's detail, bytes: the last 4 KiB of its output */
#define STEPS_GPUS_MAX   64

enum step_kind {
	STEP_GPU,
	STEP_DRIVER,
	STEP_CUDA,
	STEP_AGENT,
	STEP_MOUNT,
	STEP_CACHE_DIR,
	STEP_SYSCTL,
	STEP_PACKAGES,
};

/* What a check reads. */
enum step_source {
	STEP_READ_FACTS,   /* struct steps_facts */
	STEP_READ_FILE,    /* the file at read_path: its text, or the errno of reading it */
	STEP_READ_STAT,    /* read_path: 0 a directory, -ENOTDIR something else, -ENOENT none */
	STEP_READ_COMMAND, /* read_argv's output (stdout and stderr) and exit status */
};

/* What an action does when the check does not hold. */
enum step_action {
	STEP_ACT_NONE,    /* a check only: the step fails with what was found */
	STEP_ACT_MKDIR,   /* mkdir -p act_path, 0755 */
	STEP_ACT_WRITE,   /* writes act_text to act_path */
	STEP_ACT_COMMAND, /* mkdir -p act_path first when set, then runs steps_action_argv() */
};

struct step {
	char name[STEPS_NAME_MAX + 1]; /* "mount /mnt/nvme", "sysctl vm.swappiness" */
	enum step_kind kind;
	enum step_source source;
	char *read_path;  /* FILE, STAT */
	char **read_argv; /* COMMAND; NULL-ended */
	/* What the check compares against (borrowed from the list's profile). */
	const char *want;       /* gpu: model; versions; mount: fs; sysctl: the value */
	const char *target;     /* mount: the mount point; cache_dir: the path */
	const char *device;     /* mount */
	char *options;          /* mount: "noatime,nodiscard", "" for none */
	int count;              /* gpu */
	const json_t *packages; /* packages: the profile's list, "name" or "name=version" */
	enum step_action act;
	char *act_path;
	char *act_text;
	/* STEP_ACT_COMMAND: the command is apt-get, run with
	 * DEBIAN_FRONTEND=noninteractive */
	int apt;
};

struct steps {
	struct step *v;
	size_t n;
	json_t *spec; /* the profile the steps borrow from (a reference) */
};

/* What the node says of itself: the facts the check-only steps compare. */
struct steps_facts {
	int gpus;
	char gpu_models[STEPS_GPUS_MAX][96]; /* by index */
	char driver[64];                     /* "" when not known */
	char cuda[64];
	char agent[64];
};

/* What a check read. */
struct step_seen {
	int err;          /* FILE, STAT, COMMAND: 0 or the negative errno of reading it */
	const char *text; /* FILE: its content; COMMAND: its output; else NULL */
	int status;       /* COMMAND: its exit status */
	/* mount: "MAJOR:MINOR" of the profile's device as the node resolves it
	 * (UUID=, LABEL=, a link), or NULL when it is no block device here */
	const char *device_id;
};

enum step_verdict {
	STEP_HOLDS,   /* ok: nothing to do */
	STEP_DIFFERS, /* the action can make it so */
	STEP_CANNOT,  /* no action here can: a check-only step, or something in the way */
};

/* The steps of spec, the compiled profile. 0 and *out, or ERR_INVALID with
 * "FIELD: 'VALUE': why" in err (a malformed profile is refused whole), or
 * ERR_TOOBIG past STEPS_MAX steps. The caller frees *out with steps_free;
 * it holds a reference to spec. */
int steps_from_profile(const json_t *spec, struct steps **out, char *err, size_t errlen);
void steps_free(struct steps *s);

/* The check of s against what was read; detail (at most STEPS_DETAIL_MAX
 * bytes wanted) says what was found, in words. */
enum step_verdict steps_judge(const struct step *s, const struct steps_facts *facts,
                              const struct step_seen *seen, char *detail, size_t len);

/* The command of a STEP_ACT_COMMAND step after its check read seen (a
 * mount's or a remount's; apt-get install of the packages that are not
 * installed at their version). simulate: apt-get -s, which changes
 * nothing. NULL-ended, to free with steps_argv_free; NULL when the step
 * has no command or nothing to do. */
char **steps_action_argv(const struct step *s, const struct step_seen *seen, int simulate);
void steps_argv_free(char **argv);

/* The rule above: 1 when want matches the version part of found. */
int steps_version_match(const char *want, const char *found);

/* Where the last STEPS_DETAIL_MAX - 1 bytes or fewer of text[0, len) begin,
 * not inside a UTF-8 sequence: the output a step keeps. */
size_t steps_tail(const char *text, size_t len);

#endif
