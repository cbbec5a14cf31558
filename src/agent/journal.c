#include "agent/journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/util.h"

#define READ_CHUNK     (64 * 1024)
#define LINE_MAX_BYTES (1 << 20) /* a "line" longer than this is garbage: skipped */

struct segment {
	uint64_t seq;
	int fd;
	int64_t done; /* bytes read, up to the end of the last complete line */
	int64_t size; /* as far as this process knows (its own appends) */
};

struct journal {
	char *dir;
	struct segment *segs; /* ascending seq; the last is current */
	size_t n;
	int64_t roll;
};

static char *seg_path(const struct journal *j, uint64_t seq)
{
	return xasprintf("%s/ranks-%llu.jsonl", j->dir, (unsigned long long)seq);
}

/* Opens (or creates) a segment with an fd above 2: shims dup2 onto those.
 * A segment is the agent's alone (0600, whatever the umask): it tells of
 * every rank on the node. One an older version made looser is tightened,
 * and the log says so. (The shims append through the fd they were given,
 * which no mode changes.) */
static int seg_open(const struct journal *j, uint64_t seq, int create, struct segment *out)
{
	char *path = seg_path(j, seq);
	int fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
	if (fd >= 0 && fd <= 2) {
		int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		close(fd);
		fd = hi;
	}
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int rc = -errno;
		if (fd >= 0)
			close(fd);
		free(path);
		return rc;
	}
	if ((st.st_mode & 077) && fchmod(fd, st.st_mode & 0600) == 0)
		log_warn("tightened the mode of path=%s from=0%03o to=0%03o: the rank journal is "
		         "for the agent's user only",
		         path, (unsigned)(st.st_mode & 0777), (unsigned)(st.st_mode & 0600));
	free(path);
	*out = (struct segment){.seq = seq, .fd = fd, .done = 0, .size = st.st_size};
	return 0;
}

static int cmp_seq(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The seqs of the segments in dir, sorted; *n set. */
static uint64_t *list_segments(const char *dir, size_t *n)
{
	uint64_t *seqs = NULL;
	size_t cnt = 0, cap = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		const char *name = de->d_name;
		char *end = NULL;
		if (strncmp(name, "ranks-", 6) != 0 || name[6] < '0' || name[6] > '9')
			continue;
		errno = 0;
		unsigned long long seq = strtoull(name + 6, &end, 10);
		if (errno || seq == 0 || strcmp(end, ".jsonl") != 0)
			continue;
		if (cnt == cap) {
			cap = cap ? cap * 2 : 8;
			seqs = xrealloc(seqs, cap * sizeof(*seqs));
		}
		seqs[cnt++] = seq;
	}
	if (d)
		closedir(d);
	if (cnt)
		qsort(seqs, cnt, sizeof(*seqs), cmp_seq);
	*n = cnt;
	return seqs;
}

int journal_open(const char *dir, struct journal **out)
{
	struct journal *j = xcalloc(1, sizeof(*j));
	j->dir = xstrdup(dir);
	j->roll = JOURNAL_ROLL_BYTES;
	size_t n;
	uint64_t *seqs = list_segments(dir, &n);
	j->segs = xcalloc(n ? n : 1, sizeof(*j->segs));
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++)
		if ((rc = seg_open(j, seqs[i], 0, &j->segs[j->n])) == 0)
			j->n++;
	if (rc == 0 && j->n == 0 && (rc = seg_open(j, 1, 1, &j->segs[0])) == 0)
		j->n = 1;
	free(seqs);
	if (rc) {
		journal_free(j);
		return rc;
	}
	*out = j;
	return 0;
}

void journal_free(struct journal *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++)
		close(j->segs[i].fd);
	free(j->segs);
	free(j->dir);
	free(j);
}

/* Calls fn for each complete line in data[0..len); returns the bytes used.
 * Lines that are not a JSON object are counted in *bad. */
static size_t parse_lines(const char *data, size_t len, uint64_t seq, journal_fn fn, void *ctx,
                          size_t *bad)
{
	const char *line = data, *end = data + len, *nl;
	while ((nl = memchr(line, '\n', (size_t)(end - line)))) {
		json_t *o = json_loadb(line, (size_t)(nl - line), 0, NULL);
		if (json_is_object(o))
			fn(ctx, seq, o);
		else if (nl > line)
			(*bad)++;
		json_decref(o);
		line = nl + 1;
	}
	return (size_t)(line - data);
}

static void read_segment(struct segment *s, journal_fn fn, void *ctx)
{
	struct buf b;
	buf_init(&b);
	size_t bad = 0;
	for (;;) {
		buf_reserve(&b, READ_CHUNK);
		ssize_t r = pread(s->fd, b.data + b.len, READ_CHUNK, s->done + (int64_t)b.len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		b.len += (size_t)r;
		size_t used = parse_lines(b.data, b.len, s->seq, fn, ctx, &bad);
		s->done += (int64_t)used;
		memmove(b.data, b.data + used, b.len - used);
		b.len -= used;
		if (b.len > LINE_MAX_BYTES) { /* no newline in sight: skip it */
			s->done += (int64_t)b.len;
			b.len = 0;
			bad++;
		}
	}
	if (bad) /* a damaged file: what those lines said of a rank is lost */
		log_warn("rank journal segment=%llu: %zu damaged line(s) skipped",
		         (unsigned long long)s->seq, bad);
	if (s->size < s->done + (int64_t)b.len)
		s->size = s->done + (int64_t)b.len;
	buf_cleanup(&b);
}

void journal_read(struct journal *j, journal_fn fn, void *ctx)
{
	for (size_t i = 0; i < j->n; i++)
		read_segment(&j->segs[i], fn, ctx);
}

static int roll(struct journal *j)
{
	struct segment s;
	int rc = seg_open(j, j->segs[j->n - 1].seq + 1, 1, &s);
	if (rc)
		return rc;
	j->segs = xrealloc(j->segs, (j->n + 1) * sizeof(*j->segs));
	j->segs[j->n++] = s;
	return 0;
}

int journal_append(struct journal *j, const char *line, size_t len)
{
	struct segment *cur = &j->segs[j->n - 1];
	if (cur->size >= j->roll && roll(j) == 0)
		cur = &j->segs[j->n - 1];
	char *text = xmalloc(len + 1);
	memcpy(text, line, len);
	text[len] = '\n';
	ssize_t w;
	while ((w = write(cur->fd, text, len + 1)) < 0 && errno == EINTR)
		;
	free(text);
	if (w > 0)
		cur->size += w;
	return w == (ssize_t)len + 1 ? 0 : w < 0 ? -errno : -EIO;
}

uint64_t journal_seq(const struct journal *j)
{
	return j->segs[j->n - 1].seq;
}

int journal_fd(const struct journal *j)
{
	return j->segs[j->n - 1].fd;
}

size_t journal_old(const struct journal *j, uint64_t *seqs, size_t max)
{
	for (size_t i = 0; i + 1 < j->n && i < max; i++)
		seqs[i] = j->segs[i].seq;
	return j->n - 1;
}

void journal_drop(struct journal *j, uint64_t seq)
{
	for (size_t i = 0; i + 1 < j->n; i++) {
		if (j->segs[i].seq != seq)
			continue;
		char *path = seg_path(j, seq);
		unlink(path);
		free(path);
		close(j->segs[i].fd);
		memmove(&j->segs[i], &j->segs[i + 1], (j->n - i - 1) * sizeof(*j->segs));
		j->n--;
		return;
	}
}

void journal_set_roll(struct journal *j, int64_t bytes)
{
	j->roll = bytes;
}
