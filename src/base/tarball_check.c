/* tarball_check.c - what an archive may hold (tarball.h, tarball_check):
 * its headers read here, without tar, and every member judged before tar
 * unpacks the archive and after it packed one.
 *
 * The reader knows what GNU tar writes and reads: ustar headers (the POSIX
 * prefix field included), GNU long names and link targets ('L', 'K') and
 * POSIX extended headers ('x': path, linkpath, size). It stops where GNU
 * tar stops, at the first all-zero block. Whatever it cannot read with
 * certainty (a bad checksum, a global extended header, a sparse file, a
 * link or directory that carries data) is refused rather than guessed at,
 * so that tar never unpacks a member this check did not see.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/mem.h"
#include "base/tarball.h"

#define BLOCK       512
#define MEMBERS_MAX 4000000   /* members of one archive */
#define NAME_BYTES  4096      /* a member's name or link target */
#define PAX_BYTES   (1 << 20) /* an extended header's records */
#define HOPS_MAX    40        /* symbolic links followed in a row, as Linux's */

enum kind { KIND_FILE, KIND_DIR, KIND_SYMLINK, KIND_HARDLINK };

struct member {
	char *name;   /* normalized: no "." or empty parts, no '/' at either end; "" is the root */
	char *target; /* a link's, as written; NULL for others */
	enum kind kind;
	size_t index; /* its place in the archive */
	int64_t data; /* a file's: where its bytes start, and how many */
	int64_t size;
};

struct check {
	int fd;
	int64_t off;
	struct member *v; /* archive order */
	size_t n, cap;
	struct member **sorted; /* by name, for lookups */
	/* what extended headers said of the next member; NULL or -1: nothing */
	char *next_name, *next_target;
	int64_t next_size;
	char *err;
	size_t errlen;
};

