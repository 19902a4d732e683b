/* Measurements for test firmware: stack high-water marks and a SysTick tick counter.
 *
 * Stack: the reset handler fills the stack region with a pattern; a word still holding the
 * pattern was never written. tinsmith_stack_paint() repaints everything below the caller's
 * stack pointer, so the bytes a single call uses are (sp before the call) - (lowest word
 * written).
 *
 * Ticks: SysTick runs from the core clock. Under QEMU with -icount the core clock is
 * derived from the number of executed instructions, so a tick count converts to an
 * instruction count on the host (see codegen/targets/qemu.py). */
#ifndef TINSMITH_MEASURE_H
#define TINSMITH_MEASURE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TINSMITH_STACK_PATTERN 0xC5AC5AC5u

/* Fills [stack limit, current sp) with the pattern; uses no stack itself. */
void tinsmith_stack_paint(void);
/* Current stack pointer. */
uintptr_t tinsmith_stack_pointer(void);
/* Lowest address written since the region was last painted (the stack top if none). */
uintptr_t tinsmith_stack_lowest(void);
/* Bytes between the stack limit and the stack top. */
uint32_t tinsmith_stack_region_bytes(void);
/* Bytes used since reset, at most (the stack top minus the lowest address ever written). */
uint32_t tinsmith_stack_peak_bytes(void);

/* Starts SysTick from the core clock with wrap counting; safe to call again. */
void tinsmith_ticks_start(void);
#define TINSMITH_TICKS_UNKNOWN UINT64_MAX
/* Core clock ticks since tinsmith_ticks_start(), or TINSMITH_TICKS_UNKNOWN if SysTick does
 * not count (a board whose emulation gives it no clock). */
uint64_t tinsmith_ticks_now(void);
/* Stops SysTick. */
void tinsmith_ticks_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* TINSMITH_MEASURE_H */
