// A loopback port where nothing listens right now, for a test that must know a port before its
// server opens it (a registry that restarts on the same ports), or needs an address that refuses.
//
// Ports come from 20000-32767, below the kernel's ephemeral range (32768 and up by default), so
// no outgoing connection of any process is given one of them as its source port. Each port is
// claimed for the life of the test process with an flock on a file named after it, so tests
// running in parallel (ctest -j) never pick the same one; the lock goes when the process does,
// or after 256 later claims (by then a server holds the port, and the bind check sees it).
// A port is taken only if nothing is bound to it on any address (a wildcard bind succeeds).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>

namespace drover::testing {

inline std::uint16_t FreeLoopbackPort() {
  static std::mutex mu;
  static std::deque<int> claims;  // lock files held, oldest first
  static std::minstd_rand random(static_cast<unsigned>(::getpid()) * 7919u ^
                                 static_cast<unsigned>(std::random_device{}()));
  std::lock_guard lock(mu);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "drover-test-ports";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ::chmod(dir.c_str(), 01777);  // shared by every user's tests, like /tmp
  std::uniform_int_distribution<int> pick(20000, 32767);
  for (int attempt = 0; attempt < 2000; ++attempt) {
    const auto port = static_cast<std::uint16_t>(pick(random));
    const std::string claim = (dir / std::to_string(port)).string();
    const int held = ::open(claim.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
    if (held < 0) continue;
    if (::flock(held, LOCK_EX | LOCK_NB) != 0) {  // another test process holds it
      ::close(held);
      continue;
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(port);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (!free) {
      ::close(held);
      continue;
    }
    claims.push_back(held);  // stays open: the claim lasts
    if (claims.size() > 256) {
      ::close(claims.front());
      claims.pop_front();
    }
    return port;
  }
  return 0;
}

inline std::string FreeLoopbackAddress() {
  return "127.0.0.1:" + std::to_string(FreeLoopbackPort());
}

}  // namespace drover::testing
