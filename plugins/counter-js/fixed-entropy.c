/*
 * fixed-entropy.so: preloaded (LD_PRELOAD) into componentize-js's Wizer run by build.sh,
 * so that the engine snapshot it writes is the same on every build.
 *
 * Wizer runs StarlingMonkey's initialisation and stores the engine's memory in the
 * component. That memory holds what the run read from the machine: random bytes (hash
 * seeds, the PRNG state) and clock readings. This library answers both with constants:
 *
 * - getrandom(2), both the libc wrapper and the raw syscall(SYS_getrandom, ...) that
 *   Rust's getrandom crate uses (which libfaketime's FAKERANDOM_SEED does not reach):
 *   the same pseudo-random bytes for every call (a 64-bit LCG from a fixed seed; no
 *   secrecy is wanted at build time);
 * - clock_gettime(2), every clock: a fixed instant (2020-01-01T00:00:00Z), never
 *   advancing. (libfaketime would do the same but writes FAKETIME_SHARED=<its pid>
 *   into the environment, which Wizer's --inherit-env hands to the snapshot.)
 *
 * Nothing here is used at run time: a running plugin gets real randomness and real
 * clocks from the host. Only build-time readings become constants, which they already
 * were for every instance of one build (all start from the same snapshot).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>

/* Every call gets the same bytes: threads that ask in a different order from one build
 * to the next still get the same answers. */
static void fill(unsigned char *out, size_t n) {
  unsigned long long state = 0x0123456789abcdefULL;
  for (size_t i = 0; i < n; i++) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = (unsigned char)(state >> 56);
  }
}

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
  (void)flags;
  fill(buf, len);
  return (ssize_t)len;
}

int clock_gettime(clockid_t clock, struct timespec *tp) {
  (void)clock;
  tp->tv_sec = 1577836800; /* 2020-01-01T00:00:00Z */
  tp->tv_nsec = 0;
  return 0;
}

/* syscall(2) passes up to six word-sized arguments; forward all six untouched. */
long syscall(long number, ...) {
  va_list ap;
  long a[6];
  va_start(ap, number);
  for (int i = 0; i < 6; i++)
    a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_getrandom) {
    fill((unsigned char *)a[0], (size_t)a[1]);
    return a[1];
  }
  if (number == SYS_clock_gettime)
    return clock_gettime((clockid_t)a[0], (struct timespec *)a[1]);
  static long (*real)(long, ...);
  if (!real)
    real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
