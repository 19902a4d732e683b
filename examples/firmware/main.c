/* Firmware that classifies one synthetic accelerometer window with the generated model.
   Only the C API of gesture.h is used: a C firmware needs nothing else from Tinsmith. */
#include <stdint.h>

#include "gesture.h"
#include "semihost.h" /* prints through the debugger / QEMU; use your UART instead */

static float window[GESTURE_SIZE_window];
static float scores[GESTURE_SIZE_scores];
static _Alignas(16) unsigned char workspace[GESTURE_WORKSPACE_BYTES];

static void print_uint(unsigned value) {
  char text[12];
  int n = 11;
  text[n] = '\0';
  do {
    text[--n] = (char)('0' + value % 10u);
    value /= 10u;
  } while (value != 0u && n > 0);
  tinsmith_sh_puts(&text[n]);
}

int main(void) {
  /* A "shake": alternating accelerations on x, steady gravity on z. */
  for (unsigned i = 0; i < GESTURE_SIZE_window; i += 3u) {
    window[i] = (i / 3u) % 2u ? 1.5f : -1.5f;
    window[i + 1u] = 0.1f;
    window[i + 2u] = 9.8f / 9.8f;
  }
  gesture_init_ws(workspace);
  gesture_call(window, scores, workspace);

  unsigned best = 0;
  for (unsigned c = 1; c < GESTURE_SIZE_scores; ++c) {
    if (scores[c] > scores[best]) best = c;
  }
  tinsmith_sh_puts("gesture: class ");
  print_uint(best);
  tinsmith_sh_puts(", confidence ");
  print_uint((unsigned)(scores[best] * 1000.0f + 0.5f));
  tinsmith_sh_puts("/1000\n");
  return 0;
}
