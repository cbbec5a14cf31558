/* idem.c - Idempotency-Keys: checks, digests and the pending records
 * (idem.h). */
#include "server/idem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/mem.h"

#define IDEM_SHOWN_MAX 64 /* bytes of a refused key shown back */

int idem_key_check(const char *value, char *err, size_t errlen)
{
	size_t len = strlen(value);
	char shown[IDEM_SHOWN_MAX + 4];
	size_t n = 0;
	for (; n < len && n < IDEM_SHOWN_MAX; n++)
		shown[n] = value[n] > 0x20 && value[n] < 0x7f ? value[n] : '?';
	snprintf(shown + n, sizeof(shown) - n, "%s", n < len ? "..." : "");
	if (len == 0) {
		snprintf(err, errlen, "header '%s': empty; a key is 1 to %d printable characters",
		         IDEM_HEADER, IDEM_KEY_MAX);
		return ERR_INVALID;
	}
	if (len > IDEM_KEY_MAX) {
		snprintf(err, errlen, "header '%s': '%s' is %zu bytes, longer than %d", IDEM_HEADER,
		         shown, len, IDEM_KEY_MAX);
		return ERR_INVALID;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)value[i];
		if (ch <= 0x20 || ch >= 0x7f) {
			snprintf(err, errlen,
			         "header '%s': '%s' holds byte 0x%02x at %zu; a key is printable "
			         "ASCII without blanks (0x21 to 0x7e)",
			         IDEM_HEADER, shown, ch, i);
			return ERR_INVALID;
		}
	}
	return 0;
}

void idem_scope(const char *credential, char out[65])
{
	hash_sha256(credential, strlen(credential), out);
}

void idem_digest(const char *method, const char *path, const char *body_sha256, char out[65])
{
	char *text = xasprintf("%s\n%s\n%s\n", method, path, body_sha256);
	hash_sha256(text, strlen(text), out);
	free(text);
}

static struct store_idem *pending_of(struct idem_table *t, const char *scope, const char *key)
{
	for (int i = 0; i < t->npending; i++)
		if (strcmp(t->pending[i].scope, scope) == 0 && strcmp(t->pending[i].key, key) == 0)
			return &t->pending[i];
	return NULL;
}

int idem_find(struct idem_table *t, struct store *store, const char *scope, const char *key,
              int64_t now, int64_t keep_ms, struct store_idem *out)
{
	struct store_idem got;
	const struct store_idem *p = pending_of(t, scope, key);
	int rc = 0;
	if (p) {
		got = *p;
		got.body = p->body ? xstrdup(p->body) : NULL;
	} else {
		rc = store_get_idem(store, scope, key, &got);
	}
	if (rc)
		return rc;
	/* expired but not pruned yet: as if gone, so expiry does not wait
	 * for the housekeeping */
	if (got.created_ms + keep_ms <= now) {
		free(got.body);
		return ERR_NOTFOUND;
	}
	*out = got;
	return 0;
}

void idem_add(struct idem_table *t, const struct store_idem *r)
{
	struct store_idem *p = pending_of(t, r->scope, r->key);
	if (p) {
		free(p->body);
	} else {
		XGROW(t->pending, t->npending, t->cap);
		p = &t->pending[t->npending++];
	}
	*p = *r;
	p->body = r->body ? xstrdup(r->body) : NULL;
}

int idem_write(struct idem_table *t, struct store *store)
{
	int rc = 0;
	for (int i = 0; rc == 0 && i < t->npending; i++)
		rc = store_put_idem(store, &t->pending[i]);
	return rc;
}

void idem_written(struct idem_table *t)
{
	for (int i = 0; i < t->npending; i++)
		free(t->pending[i].body);
	t->npending = 0;
}

int idem_prune(struct idem_table *t, struct store *store, int64_t now, int64_t keep_ms)
{
	int64_t every = keep_ms / 10;
	every = every < 1000 ? 1000 : every > 60000 ? 60000 : every;
	if (t->pruned_ms && now - t->pruned_ms < every)
		return 0;
	t->pruned_ms = now;
	int64_t removed = 0;
	int rc = store_prune_idem(store, now - keep_ms, &removed);
	if (rc == 0 && removed)
		log_debug("idempotency keys pruned removed=%lld keep_ms=%lld", (long long)removed,
		          (long long)keep_ms);
	return rc;
}

void idem_cleanup(struct idem_table *t)
{
	idem_written(t);
	free(t->pending);
	memset(t, 0, sizeof(*t));
}
