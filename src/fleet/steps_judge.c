/* steps_judge.c - each step's check against what was read, and the
 * command its action runs (fleet/steps.h). Pure. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/util.h"
#include "fleet/steps.h"

/* Mount options that /proc/self/mountinfo shows among a mount's own
 * options when they are in force: the ones a check can compare. The
 * others (a file system's own, "defaults") are given to mount and not
 * compared, as the kernel shows them in its own words or not at all. */
static const char *const vfs_flags[] = {"ro",      "rw",         "nosuid",   "nodev", "noexec",
                                        "noatime", "nodiratime", "relatime", NULL};

static enum step_verdict say(enum step_verdict v, char *detail, size_t len, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static enum step_verdict say(enum step_verdict v, char *detail, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char text[STEPS_DETAIL_MAX];
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	text_printf(detail, len, "%s", text);
	return v;
}

int steps_version_match(const char *want, const char *found)
{
	if (!want || !found)
		return 0;
	found += strcspn(found, "0123456789");
	size_t n = strlen(want);
	if (n == 0 || strncmp(want, found, n) != 0)
		return 0;
	return found[n] == '\0' || strchr(".-+~", found[n]) != NULL;
}

size_t steps_tail(const char *text, size_t len)
{
	if (len < STEPS_DETAIL_MAX)
		return 0;
	size_t at = len - (STEPS_DETAIL_MAX - 1);
	while (at < len && ((unsigned char)text[at] & 0xc0) == 0x80)
		at++; /* not inside a UTF-8 sequence */
	return at;
}

static enum step_verdict judge_gpu(const struct step *s, const struct steps_facts *f, char *detail,
                                   size_t len)
{
	if (f->gpus != s->count)
		return say(STEP_CANNOT, detail, len, "%d GPUs, the profile wants %d%s%s", f->gpus,
		           s->count, s->want ? " x " : "", s->want ? s->want : "");
	for (int i = 0; s->want && i < f->gpus && i < STEPS_GPUS_MAX; i++)
		if (strcasecmp(f->gpu_models[i], s->want) != 0)
			return say(STEP_CANNOT, detail, len, "GPU %d is %s, the profile wants %s",
			           i, f->gpu_models[i][0] ? f->gpu_models[i] : "(unnamed)",
			           s->want);
	return say(STEP_HOLDS, detail, len, "%d GPUs%s%s", f->gpus, s->want ? ", each " : "",
	           s->want ? s->want : "");
}

static enum step_verdict judge_version(const struct step *s, const struct steps_facts *f,
                                       char *detail, size_t len)
{
	const char *what = s->kind == STEP_DRIVER ? "driver"
	                   : s->kind == STEP_CUDA ? "CUDA"
	                                          : "agent";
	const char *found = s->kind == STEP_DRIVER ? f->driver
	                    : s->kind == STEP_CUDA ? f->cuda
	                                           : f->agent;
	if (!found[0])
		return say(
		        STEP_CANNOT, detail, len,
		        "the node reports no %s version (no GPU backend that tells), the profile "
		        "wants %s",
		        what, s->want);
	if (!steps_version_match(s->want, found))
		return say(STEP_CANNOT, detail, len, "%s version %s, the profile wants %s", what,
		           found, s->want);
	return say(STEP_HOLDS, detail, len, "%s version %s", what, found);
}

/* ---- mounts ---- */

static int octal(char c)
{
	return c >= '0' && c <= '7';
}

/* A mountinfo field with its octal escapes (\040 for a space) undone. */
static void unescape(const char *in, size_t n, char *out, size_t cap)
{
	size_t k = 0;
	for (size_t i = 0; i < n && k + 1 < cap; i++) {
		if (in[i] == '\\' && i + 3 < n && octal(in[i + 1]) && octal(in[i + 2]) &&
		    octal(in[i + 3])) {
			out[k++] = (char)((in[i + 1] - '0') * 64 + (in[i + 2] - '0') * 8 +
			                  (in[i + 3] - '0'));
			i += 3;
		} else {
			out[k++] = in[i];
		}
	}
	out[k] = '\0';
}

/* One line of /proc/self/mountinfo: "36 35 98:0 /root /mnt/point rw,noatime
 * shared:1 - ext4 /dev/sda1 rw,errors=continue". */
struct mount_line {
	char dev[32];     /* MAJOR:MINOR */
	char point[4096]; /* mount point */
	char flags[512];  /* the mount's own options */
	char fs[64];
	char source[4096];
};

static int parse_mount_line(const char *line, size_t n, struct mount_line *m)
{
	const char *f[12];
	size_t fl[12];
	int nf = 0;
	const char *p = line, *end = line + n;
	int dash = -1;
	while (p < end && nf < 12) {
		while (p < end && *p == ' ')
			p++;
		if (p == end)
			break;
		const char *w = p;
		while (p < end && *p != ' ')
			p++;
		if (dash < 0 && nf >= 6 && p - w == 1 && *w == '-')
			dash = nf;
		f[nf] = w;
		fl[nf++] = (size_t)(p - w);
	}
	if (dash < 0 || dash + 2 >= nf)
		return 0;
	unescape(f[2], fl[2], m->dev, sizeof(m->dev));
	unescape(f[4], fl[4], m->point, sizeof(m->point));
	unescape(f[5], fl[5], m->flags, sizeof(m->flags));
	unescape(f[dash + 1], fl[dash + 1], m->fs, sizeof(m->fs));
	unescape(f[dash + 2], fl[dash + 2], m->source, sizeof(m->source));
	return 1;
}

/* The mount on top at point (the last line that names it), or 0. */
static int find_mount(const char *text, const char *point, struct mount_line *out)
{
	int found = 0;
	struct mount_line *m = xcalloc(1, sizeof(*m));
	for (const char *line = text; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);
		if (parse_mount_line(line, n, m) && strcmp(m->point, point) == 0) {
			*out = *m;
			found = 1;
		}
		line = nl ? nl + 1 : NULL;
	}
	free(m);
	return found;
}

