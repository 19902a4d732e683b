/* Stack painting and tick counting on Cortex-M, see measure.h: the stack walks in Thumb-1
 * assembly (stack_marks.inc does the rest), the ticks from SysTick. */
#include "measure.h"

/* Naked, so it writes below sp without a frame of its own in the way: r0 walks up from
 * the limit to sp. Thumb-1 instructions only, so it runs on ARMv6-M as well. */
__attribute__((naked, noinline)) static void paint_below_sp(uint32_t* limit, uint32_t pattern) {
  (void)limit;
  (void)pattern;
  __asm__ volatile(
      "  .syntax unified\n" /* GCC reads Thumb-1 inline asm as divided syntax otherwise */
      "  mov r2, sp\n"
      "1:\n"
      "  cmp r0, r2\n"
      "  bhs 2f\n"
      "  str r1, [r0]\n"
      "  adds r0, r0, #4\n"
      "  b 1b\n"
      "2:\n"
      "  bx lr\n");
}

/* Scans up from the limit for the first word that no longer holds the pattern. Naked for
 * the same reason: a frame of its own would be counted as used. */
__attribute__((naked, noinline)) static uintptr_t first_written(uint32_t* limit, uint32_t* top,
                                                               uint32_t pattern) {
  (void)limit;
  (void)top;
  (void)pattern;
  __asm__ volatile(
      "  .syntax unified\n"
      "1:\n"
      "  cmp r0, r1\n"
      "  bhs 2f\n"
      "  ldr r3, [r0]\n"
      "  cmp r3, r2\n"
      "  bne 2f\n"
      "  adds r0, r0, #4\n"
      "  b 1b\n"
      "2:\n"
      "  bx lr\n");
}

uintptr_t tinsmith_stack_pointer(void) {
  uintptr_t sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  return sp;
}

#include "stack_marks.inc"

/* SysTick, present on every Cortex-M that QEMU models. */
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)
#define SYST_CSR_ENABLE 1u
#define SYST_CSR_TICKINT 2u
#define SYST_CSR_CLKSOURCE_CORE 4u
#define SYST_RELOAD 0x00FFFFFFu

#define ICSR (*(volatile uint32_t*)0xE000ED04u)
#define ICSR_PENDSTSET (1u << 26)

static volatile uint32_t wraps = 0;

void SysTick_Handler(void) { wraps = wraps + 1u; }

void tinsmith_ticks_start(void) {
  SYST_CSR = 0;
  wraps = 0;
  SYST_RVR = SYST_RELOAD;
  SYST_CVR = 0; /* any write clears the counter; it reloads on the next tick */
  SYST_CSR = SYST_CSR_ENABLE | SYST_CSR_TICKINT | SYST_CSR_CLKSOURCE_CORE;
}

uint64_t tinsmith_ticks_now(void) {
  uint32_t wraps_before, pending_before, count, pending_after, wraps_after;
  /* Retry until the wrap count, a wrap still pending and the counter agree: a wrap the
   * handler counts, or one raised, between the reads would pair the counter with the wrong
   * period. A zero counter is skipped because it is the one value seen both just before
   * and just after the wrap is raised. A counter that never leaves zero has no clock. */
  for (uint32_t tries = 0; tries < 1000u; ++tries) {
    wraps_before = wraps;
    pending_before = ICSR & ICSR_PENDSTSET;
    count = SYST_CVR;
    pending_after = ICSR & ICSR_PENDSTSET;
    wraps_after = wraps;
    if (wraps_before == wraps_after && pending_before == pending_after && count != 0u) {
      const uint64_t periods = (uint64_t)wraps_before + (pending_before != 0u ? 1u : 0u);
      return periods * (SYST_RELOAD + 1u) + (SYST_RELOAD - count);
    }
  }
  return TINSMITH_TICKS_UNKNOWN;
}

void tinsmith_ticks_stop(void) { SYST_CSR = 0; }
