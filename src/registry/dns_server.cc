#include "registry/dns_server.h"

#include <spdlog/spdlog.h>

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/host_port.h"
#include "common/text.h"
#include "common/thread_name.h"
#include "drover/mutex.h"
#include "net/tcp_listener.h"
#include "registry/registry.h"

namespace drover::registry {

namespace asio = boost::asio;
namespace beast = boost::beast;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using udp = asio::ip::udp;

namespace {

constexpr auto kTcpIdle = std::chrono::seconds(10);
constexpr int kBindTries = 5;
constexpr auto kStopBound =
    std::chrono::seconds(2);  // port 0: a free TCP port may be taken on UDP; try another

// The catalog over the registry's current state (its read lock only).
class RegistryCatalog final : public DnsCatalog {
 public:
  RegistryCatalog(const Registry& registry, Clock& clock) : registry_(registry), clock_(clock) {}

  std::optional<std::vector<Instance>> Instances(std::string_view service) const override {
    if (auto list = registry_.List(std::string(service)); list.ok() && !list->instances.empty()) {
      return std::move(list->instances);
    }
    // DNS names are case-blind and clients may lower them: a service with capitals is found
    // through its lowered name.
    const std::string name = WithCapitals(service);
    if (name.empty()) return std::nullopt;
    if (auto list = registry_.List(name); list.ok() && !list->instances.empty()) {
      return std::move(list->instances);
    }
    return std::nullopt;
  }

 private:
  // The registered name with capitals that `service` lowers to, or "". Services() walks the
  // registry, so its index is rebuilt at most once a second, and only when a name misses: a flood
  // of queries for names that do not exist costs a map look-up each.
  std::string WithCapitals(std::string_view service) const DROVER_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    const MonoTime now = clock_.Now();
    if (!indexed_ || now - indexed_at_ >= kIndexAge) {
      with_capitals_.clear();
      for (const ServiceSummary& s : registry_.Services()) {
        const std::string lowered = AsciiLower(s.name);
        if (lowered != s.name) with_capitals_.emplace(lowered, s.name);
      }
      indexed_ = true;
      indexed_at_ = now;
    }
    auto it = with_capitals_.find(AsciiLower(service));
    return it == with_capitals_.end() ? std::string() : it->second;
  }

  static constexpr auto kIndexAge = std::chrono::seconds(1);
  const Registry& registry_;
  Clock& clock_;
  mutable Mutex mu_;
  mutable std::map<std::string, std::string, std::less<>> with_capitals_ DROVER_GUARDED_BY(mu_);
  mutable bool indexed_ DROVER_GUARDED_BY(mu_) = false;
  mutable MonoTime indexed_at_ DROVER_GUARDED_BY(mu_){};
};

}  // namespace

struct DnsServer::Impl {
  Impl(const Registry& registry, DnsOptions o, Clock& clock)
      : options(std::move(o)),
        catalog(registry, clock),
        counters_ptr(options.counters ? options.counters : std::make_shared<DnsCounters>()),
        counters(*counters_ptr) {}

  DnsOptions options;
  RegistryCatalog catalog;
  std::shared_ptr<DnsCounters> counters_ptr;
  DnsCounters& counters;
  asio::io_context io{1};
  std::unique_ptr<net::TcpListener> tcp;
  std::optional<udp::socket> udp_socket;
  std::array<std::uint8_t, 65535> datagram{};
  udp::endpoint datagram_from;
  std::promise<void> ran;  // set when the io thread's run() returns
  std::future<void> stopped;
  std::thread thread;
  std::once_flag stop_once;

  DnsReply Answer(std::span<const std::uint8_t> query, DnsTransport transport) {
    (transport == DnsTransport::kUdp ? counters.udp_queries : counters.tcp_queries)
        .fetch_add(1, std::memory_order_relaxed);
    DnsReply reply = AnswerDnsQuery(query, transport, options.zone, catalog);
    if (reply.wire.empty() || reply.rcode == 1 /* FORMERR */) {
      counters.malformed.fetch_add(1, std::memory_order_relaxed);
    } else if (reply.rcode == 3 /* NXDOMAIN */) {
      counters.nxdomain.fetch_add(1, std::memory_order_relaxed);
    } else if (reply.rcode == 4 || reply.rcode == 5 /* NOTIMP, REFUSED */) {
      counters.refused.fetch_add(1, std::memory_order_relaxed);
    }
    if (reply.truncated) counters.truncated.fetch_add(1, std::memory_order_relaxed);
    return reply;
  }

  // Runs on the io thread only: one datagram read, answered, and the next read started.
  void ReceiveDatagram() {
    udp_socket->async_receive_from(
        asio::buffer(datagram), datagram_from, [this](error_code ec, std::size_t size) {
          if (ec == asio::error::operation_aborted || !udp_socket->is_open()) return;
          if (!ec) {
            DnsReply reply = Answer({datagram.data(), size}, DnsTransport::kUdp);
            // Non-blocking: with the send buffer full the answer is dropped and the client asks
            // again, rather than the one io thread stalling.
            error_code send_ec;
            if (!reply.wire.empty()) {
              udp_socket->send_to(asio::buffer(reply.wire), datagram_from, 0, send_ec);
            }
          } else {
            spdlog::debug("registry dns: udp receive: {}", ec.message());
          }
          ReceiveDatagram();
        });
  }

