#include "base/hash.h"
#include "base/crypto_lazy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void to_hex(const unsigned char *md, unsigned int n, char hex[HASH_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	for (unsigned int i = 0; i < n && i < HASH_HEX_LEN / 2; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[HASH_HEX_LEN] = '\0';
}

int hash_fd_sha256(int fd, char hex[HASH_HEX_LEN + 1], int64_t *size)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (!md)
		return -ENOMEM;
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	char buf[1 << 16];
	int64_t total = 0;
	int rc = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		EVP_DigestUpdate(md, buf, (size_t)n);
		total += n;
	}
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dn = 0;
	EVP_DigestFinal_ex(md, digest, &dn);
	EVP_MD_CTX_free(md);
	if (rc == 0) {
		to_hex(digest, dn, hex);
		if (size)
			*size = total;
	}
	return rc;
}

int hash_range_sha256(int fd, int64_t off, int64_t len, char hex[HASH_HEX_LEN + 1])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (!md)
		return -ENOMEM;
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	char buf[1 << 16];
	int rc = 0;
	while (len > 0 && rc == 0) {
		size_t want = len < (int64_t)sizeof(buf) ? (size_t)len : sizeof(buf);
		ssize_t n = pread(fd, buf, want, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			break;
		}
		EVP_DigestUpdate(md, buf, (size_t)n);
		off += n;
		len -= n;
	}
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dn = 0;
	EVP_DigestFinal_ex(md, digest, &dn);
	EVP_MD_CTX_free(md);
	if (rc == 0)
		to_hex(digest, dn, hex);
	return rc;
}

int hash_file_sha256(const char *path, char hex[HASH_HEX_LEN + 1], int64_t *size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = hash_fd_sha256(fd, hex, size);
	close(fd);
	return rc;
}

void hash_sha256(const void *data, size_t len, char hex[HASH_HEX_LEN + 1])
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int dn = 0;
	EVP_Digest(data, len, digest, &dn, EVP_sha256(), NULL);
	to_hex(digest, dn, hex);
}

int hash_hex_ok(const char *s)
{
	if (!s || strlen(s) != HASH_HEX_LEN)
		return 0;
	return strspn(s, "0123456789abcdef") == HASH_HEX_LEN;
}
