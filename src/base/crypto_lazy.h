/* crypto_lazy.h - libcrypto's digests, loaded on first use.
 *
 * anvil uses OpenSSL's libcrypto for SHA-256 (and SHA-1 for OpenLineage's
 * name-based UUIDs) and nothing else, but loading libcrypto costs about
 * 1.4 ms of every process start here, more than the rest of the binary's
 * libraries together: the CLI, a session's holder and a task's wrapper
 * start on the path a user waits on. Files that hash include this header
 * instead of <openssl/evp.h>'s functions: each call below goes through a
 * table that crypto_lazy_load() fills with dlopen("libcrypto.so.3"), once,
 * thread-safely (base/lazy.c); every macro loads it first, so callers need
 * not. A failure to load is reported and aborts (the library is a
 * dependency of the package, like any other).
 */
#ifndef ANVIL_CRYPTO_LAZY_H
#define ANVIL_CRYPTO_LAZY_H

#include <openssl/evp.h>

struct crypto_api {
	EVP_MD_CTX *(*md_ctx_new)(void);
	void (*md_ctx_free)(EVP_MD_CTX *);
	int (*digest_init_ex)(EVP_MD_CTX *, const EVP_MD *, ENGINE *);
	int (*digest_update)(EVP_MD_CTX *, const void *, size_t);
	int (*digest_final_ex)(EVP_MD_CTX *, unsigned char *, unsigned int *);
	int (*digest)(const void *, size_t, unsigned char *, unsigned int *, const EVP_MD *,
	              ENGINE *);
	const EVP_MD *(*sha256)(void);
	const EVP_MD *(*sha1)(void);
};

extern struct crypto_api crypto_lazy;

/* Loads libcrypto, the first time; cheap after. */
void crypto_lazy_load(void);

#define EVP_MD_CTX_new     (crypto_lazy_load(), crypto_lazy.md_ctx_new)
#define EVP_MD_CTX_free    (crypto_lazy_load(), crypto_lazy.md_ctx_free)
#define EVP_DigestInit_ex  (crypto_lazy_load(), crypto_lazy.digest_init_ex)
#define EVP_DigestUpdate   (crypto_lazy_load(), crypto_lazy.digest_update)
#define EVP_DigestFinal_ex (crypto_lazy_load(), crypto_lazy.digest_final_ex)
#define EVP_Digest         (crypto_lazy_load(), crypto_lazy.digest)
#define EVP_sha256         (crypto_lazy_load(), crypto_lazy.sha256)
#define EVP_sha1           (crypto_lazy_load(), crypto_lazy.sha1)

#endif
