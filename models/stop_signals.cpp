// The trainer's stop signals (models/stop_signals.h). The handler only does what is
// async-signal-safe: it sets a flag and writes one line, and on a second signal restores the
// default action and raises it again.
#include "models/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <utility>

namespace models {

namespace {

volatile sig_atomic_t g_received = 0;
struct sigaction g_previous_term, g_previous_int;

void write_stderr(const char* text) {
  ssize_t ignored = ::write(2, text, std::strlen(text));
  (void)ignored;
}

void on_stop_signal(int sig) {
  if (g_received != 0) {  // the second: end now, as the default action does
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    write_stderr("\ntrainer: second signal: exiting now (the last checkpoint written is intact)\n");
    raise(sig);  // delivered when this handler returns (the signal is blocked inside it)
    return;
  }
  g_received = sig;
  write_stderr(sig == SIGINT ? "\ntrainer: SIGINT: finishing the step in flight, then saving a checkpoint "
                               "(again to exit at once)\n"
                             : "\ntrainer: SIGTERM: finishing the step in flight, then saving a checkpoint "
                               "(again to exit at once)\n");
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM);  // one handler at a time, whichever of the two came
  sigaddset(&sa.sa_mask, SIGINT);
  sa.sa_flags = SA_RESTART;
  // A signal ignored at start stays ignored (nohup; a shell's background job ignores SIGINT).
  for (auto [sig, previous] : {std::pair{SIGTERM, &g_previous_term}, std::pair{SIGINT, &g_previous_int}}) {
    sigaction(sig, nullptr, previous);
    if (previous->sa_handler != SIG_IGN) sigaction(sig, &sa, nullptr);
  }
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
}

int StopSignals::received() { return g_received; }

const char* StopSignals::name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace models
