/* moejit 0.1.0's generated version header (capi/moejit_version.h.in at b42aa19), for
 * tests/abi: a caller built against the 0.1.0 release. Do not update. */
#ifndef MOEJIT_VERSION_H
#define MOEJIT_VERSION_H
#define MOEJIT_VERSION_MAJOR 0
#define MOEJIT_VERSION_MINOR 1
#define MOEJIT_VERSION_PATCH 0
#define MOEJIT_VERSION_STRING "0.1.0"
#endif
