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
#include <mutex>
#include <thread>
#include <vector>

#include "common/host_port.h"
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
constexpr int kBindTries = 5;  // port 0: a free TCP port may be taken on UDP; try another

// The catalog over the registry's current state (its read lock only).
class RegistryCatalog final : public DnsCatalog {
 public:
  explicit RegistryCatalog(const Registry& registry) : registry_(registry) {}

  std::optional<std::vector<Instance>> Instances(std::string_view service) const override {
    if (auto list = registry_.List(std::string(service)); list.ok() && !list->instances.empty()) {
      return std::move(list->instances);
    }
    // DNS names are case-blind and clients may lower them: a service of capitals is found too.
    for (const ServiceSummary& summary : registry_.Services()) {
      if (summary.instances == 0 || summary.name.size() != service.size()) continue;
      bool same = true;
      for (std::size_t i = 0; i < service.size() && same; ++i) {
        same = std::tolower(static_cast<unsigned char>(summary.name[i])) ==
               std::tolower(static_cast<unsigned char>(service[i]));
      }
      if (!same || summary.name == service) continue;
      if (auto list = registry_.List(summary.name); list.ok() && !list->instances.empty()) {
        return std::move(list->instances);
      }
    }
    return std::nullopt;
  }

 private:
  const Registry& registry_;
};

}  // namespace

struct DnsServer::Impl {
  Impl(const Registry& registry, DnsOptions o)
      : options(std::move(o)),
        catalog(registry),
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

Result<std::unique_ptr<DnsServer>> DnsServer::Start(const Registry& registry, DnsOptions options) {
  DROVER_RETURN_IF_ERROR(ValidateDnsZone(options.zone));
  DROVER_ASSIGN_OR_RETURN(
      HostPort address,
      ParseHostPort(options.address, "--dns", {.allow_port_zero = true, .require_ip = true}));
  auto impl = std::make_unique<Impl>(registry, std::move(options));
  DROVER_RETURN_IF_ERROR(impl->Bind(address));
  Impl* raw = impl.get();
  asio::post(raw->io, [raw] { raw->ReceiveDatagram(); });
  impl->thread = std::thread([raw] { raw->io.run(); });
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
    d.tcp->StopAccepting();
    d.io.stop();  // the TCP sessions' frames go with the io_context
    if (d.thread.joinable()) d.thread.join();
    error_code ec;
    d.udp_socket->close(ec);
  });
}

}  // namespace drover::registry
