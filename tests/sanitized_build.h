// Whether this test binary carries a sanitizer (--config=asan, --config=tsan, --config=fuzz). The heaviest
// checks then take a sample (every k-th element) so that scripts/test stays within its time budget; the
// optimized build still checks everything.
#pragma once

#include <cstdint>

namespace gpt::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// `stride` in the optimized build, `stride` x `sample` in a sanitized one (keep both odd so that every column
// of power-of-two widths is still visited).
inline constexpr int64_t sampled_stride(int64_t stride, int64_t sample) {
  return kSanitizedBuild ? stride * sample : stride;
}

}  // namespace gpt::test
