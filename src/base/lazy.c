/* lazy.c - libcurl, libevent, libmicrohttpd and libcrypto loaded on first use
 * (curl_lazy.h, event_lazy.h, mhd_lazy.h, crypto_lazy.h): dlopen, then every function the
 * project calls bound by name into its table. A library or symbol missing
 * is reported and aborts: all four are dependencies of the package. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crypto_lazy.h"
#include "base/curl_lazy.h"
#include "base/event_lazy.h"
#include "base/log.h"
#include "base/mhd_lazy.h"

struct curl_api curl_lazy;
struct event_api event_lazy;
struct mhd_api mhd_lazy;

static void *lazy_open(const char *soname)
{
	void *lib = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "anvil: cannot load %s: %s\n", soname, dlerror());
		abort();
	}
	return lib;
}

/* dlsym into a function pointer, through memcpy: ISO C has no cast
 * between object and function pointers. */
static void lazy_bind(void *lib, const char *soname, const char *name, void *slot, size_t size)
{
	void *sym = dlsym(lib, name);
	if (!sym) {
		fprintf(stderr, "anvil: %s lacks %s: %s\n", soname, name, dlerror());
		abort();
	}
	memcpy(slot, &sym, size);
}

#define BIND(api, lib, so, field, name) lazy_bind(lib, so, name, &api.field, sizeof(api.field))

static void curl_load(void)
{
	static const char so[] = "libcurl.so.4";
	void *lib = lazy_open(so);
	BIND(curl_lazy, lib, so, easy_init, "curl_easy_init");
	BIND(curl_lazy, lib, so, easy_setopt, "curl_easy_setopt");
	BIND(curl_lazy, lib, so, easy_getinfo, "curl_easy_getinfo");
	BIND(curl_lazy, lib, so, easy_perform, "curl_easy_perform");
	BIND(curl_lazy, lib, so, easy_cleanup, "curl_easy_cleanup");
	BIND(curl_lazy, lib, so, easy_reset, "curl_easy_reset");
	BIND(curl_lazy, lib, so, easy_strerror, "curl_easy_strerror");
	BIND(curl_lazy, lib, so, slist_append, "curl_slist_append");
	BIND(curl_lazy, lib, so, slist_free_all, "curl_slist_free_all");
	BIND(curl_lazy, lib, so, multi_init, "curl_multi_init");
	BIND(curl_lazy, lib, so, multi_add_handle, "curl_multi_add_handle");
	BIND(curl_lazy, lib, so, multi_remove_handle, "curl_multi_remove_handle");
	BIND(curl_lazy, lib, so, multi_perform, "curl_multi_perform");
	BIND(curl_lazy, lib, so, multi_poll, "curl_multi_poll");
	BIND(curl_lazy, lib, so, multi_info_read, "curl_multi_info_read");
	BIND(curl_lazy, lib, so, multi_cleanup, "curl_multi_cleanup");
	CURLcode (*global_init)(long) = NULL;
	lazy_bind(lib, so, "curl_global_init", &global_init, sizeof(global_init));
	global_init(CURL_GLOBAL_DEFAULT);
}

/* libevent warns on stderr in a format of its own; its lines go to the
 * log as debug lines (a failure that matters reaches httpc's caller as an
 * error code and message anyway). */
static void event_log(int severity, const char *msg)
{
	(void)severity;
	log_debug("libevent: %s", msg);
}

static void event_load_http(void *lib, const char *so)
{
	BIND(event_lazy, lib, so, conn_new, "evhttp_connection_base_new");
	BIND(event_lazy, lib, so, conn_free, "evhttp_connection_free");
	BIND(event_lazy, lib, so, conn_set_timeout_tv, "evhttp_connection_set_timeout_tv");
	BIND(event_lazy, lib, so, conn_set_max_body_size, "evhttp_connection_set_max_body_size");
	BIND(event_lazy, lib, so, conn_set_max_headers_size,
	     "evhttp_connection_set_max_headers_size");
	BIND(event_lazy, lib, so, conn_set_flags, "evhttp_connection_set_flags");
	BIND(event_lazy, lib, so, conn_get_bufferevent, "evhttp_connection_get_bufferevent");
	BIND(event_lazy, lib, so, req_new, "evhttp_request_new");
	BIND(event_lazy, lib, so, req_free, "evhttp_request_free");
	BIND(event_lazy, lib, so, req_set_error_cb, "evhttp_request_set_error_cb");
	BIND(event_lazy, lib, so, req_set_chunked_cb, "evhttp_request_set_chunked_cb");
	BIND(event_lazy, lib, so, req_get_response_code, "evhttp_request_get_response_code");
	BIND(event_lazy, lib, so, req_get_input_headers, "evhttp_request_get_input_headers");
	BIND(event_lazy, lib, so, req_get_output_headers, "evhttp_request_get_output_headers");
	BIND(event_lazy, lib, so, req_get_input_buffer, "evhttp_request_get_input_buffer");
	BIND(event_lazy, lib, so, req_get_output_buffer, "evhttp_request_get_output_buffer");
	BIND(event_lazy, lib, so, make_request, "evhttp_make_request");
	BIND(event_lazy, lib, so, cancel_request, "evhttp_cancel_request");
	BIND(event_lazy, lib, so, add_header, "evhttp_add_header");
	BIND(event_lazy, lib, so, uri_parse_with_flags, "evhttp_uri_parse_with_flags");
	BIND(event_lazy, lib, so, uri_free, "evhttp_uri_free");
	BIND(event_lazy, lib, so, uri_get_scheme, "evhttp_uri_get_scheme");
	BIND(event_lazy, lib, so, uri_get_host, "evhttp_uri_get_host");
	BIND(event_lazy, lib, so, uri_get_port, "evhttp_uri_get_port");
	BIND(event_lazy, lib, so, uri_get_path, "evhttp_uri_get_path");
	BIND(event_lazy, lib, so, uri_get_query, "evhttp_uri_get_query");
	BIND(event_lazy, lib, so, uri_get_userinfo, "evhttp_uri_get_userinfo");
}

