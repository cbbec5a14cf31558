#include "fleet/hostlist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

#define ITEMS_MAX    64   /* comma-separated items in one range */
#define BOUND_MAX    9    /* digits of a bound: 999999999 fits any int */
#define NAME_MAX_LEN 1024 /* one expanded name */

struct item {
	int64_t lo, hi;
	int width; /* of lo as written */
};

/* One bracketed range: [1-3,7]. */
struct range {
	struct item v[ITEMS_MAX];
	int n;
	int64_t size;
};

/* The pattern cut into the text between ranges and the ranges. */
struct pattern {
	char text[HOSTLIST_MAX_RANGES + 1][NAME_MAX_LEN];
	struct range r[HOSTLIST_MAX_RANGES];
	int n; /* ranges; text[0..n] surround them */
};

/* A bound: 1 to BOUND_MAX digits at *s, which moves past them. */
static int bound(const char **s, int64_t *out, int *width)
{
	const char *b = *s;
	int64_t v = 0;
	while (**s >= '0' && **s <= '9' && *s - b < BOUND_MAX)
		v = v * 10 + (*(*s)++ - '0');
	if (*s == b || (**s >= '0' && **s <= '9'))
		return -1;
	*out = v;
	*width = (int)(*s - b);
	return 0;
}

/* "1-3,7]" at s: one range, up to and past its ']'. */
static int parse_range(const char **s, struct range *r, char *err, size_t errlen)
{
	r->n = 0;
	r->size = 0;
	for (;;) {
		struct item it;
		int w;
		if (r->n == ITEMS_MAX) {
			snprintf(err, errlen, "a range lists more than %d items", ITEMS_MAX);
			return -1;
		}
		if (bound(s, &it.lo, &it.width)) {
			snprintf(err, errlen,
			         "a range holds numbers of 1 to %d digits: [1-8], [01-18] or "
			         "[1,3,5-7]",
			         BOUND_MAX);
			return -1;
		}
		it.hi = it.lo;
		if (**s == '-') {
			(*s)++;
			if (bound(s, &it.hi, &w)) {
				snprintf(err, errlen, "'%lld-' needs a number after the '-'",
				         (long long)it.lo);
				return -1;
			}
		}
		if (it.hi < it.lo) {
			snprintf(err, errlen, "%lld-%lld runs backwards", (long long)it.lo,
			         (long long)it.hi);
			return -1;
		}
		r->v[r->n++] = it;
		r->size += it.hi - it.lo + 1;
		if (**s == ']') {
			(*s)++;
			return 0;
		}
		if (**s != ',') {
			snprintf(err, errlen, "%s",
			         **s ? "a range holds numbers, '-' and ','"
			             : "a '[' is not closed with ']'");
			return -1;
		}
		(*s)++;
	}
}

static int parse(const char *s, struct pattern *p, char *err, size_t errlen)
{
	memset(p, 0, sizeof(*p));
	if (!*s) {
		snprintf(err, errlen, "names nothing");
		return -1;
	}
	size_t len = 0, total = 0;
	while (*s) {
		if (*s == ']') {
			snprintf(err, errlen, "a ']' has no '['");
			return -1;
		}
		if (*s != '[') {
			if (++total >= NAME_MAX_LEN) {
				snprintf(err, errlen, "longer than %d characters",
				         NAME_MAX_LEN - 1);
				return -1;
			}
			p->text[p->n][len++] = *s++;
			continue;
		}
		if (p->n == HOSTLIST_MAX_RANGES) {
			snprintf(err, errlen, "more than %d ranges", HOSTLIST_MAX_RANGES);
			return -1;
		}
		s++;
		if (parse_range(&s, &p->r[p->n], err, errlen))
			return -1;
		p->n++;
		len = 0;
	}
	return 0;
}

/* The product of the ranges' sizes, or max + 1 once past max. */
static int64_t product(const struct pattern *p, int64_t max)
{
	int64_t count = 1;
	for (int i = 0; i < p->n; i++) {
		if (p->r[i].size > max || count > max / p->r[i].size)
			return max + 1;
		count *= p->r[i].size;
	}
	return count;
}

static int64_t count_parsed(const struct pattern *p, int64_t max, char *err, size_t errlen)
{
	int64_t n = product(p, max);
	if (n > max) {
		snprintf(err, errlen, "more than %lld names", (long long)max);
		return -1;
	}
	return n;
}

int64_t hostlist_count(const char *pattern, int64_t max, char *err, size_t errlen)
{
	struct pattern *p = xmalloc(sizeof(*p)); /* about 20 KiB: off the stack */
	int64_t n = parse(pattern, p, err, errlen) ? -1 : count_parsed(p, max, err, errlen);
	free(p);
	return n;
}

/* The number that position k (0-based) of range r stands for. */
static int64_t nth(const struct range *r, int64_t k, int *width)
{
	for (int i = 0; i < r->n; i++) {
		int64_t span = r->v[i].hi - r->v[i].lo + 1;
		if (k < span) {
			*width = r->v[i].width;
			return r->v[i].lo + k;
		}
		k -= span;
	}
	return -1; /* k < r->size: not reached */
}

/* Appends the total names of p to out. */
static void spell(const struct pattern *p, int64_t total, json_t *out)
{
	int64_t at[HOSTLIST_MAX_RANGES] = {0}; /* an odometer, the last range fastest */
	char name[NAME_MAX_LEN + HOSTLIST_MAX_RANGES * BOUND_MAX];
	for (int64_t made = 0; made < total; made++) {
		size_t len = (size_t)snprintf(name, sizeof(name), "%s", p->text[0]);
		for (int i = 0; i < p->n; i++) {
			int width;
			int64_t v = nth(&p->r[i], at[i], &width);
			len += (size_t)snprintf(name + len, sizeof(name) - len, "%0*lld%s", width,
			                        (long long)v, p->text[i + 1]);
		}
		json_array_append_new(out, json_string(name));
		for (int i = p->n - 1; i >= 0 && ++at[i] == p->r[i].size; i--)
			at[i] = 0;
	}
}

int hostlist_expand(const char *pattern, int64_t max, json_t *out, char *err, size_t errlen)
{
	struct pattern *p = xmalloc(sizeof(*p));
	int64_t total = parse(pattern, p, err, errlen) ? -1 : count_parsed(p, max, err, errlen);
	if (total >= 0)
		spell(p, total, out);
	free(p);
	return total < 0 ? -1 : 0;
}
