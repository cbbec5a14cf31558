/* The steps of a node profile (fleet/steps.h): their order and names, what
 * each reads and does, each check against constructed facts, mountinfo
 * text and dpkg-query output, the commands of the actions, and the
 * profiles refused before any step runs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "fleet/spec.h"
#include "fleet/steps.h"

/* The compiled profile p of a one-profile fleet whose profile is body. */
static json_t *profile(const char *body)
{
	char yaml[4096], out[8192];
	snprintf(yaml, sizeof(yaml),
	         "name: f\npools:\n  onprem:\nprofiles:\n  p:\n%s"
	         "groups:\n  g: {pool: onprem, profile: p, nodes: 'n-[1-2]'}\n",
	         body);
	json_t *f = fleet_compile_yaml("f.yaml", yaml, strlen(yaml), out, sizeof(out));
	if (!f)
		FAIL_AT("fixture does not compile: %s", out);
	json_t *p = json_incref(json_array_get(json_object_get(f, "profiles"), 0));
	json_decref(f);
	return p;
}

#define FULL                                                                                       \
	"    gpu: {model: NVIDIA H200, count: 2}\n"                                                \
	"    driver: '550.54'\n"                                                                   \
	"    cuda: '12.4'\n"                                                                       \
	"    agent: '0.1.0'\n"                                                                     \
	"    mounts:\n"                                                                            \
	"      - {path: /mnt/nvme, device: /dev/md0, fs: xfs, options: [noatime, nodiscard]}\n"    \
	"      - {path: /mnt/scratch, device: tmpfs, fs: tmpfs}\n"                                 \
	"    cache_dir: /mnt/nvme/anvil-cache\n"                                                   \
	"    sysctl: {vm.swappiness: 1, net.ipv4.tcp_rmem: '4096 87380 6291456',\n"                \
	"             net.ipv4.conf.eth0/100.rp_filter: 2}\n"                                      \
	"    packages: [bash, rdma-core=50.0-2]\n"

static struct steps *full(void)
{
	json_t *p = profile(FULL);
	struct steps *s = NULL;
	char err[512];
	CHECK_INT(steps_from_profile(p, &s, err, sizeof(err)), 0);
	json_decref(p);
	return s;
}

static struct steps_facts facts(void)
{
	struct steps_facts f = {.gpus = 2};
	snprintf(f.gpu_models[0], sizeof(f.gpu_models[0]), "NVIDIA H200");
	snprintf(f.gpu_models[1], sizeof(f.gpu_models[1]), "NVIDIA H200");
	snprintf(f.driver, sizeof(f.driver), "sim-550.54.15");
	snprintf(f.cuda, sizeof(f.cuda), "12.4");
	snprintf(f.agent, sizeof(f.agent), "0.1.0-dev");
	return f;
}

static char detail[STEPS_DETAIL_MAX];

static enum step_verdict judge_text(const struct step *st, const char *text)
{
	struct steps_facts f = facts();
	struct step_seen seen = {.text = text};
	return steps_judge(st, &f, &seen, detail, sizeof(detail));
}

static void check_argv(char **argv, const char *const *want)
{
	size_t i = 0;
	for (; want[i]; i++) {
		if (!argv || !argv[i])
			FAIL_AT("argv ends before word %zu (%s)", i, want[i]);
		CHECK_STR(argv[i], want[i]);
	}
	if (argv[i])
		FAIL_AT("argv has more words: %s", argv[i]);
}

