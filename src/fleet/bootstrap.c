/* bootstrap.c - the machines `anvil fleet bootstrap` installs, what it
 * checks of its options, and the files each machine gets (bootstrap.h);
 * bootstrap_plan.c holds the scripts and the plan. */
#include "fleet/bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "fleet/hostlist.h"
#include "fleet/spec.h"
#include "fleet/spec_int.h"

/* deploy/systemd/anvil-agent.service, built in (CMakeLists.txt). */
extern const char bootstrap_unit_text[];

#define PATH_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+-"
#define KEY_CHARS  "abcdefghijklmnopqrstuvwxyz0123456789-"

/* Keys of agent.yaml that bootstrap writes itself, and what sets each. */
static const char *const own_keys[][2] = {
        {"server", "--server or --agent-server"},
        {"join-token", "--join-token-file (the token goes to a file of its own)"},
        {"join-token-file", "--config-dir"},
        {"work-dir", "--work-dir"},
        {"address", "the machine's address"},
        {"name", "ADDR=NAME or the spec"},
        {"config", "--config-dir"},
};

/* ---- targets ---- */

static void add_target(struct bootstrap_targets *out, const char *address, const char *name)
{
	out->v = xrealloc(out->v, (out->n + 1) * sizeof(*out->v));
	out->v[out->n].address = xstrdup(address);
	out->v[out->n].name = name ? xstrdup(name) : NULL;
	out->n++;
}

int bootstrap_parse_target(const char *arg, struct bootstrap_targets *out, char *err, size_t errlen)
{
	const char *eq = strchr(arg, '=');
	size_t alen = eq ? (size_t)(eq - arg) : strlen(arg);
	char addr[256];
	if (alen == 0 || alen >= sizeof(addr)) {
		snprintf(err, errlen, "'%.64s': %s", arg,
		         alen ? "the address is longer than 253 characters"
		              : "no address before the '=' (write ADDR or ADDR=NAME)");
		return -1;
	}
	memcpy(addr, arg, alen);
	addr[alen] = '\0';
	if (!spec_is_address(addr)) {
		snprintf(err, errlen,
		         "'%.64s': '%.64s' is not an address: an IPv4 or IPv6 address or a host "
		         "name (write ADDR or ADDR=NAME)",
		         arg, addr);
		return -1;
	}
	if (eq && !spec_is_node_name(eq + 1)) {
		snprintf(err, errlen,
		         "'%.64s': '%.64s' is not a node name: 1 to 63 letters, digits, '-', '_' "
		         "or '.'",
		         arg, eq + 1);
		return -1;
	}
	add_target(out, addr, eq ? eq + 1 : NULL);
	return 0;
}

void bootstrap_targets_free(struct bootstrap_targets *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].address);
		free(t->v[i].name);
	}
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

/* Splits a comma list at commas outside brackets (gpu-[1-3,7],cpu-01) and
 * expands each part: {name: true}. NULL with why in err. */
static json_t *chosen(const char *list, const char *opt, char *err, size_t errlen)
{
	json_t *names = json_array(), *set = json_object();
	const char *p = list;
	char part[256], why[160];
	while (set) {
		size_t len = 0;
		for (int depth = 0; p[len] && (depth || p[len] != ','); len++)
			depth += p[len] == '[' ? 1 : p[len] == ']' ? -1 : 0;
		snprintf(part, sizeof(part), "%.*s", (int)len, p);
		if (len == 0 || len >= sizeof(part) ||
		    hostlist_expand(part, FLEET_MAX_NODES, names, why, sizeof(why))) {
			snprintf(err, errlen, "%s '%.64s': %s", opt, list,
			         len == 0 ? "an empty name in the list" : why);
			json_decref(set);
			set = NULL;
			break;
		}
		if (!p[len])
			break;
		p += len + 1;
	}
	size_t i;
	json_t *v;
	json_array_foreach (names, i, v)
		if (set)
			json_object_set(set, json_string_value(v), json_true());
	json_decref(names);
	return set;
}

