#include "agent/lease.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int lease_open(const char *work_dir)
{
	char path[4096];
	if (snprintf(path, sizeof(path), "%s/lease", work_dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0600); /* whatever an earlier umask made of it */
	return fd;
}

int lease_renew(int fd, int64_t end_ms, int64_t len_ms)
{
	char rec[LEASE_RECORD_LEN + 1];
	snprintf(rec, sizeof(rec), "%020lld %020lld %020lld\n", (long long)end_ms,
	         (long long)len_ms, (long long)end_ms);
	ssize_t w = pwrite(fd, rec, LEASE_RECORD_LEN, 0);
	return w == LEASE_RECORD_LEN ? 0 : w < 0 ? -errno : -EIO;
}

/* The 20 digits at p; -1 if any is not a digit. */
static int64_t digits20(const char *p)
{
	int64_t v = 0;
	for (int i = 0; i < 20; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	return v;
}

int lease_read(int fd, int64_t *end_ms, int64_t *len_ms)
{
	char rec[LEASE_RECORD_LEN];
	ssize_t n = pread(fd, rec, sizeof(rec), 0);
	if (n <= 0)
		return 0;
	if (n != LEASE_RECORD_LEN)
		return -1;
	int64_t a = digits20(rec), len = digits20(rec + 21), b = digits20(rec + 42);
	if (a < 0 || len < 0 || b < 0 || a != b)
		return -1;
	if (a == 0)
		return 0;
	*end_ms = a;
	*len_ms = len;
	return 1;
}

int64_t lease_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
