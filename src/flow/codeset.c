/* codeset.c - the files of a bundle a task depends on (codeset.h). */
#include "flow/codeset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hash.h"
#include "base/mem.h"

#define DIFF_NAMED 3 /* KEYs a difference names before "and N more" */

/* ---- keys and paths ---- */

static int by_text(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *parts_why(const char *s, size_t len)
{
	if (len == 0)
		return "it is empty";
	if (len > CODESET_PATH_MAX)
		return "it is longer than 1024 bytes";
	if (s[0] == '/')
		return "it is absolute: give it relative to the bundle's top";
	for (const char *p = s; p < s + len;) {
		size_t n = strcspn(p, "/");
		if (p + n > s + len)
			n = (size_t)(s + len - p);
		if (n == 0)
			return "it has an empty part ('//')";
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return "it has a '.' or '..' part: write the path as the bundle holds it";
		p += n + 1;
	}
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return "it holds a control character";
	return NULL;
}

const char *codeset_key_why(const char *key)
{
	if (!key)
		return "it is not text";
	if (strcmp(key, "/") == 0)
		return NULL;
	size_t len = strlen(key);
	return parts_why(key, len && key[len - 1] == '/' ? len - 1 : len);
}

const char *codeset_path_why(const char *path)
{
	if (!path)
		return "it is not text";
	if (!path[0] || strcmp(path, "/") == 0 || strcmp(path, ".") == 0)
		return "it is the whole bundle: write 'code: bundle' for that";
	return codeset_key_why(path);
}

/* ---- views ---- */

static int is_dir(const json_t *value)
{
	return json_is_string(value) && strcmp(json_string_value(value), "d") == 0;
}

/* "ls:<sha256>" of names (sorted here, one per line): a directory's
 * listing. */
static json_t *listing_of(const char **names, size_t n)
{
	qsort(names, n, sizeof(*names), by_text);
	struct buf b;
	buf_init(&b);
	for (size_t i = 0; i < n; i++)
		buf_printf(&b, "%s\n", names[i]);
	char hex[HASH_HEX_LEN + 1];
	hash_sha256(b.data ? b.data : "", b.len, hex);
	buf_cleanup(&b);
	return json_sprintf("ls:%s", hex);
}

/* dir's listing (listing_of its entries' names), or NULL when dir is not a
 * directory of the index. */
static json_t *listing(const json_t *index, const char *dir)
{
	if (!is_dir(json_object_get(index, dir)))
		return NULL;
	size_t dlen = strlen(dir), n = 0, cap = 0;
	const char **names = NULL;
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)index, k, v) {
		if (!k[0] || (dlen && (strncmp(k, dir, dlen) != 0 || k[dlen] != '/')))
			continue;
		const char *name = dlen ? k + dlen + 1 : k;
		if (!name[0] || strchr(name, '/'))
			continue; /* deeper, or a listing added by codeset_add_listings */
		XGROW(names, n, cap);
		names[n++] = name;
	}
	json_t *ls = listing_of(names, n);
	free(names);
	return ls;
}

static json_t *value_of(const json_t *index, const char *key)
{
	size_t len = strlen(key);
	if (len && key[len - 1] == '/') {
		json_t *known = json_object_get(index, key);
		if (known)
			return json_incref(known);
		char *dir = xstrndup(key, len - 1);
		json_t *v = listing(index, dir);
		free(dir);
		return v ? v : json_null();
	}
	json_t *v = json_object_get(index, key);
	return v ? json_incref(v) : json_null();
}

json_t *codeset_view(const json_t *index, const json_t *keys)
{
	json_t *view = json_object();
	if (json_is_object(keys)) {
		const char *k;
		json_t *v;
		json_object_foreach ((json_t *)keys, k, v)
			json_object_set_new(view, k, value_of(index, k));
		return view;
	}
	size_t i;
	json_t *k;
	json_array_foreach (keys, i, k)
		if (json_is_string(k))
			json_object_set_new(view, json_string_value(k),
			                    value_of(index, json_string_value(k)));
	return view;
}

