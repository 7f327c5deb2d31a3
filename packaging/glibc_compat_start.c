/* The wheel's executables on glibc 2.28 (see glibc_compat.c): the start-up code (Scrt1.o) of a
 * glibc >= 2.34 calls __libc_start_main@GLIBC_2.34 with no init function, because that glibc runs
 * the executable's constructors itself. The executables link with
 * -Wl,--wrap=__libc_start_main, and this wrapper calls the GLIBC_2.2.5 version with an init
 * function that runs them the way older start-up code did (_init, then .init_array; the
 * .preinit_array is the dynamic loader's). Every glibc >= 2.34 keeps that path for old
 * executables: it calls a non-null init instead of running the constructors itself. */
typedef void (*init_fn)(int, char **, char **);

extern init_fn __init_array_start[] __attribute__((visibility("hidden")));
extern init_fn __init_array_end[] __attribute__((visibility("hidden")));
extern void _init(void);

typedef int (*main_fn)(int, char **, char **);
extern int old_libc_start_main(main_fn, int, char **, init_fn, void (*)(void), void (*)(void), void *);
__asm__(".symver old_libc_start_main,__libc_start_main@GLIBC_2.2.5");

static void run_constructors(int argc, char **argv, char **envp) {
    _init();
    for (init_fn *f = __init_array_start; f < __init_array_end; ++f) (*f)(argc, argv, envp);
}

__attribute__((visibility("hidden"))) int __wrap___libc_start_main(main_fn main, int argc, char **argv,
                                                                   init_fn init, void (*fini)(void),
                                                                   void (*rtld_fini)(void), void *stack_end) {
    (void)init; /* NULL from a glibc >= 2.34 Scrt1.o */
    return old_libc_start_main(main, argc, argv, run_constructors, fini, rtld_fini, stack_end);
}
