// The HTTP server under every Drover API and the accept loop under every server, over real
// loopback sockets: what the server answers itself (400, 413, 500, 503 over the limit), the
// headers it adds, keep-alive, streams, and a listener's drain and close-all.
#include "net/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "common/http_error.h"
#include "net/http_client.h"
#include "net/sockets.h"
#include "net/tcp_listener.h"
#include "testing/eventually.h"
#include "testing/free_port.h"
#include "testing/http_client.h"

namespace drover::net {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using testing::Eventually;
using ::testing::HasSubstr;
using testing::Http;
using testing::SendRaw;

std::string ErrorCodeOf(const testing::HttpReply& reply) {
  const auto body = nlohmann::json::parse(reply.body, nullptr, false);
  return body.is_object() ? body["error"].value("code", "") : "";
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options) {
    options.name = "test";
    auto server = HttpServer::Start(
        std::move(options),
        [this](const HttpRequest& req, const std::string& client) { return Handle(req, client); });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }

  HttpReply Handle(const HttpRequest& req, const std::string& client) {
    const std::string target(req.target());
    if (target == "/throw") throw std::runtime_error("a bug");
    if (target == "/missing") return ErrorResponse(req, NotFoundError("no such thing"));
    if (target == "/slow") {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return released_; });
    }
    if (target == "/later" || target == "/later-now") {
      // Answered by the test (Late()), or here before returning.
      auto late = std::make_shared<LateReply>();
      if (target == "/later-now") {
        late->Send(JsonResponse(req, 200, "{\"late\":\"now\"}\n"));
      } else {
        std::lock_guard lock(mu_);
        late_.push_back({late, req.version(), req.keep_alive()});
        cv_.notify_all();
      }
      return HttpReply(std::move(late));
    }
    if (target == "/stream")
      return Streamed(std::make_shared<Lines>(std::vector<std::string>{"one\n", "two\n"}));
    if (target == "/wakeups") return Wakeups();
    if (target == "/fanout") return Streamed(std::make_shared<Follower>(fanout_));
    if (target == "/parked") {
      // One line, then nothing ever again (nobody notifies it).
      auto parked = std::make_shared<Lines>(std::vector<std::string>{"parked\n"}, /*end=*/false);
      parked_ = parked;
      return Streamed(parked);
    }
    if (target == "/flood") return Streamed(std::make_shared<Flood>(*this));
    if (target == "/numbered") return Streamed(std::make_shared<Lines>(NumberedLines()));
    if (target == "/numbered-whole") {
      std::string body;
      for (const std::string& line : NumberedLines()) body += line;
      return JsonResponse(req, 200, std::move(body));
    }
    return JsonResponse(
        req, 200,
        "{\"client\":\"" + client + "\",\"body\":" + std::to_string(req.body().size()) + "}\n");
  }

  // 128 lines of 64 KiB, "0000 xxx...", "0001 xxx...": 8 MiB, more than a loopback socket's
  // buffers take.
  static std::vector<std::string> NumberedLines() {
    std::vector<std::string> lines;
    for (int i = 0; i < kNumbered; ++i) {
      char number[8];
      std::snprintf(number, sizeof number, "%04d ", i);
      lines.push_back(number + std::string(64 * 1024 - 6, 'x') + "\n");
    }
    return lines;
  }
  // Reads `fd` until the server closes it (10 s at most without a byte), then closes it.
  static std::string ReadToEnd(int fd) {
    std::string raw;
    char buf[65536];
    timeval limit{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    while (true) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      raw.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return raw;
  }
  // Sends `request` from a socket with a small receive buffer, reads nothing for a while (the
  // server's writes must wait for it), then reads until the server closes.
  static std::string ReadLate(std::uint16_t port, const std::string& request) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd, 0);
    const int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    EXPECT_TRUE(testing::SendAll(fd, request));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return ReadToEnd(fd);
  }
  // Every numbered line is in `raw` from `at` on, in order; returns where the last one ends.
  static std::size_t ExpectNumberedLines(const std::string& raw, std::size_t at) {
    for (int i = 0; i < kNumbered; ++i) {
      char number[8];
      std::snprintf(number, sizeof number, "%04d ", i);
      const std::size_t found = raw.find(number, at);
      EXPECT_NE(found, std::string::npos) << "line " << i << " of " << kNumbered << " missing";
      if (found == std::string::npos) return at;
      at = found + 64 * 1024 - 1;
    }
    return at;
  }

  static HttpReply Streamed(std::shared_ptr<StreamSource> source) {
    HttpReply reply;
    reply.response = HttpResponse{http::status::ok, 11};
    reply.stream = std::move(source);
    return reply;
  }

  // Writes each of `lines` as a chunk, then ends (or, without `end`, waits for ever).
  class Lines final : public StreamSource {
   public:
    explicit Lines(std::vector<std::string> lines, bool end = true)
        : lines_(std::move(lines)), end_(end) {}
    void Start(std::shared_ptr<StreamWakeup>) override {}
    Step Take(std::vector<std::shared_ptr<const std::string>>& pieces) override {
      if (next_ < lines_.size()) {
        pieces.push_back(std::make_shared<const std::string>(lines_[next_++]));
        return Step::kWrite;
      }
      return end_ ? Step::kEnd : Step::kWait;
    }
    void Stop() override { stopped.store(true); }
    Duration write_timeout() const override { return std::chrono::seconds(5); }
    std::atomic<bool> stopped{false};

   private:
    const std::vector<std::string> lines_;
    const bool end_;
    std::size_t next_ = 0;
  };

  // Writes 64 KiB chunks for as long as they go out; the client never reads, so once the socket
  // buffers are full a write must give up (200 ms).
  class Flood final : public StreamSource {
   public:
    explicit Flood(HttpServerTest& test) : test_(test) {}
    void Start(std::shared_ptr<StreamWakeup>) override {}
    Step Take(std::vector<std::shared_ptr<const std::string>>& pieces) override {
      if (taken_++ > 0) test_.flood_writes_.fetch_add(1);  // the previous one went out
      pieces.push_back(chunk_);
      return Step::kWrite;
    }
    void Stop() override { test_.flood_cut_ = true; }
    Duration write_timeout() const override { return std::chrono::milliseconds(200); }

   private:
    HttpServerTest& test_;
    const std::shared_ptr<const std::string> chunk_ =
        std::make_shared<const std::string>(64 * 1024, 'x');
    int taken_ = 0;
  };

  // A stream fed by another thread: 1,000 numbers, each notified as it is produced; the stream
  // writes whatever has accumulated each time it wakes, and ends after the last.
  class Fed final : public StreamSource, public std::enable_shared_from_this<Fed> {
   public:
    explicit Fed(HttpServerTest& test) : test_(test) {}
    void Start(std::shared_ptr<StreamWakeup> wakeup) override {
      std::lock_guard hold(test_.producers_mu_);
      test_.producers_.emplace_back([this, keep = shared_from_this(), wakeup] {
        for (int i = 0; i < kFed; ++i) {
          {
            std::lock_guard lock(mu_);
            items_.push_back(i);
            if (i + 1 == kFed) done_ = true;
          }
          wakeup->Notify();
        }
      });
    }
    Step Take(std::vector<std::shared_ptr<const std::string>>& pieces) override {
      std::vector<int> items;
      bool done = false;
      {
        std::lock_guard lock(mu_);
        items.swap(items_);
        done = done_;
      }
      if (items.empty()) return done ? Step::kEnd : Step::kWait;
      std::string lines;
      for (int i : items) lines += std::to_string(i) + "\n";
      pieces.push_back(std::make_shared<const std::string>(std::move(lines)));
      test_.wakeup_writes_.fetch_add(1);
      return Step::kWrite;
    }
    void Stop() override {}
    Duration write_timeout() const override { return std::chrono::seconds(5); }

   private:
    HttpServerTest& test_;
    std::mutex mu_;
    std::vector<int> items_;
    bool done_ = false;
  };

  // One source of lines for every /fanout stream, as the registry's watch is: each line
  // published is notified to every stream, which writes what it has not written yet (as one
  // chunk), and ends after the last.
  struct Fanout {
    std::mutex mu;
    std::vector<std::shared_ptr<const std::string>> lines;
    bool ended = false;
    std::vector<std::shared_ptr<StreamWakeup>> wakeups;
    std::atomic<int> stopped{0};
    Duration write_timeout = std::chrono::seconds(5);

    void Publish(std::string line) {
      std::lock_guard lock(mu);
      lines.push_back(std::make_shared<const std::string>(std::move(line)));
      for (const auto& w : wakeups) w->Notify();
    }
    void End() {
      std::lock_guard lock(mu);
      ended = true;
      for (const auto& w : wakeups) w->Notify();
    }
    std::size_t streams() {  // open, each with its wake-up
      std::lock_guard lock(mu);
      return wakeups.size();
    }
  };
  class Follower final : public StreamSource {
   public:
    explicit Follower(Fanout& fanout) : fanout_(fanout) {}
    void Start(std::shared_ptr<StreamWakeup> wakeup) override {
      std::lock_guard lock(fanout_.mu);
      wakeup_ = wakeup.get();
      fanout_.wakeups.push_back(std::move(wakeup));
    }
    Step Take(std::vector<std::shared_ptr<const std::string>>& pieces) override {
      std::lock_guard lock(fanout_.mu);
      if (next_ == fanout_.lines.size()) return fanout_.ended ? Step::kEnd : Step::kWait;
      for (; next_ < fanout_.lines.size(); ++next_) pieces.push_back(fanout_.lines[next_]);
      return Step::kWrite;
    }
    // Lets go of the stream, as the registry's watch does (the stream must not outlive the
    // server).
    void Stop() override {
      {
        std::lock_guard lock(fanout_.mu);
        std::erase_if(fanout_.wakeups, [this](const auto& w) { return w.get() == wakeup_; });
      }
      fanout_.stopped.fetch_add(1);
    }
    Duration write_timeout() const override { return fanout_.write_timeout; }

   private:
    Fanout& fanout_;
    const StreamWakeup* wakeup_ = nullptr;
    std::size_t next_ = 0;
  };

  HttpReply Wakeups() { return Streamed(std::make_shared<Fed>(*this)); }
  static constexpr int kFed = 1000;
  static constexpr int kNumbered = 128;

  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

  // The `i`th /later request, once the handler has it (waits up to 10 s).
  std::shared_ptr<LateReply> WaitLate(std::size_t i) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return late_.size() > i; });
    return late_.size() > i ? late_[i].reply : nullptr;
  }
  // Sends the `i`th /later request its answer, from the calling thread.
  void Late(std::size_t i, const std::string& body) {
    Pending p;
    {
      std::lock_guard lock(mu_);
      p = late_.at(i);
    }
    HttpRequest shape;
    shape.version(p.version);
    shape.keep_alive(p.keep_alive);
    p.reply->Send(JsonResponse(shape, 200, body));
  }

  std::uint16_t port() const { return server_->port(); }

  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::atomic<int> flood_writes_{0};
  std::atomic<bool> flood_cut_{false};
  std::atomic<int> wakeup_writes_{0};
  Fanout fanout_;
  std::shared_ptr<Lines> parked_;
  struct Pending {
    std::shared_ptr<LateReply> reply;
    unsigned version = 11;
    bool keep_alive = true;
  };
  std::vector<Pending> late_;  // the /later requests, in arrival
  std::unique_ptr<HttpServer> server_;
  std::mutex producers_mu_;
  std::vector<std::jthread> producers_;  // joined before the server stops
};

