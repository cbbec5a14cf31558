/* event_lazy.h - libevent (its HTTP client, evhttp), loaded on first use.
 *
 * httpc's plain-http requests go through libevent's evhttp (base/httpc.h):
 * libevent-2.1.so.7 needs nothing but libc, where libcurl's Debian build
 * brings 32 libraries (OpenSSL, GnuTLS, Kerberos, LDAP, SSH, ...) that cost
 * about 8 ms to map and relocate, more than the rest of a CLI command. As
 * curl_lazy.h does for libcurl, files that call libevent include this
 * header instead of the event2 headers' functions: the calls go through a
 * table that event_lazy_load() fills with dlopen("libevent-2.1.so.7"),
 * once, thread-safely (base/lazy.c); a process that makes no HTTP call
 * loads nothing. A library or symbol missing is reported and aborts (the
 * library is a dependency of the package).
 *
 * No locking is enabled (evthread): every event_base here belongs to one
 * struct httpc, which one thread uses at a time.
 */
#ifndef ANVIL_EVENT_LAZY_H
#define ANVIL_EVENT_LAZY_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

struct event_api {
	__typeof__(&event_base_new) base_new;
	__typeof__(&event_base_free) base_free;
	__typeof__(&event_base_loop) base_loop;
	__typeof__(&event_base_loopbreak) base_loopbreak;
	__typeof__(&event_new) ev_new;
	__typeof__(&event_free) ev_free;
	__typeof__(&event_add) ev_add;
	__typeof__(&event_del) ev_del;
	__typeof__(&event_set_log_callback) set_log_callback;
	__typeof__(&evbuffer_add) buf_add;
	__typeof__(&evbuffer_add_file) buf_add_file;
	__typeof__(&evbuffer_get_length) buf_get_length;
	__typeof__(&evbuffer_remove) buf_remove;
	__typeof__(&evbuffer_write) buf_write;
	__typeof__(&bufferevent_getfd) bev_getfd;
	__typeof__(&evhttp_connection_base_new) conn_new;
	__typeof__(&evhttp_connection_free) conn_free;
	__typeof__(&evhttp_connection_set_timeout_tv) conn_set_timeout_tv;
	__typeof__(&evhttp_connection_set_max_body_size) conn_set_max_body_size;
	__typeof__(&evhttp_connection_set_max_headers_size) conn_set_max_headers_size;
	__typeof__(&evhttp_connection_set_flags) conn_set_flags;
	__typeof__(&evhttp_connection_get_bufferevent) conn_get_bufferevent;
	__typeof__(&evhttp_request_new) req_new;
	__typeof__(&evhttp_request_free) req_free;
	__typeof__(&evhttp_request_set_error_cb) req_set_error_cb;
	__typeof__(&evhttp_request_set_chunked_cb) req_set_chunked_cb;
	__typeof__(&evhttp_request_get_response_code) req_get_response_code;
	__typeof__(&evhttp_request_get_input_headers) req_get_input_headers;
	__typeof__(&evhttp_request_get_output_headers) req_get_output_headers;
	__typeof__(&evhttp_request_get_input_buffer) req_get_input_buffer;
	__typeof__(&evhttp_request_get_output_buffer) req_get_output_buffer;
	__typeof__(&evhttp_make_request) make_request;
	__typeof__(&evhttp_cancel_request) cancel_request;
	__typeof__(&evhttp_add_header) add_header;
	__typeof__(&evhttp_uri_parse_with_flags) uri_parse_with_flags;
	__typeof__(&evhttp_uri_free) uri_free;
	__typeof__(&evhttp_uri_get_scheme) uri_get_scheme;
	__typeof__(&evhttp_uri_get_host) uri_get_host;
	__typeof__(&evhttp_uri_get_port) uri_get_port;
	__typeof__(&evhttp_uri_get_path) uri_get_path;
	__typeof__(&evhttp_uri_get_query) uri_get_query;
	__typeof__(&evhttp_uri_get_userinfo) uri_get_userinfo;
};

extern struct event_api event_lazy;

/* Loads libevent, the first time; cheap after. libevent's own log lines
 * (it warns on stderr) go to log_debug. */
void event_lazy_load(void);

#define event_base_new                         event_lazy.base_new
#define event_base_free                        event_lazy.base_free
#define event_base_loop                        event_lazy.base_loop
#define event_base_loopbreak                   event_lazy.base_loopbreak
#define event_new                              event_lazy.ev_new
#define event_free                             event_lazy.ev_free
#define event_add                              event_lazy.ev_add
#define event_del                              event_lazy.ev_del
#define evbuffer_add                           event_lazy.buf_add
#define evbuffer_add_file                      event_lazy.buf_add_file
#define evbuffer_get_length                    event_lazy.buf_get_length
#define evbuffer_remove                        event_lazy.buf_remove
#define evbuffer_write                         event_lazy.buf_write
#define bufferevent_getfd                      event_lazy.bev_getfd
#define evhttp_connection_base_new             event_lazy.conn_new
#define evhttp_connection_free                 event_lazy.conn_free
#define evhttp_connection_set_timeout_tv       event_lazy.conn_set_timeout_tv
#define evhttp_connection_set_max_body_size    event_lazy.conn_set_max_body_size
#define evhttp_connection_set_max_headers_size event_lazy.conn_set_max_headers_size
#define evhttp_connection_set_flags            event_lazy.conn_set_flags
#define evhttp_connection_get_bufferevent      event_lazy.conn_get_bufferevent
#define evhttp_request_new                     event_lazy.req_new
#define evhttp_request_free                    event_lazy.req_free
#define evhttp_request_set_error_cb            event_lazy.req_set_error_cb
#define evhttp_request_set_chunked_cb          event_lazy.req_set_chunked_cb
#define evhttp_request_get_response_code       event_lazy.req_get_response_code
#define evhttp_request_get_input_headers       event_lazy.req_get_input_headers
#define evhttp_request_get_output_headers      event_lazy.req_get_output_headers
#define evhttp_request_get_input_buffer        event_lazy.req_get_input_buffer
#define evhttp_request_get_output_buffer       event_lazy.req_get_output_buffer
#define evhttp_make_request                    event_lazy.make_request
#define evhttp_cancel_request                  event_lazy.cancel_request
#define evhttp_add_header                      event_lazy.add_header
#define evhttp_uri_parse_with_flags            event_lazy.uri_parse_with_flags
#define evhttp_uri_free                        event_lazy.uri_free
#define evhttp_uri_get_scheme                  event_lazy.uri_get_scheme
#define evhttp_uri_get_host                    event_lazy.uri_get_host
#define evhttp_uri_get_port                    event_lazy.uri_get_port
#define evhttp_uri_get_path                    event_lazy.uri_get_path
#define evhttp_uri_get_query                   event_lazy.uri_get_query
#define evhttp_uri_get_userinfo                event_lazy.uri_get_userinfo

#endif
