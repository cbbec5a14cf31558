/* attach.h - the client end of an interactive stream: `anvil shell`,
 * `anvil attach` and `anvil exec` (docs/api.md, "Streams").
 *
 * attach_run() opens POST /v1/jobs/ID/attach or /exec (base/upgrade.h),
 * sends the exec request first for an exec, then relays until the stream
 * ends: stdin (when forwarded) as STDIN frames, then STDIN_EOF at its end;
 * STDOUT and STDERR frames to fds 1 and 2; the window's size as RESIZE at
 * the start and on every SIGWINCH (when the stream is a terminal).
 *
 * The terminal: when the stream is one and stdin is a tty that is
 * forwarded, stdin is put in raw mode (termios; Ctrl-C, Ctrl-D, Ctrl-Z
 * travel as bytes to the remote terminal, which acts on them) and restored
 * on every way out: the end of the stream, detaching, SIGTERM, SIGHUP,
 * SIGINT, an exit() anywhere (atexit). With escape, Ctrl-] typed on such a
 * terminal detaches, as telnet's escape does; SIGTERM, SIGHUP and SIGINT
 * also detach (the remote session stays). Detaching from an exec closes it
 * (the helper hangs its command up).
 *
 * One thread; signal handlers only write to a self-pipe.
 */
#ifndef ANVIL_CLI_ATTACH_H
#define ANVIL_CLI_ATTACH_H

#include <jansson.h>
#include <stdint.h>

#include "cli/verb.h"

#define ATTACH_ESCAPE 0x1d /* Ctrl-] */

struct attach_opts {
	int64_t job;
	int64_t rank;
	const json_t *exec; /* the exec request (proto/wire.h wire_exec); NULL: attach */
	int tty;            /* the stream is a terminal (attach, or exec -t) */
	int forward_stdin;  /* read stdin and send it */
	int escape;         /* Ctrl-] detaches (attach) */
	/* > 0: while the server answers 409 (the rank does not run yet: a gang
	 * starting), try again for up to this many ms (`anvil _rsh`) */
	int64_t retry_conflict_ms;
};

enum attach_end {
	ATTACH_EXITED,   /* the remote command exited: code is its status */
	ATTACH_DETACHED, /* Ctrl-], or a signal (code: 128 + it, 0 for Ctrl-]) */
	ATTACH_REFUSED,  /* the server or node said no (printed); code: the exit status */
	ATTACH_LOST,     /* the stream ended without an exit (or broke) */
};

struct attach_result {
	enum attach_end end;
	int code;
};

/* Runs the stream to its end (v connected). Messages are printed here,
 * except what the caller says about a lost stream or a detach. */
struct attach_result attach_run(struct verb_ctx *v, const struct attach_opts *o);

/* The terminal's rows and cols (stdin's, else stdout's); 0 when neither is
 * a terminal. */
int attach_window(unsigned *rows, unsigned *cols);

#endif
