/* relay.h - splices two connected sockets both ways.
 *
 * The server and the agent carry an interactive stream (anvil shell,
 * attach, exec) as bytes: from the client's upgraded connection to the next
 * hop (the agent's upgraded connection, the session holder's Unix socket,
 * the exec helper's socketpair) and back, without reading them. relay_run()
 * does that with poll() and a buffer per direction, so a slow reader on one
 * side never stops the other direction. When one side closes or fails,
 * what is buffered for the other is still delivered, that end is passed on
 * (shutdown SHUT_WR), and the other direction goes on, for up to
 * RELAY_LINGER_MS in all, until it ends too: so a side's last words (the
 * session holder's output and exit status, sent as it closes) still reach
 * the client when the client's own bytes could no longer be delivered. It
 * closes neither fd.
 *
 * One call per stream, on the stream's own thread; no locks, no globals.
 */
#ifndef ANVIL_RELAY_H
#define ANVIL_RELAY_H

#include <stddef.h>
#include <stdint.h>

#define RELAY_BUF       (64 * 1024) /* per direction */
#define RELAY_LINGER_MS 2000

struct relay_stats {
	uint64_t a_to_b, b_to_a; /* bytes delivered */
};

/* Splices a and b (both made non-blocking) until both sides ended (or
 * RELAY_LINGER_MS after the first did, or one fails to take). to_a and
 * to_b are bytes already read from the other side (past an HTTP upgrade),
 * sent first. 0 when a side closed, or the negative errno of a failure on
 * either side. stats may be NULL. */
int relay_run(int a, int b, const void *to_a, size_t to_a_len, const void *to_b, size_t to_b_len,
              struct relay_stats *stats);

/* Writes all of data to the non-blocking fd, waiting up to timeout_ms in
 * all for room: 0, -ETIMEDOUT or a negative errno. */
int relay_write_all(int fd, const void *data, size_t len, int64_t timeout_ms);

#endif
