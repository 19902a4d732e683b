// Classifies one synthetic vibration window with the generated model through its C++ API
// (vibration.hpp) and prints the three probabilities and the most likely state.
//
// On the host it prints to stdout; built with VIBRATION_DEMO_SEMIHOSTING (the Cortex-M
// firmware) it prints through semihosting, which QEMU or a debugger shows on the host.
#include "vibration.hpp"

#ifdef VIBRATION_DEMO_SEMIHOSTING
#include "semihost.h"
static void print(const char* text) { tinsmith_sh_puts(text); }
#else
#include <cstdio>
static void print(const char* text) { std::fputs(text, stdout); }
#endif

namespace {

vibration::Input_samples samples;
vibration::Output_health health;
vibration::Workspace workspace;

// A probability (0..1) as "0.123456": no printf, so firmware needs no stdio.
void print_probability(float p) {
  unsigned millionths = static_cast<unsigned>(p * 1e6f + 0.5f);
  char text[] = "0.000000";
  text[0] = static_cast<char>('0' + millionths / 1000000u);
  for (int i = 7; i >= 2; --i, millionths /= 10u) text[i] = static_cast<char>('0' + millionths % 10u);
  print(text);
}

}  // namespace

int main() {
  // A lopsided oscillation, the same on every build: (7 i mod 11 - 5) / 5.
  for (unsigned i = 0; i < vibration::Input_samples::kSize; ++i) {
    samples.data[i] = static_cast<float>(static_cast<int>(i * 7u % 11u) - 5) / 5.0f;
  }
  vibration::init_ws(workspace);
  vibration::call(samples, health, workspace);

  static const char* const kStates[] = {"normal", "imbalance", "loose mount"};
  unsigned best = 0;
  print("vibration:");
  for (unsigned c = 0; c < vibration::Output_health::kSize; ++c) {
    print(" ");
    print_probability(health.data[c]);
    if (health.data[c] > health.data[best]) best = c;
  }
  print(" -> ");
  print(kStates[best]);
  print("\n");
  return 0;
}