/* The first name of want that no entry of have (an array of objects with
 * "name") holds, or NULL. */
static const char *lacking(const json_t *want, const json_t *have)
{
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)want, k, v) {
		size_t i;
		json_t *h;
		int found = 0;
		json_array_foreach (have, i, h)
			found |= strcmp(json_string_value(json_object_get(h, "name")), k) == 0;
		if (!found)
			return k;
	}
	return NULL;
}

/* Whether the pool named pool is a cloud pool in fleet. */
static int cloud_pool(const json_t *fleet, const char *pool)
{
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(fleet, "pools"), i, p)
		if (pool && strcmp(json_string_value(json_object_get(p, "name")), pool) == 0)
			return strcmp(json_string_value(json_object_get(p, "kind")), "cloud") == 0;
	return 0;
}

/* The chosen nodes of fleet into out, or -1 with why. */
static int pick(const json_t *fleet, const json_t *groups, const json_t *nodes,
                struct bootstrap_targets *out, char *err, size_t errlen)
{
	struct bootstrap_targets got = {NULL, 0};
	size_t i;
	json_t *n;
	json_array_foreach (json_object_get(fleet, "nodes"), i, n) {
		const char *name = json_string_value(json_object_get(n, "name"));
		const char *group = json_string_value(json_object_get(n, "group"));
		const char *addr = json_string_value(json_object_get(n, "address"));
		if ((groups && !json_object_get(groups, group)) ||
		    (nodes && !json_object_get(nodes, name)) ||
		    cloud_pool(fleet, json_string_value(json_object_get(n, "pool"))))
			continue;
		if (!addr) {
			snprintf(
			        err, errlen,
			        "groups.%s.addresses: the group has none, so node '%s' has no "
			        "address to bootstrap: give the group addresses (one per node), or "
			        "name the machine as ADDR=%s",
			        group, name, name);
			bootstrap_targets_free(&got);
			return -1;
		}
		add_target(&got, addr, name);
	}
	if (got.n == 0) {
		snprintf(err, errlen, "the spec has no on-premises node%s to bootstrap",
		         groups || nodes ? " that --group and --node choose" : "");
		return -1;
	}
	out->v = xrealloc(out->v, (out->n + got.n) * sizeof(*out->v));
	memcpy(out->v + out->n, got.v, got.n * sizeof(*got.v));
	out->n += got.n;
	free(got.v);
	return 0;
}

int bootstrap_from_spec(const json_t *fleet, const char *groups, const char *nodes,
                        struct bootstrap_targets *out, char *err, size_t errlen)
{
	json_t *g = groups ? chosen(groups, "--group", err, errlen) : NULL;
	json_t *n = nodes && (g || !groups) ? chosen(nodes, "--node", err, errlen) : NULL;
	int rc = -1;
	const char *missing;
	if ((groups && !g) || (nodes && !n))
		goto out;
	if (g && (missing = lacking(g, json_object_get(fleet, "groups")))) {
		snprintf(err, errlen, "--group '%.64s': the spec has no group '%.64s'", groups,
		         missing);
		goto out;
	}
	if (n && (missing = lacking(n, json_object_get(fleet, "nodes")))) {
		snprintf(err, errlen, "--node '%.64s': the spec has no node '%.64s'", nodes,
		         missing);
		goto out;
	}
	rc = pick(fleet, g, n, out, err, errlen);
out:
	json_decref(g);
	json_decref(n);
	return rc;
}

/* ---- options ---- */