  // One TCP client: length-prefixed queries answered in order until it closes, idles or the
  // server stops.
  asio::awaitable<void> ServeTcp(tcp::socket socket, net::Connection connection) {
    auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
    connection.OnClose([weak = std::weak_ptr<beast::tcp_stream>(stream)](net::CloseReason) {
      if (auto s = weak.lock()) s->close();
    });
    std::array<std::uint8_t, 2> length{};
    std::vector<std::uint8_t> message;
    error_code ec;
    while (true) {
      stream->expires_after(kTcpIdle);
      co_await asio::async_read(*stream, asio::buffer(length),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      message.resize(static_cast<std::size_t>(length[0] << 8 | length[1]));
      if (message.empty()) co_return;
      co_await asio::async_read(*stream, asio::buffer(message),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      DnsReply reply = Answer(message, DnsTransport::kTcp);
      if (reply.wire.empty()) continue;
      const std::array<std::uint8_t, 2> prefix = {
          static_cast<std::uint8_t>(reply.wire.size() >> 8),
          static_cast<std::uint8_t>(reply.wire.size() & 0xff)};
      const std::array<asio::const_buffer, 2> out = {asio::buffer(prefix),
                                                     asio::buffer(reply.wire)};
      co_await asio::async_write(*stream, out, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
    }
  }

  // TCP first (any free port when asked for 0), then UDP on the same port.
  Status Bind(const HostPort& address) {
    const udp::endpoint::protocol_type protocol =
        address.kind == HostKind::kIpv6 ? udp::v6() : udp::v4();
    error_code ec;
    for (int attempt = 0; attempt < kBindTries; ++attempt) {
      net::ListenerOptions lo;
      lo.name = "registry dns";
      lo.address = address.ToString();
      lo.max_connections = options.max_tcp_connections;
      DROVER_ASSIGN_OR_RETURN(
          tcp, net::TcpListener::Start(
                   io, std::move(lo), [this] { return io.get_executor(); },
                   net::TcpListener::Spawn([this](tcp::socket socket, net::Connection connection) {
                     return ServeTcp(std::move(socket), std::move(connection));
                   })));
      udp_socket.emplace(io);
      udp_socket->open(protocol, ec);
      if (!ec) {
        udp_socket->bind(udp::endpoint(asio::ip::make_address(address.host, ec), tcp->port()), ec);
      }
      if (!ec) {
        udp_socket->non_blocking(true, ec);
        if (!ec) return Status::Ok();
      }
      udp_socket.reset();
      tcp->StopAccepting();
      tcp.reset();
      if (address.port != 0) break;
    }
    return UnavailableError("registry dns: cannot bind udp " + address.ToString() + ": " +
                            ec.message());
  }
};

Result<std::unique_ptr<DnsServer>> DnsServer::Start(const Registry& registry, DnsOptions options,
                                                    Clock& clock) {
  DROVER_RETURN_IF_ERROR(ValidateDnsZone(options.zone));
  DROVER_ASSIGN_OR_RETURN(
      HostPort address,
      ParseHostPort(options.address, "--dns", {.allow_port_zero = true, .require_ip = true}));
  auto impl = std::make_unique<Impl>(registry, std::move(options), clock);
  DROVER_RETURN_IF_ERROR(impl->Bind(address));
  Impl* raw = impl.get();
  asio::post(raw->io, [raw] { raw->ReceiveDatagram(); });
  impl->stopped = impl->ran.get_future();
  impl->thread = std::thread([raw] {
    NameThisThread("dns");
    raw->io.run();
    raw->ran.set_value();
  });
  spdlog::info("registry: DNS on udp and tcp {} for *.service.{} (ttl {} s)",
               address.WithPort(raw->tcp->port()).ToString(), raw->options.zone.domain,
               raw->options.zone.ttl_s);
  return std::unique_ptr<DnsServer>(new DnsServer(std::move(impl)));
}

DnsServer::DnsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DnsServer::~DnsServer() { Stop(); }

std::uint16_t DnsServer::port() const { return impl_->tcp->port(); }

const DnsCounters& DnsServer::counters() const { return impl_->counters; }

void DnsServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    Impl& d = *impl_;
    // The listener closes; every TCP client is closed; the UDP socket closes on the io thread.
    // With nothing left to wait for, the io thread's run() returns by itself; a connection that
    // would not end within the bound is left to the io_context's destruction.
    d.tcp->StopAccepting();
    d.tcp->CloseAll();
    asio::post(d.io, [&d] {
      error_code ec;
      d.udp_socket->close(ec);
    });
    if (d.stopped.wait_for(kStopBound) != std::future_status::ready) d.io.stop();
    if (d.thread.joinable()) d.thread.join();
  });
}

}  // namespace drover::registry
