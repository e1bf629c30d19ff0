#ifndef PERMAUDIT_CZLIB_SHIM_H
#define PERMAUDIT_CZLIB_SHIM_H
#include <zlib.h>

/* inflateInit2 and deflateInit2 are macros (it passes the library version and the stream size), which Swift cannot
   import: this wrapper starts a stream that accepts the gzip format only (16 + MAX_WBITS). */
static inline int permaudit_inflate_init_gzip(z_streamp stream)
{
    return inflateInit2(stream, 16 + MAX_WBITS);
}

/* The same for deflateInit2: gzip output at the default level. */
static inline int permaudit_deflate_init_gzip(z_streamp stream)
{
    return deflateInit2(stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
}

#endif
