/* bootstrap_plan.c - the scripts `anvil fleet bootstrap` runs on a machine
 * over SSH, what inspect saw, the steps that follow from it, ssh's argv and
 * a step's outcome (bootstrap.h). Every script ends by printing its
 * outcome as its last line: "ok DETAIL" or "changed DETAIL". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "fleet/bootstrap.h"

#define FAIL_LINES 6 /* of a failed step's stderr, in its detail */

/* Appends s quoted for sh: '...' with each ' as '\''. */
static void sh_quote(struct buf *b, const char *s)
{
	buf_adds(b, "'");
	for (; *s; s++)
		buf_add(b, *s == '\'' ? "'\\''" : s, *s == '\'' ? 4 : 1);
	buf_adds(b, "'");
}

/* A path of c quoted for sh. */
static void sh_path(struct buf *b, const struct bootstrap_config *c, enum bootstrap_file f)
{
	char *p = bootstrap_file_path(c, f);
	sh_quote(b, p);
	free(p);
}

static void sh_dirs(struct buf *b, const struct bootstrap_config *c)
{
	const char *dirs[] = {c->prefix, c->config_dir, c->unit_dir, c->work_dir};
	for (size_t i = 0; i < 4; i++) {
		buf_adds(b, " ");
		sh_quote(b, dirs[i]);
	}
}

/* "WORK_DIR/NAME" quoted. */
static void sh_work(struct buf *b, const struct bootstrap_config *c, const char *name)
{
	char *p = xasprintf("%s/%s", c->work_dir, name);
	sh_quote(b, p);
	free(p);
}

/* Defines alive PID: the process is there and not a zombie (an agent
 * that ended stays one until its parent, maybe an init that does not
 * reap, waits for it). */
#define SH_ALIVE                                                                                   \
	"alive() { kill -0 \"$1\" 2>/dev/null && "                                                 \
	"[ \"$(cut -d' ' -f3 /proc/\"$1\"/stat 2>/dev/null)\" != Z ]; }\n"

/* ---- inspect ---- */

char *bootstrap_inspect_script(const struct bootstrap_config *c)
{
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "set -e\n"
	             "command -v sha256sum >/dev/null 2>&1 || { echo 'sha256sum (coreutils) is "
	             "not installed here' >&2; exit 1; }\n"
	             "echo \"uid $(id -u)\"\n"
	             "if [ -d /run/systemd/system ]; then echo 'systemd 1'; else echo 'systemd "
	             "0'; fi\n"
	             "for d in");
	sh_dirs(&b, c);
	buf_adds(
	        &b,
	        "; do [ -d \"$d\" ] || echo 'missing'; done\n"
	        "h() { if [ -f \"$2\" ]; then echo \"file $1 $(sha256sum < \"$2\" | cut -c1-64)\"; "
	        "else echo \"file $1 -\"; fi; }\n");
	for (int f = 0; f < BOOTSTRAP_NFILES; f++) {
		buf_printf(&b, "h %s ", bootstrap_file_name(f));
		sh_path(&b, c, f);
		buf_adds(&b, "\n");
	}
	buf_adds(&b, "if getent passwd " BOOTSTRAP_RANK_USER " >/dev/null 2>&1; then echo "
	             "'account 1'; else echo 'account 0'; fi\n");
	buf_adds(&b, "if [ -d /run/systemd/system ]; then\n"
	             "  systemctl is-active --quiet " BOOTSTRAP_UNIT_NAME
	             " && echo 'running 1' || echo 'running 0'\n"
	             "  systemctl is-enabled --quiet " BOOTSTRAP_UNIT_NAME
	             " 2>/dev/null && echo 'enabled 1' || echo 'enabled 0'\n"
	             "else\n" SH_ALIVE "  p=$(cat ");
	sh_work(&b, c, "agent.pid");
	buf_adds(&b, " 2>/dev/null || true)\n"
	             "  if [ -n \"$p\" ] && alive \"$p\" && grep -qa anvil /proc/\"$p\"/cmdline; "
	             "then echo 'running 1'; else echo 'running 0'; fi\n"
	             "  echo 'enabled 0'\n"
	             "fi\n"
	             "echo 'ok inspected'\n");
	return buf_detach(&b);
}

