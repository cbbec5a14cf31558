/* base/objects.h and base/hash.h: the two forms of a content key name one
 * object; other keys pass as they are; a malformed content key is refused
 * with why. (The client's transfers are tested against a real server in
 * tests/integration/test_task.py.) */
#include <stdio.h>
#include <string.h>

#include "../test.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/objects.h"

#define HEX "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

TEST(both_forms_of_a_content_key_name_one_object)
{
	char out[OBJECTS_KEY_MAX], err[256], hex[65];
	CHECK_INT(
	        objects_key_canon(
	                "sha256/2c/f24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
	                out, sizeof(out), err, sizeof(err)),
	        0);
	CHECK_STR(out, "sha256/" HEX);
	char again[OBJECTS_KEY_MAX];
	CHECK_INT(objects_key_canon(out, again, sizeof(again), err, sizeof(err)), 0);
	CHECK_STR(again, out);
	CHECK_INT(objects_key_hash(out, hex), 1);
	CHECK_STR(hex, HEX);
	CHECK_INT(objects_key_hash("sha256/" HEX, hex), 1);
	CHECK_STR(hex, HEX);
	char h2[65];
	hash_sha256("hello", 5, h2);
	CHECK_STR(h2, HEX);
	CHECK(hash_hex_ok(HEX));
	CHECK(!hash_hex_ok("2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824"));
}

TEST(named_keys_pass_and_bad_content_keys_are_refused)
{
	char out[OBJECTS_KEY_MAX], err[256] = "", hex[65];
	CHECK_INT(objects_key_canon("ckpt/12/train/3", out, sizeof(out), err, sizeof(err)), 0);
	CHECK_STR(out, "ckpt/12/train/3");
	CHECK_INT(objects_key_hash("ckpt/12/train/3", hex), 0);
	const char *bad[] = {
	        "sha256/abc", "sha256/" HEX "0", "sha256/2C/F24DBA",
	        "sha256/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b982X"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (objects_key_canon(bad[i], out, sizeof(out), err, sizeof(err)) != ERR_INVALID)
			FAIL_AT("accepted %s", bad[i]);
		CHECK_CONTAINS(err, "a content key is sha256/");
	}
	char small[8];
	CHECK_INT(objects_key_canon("ckpt/too/long", small, sizeof(small), err, sizeof(err)),
	          ERR_INVALID);
	CHECK_CONTAINS(err, "longer than 7");
}

TEST_MAIN()