/* A name as it can be shown on one line: control bytes as '?', cut at 200. */
static void shown(const char *s, char out[204])
{
	size_t n = 0;
	for (; s[n] && n < 200; n++)
		out[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
	if (s[n])
		out[n++] = '.', out[n++] = '.', out[n++] = '.';
	out[n] = '\0';
}

__attribute__((format(printf, 2, 3))) static int refuse(struct check *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return ERR_INVALID;
}

/* "'NAME' is a symbolic link to 'TARGET'" and why that is refused. */
static int refuse_link(struct check *c, const struct member *m, const char *why)
{
	char name[204], target[204];
	shown(m->name, name);
	shown(m->target, target);
	return refuse(c, "'%s' is a %s link to '%s', %s", name,
	              m->kind == KIND_SYMLINK ? "symbolic" : "hard", target, why);
}

/* ---- reading the headers ---- */

/* A numeric field: octal digits (spaces and NULs around them), or GNU's
 * base-256 (high bit set) for a size past 8 GiB. -1 when it is neither. */
static int64_t number(const unsigned char *p, size_t n)
{
	if (p[0] & 0x80) {
		if (p[0] != 0x80) /* negative, or too large to matter */
			return -1;
		int64_t v = 0;
		for (size_t i = 1; i < n; i++) {
			if (v > (INT64_MAX >> 8))
				return -1;
			v = (v << 8) | p[i];
		}
		return v;
	}
	size_t i = 0;
	while (i < n && p[i] == ' ')
		i++;
	int64_t v = 0;
	int digits = 0;
	for (; i < n && p[i] >= '0' && p[i] <= '7'; i++, digits++) {
		if (v > (INT64_MAX >> 3))
			return -1;
		v = v * 8 + (p[i] - '0');
	}
	for (; i < n; i++)
		if (p[i] != ' ' && p[i] != '\0')
			return -1;
	return digits ? v : -1;
}

/* The header's checksum holds (as unsigned bytes, or as signed ones, which
 * old tars summed). */
static int checksum_ok(const unsigned char *h)
{
	int64_t want = number(h + 148, 8), u = 0, s = 0;
	for (int i = 0; i < BLOCK; i++) {
		unsigned char b = i >= 148 && i < 156 ? ' ' : h[i];
		u += b;
		s += (signed char)b;
	}
	return want >= 0 && (want == u || want == s);
}

static int all_zero(const unsigned char *h)
{
	for (int i = 0; i < BLOCK; i++)
		if (h[i])
			return 0;
	return 1;
}

/* Reads exactly len bytes at the current offset: 0, 1 at the end of the
 * file before any byte, or an error. */
static int read_at(struct check *c, void *out, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = pread(c->fd, (char *)out + got, len - got, c->off + (int64_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			refuse(c, "cannot read it: %s", strerror(e));
			return -e;
		}
		if (r == 0) {
			if (got == 0)
				return 1;
			return refuse(c,
			              "it ends inside the block at byte %lld: not a tar "
			              "archive, or one cut short",
			              (long long)c->off);
		}
		got += (size_t)r;
	}
	return 0;
}

static int64_t blocks_of(int64_t size)
{
	return (size + BLOCK - 1) / BLOCK * BLOCK;
}

/* The data of an extended header (size bytes after the header at c->off),
 * NUL-terminated, in *out; at most cap bytes. */
static int read_data(struct check *c, int64_t size, size_t cap, const char *what, char **out)
{
	if (size < 0 || (uint64_t)size > cap)
		return refuse(c, "the %s at byte %lld is %lld bytes long: at most %zu", what,
		              (long long)c->off, (long long)size, cap);
	char *d = xmalloc((size_t)size + 1);
	c->off += BLOCK;
	int rc = read_at(c, d, (size_t)size);
	c->off -= BLOCK;
	if (rc == 1)
		rc = refuse(c, "it ends inside the %s at byte %lld", what, (long long)c->off);
	if (rc) {
		free(d);
		return rc;
	}
	d[size] = '\0';
	*out = d;
	return 0;
}

static void take(char **slot, char *value)
{
	free(*slot);
	*slot = value;
}

/* One "LEN key=value\n" record after another (POSIX pax): path,
 * linkpath and size are kept for the next member; sparse files are
 * refused; the rest (times, owners, charsets) changes nothing here. */
static int pax_records(struct check *c, const char *d, size_t len)
{
	size_t at = 0;
	while (at < len && d[at]) {
		char *end = NULL;
		unsigned long n = strtoul(d + at, &end, 10);
		const char *eq =
		        end && *end == ' ' ? memchr(end, '=', len - (size_t)(end - d)) : NULL;
		if (!eq || n < 5 || n > len - at || d[at + n - 1] != '\n' || eq > d + at + n - 1)
			return refuse(c, "the extended header at byte %lld is malformed",
			              (long long)c->off);
		const char *key = end + 1, *val = eq + 1;
		size_t klen = (size_t)(eq - key), vlen = (size_t)(d + at + n - 1 - val);
		if (klen == 4 && memcmp(key, "path", 4) == 0)
			take(&c->next_name, xstrndup(val, vlen));
		else if (klen == 8 && memcmp(key, "linkpath", 8) == 0)
			take(&c->next_target, xstrndup(val, vlen));
		else if (klen == 4 && memcmp(key, "size", 4) == 0) {
			char *num = xstrndup(val, vlen), *e = NULL;
			errno = 0;
			long long s = strtoll(num, &e, 10);
			int bad = errno || !*num || *e || s < 0;
			free(num);
			if (bad)
				return refuse(c, "the extended header at byte %lld has a bad size",
				              (long long)c->off);
			c->next_size = s;
		} else if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0) {
			return refuse(c,
			              "the member after byte %lld is a sparse file: an archive "
			              "holds only regular files, directories and symbolic links",
			              (long long)c->off);
		}
		at += n;
	}
	return 0;
}

/* The header's own name: POSIX ustar's prefix "/" name, else the name. */
static char *header_name(const unsigned char *h)
{
	int posix = memcmp(h + 257, "ustar\0", 6) == 0;
	size_t plen = posix ? strnlen((const char *)h + 345, 155) : 0;
	size_t nlen = strnlen((const char *)h, 100);
	if (!plen)
		return xstrndup((const char *)h, nlen);
	return xasprintf("%.*s/%.*s", (int)plen, h + 345, (int)nlen, h);
}

static const char *type_name(unsigned char t)
{
	switch (t) {
	case '3': return "character device";
	case '4': return "block device";
	case '6': return "FIFO";
	case '7': return "contiguous file";
	case 'D': return "GNU directory dump";
	case 'M': return "multi-volume continuation";
	case 'N': return "GNU old long name";
	case 'S': return "sparse file";
	case 'V': return "volume label";
	case 'g': return "global extended header";
	default: return NULL;
	}
}

