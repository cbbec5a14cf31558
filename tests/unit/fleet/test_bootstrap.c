/* fleet/bootstrap.h: the machines, the files and the steps of
 * `anvil fleet bootstrap`. */
#include <string.h>

#include "../test.h"
#include "fleet/bootstrap.h"
#include "fleet/spec.h"

static const char spec_text[] = "name: boot\n"
                                "pools:\n"
                                "  onprem: {kind: on-prem}\n"
                                "profiles:\n"
                                "  cpu: {}\n"
                                "groups:\n"
                                "  boxes:\n"
                                "    pool: onprem\n"
                                "    profile: cpu\n"
                                "    nodes: box-[1-3]\n"
                                "    addresses: 10.0.0.[11-13]\n"
                                "  bare:\n"
                                "    pool: onprem\n"
                                "    profile: cpu\n"
                                "    nodes: bare-1\n";

static json_t *fleet(void)
{
	char errs[4096];
	json_t *f = fleet_compile_yaml("t.yaml", spec_text, strlen(spec_text), errs, sizeof(errs));
	if (!f)
		FAIL_AT("spec: %s", errs);
	return f;
}

/* The targets a spec choice gives, "ADDR=NAME ..." or "ERR: why". */
static const char *pick(const char *groups, const char *nodes)
{
	static char out[1024];
	char err[512];
	struct bootstrap_targets t = {NULL, 0};
	json_t *f = fleet();
	if (bootstrap_from_spec(f, groups, nodes, &t, err, sizeof(err))) {
		CHECK_INT(t.n, 0);
		snprintf(out, sizeof(out), "ERR: %s", err);
	} else {
		size_t used = 0;
		out[0] = '\0';
		for (size_t i = 0; i < t.n; i++)
			used += (size_t)snprintf(out + used, sizeof(out) - used, "%s%s=%s",
			                         i ? " " : "", t.v[i].address, t.v[i].name);
	}
	bootstrap_targets_free(&t);
	json_decref(f);
	return out;
}

/* One ADDR[=NAME] parsed: "ADDR NAME" (NAME "-" when none) or "ERR: why". */
static const char *target(const char *arg)
{
	static char out[512];
	char err[300];
	struct bootstrap_targets t = {NULL, 0};
	if (bootstrap_parse_target(arg, &t, err, sizeof(err)))
		snprintf(out, sizeof(out), "ERR: %s", err);
	else
		snprintf(out, sizeof(out), "%s %s", t.v[0].address,
		         t.v[0].name ? t.v[0].name : "-");
	bootstrap_targets_free(&t);
	return out;
}

static struct bootstrap_config config(void)
{
	static const char *const opts[] = {"log-level=debug", "gpu-backend=none", "log-level=warn"};
	struct bootstrap_config c = {"http://10.0.0.1:7070",
	                             "/opt/anvil/bin",
	                             "/opt/anvil/etc",
	                             "/etc/systemd/system",
	                             "/var/lib/anvil/agent",
	                             opts,
	                             3,
	                             0};
	return c;
}

TEST(addresses_and_names_parse)
{
	CHECK_STR(target("10.0.0.11"), "10.0.0.11 -");
	CHECK_STR(target("10.0.0.11=gpu-01"), "10.0.0.11 gpu-01");
	CHECK_STR(target("gpu-01.lab.example=gpu_01"), "gpu-01.lab.example gpu_01");
	CHECK_STR(target("fd00::11=gpu-01"), "fd00::11 gpu-01");
	CHECK_STR(target("=gpu-01"),
	          "ERR: '=gpu-01': no address before the '=' (write ADDR or ADDR=NAME)");
	CHECK_STR(target("10.0.0.11=gpu/01"), "ERR: '10.0.0.11=gpu/01': 'gpu/01' is not a node "
	                                      "name: 1 to 63 letters, digits, '-', '_' or '.'");
	CHECK_STR(target("10.0.0.11="), "ERR: '10.0.0.11=': '' is not a node name: 1 to 63 "
	                                "letters, digits, '-', '_' or '.'");
	CHECK_STR(target("10.0.1.300"), "ERR: '10.0.1.300': '10.0.1.300' is not an address: an "
	                                "IPv4 or IPv6 address or a host name (write ADDR or "
	                                "ADDR=NAME)");
	CHECK_STR(target("root@gpu-01"), "ERR: 'root@gpu-01': 'root@gpu-01' is not an address: "
	                                 "an IPv4 or IPv6 address or a host name (write ADDR or "
	                                 "ADDR=NAME)");
}

