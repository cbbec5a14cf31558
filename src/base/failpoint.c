/* failpoint.c - the points armed by $ANVIL_FAILPOINT (failpoint.h). */
#include "base/failpoint.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

#define FAILPOINT_MAX      8
#define FAILPOINT_NAME_MAX 48

struct point {
	char name[FAILPOINT_NAME_MAX];
	int64_t at; /* the pass that fails, from 1 */
	atomic_llong passes;
};

static struct point points[FAILPOINT_MAX];
static int npoints;
static atomic_int armed = -1; /* -1: the variable not read yet; then 0 or 1 */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* One "NAME[@N]" item of len bytes: 0, or -1 when malformed. */
static int arm(const char *item, size_t len)
{
	const char *at = memchr(item, '@', len);
	size_t nlen = at ? (size_t)(at - item) : len;
	int64_t n = 1;
	char num[24];
	if (nlen == 0 || nlen >= FAILPOINT_NAME_MAX || npoints == FAILPOINT_MAX)
		return -1;
	if (at) {
		size_t dlen = len - nlen - 1;
		if (dlen == 0 || dlen >= sizeof(num))
			return -1;
		memcpy(num, at + 1, dlen);
		num[dlen] = '\0';
		if (parse_i64(num, 1, INT64_MAX, &n))
			return -1;
	}
	struct point *p = &points[npoints++];
	memcpy(p->name, item, nlen);
	p->name[nlen] = '\0';
	p->at = n;
	return 0;
}

static void read_env(void)
{
	const char *v = getenv(FAILPOINT_ENV);
	int bad = 0;
	for (const char *s = v; s && *s && !bad;) {
		size_t len = strcspn(s, ",");
		bad = arm(s, len) != 0;
		s += len + (s[len] == ',');
	}
	if (bad) {
		fprintf(stderr,
		        "anvil: %s='%.200s' is not NAME[@N][,NAME[@N]...]: no point armed\n",
		        FAILPOINT_ENV, v);
		npoints = 0;
	}
	atomic_store(&armed, npoints > 0);
}

int failpoint_hit(const char *name)
{
	if (atomic_load(&armed) == 0)
		return 0;
	pthread_once(&once, read_env);
	for (int i = 0; i < npoints; i++)
		if (strcmp(points[i].name, name) == 0)
			return atomic_fetch_add(&points[i].passes, 1) + 1 == points[i].at;
	return 0;
}

void failpoint_crash(const char *name)
{
	if (!failpoint_hit(name))
		return;
	static const char prefix[] = "anvil: failpoint ";
	static const char suffix[] = ": exiting now, as a crash would\n";
	/* write(2), not stdio: nothing buffered is flushed on the way out */
	ssize_t ignored = write(2, prefix, sizeof(prefix) - 1);
	ignored = write(2, name, strlen(name));
	ignored = write(2, suffix, sizeof(suffix) - 1);
	(void)ignored;
	_exit(FAILPOINT_EXIT);
}
