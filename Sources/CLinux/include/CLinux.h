#ifndef STRATA_CLINUX_H
#define STRATA_CLINUX_H
/* Linux calls that Swift's Glibc module does not export. Only StrataNet, the store (its lock
   file, prefetching memory records), StrataCore (to name threads) and the node (to trim the
   heap after a burst: `MemoryRelease`) use this module. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <sys/prctl.h>
#include <malloc.h>

extern int accept4(int, struct sockaddr *, socklen_t *, int);

/* flock(2) constants as plain values (macros are awkward from Swift). */
static inline int strata_flock_exclusive_nonblocking(int fd) { return flock(fd, LOCK_EX | LOCK_NB); }
/* Starts loading the cache line at p (a hint: never waits, never faults), so look-ups of a
   batch overlap their cache misses. Swift has no spelling for the builtin. */
static inline void strata_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }
/* Names the calling thread (the kernel keeps 15 bytes); prctl is variadic, so not callable from Swift. */
static inline int strata_set_thread_name(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }
/* Gives the heap's free memory back to the kernel (glibc keeps it in its arenas otherwise). */
static inline int strata_malloc_trim(void) { return malloc_trim(0); }
#endif