/* The name, normalized (struct member), into *out; or why it cannot be. */
static const char *normalize(const char *raw, char **out)
{
	if (raw[0] == '/')
		return "its name is absolute";
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "");
	for (const char *p = raw; *p;) {
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			buf_cleanup(&b);
			return "its name holds '..'";
		}
		if (len && !(len == 1 && p[0] == '.')) {
			if (b.len)
				buf_add(&b, "/", 1);
			buf_add(&b, p, len);
		}
		p += len + (p[len] == '/');
	}
	*out = buf_detach(&b);
	return NULL;
}

/* The member whose header is at c->off, with what extended headers said. */
static int add_member(struct check *c, const unsigned char *h, enum kind kind, int64_t size)
{
	char *raw = c->next_name ? xstrdup(c->next_name) : header_name(h);
	char *name = NULL, pretty[204];
	const char *why = normalize(raw, &name);
	shown(raw, pretty);
	free(raw);
	if (why)
		return refuse(c, "'%s': %s", pretty, why);
	static const char *const kinds[] = {"file", "directory", "symbolic link", "hard link"};
	int rc = 0;
	if (!*name && kind != KIND_DIR)
		rc = refuse(c, "a %s at byte %lld has no name", kinds[kind], (long long)c->off);
	else if (kind != KIND_FILE && size != 0)
		rc = refuse(c, "'%s' is a %s that carries %lld bytes of data", pretty, kinds[kind],
		            (long long)size);
	else if (c->n == MEMBERS_MAX)
		rc = refuse(c, "it holds more than %d members", MEMBERS_MAX);
	if (rc) {
		free(name);
		return rc;
	}
	XGROW(c->v, c->n, c->cap);
	struct member *m = &c->v[c->n];
	*m = (struct member){
	        .name = name, .kind = kind, .index = c->n, .data = c->off + BLOCK, .size = size};
	if (kind == KIND_SYMLINK || kind == KIND_HARDLINK)
		m->target = c->next_target ? xstrdup(c->next_target)
		                           : xstrndup((const char *)h + 157, 100);
	c->n++;
	return 0;
}

/* One header at c->off: 0 and c->off past its member, 1 at the end, or
 * an error. */
static int read_header(struct check *c)
{
	unsigned char h[BLOCK];
	int rc = read_at(c, h, BLOCK);
	if (rc == 1 || (rc == 0 && all_zero(h)))
		return c->next_name || c->next_target || c->next_size >= 0
		               ? refuse(c, "it ends after an extended header, before its member")
		               : 1;
	if (rc)
		return rc;
	if (!checksum_ok(h))
		return refuse(c,
		              "the header at byte %lld has a bad checksum: not a tar archive, "
		              "or a compressed one",
		              (long long)c->off);
	int64_t size = number(h + 124, 12);
	if (size < 0)
		return refuse(c, "the header at byte %lld has a bad size", (long long)c->off);
	unsigned char t = h[156];
	char *data = NULL;
	switch (t) {
	case 'L':
	case 'K':
		rc = read_data(c, size, NAME_BYTES, t == 'L' ? "long name" : "long link target",
		               &data);
		if (rc == 0)
			take(t == 'L' ? &c->next_name : &c->next_target, data);
		c->off += BLOCK + blocks_of(size);
		return rc;
	case 'x':
		rc = read_data(c, size, PAX_BYTES, "extended header", &data);
		if (rc == 0)
			rc = pax_records(c, data, (size_t)size);
		free(data);
		c->off += BLOCK + blocks_of(size);
		return rc;
	case '0':
	case '\0': rc = add_member(c, h, KIND_FILE, c->next_size >= 0 ? c->next_size : size); break;
	case '5': rc = add_member(c, h, KIND_DIR, c->next_size >= 0 ? c->next_size : size); break;
	case '2':
		rc = add_member(c, h, KIND_SYMLINK, c->next_size >= 0 ? c->next_size : size);
		break;
	case '1':
		rc = add_member(c, h, KIND_HARDLINK, c->next_size >= 0 ? c->next_size : size);
		break;
	default: {
		char *raw = c->next_name ? xstrdup(c->next_name) : header_name(h), pretty[204];
		shown(raw, pretty);
		free(raw);
		const char *what = type_name(t);
		if (what)
			return refuse(c,
			              "'%s' is a %s: an archive holds only regular files, "
			              "directories and symbolic links",
			              pretty, what);
		return refuse(c,
		              "'%s' is a member of type '%c' (byte %u): an archive holds only "
		              "regular files, directories and symbolic links",
		              pretty, t >= 0x20 && t < 0x7f ? t : '?', t);
	}
	}
	if (rc)
		return rc;
	if (c->next_size >= 0)
		size = c->next_size;
	c->off += BLOCK + blocks_of(size);
	take(&c->next_name, NULL);
	take(&c->next_target, NULL);
	c->next_size = -1;
	return 0;
}

