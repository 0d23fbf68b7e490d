// A gRPC client of the registry bench's own, for its load: gRPC's wire format (length-prefixed
// messages on HTTP/2 streams, the status in the trailers) over libnghttp2, on one epoll thread
// per CPU. It does no more than a load needs -- no name resolution, retries, deadlines,
// compression or TLS -- and so costs a few microseconds of CPU per call where gRPC C++'s client
// costs tens: on a machine the servers share with their load, what is measured is then the
// servers, as `wrk` measures an HTTP server rather than itself. The same client drives both
// systems (Drover's registry and etcd), and gRPC C++'s client is kept for the bench's setup and
// checks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace grpc_load {

// What a stream's owner hears, on its connection's loop thread.
class Handler {
 public:
  virtual ~Handler() = default;
  // One whole message of the answer (its gRPC frame taken off).
  virtual void OnMessage(std::string_view message) = 0;
  // The stream ended: `grpc_status` from its trailers (or its headers, for an answer of trailers
  // only); -1 when it ended without one (reset, or the connection lost). Nothing follows.
  virtual void OnClose(int grpc_status) = 0;
};

class Loop;

// One HTTP/2 connection. Its streams' operations run on its loop's thread: call them from a
// handler, or through Run from anywhere.
class Connection {
 public:
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs `fn` on the connection's loop thread: now when called there, else soon after.
  void Run(std::function<void()> fn);

  // Opens a call of `path` ("/package.Service/Method"), sends `message` and, when `end`, ends
  // the client's side. `handler` hears the answer until its OnClose. Returns the stream's id.
  std::int32_t Open(std::string_view path, std::string_view message, bool end, Handler* handler);
  // Sends one more message on an open stream (a bidirectional call), ending the side when `end`.
  void Send(std::int32_t stream, std::string_view message, bool end);
  // Resets the stream (CANCEL); its handler's OnClose follows.
  void Cancel(std::int32_t stream);

 private:
  friend class Loop;
  friend class Client;
  struct Stream;
  struct Session;
  Connection(Loop& loop, int fd);
  bool InLoop() const;
  void OnReadable();
  void OnWritable();
  void Flush();
  void Lose();

  Loop& loop_;
  int fd_;
  std::unique_ptr<Session> session_;
  std::string unsent_;  // bytes the socket had no room for
  bool waiting_writable_ = false;
  bool lost_ = false;
};

// `connections` connections to `address` (an IPv4 "ip:port"), spread over one loop thread per
// CPU. The run fails (exits) when one cannot be made. Destroying it stops the loops first, so no
// handler hears anything after; streams still open are abandoned.
class Client {
 public:
  Client(const std::string& address, int connections);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connection c % count: a caller that keeps client c on it keeps it on one thread.
  Connection& For(int c) {
    return *connections_[static_cast<std::size_t>(c) % connections_.size()];
  }

 private:
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::unique_ptr<Connection>> connections_;
};

// A streaming call (server-streaming or bidirectional) its owner keeps: the owner's OnMessage
// hears the answers. Start, Write and Close from any thread (they run on the connection's, in
// the order called). A started call is closed before it is destroyed, unless its Client is gone.
class Call : public Handler {
 public:
  explicit Call(Connection& connection) : connection_(connection) {}
  ~Call() override;

  // Opens the call of `path` (a string literal: it is read later) with its first message,
  // ending the client's side when `end`.
  void Start(std::string_view path, std::string message, bool end);
  // One more message.
  void Write(std::string message);
  // Cancels the call unless it ended, and waits until it has: its handlers have run their last.
  // Not on the connection's thread.
  void Close();

  // The stream ended (OnClose): subclasses that override it call this one last.
  void OnClose(int grpc_status) override;

 protected:
  Connection& connection() { return connection_; }

 private:
  Connection& connection_;
  std::int32_t id_ = 0;  // the connection's thread only
  std::mutex mu_;
  std::condition_variable ended_cv_;
  bool started_ = false;  // guarded by mu_
  bool ended_ = false;    // guarded by mu_
};

// A unary call of `path` (a string literal): `done(ok)` runs on the connection's thread once it
// ended, ok when its status was OK and an answer came that `check` (when given) accepts. Any
// thread.
void Unary(Connection& connection, std::string_view path, std::string message,
           std::function<void(bool)> done,
           std::function<bool(std::string_view answer)> check = nullptr);

}  // namespace grpc_load
