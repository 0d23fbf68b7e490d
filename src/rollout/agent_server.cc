// clang-format off
#include <utility>  // Boost 1.74's Asio needs std::exchange declared first
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
// clang-format on

#include "rollout/agent_server.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/files.h"
#include "common/text.h"
#include "rollout/json_codec.h"
#include "sdk/socket_util.h"

namespace drover::rollout {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;
using tcp = boost::asio::ip::tcp;
using namespace std::chrono_literals;

constexpr std::size_t kMaxBody = 64 * 1024;
constexpr std::size_t kMaxConnections = 64;
constexpr std::size_t kMaxDeploys = 200;

const char* CodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    default:
      return "INTERNAL";
  }
}

http::status HttpStatus(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return http::status::bad_request;
    case StatusCode::kNotFound:
      return http::status::not_found;
    case StatusCode::kAlreadyExists:
      return http::status::conflict;
    case StatusCode::kDeadlineExceeded:
      return http::status::gateway_timeout;
    case StatusCode::kUnavailable:
      return http::status::service_unavailable;
    case StatusCode::kResourceExhausted:
      return http::status::payload_too_large;
    default:
      return http::status::internal_server_error;
  }
}

using Response = http::response<http::string_body>;

// The registry's dashboard, another origin, reads the deploy history from the browser. Only
// what it needs is opened to other origins: /v1/instances carries each launch spec's argv and
// environment, which a page the operator happens to visit must not be able to read from a
// loopback agent; writes stay closed too.
bool ReadableFromAnyOrigin(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  return path == "/live" || path == "/v1/deploys";
}

Response Reply(http::status status, const json& body) {
  Response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::server, "drover-agent");
  // Paths and records may carry bytes that are not UTF-8: replaced, never a throw.
  res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  res.prepare_payload();
  return res;
}

Response ErrorReply(const Status& s) {
  return Reply(HttpStatus(s.code()),
               {{"error", {{"code", CodeName(s.code())}, {"message", s.message()}}}});
}

}  // namespace

struct AgentServer::Impl {
  Platform* platform = nullptr;
  std::string deploys_path;
  int listen_fd = -1;
  int wake_fd = -1;
  std::uint16_t port = 0;
  std::thread acceptor;
  boost::asio::io_context io;  // only to own sockets; every operation here is synchronous

  struct Conn {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::mutex mu;
  std::list<Conn> conns;  // guarded by mu
  bool stopping = false;  // guarded by mu

  std::mutex deploys_mu;
  json deploys = json::array();  // guarded by deploys_mu; newest first

  Status LoadDeploys() {
    std::ifstream in(deploys_path);
    if (!in) return Status::Ok();
    try {
      deploys = json::parse(in);
      if (!deploys.is_array()) throw std::runtime_error("not an array");
    } catch (const std::exception& e) {
      return Status(StatusCode::kDataLoss, "cannot read " + deploys_path + ": " + e.what() +
                                               " (move it away to start with an empty history)");
    }
    return Status::Ok();
  }

