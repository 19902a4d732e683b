/* Semihosting calls on RISC-V ("RISC-V Semihosting", version 0.2): the operation in a0, the
 * argument block in a1, the result back in a0, and the trap is `ebreak` between two no-op shifts,
 * `slli x0, x0, 0x1f` and `srai x0, x0, 7`, by which the host tells it from a debugger's
 * breakpoint. The three must be 32-bit instructions (no compressed forms) in one page; the calls
 * themselves are semihost_calls.inc, shared with Arm. */
#include "semihost.h"

static int call_host(int operation, const void* argument) {
  register int a0 __asm__("a0") = operation;
  register const void* a1 __asm__("a1") = argument;
  /* "memory": the host reads and writes the blocks a1 points to. 16-byte alignment keeps the
   * 12 bytes in one page. */
  __asm__ volatile(
      ".option push\n"
      ".option norvc\n"
      ".balign 16\n"
      "slli zero, zero, 0x1f\n"
      "ebreak\n"
      "srai zero, zero, 7\n"
      ".option pop\n"
      : "+r"(a0)
      : "r"(a1)
      : "memory");
  return a0;
}

#include "semihost_calls.inc"