/* One "KEY VALUE" line of inspect's output into s; -1 when it is none. */
static int seen_line(const char *line, size_t len, struct bootstrap_seen *s)
{
	char key[16], a[64], h[80];
	char text[256];
	if (len >= sizeof(text))
		return -1;
	memcpy(text, line, len);
	text[len] = '\0';
	int n = sscanf(text, "%15s %63s %79s", key, a, h);
	if (n == 1 && strcmp(key, "missing") == 0)
		return s->missing++, 0;
	if (n == 2 && strcmp(key, "uid") == 0)
		return s->uid = strtol(a, NULL, 10), 0;
	int one = n == 2 && strcmp(a, "1") == 0;
	if (n == 2 && strcmp(key, "systemd") == 0)
		return s->systemd = one, 0;
	if (n == 2 && strcmp(key, "running") == 0)
		return s->running = one, 0;
	if (n == 2 && strcmp(key, "enabled") == 0)
		return s->enabled = one, 0;
	if (n == 2 && strcmp(key, "account") == 0)
		return s->account = one, 0;
	if (n == 2 && strcmp(key, "ok") == 0)
		return 0;
	for (int f = 0; n >= 2 && strcmp(key, "file") == 0 && f < BOOTSTRAP_NFILES; f++)
		if (strcmp(a, bootstrap_file_name(f)) == 0) {
			/* "-" (no file) or not a hash (unreadable): differs, so installed again */
			if (n == 3 && hash_hex_ok(h))
				memcpy(s->hash[f], h, HASH_HEX_LEN + 1);
			else
				s->hash[f][0] = '\0';
			return 0;
		}
	return -1;
}

int bootstrap_parse_seen(const char *out, struct bootstrap_seen *s, char *err, size_t errlen)
{
	struct bootstrap_seen got;
	memset(&got, 0, sizeof(got));
	got.uid = -1;
	for (const char *p = out; *p;) {
		size_t len = strcspn(p, "\n");
		if (len && seen_line(p, len, &got)) {
			snprintf(err, errlen, "inspect printed '%.*s', which it does not print",
			         (int)(len > 80 ? 80 : len), p);
			return -1;
		}
		p += len + (p[len] == '\n');
	}
	if (got.uid < 0) {
		snprintf(err, errlen, "inspect printed no uid: is the remote shell sh-compatible?");
		return -1;
	}
	*s = got;
	return 0;
}

/* ---- the steps ---- */

static struct bootstrap_step *add_step(struct bootstrap_plan *p, const char *name, int file)
{
	p->v = xrealloc(p->v, (p->n + 1) * sizeof(*p->v));
	struct bootstrap_step *s = &p->v[p->n++];
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->file = file;
	return s;
}

static void dirs_step(const struct bootstrap_config *c, const struct bootstrap_seen *seen,
                      struct bootstrap_plan *p)
{
	struct bootstrap_step *s = add_step(p, "dirs", -1);
	if (!seen->missing) {
		s->detail = xstrdup("all there");
		return;
	}
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "set -e\nmade=''\nfor d in");
	sh_dirs(&b, c);
	buf_adds(&b, "; do if [ ! -d \"$d\" ]; then mkdir -p \"$d\"; made=\"$made $d\"; fi; done\n"
	             "if [ -n \"$made\" ]; then echo \"changed made$made\"; else echo 'ok all "
	             "there'; fi\n");
	s->script = buf_detach(&b);
	s->detail = xasprintf("%d to make", seen->missing);
}

/* The account ranks run as (agent/fence.h), as scripts/deps.sh makes it. */
static void account_step(const struct bootstrap_seen *seen, struct bootstrap_plan *p)
{
	struct bootstrap_step *s = add_step(p, "account", -1);
	if (seen->account) {
		s->detail = xstrdup(BOOTSTRAP_RANK_USER " exists");
		return;
	}
	s->script = xstrdup("set -e\n"
	                    "useradd --system --user-group --no-create-home --shell "
	                    "\"$(command -v nologin || echo /bin/false)\" " BOOTSTRAP_RANK_USER "\n"
	                    "echo 'changed made the account " BOOTSTRAP_RANK_USER "'\n");
	s->detail = xstrdup(BOOTSTRAP_RANK_USER " to make");
}