/* The profile's VFS flags that the mount lacks, comma-separated, in out. */
static void missing_flags(const char *want, const char *have, char *out, size_t cap)
{
	out[0] = '\0';
	char opts[1024];
	snprintf(opts, sizeof(opts), "%s", want ? want : "");
	char *save = NULL;
	for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		int vfs = 0;
		for (size_t i = 0; vfs_flags[i]; i++)
			vfs |= strcmp(vfs_flags[i], o) == 0;
		if (vfs && !list_has(have, ",", o)) {
			size_t n = strlen(out);
			snprintf(out + n, cap - n, "%s%s", n ? "," : "", o);
		}
	}
}

static enum step_verdict judge_mount(const struct step *s, const struct step_seen *seen,
                                     char *detail, size_t len)
{
	if (seen->err || !seen->text)
		return say(STEP_CANNOT, detail, len, "cannot read %s: %s", s->read_path,
		           strerror(seen->err ? -seen->err : EIO));
	struct mount_line *m = xcalloc(1, sizeof(*m));
	enum step_verdict v;
	if (!find_mount(seen->text, s->target, m)) {
		v = say(STEP_DIFFERS, detail, len, "nothing is mounted at %s", s->target);
	} else if (strcmp(m->fs, s->want) != 0 ||
	           (strcmp(m->source, s->device) != 0 &&
	            !(seen->device_id && strcmp(seen->device_id, m->dev) == 0))) {
		v = say(STEP_CANNOT, detail, len,
		        "%s holds %s (%s), not %s (%s): unmount it first; converging never mounts "
		        "over another file system",
		        s->target, m->source, m->fs, s->device, s->want);
	} else {
		char lack[512];
		missing_flags(s->options, m->flags, lack, sizeof(lack));
		if (lack[0])
			v = say(STEP_DIFFERS, detail, len,
			        "%s is %s (%s) without %s (its options: %s)", s->target, m->source,
			        m->fs, lack, m->flags);
		else
			v = say(STEP_HOLDS, detail, len, "%s is %s (%s, %s)", s->target, m->source,
			        m->fs, m->flags);
	}
	free(m);
	return v;
}

