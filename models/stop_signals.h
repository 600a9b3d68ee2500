// SIGTERM and SIGINT while training: the first asks the trainer to stop after the step in
// flight and save a checkpoint; a second ends the process at once, as if nothing caught it
// (the checkpoint is written to a temporary file and renamed, so the previous one stays whole).
#pragma once

namespace models {

class StopSignals {
 public:
  // Installs the handlers (SA_RESTART: interrupted system calls resume), except for a signal
  // this process was started ignoring, which stays ignored.
  StopSignals();
  ~StopSignals();  // puts back what was there before
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0 while no signal came, else the first signal's number (SIGTERM, SIGINT).
  static int received();
  // The usual exit status of a process ended by signal `sig`: 128 + sig (143, 130).
  static int exit_code(int sig) { return 128 + sig; }
  static const char* name(int sig);
};

}  // namespace models
