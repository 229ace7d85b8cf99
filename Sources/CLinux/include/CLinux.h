#ifndef STRATA_CLINUX_H
#define STRATA_CLINUX_H
/* Linux calls that Swift's Glibc module does not export. Only StrataNet and the store's
   lock file use this module, and StrataCore to name threads. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <sys/prctl.h>

extern int accept4(int, struct sockaddr *, socklen_t *, int);

/* flock(2) constants as plain values (macros are awkward from Swift). */
static inline int strata_flock_exclusive_nonblocking(int fd) { return flock(fd, LOCK_EX | LOCK_NB); }
/* Names the calling thread (the kernel keeps 15 bytes); prctl is variadic, so not callable from Swift. */
static inline int strata_set_thread_name(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }
#endif
