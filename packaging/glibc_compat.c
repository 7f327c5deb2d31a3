/* The wheel's glibc floor (manylinux_2_28): libmoejit.so is built on a newer glibc, where a few
 * functions got new symbol versions (2.32-2.36: libpthread and libdl merged into libc, stat
 * became a real function, arc4random and __libc_single_threaded appeared). The wheel build
 * links with -Wl,--wrap=<symbol> for each of them (capi/meson.build, glibc_wrapped): every
 * reference, ours and static libstdc++'s, comes here, and each wrapper calls the version that
 * glibc 2.28 (and every later glibc, as a compat symbol) has. tests/install/check_wheel.py
 * checks that no symbol newer than GLIBC_2.28 is left.
 *
 * On glibc < 2.34 the old pthread and dl symbols live in libpthread.so.0 and libdl.so.2, so
 * the library names both (-Wl,--no-as-needed -lpthread -ldl). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define COMPAT_VISIBLE __attribute__((visibility("hidden")))

/* Binds `local` (a reference) to name@version. */
#define OLD_VERSION(local, name, version) __asm__(".symver " #local "," #name "@" version)

/* ---- libpthread (GLIBC_2.34 in libc now) */
extern int old_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
OLD_VERSION(old_pthread_create, pthread_create, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*f)(void *), void *arg) {
    return old_pthread_create(t, a, f, arg);
}
extern int old_pthread_join(pthread_t, void **);
OLD_VERSION(old_pthread_join, pthread_join, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap_pthread_join(pthread_t t, void **r) { return old_pthread_join(t, r); }
extern int old_pthread_detach(pthread_t);
OLD_VERSION(old_pthread_detach, pthread_detach, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap_pthread_detach(pthread_t t) { return old_pthread_detach(t); }
extern int old_pthread_once(pthread_once_t *, void (*)(void));
OLD_VERSION(old_pthread_once, pthread_once, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap_pthread_once(pthread_once_t *o, void (*f)(void)) { return old_pthread_once(o, f); }
extern int old_pthread_key_create(pthread_key_t *, void (*)(void *));
OLD_VERSION(old_pthread_key_create, pthread_key_create, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap_pthread_key_create(pthread_key_t *k, void (*d)(void *)) { return old_pthread_key_create(k, d); }
extern int old___pthread_key_create(pthread_key_t *, void (*)(void *));
OLD_VERSION(old___pthread_key_create, __pthread_key_create, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap___pthread_key_create(pthread_key_t *k, void (*d)(void *)) {
    return old___pthread_key_create(k, d);
}

/* ---- libdl (GLIBC_2.34 in libc now) */
extern void *old_dlopen(const char *, int);
OLD_VERSION(old_dlopen, dlopen, "GLIBC_2.2.5");
COMPAT_VISIBLE void *__wrap_dlopen(const char *file, int mode) { return old_dlopen(file, mode); }
extern int old_dlclose(void *);
OLD_VERSION(old_dlclose, dlclose, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap_dlclose(void *h) { return old_dlclose(h); }
extern void *old_dlsym(void *, const char *);
OLD_VERSION(old_dlsym, dlsym, "GLIBC_2.2.5");
COMPAT_VISIBLE void *__wrap_dlsym(void *h, const char *name) { return old_dlsym(h, name); }
extern char *old_dlerror(void);
OLD_VERSION(old_dlerror, dlerror, "GLIBC_2.2.5");
COMPAT_VISIBLE char *__wrap_dlerror(void) { return old_dlerror(); }
extern int old_dladdr(const void *, Dl_info *);
OLD_VERSION(old_dladdr, dladdr, "GLIBC_2.2.5");
COMPAT_VISIBLE int __wrap_dladdr(const void *a, Dl_info *i) { return old_dladdr(a, i); }
extern int old_dlinfo(void *, int, void *);
OLD_VERSION(old_dlinfo, dlinfo, "GLIBC_2.3.3");
COMPAT_VISIBLE int __wrap_dlinfo(void *h, int request, void *arg) { return old_dlinfo(h, request, arg); }

/* ---- stat (a function since GLIBC_2.33; before, an inline call of __xstat with version 1) */
#define STAT_VER_LINUX 1
extern int old_xstat(int, const char *, struct stat *);
OLD_VERSION(old_xstat, __xstat, "GLIBC_2.2.5");
extern int old_lxstat(int, const char *, struct stat *);
OLD_VERSION(old_lxstat, __lxstat, "GLIBC_2.2.5");
extern int old_fxstat(int, int, struct stat *);
OLD_VERSION(old_fxstat, __fxstat, "GLIBC_2.2.5");
/* On x86_64 struct stat and struct stat64 are the same layout, and __xstat64 = __xstat. */
COMPAT_VISIBLE int __wrap_stat(const char *p, struct stat *s) { return old_xstat(STAT_VER_LINUX, p, s); }
COMPAT_VISIBLE int __wrap_stat64(const char *p, struct stat *s) { return old_xstat(STAT_VER_LINUX, p, s); }
COMPAT_VISIBLE int __wrap_lstat(const char *p, struct stat *s) { return old_lxstat(STAT_VER_LINUX, p, s); }
COMPAT_VISIBLE int __wrap_lstat64(const char *p, struct stat *s) { return old_lxstat(STAT_VER_LINUX, p, s); }
COMPAT_VISIBLE int __wrap_fstat(int fd, struct stat *s) { return old_fxstat(STAT_VER_LINUX, fd, s); }
COMPAT_VISIBLE int __wrap_fstat64(int fd, struct stat *s) { return old_fxstat(STAT_VER_LINUX, fd, s); }

/* ---- GLIBC_2.36 arc4random (std::random_device): the kernel's getrandom, retried */
COMPAT_VISIBLE unsigned int __wrap_arc4random(void) {
    unsigned int value = 0;
    unsigned char *at = (unsigned char *)&value;
    size_t left = sizeof value;
    while (left > 0) {
        long got = syscall(SYS_getrandom, at, left, 0);
        if (got > 0) {
            at += got;
            left -= (size_t)got;
        } else if (got < 0 && errno != EINTR) {
            break; /* no getrandom (kernel < 3.17): whatever was read; random_device is not used here */
        }
    }
    return value;
}

/* ---- GLIBC_2.32 __libc_single_threaded (libstdc++ skips atomics when it is 1): never 1 here */
COMPAT_VISIBLE char __wrap___libc_single_threaded = 0;
