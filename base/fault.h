// The one fault hook of the tests: GPT_FAULT names a failure to inject, so tests can show that every rank
// stops together with one message and that nothing is lost. Never set it in production.
//   GPT_FAULT=hang:STEP:RANK     rank RANK stops making progress before training step STEP (as a rank stuck
//   in
//                                I/O or a deadlock would), so the others' communication watchdog must end the
//                                job
//   GPT_FAULT=save_fail:RANK     rank RANK's checkpoint shard write fails, as on a full disk
//   GPT_FAULT=crash_after:POINT  rank 0 exits with code 42 right after that point of a checkpoint save:
//                                shards, manifest, rename or latest
// GPT_CHECKPOINT_FAULT=POINT, the older spelling, still means crash_after:POINT.
#pragma once

#include <string>

namespace gpt {

// Whether GPT_FAULT asks rank `rank` to hang before training step `step` (counted from 1).
bool fault_hangs(long long step, int rank);
// Whether GPT_FAULT asks rank `rank`'s checkpoint write to fail.
bool fault_save_fails(int rank);
// Whether GPT_FAULT (or GPT_CHECKPOINT_FAULT) asks for a crash after `point`.
bool fault_crash_after(const std::string& point);

}  // namespace gpt
