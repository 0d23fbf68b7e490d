// HttpServer: the HTTP/1.1 server under every Drover HTTP API -- the registry's, the agent's and
// the gateway's admin port -- on Boost.Beast over Asio, with C++20 coroutines.
//
// It owns an io_context run by `threads` threads and a TcpListener (the shared accept loop, with
// the connection limit: a client over it gets a 503 and is closed). Each connection runs on its
// own strand: read a request (head and body within `max_header` and `max_body`), ask the Handler
// for the reply, write it, and again while the connection is kept alive -- over plain TCP as
// handlers of its reads and writes (no coroutine: a request that came whole costs a read, the
// handler and a send), over TLS as a coroutine. A request must arrive whole within
// `idle_timeout` of the previous answer (or of the connection's start), and an answer must be
// taken by the client within `idle_timeout`. What the server answers itself, the same for every
// API (common/http_error.h):
//   - a malformed request: 400 INVALID_ARGUMENT, then close (the stream is out of sync);
//   - a body over max_body: 413 RESOURCE_EXHAUSTED, then close (the body is not read);
//   - a handler that throws (a bug): 500 INTERNAL, and the error is logged;
//   - a response without a Server header gets "drover-<name>"; a 401 without WWW-Authenticate
//     gets `Bearer realm="drover-<name>"`.
// A Handler may instead return a stream (the registry's watch, a StreamSource): the server writes
// it as a chunked response, and closes the connection when it ends.
//
// With a certificate and key the server speaks HTTPS only (TLS 1.2 and later); a refused client
// is then closed without a 503 (a handshake per refused connection would cost what the limit
// protects).
//
// A Handler may also answer later (a LateReply: the registry's writes, answered once durable):
// the connection waits for it without holding an io thread.
//
// Threads: the Handler runs on the io threads, several requests at once (one per connection);
// a handler that blocks holds one of the `threads`. Start(), the getters, StopAccepting() and
// Stop() are thread-safe; StopAccepting() and Stop() must not be called from an io thread.
#pragma once

// clang-format off
#include <utility>  // Boost 1.74's asio/awaitable.hpp uses std::exchange without including it
// clang-format on

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/clock.h"
#include "drover/mutex.h"
#include "drover/status.h"
#include "net/tcp_listener.h"

namespace drover::net {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

class StreamWakeup;

// A response written in pieces (chunked transfer encoding) for as long as its source has them:
// the registry's watch. The server asks the source for what to write each time its wake-up is
// notified, always on the stream's strand. Between two of them a stream over plain TCP holds no
// coroutine, no buffer and no pending operation: its socket, the source and one small object (an
// idle registry watch costs about 1.9 KB in all, with its watcher). Over TLS a coroutine runs the
// same steps.
class StreamSource {
 public:
  virtual ~StreamSource() = default;
  // Once, after the head is written: `wakeup` is to be notified (from any thread, as often as
  // the producer likes) whenever there may be more to take.
  virtual void Start(std::shared_ptr<StreamWakeup> wakeup) = 0;
  enum class Step : std::uint8_t {
    kWait,   // nothing now: ask again after the next wake-up
    kWrite,  // `pieces`, written as one chunk, then ask again
    kEnd,    // the last chunk: a clean end the client can tell from a cut connection
  };
  // What to write now. `pieces` comes back empty each time (its storage reused).
  virtual Step Take(std::vector<std::shared_ptr<const std::string>>& pieces) = 0;
  // The stream is over (ended, its client gone or cut off, or the server stopping): called once,
  // after which Take() is not called again.
  virtual void Stop() = 0;
  // A chunk goes out at once when the socket has room for it (a direct non-blocking send, no
  // timer), which is almost always; otherwise the rest must be written within this, or the
  // client (which stopped reading) is cut off. Between writes no timeout runs: a stream may be
  // quiet for long.
  virtual Duration write_timeout() const = 0;
};

// A stream as its source sees it: what to notify when there may be more to take. Notify() may be
// called from any thread, under the caller's locks and as often as it likes: it only lists the
// stream with its server, and only when no wake-up is already on its way. The server drains that
// list on its io threads, a burst at a time, running each stream's next step in place on its
// strand: an event fanned out to a thousand streams costs a post or two, not a thousand.
//
// The server owns every open stream (an idle one is held by nothing else: no pending operation,
// no coroutine); a Notify() after the stream ended does nothing. A source lets go of this pointer
// in its Stop() (the registry's watch drops it with its listener): a plain TCP stream holds its
// socket and strand, which must not outlive the server.
class StreamWakeup : public std::enable_shared_from_this<StreamWakeup> {
 public:
  class Queue;  // the server's list of streams to wake, and of every open stream