void codeset_add_listings(json_t *index)
{
	/* every directory's names in one pass, then each list hashed */
	json_t *names = json_object();
	const char *k;
	json_t *v;
	json_object_foreach (index, k, v) {
		size_t len = strlen(k);
		if (!len || k[len - 1] == '/')
			continue;
		const char *slash = strrchr(k, '/');
		char *dir = slash ? xstrndup(k, (size_t)(slash - k)) : xstrdup("");
		json_t *list = json_object_get(names, dir);
		if (!list)
			json_object_set_new(names, dir, list = json_array());
		json_array_append_new(list, json_string(slash ? slash + 1 : k));
		free(dir);
	}
	json_object_foreach (index, k, v) {
		if (!is_dir(v))
			continue;
		json_t *list = json_object_get(names, k);
		size_t n = json_array_size(list);
		const char **entries = xcalloc(n + 1, sizeof(*entries));
		for (size_t i = 0; i < n; i++)
			entries[i] = json_string_value(json_array_get(list, i));
		json_t *ls = listing_of(entries, n);
		free(entries);
		char *key = k[0] ? xasprintf("%s/", k) : xstrdup("/");
		json_object_set_new(names, key, ls); /* set aside: index is being walked */
		free(key);
	}
	json_object_foreach (names, k, v)
		if (json_is_string(v))
			json_object_set(index, k, v);
	json_decref(names);
}

json_t *codeset_declared(const json_t *index, const json_t *paths)
{
	json_t *view = json_object();
	size_t i;
	json_t *p;
	json_array_foreach (paths, i, p) {
		const char *s = json_string_value(p);
		if (!s)
			continue;
		size_t len = strlen(s);
		char *path = xstrndup(s, len && s[len - 1] == '/' ? len - 1 : len);
		json_t *v = json_object_get(index, path);
		json_object_set(view, path, v ? v : json_null());
		if (is_dir(v)) {
			size_t plen = strlen(path);
			const char *k;
			json_t *kv;
			json_object_foreach ((json_t *)index, k, kv)
				if (strncmp(k, path, plen) == 0 && k[plen] == '/' &&
				    k[strlen(k) - 1] != '/') /* not a listing */
					json_object_set(view, k, kv);
		}
		free(path);
	}
	return view;
}

/* ---- differences ---- */

/* The KEYs of both views, sorted, each once (borrowed from the views). */
static const char **union_keys(const json_t *a, const json_t *b, size_t *n)
{
	size_t cap = json_object_size(a) + json_object_size(b) + 1, k = 0;
	const char **keys = xcalloc(cap, sizeof(*keys));
	const char *key;
	json_t *v;
	json_object_foreach ((json_t *)a, key, v)
		keys[k++] = key;
	json_object_foreach ((json_t *)b, key, v)
		if (!json_object_get(a, key))
			keys[k++] = key;
	qsort(keys, k, sizeof(*keys), by_text);
	*n = k;
	return keys;
}

static void name_one(struct buf *out, const char *key, const json_t *was, const json_t *now)
{
	size_t len = strlen(key);
	if (len && key[len - 1] == '/')
		buf_printf(out, "%s (files added or removed)", strcmp(key, "/") == 0 ? "./" : key);
	else if (!was || json_is_null(was))
		buf_printf(out, "%s (new)", key);
	else if (!now || json_is_null(now))
		buf_printf(out, "%s (gone)", key);
	else
		buf_adds(out, key);
}

int codeset_diff(const json_t *was, const json_t *now, char *out, size_t len)
{
	size_t n = 0;
	const char **keys = union_keys(was, now, &n);
	struct buf b;
	buf_init(&b);
	int differ = 0;
	for (size_t i = 0; i < n; i++) {
		const json_t *a = json_object_get(was, keys[i]), *z = json_object_get(now, keys[i]);
		int absent_a = !a || json_is_null(a), absent_z = !z || json_is_null(z);
		if ((absent_a && absent_z) || (!absent_a && !absent_z && json_equal(a, z)))
			continue;
		if (differ < DIFF_NAMED) {
			if (differ)
				buf_adds(&b, ", ");
			name_one(&b, keys[i], a, z);
		}
		differ++;
	}
	if (differ > DIFF_NAMED)
		buf_printf(&b, " and %d more", differ - DIFF_NAMED);
	snprintf(out, len, "%s", b.data ? b.data : "");
	buf_cleanup(&b);
	free(keys);
	return differ;
}
