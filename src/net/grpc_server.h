// GrpcServer: gRPC over HTTP/2 for a server whose calls are many and cheap and whose streams are
// many and mostly idle (the registry's API). HTTP/2 itself is libnghttp2's; this adds gRPC's
// framing, status trailers and call life on the shared accept loop (TcpListener), so that
//   - a connection's frames leave together: whatever a turn of its loop produced for any of its
//     calls -- answers, stream messages -- is one send, so an event written to a hundred streams
//     of one connection is one system call, not a hundred;
//   - an idle stream costs a few hundred bytes (its HTTP/2 stream and a GrpcCall): no call
//     arena, no thread, no pending operation;
//   - a call is answered from any thread (a store's writer once its commit is durable): the
//     answer is queued to the connection, which takes every answer queued meanwhile in one turn.
// Why not gRPC C++'s server: measured in docs/ARCHITECTURE.md (Registry speed, stop 59).
//
// Threads: the server runs one io thread per worker context (TcpListener's workers form); each
// connection, its HTTP/2 session and its calls' state live on one of them. A GrpcCall's answering
// methods (Reply, Write, Finish) may be called from any thread; everything else a handler gets
// runs on the connection's thread. The server outlives every call it handed out only in the sense
// that a call kept past Stop() answers into nothing.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/status.h"
#include "net/connection_counters.h"

namespace drover::net {

class GrpcConnection;
struct GrpcMethod;

// One call, shared by the handler and the connection. Thread-safe where marked.
class GrpcCall : public std::enable_shared_from_this<GrpcCall> {
 public:
  // Made by the connection only.
  class Key {
    friend class GrpcConnection;
    Key() = default;
  };
  GrpcCall(Key, std::shared_ptr<GrpcConnection> connection, std::int32_t stream_id,
           const boost::asio::ip::tcp::endpoint& peer);
  GrpcCall(const GrpcCall&) = delete;
  GrpcCall& operator=(const GrpcCall&) = delete;
  ~GrpcCall();

  // The method's path ("/pkg.Service/Method").
  const std::string& method() const;
  // A request header (metadata) by its lower-case name; empty when absent. gRPC's own headers
  // (content-type, te, user-agent, grpc-accept-encoding, grpc-timeout) are not kept. Any thread.
  std::string_view Metadata(std::string_view name) const;
  const boost::asio::ip::tcp::endpoint& peer() const { return peer_; }

  // Answers a unary call: `message` (serialized, unframed), then status OK. Any thread; the
  // first of Reply and Finish counts, later ones do nothing.
  void Reply(std::string message);
  // Sends the response's headers now, with `metadata` added (lower-case names), before any
  // message: a stream's client learns that its call is in place while nothing is sent yet. Any
  // thread; before the first Write. Without it the headers go with the first message or the end.
  void SendHeaders(std::vector<std::pair<std::string, std::string>> metadata);
  // Sends one message on a stream (serialized, unframed; shared, so one encoding serves many
  // streams). Any thread; messages leave in the order written. Nothing after Finish.
  void Write(std::shared_ptr<const std::string> message);
  // Ends the call with `status` (its code and message in the trailers; OK ends a stream
  // normally). Any thread; once.
  void Finish(const Status& status);

  // Called once, on the connection's thread, if the call ends without the handler's Finish or
  // Reply: the client cancelled it (a client whose deadline passed resets its call), or the
  // connection closed. Set it in the handler (on the connection's thread) before returning.
  void OnCancel(std::function<void()> on_cancel) { on_cancel_ = std::move(on_cancel); }
  // Called once, on the connection's thread, when the call is over however it ended (after
  // OnCancel's, if that runs).
  void OnClose(std::function<void()> on_close) { on_close_ = std::move(on_close); }

  // A stream's producer on the connection's thread: Notify() (any thread, as often as it likes:
  // wake-ups that come before the last one ran are one) has `on_wake` run there, where it takes
  // what there is and writes it. Set in the handler, on the connection's thread.
  void OnWake(std::function<void()> on_wake) { on_wake_ = std::move(on_wake); }
  void Notify();
  // The connection's thread: bytes written and not yet handed to HTTP/2, which the client's flow
  // control holds back when it reads slowly; and a wake-up once they are all handed over (a
  // producer that stopped taking at a bound resumes then).
  std::size_t backlog_bytes() const;
  void WakeWhenDrained() { wake_when_drained_ = true; }

  // How many messages written and not yet taken by the connection. Any thread.
  std::size_t queued() const;

  // Whatever the handler keeps with the call (a stream's state); the connection's thread.
  std::shared_ptr<void> context;

 private:
  friend class GrpcConnection;

  const std::shared_ptr<GrpcConnection> connection_;
  const std::int32_t stream_id_;
  const boost::asio::ip::tcp::endpoint peer_;
  std::string method_;
  std::string headers_;  // "name\0value\0" for every non-pseudo request header

  // Guarded by the connection's lock (answers come from any thread):
  std::vector<std::shared_ptr<const std::string>> pending_;  // written, not yet taken
  std::size_t pending_bytes_ = 0;
  std::optional<Status> finish_;  // the handler's end
  std::optional<std::vector<std::pair<std::string, std::string>>> headers_asked_;  // SendHeaders
  bool wake_ = false;                                                              // Notify() came
  bool listed_ = false;  // in the connection's ready list
  bool done_ = false;    // the stream closed

