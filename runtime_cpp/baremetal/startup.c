/* Reset and exception handling for Cortex-M test firmware (ARMv6-M and ARMv7-M/ARMv7E-M).
 *
 * Replaces newlib's crt0: the reset handler enables the FPU, paints the stack, copies
 * .data, zeroes .bss, runs static constructors, calls main() and hands its status to the
 * host through semihosting. Symbols come from sections.ld. */
#include <stdint.h>

#include "measure.h"
#include "semihost.h"

extern uint32_t __stack_top[];
#include "reset_steps.inc"

#define CPACR (*(volatile uint32_t*)0xE000ED88u)
#define CPACR_CP10_CP11_FULL (0xFu << 20)

void Reset_Handler(void) {
#if defined(__ARM_FP)
  /* Before any floating-point instruction: with CP10/CP11 off the first one is a
   * UsageFault. */
  CPACR |= CPACR_CP10_CP11_FULL;
  __asm__ volatile("dsb\n isb" ::: "memory");
#endif
  tinsmith_start_main();
}

static void hex(char* to, uint32_t value) {
  for (int i = 7; i >= 0; --i, value >>= 4) to[i] = "0123456789abcdef"[value & 0xFu];
}

/* `frame` is the exception frame the core stacked: r0-r3, r12, lr, pc, xpsr. */
__attribute__((noreturn, used)) void tinsmith_fault_report(const uint32_t* frame) {
  uint32_t ipsr;
  __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
  char text[] = "tinsmith firmware: exception 0x........ at pc 0x........\n";
  hex(text + sizeof "tinsmith firmware: exception 0x" - 1, ipsr & 0x1FFu);
  hex(text + sizeof "tinsmith firmware: exception 0x........ at pc 0x" - 1, frame[6]);
  tinsmith_sh_puts(text);
  tinsmith_sh_exit(3);
}

/* Every exception nobody else handles ends the run with status 3 and says where. Naked,
 * so that msp still points at the stacked frame. */
__attribute__((naked)) void Default_Handler(void) {
  __asm__ volatile(
      "  mrs r0, msp\n"
      "  bl tinsmith_fault_report\n");
}

void NMI_Handler(void) __attribute__((weak, alias("Default_Handler")));
void HardFault_Handler(void) __attribute__((weak, alias("Default_Handler")));
void MemManage_Handler(void) __attribute__((weak, alias("Default_Handler")));
void BusFault_Handler(void) __attribute__((weak, alias("Default_Handler")));
void UsageFault_Handler(void) __attribute__((weak, alias("Default_Handler")));
void SVC_Handler(void) __attribute__((weak, alias("Default_Handler")));
void DebugMon_Handler(void) __attribute__((weak, alias("Default_Handler")));
void PendSV_Handler(void) __attribute__((weak, alias("Default_Handler")));
void SysTick_Handler(void) __attribute__((weak, alias("Default_Handler")));

/* The 16 system entries; no external interrupt is enabled, so none has an entry. ARMv6-M
 * reserves the MemManage/BusFault/UsageFault/DebugMon slots and never uses them. */
struct tinsmith_vectors {
  uint32_t* initial_sp;
  void (*handlers[15])(void);
};

__attribute__((section(".vectors"), used)) const struct tinsmith_vectors tinsmith_vector_table = {
    __stack_top,
    {Reset_Handler, NMI_Handler, HardFault_Handler, MemManage_Handler, BusFault_Handler,
     UsageFault_Handler, 0, 0, 0, 0, SVC_Handler, DebugMon_Handler, 0, PendSV_Handler,
     SysTick_Handler},
};
