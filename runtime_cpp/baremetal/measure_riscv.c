/* Stack painting and tick counting on RV32, see measure.h: the stack walks in RISC-V assembly
 * (stack_marks.inc does the rest), the ticks from the minstret counter.
 *
 * minstret counts retired instructions on a real core. QEMU's reads the emulated time in
 * nanoseconds instead, which under -icount advances 2**shift per executed instruction: the target
 * file's core_clock_hz (1 GHz) makes codegen/targets/qemu.py's conversion give instructions. */
#include "measure.h"

/* Naked, so it writes below sp without a frame of its own in the way: a0 walks up from the
 * limit to sp. */
__attribute__((naked, noinline)) static void paint_below_sp(uint32_t* limit, uint32_t pattern) {
  (void)limit;
  (void)pattern;
  __asm__ volatile(
      "1:\n"
      "  bgeu a0, sp, 2f\n"
      "  sw a1, 0(a0)\n"
      "  addi a0, a0, 4\n"
      "  j 1b\n"
      "2:\n"
      "  ret\n");
}

/* Scans up from the limit for the first word that no longer holds the pattern. Naked for the
 * same reason: a frame of its own would be counted as used. */
__attribute__((naked, noinline)) static uintptr_t first_written(uint32_t* limit, uint32_t* top,
                                                               uint32_t pattern) {
  (void)limit;
  (void)top;
  (void)pattern;
  __asm__ volatile(
      "1:\n"
      "  bgeu a0, a1, 2f\n"
      "  lw a3, 0(a0)\n"
      "  bne a3, a2, 2f\n"
      "  addi a0, a0, 4\n"
      "  j 1b\n"
      "2:\n"
      "  ret\n");
}

uintptr_t tinsmith_stack_pointer(void) {
  uintptr_t sp;
  __asm__ volatile("mv %0, sp" : "=r"(sp));
  return sp;
}

#include "stack_marks.inc"

/* The CSR instructions are the Zicsr extension, which GCC 12's -march=rv32imac leaves out (and
 * naming it there would miss picolibc's multilib): enabled for these lines only. */
#define READ_CSR(name, value) \
  __asm__ volatile(".option push\n .option arch, +zicsr\n csrr %0, " name "\n .option pop" : "=r"(value))

static uint64_t start = 0;

static uint64_t minstret(void) {
  uint32_t high, low, again;
  do { /* the high half again: a carry between the two reads would pair the wrong halves */
    READ_CSR("minstreth", high);
    READ_CSR("minstret", low);
    READ_CSR("minstreth", again);
  } while (high != again);
  return ((uint64_t)high << 32) | low;
}

void tinsmith_ticks_start(void) { start = minstret(); }

uint64_t tinsmith_ticks_now(void) {
  const uint64_t now = minstret();
  /* A counter that stands still has no clock (a core that does not implement it reads 0). */
  return now == start ? TINSMITH_TICKS_UNKNOWN : now - start;
}

void tinsmith_ticks_stop(void) {}