TEST(the_spec_gives_its_nodes_with_their_addresses)
{
	CHECK_STR(pick("boxes", NULL), "10.0.0.11=box-1 10.0.0.12=box-2 10.0.0.13=box-3");
	CHECK_STR(pick(NULL, "box-[1-2]"), "10.0.0.11=box-1 10.0.0.12=box-2");
	CHECK_STR(pick("boxes", "box-3,box-1"), "10.0.0.11=box-1 10.0.0.13=box-3");
	CHECK_STR(pick(NULL, "box-[1,3],box-2"), "10.0.0.11=box-1 10.0.0.12=box-2 10.0.0.13=box-3");
}

TEST(a_bad_choice_says_which_and_why)
{
	/* every node, bare-1 with them: its group has no addresses */
	CHECK_STR(pick(NULL, NULL), "ERR: groups.bare.addresses: the group has none, so node "
	                            "'bare-1' has no address to bootstrap: give the group "
	                            "addresses (one per node), or name the machine as "
	                            "ADDR=bare-1");
	CHECK_STR(pick(NULL, "box-[2-4]"), "ERR: --node 'box-[2-4]': the spec has no node 'box-4'");
	CHECK_STR(pick("gpus", NULL), "ERR: --group 'gpus': the spec has no group 'gpus'");
	CHECK_STR(pick("boxes", "bare-1"),
	          "ERR: the spec has no on-premises node that --group and --node choose to "
	          "bootstrap");
	CHECK_STR(pick(NULL, "box-[1-"),
	          "ERR: --node 'box-[1-': '1-' needs a number after the '-'");
	CHECK_STR(pick("boxes,", NULL), "ERR: --group 'boxes,': an empty name in the list");
}

/* bootstrap_config_check's message for c, or "ok". */
static const char *checked(const struct bootstrap_config *c)
{
	static char err[512];
	if (bootstrap_config_check(c, err, sizeof(err)) == 0)
		snprintf(err, sizeof(err), "ok");
	return err;
}

TEST(options_are_checked_with_the_option_and_the_value)
{
	struct bootstrap_config c = config();
	CHECK_STR(checked(&c), "ok");
	c.prefix = "opt/bin";
	CHECK_STR(checked(&c), "--prefix 'opt/bin': not an absolute path");
	c.prefix = "/opt/../bin";
	CHECK_STR(checked(&c), "--prefix '/opt/../bin': '.' and '..' parts are not taken");
	c.prefix = "/opt/bin";
	c.work_dir = "/var/lib/my agent";
	CHECK_STR(checked(&c), "--work-dir '/var/lib/my agent': a path here holds letters, "
	                       "digits and / . _ + - only");
	c = config();
	c.server = "10.0.0.1:7070";
	CHECK_STR(checked(&c),
	          "the agents' server '10.0.0.1:7070': not an http:// or https:// URL");
	c = config();
	const char *own[] = {"name=x"}, *bad[] = {"Log_Level=debug"}, *line[] = {"listen=a\nb"};
	c.options = own;
	c.noptions = 1;
	CHECK_STR(checked(&c), "--agent-option 'name=x': bootstrap sets name itself: use "
	                       "ADDR=NAME or the spec");
	c.options = bad;
	CHECK_CONTAINS(checked(&c), "--agent-option 'Log_Level=debug': not KEY=VALUE");
	c.options = line;
	CHECK_STR(checked(&c), "--agent-option 'listen=a\nb': the value holds a control character "
	                       "(one line, no tabs)");
}

TEST(only_a_loopback_server_is_refused_for_other_machines)
{
	CHECK(bootstrap_server_reachable("http://10.0.0.1:7070", "10.0.0.11"));
	CHECK(!bootstrap_server_reachable("http://127.0.0.1:7070", "10.0.0.11"));
	CHECK(!bootstrap_server_reachable("http://localhost:7070/", "gpu-01"));
	CHECK(!bootstrap_server_reachable("http://[::1]:7070", "fd00::1"));
	CHECK(bootstrap_server_reachable("http://127.0.0.1:7070", "127.0.0.2"));
}