TEST_F(HttpServerTest, AnswersAndAddsItsServerHeader) {
  Start({});
  const auto reply = Http(port(), "POST", "/echo", "hello");
  EXPECT_EQ(reply.status, 200);
  EXPECT_THAT(reply.headers, HasSubstr("Server: drover-test"));
  // The client is the connection: its address and port.
  EXPECT_THAT(reply.body,
              ::testing::MatchesRegex(R"(\{"client":"127\.0\.0\.1:[0-9]+","body":5\}\s*)"));
  const auto missing = Http(port(), "GET", "/missing");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(ErrorCodeOf(missing), "NOT_FOUND");
  EXPECT_EQ(server_->responses().at(200), 1u);
  EXPECT_EQ(server_->responses().at(404), 1u);
}

TEST_F(HttpServerTest, BadRequestsOversizedBodiesAndBugsGetClearErrors) {
  HttpServerOptions o;
  o.max_body = 1024;
  Start(o);
  const auto malformed = SendRaw(port(), "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(ErrorCodeOf(malformed), "INVALID_ARGUMENT");
  EXPECT_THAT(malformed.body, HasSubstr("malformed HTTP request"));

  const auto huge = Http(port(), "POST", "/echo", std::string(2048, 'x'));
  EXPECT_EQ(huge.status, 413);
  EXPECT_EQ(ErrorCodeOf(huge), "RESOURCE_EXHAUSTED");
  EXPECT_THAT(huge.body, HasSubstr("body larger than 1024 bytes"));

  const auto bug = Http(port(), "GET", "/throw");
  EXPECT_EQ(bug.status, 500);
  EXPECT_EQ(ErrorCodeOf(bug), "INTERNAL");
  // The server goes on serving.
  EXPECT_EQ(Http(port(), "GET", "/echo").status, 200);
}

// A body that came with its head is read from the head's buffer; one that comes later, or in
// chunks, is waited for; a chunked body over the limit is refused as a long one is.
TEST_F(HttpServerTest, BodiesAreReadWhetherTheyCameWithTheHeadLaterOrInChunks) {
  HttpServerOptions o;
  o.max_body = 1024;
  Start(o);
  // The body 200 ms after the head, on the same connection.
  const int fd = testing::ConnectLoopback(port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::SendAll(fd,
                               "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                               "Content-Length: 10\r\n\r\n01234"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(testing::SendAll(fd, "56789"));
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  EXPECT_EQ(raw.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << raw;
  EXPECT_THAT(raw, HasSubstr("\"body\":10}"));

  // Chunked, with the head: two chunks, then a second request on the connection.
  const auto chunked =
      SendRaw(port(),
              "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"
              "GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(chunked.status, 200);
  EXPECT_THAT(chunked.body, HasSubstr("\"body\":7}"));
  EXPECT_THAT(chunked.body, ::testing::EndsWith("\"body\":0}\n"));

  // Chunked past the limit: 413, whole in the first read or not.
  const std::string big_chunk = "800\r\n" + std::string(2048, 'x') + "\r\n0\r\n\r\n";
  const auto over = SendRaw(
      port(), "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + big_chunk);
  EXPECT_EQ(over.status, 413);
  EXPECT_EQ(ErrorCodeOf(over), "RESOURCE_EXHAUSTED");
  // A malformed chunk size: 400.
  const auto bad =
      SendRaw(port(), "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ErrorCodeOf(bad), "INVALID_ARGUMENT");
}

// A path given a larger limit (a deploy record of a large fleet) takes more; every other path
// keeps max_body.
TEST_F(HttpServerTest, APathWithALargerBodyLimitTakesMoreAndNoOtherDoes) {
  HttpServerOptions o;
  o.max_body = 1024;
  o.larger_bodies = {{"/echo/large", 8192}};
  Start(o);
  const auto taken = Http(port(), "POST", "/echo/large", std::string(4096, 'x'));
  EXPECT_EQ(taken.status, 200);
  EXPECT_THAT(taken.body, HasSubstr("\"body\":4096"));
  const auto over = Http(port(), "POST", "/echo/large", std::string(9000, 'x'));
  EXPECT_EQ(over.status, 413);
  EXPECT_THAT(over.body, HasSubstr("body larger than 8192 bytes"));
  EXPECT_EQ(Http(port(), "POST", "/echo", std::string(4096, 'x')).status, 413);
}

TEST_F(HttpServerTest, KeepsAConnectionAliveAcrossRequests) {
  Start({});
  const auto replies = SendRaw(
      port(),
      "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(replies.status, 200);
  // Both replies came on the one connection, the second after the first's body.
  EXPECT_THAT(replies.body, HasSubstr("HTTP/1.1 200 OK"));
}

TEST_F(HttpServerTest, ALateReplyHoldsNoThreadAndItsConnectionGoesOnAfterIt) {
  HttpServerOptions o;
  o.threads = 1;  // a handler that held its thread would hold the whole server
  Start(o);
  // Two requests on one connection: the first answered later, from another thread.
  std::jthread client([&] {
    const auto replies = SendRaw(port(),
                                 "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(replies.status, 200);
    EXPECT_THAT(replies.headers, HasSubstr("Server: drover-test"));
    // The late answer, then the second request's on the same connection.
    EXPECT_EQ(replies.body.find("{\"late\":1}\nHTTP/1.1 200 OK\r\n"), 0u) << replies.body;
    EXPECT_THAT(replies.body, ::testing::EndsWith("\"body\":0}\n"));
  });
  ASSERT_NE(WaitLate(0), nullptr);
  // Meanwhile the server's one thread answers other connections.
  EXPECT_EQ(Http(port(), "GET", "/echo").status, 200);
  EXPECT_EQ(Http(port(), "GET", "/echo").status, 200);
  Late(0, "{\"late\":1}\n");
  client.join();
  EXPECT_EQ(server_->responses().at(200), 4u);
}

TEST_F(HttpServerTest, ALateReplySentBeforeTheHandlerReturnsIsWrittenAtOnce) {
  Start({});
  const auto reply = Http(port(), "GET", "/later-now");
  EXPECT_EQ(reply.status, 200);
  EXPECT_THAT(reply.body, HasSubstr(R"({"late":"now"})"));
}

// Late replies sent together (a commit answers many writes at once) wake their connections in
// one drain and go out together (in bursts, through io_uring where the kernel gives one): each
// reaches its own connection, which then goes on to its next request; a reply larger than its
// slow client takes waits for it and arrives whole.
TEST_F(HttpServerTest, LateRepliesSentTogetherEachReachTheirConnectionWhichGoesOn) {
  HttpServerOptions o;
  o.threads = 2;
  Start(o);
  const std::string requests =
      "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  // The slow client first, so that its request is the first late one.
  std::string slow_raw;
  std::jthread slow([&] { slow_raw = ReadLate(port(), requests); });
  ASSERT_NE(WaitLate(0), nullptr);
  constexpr std::size_t kClients = 100;
  std::vector<int> fds;
  for (std::size_t i = 0; i < kClients; ++i) {
    fds.push_back(testing::ConnectLoopback(port()));
    ASSERT_TRUE(testing::SendAll(fds.back(), requests));
  }
  ASSERT_NE(WaitLate(kClients), nullptr);
  const std::string big(8 * 1024 * 1024, 'b');
  Late(0, big);
  for (std::size_t i = 1; i <= kClients; ++i) Late(i, "{\"late\":" + std::to_string(i) + "}\n");
  std::vector<bool> seen(kClients + 1, false);
  for (int fd : fds) {
    const std::string raw = ReadToEnd(fd);
    ASSERT_EQ(raw.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << raw.substr(0, 200);
    const std::size_t at = raw.find("{\"late\":");
    ASSERT_NE(at, std::string::npos) << raw;
    const std::size_t which = std::stoul(raw.substr(at + 8));
    ASSERT_GE(which, 1u);
    ASSERT_LE(which, kClients);
    EXPECT_FALSE(seen[which]) << "reply " << which << " twice";
    seen[which] = true;
    // Then the second request's answer on the same connection.
    EXPECT_NE(raw.find("HTTP/1.1 200 OK\r\n", at), std::string::npos) << raw;
    EXPECT_TRUE(raw.ends_with("\"body\":0}\n")) << raw;
  }
  slow.join();
  const std::size_t body = slow_raw.find("\r\n\r\n") + 4;
  ASSERT_GT(slow_raw.size(), body + big.size());
  EXPECT_EQ(slow_raw.compare(body, big.size(), big), 0);
  EXPECT_NE(slow_raw.find("HTTP/1.1 200 OK\r\n", body + big.size()), std::string::npos);
  EXPECT_TRUE(slow_raw.ends_with("\"body\":0}\n"));
}

TEST_F(HttpServerTest, ALateReplyStillAwaitedWhenTheServerGoesAwayIsDroppedWithIt) {
  Start({});
  testing::HttpReply reply;
  reply.status = -1;
  std::jthread client([&] { reply = Http(port(), "GET", "/later"); });
  const std::shared_ptr<LateReply> late = WaitLate(0);
  ASSERT_NE(late, nullptr);
  server_.reset();  // returns although the reply never came; the connection is closed
  client.join();
  EXPECT_EQ(reply.status, 0);  // closed without an answer
  // The answer that comes after the server is gone goes nowhere.
  Late(0, "{}\n");
}

TEST_F(HttpServerTest, AStreamIsChunkedAndEndsCleanly) {
  Start({});
  testing::StreamReader stream(port(), "/stream");
  const auto lines = stream.Lines(2, std::chrono::seconds(5));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "one");
  EXPECT_EQ(lines[1], "two");
  EXPECT_TRUE(stream.Ended(std::chrono::seconds(5)));
  EXPECT_EQ(stream.status(), 200);
}

TEST_F(HttpServerTest, AStreamWokenFromAnotherThreadGetsEverythingInOrder) {
  HttpServerOptions o;
  o.threads = 2;
  Start(o);
  testing::StreamReader stream(port(), "/wakeups");
  const auto lines = stream.Lines(kFed, std::chrono::seconds(10));
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kFed));
  for (int i = 0; i < kFed; ++i) ASSERT_EQ(lines[static_cast<std::size_t>(i)], std::to_string(i));
  EXPECT_TRUE(stream.Ended(std::chrono::seconds(5)));
  // Each wake-up wrote what had accumulated: never more writes than notifications.
  EXPECT_GE(wakeup_writes_.load(), 1);
  EXPECT_LE(wakeup_writes_.load(), kFed);
}

// An event notified to many streams at once is sent to all of them together (in bursts, through
// io_uring where the kernel gives one; a send each where not): every stream gets every line, in
// order, then its clean end.
TEST_F(HttpServerTest, EventsFannedOutToManyStreamsReachEachInOrder) {
  HttpServerOptions o;
  o.threads = 2;
  Start(o);
  constexpr std::size_t kStreams = 300;  // more than one burst's part, over both io threads
  constexpr int kEvents = 40;
  std::vector<std::unique_ptr<testing::StreamReader>> readers;
  for (std::size_t i = 0; i < kStreams; ++i) {
    readers.push_back(std::make_unique<testing::StreamReader>(port(), "/fanout"));
  }
  ASSERT_TRUE(Eventually([&] { return fanout_.streams() == kStreams; }, std::chrono::seconds(10)));
  std::vector<std::string> expected;
  for (int i = 0; i < kEvents; ++i) {
    expected.push_back("event " + std::to_string(i) + " " + std::string(200, 'x'));
    fanout_.Publish(expected.back() + "\n");
    if (i % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  fanout_.End();
  for (std::size_t i = 0; i < kStreams; ++i) {
    ASSERT_EQ(readers[i]->Lines(kEvents, std::chrono::seconds(10)), expected) << "stream " << i;
    ASSERT_TRUE(readers[i]->Ended(std::chrono::seconds(5))) << "stream " << i;
  }
  EXPECT_TRUE(Eventually([&] { return fanout_.stopped.load() == static_cast<int>(kStreams); },
                         std::chrono::seconds(5)));
}

// Among streams woken together, one whose client reads late waits for it and then gets the rest
// in order, and one whose client never reads is cut off at its write timeout; neither holds up
// the others.
TEST_F(HttpServerTest, AmongStreamsWokenTogetherALateReaderGetsTheRestAndANonReaderIsCutOff) {
  fanout_.write_timeout = std::chrono::seconds(2);
  Start({});
  constexpr std::size_t kPrompt = 20;
  std::vector<int> prompt;
  for (std::size_t i = 0; i < kPrompt; ++i) {
    prompt.push_back(testing::ConnectLoopback(port()));
    ASSERT_TRUE(testing::SendAll(prompt.back(), testing::RequestText("GET", "/fanout", "")));
  }
  testing::StreamReader never_reads(port(), "/fanout");
  std::string late_raw;
  std::jthread late(
      [&] { late_raw = ReadLate(port(), testing::RequestText("GET", "/fanout", "")); });
  ASSERT_TRUE(
      Eventually([&] { return fanout_.streams() == kPrompt + 2; }, std::chrono::seconds(10)));
  std::vector<std::string> raw(kPrompt);
  std::vector<std::jthread> readers;
  for (std::size_t i = 0; i < kPrompt; ++i) {
    readers.emplace_back([&, i] { raw[i] = ReadToEnd(prompt[i]); });
  }
  // 8 MiB in 64 KiB lines: far more than a socket takes, so sends are partial or find no room.
  for (const std::string& line : NumberedLines()) fanout_.Publish(line);
  fanout_.End();
  readers.clear();  // joined
  late.join();
  for (std::size_t i = 0; i < kPrompt; ++i) {
    SCOPED_TRACE("prompt reader " + std::to_string(i));
    ExpectNumberedLines(raw[i], 0);
    EXPECT_TRUE(raw[i].ends_with("\r\n0\r\n\r\n"));
  }
  ExpectNumberedLines(late_raw, 0);
  EXPECT_TRUE(late_raw.ends_with("\r\n0\r\n\r\n"));
  // The one that never read was cut off: every stream is over.
  EXPECT_TRUE(Eventually([&] { return fanout_.stopped.load() == static_cast<int>(kPrompt + 2); },
                         std::chrono::seconds(20)));
}

TEST_F(HttpServerTest, AStreamStillWaitingWhenTheServerGoesAwayIsFreedWithIt) {
  Start({});
  testing::StreamReader stream(port(), "/parked");
  ASSERT_EQ(stream.Lines(1, std::chrono::seconds(5)).size(), 1u);
  // An idle stream is owned by the step its wake-up would run, not by the event loop: the server
  // must still free it (and so close its connection, and stop its source) when it goes away.
  server_.reset();
  EXPECT_TRUE(stream.Ended(std::chrono::seconds(5)));
  EXPECT_TRUE(parked_->stopped.load());
}

TEST_F(HttpServerTest, AStreamToAClientThatStopsReadingIsCutOff) {
  Start({});
  testing::StreamReader stream(port(), "/flood");  // sends the request, then never reads
  // The first writes go straight into the socket buffers; once they are full the rest of a chunk
  // must be written within 200 ms, which never happens.
  ASSERT_TRUE(Eventually([this] { return flood_cut_.load(); }, std::chrono::seconds(20)));
  EXPECT_GE(flood_writes_.load(), 1);
}

TEST_F(HttpServerTest, AStreamToAClientThatReadsLateWaitsAndThenSendsTheRestInOrder) {
  Start({});
  // The stream's writes must wait for the client (well within their 5 s), then go on with the
  // lines it had not taken yet.
  const std::string raw = ReadLate(port(), testing::RequestText("GET", "/numbered", ""));
  // Every line, in order, then the last chunk (and the server's close).
  ExpectNumberedLines(raw, 0);
  EXPECT_TRUE(raw.ends_with("\r\n0\r\n\r\n"))
      << raw.substr(raw.size() - std::min<std::size_t>(raw.size(), 40));
}

// An answer is sent at once for what the socket takes; the rest waits for the client, and the
// connection goes on after it.
TEST_F(HttpServerTest, AnAnswerLargerThanTheSocketTakesIsWrittenWholeToAClientThatReadsLate) {
  Start({});
  const std::string raw = ReadLate(port(),
                                   "GET /numbered-whole HTTP/1.1\r\nHost: x\r\n\r\n"
                                   "GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(raw.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << raw.substr(0, 200);
  const std::size_t body = raw.find("\r\n\r\n") + 4;
  ASSERT_THAT(raw.substr(0, body), HasSubstr("Content-Length: 8388608\r\n"));
  const std::size_t end = ExpectNumberedLines(raw, body);
  EXPECT_EQ(end, body + 8 * 1024 * 1024 - 1);
  // Then the second answer, whole.
  EXPECT_EQ(raw.find("HTTP/1.1 200 OK\r\n", body), body + 8 * 1024 * 1024);
  EXPECT_TRUE(raw.ends_with("\"body\":0}\n")) << raw.substr(raw.size() - 80);
}

// Requests sent together (pipelined) are answered in order, each once, however many there are.
TEST_F(HttpServerTest, ManyRequestsSentTogetherAreAnsweredInOrder) {
  Start({});
  constexpr int kRequests = 2000;
  std::string requests;
  for (int i = 0; i < kRequests; ++i) {
    const std::string body(static_cast<std::size_t>(i % 50), 'x');
    requests += "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\n" + (i + 1 == kRequests ? "Connection: close\r\n" : "") + "\r\n" + body;
  }
  const std::string raw = ReadLate(port(), requests);
  std::size_t at = 0;
  for (int i = 0; i < kRequests; ++i) {
    at = raw.find("HTTP/1.1 200 OK\r\n", at);
    ASSERT_NE(at, std::string::npos) << "answer " << i << " missing";
    const std::string body = "\"body\":" + std::to_string(i % 50) + "}";
    const std::size_t found = raw.find(body, at);
    ASSERT_NE(found, std::string::npos) << "answer " << i;
    EXPECT_EQ(raw.find("HTTP/1.1", at + 1) > found, true) << "answer " << i << " out of order";
    at = found;
  }
  EXPECT_EQ(raw.find("HTTP/1.1", at), std::string::npos);  // nothing more
}

// A connection that sends no request, or stops in the middle of one, is closed once idle_timeout
// has passed; one that keeps asking is not, however long it lasts in all.
TEST_F(HttpServerTest, AConnectionIdleOrStalledPastTheIdleTimeoutIsClosedAndABusyOneIsNot) {
  HttpServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(400);
  Start(o);
  // Reads until the server closes (true) or 5 s pass (false).
  const auto closed_within = [](int fd) {
    timeval limit{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return false;
    }
  };
  const auto started = std::chrono::steady_clock::now();
  const int idle = testing::ConnectLoopback(port());
  const int stalled = testing::ConnectLoopback(port());
  ASSERT_TRUE(testing::SendAll(stalled, "GET /echo HTTP/1.1\r\nHost: x\r\n"));  // no end
  const int answered = testing::ConnectLoopback(port());
  ASSERT_TRUE(testing::SendAll(answered, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"));

  // The busy one: a request every 100 ms for 1.2 s, on one connection. true: answered (200).
  const int busy = testing::ConnectLoopback(port());
  const auto ask = [busy] {
    if (!testing::SendAll(busy, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")) return false;
    timeval limit{5, 0};
    ::setsockopt(busy, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    std::string raw;
    char buf[4096];
    while (true) {
      const std::size_t head = raw.find("\r\n\r\n");
      const std::size_t length = raw.find("Content-Length: ");
      if (head != std::string::npos && length != std::string::npos &&
          raw.size() >= head + 4 + std::stoul(raw.substr(length + 16))) {
        return raw.rfind("HTTP/1.1 200 OK\r\n", 0) == 0;
      }
      const ssize_t n = ::recv(busy, buf, sizeof buf, 0);
      if (n <= 0) return false;
      raw.append(buf, static_cast<std::size_t>(n));
    }
  };
  for (int i = 0; i < 12; ++i) {
    EXPECT_TRUE(ask()) << "request " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(closed_within(idle));
  EXPECT_TRUE(closed_within(stalled));
  EXPECT_TRUE(closed_within(answered));  // after its answer, no next request came
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4));
  EXPECT_TRUE(ask());
  for (int fd : {idle, stalled, answered, busy}) ::close(fd);
}

// A connection's read that takes a whole request counts as draining its socket, so the wait for
// the next request starts without a read (PlainConnection, net::WatchPeerEnd on a strand). What
// that must not lose: a client's end that came with its request, or after its answers, or the next
// request sent a while later -- each seen at once, never left to the idle timeout (60 s here).
TEST_F(HttpServerTest, AnEndOrANextRequestAfterAnAnswerIsSeenAtOnceWhereverItCame) {
  Start({});
  // Reads until the server closes; the answers read, or -1 when 5 s pass first.
  const auto answers_until_closed = [](int fd) {
    timeval limit{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    std::string raw;
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0) return -1;
      if (n == 0) break;
      raw.append(buf, static_cast<std::size_t>(n));
    }
    int count = 0;
    for (std::size_t at = raw.find("HTTP/1.1 200 OK\r\n"); at != std::string::npos;
         at = raw.find("HTTP/1.1 200 OK\r\n", at + 1)) {
      ++count;
    }
    return count;
  };
  const std::string request = "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string later = "GET /later-now HTTP/1.1\r\nHost: x\r\n\r\n";
  const auto started = std::chrono::steady_clock::now();
  constexpr int kEach = 50;
  // The end right behind one, two or three requests (in one segment or two).
  std::vector<std::pair<int, int>> ended;  // (fd, requests)
  for (int i = 0; i < kEach; ++i) {
    const int fd = testing::ConnectLoopback(port());
    const int requests = 1 + i % 3;
    for (int r = 0; r < requests; ++r) ASSERT_TRUE(testing::SendAll(fd, r % 2 ? later : request));
    ::shutdown(fd, SHUT_WR);
    ended.emplace_back(fd, requests);
  }
  for (const auto& [fd, requests] : ended) {
    EXPECT_EQ(answers_until_closed(fd), requests);
    ::close(fd);
  }
  // The end after the answer was read, and a next request 50 ms after an answer.
  std::vector<int> answered;
  for (int i = 0; i < kEach; ++i) {
    const int fd = testing::ConnectLoopback(port());
    ASSERT_TRUE(testing::SendAll(fd, i % 2 ? later : request));
    answered.push_back(fd);
  }
  const auto one_answer = [](int fd) {
    timeval limit{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    std::string raw;
    char buf[4096];
    while (raw.find("}\n") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return false;
      raw.append(buf, static_cast<std::size_t>(n));
    }
    return raw.rfind("HTTP/1.1 200 OK\r\n", 0) == 0;
  };
  for (const int fd : answered) EXPECT_TRUE(one_answer(fd));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (std::size_t i = 0; i < answered.size(); ++i) {
    if (i % 2 == 0) {
      ::shutdown(answered[i], SHUT_WR);
    } else {
      ASSERT_TRUE(testing::SendAll(answered[i], request));
      EXPECT_TRUE(one_answer(answered[i])) << i;
      ::shutdown(answered[i], SHUT_WR);
    }
  }
  for (const int fd : answered) {
    EXPECT_EQ(answers_until_closed(fd), 0);
    ::close(fd);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

TEST_F(HttpServerTest, OverTheConnectionLimitAClientGets503AndTheOthersAreServed) {
  HttpServerOptions o;
  o.max_connections = 1;
  o.threads = 2;
  Start(o);
  std::thread slow([this] { EXPECT_EQ(Http(port(), "GET", "/slow").status, 200); });
  ASSERT_TRUE(Eventually([this] { return server_->connections().active.load() == 1; }));
  const auto refused = Http(port(), "GET", "/echo");
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(ErrorCodeOf(refused), "RESOURCE_EXHAUSTED");
  EXPECT_THAT(refused.body, HasSubstr("too many connections to this test"));
  EXPECT_THAT(refused.headers, HasSubstr("Retry-After: 1"));
  EXPECT_EQ(server_->connections().refused.load(), 1u);
  Release();
  slow.join();
  ASSERT_TRUE(Eventually([this] { return server_->connections().active.load() == 0; }));
  EXPECT_EQ(Http(port(), "GET", "/echo").status, 200);
}

TEST_F(HttpServerTest, StopAcceptingRefusesNewClientsAtTheKernel) {
  Start({});
  server_->StopAccepting();
  EXPECT_EQ(Http(port(), "GET", "/echo").status, 0);  // connection refused
}

// A listener named "test" on a free loopback port.
ListenerOptions TestListener() {
  ListenerOptions o;
  o.name = "test";
  o.address = "127.0.0.1:0";
  return o;
}

// What a test's Serve keeps of a connection (on the thread that serves it).
struct Kept {
  asio::ip::tcp::socket socket;
  Connection connection;
  int order = 0;  // in the order served, where a test counts
};

// Each context run by a thread of its own (kept running by a work guard) until Stop(), which
// stops them and joins the threads; destruction stops them too (an ASSERT that ends a test early).
class RunEach {
 public:
  explicit RunEach(std::initializer_list<asio::io_context*> contexts) : contexts_(contexts) {
    for (asio::io_context* io : contexts_) {
      threads_.emplace_back([io] {
        auto work = asio::make_work_guard(*io);
        io->run();
      });
    }
  }
  ~RunEach() { Stop(); }
  RunEach(const RunEach&) = delete;
  RunEach& operator=(const RunEach&) = delete;
  void Stop() {
    for (asio::io_context* io : contexts_) io->stop();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::vector<asio::io_context*> contexts_;
  std::vector<std::thread> threads_;
};

// A listener's drain and close-all reach each connection through the closer it registered.
TEST(TcpListenerTest, DrainingAndClosingReachEveryConnection) {
  asio::io_context io;
  std::atomic<int> drained{0}, closed{0};
  ListenerOptions o = TestListener();
  auto listener = TcpListener::Start(
      io, o, [&io] { return asio::any_io_executor(io.get_executor()); },
      TcpListener::Spawn(
          [&](asio::ip::tcp::socket socket, Connection connection) -> asio::awaitable<void> {
            auto timer =
                std::make_shared<asio::steady_timer>(socket.get_executor(), std::chrono::hours(1));
            connection.OnClose([&, timer](CloseReason reason) {
              (reason == CloseReason::kDraining ? drained : closed).fetch_add(1);
              if (reason == CloseReason::kCloseNow) timer->cancel();
            });
            boost::system::error_code ec;
            co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
          }));
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  std::thread runner([&io] {
    auto work = asio::make_work_guard(io);
    io.run();
  });
  const int a = testing::ConnectLoopback((*listener)->port());
  const int b = testing::ConnectLoopback((*listener)->port());
  ASSERT_TRUE(Eventually([&] { return (*listener)->counters().active.load() == 2; }));
  (*listener)->StopAccepting();
  EXPECT_TRUE(Eventually([&] { return drained.load() == 2; }));
  EXPECT_EQ(testing::ConnectLoopback((*listener)->port()), -1);
  (*listener)->CloseAll();
  EXPECT_TRUE(Eventually([&] { return closed.load() == 2; }));
  EXPECT_TRUE(Eventually([&] { return (*listener)->counters().active.load() == 0; }));
  EXPECT_EQ((*listener)->counters().accepted.load(), 2u);
  ::close(a);
  ::close(b);
  io.stop();
  runner.join();
}

// A connection is open for as long as a copy of its Connection lives, not while Serve runs: an
// owner may return from Serve and keep the connection in a plain object (the gateway parks idle
// HTTP clients this way). Its closer still reaches it, and it closes when the object goes. The
// peer is the client's address as accept4 gave it.
TEST(TcpListenerTest, AConnectionKeptPastServeStaysOpenUntilItsLastCopyGoes) {
  asio::io_context io;
  std::vector<std::shared_ptr<Kept>> kept;  // on the io thread only
  std::atomic<int> closers_run{0};
  std::atomic<int> served{0};
  std::atomic<std::uint16_t> peer_port{0};
  ListenerOptions o = TestListener();
  auto listener = TcpListener::Start(
      io, o, [&io] { return asio::any_io_executor(io.get_executor()); },
      [&](asio::ip::tcp::socket socket, Connection connection) {
        peer_port = connection.peer().port();
        auto k = std::make_shared<Kept>(Kept{std::move(socket), std::move(connection)});
        k->connection.OnClose([&closers_run](CloseReason) { closers_run.fetch_add(1); });
        kept.push_back(std::move(k));
        served.fetch_add(1);  // Serve returns; the connection lives on in `kept`
      });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  std::thread runner([&io] {
    auto work = asio::make_work_guard(io);
    io.run();
  });
  const int client = testing::ConnectLoopback((*listener)->port());
  ASSERT_GE(client, 0);
  sockaddr_in local{};
  socklen_t size = sizeof local;
  ::getsockname(client, reinterpret_cast<sockaddr*>(&local), &size);
  ASSERT_TRUE(Eventually([&] { return served.load() == 1; }));
  EXPECT_EQ(peer_port.load(), ntohs(local.sin_port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ((*listener)->counters().active.load(), 1u);  // its Serve returned long ago
  (*listener)->CloseAll();
  EXPECT_TRUE(Eventually([&] { return closers_run.load() == 1; }));
  EXPECT_EQ((*listener)->counters().active.load(), 1u);
  asio::post(io, [&kept] { kept.clear(); });
  EXPECT_TRUE(Eventually([&] { return (*listener)->counters().active.load() == 0; }));
  ::close(client);
  io.stop();
  runner.join();
}

TEST(TcpListenerTest, ABurstIsAcceptedWholeOntoTheWorkerWithTheListenersSocketOptions) {
  // 200 connections at once (more than one accept batch) through a listener whose accepts run
  // on one context and whose connections are served on another: every one is served, on the
  // worker, with keepalive and no-delay inherited from the listening socket.
  asio::io_context acceptor_io, worker_io;
  ListenerOptions o = TestListener();
  o.keep_alive = true;
  std::atomic<int> served{0}, on_worker{0}, with_options{0};
  auto listener = TcpListener::Start(
      acceptor_io, o, [&worker_io] { return asio::any_io_executor(worker_io.get_executor()); },
      [&](asio::ip::tcp::socket socket, Connection) {
        const auto* context = &asio::query(socket.get_executor(), asio::execution::context);
        if (context == &worker_io && worker_io.get_executor().running_in_this_thread()) {
          on_worker.fetch_add(1);
        }
        int keep = 0, nodelay = 0, idle = 0;
        socklen_t len = sizeof(int);
        const int fd = socket.native_handle();
        ::getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keep, &len);
        ::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len);
        ::getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &len);
        if (keep == 1 && nodelay == 1 && idle == 30) with_options.fetch_add(1);
        served.fetch_add(1);  // last: once 200 are served, every check above has been counted
      });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  RunEach running({&acceptor_io, &worker_io});
  std::vector<int> clients;
  for (int i = 0; i < 200; ++i) clients.push_back(testing::ConnectLoopback((*listener)->port()));
  EXPECT_TRUE(Eventually([&] { return served.load() == 200; })) << served.load();
  EXPECT_EQ(on_worker.load(), 200);
  EXPECT_EQ(with_options.load(), 200);
  EXPECT_EQ((*listener)->counters().accepted.load(), 200u);
  for (const int fd : clients) ::close(fd);
  (*listener)->StopAccepting();
  listener->reset();
  running.Stop();
}

// A listener on several workers: each accepts on a listening socket of its own and serves what it
// accepts on its own thread, unless it holds more than chance explains (HandOver) -- 64
// connections made at once end up within that spread, however the kernel's hash spread them.
TEST(TcpListenerTest, ListeningOnEveryWorkerServesOnTheirThreadsEvenly) {
  asio::io_context io0(1), io1(1);
  asio::io_context* workers[2] = {&io0, &io1};
  ListenerOptions o = TestListener();
  std::vector<Kept> kept[2];  // each on its worker's thread only
  std::atomic<int> served{0}, on_thread{0}, per_worker[2] = {0, 0};
  auto listener =
      TcpListener::Start({&io0, &io1}, o, [&](asio::ip::tcp::socket socket, Connection connection) {
        const auto* context = &asio::query(socket.get_executor(), asio::execution::context);
        const int w = context == &io0 ? 0 : 1;
        if (workers[w]->get_executor().running_in_this_thread()) on_thread.fetch_add(1);
        per_worker[w].fetch_add(1);
        kept[w].push_back({std::move(socket), std::move(connection)});
        served.fetch_add(1);
      });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  RunEach running({&io0, &io1});
  std::vector<int> clients;
  for (int i = 0; i < 64; ++i) clients.push_back(testing::ConnectLoopback((*listener)->port()));
  ASSERT_TRUE(Eventually([&] { return served.load() == 64; })) << served.load();
  EXPECT_EQ(on_thread.load(), 64);
  EXPECT_EQ((*listener)->counters().active.load(), 64u);
  // Within the slack HandOver allows at 64: past 2 * sqrt(64) + 2 = 18 more, a worker hands over.
  EXPECT_LE(std::abs(per_worker[0].load() - per_worker[1].load()), 19)
      << per_worker[0].load() << " / " << per_worker[1].load();
  (*listener)->StopAccepting();
  EXPECT_LT(testing::ConnectLoopback((*listener)->port()), 0);  // every socket closed
  for (int w = 0; w < 2; ++w) asio::post(*workers[w], [&kept, w] { kept[w].clear(); });
  EXPECT_TRUE(Eventually([&] { return (*listener)->counters().active.load() == 0; }));
  for (const int fd : clients) ::close(fd);
  listener->reset();
  running.Stop();
}

// A worker hands a connection over only when it holds more than an eighth more than the least
// loaded one and more than the kernel's hash spreads connections by chance (twice sqrt(n), plus 2).
TEST(TcpListenerTest, AWorkerHandsOverOnlyPastWhatChanceSpreads) {
  using internal::HandOver;
  EXPECT_FALSE(HandOver(0, 0));
  EXPECT_FALSE(HandOver(32, 32));
  EXPECT_FALSE(HandOver(3, 0));    // 3 is within 2 * sqrt(3) + 2
  EXPECT_TRUE(HandOver(8, 0));     // past 2 * sqrt(8) + 2 = 7.7
  EXPECT_FALSE(HandOver(41, 23));  // 18: exactly 2 * sqrt(64) + 2
  EXPECT_TRUE(HandOver(42, 22));
  // Many long-lived connections: the eighth decides (5,100 / 4,900 is chance; 612 an eighth).
  EXPECT_FALSE(HandOver(5'100, 4'900));
  EXPECT_FALSE(HandOver(5'200, 4'800));  // past chance (202), within an eighth (600)
  EXPECT_TRUE(HandOver(5'700, 4'300));
  EXPECT_FALSE(HandOver(4'300, 5'700));  // never to a busier worker
}

// The workers' form keeps each worker's open connections in a list of its own: connections that
// close -- the first, the last, some between -- leave the list whole, so a drain and a close-all
// reach every one still open, exactly once, and nothing that has gone.
TEST(TcpListenerTest, ConnectionsClosingAnywhereLeaveTheRestReachableByDrainAndCloseAll) {
  asio::io_context io0(1), io1(1);
  asio::io_context* workers[2] = {&io0, &io1};
  ListenerOptions o = TestListener();
  constexpr int kClients = 12;
  std::vector<Kept> kept[2];  // each on its worker's thread only
  std::atomic<int> served{0};
  std::atomic<int> drained[kClients] = {}, closed[kClients] = {};
  auto listener =
      TcpListener::Start({&io0, &io1}, o, [&](asio::ip::tcp::socket socket, Connection connection) {
        const auto* context = &asio::query(socket.get_executor(), asio::execution::context);
        const int w = context == &io0 ? 0 : 1;
        const int order = served.fetch_add(1);
        connection.OnClose([&, order](CloseReason reason) {
          (reason == CloseReason::kDraining ? drained : closed)[order].fetch_add(1);
        });
        kept[w].push_back({std::move(socket), std::move(connection), order});
      });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  RunEach running({&io0, &io1});
  std::vector<int> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(testing::ConnectLoopback((*listener)->port()));
  }
  ASSERT_TRUE(Eventually([&] { return served.load() == kClients; })) << served.load();
  // Every third goes (0, 3, 6, 9: the first served, and others wherever they sit in the lists).
  const auto gone = [](int order) { return order % 3 == 0; };
  for (int w = 0; w < 2; ++w) {
    asio::post(*workers[w], [&kept, w, &gone] {
      std::erase_if(kept[w], [&gone](const Kept& k) { return gone(k.order); });
    });
  }
  ASSERT_TRUE(Eventually([&] { return (*listener)->counters().active.load() == 8u; }))
      << (*listener)->counters().active.load();
  (*listener)->StopAccepting();
  (*listener)->CloseAll();
  const auto reached = [&](const std::atomic<int>* counts) {
    for (int i = 0; i < kClients; ++i) {
      if (counts[i].load() != (gone(i) ? 0 : 1)) return false;
    }
    return true;
  };
  EXPECT_TRUE(Eventually([&] { return reached(drained) && reached(closed); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // nothing runs twice after
  EXPECT_TRUE(reached(drained));
  EXPECT_TRUE(reached(closed));
  for (int w = 0; w < 2; ++w) asio::post(*workers[w], [&kept, w] { kept[w].clear(); });
  EXPECT_TRUE(Eventually([&] { return (*listener)->counters().active.load() == 0; }));
  for (const int fd : clients) ::close(fd);
  listener->reset();
  running.Stop();
}

// The sockets that share an address (SO_REUSEPORT) let nothing else in: a second listener on it,
// in this process or another, is refused as for a single socket, and the shared ones are refused
// an address something else holds.
TEST(TcpListenerTest, AnAddressHeldByListeningWorkersIsInUseForAnyoneElse) {
  asio::io_context io0(1), io1(1);
  ListenerOptions o = TestListener();
  const auto nothing = [](asio::ip::tcp::socket, Connection) {};
  auto first = TcpListener::Start({&io0, &io1}, o, nothing);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  o.address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = TcpListener::Start({&io0, &io1}, o, nothing);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("in use"));
  auto single = TcpListener::Start(
      io0, o, [&io0] { return asio::any_io_executor(io0.get_executor()); }, nothing);
  EXPECT_EQ(single.status().code(), StatusCode::kUnavailable);
  // A socket listening without SO_REUSEPORT, as another program's would.
  o.address = "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  auto plain = TcpListener::Start(
      io0, o, [&io0] { return asio::any_io_executor(io0.get_executor()); }, nothing);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  auto shared = TcpListener::Start({&io0, &io1}, o, nothing);
  EXPECT_EQ(shared.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(shared.status().message(), HasSubstr("in use"));
  io0.stop();  // nothing runs them: the listeners close their sockets themselves
  io1.stop();
}

TEST(TcpListenerTest, WorkersRegisterWhatTheyAcceptForThePeersEndWhenAsked) {
  asio::io_context io0(1), io1(1);
  ListenerOptions o = TestListener();
  o.watch_peer_end = true;
  std::atomic<int> served{0}, watched{0};
  auto listener =
      TcpListener::Start({&io0, &io1}, o, [&](asio::ip::tcp::socket socket, Connection) {
        served.fetch_add(1);
        if ((RegisteredEvents(socket) & EPOLLRDHUP) != 0 && WatchPeerEnd(socket))
          watched.fetch_add(1);
      });
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  RunEach running({&io0, &io1});
  std::vector<int> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(testing::ConnectLoopback((*listener)->port()));
  EXPECT_TRUE(Eventually([&] { return served.load() == 8; })) << served.load();
  EXPECT_EQ(watched.load(), 8);
  for (const int fd : clients) ::close(fd);
  (*listener)->StopAccepting();
  listener->reset();
  running.Stop();
}

// The shared form, on a context two threads run: a connection served on a strand of its own may
// be watched for its end there (its reads run one at a time); one served on the context's own
// executor may not (two of its threads could read it at once), though it is registered too.
TEST(TcpListenerTest, ASharedContextsConnectionsAreWatchedForTheirEndOnlyFromTheirStrand) {
  asio::io_context io(2);
  ListenerOptions o = TestListener();
  o.watch_peer_end = true;
  std::atomic<int> served{0}, registered{0}, watched{0};
  const auto serve = [&](asio::ip::tcp::socket socket, Connection) {
    served.fetch_add(1);
    if ((RegisteredEvents(socket) & EPOLLRDHUP) != 0) registered.fetch_add(1);
    if (WatchPeerEnd(socket)) watched.fetch_add(1);
  };
  auto on_strands = TcpListener::Start(
      io, o, [&io] { return asio::any_io_executor(asio::make_strand(io)); }, serve);
  ASSERT_TRUE(on_strands.ok()) << on_strands.status().ToString();
  auto on_context = TcpListener::Start(
      io, o, [&io] { return asio::any_io_executor(io.get_executor()); }, serve);
  ASSERT_TRUE(on_context.ok()) << on_context.status().ToString();
  RunEach running({&io, &io});
  std::vector<int> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(testing::ConnectLoopback((*on_strands)->port()));
  EXPECT_TRUE(Eventually([&] { return served.load() == 4; })) << served.load();
  EXPECT_EQ(registered.load(), 4);
  EXPECT_EQ(watched.load(), 4);
  for (int i = 0; i < 4; ++i) clients.push_back(testing::ConnectLoopback((*on_context)->port()));
  EXPECT_TRUE(Eventually([&] { return served.load() == 8; })) << served.load();
  EXPECT_EQ(registered.load(), 8);
  EXPECT_EQ(watched.load(), 4);
  for (const int fd : clients) ::close(fd);
  (*on_strands)->StopAccepting();
  (*on_context)->StopAccepting();
  on_strands->reset();
  on_context->reset();
  running.Stop();
}

TEST(TcpListenerTest, ABadAddressIsRefusedBeforeAnythingStarts) {
  asio::io_context io;
  ListenerOptions o;
  o.name = "test";
  o.address = "localhost:80";
  auto listener = TcpListener::Start(
      io, o, [&io] { return asio::any_io_executor(io.get_executor()); },
      [](asio::ip::tcp::socket, Connection) {});
  EXPECT_EQ(listener.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(listener.status().message(), HasSubstr("not an IP address"));
}

}  // namespace
}  // namespace drover::net

namespace drover::net {
namespace {

// The client's side of several servers of one cluster: a request goes to one that can be
// connected to, in the order given, and the next request starts where the last one landed.
TEST_F(HttpServerTest, AClientWithSeveralServersMovesPastOnesItCannotConnectTo) {
  Start({});
  const std::string dead = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  const std::string live = "http://127.0.0.1:" + std::to_string(port());
  auto client = HttpClient::Create(dead + ", " + live, "", std::chrono::seconds(2));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (int i = 0; i < 3; ++i) {
    const auto reply = client->Send("POST", "/echo", "hello");
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->status, 200);
  }
  auto none = HttpClient::Create(dead + "," + dead, "", std::chrono::seconds(2));
  ASSERT_TRUE(none.ok());
  const auto refused = none->Send("GET", "/echo");
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(HttpClient::Create(live + ",ftp://x:1", "").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpClient::Create(live + ",https://x:1", "", std::chrono::seconds(2), "ca.pem")
                .status()
                .code(),
            StatusCode::kInvalidArgument);  // a CA file with a plain http:// entry
}

}  // namespace
}  // namespace drover::net
