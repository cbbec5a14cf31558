#include "base/err.h"

#include <errno.h>
#include <string.h>

struct err_entry {
	int code;
	const char *name;
	const char *msg;
	int http;
};

static const struct err_entry table[] = {
        {ERR_NOTFOUND, "not_found", "not found", 404},
        {ERR_CONFLICT, "conflict", "conflicts with the current state", 409},
        {ERR_INVALID, "invalid", "invalid input", 400},
        {ERR_TOOBIG, "too_big", "too large", 413},
        {ERR_TIMEOUT, "timeout", "timed out", 504},
        {ERR_UPSTREAM, "upstream", "upstream failure", 502},
        {ERR_BUSY, "busy", "busy, try again", 503},
        {ERR_AUTH, "unauthorized", "missing or wrong token", 401},
        {ERR_UNFIT, "unfit", "can never fit this cluster", 422},
        {-ENOENT, "not_found", "no such file or directory", 404},
        {-ENOMEM, "no_memory", "out of memory", 503},
        {-EIO, "io", "input/output error", 500},
        /* the server's disk: the request was fine, the room is not there */
        {-ENOSPC, "no_space", "no space left on the server's disk", 507},
        {-EDQUOT, "no_space", "the server's disk quota is exceeded", 507},
};

static const struct err_entry *find(int code)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (table[i].code == code)
			return &table[i];
	return NULL;
}

const char *err_name(int code)
{
	const struct err_entry *e = find(code);
	if (e)
		return e->name;
	return code == 0 ? "ok" : "internal";
}

const char *err_msg(int code)
{
	const struct err_entry *e = find(code);
	if (e)
		return e->msg;
	if (code < 0 && code > -4096)
		return strerror(-code);
	return code == 0 ? "ok" : "internal error";
}

int err_http(int code)
{
	const struct err_entry *e = find(code);
	if (e)
		return e->http;
	return code == 0 ? 200 : 500;
}
