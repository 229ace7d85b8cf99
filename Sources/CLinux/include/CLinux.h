#ifndef STRATA_CLINUX_H
#define STRATA_CLINUX_H
/* Linux calls that Swift's Glibc module does not export. Only StrataNet and the store's
   lock file use this module. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/statvfs.h>

extern int accept4(int, struct sockaddr *, socklen_t *, int);

/* flock(2) constants as plain values (macros are awkward from Swift). */
static inline int strata_flock_exclusive_nonblocking(int fd) { return flock(fd, LOCK_EX | LOCK_NB); }
#endif