TEST(order_names_and_what_each_reads)
{
	struct steps *s = full();
	const char *const names[] = {"gpu",
	                             "driver",
	                             "cuda",
	                             "agent",
	                             "mount /mnt/nvme",
	                             "mount /mnt/scratch",
	                             "cache_dir /mnt/nvme/anvil-cache",
	                             "sysctl vm.swappiness",
	                             "sysctl net.ipv4.tcp_rmem",
	                             "sysctl net.ipv4.conf.eth0/100.rp_filter",
	                             "packages",
	                             NULL};
	for (size_t i = 0; names[i]; i++)
		CHECK_STR(s->v[i].name, names[i]);
	CHECK_INT(s->n, 11);
	for (int i = 0; i < 4; i++) { /* checks only */
		CHECK_INT(s->v[i].source, STEP_READ_FACTS);
		CHECK_INT(s->v[i].act, STEP_ACT_NONE);
	}
	CHECK_INT(s->v[0].count, 2);
	CHECK_STR(s->v[0].want, "NVIDIA H200");
	CHECK_STR(s->v[4].read_path, "/proc/self/mountinfo");
	CHECK_STR(s->v[4].options, "noatime,nodiscard");
	CHECK_STR(s->v[5].options, "");
	CHECK_INT(s->v[4].act, STEP_ACT_COMMAND);
	CHECK_STR(s->v[4].act_path, "/mnt/nvme");
	CHECK_INT(s->v[6].source, STEP_READ_STAT);
	CHECK_INT(s->v[6].act, STEP_ACT_MKDIR);
	CHECK_STR(s->v[6].act_path, "/mnt/nvme/anvil-cache");
	CHECK_STR(s->v[7].read_path, "/proc/sys/vm/swappiness");
	CHECK_INT(s->v[7].act, STEP_ACT_WRITE);
	CHECK_STR(s->v[7].act_path, "/proc/sys/vm/swappiness");
	CHECK_STR(s->v[7].act_text, "1\n");
	/* sysctl(8)'s rule: '/' in a key stands for a '.' in the file name */
	CHECK_STR(s->v[9].read_path, "/proc/sys/net/ipv4/conf/eth0.100/rp_filter");
	CHECK_INT(s->v[10].source, STEP_READ_COMMAND);
	const char *const dpkg[] = {
	        "dpkg-query", "-W",        "-f", "${Package} ${Status} ${Version}\\n",
	        "bash",       "rdma-core", NULL};
	check_argv(s->v[10].read_argv, dpkg);
	CHECK(s->v[10].apt);
	steps_free(s);
}

TEST(a_profile_without_requirements_has_no_steps)
{
	json_t *p = profile("    gpu: {count: 0}\n");
	struct steps *s = NULL;
	char err[256];
	CHECK_INT(steps_from_profile(p, &s, err, sizeof(err)), 0);
	CHECK_INT(s->n, 0);
	steps_free(s);
	json_decref(p);
}

/* A profile from the network that the spec would not compile, or that
 * would make a step touch something it does not name, is refused whole,
 * naming the field, the value and why. */
static void refused(const char *json, int code, const char *field, const char *value)
{
	json_t *p = json_loads(json, 0, NULL);
	CHECK(p != NULL);
	struct steps *s = (struct steps *)1;
	char err[512] = "";
	CHECK_INT(steps_from_profile(p, &s, err, sizeof(err)), code);
	CHECK(s == (struct steps *)1); /* untouched */
	CHECK_CONTAINS(err, field);
	CHECK_CONTAINS(err, value);
	json_decref(p);
}

TEST(malformed_profiles_are_refused_with_field_value_and_reason)
{
	refused("[1]", ERR_INVALID, "spec", "object");
	refused("{\"colour\": 1}", ERR_INVALID, "spec: 'colour'", "cannot converge");
	refused("{\"sysctl\": {\"a./../../etc/passwd\": \"1\"}}", ERR_INVALID,
	        "spec.sysctl.a./../../etc/passwd", "not a kernel setting");
	refused("{\"sysctl\": {\"vm.swappiness\": \"1\\n2\"}}", ERR_INVALID, "spec.sysctl",
	        "one line");
	refused("{\"sysctl\": {\"vm.swappiness\": 1}}", ERR_INVALID, "spec.sysctl", "one line");
	refused("{\"mounts\": [{\"path\": \"/mnt/../etc\", \"device\": \"x\", \"fs\": \"xfs\"}]}",
	        ERR_INVALID, "spec.mounts[0].path: '/mnt/../etc'", "absolute path");
	refused("{\"mounts\": [{\"path\": \"/m\", \"device\": \"--bind\", \"fs\": \"xfs\"}]}",
	        ERR_INVALID, "spec.mounts[0].device: '--bind'", "one word");
	refused("{\"mounts\": [{\"path\": \"/m\", \"device\": \"d\", \"fs\": \"XFS\"}]}",
	        ERR_INVALID, "spec.mounts[0].fs: 'XFS'", "file system type");
	refused("{\"mounts\": [{\"path\": \"/m\", \"device\": \"d\", \"fs\": \"xfs\", "
	        "\"options\": [\"a,b\"]}]}",
	        ERR_INVALID, "spec.mounts[0].options: 'a,b'", "one word");
	refused("{\"cache_dir\": \"relative\"}", ERR_INVALID, "spec.cache_dir: 'relative'",
	        "absolute");
	refused("{\"packages\": [\"bash\", \"--force-yes\"]}", ERR_INVALID,
	        "spec.packages[1]: '--force-yes'", "Debian package");
	refused("{\"gpu\": {\"model\": \"x\", \"count\": 99}}", ERR_INVALID, "spec.gpu", "0 to 64");
	refused("{\"driver\": \"550; rm -rf\"}", ERR_INVALID, "spec.driver: '550; rm -rf'",
	        "version");
	json_t *many = json_object();
	for (int i = 0; i < STEPS_MAX + 1; i++) {
		char key[32];
		snprintf(key, sizeof(key), "net.k%d", i);
		json_object_set_new(many, key, json_string("1"));
	}
	json_t *p = json_pack("{s:o}", "sysctl", many);
	struct steps *s = NULL;
	char err[256];
	CHECK_INT(steps_from_profile(p, &s, err, sizeof(err)), ERR_TOOBIG);
	CHECK_CONTAINS(err, "at most 256");
	json_decref(p);
}

