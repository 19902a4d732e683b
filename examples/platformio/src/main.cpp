// Runs the generated model on one window; a real product feeds it sensor data and acts on
// the result (here it only keeps the most likely state where a debugger can read it).
#include "vibration.hpp"

static vibration::Input_samples samples;
static vibration::Output_health health;
static vibration::Workspace workspace;
volatile unsigned most_likely_state;

int main() {
  for (unsigned i = 0; i < vibration::Input_samples::kSize; ++i) {
    samples.data[i] = static_cast<float>(static_cast<int>(i * 7u % 11u) - 5) / 5.0f;
  }
  vibration::init_ws(workspace);
  vibration::call(samples, health, workspace);
  unsigned best = 0;
  for (unsigned c = 1; c < vibration::Output_health::kSize; ++c) {
    if (health.data[c] > health.data[best]) best = c;
  }
  most_likely_state = best;
  return 0;
}
