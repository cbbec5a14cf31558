/* util.h - time, random tokens and small file helpers.
 *
 * All functions are thread-safe. File helpers return 0 or a negative errno.
 */
#ifndef ANVIL_UTIL_H
#define ANVIL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

int64_t now_ms(void);  /* monotonic milliseconds */
int64_t now_us(void);  /* monotonic microseconds */
int64_t wall_ms(void); /* milliseconds since the epoch */
void sleep_ms(int64_t ms);

/* Fills out with 2*bytes hex characters from the kernel's CSPRNG. */
void random_hex(char *out, size_t bytes);
/* 1 when the secrets a and b are equal, compared in time that does not
 * depend on where they differ (a token, a node secret); NULL is no secret
 * and equals nothing. */
int secret_equal(const char *a, const char *b);
/* 1 when path is dir or lies below it (both absolute and normalized, or
 * both relative alike): "/a/b" is within "/a" and "/", "/ab" is not. */
int path_within(const char *path, const char *dir);

int mkdir_p(const char *path, unsigned mode);
/* Writes data to path through a temporary file and rename, with fsync.
 * The file has exactly mode, whatever the umask, and is never readable by
 * more than mode allows, not even for a moment. */
int write_file_atomic(const char *path, const char *data, size_t len, unsigned mode);
/* Takes from path's permission bits each one mode lacks (0755 with 0700
 * becomes 0700; 0644 with 0600 becomes 0600; 0400 stays): 1 when it
 * changed them (*was, unless NULL: the bits before), 0 when there was
 * nothing to take, -ENOENT when path is not there. Follows symbolic
 * links. For files written before their mode was made strict. */
int tighten_mode(const char *path, unsigned mode, unsigned *was);
/* 1 when item is one of the items of list, which any character of seps
 * separates ("a,b" with ","; "cpu memory\n" with " \n"); empty items are
 * skipped. list may be NULL. */
int list_has(const char *list, const char *seps, const char *item);
/* Reads at most cap bytes of path into out; -EFBIG past cap. */
int read_file(const char *path, size_t cap, struct buf *out);
/* fd moved to 3 or above, close-on-exec (0-2 belong to the process's
 * stdio, which a child's dup2 would clobber); fd itself when it already
 * is, or a negative value passed through. */
int fd_above_stdio(int fd);
/* Removes a directory tree (best effort); 0 or the first negative errno. */
int rm_rf(const char *path);

/* snprintf for text that ends up in JSON, which must be UTF-8: where the
 * result is cut short, a UTF-8 sequence cut in two at the end is dropped
 * too, so UTF-8 in stays UTF-8 out. Returns what snprintf does. */
int text_printf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Where the last n lines of s[0, len) begin (a last line without its
 * newline counts as a line): 0 when s has n lines or fewer, len when
 * n <= 0. */
size_t text_last_lines(const char *s, size_t len, int64_t n);

/* Parses a decimal integer in [min, max]; 0 or ERR_INVALID. */
int parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
/* "1.5s", "200ms", "3m", "2h" or a bare number of seconds into milliseconds. */
int parse_duration_ms(const char *s, int64_t *out);

/* Raises the soft limit on open files to the hard one (a daemon holds a
 * socket per connection), and keeps the soft limit it found for
 * nofile_restore. *before, *after: the soft limit then and now. 0 or
 * -errno (the limit unchanged). Once, at a daemon's start. */
int nofile_raise(int64_t *before, int64_t *after);
/* Back to the soft limit nofile_raise found (nothing if it did not run):
 * in a child, before it execs a user's command, which should get the
 * limit it would have had. Async-signal-safe. */
void nofile_restore(void);

/* Catches SIGTERM and SIGINT for an orderly stop: stop_signal() is then the
 * signal caught, 0 until one is. For a process's main loop. */
void stop_signals_catch(void);
int stop_signal(void);

#endif
