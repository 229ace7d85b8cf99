#include <png.h>
#include <zlib.h>
/* Function-like and composite macros are not imported into Swift: re-export the ones we use. */
static const unsigned int strata_PNG_FORMAT_RGBA = PNG_FORMAT_RGBA;
static const unsigned int strata_PNG_IMAGE_VERSION = PNG_IMAGE_VERSION;
static const unsigned int strata_PNG_FORMAT_FLAG_ALPHA = PNG_FORMAT_FLAG_ALPHA;
/* inflateInit is a macro over inflateInit_ with the library's version and stream size. */
static inline int strata_inflateInit(z_stream *s) { return inflateInit(s); }
