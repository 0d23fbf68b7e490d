#include "common/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <sstream>

namespace drover::procfs {
namespace {

// The entries of `dir` that are whole decimal numbers. readdir's errors (a /proc/<pid>/task
// whose process ended reads as ENOENT) end the list where they happen.
std::vector<int> NumericEntries(const std::string& dir) {
  std::vector<int> ids;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ids;
  while (const dirent* entry = ::readdir(d)) {
    const std::string_view name = entry->d_name;
    int id = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
    if (ec == std::errc() && end == name.data() + name.size() && !name.empty()) ids.push_back(id);
  }
  ::closedir(d);
  return ids;
}

}  // namespace

std::vector<int> Pids() { return NumericEntries("/proc"); }

std::vector<int> Tasks(int pid) { return NumericEntries("/proc/" + std::to_string(pid) + "/task"); }

std::vector<int> Fds(int pid) { return NumericEntries("/proc/" + std::to_string(pid) + "/fd"); }

std::string Read(int pid, std::string_view file, std::optional<int> tid) {
  std::string path = "/proc/" + std::to_string(pid);
  if (tid) path += "/task/" + std::to_string(*tid);
  path += "/";
  path += file;
  // With read(2) rather than a stream: a process that ends while its file is read makes the read
  // fail (ESRCH), which libstdc++'s filebuf reports by throwing, not as an end of file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      text.clear();  // gone, or unreadable: nothing rather than a part
      break;
    }
  }
  ::close(fd);
  return text;
}

std::optional<Stat> StatOf(int pid, std::optional<int> tid) {
  const std::string text = Read(pid, "stat", tid);
  const std::size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return std::nullopt;
  std::istringstream rest(text.substr(paren + 2));
  Stat stat;
  if (!(rest >> stat.state >> stat.ppid >> stat.pgrp)) return std::nullopt;
  return stat;
}

std::string CommandLine(int pid) {
  std::string line = Read(pid, "cmdline");
  for (char& c : line) c = c == '\0' ? ' ' : c;
  return line;
}

std::optional<std::uint64_t> StatusField(int pid, std::string_view name, std::optional<int> tid) {
  const std::string status = Read(pid, "status", tid);
  std::string_view rest = status;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    if (line.size() > name.size() && line.starts_with(name) && line[name.size()] == ':') {
      line.remove_prefix(name.size() + 1);
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
      std::uint64_t value = 0;
      const auto [next, error] = std::from_chars(line.data(), line.data() + line.size(), value);
      if (error != std::errc{} || next == line.data()) return std::nullopt;
      return value;
    }
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return std::nullopt;
}

std::string EnvValue(int pid, std::string_view name) {
  const std::string environ = Read(pid, "environ");
  std::string_view rest = environ;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\0');
    const std::string_view entry = rest.substr(0, end);
    if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=') {
      return std::string(entry.substr(name.size() + 1));
    }
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return {};
}

}  // namespace drover::procfs