TEST(gpu_check_against_the_facts)
{
	struct steps *s = full();
	struct steps_facts f = facts();
	struct step_seen none = {0};
	CHECK_INT(steps_judge(&s->v[0], &f, &none, detail, sizeof(detail)), STEP_HOLDS);
	CHECK_STR(detail, "2 GPUs, each NVIDIA H200");
	snprintf(f.gpu_models[1], sizeof(f.gpu_models[1]), "NVIDIA A100-SXM4-80GB");
	CHECK_INT(steps_judge(&s->v[0], &f, &none, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_STR(detail, "GPU 1 is NVIDIA A100-SXM4-80GB, the profile wants NVIDIA H200");
	f.gpus = 1;
	CHECK_INT(steps_judge(&s->v[0], &f, &none, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_STR(detail, "1 GPUs, the profile wants 2 x NVIDIA H200");
	steps_free(s);
}

TEST(version_rule)
{
	CHECK(steps_version_match("550.54.15", "550.54.15"));
	CHECK(steps_version_match("550.54.15", "sim-550.54.15")); /* the sim's driver */
	CHECK(steps_version_match("550", "550.54.15"));
	CHECK(steps_version_match("550.54", "550.54.15"));
	CHECK(steps_version_match("12.4", "12.4"));
	CHECK(steps_version_match("12.4", "12.4.1"));
	CHECK(!steps_version_match("12.4", "12.40"));
	CHECK(!steps_version_match("12.40", "12.4"));
	CHECK(!steps_version_match("550.127.05", "550.54.15"));
	CHECK(steps_version_match("0.1.0", "0.1.0-dev"));
	CHECK(steps_version_match("0.2.0-rc1", "0.2.0-rc1"));
	CHECK(!steps_version_match("0.2.0-rc1", "0.2.0-rc2"));
	CHECK(!steps_version_match("1", ""));
	CHECK(!steps_version_match("", "1"));
}

TEST(version_checks_against_the_facts)
{
	struct steps *s = full();
	struct steps_facts f = facts();
	struct step_seen none = {0};
	CHECK_INT(steps_judge(&s->v[1], &f, &none, detail, sizeof(detail)), STEP_HOLDS);
	CHECK_STR(detail, "driver version sim-550.54.15");
	CHECK_INT(steps_judge(&s->v[2], &f, &none, detail, sizeof(detail)), STEP_HOLDS);
	CHECK_INT(steps_judge(&s->v[3], &f, &none, detail, sizeof(detail)), STEP_HOLDS);
	snprintf(f.cuda, sizeof(f.cuda), "12.2");
	CHECK_INT(steps_judge(&s->v[2], &f, &none, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_STR(detail, "CUDA version 12.2, the profile wants 12.4");
	f.driver[0] = '\0';
	CHECK_INT(steps_judge(&s->v[1], &f, &none, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_CONTAINS(detail, "reports no driver version");
	steps_free(s);
}

#define ROOT_LINE "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"

TEST(mount_check_reads_mountinfo)
{
	struct steps *s = full();
	const struct step *nvme = &s->v[4], *scratch = &s->v[5];
	CHECK_INT(judge_text(nvme, ROOT_LINE), STEP_DIFFERS);
	CHECK_STR(detail, "nothing is mounted at /mnt/nvme");
	/* there, with its flags (and optional fields before the '-') */
	const char *ok = ROOT_LINE "40 22 9:0 / /mnt/nvme rw,noatime shared:5 master:2 - xfs "
	                           "/dev/md0 rw,attr2,inode64\n";
	CHECK_INT(judge_text(nvme, ok), STEP_HOLDS);
	CHECK_STR(detail, "/mnt/nvme is /dev/md0 (xfs, rw,noatime)");
	/* a VFS flag of the profile missing: a remount makes it so */
	const char *relatime = ROOT_LINE "40 22 9:0 / /mnt/nvme rw,relatime - xfs /dev/md0 rw\n";
	CHECK_INT(judge_text(nvme, relatime), STEP_DIFFERS);
	CHECK_CONTAINS(detail, "without noatime");
	struct step_seen seen = {.text = relatime};
	char **argv = steps_action_argv(nvme, &seen, 0);
	const char *const remount[] = {"mount", "-o", "remount,noatime,nodiscard", "/mnt/nvme",
	                               NULL};
	check_argv(argv, remount);
	steps_argv_free(argv);
	/* another file system there: never mounted over */
	const char *other = ROOT_LINE "40 22 8:17 / /mnt/nvme rw - ext4 /dev/sdb1 rw\n";
	CHECK_INT(judge_text(nvme, other), STEP_CANNOT);
	CHECK_CONTAINS(detail, "holds /dev/sdb1 (ext4), not /dev/md0 (xfs)");
	/* the same device by another name (UUID=, a link): by MAJOR:MINOR */
	struct steps_facts f = facts();
	struct step_seen by_id = {.text = ROOT_LINE
	                          "40 22 9:0 / /mnt/nvme rw,noatime - xfs /dev/md127 rw\n",
	                          .device_id = "9:0"};
	CHECK_INT(steps_judge(nvme, &f, &by_id, detail, sizeof(detail)), STEP_HOLDS);
	/* stacked mounts: the last line is on top */
	const char *stacked = ROOT_LINE "41 22 0:50 / /mnt/scratch rw - tmpfs tmpfs rw\n"
	                                "42 41 8:17 / /mnt/scratch rw - ext4 /dev/sdb1 rw\n";
	CHECK_INT(judge_text(scratch, stacked), STEP_CANNOT);
	CHECK_INT(judge_text(scratch, ROOT_LINE "41 22 0:50 / /mnt/scratch rw - tmpfs tmpfs rw\n"),
	          STEP_HOLDS);
	/* a fresh mount: mkdir -p first (act_path), then mount with the options */
	seen = (struct step_seen){.text = ROOT_LINE};
	argv = steps_action_argv(nvme, &seen, 0);
	const char *const mount[] = {"mount",    "-t",        "xfs", "-o", "noatime,nodiscard",
	                             "/dev/md0", "/mnt/nvme", NULL};
	check_argv(argv, mount);
	steps_argv_free(argv);
	argv = steps_action_argv(scratch, &seen, 0);
	const char *const plain[] = {"mount", "-t", "tmpfs", "tmpfs", "/mnt/scratch", NULL};
	check_argv(argv, plain);
	steps_argv_free(argv);
	/* mountinfo unreadable */
	struct step_seen err = {.err = -EACCES};
	CHECK_INT(steps_judge(nvme, &f, &err, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_CONTAINS(detail, "cannot read /proc/self/mountinfo");
	steps_free(s);
}

TEST(mount_points_with_spaces_are_unescaped)
{
	json_t *p = json_loads("{\"mounts\": [{\"path\": \"/mnt/my disk\", \"device\": \"tmpfs\", "
	                       "\"fs\": \"tmpfs\", \"options\": []}]}",
	                       0, NULL);
	struct steps *s = NULL;
	char err[256];
	CHECK_INT(steps_from_profile(p, &s, err, sizeof(err)), 0);
	CHECK_INT(judge_text(&s->v[0], ROOT_LINE "41 22 0:50 / /mnt/my\\040disk rw - tmpfs tmpfs "
	                                         "rw\n"),
	          STEP_HOLDS);
	steps_free(s);
	json_decref(p);
}

TEST(cache_dir_check_from_stat)
{
	struct steps *s = full();
	struct steps_facts f = facts();
	const struct step *dir = &s->v[6];
	struct step_seen seen = {.err = 0};
	CHECK_INT(steps_judge(dir, &f, &seen, detail, sizeof(detail)), STEP_HOLDS);
	seen.err = -ENOENT;
	CHECK_INT(steps_judge(dir, &f, &seen, detail, sizeof(detail)), STEP_DIFFERS);
	CHECK_STR(detail, "/mnt/nvme/anvil-cache does not exist");
	seen.err = -ENOTDIR;
	CHECK_INT(steps_judge(dir, &f, &seen, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_CONTAINS(detail, "not a directory");
	steps_free(s);
}

TEST(sysctl_check_compares_words)
{
	struct steps *s = full();
	const struct step *swap = &s->v[7], *rmem = &s->v[8];
	CHECK_INT(judge_text(swap, "1\n"), STEP_HOLDS);
	CHECK_STR(detail, "vm.swappiness is 1");
	CHECK_INT(judge_text(swap, "60\n"), STEP_DIFFERS);
	CHECK_STR(detail, "vm.swappiness is 60, the profile wants 1");
	/* the kernel's tabs are the profile's spaces */
	CHECK_INT(judge_text(rmem, "4096\t87380\t6291456\n"), STEP_HOLDS);
	CHECK_INT(judge_text(rmem, "4096\t131072\t6291456\n"), STEP_DIFFERS);
	struct steps_facts f = facts();
	struct step_seen gone = {.err = -ENOENT};
	CHECK_INT(steps_judge(swap, &f, &gone, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_STR(detail, "this kernel has no setting vm.swappiness (no /proc/sys/vm/swappiness)");
	steps_free(s);
}

/* dpkg-query's answer for bash (installed), rdma-core at another version,
 * and its complaint about a package it does not know. */
#define DPKG                                                                                       \
	"bash install ok installed 5.2.15-2+b2\n"                                                  \
	"rdma-core install ok installed 44.0-2\n"                                                  \
	"dpkg-query: no packages found matching nope\n"

TEST(packages_check_and_apt_action)
{
	struct steps *s = full();
	const struct step *pk = &s->v[10];
	CHECK_INT(judge_text(pk, DPKG), STEP_DIFFERS);
	CHECK_STR(detail, "bash 5.2.15-2+b2; rdma-core 44.0-2 installed, the profile wants 50.0-2");
	struct step_seen seen = {.text = DPKG, .status = 0};
	char **argv = steps_action_argv(pk, &seen, 0);
	const char *const apt[] = {"apt-get",          "install", "-y", "--no-install-recommends",
	                           "rdma-core=50.0-2", NULL};
	check_argv(argv, apt);
	steps_argv_free(argv);
	argv = steps_action_argv(pk, &seen, 1); /* a dry run */
	const char *const sim[] = {"apt-get", "install",          "-y", "--no-install-recommends",
	                           "-s",      "rdma-core=50.0-2", NULL};
	check_argv(argv, sim);
	steps_argv_free(argv);
	const char *removed = "bash install ok installed 5.2.15-2+b2\n"
	                      "rdma-core deinstall ok config-files 50.0-2\n";
	CHECK_INT(judge_text(pk, removed), STEP_DIFFERS);
	CHECK_CONTAINS(detail, "rdma-core not installed");
	const char *good = "bash hold ok installed 5.2.15-2+b2\n"
	                   "rdma-core install ok installed 50.0-2\n";
	CHECK_INT(judge_text(pk, good), STEP_HOLDS);
	seen.text = good;
	CHECK(steps_action_argv(pk, &seen, 0) == NULL); /* nothing to install */
	struct steps_facts f = facts();
	struct step_seen none = {.err = -ENOENT};
	CHECK_INT(steps_judge(pk, &f, &none, detail, sizeof(detail)), STEP_CANNOT);
	CHECK_CONTAINS(detail, "cannot run dpkg-query");
	steps_free(s);
}

TEST(output_kept_is_the_last_4k_on_a_character)
{
	char big[10000];
	memset(big, 'a', sizeof(big));
	CHECK_INT(steps_tail(big, 100), 0);
	size_t at = steps_tail(big, sizeof(big));
	CHECK_INT(sizeof(big) - at, STEPS_DETAIL_MAX - 1);
	/* a two-byte character across the cut: the cut moves past it */
	size_t cut = sizeof(big) - (STEPS_DETAIL_MAX - 1);
	big[cut - 1] = (char)0xc3;
	big[cut] = (char)0xa9;
	CHECK_INT(steps_tail(big, sizeof(big)), cut + 1);
}

TEST_MAIN()
