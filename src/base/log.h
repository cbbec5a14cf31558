/* log.h - one line per event on stderr.
 *
 * Format: "2026-11-29T22:40:01.123Z info  server  message key=value ...".
 * The subsystem is set once per process (log_init). Thread-safe: each line
 * is written with a single write(2).
 */
#ifndef ANVIL_LOG_H
#define ANVIL_LOG_H

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

void log_init(const char *subsystem, enum log_level level);
void log_set_level(enum log_level level);
int log_level_parse(const char *s, enum log_level *out);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
