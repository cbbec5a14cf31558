/* sigsafe.h - writing a message where only async-signal-safe calls may
 * run: in the child of a fork or vfork of a multithreaded process, before
 * exec (the agent's shims, a rank's fence). No malloc, no stdio, no locks:
 * write(2) and constant tables. Any thread may call these.
 */
#ifndef ANVIL_SIGSAFE_H
#define ANVIL_SIGSAFE_H

/* Writes s to fd whole (short writes and EINTR retried; an error drops it). */
void sigsafe_put(int fd, const char *s);
/* Writes prefix, errno err's text and a newline. */
void sigsafe_put_errno(int fd, const char *prefix, int err);
/* Writes v's decimal text ending just before end; returns its start (at
 * most 20 characters before end). */
char *sigsafe_fmt_long(char *end, long v);

#endif