TEST(agent_yaml_holds_the_machine_and_the_options)
{
	struct bootstrap_config c = config();
	struct bootstrap_target t = {"10.0.0.11", "gpu-01"};
	char *y = bootstrap_agent_config(&c, &t);
	CHECK_STR(y, "# /opt/anvil/etc/agent.yaml, written by `anvil fleet bootstrap` (a rerun "
	             "replaces it):\n"
	             "# the options of `anvil agent`, one per line (anvil agent --help lists "
	             "them).\n"
	             "server: 'http://10.0.0.1:7070'\n"
	             "join-token-file: '/opt/anvil/etc/join.token'\n"
	             "work-dir: '/var/lib/anvil/agent'\n"
	             "address: '10.0.0.11'\n"
	             "name: 'gpu-01'\n"
	             "listen: '0.0.0.0:7071'\n"
	             "gpu-backend: 'none'\n"
	             "log-level: 'warn'\n");
	free(y);
	/* no name: the agent takes its host name; listen given replaces the
	 * default; a quote is doubled */
	const char *opts[] = {"listen=10.0.0.11:7171", "gpu-check-program=/opt/it's"};
	c.options = opts;
	c.noptions = 2;
	t.name = NULL;
	y = bootstrap_agent_config(&c, &t);
	CHECK(!strstr(y, "name:"));
	CHECK(!strstr(y, "0.0.0.0:7071"));
	CHECK_CONTAINS(y, "\nlisten: '10.0.0.11:7171'\ngpu-check-program: '/opt/it''s'\n");
	free(y);
}

TEST(the_unit_is_the_repositorys_with_the_paths_given)
{
	struct bootstrap_config c = config();
	char *u = bootstrap_unit(&c);
	CHECK_CONTAINS(u, "\nExecStart=/opt/anvil/bin/anvil agent --config "
	                  "/opt/anvil/etc/agent.yaml\n");
	CHECK_CONTAINS(u, "\nDelegate=yes\n");
	CHECK_CONTAINS(u, "\nKillMode=process\n");
	CHECK_CONTAINS(u, "\nWantedBy=multi-user.target\n");
	CHECK_CONTAINS(u, "token in /opt/anvil/etc/join.token (0600)");
	CHECK(!strstr(u, "/usr/local/bin/anvil"));
	CHECK(!strstr(u, "/etc/anvil/"));
	free(u);
	char *p = bootstrap_file_path(&c, BOOTSTRAP_UNIT);
	CHECK_STR(p, "/etc/systemd/system/anvil-agent.service");
	free(p);
}

/* What inspect saw, from its output. */
static struct bootstrap_seen seen_of(const char *out)
{
	struct bootstrap_seen s;
	char err[200];
	if (bootstrap_parse_seen(out, &s, err, sizeof(err)))
		FAIL_AT("parse: %s", err);
	return s;
}

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"

TEST(inspect_output_is_read_and_checked)
{
	struct bootstrap_seen s = seen_of("uid 0\nsystemd 1\nmissing\nmissing\n"
	                                  "file binary " H1 "\nfile config -\nfile token " H2
	                                  "\nfile unit \nrunning 1\nenabled 0\nok inspected\n");
	CHECK_INT(s.uid, 0);
	CHECK_INT(s.systemd, 1);
	CHECK_INT(s.missing, 2);
	CHECK_STR(s.hash[BOOTSTRAP_BINARY], H1);
	CHECK_STR(s.hash[BOOTSTRAP_CONFIG], "");
	CHECK_STR(s.hash[BOOTSTRAP_TOKEN], H2);
	CHECK_STR(s.hash[BOOTSTRAP_UNIT], "");
	CHECK_INT(s.running, 1);
	CHECK_INT(s.enabled, 0);
	char err[200];
	CHECK_INT(bootstrap_parse_seen("uid 0\nLast login: today\n", &s, err, sizeof(err)), -1);
	CHECK_STR(err, "inspect printed 'Last login: today', which it does not print");
	CHECK_INT(bootstrap_parse_seen("systemd 0\n", &s, err, sizeof(err)), -1);
	CHECK_STR(err, "inspect printed no uid: is the remote shell sh-compatible?");
	char *script = bootstrap_inspect_script(&(struct bootstrap_config){
	        .prefix = "/p", .config_dir = "/c", .unit_dir = "/u", .work_dir = "/w"});
	CHECK_CONTAINS(script, "h binary '/p/anvil'\nh config '/c/agent.yaml'\n"
	                       "h token '/c/join.token'\nh unit '/u/anvil-agent.service'\n");
	CHECK_CONTAINS(script, "for d in '/p' '/c' '/u' '/w';");
	free(script);
}