  // The connection's thread only:
  bool done_unlocked_ = false;  // done_ as the last turn took it
  const GrpcMethod* handler_ = nullptr;
  std::string request_;                  // the request's bytes as they come (prefix included)
  std::uint32_t header_list_bytes_ = 0;  // the request's header list, as HTTP/2 measures it
  // Messages taken, handed to nghttp2 (framed as they are copied out) from out_[next_], offset_
  // bytes into its framed form; out_bytes_ framed bytes in all.
  std::vector<std::shared_ptr<const std::string>> out_;
  std::size_t next_ = 0;
  std::size_t offset_ = 0;
  std::size_t out_bytes_ = 0;
  std::optional<Status> status_;  // finish_, once taken: trailers after out_
  std::vector<std::pair<std::string, std::string>> extra_headers_;  // SendHeaders', taken
  std::function<void()> on_cancel_;
  std::function<void()> on_close_;
  std::function<void()> on_wake_;
  bool wake_when_drained_ = false;
  bool post_ = false;          // the request's method is POST
  bool grpc_content_ = false;  // its content-type is application/grpc
  bool refused_ = false;       // answered with an error before the handler saw it
  // Found while its headers came, and Admit's answer: metadata over its bound, or the
  // connection's calls at theirs.
  enum class TooLarge : std::uint8_t { kNo, kMetadata, kConnection } too_large_ = TooLarge::kNo;
  bool headers_wanted_ = false;  // SendHeaders() was taken
  bool headers_sent_ = false;    // the response's headers are submitted
  bool closed_by_us_ = false;    // END_STREAM submitted
};

struct GrpcMethod {
  enum class Kind : std::uint8_t { kUnary, kServerStreaming, kBidiStreaming };
  std::string path;  // "/pkg.Service/Method"
  Kind kind = Kind::kUnary;
  // Unary and server streaming: the request's one message (serialized), once the client ended
  // its side. Bidirectional: each message as it arrives. On the connection's thread; the handler
  // answers through `call`, now or later, from any thread.
  std::function<void(const std::shared_ptr<GrpcCall>& call, std::string_view request)> on_request;
  // Streams (optional): the call is admitted, before any message; on the connection's thread.
  std::function<void(const std::shared_ptr<GrpcCall>& call)> on_open;
  // Bidirectional: the client ended its side (no more messages), on the connection's thread.
  std::function<void(const std::shared_ptr<GrpcCall>& call)> on_half_close;
};

struct GrpcServerOptions {
  std::string name = "grpc";  // in log lines
  std::string address;        // "ip:port"; port 0: any free port
  std::size_t max_connections = 4096;
  int threads = 0;  // io threads (0: one per core, at most 4)
  std::size_t max_receive_message_bytes = 4 * 1024 * 1024;  // gRPC's default
  // A request's header list as HTTP/2 measures it (name + value + 32 bytes per field, pseudo-
  // headers included), advertised in SETTINGS_MAX_HEADER_LIST_SIZE. A larger one is refused
  // (RESOURCE_EXHAUSTED) and not kept: HPACK lets a byte on the wire stand for a 4 KB header.
  // gRPC C++'s server default.
  std::size_t max_metadata_bytes = 8 * 1024;
  // What one connection's open calls may hold of their requests before their handlers take them
  // (metadata, and messages not yet whole): a call whose bytes would go past it is refused
  // (RESOURCE_EXHAUSTED), so that a client cannot have 10,000 streams each hold a 4 MiB request
  // it never ends. The connection goes on.
  std::size_t max_connection_buffered_bytes = 16 * 1024 * 1024;
  // A connection that has not completed its TLS handshake (with TLS) and sent HTTP/2's preface
  // and SETTINGS within this is closed (gRPC C++'s server allows 120 s; the HTTP API's TLS
  // handshake 10 s).
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  // A connection whose answers wait for the socket's room and none of whose bytes has gone for
  // this long is closed, its calls cancelled: a client that stops reading (a process stopped,
  // not dead) would otherwise pin its calls, their watch slots and buffers for good. Progress
  // restarts it, so a slow reader is not cut. As the HTTP API's watch streams (30 s).
  std::chrono::milliseconds write_timeout = std::chrono::seconds(30);
  // Both set: TLS only (1.2 and later, ALPN h2), with this PEM certificate chain and key.
  std::string tls_cert_file;
  std::string tls_key_file;
};

class GrpcServer {
 public:
  static Result<std::unique_ptr<GrpcServer>> Start(GrpcServerOptions options,
                                                   std::vector<GrpcMethod> methods);
  ~GrpcServer();  // Stop() without a drain
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  std::uint16_t port() const;
  const ConnectionCounters& counters() const;
  // Stops accepting and sends every connection a GOAWAY (new calls go elsewhere); a connection
  // closes once its calls end, and what is still open after `drain` is closed, its calls
  // cancelled (their OnCancel). Then joins the io threads. Idempotent; not from an io thread.
  void Stop(std::chrono::milliseconds drain = std::chrono::seconds(5));

  struct Impl;

 private:
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover::net
