#include "common/fencing.h"

#include <charconv>
#include <string_view>

namespace drover {
namespace {

constexpr std::string_view kPrefix = "fenced:";
constexpr std::string_view kNewest = "newest generation ";

}  // namespace

Status FencedError(const std::string& service, const std::string& id, std::uint64_t generation,
                   std::uint64_t newest, const std::string& why) {
  return AbortedError(std::string(kPrefix) + " " + service + "/" + id + " generation " +
                      std::to_string(generation) + " is stale: " + std::string(kNewest) +
                      std::to_string(newest) + " (" + why + ")");
}

bool IsFenced(const Status& status) {
  if (status.code() != StatusCode::kAborted) return false;
  // Context added on the way up ("register: fenced: ...") keeps it a fencing error.
  const std::string_view message = status.message();
  return message.starts_with(kPrefix) ||
         message.find(": " + std::string(kPrefix)) != std::string_view::npos;
}

std::optional<std::uint64_t> FencedNewestGeneration(const Status& status) {
  if (!IsFenced(status)) return std::nullopt;
  const std::string_view message = status.message();
  const std::size_t at = message.find(kNewest);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view digits = message.substr(at + kNewest.size());
  std::uint64_t newest = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), newest);
  if (ec != std::errc() || end == digits.data()) return std::nullopt;
  return newest;
}

}  // namespace drover
