// Whether the test runs on a sanitizer's allocator (AddressSanitizer's or ThreadSanitizer's):
// freed blocks wait in its quarantine and blocks carry redzones or shadow memory, so the
// process's resident set then says little of what the code under test holds or gives back, and
// bounds on it are checked only without one.
#pragma once

namespace drover::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitizerAllocator = true;
#else
inline constexpr bool kSanitizerAllocator = false;
#endif
#else
inline constexpr bool kSanitizerAllocator = false;
#endif

}  // namespace drover::testing
