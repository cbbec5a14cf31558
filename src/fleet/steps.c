/* steps.c - the steps of a profile: the compiled profile checked again
 * (it comes over the network) and turned into the list, in order.
 * steps_judge.c holds the checks and the actions' commands. */
#include "fleet/steps.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/util.h"

/* The keys of a compiled profile (fleet/spec_profile.c). A key this agent
 * does not know is refused: converging part of a profile and calling the
 * node converged would be a lie. */
static const char *const profile_keys[] = {"name",   "gpu",       "driver", "cuda",     "agent",
                                           "mounts", "cache_dir", "sysctl", "packages", NULL};

struct build {
	struct steps *s;
	char *err;
	size_t errlen;
	int rc;
};

static int bad(struct build *b, const char *field, const char *value, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* Records the first error: "FIELD: 'VALUE': why". */
static int bad(struct build *b, const char *field, const char *value, const char *fmt, ...)
{
	if (b->rc)
		return b->rc;
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	text_printf(b->err, b->errlen, "%s: '%.80s': %s", field, value, why);
	b->rc = ERR_INVALID;
	return b->rc;
}

static int lower_digit(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* One line of text: printable, tabs allowed ("4096\t87380\t6291456"). */
static int one_line(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return 0;
	return 1;
}

/* An absolute path without empty, "." or ".." parts and no '/' at the end
 * (the spec's rule, fleet/spec_profile.c). */
static int is_path(const char *s)
{
	size_t n = strlen(s);
	if (s[0] != '/' || n > 255 || (n > 1 && s[n - 1] == '/') || !printable(s))
		return 0;
	for (const char *p = s; *p;) {
		const char *part = p + 1, *end = strchr(part, '/');
		size_t len = end ? (size_t)(end - part) : strlen(part);
		if ((n > 1 && len == 0) || (len == 1 && part[0] == '.') ||
		    (len == 2 && part[0] == '.' && part[1] == '.'))
			return 0;
		p = part + len;
	}
	return 1;
}

/* A word that no command reads as one of its options. */
static int is_word(const char *s, size_t max)
{
	return *s && *s != '-' && strlen(s) <= max && printable(s) && !strpbrk(s, " \t");
}

static const char *str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static struct step *add(struct build *b, enum step_kind kind, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static struct step *add(struct build *b, enum step_kind kind, const char *fmt, ...)
{
	if (b->s->n == STEPS_MAX) {
		if (!b->rc) {
			snprintf(b->err, b->errlen, "spec: more than %d steps: at most %d",
			         STEPS_MAX, STEPS_MAX);
			b->rc = ERR_TOOBIG;
		}
		return NULL;
	}
	struct step *st = &b->s->v[b->s->n++];
	memset(st, 0, sizeof(*st));
	st->kind = kind;
	va_list ap;
	va_start(ap, fmt);
	char name[512];
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	text_printf(st->name, sizeof(st->name), "%s", name);
	return st;
}

static void gpu_step(struct build *b, const json_t *g)
{
	if (!g || json_is_null(g))
		return;
	const json_t *count = json_object_get(g, "count"), *model = json_object_get(g, "model");
	if (!json_is_object(g) || !json_is_integer(count) || json_integer_value(count) < 0 ||
	    json_integer_value(count) > STEPS_GPUS_MAX) {
		bad(b, "spec.gpu", json_is_object(g) ? "{...}" : "?",
		    "should be {model, count} with a count of 0 to %d", STEPS_GPUS_MAX);
		return;
	}
	if (model && !json_is_null(model) &&
	    (!json_is_string(model) || !*json_string_value(model) ||
	     strlen(json_string_value(model)) > 95 || !printable(json_string_value(model)))) {
		bad(b, "spec.gpu.model", json_is_string(model) ? json_string_value(model) : "?",
		    "should be the GPU model as text, 1-95 characters");
		return;
	}
	if (json_integer_value(count) == 0)
		return; /* no GPUs asked for: nothing to check */
	struct step *st = add(b, STEP_GPU, "gpu");
	if (!st)
		return;
	st->source = STEP_READ_FACTS;
	st->count = (int)json_integer_value(count);
	st->want = json_string_value(model); /* NULL: any model */
}

/* driver and cuda: numbers and dots; agent (loose) also letters, '+', '~', '-'. */
static int is_version(const char *s, int loose)
{
	if (!s || *s < '0' || *s > '9' || strlen(s) > 63)
		return 0;
	for (const char *c = s; *c; c++) {
		int ok = (*c >= '0' && *c <= '9') || *c == '.' ||
		         (loose &&
		          (((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z') || strchr("+~-", *c)));
		if (!ok)
			return 0;
	}
	return 1;
}

static void version_step(struct build *b, const json_t *spec, const char *key, enum step_kind kind)
{
	const json_t *v = json_object_get(spec, key);
	if (!v || json_is_null(v))
		return;
	char field[32];
	snprintf(field, sizeof(field), "spec.%s", key);
	if (!is_version(json_string_value(v), kind == STEP_AGENT)) {
		bad(b, field, json_is_string(v) ? json_string_value(v) : "?",
		    "should be a version as text, like 550.54.15");
		return;
	}
	struct step *st = add(b, kind, "%s", key);
	if (!st)
		return;
	st->source = STEP_READ_FACTS;
	st->want = json_string_value(v);
}

/* mount options joined by ',': each one word without ',' or blanks. */
static char *mount_options(struct build *b, const json_t *opts, const char *field)
{
	struct buf out;
	buf_init(&out);
	size_t i;
	json_t *o;
	if (opts && !json_is_null(opts) && !json_is_array(opts))
		bad(b, field, "?", "should be a list of mount options");
	json_array_foreach (opts, i, o) {
		const char *s = json_string_value(o);
		if (!s || !is_word(s, 63) || strchr(s, ',')) {
			bad(b, field, s ? s : "?", "a mount option is one word, like noatime");
			break;
		}
		buf_printf(&out, "%s%s", out.len ? "," : "", s);
	}
	return buf_detach(&out);
}

static void mount_step(struct build *b, const json_t *m, size_t i)
{
	char field[64];
	const char *path = str(m, "path"), *dev = str(m, "device"), *fs = str(m, "fs");
	snprintf(field, sizeof(field), "spec.mounts[%zu].path", i);
	if (!path || !is_path(path)) {
		bad(b, field, path ? path : "?", "should be an absolute path without '.' or '..'");
		return;
	}
	snprintf(field, sizeof(field), "spec.mounts[%zu].device", i);
	if (!dev || !is_word(dev, 255)) {
		bad(b, field, dev ? dev : "?", "should be one word, like /dev/md0 or UUID=...");
		return;
	}
	snprintf(field, sizeof(field), "spec.mounts[%zu].fs", i);
	if (!fs || !is_word(fs, 31) ||
	    strspn(fs, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(fs)) {
		bad(b, field, fs ? fs : "?", "should be a file system type, like xfs or ext4");
		return;
	}
	snprintf(field, sizeof(field), "spec.mounts[%zu].options", i);
	char *opts = mount_options(b, json_object_get(m, "options"), field);
	struct step *st = b->rc ? NULL : add(b, STEP_MOUNT, "mount %s", path);
	if (!st) {
		free(opts);
		return;
	}
	st->source = STEP_READ_FILE;
	st->read_path = xstrdup("/proc/self/mountinfo");
	st->target = path;
	st->device = dev;
	st->want = fs;
	st->options = opts;
	st->act = STEP_ACT_COMMAND;
	st->act_path = xstrdup(path);
}

static void mounts_steps(struct build *b, const json_t *mounts)
{
	if (!mounts || json_is_null(mounts))
		return;
	if (!json_is_array(mounts)) {
		bad(b, "spec.mounts", "?", "should be a list of mounts");
		return;
	}
	size_t i;
	json_t *m;
	json_array_foreach (mounts, i, m) {
		if (!json_is_object(m)) {
			bad(b, "spec.mounts", "?",
			    "each mount should be {path, device, fs, options}");
			return;
		}
		mount_step(b, m, i);
	}
}

static void cache_dir_step(struct build *b, const json_t *dir)
{
	if (!dir || json_is_null(dir))
		return;
	const char *path = json_string_value(dir);
	if (!path || !is_path(path) || strcmp(path, "/") == 0) {
		bad(b, "spec.cache_dir", path ? path : "?",
		    "should be an absolute path without '.' or '..'");
		return;
	}
	struct step *st = add(b, STEP_CACHE_DIR, "cache_dir %s", path);
	if (!st)
		return;
	st->source = STEP_READ_STAT;
	st->read_path = xstrdup(path);
	st->target = path;
	st->act = STEP_ACT_MKDIR;
	st->act_path = xstrdup(path);
}

/* /proc/sys/ and the key with '.' and '/' swapped, as sysctl(8) reads
 * "net.ipv4.conf.eth0/100.rp_filter"; NULL when a part would be empty, "."
 * or "..", which would leave /proc/sys. */
static char *sysctl_path(const char *key)
{
	if (!lower_digit(key[0]) || strlen(key) > 127 || !strchr(key, '.') ||
	    strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789._-/") != strlen(key))
		return NULL;
	char *p = xasprintf("/proc/sys/%s", key);
	for (char *c = p + 10; *c; c++)
		*c = *c == '.' ? '/' : *c == '/' ? '.' : *c;
	if (!is_path(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static void sysctl_steps(struct build *b, const json_t *sysctl)
{
	if (!sysctl || json_is_null(sysctl))
		return;
	if (!json_is_object(sysctl)) {
		bad(b, "spec.sysctl", "?", "should be a mapping of kernel settings");
		return;
	}
	const char *key;
	json_t *v;
	json_object_foreach ((json_t *)sysctl, key, v) {
		char field[160];
		snprintf(field, sizeof(field), "spec.sysctl.%.120s", key);
		const char *val = json_string_value(v);
		char *path = sysctl_path(key);
		if (!path) {
			bad(b, field, key, "not a kernel setting like vm.swappiness");
		} else if (!val || !*val || strlen(val) > 255 || !one_line(val)) {
			bad(b, field, val ? val : "?", "should be one line of text");
		} else {
			struct step *st = add(b, STEP_SYSCTL, "sysctl %s", key);
			if (st) {
				st->source = STEP_READ_FILE;
				st->read_path = path;
				st->target = key;
				st->want = val;
				st->act = STEP_ACT_WRITE;
				st->act_path = xstrdup(path);
				st->act_text = xasprintf("%s\n", val);
				continue;
			}
		}
		free(path);
		return;
	}
}

/* A Debian package: name[=version] (the spec's rule). */
static int is_package(const char *s)
{
	size_t n = strcspn(s, "=");
	if (n < 2 || n > 127 || !lower_digit(s[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!lower_digit(s[i]) && !strchr("+.-", s[i]))
			return 0;
	if (!s[n])
		return 1;
	const char *ver = s + n + 1;
	if (*ver < '0' || *ver > '9' || strlen(ver) > 127)
		return 0;
	for (const char *c = ver; *c; c++)
		if (!lower_digit((char)(*c | 0x20)) && !strchr(".+~:-", *c))
			return 0;
	return 1;
}

static void packages_step(struct build *b, const json_t *pkgs)
{
	if (!pkgs || json_is_null(pkgs))
		return;
	if (!json_is_array(pkgs)) {
		bad(b, "spec.packages", "?", "should be a list of Debian packages");
		return;
	}
	if (json_array_size(pkgs) == 0)
		return;
	size_t i;
	json_t *p;
	json_array_foreach (pkgs, i, p) {
		char field[48];
		snprintf(field, sizeof(field), "spec.packages[%zu]", i);
		if (!json_is_string(p) || !is_package(json_string_value(p))) {
			bad(b, field, json_is_string(p) ? json_string_value(p) : "?",
			    "not a Debian package: name or name=version");
			return;
		}
	}
	struct step *st = add(b, STEP_PACKAGES, "packages");
	if (!st)
		return;
	st->source = STEP_READ_COMMAND;
	size_t n = json_array_size(pkgs);
	st->read_argv = xcalloc(n + 5, sizeof(char *));
	const char *const head[] = {"dpkg-query", "-W", "-f", "${Package} ${Status} ${Version}\\n",
	                            NULL};
	size_t k = 0;
	for (; head[k]; k++)
		st->read_argv[k] = xstrdup(head[k]);
	json_array_foreach (pkgs, i, p) {
		const char *s = json_string_value(p);
		st->read_argv[k++] = xasprintf("%.*s", (int)strcspn(s, "="), s);
	}
	st->packages = pkgs;
	st->act = STEP_ACT_COMMAND;
	st->apt = 1;
}

static void unknown_keys(struct build *b, const json_t *spec)
{
	const char *key;
	json_t *v;
	json_object_foreach ((json_t *)spec, key, v) {
		size_t i = 0;
		while (profile_keys[i] && strcmp(profile_keys[i], key) != 0)
			i++;
		if (!profile_keys[i])
			bad(b, "spec", key, "unknown key: this agent cannot converge it");
	}
}

int steps_from_profile(const json_t *spec, struct steps **out, char *err, size_t errlen)
{
	struct steps *s = xcalloc(1, sizeof(*s));
	s->v = xcalloc(STEPS_MAX, sizeof(*s->v));
	s->spec = json_incref((json_t *)spec);
	struct build b = {.s = s, .err = err, .errlen = errlen};
	if (!json_is_object(spec)) {
		snprintf(err, errlen, "spec: should be the compiled profile, an object");
		steps_free(s);
		return ERR_INVALID;
	}
	unknown_keys(&b, spec);
	gpu_step(&b, json_object_get(spec, "gpu"));
	version_step(&b, spec, "driver", STEP_DRIVER);
	version_step(&b, spec, "cuda", STEP_CUDA);
	version_step(&b, spec, "agent", STEP_AGENT);
	mounts_steps(&b, json_object_get(spec, "mounts"));
	cache_dir_step(&b, json_object_get(spec, "cache_dir"));
	sysctl_steps(&b, json_object_get(spec, "sysctl"));
	packages_step(&b, json_object_get(spec, "packages"));
	if (b.rc) {
		steps_free(s);
		return b.rc;
	}
	*out = s;
	return 0;
}

void steps_argv_free(char **argv)
{
	for (size_t i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}

void steps_free(struct steps *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		struct step *st = &s->v[i];
		free(st->read_path);
		steps_argv_free(st->read_argv);
		free(st->options);
		free(st->act_path);
		free(st->act_text);
	}
	free(s->v);
	json_decref(s->spec);
	free(s);
}
