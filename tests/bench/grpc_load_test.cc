// The registry bench's own gRPC client (bench/grpc_load.h) against the project's gRPC server over
// loopback: what a call's owner hears must be what the server said -- an answer and OK, an error
// status, an unknown method, a stream's messages in order, a cancel, a server that went away.
#include "grpc_load.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "drover/status.h"
#include "net/grpc_server.h"

namespace {

using drover::net::GrpcCall;
using drover::net::GrpcMethod;
using drover::net::GrpcServer;
using namespace std::chrono_literals;

GrpcMethod Method(std::string path, GrpcMethod::Kind kind,
                  std::function<void(const std::shared_ptr<GrpcCall>&, std::string_view)> on) {
  GrpcMethod m;
  m.path = std::move(path);
  m.kind = kind;
  m.on_request = std::move(on);
  return m;
}

// Calls the server holds open until it stops.
struct Held {
  std::mutex mu;
  std::vector<std::shared_ptr<GrpcCall>> calls;
  std::size_t size() {
    std::lock_guard lock(mu);
    return calls.size();
  }
};

std::unique_ptr<GrpcServer> Serve(Held& held) {
  std::vector<GrpcMethod> methods;
  methods.push_back(
      Method("/t.T/Echo", GrpcMethod::Kind::kUnary,
             [](const auto& call, std::string_view m) { call->Reply(std::string(m)); }));
  methods.push_back(Method("/t.T/Refuse", GrpcMethod::Kind::kUnary, [](const auto& call, auto) {
    call->Finish(drover::NotFoundError("no such thing"));
  }));
  methods.push_back(Method(
      "/t.T/Chat", GrpcMethod::Kind::kBidiStreaming, [](const auto& call, std::string_view m) {
        call->Write(std::make_shared<const std::string>("re:" + std::string(m)));
      }));
  methods.push_back(
      Method("/t.T/Hold", GrpcMethod::Kind::kServerStreaming, [&held](const auto& call, auto) {
        std::lock_guard lock(held.mu);
        held.calls.push_back(call);
      }));
  drover::net::GrpcServerOptions options;
  options.address = "127.0.0.1:0";
  options.threads = 1;
  auto server = GrpcServer::Start(std::move(options), std::move(methods));
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(*server);
}

std::string Address(const GrpcServer& server) {
  return "127.0.0.1:" + std::to_string(server.port());
}

// The outcome of one unary call, waited for.
bool UnaryOk(grpc_load::Connection& c, std::string_view path, std::string message,
             std::function<bool(std::string_view)> check = nullptr) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<bool> result;
  grpc_load::Unary(
      c, path, std::move(message),
      [&](bool ok) {
        std::lock_guard lock(mu);
        result = ok;
        cv.notify_all();
      },
      std::move(check));
  std::unique_lock lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return result.has_value(); })) << path;
  return result.value_or(false);
}

// A streaming call that records what it hears.
class Recorder final : public grpc_load::Call {
 public:
  using Call::Call;
  void OnMessage(std::string_view m) override {
    std::lock_guard lock(mu_);
    messages_.emplace_back(m);
    cv_.notify_all();
  }
  void OnClose(int status) override {
    {
      std::lock_guard lock(mu_);
      status_ = status;
      cv_.notify_all();
    }
    Call::OnClose(status);
  }
  bool WaitMessages(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return messages_.size() >= n; });
  }
  bool WaitClosed() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return status_.has_value(); });
  }
  std::vector<std::string> messages() {
    std::lock_guard lock(mu_);
    return messages_;
  }
  std::optional<int> status() {
    std::lock_guard lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> messages_;
  std::optional<int> status_;
};

TEST(GrpcLoadTest, AUnaryCallIsOkOnlyWithAnAnswerTheCheckTakesAndStatusOk) {
  Held held;
  auto server = Serve(held);
  grpc_load::Client client(Address(*server), 2);
  std::string seen;
  EXPECT_TRUE(UnaryOk(client.For(0), "/t.T/Echo", "hello", [&](std::string_view answer) {
    seen = answer;
    return true;
  }));
  EXPECT_EQ(seen, "hello");
  // An empty message is a message (five bytes of frame): answered and OK.
  EXPECT_TRUE(UnaryOk(client.For(1), "/t.T/Echo", ""));
  EXPECT_FALSE(UnaryOk(client.For(0), "/t.T/Echo", "hello", [](auto) { return false; }));
  EXPECT_FALSE(UnaryOk(client.For(1), "/t.T/Refuse", "x"));
  EXPECT_FALSE(UnaryOk(client.For(0), "/t.T/NoSuchMethod", "x"));
  // A thousand in flight on one connection, each answered with its own message.
  std::mutex mu;
  std::condition_variable cv;
  int good = 0, done = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string message = "m" + std::to_string(i);
    grpc_load::Unary(
        client.For(0), "/t.T/Echo", message,
        [&](bool ok) {
          std::lock_guard lock(mu);
          good += ok ? 1 : 0;
          ++done;
          cv.notify_all();
        },
        [message](std::string_view answer) { return answer == message; });
  }
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return done == 1000; })) << done;
  EXPECT_EQ(good, 1000);
}

TEST(GrpcLoadTest, AStreamCarriesItsMessagesInOrderAndCloseCancelsIt) {
  Held held;
  auto server = Serve(held);
  grpc_load::Client client(Address(*server), 1);
  Recorder chat(client.For(0));
  chat.Start("/t.T/Chat", "a", false);
  chat.Write("b");
  chat.Write("c");
  ASSERT_TRUE(chat.WaitMessages(3)) << chat.messages().size();
  EXPECT_EQ(chat.messages(), (std::vector<std::string>{"re:a", "re:b", "re:c"}));
  chat.Close();  // returns once the stream's end was heard
  EXPECT_EQ(chat.status(), -1) << "cancelled by the client: no trailers";
  // The connection goes on.
  EXPECT_TRUE(UnaryOk(client.For(0), "/t.T/Echo", "after"));
  // A call never started closes at once; one closed before its request left ends as well.
  Recorder unused(client.For(0));
  unused.Close();
  for (int i = 0; i < 20; ++i) {
    Recorder brief(client.For(0));
    brief.Start("/t.T/Chat", "x", false);
    brief.Close();
    EXPECT_EQ(brief.status(), -1);
  }
  EXPECT_TRUE(UnaryOk(client.For(0), "/t.T/Echo", "still"));
}

TEST(GrpcLoadTest, StreamsOpenWhenTheServerStopsHearTheirEndAndNotOk) {
  Held held;
  auto server = Serve(held);
  grpc_load::Client client(Address(*server), 2);
  std::vector<std::unique_ptr<Recorder>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::make_unique<Recorder>(client.For(i)));
    streams.back()->Start("/t.T/Hold", "x", true);
  }
  for (int i = 0; i < 1000 && held.size() < 4; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(held.size(), 4u);
  server->Stop(0ms);
  for (auto& s : streams) {
    ASSERT_TRUE(s->WaitClosed());
    EXPECT_NE(s->status(), 0);
  }
}

}  // namespace
