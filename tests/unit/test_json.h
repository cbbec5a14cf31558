/* test_json.h - a JSON fixture from text, failing the test when it is not
 * an object (for unit tests that build bodies and records). */
#ifndef ANVIL_TEST_JSON_H
#define ANVIL_TEST_JSON_H

#include <string.h>

#include "base/jv.h"
#include "test.h"

static inline json_t *test_json(const char *text)
{
	json_t *o = NULL;
	char err[256];
	if (jv_parse_object(text, strlen(text), &o, err, sizeof(err)))
		FAIL_AT("bad fixture: %s", err);
	return o;
}

#endif
