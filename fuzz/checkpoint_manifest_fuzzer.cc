// Fuzz target: the checkpoint manifest reader (manifest.json, read by every --load) on any bytes. A manifest
// is either accepted, and then writes back to text that reads back to the same manifest, or rejected with a
// CheckpointError of one line.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz/fuzz_support.h"
#include "zero/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gpt::CheckpointManifest manifest;
  try {
    manifest = gpt::parse_manifest(text, "manifest.json");
  } catch (const gpt::UsageError& e) {
    gpt::fuzz::expect_one_line(e);
    return 0;
  }
  const std::string written = gpt::manifest_text(manifest);
  if (gpt::manifest_text(gpt::parse_manifest(written, "written")) != written) {
    std::fprintf(stderr, "an accepted manifest does not survive a write and a read\n");
    std::abort();
  }
  return 0;
}
