/* What an attempt's exec token may do with objects (api_objects.c,
 * docs/api.md "Objects"): content keys, and its job's checkpoint key and
 * the keys under it, while the attempt is not final; nothing with another
 * token, another attempt's id, or once the attempt has ended. */
#include <string.h>

#include "base/err.h"
#include "server/server.h"
#include "state_fixture.h"

#define CONTENT "sha256/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

/* A running job whose attempt has an exec token, made a workflow task's
 * with checkpoint key ckpt/12/train/3 (the engine sets job->task). */
static struct job *task_job(struct sfx *f)
{
	struct job *j =
	        sfx_submit_running(f, "{\"command\": [\"true\"], \"gpus\": 1, \"mpi\": true}");
	j->task = json_pack("{s:s,s:I}", "checkpoint", "ckpt/12/train/3", "run", (json_int_t)5);
	return j;
}

TEST(an_exec_token_reaches_content_keys_and_its_checkpoint)
{
	struct sfx *f = sfx_open(1, 1);
	struct job *j = task_job(f);
	struct attempt *a = sfx_attempt(j);
	const char *t = a->exec_token;
	CHECK_INT(strlen(t), 64);
	CHECK(api_objects_exec_ok(&f->st, t, a->id, CONTENT));
	CHECK(api_objects_exec_ok(&f->st, t, a->id, "ckpt/12/train/3"));
	CHECK(api_objects_exec_ok(&f->st, t, a->id, "ckpt/12/train/3/shard-0"));
	CHECK(!api_objects_exec_ok(&f->st, t, a->id, "ckpt/12/train/30"));
	CHECK(!api_objects_exec_ok(&f->st, t, a->id, "ckpt/12/train"));
	CHECK(!api_objects_exec_ok(&f->st, t, a->id, "bundles/other"));
	sfx_close(f);
}

TEST(another_token_attempt_or_an_ended_attempt_reaches_nothing)
{
	struct sfx *f = sfx_open(2, 1);
	struct job *j = task_job(f);
	struct attempt *a = sfx_attempt(j);
	char token[65];
	snprintf(token, sizeof(token), "%s", a->exec_token);
	char wrong[65];
	snprintf(wrong, sizeof(wrong), "%s", token);
	wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
	CHECK(!api_objects_exec_ok(&f->st, wrong, a->id, CONTENT));
	CHECK(!api_objects_exec_ok(&f->st, "", a->id, CONTENT));
	CHECK(!api_objects_exec_ok(&f->st, NULL, a->id, CONTENT));
	CHECK(!api_objects_exec_ok(&f->st, token, a->id + 100, CONTENT));
	/* a plain job's attempt has no token: nothing matches it */
	struct job *plain = sfx_submit_running(f, "{\"command\": [\"true\"], \"gpus\": 1}");
	CHECK(!api_objects_exec_ok(&f->st, "", sfx_attempt(plain)->id, CONTENT));
	/* the attempt ends: its token is worth nothing */
	sfx_exit(f, sfx_node_of(a, 0), a->id, 0, 0);
	sfx_sync(f, sfx_node_of(a, 0));
	CHECK(job_state_final(a->state));
	CHECK(!api_objects_exec_ok(&f->st, token, a->id, CONTENT));
	CHECK(!api_objects_exec_ok(&f->st, token, a->id, "ckpt/12/train/3"));
	sfx_close(f);
}

TEST(a_job_without_a_checkpoint_key_reaches_content_keys_only)
{
	struct sfx *f = sfx_open(1, 1);
	struct job *j =
	        sfx_submit_running(f, "{\"command\": [\"true\"], \"gpus\": 1, \"mpi\": true}");
	struct attempt *a = sfx_attempt(j);
	CHECK(api_objects_exec_ok(&f->st, a->exec_token, a->id, CONTENT));
	CHECK(!api_objects_exec_ok(&f->st, a->exec_token, a->id, "ckpt/1"));
	sfx_close(f);
}

TEST_MAIN()
