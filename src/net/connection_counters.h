// What a TcpListener counts of its connections, for its owner's metrics. Kept apart from
// tcp_listener.h so that headers reporting them need no Asio.
#pragma once

#include <atomic>
#include <cstdint>

namespace drover::net {

struct ConnectionCounters {
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> active{0};   // connections being served now
  std::atomic<std::uint64_t> refused{0};  // over max_connections: closed at once
};

}  // namespace drover::net