/* ---- the other files ---- */

static enum step_verdict judge_dir(const struct step *s, const struct step_seen *seen, char *detail,
                                   size_t len)
{
	if (seen->err == 0)
		return say(STEP_HOLDS, detail, len, "%s is a directory", s->target);
	if (seen->err == -ENOENT)
		return say(STEP_DIFFERS, detail, len, "%s does not exist", s->target);
	if (seen->err == -ENOTDIR)
		return say(STEP_CANNOT, detail, len, "%s is there and is not a directory",
		           s->target);
	return say(STEP_CANNOT, detail, len, "cannot look at %s: %s", s->target,
	           strerror(-seen->err));
}

/* The words of a value, one space apart: the kernel writes a sysctl's
 * several numbers with tabs ("4096\t87380\t6291456"). */
static void words(const char *in, char *out, size_t cap)
{
	size_t k = 0;
	for (const char *p = in; *p && k + 1 < cap;) {
		p += strspn(p, " \t\r\n");
		size_t n = strcspn(p, " \t\r\n");
		if (!n)
			break;
		if (k && k + 1 < cap)
			out[k++] = ' ';
		for (size_t i = 0; i < n && k + 1 < cap; i++)
			out[k++] = p[i];
		p += n;
	}
	out[k] = '\0';
}

static enum step_verdict judge_sysctl(const struct step *s, const struct step_seen *seen,
                                      char *detail, size_t len)
{
	if (seen->err == -ENOENT)
		return say(STEP_CANNOT, detail, len, "this kernel has no setting %s (no %s)",
		           s->target, s->read_path);
	if (seen->err || !seen->text)
		return say(STEP_CANNOT, detail, len, "cannot read %s: %s", s->read_path,
		           strerror(seen->err ? -seen->err : EIO));
	char have[1024], want[1024];
	words(seen->text, have, sizeof(have));
	words(s->want, want, sizeof(want));
	if (strcmp(have, want) == 0)
		return say(STEP_HOLDS, detail, len, "%s is %s", s->target, have);
	return say(STEP_DIFFERS, detail, len, "%s is %s, the profile wants %s", s->target, have,
	           want);
}

/* ---- packages ---- */

/* What dpkg-query said of package name: 1 installed (its version in ver),
 * 0 not. Its lines are "NAME WANT ok STATUS VERSION". */
