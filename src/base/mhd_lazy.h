/* mhd_lazy.h - libmicrohttpd, loaded on first use.
 *
 * As curl_lazy.h does for libcurl: libmicrohttpd and its GnuTLS closure
 * cost about 4 ms of every start-up of the one binary, and only the
 * daemons serve HTTP. httpd.c includes this header instead of
 * <microhttpd.h>; httpd_start loads the library (dlopen
 * "libmicrohttpd.so.12"), once, thread-safely.
 */
#ifndef ANVIL_MHD_LAZY_H
#define ANVIL_MHD_LAZY_H

#include <microhttpd.h>

struct mhd_api {
	__typeof__(&MHD_start_daemon) start_daemon;
	__typeof__(&MHD_stop_daemon) stop_daemon;
	__typeof__(&MHD_get_daemon_info) get_daemon_info;
	__typeof__(&MHD_lookup_connection_value) lookup_connection_value;
	__typeof__(&MHD_get_connection_info) get_connection_info;
	__typeof__(&MHD_queue_response) queue_response;
	__typeof__(&MHD_suspend_connection) suspend_connection;
	__typeof__(&MHD_resume_connection) resume_connection;
	__typeof__(&MHD_create_response_from_buffer) create_response_from_buffer;
	__typeof__(&MHD_create_response_from_fd64) create_response_from_fd64;
	__typeof__(&MHD_create_response_for_upgrade) create_response_for_upgrade;
	__typeof__(&MHD_upgrade_action) upgrade_action;
	__typeof__(&MHD_destroy_response) destroy_response;
	__typeof__(&MHD_add_response_header) add_response_header;
};

extern struct mhd_api mhd_lazy;

/* Loads libmicrohttpd, the first time; cheap after. */
void mhd_lazy_load(void);

#define MHD_start_daemon                mhd_lazy.start_daemon
#define MHD_stop_daemon                 mhd_lazy.stop_daemon
#define MHD_get_daemon_info             mhd_lazy.get_daemon_info
#define MHD_lookup_connection_value     mhd_lazy.lookup_connection_value
#define MHD_get_connection_info         mhd_lazy.get_connection_info
#define MHD_queue_response              mhd_lazy.queue_response
#define MHD_suspend_connection          mhd_lazy.suspend_connection
#define MHD_resume_connection           mhd_lazy.resume_connection
#define MHD_create_response_from_buffer mhd_lazy.create_response_from_buffer
#define MHD_create_response_from_fd64   mhd_lazy.create_response_from_fd64
#define MHD_create_response_for_upgrade mhd_lazy.create_response_for_upgrade
#define MHD_upgrade_action              mhd_lazy.upgrade_action
#define MHD_destroy_response            mhd_lazy.destroy_response
#define MHD_add_response_header         mhd_lazy.add_response_header

#endif
