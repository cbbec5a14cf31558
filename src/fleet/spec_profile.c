/* spec_profile.c - a node profile: what every node of a group must show
 * (its GPUs) and what converging it sets up (driver, CUDA, agent, mounts,
 * the NVMe cache directory, sysctl settings, packages). */
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "fleet/spec_int.h"

static const struct schema_field profile_fields[] = {
        {"gpu", SCHEMA_OBJ, 0, 0, 0},
        {"driver", SCHEMA_ANY, 0, 0, 0},
        {"cuda", SCHEMA_ANY, 0, 0, 0},
        {"agent", SCHEMA_ANY, 0, 0, 0},
        {"mounts", SCHEMA_ARR, 0, 0, 0},
        {"cache_dir", SCHEMA_STR, 0, 1, 255},
        {"sysctl", SCHEMA_OBJ, 0, 0, 0},
        {"packages", SCHEMA_ARR, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field gpu_fields[] = {
        {"model", SCHEMA_STR, 0, 1, 95},
        {"count", SCHEMA_INT, 1, 0, 64},
        {NULL, 0, 0, 0, 0},
};

static const struct schema_field mount_fields[] = {
        {"path", SCHEMA_STR, 1, 1, 255},
        {"device", SCHEMA_STR, 1, 1, 255},
        {"fs", SCHEMA_STR, 1, 1, 31},
        {"options", SCHEMA_ARR, 0, 0, 0},
        {NULL, 0, 0, 0, 0},
};

static int all_of(const char *s, const char *set)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr(set, *s)))
			return 0;
	return 1;
}

/* A version as text, or null when not given. Driver and CUDA versions are
 * numbers and dots ("550.54.15", "12.4"); loose (the agent's) may also
 * hold letters, '+', '~' and '-' after its first digit ("0.2.0-rc1"). */
static json_t *version(const json_t *v, int loose, const char *path, struct schema_errors *e)
{
	char text[64];
	if (!v || json_is_null(v))
		return json_null();
	if (json_is_integer(v)) {
		snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
		return json_string(text);
	}
	if (json_is_real(v)) {
		schema_add(
		        e, path,
		        "was read as the number %g: write a version in quotes ('12.10'), or 12.10 "
		        "becomes 12.1",
		        json_real_value(v));
		return json_null();
	}
	const char *s = json_string_value(v);
	int ok = s && *s >= '0' && *s <= '9' && strlen(s) <= 63;
	if (ok && loose) {
		for (const char *c = s; *c && ok; c++)
			ok = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
			     (*c >= '0' && *c <= '9') || strchr(".+~-", *c);
	} else if (ok) {
		ok = strspn(s, "0123456789.") == strlen(s) && !strstr(s, "..") &&
		     s[strlen(s) - 1] != '.';
	}
	if (!s)
		schema_add(e, path, "should be a version as text, not %s", schema_type_name(v));
	else if (!ok)
		schema_add(e, path, "'%.64s' is not a version: %s", s,
		           loose ? "a number first, then letters, digits, '.', '+', '~' or '-'"
		                 : "numbers and dots, like 550.54.15 or 12.4");
	return ok ? json_string(s) : json_null();
}

