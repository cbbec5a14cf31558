/* base/ydoc.h: what the workflow tests (tests/unit/flow/test_spec.c) do
 * not already cover. */
#include <string.h>

#include "../test.h"
#include "base/ydoc.h"

TEST(an_empty_document_is_null_and_parsing_ends)
{
	/* libyaml answers "no event" forever after the stream's end: reading
	 * past it once hung `anvil wf check` on an empty file */
	static const char *const empty[] = {"", "# only a comment\n", "---\n", "\n\n"};
	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
		struct ydoc d;
		char err[128] = "";
		CHECK_INT(ydoc_parse(empty[i], strlen(empty[i]), &d, err, sizeof(err)), 0);
		CHECK(json_is_null(d.root));
		ydoc_free(&d);
	}
}

TEST_MAIN()