/* The script that installs file f: its content arrives on stdin. */
static char *install_script(const struct bootstrap_config *c, enum bootstrap_file f,
                            const struct bootstrap_want *w)
{
	static const char *const modes[] = {"0755", "0644", "0600", "0644"};
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "set -e\nf=");
	sh_path(&b, c, f);
	buf_printf(&b,
	           "\nt=\"$f.anvil-new.$$\"\ntrap 'rm -f \"$t\"' EXIT\numask 077\ncat > \"$t\"\n"
	           "if [ \"$(sha256sum < \"$t\" | cut -c1-64)\" != '%s' ]; then\n"
	           "  echo \"$f: what arrived ($(wc -c < \"$t\") bytes) is not the whole file "
	           "(%lld bytes): the connection was cut?\" >&2; exit 1\nfi\n"
	           "chmod %s \"$t\"\nmv -f \"$t\" \"$f\"\necho \"changed $f (%lld bytes)\"\n",
	           w->hash[f], (long long)w->size[f], modes[f], (long long)w->size[f]);
	return buf_detach(&b);
}

static void file_step(const struct bootstrap_config *c, const struct bootstrap_seen *seen,
                      const struct bootstrap_want *w, enum bootstrap_file f,
                      struct bootstrap_plan *p)
{
	struct bootstrap_step *s = add_step(p, bootstrap_file_name(f), -1);
	char *path = bootstrap_file_path(c, f);
	if (strcmp(seen->hash[f], w->hash[f]) == 0) {
		s->detail = xasprintf("%s unchanged", path);
	} else {
		s->script = install_script(c, f, w);
		s->file = (int)f;
		s->detail = xasprintf("%s %s (%lld bytes)", path,
		                      *seen->hash[f] ? "differs" : "is new", (long long)w->size[f]);
	}
	free(path);
}

static void check_step(const struct bootstrap_config *c, struct bootstrap_plan *p)
{
	struct bootstrap_step *s = add_step(p, "check-config", -1);
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "set -e\nout=$(");
	sh_path(&b, c, BOOTSTRAP_BINARY);
	buf_adds(&b, " agent --config ");
	sh_path(&b, c, BOOTSTRAP_CONFIG);
	buf_adds(&b, " --check-config)\necho \"ok $out\"\n");
	s->script = buf_detach(&b);
	s->detail = xstrdup("anvil agent --check-config");
}

/* systemd: reload when the unit changed, enable, then start or restart. */
static char *systemd_script(int reload, int enable, const char *verb)
{
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "set -e\n");
	if (reload)
		buf_adds(&b, "systemctl daemon-reload\n");
	if (enable)
		buf_adds(&b, "systemctl enable --quiet " BOOTSTRAP_UNIT_NAME "\n");
	if (verb)
		buf_printf(&b,
		           "systemctl %s " BOOTSTRAP_UNIT_NAME "\nsleep 1\n"
		           "if ! systemctl is-active --quiet " BOOTSTRAP_UNIT_NAME "; then\n"
		           "  echo 'the agent did not stay up; its journal:' >&2\n"
		           "  journalctl -u " BOOTSTRAP_UNIT_NAME " -n 20 --no-pager >&2 || true\n"
		           "  exit 1\nfi\n",
		           verb);
	buf_printf(&b, "echo 'changed %s%s%s by systemd (unit " BOOTSTRAP_UNIT_NAME ")'\n",
	           enable ? "enabled" : "", enable && verb ? ", " : "",
	           verb ? (strcmp(verb, "start") == 0 ? "started" : "restarted") : "");
	return buf_detach(&b);
}

