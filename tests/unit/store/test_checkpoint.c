/* The WAL checkpointer (store/checkpoint.h): checkpoints happen on its
 * thread, not in the writer's commits, and nothing committed is lost. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "sql_int.h"
#include "store/checkpoint.h"

static sqlite3 *open_wal(const char *path)
{
	sqlite3 *db = NULL;
	CHECK_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
	          SQLITE_OK);
	CHECK_INT(sqlite3_exec(db,
	                       "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
	                       "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v BLOB);",
	                       NULL, NULL, NULL),
	          SQLITE_OK);
	return db;
}

/* n commits of a 4 KB row each: about a page of log per commit. */
static void write_rows(sqlite3 *db, int n)
{
	for (int i = 0; i < n; i++)
		CHECK_INT(sqlite3_exec(db, "INSERT INTO t(v) VALUES (zeroblob(4000))", NULL, NULL,
		                       NULL),
		          SQLITE_OK);
}

static long long file_size(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

/* Past CHECKPOINT_PAGES of log, the thread copies the pages into the
 * database file (it grows) while the writer only commits; after stop and
 * close every row is there. */
TEST(checkpoints_run_on_their_own_thread)
{
	char dir[] = "/tmp/anvil-test-ckpt-XXXXXX", path[128], wal[140];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/state.db", dir);
	snprintf(wal, sizeof(wal), "%s-wal", path);
	sqlite3 *db = open_wal(path);
	struct checkpointer *c = NULL;
	CHECK_INT(checkpointer_start(db, path, &c), 0);
	long long before = file_size(path);
	write_rows(db, CHECKPOINT_PAGES + 50);
	for (int i = 0; i < 500 && checkpointer_runs(c) == 0; i++)
		usleep(10000);
	CHECK(checkpointer_runs(c) >= 1);
	CHECK(file_size(path) > before + 100 * 4000LL); /* the thread copied rows there */
	CHECK(file_size(wal) > 0);
	write_rows(db, 100);
	checkpointer_stop(c);
	CHECK_INT(sqlite3_close(db), SQLITE_OK);
	CHECK_INT(sql_int(path, "SELECT count(*) FROM t", NULL), CHECKPOINT_PAGES + 150);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
}

/* Without the thread (stopped), SQLite checkpoints in the commits again. */
TEST(after_stop_the_writer_checkpoints_itself)
{
	char dir[] = "/tmp/anvil-test-ckpt-XXXXXX", path[128];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/state.db", dir);
	sqlite3 *db = open_wal(path);
	struct checkpointer *c = NULL;
	CHECK_INT(checkpointer_start(db, path, &c), 0);
	checkpointer_stop(c);
	long long before = file_size(path);
	write_rows(db, CHECKPOINT_PAGES + 50);
	CHECK(file_size(path) > before + 1000 * 4000LL); /* no thread: the commit did it */
	CHECK_INT(sqlite3_close(db), SQLITE_OK);
	CHECK_INT(sql_int(path, "SELECT count(*) FROM t", NULL), CHECKPOINT_PAGES + 50);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
}

/* A database that cannot be opened a second time: the writer keeps
 * SQLite's own checkpoints, and says so by the return. */
TEST(a_checkpointer_that_cannot_open_leaves_the_writer_alone)
{
	struct checkpointer *c = NULL;
	sqlite3 *db = NULL;
	CHECK_INT(sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	CHECK(checkpointer_start(db, "/nonexistent-dir/state.db", &c) < 0);
	CHECK(c == NULL);
	sqlite3_close(db);
}

TEST_MAIN()
