/* Semihosting calls on Arm (Arm "Semihosting for AArch32 and AArch64", version 2): the trap is
 * `bkpt 0xAB`; the calls themselves are semihost_calls.inc. */
#include "semihost.h"

static int call_host(int operation, const void* argument) {
  register int r0 __asm__("r0") = operation;
  register const void* r1 __asm__("r1") = argument;
  /* "memory": the host reads and writes the blocks r1 points to. */
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

#include "semihost_calls.inc"