static struct bootstrap_want want_all(const char *hash)
{
	struct bootstrap_want w;
	for (int f = 0; f < BOOTSTRAP_NFILES; f++) {
		snprintf(w.hash[f], sizeof(w.hash[f]), "%s", hash);
		w.size[f] = 100 + f;
	}
	return w;
}

/* The plan's steps as "name:run" or "name:-" (nothing to run). */
static const char *steps_of(const struct bootstrap_plan *p)
{
	static char out[512];
	size_t used = 0;
	out[0] = '\0';
	for (size_t i = 0; i < p->n; i++)
		used += (size_t)snprintf(out + used, sizeof(out) - used, "%s%s:%s", i ? " " : "",
		                         p->v[i].name, p->v[i].script ? "run" : "-");
	return out;
}

TEST(a_new_machine_gets_everything_and_a_started_agent)
{
	struct bootstrap_config c = config();
	struct bootstrap_seen s =
	        seen_of("uid 0\nsystemd 0\nmissing\nfile binary -\nfile config -\n"
	                "file token -\nfile unit -\nrunning 0\nenabled 0\n");
	struct bootstrap_want w = want_all(H1);
	struct bootstrap_plan p;
	bootstrap_plan(&c, &s, &w, &p);
	CHECK_STR(steps_of(&p), "dirs:run binary:run config:run token:run unit:run "
	                        "account:run check-config:run start:run");
	CHECK_CONTAINS(p.v[5].script, "useradd --system --user-group");
	CHECK_STR(p.v[5].detail, "anvil-job to make");
	CHECK_INT(p.v[1].file, BOOTSTRAP_BINARY);
	CHECK_INT(p.v[3].file, BOOTSTRAP_TOKEN);
	CHECK_INT(p.v[6].file, -1);
	CHECK_STR(p.v[1].detail, "/opt/anvil/bin/anvil is new (100 bytes)");
	/* the token: 0600, checked whole before it replaces the file */
	CHECK_CONTAINS(p.v[3].script, "f='/opt/anvil/etc/join.token'\n");
	CHECK_CONTAINS(p.v[3].script, "umask 077\ncat > \"$t\"\n");
	CHECK_CONTAINS(p.v[3].script, "!= '" H1 "' ]");
	CHECK_CONTAINS(p.v[3].script, "chmod 0600 \"$t\"\nmv -f \"$t\" \"$f\"\n");
	CHECK_CONTAINS(p.v[6].script, "'/opt/anvil/bin/anvil' agent --config "
	                              "'/opt/anvil/etc/agent.yaml' --check-config");
	CHECK_CONTAINS(p.v[7].script, "setsid nohup '/opt/anvil/bin/anvil' agent --config "
	                              "'/opt/anvil/etc/agent.yaml' >> \"$log\" 2>&1 < /dev/null &");
	CHECK(!strstr(p.v[7].script, "kill -TERM"));
	CHECK_STR(p.v[7].detail, "no systemd: start the agent detached");
	bootstrap_plan_free(&p);
}