/* An absolute path without "//", "." or ".." parts or a trailing '/'. */
static int is_path(const char *s)
{
	size_t n = strlen(s);
	if (s[0] != '/' || n > 255 || (n > 1 && s[n - 1] == '/') || strstr(s, "//") ||
	    strstr(s, "/./") || strstr(s, "/../"))
		return 0;
	if ((n >= 2 && strcmp(s + n - 2, "/.") == 0) || (n >= 3 && strcmp(s + n - 3, "/..") == 0))
		return 0;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

static int check_path(const json_t *v, const char *path, struct schema_errors *e)
{
	const char *s = json_string_value(v);
	if (s && !is_path(s))
		schema_add(e, path,
		           "'%.64s' is not an absolute path (it starts with '/', has no '.', '..' "
		           "or empty parts and no '/' at the end)",
		           s);
	return s && is_path(s);
}

static json_t *mount_options(const json_t *opts, const char *path, struct schema_errors *e)
{
	json_t *out = json_array();
	char sub[256];
	size_t i;
	json_t *o;
	json_array_foreach (opts, i, o) {
		schema_joini(sub, sizeof(sub), path, i);
		const char *s = json_string_value(o);
		if (!s)
			schema_add(e, sub, "a mount option should be text, not %s",
			           schema_type_name(o));
		else if (!*s || strlen(s) > 63 || strpbrk(s, ", \t\n"))
			schema_add(e, sub,
			           "'%.64s' is not one mount option: list each alone, like "
			           "[noatime, nodiscard]",
			           s);
		else
			json_array_append(out, o);
	}
	return out;
}

static json_t *mount(const json_t *m, const json_t *seen, const char *path, struct schema_errors *e)
{
	char sub[256];
	if (!schema_fields(m, mount_fields, path, e))
		return NULL;
	const json_t *p = json_object_get(m, "path");
	schema_join(sub, sizeof(sub), path, "path");
	if (json_is_string(p) && check_path(p, sub, e) &&
	    json_object_get(seen, json_string_value(p)))
		schema_add(e, sub, "'%.64s' is mounted twice in this profile",
		           json_string_value(p));
	const char *fs = json_string_value(json_object_get(m, "fs"));
	schema_join(sub, sizeof(sub), path, "fs");
	if (fs && !all_of(fs, "._-"))
		schema_add(e, sub, "'%.32s' is not a file system type like xfs or ext4", fs);
	const char *dev = json_string_value(json_object_get(m, "device"));
	schema_join(sub, sizeof(sub), path, "device");
	if (dev && strpbrk(dev, " \t\n"))
		schema_add(e, sub,
		           "'%.64s' holds white space: a device is one word, like "
		           "/dev/nvme0n1 or UUID=...",
		           dev);
	schema_join(sub, sizeof(sub), path, "options");
	json_t *opts = json_is_array(json_object_get(m, "options"))
	                       ? mount_options(json_object_get(m, "options"), sub, e)
	                       : json_array();
	json_t *out = json_pack("{s:o}", "options", opts);
	static const char *const keys[] = {"path", "device", "fs"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const json_t *v = json_object_get(m, keys[i]);
		json_object_set_new(out, keys[i],
		                    json_is_string(v) ? json_incref((json_t *)v) : json_null());
	}
	return out;
}

static json_t *mounts(const json_t *list, const char *path, struct schema_errors *e)
{
	json_t *out = json_array(), *seen = json_object();
	char sub[256];
	size_t i;
	json_t *m;
	json_array_foreach (list, i, m) {
		schema_joini(sub, sizeof(sub), path, i);
		json_t *c = mount(m, seen, sub, e);
		if (!c)
			continue;
		if (json_is_string(json_object_get(c, "path")))
			json_object_set(seen, json_string_value(json_object_get(c, "path")),
			                json_true());
		json_array_append_new(out, c);
	}
	json_decref(seen);
	return out;
}

/* The cache directory: on one of the profile's mounts when it lists any,
 * so that a typo (/mnt/nvme for /mnt/nvme0) does not fill the root disk. */
static void cache_dir(const json_t *dir, const json_t *mounted, const char *path,
                      struct schema_errors *e)
{
	if (!check_path(dir, path, e) || json_array_size(mounted) == 0)
		return;
	size_t i;
	json_t *m;
	json_array_foreach (mounted, i, m) {
		const char *mp = json_string_value(json_object_get(m, "path"));
		if (mp && path_within(json_string_value(dir), mp))
			return;
	}
	schema_add(e, path, "'%.64s' is on none of this profile's mounts (the first is %.64s)",
	           json_string_value(dir),
	           json_string_value(json_object_get(json_array_get(mounted, 0), "path")));
}

/* vm.swappiness, net.ipv4.tcp_rmem: letters, digits, '_', '-', '/', with a dot. */
static int is_sysctl_key(const char *k)
{
	return *k >= 'a' && *k <= 'z' && strlen(k) <= 127 && strchr(k, '.') && all_of(k, "._-/") &&
	       k[strlen(k) - 1] != '.';
}

static json_t *sysctl(const json_t *o, const char *path, struct schema_errors *e)
{
	json_t *out = json_object();
	char sub[256], text[32];
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)o, k, v) {
		schema_join(sub, sizeof(sub), path, k);
		if (!is_sysctl_key(k)) {
			schema_add(e, sub, "'%.64s' is not a sysctl name like vm.swappiness", k);
			continue;
		}
		const char *s = json_string_value(v);
		if (json_is_integer(v)) {
			snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
			json_object_set_new(out, k, json_string(text));
		} else if (s && *s && strlen(s) <= 255 && !strchr(s, '\n')) {
			json_object_set(out, k, v);
		} else {
			schema_add(e, sub, "%s should be an integer or one line of text, not %s", k,
			           s ? "empty or long text" : schema_type_name(v));
		}
	}
	return out;
}

