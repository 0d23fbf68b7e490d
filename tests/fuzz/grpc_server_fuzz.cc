// The gRPC server's reading of what a client sends (net::GrpcServer): the bytes after HTTP/2's
// client preface -- frames that libnghttp2 parses, and gRPC's part on top of them (headers,
// admission, message framing, unary, server-streaming and bidirectional calls, refusals) -- sent
// to a real server over loopback, with the client's side then ended. Any input must end in the
// server closing that connection, never a crash, a hang or a leak; the server then still serves.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/grpc_server.h"

namespace {

namespace net = drover::net;

// Echoes: a unary call answers its request; a server stream sends it twice and ends; a
// bidirectional stream answers each message and ends when the client ends its side.
net::GrpcServer& Server() {
  static net::GrpcServer* server = [] {
    std::vector<net::GrpcMethod> methods(3);
    methods[0].path = "/fuzz.Echo/Unary";
    methods[0].on_request = [](const std::shared_ptr<net::GrpcCall>& call, std::string_view req) {
      if (call->Metadata("fail") == "1") return call->Finish(drover::InvalidArgumentError("no"));
      call->Reply(std::string(req));
    };
    methods[1].path = "/fuzz.Echo/Stream";
    methods[1].kind = net::GrpcMethod::Kind::kServerStreaming;
    methods[1].on_request = [](const std::shared_ptr<net::GrpcCall>& call, std::string_view req) {
      call->SendHeaders({{"fuzz-accepted", "1"}});
      auto message = std::make_shared<const std::string>(req);
      call->Write(message);
      call->Write(message);
      call->Finish(drover::Status::Ok());
    };
    methods[2].path = "/fuzz.Echo/Bidi";
    methods[2].kind = net::GrpcMethod::Kind::kBidiStreaming;
    methods[2].on_request = [](const std::shared_ptr<net::GrpcCall>& call, std::string_view req) {
      call->Write(std::make_shared<const std::string>(req));
    };
    methods[2].on_half_close = [](const std::shared_ptr<net::GrpcCall>& call) {
      call->Finish(drover::Status::Ok());
    };
    net::GrpcServerOptions options;
    options.address = "127.0.0.1:0";
    options.threads = 1;
    options.max_receive_message_bytes = 64 * 1024;
    auto started = net::GrpcServer::Start(std::move(options), std::move(methods));
    if (!started.ok()) std::abort();
    return started->release();  // lives for the whole run
  }();
  return *server;
}

// A connection to the server. Thousands a second over one loopback address pair make a new
// connection's ports meet an old one still in TIME_WAIT now and then (the server closes first
// when it refuses what it read); that attempt fails and the next, from another port, does not.
int Connect() {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(Server().port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) std::abort();
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
      return fd;
    }
    ::close(fd);
  }
  std::abort();  // the server stopped accepting
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = Connect();
  // Closed with a reset, not a FIN: thousands of inputs a second would otherwise leave as many
  // ports in TIME_WAIT and run out of them within seconds.
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  // A server that neither answers nor closes within 5 s hangs: the read times out, and that is
  // a failure.
  timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  std::string bytes = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  bytes.append(reinterpret_cast<const char*>(data), size);
  for (std::size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server closed early: it refused what came so far
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char answer[16 * 1024];
  while (true) {
    const ssize_t n = ::recv(fd, answer, sizeof answer, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) std::abort();  // no end within the limit
      break;                                                      // reset: closed too
    }
  }
  ::close(fd);
  return 0;
}