static int path_ok(const char *opt, const char *p, char *err, size_t errlen)
{
	const char *why = NULL;
	if (!p || p[0] != '/')
		why = "not an absolute path";
	else if (strlen(p) > BOOTSTRAP_PATH_MAX)
		why = "longer than 200 characters";
	else if (strspn(p, PATH_CHARS) != strlen(p))
		why = "a path here holds letters, digits and / . _ + - only";
	else if (strstr(p, "/../") || strstr(p, "/./") ||
	         (strlen(p) >= 3 && strcmp(p + strlen(p) - 3, "/..") == 0))
		why = "'.' and '..' parts are not taken";
	if (why)
		snprintf(err, errlen, "%s '%.64s': %s", opt, p ? p : "", why);
	return why ? -1 : 0;
}

static int option_ok(const char *o, char *err, size_t errlen)
{
	const char *eq = strchr(o, '=');
	size_t klen = eq ? (size_t)(eq - o) : 0;
	const char *why = NULL;
	if (!eq || klen == 0 || strspn(o, KEY_CHARS) != klen)
		why = "not KEY=VALUE with a key of lower-case letters, digits and '-' (as anvil "
		      "agent --help names them, without the dashes)";
	for (size_t i = 0; !why && i < sizeof(own_keys) / sizeof(own_keys[0]); i++)
		if (strlen(own_keys[i][0]) == klen && strncmp(o, own_keys[i][0], klen) == 0) {
			snprintf(err, errlen,
			         "--agent-option '%.64s': bootstrap sets %s itself: use %s", o,
			         own_keys[i][0], own_keys[i][1]);
			return -1;
		}
	for (const char *p = eq ? eq + 1 : ""; !why && *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			why = "the value holds a control character (one line, no tabs)";
	if (why)
		snprintf(err, errlen, "--agent-option '%.64s': %s", o, why);
	return why ? -1 : 0;
}

int bootstrap_config_check(const struct bootstrap_config *c, char *err, size_t errlen)
{
	const char *s = c->server;
	if (!s || (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0) ||
	    strlen(s) > 400 || strpbrk(s, " \t\r\n'\"\\")) {
		snprintf(err, errlen, "the agents' server '%.64s': not an http:// or https:// URL",
		         s ? s : "");
		return -1;
	}
	if (path_ok("--prefix", c->prefix, err, errlen) ||
	    path_ok("--config-dir", c->config_dir, err, errlen) ||
	    path_ok("--unit-dir", c->unit_dir, err, errlen) ||
	    path_ok("--work-dir", c->work_dir, err, errlen))
		return -1;
	if (c->noptions > BOOTSTRAP_OPTIONS_MAX) {
		snprintf(err, errlen, "--agent-option: %zu given; at most %d", c->noptions,
		         BOOTSTRAP_OPTIONS_MAX);
		return -1;
	}
	for (size_t i = 0; i < c->noptions; i++)
		if (option_ok(c->options[i], err, errlen))
			return -1;
	return 0;
}

/* The host of an http(s) URL, into host. */
static void url_host(const char *url, char *host, size_t len)
{
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	size_t n = *p == '[' ? strcspn(p + 1, "]") : strcspn(p, ":/");
	snprintf(host, len, "%.*s", (int)n, *p == '[' ? p + 1 : p);
}

static int loopback(const char *host)
{
	return strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 ||
	       strcmp(host, "::1") == 0;
}

int bootstrap_server_reachable(const char *url, const char *address)
{
	char host[256];
	url_host(url, host, sizeof(host));
	return !loopback(host) || loopback(address);
}

/* ---- files ---- */

const char *bootstrap_file_name(enum bootstrap_file f)
{
	static const char *const names[] = {"binary", "config", "token", "unit"};
	return (unsigned)f < BOOTSTRAP_NFILES ? names[f] : "?";
}

char *bootstrap_file_path(const struct bootstrap_config *c, enum bootstrap_file f)
{
	switch (f) {
	case BOOTSTRAP_BINARY: return xasprintf("%s/anvil", c->prefix);
	case BOOTSTRAP_CONFIG: return xasprintf("%s/agent.yaml", c->config_dir);
	case BOOTSTRAP_TOKEN: return xasprintf("%s/join.token", c->config_dir);
	case BOOTSTRAP_UNIT:
	case BOOTSTRAP_NFILES: break;
	}
	return xasprintf("%s/%s.service", c->unit_dir, BOOTSTRAP_UNIT_NAME);
}

/* Appends "key: 'value'" (YAML single quotes: ' doubled). */
static void yaml_line(struct buf *b, const char *key, size_t klen, const char *value)
{
	buf_printf(b, "%.*s: '", (int)klen, key);
	for (const char *p = value; *p; p++)
		buf_add(b, *p == '\'' ? "''" : p, *p == '\'' ? 2 : 1);
	buf_adds(b, "'\n");
}

/* Whether option i's key is given again by a later option (the last wins). */
static int overridden(const struct bootstrap_config *c, size_t i, const char *key, size_t klen)
{
	for (size_t j = i + 1; j < c->noptions; j++)
		if (strncmp(c->options[j], key, klen) == 0 && c->options[j][klen] == '=')
			return 1;
	return 0;
}

char *bootstrap_agent_config(const struct bootstrap_config *c, const struct bootstrap_target *t)
{
	struct buf b;
	buf_init(&b);
	char *token = bootstrap_file_path(c, BOOTSTRAP_TOKEN);
	buf_printf(
	        &b,
	        "# %s/agent.yaml, written by `anvil fleet bootstrap` (a rerun replaces it):\n"
	        "# the options of `anvil agent`, one per line (anvil agent --help lists them).\n",
	        c->config_dir);
	yaml_line(&b, "server", 6, c->server);
	yaml_line(&b, "join-token-file", 15, token);
	yaml_line(&b, "work-dir", 8, c->work_dir);
	yaml_line(&b, "address", 7, t->address);
	if (t->name)
		yaml_line(&b, "name", 4, t->name);
	int listen = 0;
	for (size_t i = 0; i < c->noptions; i++)
		listen |= strncmp(c->options[i], "listen=", 7) == 0;
	if (!listen)
		yaml_line(&b, "listen", 6, "0.0.0.0:7071");
	for (size_t i = 0; i < c->noptions; i++) {
		const char *o = c->options[i], *eq = strchr(o, '=');
		if (!overridden(c, i, o, (size_t)(eq - o)))
			yaml_line(&b, o, (size_t)(eq - o), eq + 1);
	}
	free(token);
	return buf_detach(&b);
}

/* text with every from replaced by to. */
static char *replace(const char *text, const char *from, const char *to)
{
	struct buf b;
	buf_init(&b);
	size_t n = strlen(from);
	for (const char *p = text, *q; *p; p = q + n) {
		q = strstr(p, from);
		if (!q) {
			buf_adds(&b, p);
			break;
		}
		buf_add(&b, p, (size_t)(q - p));
		buf_adds(&b, to);
	}
	return b.data ? buf_detach(&b) : xstrdup("");
}

char *bootstrap_unit(const struct bootstrap_config *c)
{
	char *paths[] = {bootstrap_file_path(c, BOOTSTRAP_BINARY),
	                 bootstrap_file_path(c, BOOTSTRAP_CONFIG),
	                 bootstrap_file_path(c, BOOTSTRAP_TOKEN)};
	static const char *const dflt[] = {BOOTSTRAP_PREFIX "/anvil",
	                                   BOOTSTRAP_CONFIG_DIR "/agent.yaml",
	                                   BOOTSTRAP_CONFIG_DIR "/join.token"};
	char *text = xstrdup(bootstrap_unit_text);
	for (size_t i = 0; i < 3; i++) {
		char *next = replace(text, dflt[i], paths[i]);
		free(text);
		free(paths[i]);
		text = next;
	}
	char *out = xasprintf("# written by `anvil fleet bootstrap` from the repository's "
	                      "deploy/systemd/%s.service\n%s",
	                      BOOTSTRAP_UNIT_NAME, text);
	free(text);
	return out;
}
