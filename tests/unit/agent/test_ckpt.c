/* agent/ckpt.h: which entries of ANVIL_CHECKPOINT_DIR are complete
 * checkpoints (the rule the docs give: a final name, renamed into place),
 * and the keys their manifests are stored under. The upload and restore
 * themselves run against the real server in integration.test_recovery. */
#include <string.h>

#include "../test.h"
#include "agent/ckpt.h"

TEST(a_checkpoint_is_complete_under_its_final_name)
{
	CHECK_INT(ckpt_complete("step-100"), 1);
	CHECK_INT(ckpt_complete("epoch3.pt"), 1);
	CHECK_INT(ckpt_complete("model_v2+opt=adam@1"), 1);
	/* still being written: a hidden name or a temporary suffix */
	CHECK_INT(ckpt_complete(".step-100"), 0);
	CHECK_INT(ckpt_complete("step-100.tmp"), 0);
	CHECK_INT(ckpt_complete("step-100.partial"), 0);
	/* not a name a key can carry */
	CHECK_INT(ckpt_complete(""), 0);
	CHECK_INT(ckpt_complete("a b"), 0);
	CHECK_INT(ckpt_complete("a/b"), 0);
	CHECK_INT(ckpt_complete("ünï"), 0);
	char longname[CKPT_NAME_MAX + 2];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	CHECK_INT(ckpt_complete(longname), 0);
	longname[CKPT_NAME_MAX] = '\0';
	CHECK_INT(ckpt_complete(longname), 1);
}

TEST(a_manifest_is_named_by_job_and_checkpoint)
{
	char key[200];
	ckpt_key(42, "step-7", key, sizeof(key));
	CHECK_STR(key, "ckpt/42/step-7");
}

TEST_MAIN()