  Status SaveDeploys() {  // deploys_mu held
    return WriteFileAtomically(deploys_path,
                               deploys.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  }

  Response Handle(const http::request<http::string_body>& req) {
    const std::string_view target(req.target().data(), req.target().size());
    const std::size_t qmark = target.find('?');
    const std::string_view path = target.substr(0, qmark);
    const auto query = ParseQuery(qmark == std::string_view::npos ? "" : target.substr(qmark + 1));
    const auto method = req.method();
    if (path == "/live") {
      Response res{http::status::ok, 11};
      res.set(http::field::content_type, "text/plain");
      res.body() = "live\n";
      res.prepare_payload();
      return res;
    }
    if (path == "/v1/instances") {
      if (method == http::verb::get) {
        auto service = query.find("service");
        auto list = platform->List(service == query.end() ? "" : service->second);
        if (!list.ok()) return ErrorReply(list.status());
        json out = json::array();
        for (const InstanceInfo& i : *list) out.push_back(InstanceInfoToJson(i));
        return Reply(http::status::ok, {{"instances", std::move(out)}});
      }
      if (method == http::verb::post) {
        const json body = json::parse(req.body(), nullptr, false);
        if (body.is_discarded()) return ErrorReply(InvalidArgumentError("body is not JSON"));
        auto spec = LaunchSpecFromJson(body);
        if (!spec.ok()) return ErrorReply(spec.status());
        if (Status s = platform->Start(*spec); !s.ok()) return ErrorReply(s);
        return Reply(http::status::ok, {{"id", spec->id}});
      }
      return ErrorReply(InvalidArgumentError("use GET or POST on /v1/instances"));
    }
    if (path.rfind("/v1/instances/", 0) == 0 && method == http::verb::delete_) {
      const std::string id(path.substr(std::string_view("/v1/instances/").size()));
      std::int64_t grace_ms = 10'000;
      if (auto g = query.find("grace_ms"); g != query.end()) {
        try {
          grace_ms = std::stoll(g->second);
        } catch (...) {
          grace_ms = -1;
        }
        if (grace_ms < 0 || grace_ms > 600'000) {
          return ErrorReply(InvalidArgumentError("grace_ms must be 0..600000"));
        }
      }
      if (Status s = platform->Stop(id, std::chrono::milliseconds(grace_ms)); !s.ok()) {
        return ErrorReply(s);
      }
      return Reply(http::status::ok, {{"id", id}});
    }
    if (path == "/v1/deploys" && method == http::verb::get) {
      auto service = query.find("service");
      std::lock_guard lock(deploys_mu);
      json out = json::array();
      for (const json& d : deploys) {
        if (service == query.end() || d.value("service", "") == service->second) out.push_back(d);
      }
      return Reply(http::status::ok, {{"deploys", std::move(out)}});
    }
    if (path.rfind("/v1/deploys/", 0) == 0 && method == http::verb::put) {
      const std::string id(path.substr(std::string_view("/v1/deploys/").size()));
      json record = json::parse(req.body(), nullptr, false);
      if (Status s = ValidateName("deploy id", id); !s.ok()) return ErrorReply(s);
      if (record.is_discarded() || !record.is_object() || !record.contains("service") ||
          !record["service"].is_string()) {
        return ErrorReply(InvalidArgumentError("a deploy record is a JSON object with a service"));
      }
      record["id"] = id;
      std::lock_guard lock(deploys_mu);
      auto same = std::find_if(deploys.begin(), deploys.end(),
                               [&](const json& d) { return d.value("id", "") == id; });
      if (same != deploys.end()) {
        *same = std::move(record);
      } else {
        deploys.insert(deploys.begin(), std::move(record));
        if (deploys.size() > kMaxDeploys)
          deploys.erase(deploys.begin() + kMaxDeploys, deploys.end());
      }
      if (Status s = SaveDeploys(); !s.ok()) return ErrorReply(s);
      return Reply(http::status::ok, {{"id", id}});
    }
    return ErrorReply(NotFoundError("no such endpoint: " + std::string(req.method_string()) + " " +
                                    std::string(path)));
  }

  void Serve(int fd) {
    timeval timeout{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    // The socket works on its own descriptor; `fd` stays open until the thread is joined, so a
    // shutdown() at stop never reaches a recycled descriptor.
    const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) return;
    tcp::socket socket(io);
    boost::system::error_code ec;
    socket.assign(tcp::v6(), own, ec);  // the family only matters for new sockets
    if (ec) {
      ::close(own);
      return;
    }
    boost::beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(kMaxBody);
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::body_limit) {
        auto res = ErrorReply(Status(StatusCode::kResourceExhausted, "body over 64 KiB"));
        res.keep_alive(false);
        http::write(socket, res, ec);
        break;
      }
      if (ec) break;
      const auto& req = parser.get();
      Response res;
      try {
        res = Handle(req);
      } catch (const std::exception& e) {  // one bad request must not take the agent down
        spdlog::error("agent: {} {} failed: {}", std::string(req.method_string()),
                      std::string(req.target()), e.what());
        res = ErrorReply(Status(StatusCode::kInternal, std::string("internal error: ") + e.what()));
      }
      if (req.method() == http::verb::get &&
          ReadableFromAnyOrigin(std::string_view(req.target().data(), req.target().size()))) {
        res.set(http::field::access_control_allow_origin, "*");
      }
      res.keep_alive(req.keep_alive());
      http::write(socket, res, ec);
      if (ec || !req.keep_alive()) break;
    }
    // `fd` still refers to the connection, so close() alone would not end it: the client would
    // wait for EOF until this thread is joined.
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  void Accept() {
    while (true) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(200ms);
        continue;
      }
      std::lock_guard lock(mu);
      conns.remove_if([](Conn& c) {
        if (!c.done) return false;
        c.thread.join();
        ::close(c.fd);
        return true;
      });
      if (stopping || conns.size() >= kMaxConnections) {
        // Said, not just closed: the client sees why. Best effort; the socket is fresh.
        const std::string body =
            R"({"error":{"code":"UNAVAILABLE","message":"agent busy: too many connections open"}})"
            "\n";
        const std::string busy =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Connection: close\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\n\r\n" + body;
        (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        continue;
      }
      Conn& c = conns.emplace_back();
      c.fd = fd;
      c.thread = std::thread([this, &c, fd] {
        Serve(fd);
        c.done = true;
      });
    }
  }
};

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<AgentServer>> AgentServer::Start(Platform& platform,
                                                        const std::string& data_dir,
                                                        const std::string& address) {
  auto impl = std::make_unique<Impl>();
  impl->platform = &platform;
  impl->deploys_path = data_dir + "/deploys.json";
  DROVER_RETURN_IF_ERROR(impl->LoadDeploys());
  DROVER_ASSIGN_OR_RETURN(sdk::Listening listening, sdk::ListenTcp(address, 128, "agent API"));
  impl->listen_fd = listening.fd;
  impl->port = listening.port;
  impl->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wake_fd < 0) {
    ::close(impl->listen_fd);
    return InternalError("eventfd failed");
  }
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->Accept(); });
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
}

AgentServer::~AgentServer() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake_fd, &one, sizeof one);
  impl_->acceptor.join();
  std::list<Impl::Conn> conns;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    for (Impl::Conn& c : impl_->conns) ::shutdown(c.fd, SHUT_RDWR);  // wakes a blocked read
    conns.splice(conns.end(), impl_->conns);
  }
  for (Impl::Conn& c : conns) {
    c.thread.join();
    ::close(c.fd);
  }
  ::close(impl_->listen_fd);
  ::close(impl_->wake_fd);
}

std::uint16_t AgentServer::port() const { return impl_->port; }

}  // namespace drover::rollout
