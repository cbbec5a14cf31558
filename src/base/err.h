/* err.h - the one error table of anvil.
 *
 * Every function that can fail returns int: 0 on success, a negative code
 * on failure. Codes are negated errno values (-ENOENT, -EIO, ...) or one of
 * anvil's own codes below, which sit above the errno range. err_name(),
 * err_msg() and err_http() map any code to a stable name, a message and the
 * HTTP status an API handler answers with. Thread-safe: pure functions.
 */
#ifndef ANVIL_ERR_H
#define ANVIL_ERR_H

enum {
	ERR_NOTFOUND = -1000, /* a named thing does not exist */
	ERR_CONFLICT = -1001, /* the request contradicts the current state */
	ERR_INVALID = -1002,  /* the request or input is malformed */
	ERR_TOOBIG = -1003,   /* a size or count beyond its cap */
	ERR_TIMEOUT = -1004,  /* a deadline passed */
	ERR_UPSTREAM = -1005, /* a peer or upstream failed or answered badly */
	ERR_BUSY = -1006,     /* try again later */
	ERR_AUTH = -1007,     /* missing or wrong credentials */
	ERR_UNFIT = -1008,    /* a job can never fit this cluster */
};

const char *err_name(int code);
const char *err_msg(int code);
int err_http(int code);

#endif