TEST(a_bootstrapped_machine_only_gets_checked)
{
	struct bootstrap_config c = config();
	struct bootstrap_seen s =
	        seen_of("uid 0\nsystemd 1\naccount 1\nfile binary " H1 "\nfile config " H1
	                "\nfile token " H1 "\nfile unit " H1 "\nrunning 1\nenabled 1\n");
	struct bootstrap_want w = want_all(H1);
	struct bootstrap_plan p;
	bootstrap_plan(&c, &s, &w, &p);
	CHECK_STR(steps_of(&p),
	          "dirs:- binary:- config:- token:- unit:- account:- check-config:run start:-");
	CHECK_STR(p.v[7].detail, "running (systemd)");
	bootstrap_plan_free(&p);
	/* the binary alone differs: replaced, and the agent restarted */
	snprintf(w.hash[BOOTSTRAP_BINARY], sizeof(w.hash[0]), "%s", H2);
	bootstrap_plan(&c, &s, &w, &p);
	CHECK_STR(steps_of(&p),
	          "dirs:- binary:run config:- token:- unit:- account:- check-config:run start:run");
	CHECK_CONTAINS(p.v[7].script, "systemctl restart anvil-agent\n");
	CHECK(!strstr(p.v[7].script, "daemon-reload"));
	bootstrap_plan_free(&p);
	/* the unit differs: reloaded, enabled again, restarted */
	w = want_all(H1);
	snprintf(w.hash[BOOTSTRAP_UNIT], sizeof(w.hash[0]), "%s", H2);
	bootstrap_plan(&c, &s, &w, &p);
	CHECK_CONTAINS(p.v[7].script, "systemctl daemon-reload\nsystemctl enable --quiet "
	                              "anvil-agent\nsystemctl restart anvil-agent\n");
	bootstrap_plan_free(&p);
	/* no systemd, running, the config differs: stopped, then started */
	s.systemd = 0;
	w = want_all(H1);
	snprintf(w.hash[BOOTSTRAP_CONFIG], sizeof(w.hash[0]), "%s", H2);
	bootstrap_plan(&c, &s, &w, &p);
	CHECK_CONTAINS(p.v[7].script, "kill -TERM \"$p\"");
	CHECK_CONTAINS(p.v[7].script, "changed restarted without systemd");
	bootstrap_plan_free(&p);
}

TEST(ssh_is_run_without_prompts_and_the_users_options_first)
{
	const char *opts[] = {"ConnectTimeout=3", "StrictHostKeyChecking=no"};
	struct bootstrap_ssh s = {"admin", 2222, "/k/id", opts, 2};
	struct bootstrap_config c = config();
	c.sudo = 1;
	char *cmd = bootstrap_remote_command(&c, "echo 'ok it'\n");
	CHECK_STR(cmd, "sudo -n sh -c 'echo '\\''ok it'\\''\n'");
	char **argv = bootstrap_ssh_argv(&s, "10.0.0.11", cmd);
	char joined[1024] = "";
	for (size_t i = 0; argv[i]; i++)
		snprintf(joined + strlen(joined), sizeof(joined) - strlen(joined), "%s%s",
		         i ? "|" : "", argv[i]);
	CHECK_STR(joined, "ssh|-T|-o|ConnectTimeout=3|-o|StrictHostKeyChecking=no|-o|BatchMode=yes|"
	                  "-o|ConnectTimeout=10|-o|LogLevel=ERROR|-i|/k/id|-p|2222|-l|admin|--|"
	                  "10.0.0.11|sudo -n sh -c 'echo '\\''ok it'\\''\n'");
	bootstrap_argv_free(argv);
	free(cmd);
}

/* The outcome and detail of a step's end, as "outcome: detail". */
static const char *ended(int status, const char *out, const char *err)
{
	static char text[512];
	char *d;
	enum bootstrap_outcome o = bootstrap_outcome_of(status, out, err, &d);
	snprintf(text, sizeof(text), "%s: %s", bootstrap_outcome_name(o), d);
	free(d);
	return text;
}

TEST(a_steps_outcome_is_its_last_line_or_its_error)
{
	CHECK_STR(ended(0, "configuration ok\nok checked\n", ""), "ok: checked");
	CHECK_STR(ended(0, "changed made /a /b\n\n", "a warning\n"), "changed: made /a /b");
	CHECK_STR(ended(0, "ok", ""), "ok: ");
	CHECK_STR(ended(0, "done\n", ""),
	          "failed: the step ended without its outcome (last line: 'done')");
	CHECK_STR(ended(255, "", "ssh: connect to host 10.0.0.11 port 22: Connection refused\r\n"),
	          "failed: ssh: connect to host 10.0.0.11 port 22: Connection refused");
	CHECK_STR(ended(255, "", "root@10.0.0.11: Permission denied (publickey).\n"),
	          "failed: ssh: root@10.0.0.11: Permission denied (publickey).");
	CHECK_STR(ended(2, "", "1\n2\n3\n4\n5\n6\n7\n8\n"),
	          "failed: exit status 2: 3; 4; 5; 6; 7; 8");
	CHECK_STR(ended(1, "the out\n", ""), "failed: exit status 1: the out");
	CHECK_STR(ended(-1, "", ""), "failed: ssh did not exit normally");
}

TEST_MAIN()