static int package_installed(const char *out, const char *name, char *ver, size_t cap)
{
	size_t n = strlen(name);
	for (const char *line = out; line && *line;) {
		const char *nl = strchr(line, '\n');
		char w[5][160] = {{0}};
		int nw = 0;
		for (const char *p = line; nw < 5 && p < (nl ? nl : line + strlen(line));) {
			p += strspn(p, " ");
			size_t k = strcspn(p, " \n");
			if (!k)
				break;
			snprintf(w[nw++], sizeof(w[0]), "%.*s", (int)k, p);
			p += k;
		}
		if (nw >= 4 && strlen(w[0]) == n && strncmp(w[0], name, n) == 0 &&
		    strcmp(w[3], "installed") == 0) {
			snprintf(ver, cap, "%s", nw == 5 ? w[4] : "");
			return 1;
		}
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

/* Whether package p ("name" or "name=version") is as the profile wants;
 * what was found goes to b. */
static int package_ok(const char *out, const char *p, struct buf *b)
{
	char name[128], ver[160];
	snprintf(name, sizeof(name), "%.*s", (int)strcspn(p, "="), p);
	const char *pin = strchr(p, '=');
	if (!package_installed(out, name, ver, sizeof(ver))) {
		buf_printf(b, "%s%s not installed", b->len ? "; " : "", name);
		return 0;
	}
	if (pin && strcmp(pin + 1, ver) != 0) {
		buf_printf(b, "%s%s %s installed, the profile wants %s", b->len ? "; " : "", name,
		           ver, pin + 1);
		return 0;
	}
	buf_printf(b, "%s%s %s", b->len ? "; " : "", name, ver);
	return 1;
}

static enum step_verdict judge_packages(const struct step *s, const struct step_seen *seen,
                                        char *detail, size_t len)
{
	if (seen->err || !seen->text)
		return say(STEP_CANNOT, detail, len, "cannot run dpkg-query: %s",
		           strerror(seen->err ? -seen->err : EIO));
	struct buf b;
	buf_init(&b);
	int missing = 0;
	size_t i;
	json_t *p;
	json_array_foreach (s->packages, i, p)
		missing += !package_ok(seen->text, json_string_value(p), &b);
	enum step_verdict v = say(missing ? STEP_DIFFERS : STEP_HOLDS, detail, len, "%s",
	                          b.data ? b.data + steps_tail(b.data, b.len) : "");
	buf_cleanup(&b);
	return v;
}

enum step_verdict steps_judge(const struct step *s, const struct steps_facts *facts,
                              const struct step_seen *seen, char *detail, size_t len)
{
	switch (s->kind) {
	case STEP_GPU: return judge_gpu(s, facts, detail, len);
	case STEP_DRIVER:
	case STEP_CUDA:
	case STEP_AGENT: return judge_version(s, facts, detail, len);
	case STEP_MOUNT: return judge_mount(s, seen, detail, len);
	case STEP_CACHE_DIR: return judge_dir(s, seen, detail, len);
	case STEP_SYSCTL: return judge_sysctl(s, seen, detail, len);
	case STEP_PACKAGES: return judge_packages(s, seen, detail, len);
	}
	return say(STEP_CANNOT, detail, len, "unknown step");
}

/* ---- the actions' commands ---- */

static char **argv_add(char **v, size_t *n, const char *word)
{
	v = xrealloc(v, (*n + 2) * sizeof(char *));
	v[(*n)++] = xstrdup(word);
	v[*n] = NULL;
	return v;
}

/* mount -t FS [-o OPTS] DEVICE PATH, or mount -o remount,OPTS PATH when the
 * file system is there and lacks a flag. */
static char **mount_argv(const struct step *s, const struct step_seen *seen)
{
	struct mount_line *m = xcalloc(1, sizeof(*m));
	int there = seen->text && find_mount(seen->text, s->target, m);
	free(m);
	char **v = NULL;
	size_t n = 0;
	v = argv_add(v, &n, "mount");
	if (there) {
		char opts[1100];
		snprintf(opts, sizeof(opts), "remount,%s", s->options);
		v = argv_add(v, &n, "-o");
		v = argv_add(v, &n, opts);
		return argv_add(v, &n, s->target);
	}
	v = argv_add(v, &n, "-t");
	v = argv_add(v, &n, s->want);
	if (s->options && s->options[0]) {
		v = argv_add(v, &n, "-o");
		v = argv_add(v, &n, s->options);
	}
	v = argv_add(v, &n, s->device);
	return argv_add(v, &n, s->target);
}

/* apt-get install -y --no-install-recommends [-s] of what is missing. */
static char **apt_argv(const struct step *s, const struct step_seen *seen, int simulate)
{
	const char *const head[] = {"apt-get", "install", "-y", "--no-install-recommends", NULL};
	char **v = NULL;
	size_t n = 0;
	for (size_t k = 0; head[k]; k++)
		v = argv_add(v, &n, head[k]);
	if (simulate)
		v = argv_add(v, &n, "-s");
	size_t first = n, i;
	json_t *p;
	struct buf scratch;
	buf_init(&scratch);
	json_array_foreach (s->packages, i, p) {
		const char *pkg = json_string_value(p);
		if (!package_ok(seen->text ? seen->text : "", pkg, &scratch))
			v = argv_add(v, &n, pkg);
	}
	buf_cleanup(&scratch);
	if (n == first) {
		steps_argv_free(v);
		return NULL;
	}
	return v;
}

char **steps_action_argv(const struct step *s, const struct step_seen *seen, int simulate)
{
	if (s->act != STEP_ACT_COMMAND)
		return NULL;
	if (s->kind == STEP_MOUNT)
		return mount_argv(s, seen);
	if (s->kind == STEP_PACKAGES)
		return apt_argv(s, seen, simulate);
	return NULL;
}
