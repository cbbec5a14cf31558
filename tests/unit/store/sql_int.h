/* sql_int.h - one integer out of a database file, for the store's tests:
 * what a query (a count) answers, with ?1 bound to arg when it is given. */
#ifndef ANVIL_TEST_SQL_INT_H
#define ANVIL_TEST_SQL_INT_H

#include <sqlite3.h>

#include "../test.h"

static inline int sql_int(const char *path, const char *sql, const char *arg)
{
	sqlite3 *db;
	sqlite3_stmt *s = NULL;
	CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
	CHECK_INT(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
	if (arg)
		sqlite3_bind_text(s, 1, arg, -1, SQLITE_STATIC);
	CHECK_INT(sqlite3_step(s), SQLITE_ROW);
	int n = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db);
	return n;
}

#endif