/* ---- judging the members ---- */

static int by_name(const void *a, const void *b)
{
	return strcmp((*(struct member *const *)a)->name, (*(struct member *const *)b)->name);
}

static const struct member *lookup(const struct check *c, const char *name)
{
	struct member key = {.name = (char *)name}, *kp = &key;
	struct member **m = bsearch(&kp, c->sorted, c->n, sizeof(*c->sorted), by_name);
	return m ? *m : NULL;
}

static const struct member *symlink_at(const struct check *c, const char *name)
{
	const struct member *m = lookup(c, name);
	return m && m->kind == KIND_SYMLINK ? m : NULL;
}

/* Where a symbolic link in directory dir (normalized) to target leads,
 * on the tree the archive unpacks into (every member where its name says,
 * since none lies under a symbolic link): 0 inside, else why not. A path
 * that names nothing in the archive is taken as directories. */
static const char *resolve(const struct check *c, const char *dir, const char *target)
{
	struct buf cur;
	buf_init(&cur);
	buf_adds(&cur, dir);
	char *rest = xstrdup(target);
	const char *why = NULL;
	int hops = 0;
	size_t at = 0;
	while (!why && rest[at]) {
		size_t len = strcspn(rest + at, "/");
		const char *part = rest + at;
		size_t next = at + len + (rest[at + len] == '/');
		if (len == 0 || (len == 1 && part[0] == '.')) {
			at = next;
		} else if (len == 2 && part[0] == '.' && part[1] == '.') {
			if (cur.len == 0) {
				why = "which leads outside the archive";
				break;
			}
			char *slash = strrchr(cur.data, '/');
			cur.len = slash ? (size_t)(slash - cur.data) : 0;
			cur.data[cur.len] = '\0';
			at = next;
		} else {
			size_t before = cur.len;
			if (cur.len)
				buf_add(&cur, "/", 1);
			buf_add(&cur, part, len);
			const struct member *link = symlink_at(c, cur.data);
			if (!link) {
				at = next;
				continue;
			}
			if (++hops > HOPS_MAX)
				why = "which goes through more than 40 symbolic links (a loop)";
			else if (link->target[0] == '/')
				why = "which leads outside the archive (through an absolute link)";
			cur.len = before;
			cur.data[cur.len] = '\0';
			char *joined = xasprintf("%s/%s", link->target, rest + next);
			free(rest);
			rest = joined;
			at = 0;
		}
	}
	free(rest);
	buf_cleanup(&cur);
	return why;
}

/* A member that lies under a symbolic link of the archive would be
 * written through it: refused, so that every member is where its name
 * says and the links can be judged on that tree. */
static int under_symlink(struct check *c, const struct member *m)
{
	char *name = xstrdup(m->name);
	int rc = 0;
	for (char *s = strchr(name, '/'); s && !rc; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (symlink_at(c, name)) {
			char a[204], b[204];
			shown(m->name, a);
			shown(name, b);
			rc = refuse(c, "'%s' lies under '%s', a symbolic link in the archive", a,
			            b);
		}
		*s = '/';
	}
	free(name);
	return rc;
}

static int judge_symlink(struct check *c, const struct member *m)
{
	if (!m->target[0])
		return refuse_link(c, m, "which is empty");
	if (m->target[0] == '/')
		return refuse_link(c, m, "which is absolute: outside the archive");
	char *dir = xstrdup(m->name), *slash = strrchr(dir, '/');
	*(slash ? slash : dir) = '\0';
	const char *why = resolve(c, dir, m->target);
	free(dir);
	return why ? refuse_link(c, m, why) : 0;
}

/* A hard link names a regular file before it in the archive (a name from
 * the archive's root, as tar stores it). */
