/* test.h - the unit test runner: one process per test, assertions that
 * print both sides.
 *
 * A test file defines tests with TEST(name) { ... } and ends with
 * TEST_MAIN(). ctest runs the binary with a test name as argument (one
 * process per test; ctest applies the timeout); without an argument every
 * test runs, each in a forked child.
 */
#ifndef ANVIL_TEST_H
#define ANVIL_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*test_fn)(void);
struct test_case {
	const char *name;
	test_fn fn;
};

#define TEST_MAX 256
extern struct test_case test_cases[TEST_MAX];
extern int test_count;

#define TEST(tname)                                                                                \
	static void test_##tname(void);                                                            \
	__attribute__((constructor)) static void register_##tname(void)                            \
	{                                                                                          \
		test_cases[test_count].name = #tname;                                              \
		test_cases[test_count++].fn = test_##tname;                                        \
	}                                                                                          \
	static void test_##tname(void)

#define FAIL_AT(...)                                                                               \
	do {                                                                                       \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			FAIL_AT("CHECK(%s) failed", #cond);                                        \
	} while (0)

#define CHECK_INT(a, b)                                                                            \
	do {                                                                                       \
		long long va_ = (long long)(a), vb_ = (long long)(b);                              \
		if (va_ != vb_)                                                                    \
			FAIL_AT("%s == %s: %lld != %lld", #a, #b, va_, vb_);                       \
	} while (0)

#define CHECK_STR(a, b)                                                                            \
	do {                                                                                       \
		const char *sa_ = (a), *sb_ = (b);                                                 \
		if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0)                                         \
			FAIL_AT("%s == %s: \"%s\" != \"%s\"", #a, #b, sa_ ? sa_ : "(null)",        \
			        sb_ ? sb_ : "(null)");                                             \
	} while (0)

#define CHECK_CONTAINS(hay, needle)                                                                \
	do {                                                                                       \
		const char *h_ = (hay), *n_ = (needle);                                            \
		if (!h_ || !strstr(h_, n_))                                                        \
			FAIL_AT("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);         \
	} while (0)

#define TEST_MAIN()                                                                                \
	struct test_case test_cases[TEST_MAX];                                                     \
	int test_count;                                                                            \
	int main(int argc, char **argv)                                                            \
	{                                                                                          \
		if (argc > 1 && strcmp(argv[1], "--list") == 0) {                                  \
			for (int i = 0; i < test_count; i++)                                       \
				printf("%s\n", test_cases[i].name);                                \
			return 0;                                                                  \
		}                                                                                  \
		int failed = 0, ran = 0;                                                           \
		for (int i = 0; i < test_count; i++) {                                             \
			if (argc > 1 && strcmp(argv[1], test_cases[i].name) != 0)                  \
				continue;                                                          \
			ran++;                                                                     \
			fflush(NULL);                                                              \
			pid_t pid = fork();                                                        \
			if (pid == 0) {                                                            \
				test_cases[i].fn();                                                \
				exit(0);                                                           \
			}                                                                          \
			int st = 0;                                                                \
			waitpid(pid, &st, 0);                                                      \
			int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;                            \
			printf("%s %s\n", ok ? "PASS" : "FAIL", test_cases[i].name);               \
			failed += !ok;                                                             \
		}                                                                                  \
		if (ran == 0) {                                                                    \
			fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "");            \
			return 2;                                                                  \
		}                                                                                  \
		return failed ? 1 : 0;                                                             \
	}

#endif
