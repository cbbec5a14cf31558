/* lazy.c - libcurl and libmicrohttpd loaded on first use (curl_lazy.h,
 * mhd_lazy.h): dlopen, then every function the project calls bound by
 * name into its table. A library or symbol missing is reported and
 * aborts: both are dependencies of the package. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/curl_lazy.h"
#include "base/mhd_lazy.h"

struct curl_api curl_lazy;
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

static void mhd_load(void)
{
	static const char so[] = "libmicrohttpd.so.12";
	void *lib = lazy_open(so);
	BIND(mhd_lazy, lib, so, start_daemon, "MHD_start_daemon");
	BIND(mhd_lazy, lib, so, stop_daemon, "MHD_stop_daemon");
	BIND(mhd_lazy, lib, so, get_daemon_info, "MHD_get_daemon_info");
	BIND(mhd_lazy, lib, so, lookup_connection_value, "MHD_lookup_connection_value");
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

static pthread_once_t curl_once = PTHREAD_ONCE_INIT, mhd_once = PTHREAD_ONCE_INIT;

void curl_lazy_load(void)
{
	pthread_once(&curl_once, curl_load);
}

void mhd_lazy_load(void)
{
	pthread_once(&mhd_once, mhd_load);
}
