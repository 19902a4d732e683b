/* Reset and trap handling for RV32 test firmware in machine mode (QEMU virt with -bios none,
 * whose reset vector jumps to the first byte of the image).
 *
 * Replaces picolibc's crt0: Reset_Handler sets the stack pointer and the trap vector, enables the
 * FPU where there is one, paints the stack, copies .data, zeroes .bss, runs static constructors,
 * calls main() and hands its status to the host through semihosting. Symbols come from
 * sections.ld, which puts .vectors (here: Reset_Handler itself) first in FLASH. The global
 * pointer stays unused: nothing defines __global_pointer$, so the linker relaxes no access to it. */
#include "reset_steps.inc"

void tinsmith_trap_entry(void);

#define MSTATUS_FS_INITIAL 0x2000u /* mstatus.FS = 1: F registers usable */

__attribute__((noreturn, used)) void tinsmith_reset(void) {
#if defined(__riscv_flen)
  /* Before any floating-point instruction: with mstatus.FS off the first one traps. */
  __asm__ volatile(".option push\n .option arch, +zicsr\n csrs mstatus, %0\n csrw fcsr, zero\n .option pop"
                   :: "r"(MSTATUS_FS_INITIAL));
#endif
  tinsmith_start_main();
}

/* The image's entry and first instruction: the stack pointer and trap vector, then C. */
__attribute__((naked, section(".vectors"))) void Reset_Handler(void) {
  __asm__ volatile(
      "  la sp, __stack_top\n"
      "  la t0, tinsmith_trap_entry\n"
      "  .option push\n"
      "  .option arch, +zicsr\n"
      "  csrw mtvec, t0\n"
      "  .option pop\n"
      "  j tinsmith_reset\n");
}

static void hex(char* to, uint32_t value) {
  for (int i = 7; i >= 0; --i, value >>= 4) to[i] = "0123456789abcdef"[value & 0xFu];
}

__attribute__((noreturn, used)) void tinsmith_fault_report(uint32_t cause, uint32_t pc) {
  char text[] = "tinsmith firmware: exception 0x........ at pc 0x........\n";
  hex(text + sizeof "tinsmith firmware: exception 0x" - 1, cause);
  hex(text + sizeof "tinsmith firmware: exception 0x........ at pc 0x" - 1, pc);
  tinsmith_sh_puts(text);
  tinsmith_sh_exit(3);
}

/* Every trap (no interrupt is enabled, so every one is an exception) ends the run with status 3
 * and says which (mcause) and where (mepc). mtvec's direct mode needs 4-byte alignment. */
__attribute__((naked, aligned(4), used)) void tinsmith_trap_entry(void) {
  __asm__ volatile(
      "  .option push\n"
      "  .option arch, +zicsr\n"
      "  csrr a0, mcause\n"
      "  csrr a1, mepc\n"
      "  .option pop\n"
      "  j tinsmith_fault_report\n");
}