static int judge_hardlink(struct check *c, const struct member *m)
{
	char *target = NULL;
	const char *why = normalize(m->target, &target);
	const struct member *t = why ? NULL : lookup(c, target);
	free(target);
	if (why)
		return refuse_link(c, m, "outside the archive");
	if (!t || t->kind != KIND_FILE || t->index > m->index)
		return refuse_link(c, m, "which is not a regular file before it in the archive");
	return 0;
}

static int judge(struct check *c)
{
	c->sorted = xcalloc(c->n ? c->n : 1, sizeof(*c->sorted));
	for (size_t i = 0; i < c->n; i++)
		c->sorted[i] = &c->v[i];
	qsort(c->sorted, c->n, sizeof(*c->sorted), by_name);
	for (size_t i = 1; i < c->n; i++)
		if (strcmp(c->sorted[i - 1]->name, c->sorted[i]->name) == 0) {
			char a[204];
			shown(c->sorted[i]->name[0] ? c->sorted[i]->name : ".", a);
			return refuse(c, "'%s' is in it twice", a);
		}
	int rc = 0;
	for (size_t i = 0; i < c->n && rc == 0; i++) {
		const struct member *m = &c->v[i];
		rc = under_symlink(c, m);
		if (rc == 0 && m->kind == KIND_SYMLINK)
			rc = judge_symlink(c, m);
		else if (rc == 0 && m->kind == KIND_HARDLINK)
			rc = judge_hardlink(c, m);
	}
	return rc;
}

/* Reads every header of the archive on c->fd and judges its members. */
static int scan(struct check *c)
{
	int rc;
	while ((rc = read_header(c)) == 0)
		;
	return rc == 1 ? judge(c) : rc;
}

static void check_cleanup(struct check *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->v[i].name);
		free(c->v[i].target);
	}
	free(c->v);
	free(c->sorted);
	free(c->next_name);
	free(c->next_target);
}

int tarball_check(const char *path, char *err, size_t errlen)
{
	struct check c = {.next_size = -1, .err = err, .errlen = errlen};
	c.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (c.fd < 0) {
		snprintf(err, errlen, "cannot open it: %s", strerror(errno));
		return -errno;
	}
	int rc = scan(&c);
	close(c.fd);
	check_cleanup(&c);
	return rc;
}

/* ---- the index ---- */

/* Every directory above name, as "d" (the root, "", included). */
static void add_parents(json_t *index, const char *name)
{
	char *dir = xstrdup(name);
	for (char *slash = strrchr(dir, '/');; slash = strrchr(dir, '/')) {
		if (slash)
			*slash = '\0';
		else
			dir[0] = '\0';
		if (json_object_get(index, dir))
			break; /* and so are its parents */
		json_object_set_new(index, dir, json_string("d"));
		if (!dir[0])
			break;
	}
	free(dir);
}

/* "f:<sha256>" of a file member's bytes (a hard link's: its target's). */
static int file_value(struct check *c, const struct member *m, json_t **out)
{
	if (m->kind == KIND_HARDLINK) {
		char *target = NULL;
		normalize(m->target, &target);
		m = lookup(c, target ? target : "");
		free(target);
		if (!m)
			return refuse(c, "a hard link's target is not in the archive");
	}
	char hex[HASH_HEX_LEN + 1];
	int rc = hash_range_sha256(c->fd, m->data, m->size, hex);
	if (rc) {
		char name[204];
		shown(m->name, name);
		refuse(c, "cannot read '%s': %s", name, strerror(-rc));
		return rc;
	}
	*out = json_sprintf("f:%s", hex);
	return 0;
}

int tarball_index(int fd, json_t **out, char *err, size_t errlen)
{
	struct check c = {.fd = fd, .next_size = -1, .err = err, .errlen = errlen};
	int rc = scan(&c);
	json_t *index = json_object();
	json_object_set_new(index, "", json_string("d"));
	for (size_t i = 0; i < c.n && rc == 0; i++) {
		const struct member *m = &c.v[i];
		json_t *v = NULL;
		if (m->kind == KIND_DIR)
			v = json_string("d");
		else if (m->kind == KIND_SYMLINK)
			v = json_sprintf("l:%s", m->target);
		else
			rc = file_value(&c, m, &v);
		if (v) {
			json_object_set_new(index, m->name, v);
			add_parents(index, m->name);
		}
	}
	check_cleanup(&c);
	if (rc) {
		json_decref(index);
		return rc;
	}
	*out = index;
	return 0;
}
