/* test_respawn.c - when `anvil up` starts a dead daemon again, and when it
 * gives up (cli/respawn.h). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "cli/respawn.h"

/* The daemon runs ran_ms from now_ms and dies: the verdict, the delay in
 * *delay (-1 when none was given). */
static enum respawn_verdict run_for(struct respawn *r, int64_t *now_ms, int64_t ran_ms,
                                    int64_t *delay)
{
	respawn_started(r, *now_ms);
	*now_ms += ran_ms;
	*delay = -1;
	enum respawn_verdict v = respawn_exited(r, *now_ms, delay);
	if (v == RESPAWN_AGAIN)
		*now_ms += *delay;
	return v;
}

TEST(the_delay_doubles_from_the_first_step_up_to_the_cap)
{
	struct respawn r = {0};
	int64_t now = 1000, delay;
	static const int64_t want[] = {500, 1000, 2000, 4000, 8000, 16000, 30000, 30000};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		/* 20 s: not a quick failure, so this never gives up */
		CHECK_INT(run_for(&r, &now, 20000, &delay), RESPAWN_AGAIN);
		CHECK_INT(delay, want[i]);
		CHECK_INT(respawn_capped(&r), want[i] == RESPAWN_MAX_MS);
		CHECK_INT(r.quick, 0);
	}
}

TEST(the_fifth_quick_failure_in_a_row_gives_up)
{
	struct respawn r = {0};
	int64_t now = 0, delay;
	for (int i = 1; i < RESPAWN_QUICK_LIMIT; i++) {
		CHECK_INT(run_for(&r, &now, 100, &delay), RESPAWN_AGAIN);
		CHECK_INT(r.quick, i);
	}
	CHECK_INT(run_for(&r, &now, RESPAWN_QUICK_MS - 1, &delay), RESPAWN_GIVE_UP);
	CHECK_INT(delay, -1); /* untouched */
}

TEST(a_longer_run_ends_the_row_of_quick_failures)
{
	struct respawn r = {0};
	int64_t now = 0, delay;
	for (int i = 1; i < RESPAWN_QUICK_LIMIT; i++)
		CHECK_INT(run_for(&r, &now, 0, &delay), RESPAWN_AGAIN);
	CHECK_INT(run_for(&r, &now, RESPAWN_QUICK_MS, &delay), RESPAWN_AGAIN);
	CHECK_INT(r.quick, 0);
	CHECK_INT(delay, 8000); /* the backoff goes on: it ran less than a minute */
	for (int i = 1; i < RESPAWN_QUICK_LIMIT; i++)
		CHECK_INT(run_for(&r, &now, 0, &delay), RESPAWN_AGAIN);
	CHECK_INT(run_for(&r, &now, 0, &delay), RESPAWN_GIVE_UP);
}

TEST(a_daemon_that_ran_a_minute_starts_over)
{
	struct respawn r = {0};
	int64_t now = 0, delay;
	for (int i = 0; i < 3; i++)
		run_for(&r, &now, 0, &delay);
	CHECK_INT(delay, 2000);
	CHECK_INT(run_for(&r, &now, RESPAWN_STEADY_MS, &delay), RESPAWN_AGAIN);
	CHECK_INT(delay, RESPAWN_FIRST_MS);
	CHECK_INT(r.quick, 0);
	CHECK_INT(run_for(&r, &now, 0, &delay), RESPAWN_AGAIN);
	CHECK_INT(delay, 2 * RESPAWN_FIRST_MS);
	CHECK_INT(r.quick, 1);
}

/* The status of a real child that ends as code says. */
static int status_of(int code)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (code < 0)
			raise(-code);
		_exit(code);
	}
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	return st;
}

TEST(a_status_in_words)
{
	char text[128];
	respawn_status_text(status_of(3), text, sizeof(text));
	CHECK_STR(text, "exited with status 3");
	respawn_status_text(status_of(0), text, sizeof(text));
	CHECK_STR(text, "exited with status 0");
	respawn_status_text(status_of(-SIGKILL), text, sizeof(text));
	CHECK_STR(text, "was killed by signal 9 (Killed)");
}

TEST_MAIN()
