#ifndef PERMAUDIT_CMICROHTTPD_SHIM_H
#define PERMAUDIT_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/* MHD_start_daemon and MHD_get_daemon_info are variadic, which Swift cannot call: these two
   fixed-signature wrappers pass exactly the options the server uses. STRICT_FOR_CLIENT 1: an
   HTTP/1.1 request without Host, or with spaces in its URL, is refused (400). `unescape`
   decodes the %HH escapes of a request target in place (MHD_OPTION_UNESCAPE_CALLBACK). */
static inline struct MHD_Daemon *permaudit_mhd_start(
    unsigned int flags, const struct sockaddr *address,
    MHD_AccessHandlerCallback handler, void *handler_context,
    MHD_RequestCompletedCallback completed, void *completed_context,
    unsigned int thread_pool_size, unsigned int connection_timeout,
    unsigned int connection_limit, size_t connection_memory_limit,
    size_t (*unescape)(void *context, struct MHD_Connection *connection, char *text))
{
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_context,
                            MHD_OPTION_SOCK_ADDR, address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_context,
                            MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
                            MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
                            MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                            MHD_OPTION_END);
}

static inline uint16_t permaudit_mhd_bound_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

#endif
