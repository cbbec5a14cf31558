#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static char subsys[16] = "anvil";
static enum log_level current = LOG_INFO;
static const char *names[] = {"error", "warn", "info", "debug"};

void log_init(const char *subsystem, enum log_level level)
{
	snprintf(subsys, sizeof(subsys), "%s", subsystem);
	current = level;
}

void log_set_level(enum log_level level)
{
	current = level;
}

int log_level_parse(const char *s, enum log_level *out)
{
	for (int i = 0; i < 4; i++)
		if (strcasecmp(s, names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	return -1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (level > current)
		return;
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %-6s ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000000, names[level], subsys);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