  virtual ~StreamWakeup() = default;
  StreamWakeup(const StreamWakeup&) = delete;
  StreamWakeup& operator=(const StreamWakeup&) = delete;

  void Notify();

 protected:
  explicit StreamWakeup(std::shared_ptr<Queue> queue);
  // The stream's strand, where Woken() runs.
  virtual boost::asio::any_io_executor strand() = 0;
  // On the strand, after a Notify().
  virtual void Woken() = 0;
  // Once the server's io threads have stopped, for a stream still open: let go of everything
  // (its source stopped, its connection closed), without writing.
  virtual void Abandon() = 0;
  Queue& queue() const { return *queue_; }

 private:
  friend class Queue;

  const std::shared_ptr<Queue> queue_;
  std::atomic<bool> listed_{false};
  // While listed to be woken: the next in that list, and the list's reference to this.
  StreamWakeup* next_ = nullptr;
  std::shared_ptr<StreamWakeup> self_;
  // While open (guarded by the queue's lock): the neighbours in the server's list of open
  // streams, and that list's reference to this.
  StreamWakeup* open_prev_ = nullptr;
  StreamWakeup* open_next_ = nullptr;
  std::shared_ptr<StreamWakeup> kept_;
};

// A response the handler gives later, from any thread: the registry's answer to a write, once
// the commit that holds it is durable. Meanwhile the connection waits without an io thread (the
// server's other connections go on) and reads nothing more. The handler returns it in an
// HttpReply and calls Send() when it has the response -- before returning or after, on any thread
// -- exactly as it would have returned it. A response sent after the server stopped is dropped.
class LateReply {
 public:
  // The response; only the first call counts. Never waits (it only wakes the connection).
  void Send(HttpResponse response);

 private:
  friend class LateReplyWaiter;  // the server's side (http_server.cc)

  Mutex mu_;
  bool sent_ DROVER_GUARDED_BY(mu_) = false;
  std::optional<HttpResponse> response_ DROVER_GUARDED_BY(mu_);  // sent, not yet taken
  std::shared_ptr<StreamWakeup> waiter_ DROVER_GUARDED_BY(mu_);  // the connection, once it waits
};

// A handler's answer: `response`; or, when `later` is set, the response that one is sent (what
// `response` holds is not used); or, when `stream` is set, a stream the server runs instead, with
// `response` as its head (status and fields; the server makes it chunked).
struct HttpReply {
  HttpReply() = default;
  HttpReply(HttpResponse r) : response(std::move(r)) {}  // NOLINT(google-explicit-constructor)
  explicit HttpReply(std::shared_ptr<LateReply> l) : later(std::move(l)) {}
  HttpResponse response;
  std::shared_ptr<LateReply> later;
  std::shared_ptr<StreamSource> stream;
};

struct HttpServerOptions {
  std::string name;  // "registry", "agent": log lines and the Server header (drover-<name>)
  std::string address = "127.0.0.1:0";  // "ip:port"; port 0: any free port
  int threads = 2;
  std::size_t max_connections = 4096;
  std::size_t max_body = 64 * 1024;
  // Paths that may carry more (a deploy record of a large fleet): prefix -> body limit.
  std::vector<std::pair<std::string, std::size_t>> larger_bodies;
  std::size_t max_header = 16 * 1024;
  Duration idle_timeout = std::chrono::seconds(60);  // a keep-alive connection without a request
  // Both set: HTTPS only, with this PEM certificate chain and private key.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpServer {
 public:
  // Answers one request. `client` is the connection's peer, ip:port ("10.0.0.5:41234",
  // "[::1]:41234").
  using Handler = std::function<HttpReply(const HttpRequest& request, const std::string& client)>;

  // Binds and starts serving. INVALID_ARGUMENT for a bad address or TLS file, UNAVAILABLE when
  // the address cannot be bound.
  static Result<std::unique_ptr<HttpServer>> Start(HttpServerOptions options, Handler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const;
  bool tls() const;
  const ConnectionCounters& connections() const;
  // Responses written so far, by HTTP status (streams count their head's).
  std::map<unsigned, std::uint64_t> responses() const;

  // Closes the listening socket; open connections go on. Idempotent.
  void StopAccepting();
  // StopAccepting(), then stops the io threads (open connections end with them) and joins them.
  // Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A response with `body` (JSON, newline-terminated by the caller or not), its Content-Type
// application/json, keep-alive as the request asked.
HttpResponse JsonResponse(const HttpRequest& request, unsigned status, std::string body);
// The error reply for `status` (common/http_error.h), with its HTTP status; `http_status`
// overrides the mapping where a server must say more (405, 413).
HttpResponse ErrorResponse(const HttpRequest& request, const Status& status,
                           unsigned http_status = 0);

}  // namespace drover::net