/* No systemd: the agent detached, stopped first when it runs. */
static char *detached_script(const struct bootstrap_config *c, int restart)
{
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "set -e\ncd /\n" SH_ALIVE "pf=");
	sh_work(&b, c, "agent.pid");
	buf_adds(&b, "\nlog=");
	sh_work(&b, c, "agent.log");
	buf_adds(&b, "\n");
	if (restart)
		buf_adds(&b, "p=$(cat \"$pf\" 2>/dev/null || true)\n"
		             "if [ -n \"$p\" ] && alive \"$p\"; then\n"
		             "  kill -TERM \"$p\"; i=0\n"
		             "  while alive \"$p\"; do i=$((i+1)); if [ $i -gt 300 ]; then\n"
		             "    echo \"the running agent (pid $p) did not stop within 30s of "
		             "SIGTERM\" >&2; exit 1; fi; sleep 0.1; done\nfi\n");
	buf_adds(&b, "setsid nohup ");
	sh_path(&b, c, BOOTSTRAP_BINARY);
	buf_adds(&b, " agent --config ");
	sh_path(&b, c, BOOTSTRAP_CONFIG);
	buf_printf(&b,
	           " >> \"$log\" 2>&1 < /dev/null &\np=$!\necho \"$p\" > \"$pf\"\nsleep 1\n"
	           "if ! alive \"$p\"; then\n"
	           "  echo \"the agent exited at once; the end of $log:\" >&2\n"
	           "  tail -n 20 \"$log\" >&2; exit 1\nfi\n"
	           "echo \"changed %s without systemd (no /run/systemd/system): pid $p, output in "
	           "$log\"\n",
	           restart ? "restarted" : "started");
	return buf_detach(&b);
}

static void start_step(const struct bootstrap_config *c, const struct bootstrap_seen *seen,
                       int changed, int unit_changed, struct bootstrap_plan *p)
{
	struct bootstrap_step *s = add_step(p, "start", -1);
	int restart = seen->running && changed;
	const char *verb = !seen->running ? "start" : restart ? "restart" : NULL;
	if (seen->systemd && (verb || !seen->enabled)) {
		s->script = systemd_script(unit_changed, !seen->enabled || unit_changed, verb);
		s->detail = xasprintf("systemd: %s%s%s", verb ? verb : "",
		                      verb && !seen->enabled ? ", " : "",
		                      !seen->enabled ? "enable" : "");
	} else if (!seen->systemd && verb) {
		s->script = detached_script(c, restart);
		s->detail = xasprintf("no systemd: %s the agent detached", verb);
	} else {
		s->detail = xstrdup(seen->systemd ? "running (systemd)" : "running (no systemd)");
	}
}

void bootstrap_plan(const struct bootstrap_config *c, const struct bootstrap_seen *seen,
                    const struct bootstrap_want *want, struct bootstrap_plan *out)
{
	struct bootstrap_plan p = {NULL, 0};
	dirs_step(c, seen, &p);
	int changed = 0;
	for (int f = 0; f < BOOTSTRAP_NFILES; f++) {
		file_step(c, seen, want, f, &p);
		changed |= p.v[p.n - 1].script != NULL;
	}
	account_step(seen, &p);
	check_step(c, &p);
	start_step(c, seen, changed,
	           strcmp(seen->hash[BOOTSTRAP_UNIT], want->hash[BOOTSTRAP_UNIT]) != 0, &p);
	*out = p;
}

void bootstrap_plan_free(struct bootstrap_plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->v[i].script);
		free(p->v[i].detail);
	}
	free(p->v);
	p->v = NULL;
	p->n = 0;
}

/* ---- running a step ---- */

char *bootstrap_remote_command(const struct bootstrap_config *c, const char *script)
{
	struct buf b;
	buf_init(&b);
	buf_adds(&b, c->sudo ? "sudo -n sh -c " : "sh -c ");
	sh_quote(&b, script);
	return buf_detach(&b);
}

static void push(char ***argv, size_t *n, const char *s)
{
	*argv = xrealloc(*argv, (*n + 2) * sizeof(**argv));
	(*argv)[(*n)++] = xstrdup(s);
	(*argv)[*n] = NULL;
}

