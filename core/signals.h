// SIGINT/SIGTERM become a "stop requested" flag that the trainer polls between steps, so a preempted
// job finishes its step, checkpoints and exits 0. The flag is the one piece of process-wide state a
// signal handler can touch; nothing else here is global.
#pragma once

namespace loom {

void install_stop_signal_handlers();
bool stop_requested();
void request_stop();  // for tests and for a rank told to stop by another

}  // namespace loom
