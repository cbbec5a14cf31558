/* curl_lazy.h - libcurl, loaded on first use.
 *
 * One binary plays every role, and libcurl with its 32 libraries costs
 * about 9 ms to load, more than the rest of a start-up: the processes that
 * make no HTTP calls (a session's holder, a rank's launcher, `anvil wf
 * check`, `anvil run --local`) should not pay it. Files that call libcurl
 * include this header instead of <curl/curl.h>: the calls below go through
 * a table that curl_lazy_load() fills with dlopen("libcurl.so.4") and
 * curl_global_init, once, thread-safely (base/lazy.c). httpc's and
 * upgrade's entry points load it; a failure to load is reported and
 * aborts (the library is a dependency of the package, like any other).
 */
#ifndef ANVIL_CURL_LAZY_H
#define ANVIL_CURL_LAZY_H

#include <curl/curl.h>

struct curl_api {
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	CURLcode (*easy_perform)(CURL *);
	void (*easy_cleanup)(CURL *);
	void (*easy_reset)(CURL *);
	const char *(*easy_strerror)(CURLcode);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_add_handle)(CURLM *, CURL *);
	CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
	CURLMcode (*multi_perform)(CURLM *, int *);
	CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);
	CURLMsg *(*multi_info_read)(CURLM *, int *);
	CURLMcode (*multi_cleanup)(CURLM *);
};

extern struct curl_api curl_lazy;

/* Loads libcurl and runs curl_global_init, the first time; cheap after. */
void curl_lazy_load(void);

#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_easy_init           curl_lazy.easy_init
#define curl_easy_setopt         curl_lazy.easy_setopt
#define curl_easy_getinfo        curl_lazy.easy_getinfo
#define curl_easy_perform        curl_lazy.easy_perform
#define curl_easy_cleanup        curl_lazy.easy_cleanup
#define curl_easy_reset          curl_lazy.easy_reset
#define curl_easy_strerror       curl_lazy.easy_strerror
#define curl_slist_append        curl_lazy.slist_append
#define curl_slist_free_all      curl_lazy.slist_free_all
#define curl_multi_init          curl_lazy.multi_init
#define curl_multi_add_handle    curl_lazy.multi_add_handle
#define curl_multi_remove_handle curl_lazy.multi_remove_handle
#define curl_multi_perform       curl_lazy.multi_perform
#define curl_multi_poll          curl_lazy.multi_poll
#define curl_multi_info_read     curl_lazy.multi_info_read
#define curl_multi_cleanup       curl_lazy.multi_cleanup

#endif