/* A Debian package: name[=version]. */
static int is_package(const char *s, size_t *name_len)
{
	*name_len = strcspn(s, "=");
	char name[128];
	if (*name_len < 2 || *name_len >= sizeof(name) ||
	    !((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
		return 0;
	snprintf(name, sizeof(name), "%.*s", (int)*name_len, s);
	if (!all_of(name, "+.-"))
		return 0;
	const char *ver = s + *name_len;
	if (!*ver)
		return 1;
	ver++;
	for (const char *c = ver; *c; c++)
		if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
		      (*c >= '0' && *c <= '9') || strchr(".+~:-", *c)))
			return 0;
	return *ver >= '0' && *ver <= '9' && strlen(ver) <= 127;
}

static json_t *packages(const json_t *list, const char *path, struct schema_errors *e)
{
	json_t *out = json_array(), *seen = json_object();
	char sub[256], name[128];
	size_t i, n;
	json_t *p;
	json_array_foreach (list, i, p) {
		schema_joini(sub, sizeof(sub), path, i);
		const char *s = json_string_value(p);
		if (!s || !is_package(s, &n)) {
			schema_add(e, sub,
			           "%s%.64s%s is not a Debian package: name or name=version, like "
			           "rdma-core or nvidia-fabricmanager-550=550.54.15-1",
			           s ? "'" : "", s ? s : schema_type_name(p), s ? "'" : "");
			continue;
		}
		snprintf(name, sizeof(name), "%.*s", (int)n, s);
		if (json_object_get(seen, name))
			schema_add(e, sub, "package '%s' is listed twice", name);
		json_object_set_new(seen, name, json_true());
		json_array_append(out, p);
	}
	json_decref(seen);
	return out;
}

static json_t *gpu(const json_t *g, const char *path, struct schema_errors *e)
{
	if (!g)
		return json_pack("{s:n,s:i}", "model", "count", 0);
	if (!schema_fields(g, gpu_fields, path, e))
		return json_pack("{s:n,s:i}", "model", "count", 0);
	const json_t *model = json_object_get(g, "model"), *count = json_object_get(g, "count");
	if (json_integer_value(count) > 0 && !model)
		schema_add(e, path,
		           "'model' is missing: the GPU model every node must show, as "
		           "nvidia-smi names it");
	return json_pack("{s:O,s:I}", "model", model ? model : json_null(), "count",
	                 json_integer_value(count));
}

/* The part at key of src, checked by fn when it is there with the right
 * type (schema_fields has said what is wrong otherwise). */
#define PART(key, is_type, call)                                                                   \
	do {                                                                                       \
		const json_t *v = json_object_get(src, key);                                       \
		schema_join(sub, sizeof(sub), path, key);                                          \
		if (v && is_type(v))                                                               \
			json_object_set_new(out, key, call);                                       \
	} while (0)

json_t *spec_profile(const char *name, const json_t *src, const char *path, struct schema_errors *e)
{
	char sub[256];
	json_t *out = json_pack("{s:s,s:n,s:n,s:n,s:[],s:n,s:{},s:[]}", "name", name, "driver",
	                        "cuda", "agent", "mounts", "cache_dir", "sysctl", "packages");
	if (!schema_fields(src, profile_fields, path, e)) {
		json_object_set_new(out, "gpu", gpu(NULL, path, e));
		return out;
	}
	schema_join(sub, sizeof(sub), path, "gpu");
	const json_t *g = json_object_get(src, "gpu");
	json_object_set_new(out, "gpu", gpu(json_is_object(g) ? g : NULL, sub, e));
	PART("driver", !json_is_null, version(v, 0, sub, e));
	PART("cuda", !json_is_null, version(v, 0, sub, e));
	PART("agent", !json_is_null, version(v, 1, sub, e));
	PART("mounts", json_is_array, mounts(v, sub, e));
	PART("sysctl", json_is_object, sysctl(v, sub, e));
	PART("packages", json_is_array, packages(v, sub, e));
	const json_t *dir = json_object_get(src, "cache_dir");
	schema_join(sub, sizeof(sub), path, "cache_dir");
	if (json_is_string(dir)) {
		cache_dir(dir, json_object_get(out, "mounts"), sub, e);
		json_object_set(out, "cache_dir", (json_t *)dir);
	}
	return out;
}