char **bootstrap_ssh_argv(const struct bootstrap_ssh *s, const char *address, const char *command)
{
	char **argv = NULL, port[24];
	size_t n = 0;
	push(&argv, &n, "ssh");
	push(&argv, &n, "-T");
	for (size_t i = 0; i < s->noptions; i++) {
		push(&argv, &n, "-o");
		push(&argv, &n, s->options[i]);
	}
	static const char *const own[] = {"BatchMode=yes", "ConnectTimeout=10", "LogLevel=ERROR"};
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		push(&argv, &n, "-o");
		push(&argv, &n, own[i]);
	}
	if (s->identity) {
		push(&argv, &n, "-i");
		push(&argv, &n, s->identity);
	}
	if (s->port > 0) {
		snprintf(port, sizeof(port), "%lld", (long long)s->port);
		push(&argv, &n, "-p");
		push(&argv, &n, port);
	}
	if (s->user) {
		push(&argv, &n, "-l");
		push(&argv, &n, s->user);
	}
	push(&argv, &n, "--");
	push(&argv, &n, address);
	push(&argv, &n, command);
	return argv;
}

void bootstrap_argv_free(char **argv)
{
	for (size_t i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
}

const char *bootstrap_outcome_name(enum bootstrap_outcome o)
{
	return o == BOOTSTRAP_OK ? "ok" : o == BOOTSTRAP_CHANGED ? "changed" : "failed";
}

/* The last non-empty line of s (trailing whitespace cut), allocated. */
static char *last_line(const char *s)
{
	size_t end = strlen(s);
	while (end && strchr(" \t\r\n", s[end - 1]))
		end--;
	size_t start = end;
	while (start && s[start - 1] != '\n')
		start--;
	return xasprintf("%.*s", (int)(end - start), s + start);
}

/* The last n lines of s joined with "; ", allocated. */
static char *last_lines(const char *s, int n)
{
	size_t end = strlen(s);
	while (end && strchr(" \t\r\n", s[end - 1]))
		end--;
	size_t start = end;
	for (int lines = 0; start; start--)
		if (s[start - 1] == '\n' && ++lines == n)
			break;
	struct buf b;
	buf_init(&b);
	for (size_t i = start; i < end; i++)
		if (s[i] == '\n')
			buf_adds(&b, "; ");
		else if (s[i] != '\r')
			buf_add(&b, s + i, 1);
	return b.data ? buf_detach(&b) : xstrdup("");
}

enum bootstrap_outcome bootstrap_outcome_of(int status, const char *out, const char *errout,
                                            char **detail)
{
	if (status == 0) {
		char *line = last_line(out);
		enum bootstrap_outcome o = BOOTSTRAP_FAILED;
		size_t skip = 0;
		if (strncmp(line, "changed", 7) == 0 && (line[7] == ' ' || !line[7]))
			o = BOOTSTRAP_CHANGED, skip = 7;
		else if (strncmp(line, "ok", 2) == 0 && (line[2] == ' ' || !line[2]))
			o = BOOTSTRAP_OK, skip = 2;
		*detail =
		        o == BOOTSTRAP_FAILED
		                ? xasprintf(
		                          "the step ended without its outcome (last line: '%.80s')",
		                          line)
		                : xstrdup(line + skip + (line[skip] == ' '));
		free(line);
		return o;
	}
	const char *src = *errout ? errout : out;
	char *why = last_lines(src, FAIL_LINES);
	if (status == 255) /* ssh's own failure: its message mostly starts "ssh: " */
		*detail =
		        strncmp(why, "ssh: ", 5) == 0
		                ? xstrdup(why)
		                : xasprintf("ssh: %s", *why ? why : "exited 255 without a message");
	else if (status < 0)
		*detail = xasprintf("ssh did not exit normally%s%s", *why ? ": " : "", why);
	else
		*detail = xasprintf("exit status %d%s%s", status, *why ? ": " : "", why);
	free(why);
	return BOOTSTRAP_FAILED;
}
