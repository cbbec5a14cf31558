#include "base/curl_lazy.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct curl_api curl_lazy;

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer of another type, through memcpy: ISO C
 * has no cast between object and function pointers. */
static void bind_sym(void *lib, const char *name, void *slot, size_t size)
{
	void *sym = dlsym(lib, name);
	if (!sym) {
		fprintf(stderr, "anvil: libcurl lacks %s: %s\n", name, dlerror());
		abort();
	}
	memcpy(slot, &sym, size);
}

#define BIND(lib, field, name) bind_sym(lib, name, &curl_lazy.field, sizeof(curl_lazy.field))

static void load(void)
{
	void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "anvil: cannot load libcurl.so.4: %s\n", dlerror());
		abort();
	}
	BIND(lib, easy_init, "curl_easy_init");
	BIND(lib, easy_setopt, "curl_easy_setopt");
	BIND(lib, easy_getinfo, "curl_easy_getinfo");
	BIND(lib, easy_perform, "curl_easy_perform");
	BIND(lib, easy_cleanup, "curl_easy_cleanup");
	BIND(lib, easy_reset, "curl_easy_reset");
	BIND(lib, easy_strerror, "curl_easy_strerror");
	BIND(lib, slist_append, "curl_slist_append");
	BIND(lib, slist_free_all, "curl_slist_free_all");
	BIND(lib, multi_init, "curl_multi_init");
	BIND(lib, multi_add_handle, "curl_multi_add_handle");
	BIND(lib, multi_remove_handle, "curl_multi_remove_handle");
	BIND(lib, multi_perform, "curl_multi_perform");
	BIND(lib, multi_poll, "curl_multi_poll");
	BIND(lib, multi_info_read, "curl_multi_info_read");
	BIND(lib, multi_cleanup, "curl_multi_cleanup");
	CURLcode (*global_init)(long) = NULL;
	bind_sym(lib, "curl_global_init", &global_init, sizeof(global_init));
	global_init(CURL_GLOBAL_DEFAULT);
}

void curl_lazy_load(void)
{
	pthread_once(&once, load);
}
