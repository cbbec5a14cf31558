/* exec_fixture.h - what the executor's tests (test_exec.c,
 * test_exec_limits.c, test_cgroup_v2.c) share: waiting for a rank to end,
 * reading its log, and fake GPU device nodes. Each test file keeps its own
 * work dir and setup (they differ in cgroup mode and spares).
 */
#ifndef ANVIL_EXEC_FIXTURE_H
#define ANVIL_EXEC_FIXTURE_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "../test.h"
#include "agent/exec.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/util.h"

/* Polls until rank 0 of attempt is no longer running; fails after timeout_ms. */
static inline struct exec_status exec_fx_wait_final(struct exec *e, int64_t attempt,
                                                    int64_t timeout_ms)
{
	struct exec_status st;
	int64_t end = now_ms() + timeout_ms;
	for (;;) {
		exec_poll(e);
		CHECK_INT(exec_find(e, attempt, 0, &st), 0);
		if (st.state != EXEC_RUNNING)
			return st;
		if (now_ms() > end)
			FAIL_AT("attempt %lld still running after %lld ms", (long long)attempt,
			        (long long)timeout_ms);
		sleep_ms(5);
	}
}

/* Rank 0's stdout or stderr log of attempt, under work (to free). */
static inline char *exec_fx_stream(const char *work, int64_t attempt, enum exec_stream stream)
{
	char *path = exec_log_path(work, attempt, 0, stream);
	struct buf b;
	buf_init(&b);
	CHECK_INT(read_file(path, 1 << 20, &b), 0);
	free(path);
	buf_adds(&b, ""); /* an empty log is "", not NULL */
	return buf_detach(&b);
}

/* Rank 0's stdout log of attempt, then its stderr log (to free). */
static inline char *exec_fx_log(const char *work, int64_t attempt)
{
	char *out = exec_fx_stream(work, attempt, EXEC_STDOUT);
	char *err = exec_fx_stream(work, attempt, EXEC_STDERR);
	char *both = xasprintf("%s%s", out, err);
	free(out);
	free(err);
	return both;
}

/* Fake GPUs in work/dev: char nodes nv0 and nv1 (195:0, 195:1) and nv255
 * (nvidiactl, 195:255) with no driver behind them. Opening one the rank is
 * allowed fails with ENXIO; one it is denied, with EPERM. Returns the dir
 * (to free). Needs root. */
static inline char *exec_fx_gpu_nodes(const char *work)
{
	char *dir = xasprintf("%s/dev", work);
	CHECK_INT(mkdir_p(dir, 0755), 0);
	static const int minors[] = {0, 1, 255};
	for (int i = 0; i < 3; i++) {
		char *p = xasprintf("%s/nv%d", dir, minors[i]);
		if (mknod(p, S_IFCHR | 0666, makedev(195, (unsigned)minors[i])) != 0)
			FAIL_AT("mknod %s: %s (the test runs as root)", p, strerror(errno));
		free(p);
	}
	return dir;
}

#endif
