/* base/relay.h: both directions flow; a side that sends its last words and
 * closes without reading what was sent to it still gets them delivered
 * (the session holder's exit status, when a client's bytes to it can no
 * longer be written); a side's close is passed on to the other, which may
 * still answer; a side that never answers is left after the linger. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "base/relay.h"
#include "base/util.h"

struct run {
	int a, b, rc;
	struct relay_stats st;
};

static void *relay_thread(void *arg)
{
	struct run *r = arg;
	r->rc = relay_run(r->a, r->b, NULL, 0, NULL, 0, &r->st);
	return NULL;
}

/* Everything the fd gives until EOF (or 5 s), into out. */
static size_t read_all(int fd, char *out, size_t cap)
{
	size_t n = 0;
	int64_t end = now_ms() + 5000;
	while (n + 1 < cap && now_ms() < end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, (int)(end - now_ms())) <= 0)
			break;
		ssize_t k = read(fd, out + n, cap - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	out[n] = '\0';
	return n;
}

static void pairs(int a[2], int b[2])
{
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a), 0);
	CHECK_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b), 0);
}

TEST(last_words_of_a_side_that_closed_without_reading_arrive)
{
	int a[2], b[2];
	pairs(a, b);
	/* the client's resize frame is on its way; the holder has already
	 * said its last words and gone, without reading */
	CHECK_INT(write(a[1], "resize", 6), 6);
	CHECK_INT(write(b[1], "output+exit", 11), 11);
	close(b[1]);
	struct run r = {.a = a[0], .b = b[0]};
	pthread_t t;
	pthread_create(&t, NULL, relay_thread, &r);
	char got[64];
	read_all(a[1], got, sizeof(got));
	CHECK_STR(got, "output+exit");
	pthread_join(t, NULL);
	CHECK_INT(r.st.b_to_a, 11);
	close(a[0]);
	close(a[1]);
	close(b[0]);
}

TEST(a_close_is_passed_on_and_the_answer_comes_back)
{
	int a[2], b[2];
	pairs(a, b);
	struct run r = {.a = a[0], .b = b[0]};
	pthread_t t;
	pthread_create(&t, NULL, relay_thread, &r);
	CHECK_INT(write(a[1], "bye", 3), 3);
	shutdown(a[1], SHUT_WR); /* the client is done sending */
	char got[64];
	read_all(b[1], got, sizeof(got)); /* ends: the relay passed the end on */
	CHECK_STR(got, "bye");
	CHECK_INT(write(b[1], "ok", 2), 2); /* and the other side still answers */
	close(b[1]);
	read_all(a[1], got, sizeof(got));
	CHECK_STR(got, "ok");
	pthread_join(t, NULL);
	CHECK_INT(r.rc, 0);
	CHECK_INT(r.st.a_to_b, 3);
	CHECK_INT(r.st.b_to_a, 2);
	close(a[0]);
	close(a[1]);
	close(b[0]);
}

TEST(a_side_that_never_ends_is_left_after_the_linger)
{
	int a[2], b[2];
	pairs(a, b);
	struct run r = {.a = a[0], .b = b[0]};
	pthread_t t;
	int64_t start = now_ms();
	pthread_create(&t, NULL, relay_thread, &r);
	close(a[1]); /* the client went; b's side ignores the end */
	pthread_join(t, NULL);
	int64_t took = now_ms() - start;
	CHECK(took < RELAY_LINGER_MS + 1000);
	close(a[0]);
	close(b[0]);
	close(b[1]);
}

TEST_MAIN()
