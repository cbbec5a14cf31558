/* The log pool: files made ahead are moved into place, never over an
 * existing log, and an earlier agent's leftovers are reused, not deleted. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "agent/logpool.h"
#include "base/util.h"

static char dir[64], pool[96];

static int count_files(void)
{
	int n = 0;
	DIR *d = opendir(pool);
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/anvil-logpool-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(pool, sizeof(pool), "%s/spare-logs", dir);
}

static void wait_full(void)
{
	for (int i = 0; i < 5000 && count_files() < LOGPOOL_TARGET; i++)
		usleep(2000);
	CHECK_INT(count_files(), LOGPOOL_TARGET);
}

TEST(take_moves_a_ready_file_into_place)
{
	setup();
	struct logpool *p;
	CHECK_INT(logpool_start(pool, &p), 0);
	wait_full();
	char path[160];
	snprintf(path, sizeof(path), "%s/7-0.log", dir);
	int fd = logpool_take(p, path);
	CHECK(fd >= 3);
	CHECK_INT((int)write(fd, "hello\n", 6), 6);
	close(fd);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file(path, 100, &b), 0);
	CHECK_STR(b.data, "hello\n");
	buf_cleanup(&b);
	CHECK(logpool_taken(p) == 1);
	/* the thread makes up the one taken */
	wait_full();
	/* an existing log is never replaced: the rank ran here */
	CHECK_INT(logpool_take(p, path), -EEXIST);
	buf_init(&b);
	CHECK_INT(read_file(path, 100, &b), 0);
	CHECK_STR(b.data, "hello\n");
	buf_cleanup(&b);
	CHECK_INT(count_files(), LOGPOOL_TARGET);
	logpool_stop(p);
	rm_rf(dir);
}

TEST(leftovers_are_reused_not_deleted)
{
	setup();
	struct logpool *p;
	CHECK_INT(logpool_start(pool, &p), 0);
	wait_full();
	logpool_stop(p);
	ino_t made[LOGPOOL_TARGET];
	int nmade = 0;
	DIR *d = opendir(pool);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' && nmade < LOGPOOL_TARGET)
			made[nmade++] = de->d_ino;
	closedir(d);
	CHECK_INT(nmade, LOGPOOL_TARGET);
	CHECK_INT(logpool_start(pool, &p), 0);
	usleep(50000);
	CHECK_INT(count_files(), LOGPOOL_TARGET); /* none made, none removed */
	char path[160];
	snprintf(path, sizeof(path), "%s/8-1.log", dir);
	int fd = logpool_take(p, path);
	CHECK(fd >= 3);
	close(fd);
	struct stat after;
	CHECK_INT(stat(path, &after), 0);
	/* the taken file is one the first pool made */
	int found = 0;
	for (int i = 0; i < nmade; i++)
		found |= made[i] == after.st_ino;
	CHECK(found);
	logpool_stop(p);
	rm_rf(dir);
}

TEST(a_missing_directory_path_means_no_pool)
{
	struct logpool *p = NULL;
	CHECK(logpool_start("/proc/anvil-no-such/spare-logs", &p) < 0);
	CHECK(p == NULL);
}

TEST_MAIN()
