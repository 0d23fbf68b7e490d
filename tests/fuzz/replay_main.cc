// The driver of a fuzz target in the regular build: runs LLVMFuzzerTestOneInput on every file
// of the directories (or files) given, so each corpus is a regression suite. libFuzzer's own
// main replaces this in the fuzzing build (scripts/fuzz.sh).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int Run(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return 1;
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int inputs = 0, failures = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (!entry.is_regular_file()) continue;
        failures += Run(entry.path());
        ++inputs;
      }
    } else {
      failures += Run(path);
      ++inputs;
    }
  }
  std::printf("%d inputs replayed\n", inputs);
  if (inputs == 0) {
    std::fprintf(stderr, "no inputs: give corpus directories or files\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