static void event_load(void)
{
	static const char so[] = "libevent-2.1.so.7";
	void *lib = lazy_open(so);
	BIND(event_lazy, lib, so, base_new, "event_base_new");
	BIND(event_lazy, lib, so, base_free, "event_base_free");
	BIND(event_lazy, lib, so, base_loop, "event_base_loop");
	BIND(event_lazy, lib, so, base_loopbreak, "event_base_loopbreak");
	BIND(event_lazy, lib, so, ev_new, "event_new");
	BIND(event_lazy, lib, so, ev_free, "event_free");
	BIND(event_lazy, lib, so, ev_add, "event_add");
	BIND(event_lazy, lib, so, ev_del, "event_del");
	BIND(event_lazy, lib, so, set_log_callback, "event_set_log_callback");
	BIND(event_lazy, lib, so, buf_add, "evbuffer_add");
	BIND(event_lazy, lib, so, buf_add_file, "evbuffer_add_file");
	BIND(event_lazy, lib, so, buf_get_length, "evbuffer_get_length");
	BIND(event_lazy, lib, so, buf_remove, "evbuffer_remove");
	BIND(event_lazy, lib, so, buf_write, "evbuffer_write");
	BIND(event_lazy, lib, so, bev_getfd, "bufferevent_getfd");
	event_load_http(lib, so);
	event_lazy.set_log_callback(event_log);
}

static void mhd_load(void)
{
	static const char so[] = "libmicrohttpd.so.12";
	void *lib = lazy_open(so);
	BIND(mhd_lazy, lib, so, start_daemon, "MHD_start_daemon");
	BIND(mhd_lazy, lib, so, stop_daemon, "MHD_stop_daemon");
	BIND(mhd_lazy, lib, so, get_daemon_info, "MHD_get_daemon_info");
	BIND(mhd_lazy, lib, so, lookup_connection_value, "MHD_lookup_connection_value");
	BIND(mhd_lazy, lib, so, get_connection_info, "MHD_get_connection_info");
	BIND(mhd_lazy, lib, so, queue_response, "MHD_queue_response");
	BIND(mhd_lazy, lib, so, suspend_connection, "MHD_suspend_connection");
	BIND(mhd_lazy, lib, so, resume_connection, "MHD_resume_connection");
	BIND(mhd_lazy, lib, so, create_response_from_buffer, "MHD_create_response_from_buffer");
	BIND(mhd_lazy, lib, so, create_response_from_fd64, "MHD_create_response_from_fd64");
	BIND(mhd_lazy, lib, so, create_response_for_upgrade, "MHD_create_response_for_upgrade");
	BIND(mhd_lazy, lib, so, upgrade_action, "MHD_upgrade_action");
	BIND(mhd_lazy, lib, so, destroy_response, "MHD_destroy_response");
	BIND(mhd_lazy, lib, so, add_response_header, "MHD_add_response_header");
}

struct crypto_api crypto_lazy;

static void crypto_load(void)
{
	static const char so[] = "libcrypto.so.3";
	void *lib = lazy_open(so);
	BIND(crypto_lazy, lib, so, md_ctx_new, "EVP_MD_CTX_new");
	BIND(crypto_lazy, lib, so, md_ctx_free, "EVP_MD_CTX_free");
	BIND(crypto_lazy, lib, so, digest_init_ex, "EVP_DigestInit_ex");
	BIND(crypto_lazy, lib, so, digest_update, "EVP_DigestUpdate");
	BIND(crypto_lazy, lib, so, digest_final_ex, "EVP_DigestFinal_ex");
	BIND(crypto_lazy, lib, so, digest, "EVP_Digest");
	BIND(crypto_lazy, lib, so, sha256, "EVP_sha256");
	BIND(crypto_lazy, lib, so, sha1, "EVP_sha1");
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT, event_once = PTHREAD_ONCE_INIT,
                      mhd_once = PTHREAD_ONCE_INIT, crypto_once = PTHREAD_ONCE_INIT;

void crypto_lazy_load(void)
{
	pthread_once(&crypto_once, crypto_load);
}

void curl_lazy_load(void)
{
	pthread_once(&curl_once, curl_load);
}

void event_lazy_load(void)
{
	pthread_once(&event_once, event_load);
}

void mhd_lazy_load(void)
{
	pthread_once(&mhd_once, mhd_load);
}
