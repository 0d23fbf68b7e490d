// GrpcServer against clients that abuse HTTP/2: a header block that decompresses to hundreds of
// megabytes, requests that never end on thousands of streams, streams opened and reset in a tight
// loop, a header block continued without end, a connection that never says anything, one that
// stops reading its answers. Each is written by libnghttp2's own client session (it keeps HTTP/2's
// flow control, so only the abuse differs from a real client's bytes) over a real loopback
// socket. The server must refuse or cut off the abuser, keep its memory bounded and go on serving
// a well-behaved gRPC client meanwhile.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/procfs.h"
#include "drover/registry/v1/registry.grpc.pb.h"
#include "net/grpc_server.h"
#include "testing/eventually.h"
#include "testing/http_client.h"
#include "testing/sanitizers.h"

namespace drover::net {
namespace {

namespace pb = drover::registry::v1;
using namespace std::chrono_literals;

constexpr char kRegister[] = "/drover.registry.v1.Registry/Register";
constexpr char kFlood[] = "/drover.test.Flood/Flood";  // a stream of Served::kFloodMessages MiB

// The process's resident set (the server runs in this process), and its peak since the last
// ResetPeakRss: what a flood made the server hold, even if freed since.
std::int64_t StatusBytes(std::string_view field) {
  return static_cast<std::int64_t>(procfs::StatusField(::getpid(), field).value_or(0)) * 1024;
}
// Returns the resident set now, and makes it the peak from which PeakRssGrowth counts.
std::int64_t ResetPeakRss() {
  std::ofstream("/proc/self/clear_refs") << "5";
  return StatusBytes("VmRSS");
}
std::int64_t PeakRssGrowth(std::int64_t from) { return StatusBytes("VmHWM") - from; }

// Bounds on the resident set are checked only on the allocator the server runs on in production.
constexpr bool kRssTellsTheServersMemory = !testing::kSanitizerAllocator;

// An HTTP/2 client over a blocking loopback socket, driven by hand: requests with any headers,
// bodies that end or stay open, resets; it records what the server answers per stream and
// whether the server said GOAWAY or closed the connection.
class H2Client {
 public:
  using Header = std::pair<std::string_view, std::string_view>;
  struct Stream {
    std::string grpc_status;  // from the response's headers or trailers; empty: none yet
    bool closed = false;
    std::uint32_t reset_code = 0;  // the RST_STREAM's, when the server reset it
  };

  // `max_header_block`: the largest header block the client will send (nghttp2's own default
  // is 64 KiB; the abuse needs more).
  explicit H2Client(std::uint16_t port, std::size_t max_header_block = 64 * 1024) {
    fd_ = testing::ConnectLoopback(port);
    nghttp2_session_callbacks* callbacks = nullptr;
    nghttp2_session_callbacks_new(&callbacks);
    nghttp2_session_callbacks_set_on_header_callback(callbacks, &OnHeader);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &OnStreamClose);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &OnFrameRecv);
    nghttp2_option* option = nullptr;
    nghttp2_option_new(&option);
    nghttp2_option_set_max_send_header_block_length(option, max_header_block);
    nghttp2_session_client_new2(&session_, callbacks, this, option);
    nghttp2_option_del(option);
    nghttp2_session_callbacks_del(callbacks);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~H2Client() {
    nghttp2_session_del(session_);
    if (fd_ >= 0) ::close(fd_);
  }
  H2Client(const H2Client&) = delete;
  H2Client& operator=(const H2Client&) = delete;

  // A gRPC POST to `path` with `headers` added (not copied: they must stay until sent); `body`
  // is sent, then the stream's end when `end`.
  std::int32_t Request(const std::string& path, const std::vector<Header>& headers,
                       std::string body, bool end) {
    return Request(path, headers, std::make_shared<const std::string>(std::move(body)), end);
  }
  // The same with a body shared between requests.
  std::int32_t Request(const std::string& path, const std::vector<Header>& headers,
                       std::shared_ptr<const std::string> body, bool end) {
    std::vector<nghttp2_nv> nva{Nv(":method", "POST", true),
                                Nv(":scheme", "http", true),
                                Nv(":authority", "localhost", true),
                                Nv(":path", path, true),
                                Nv("content-type", "application/grpc", true),
                                Nv("te", "trailers", true)};
    for (const auto& [name, value] : headers) nva.push_back(Nv(name, value, false));
    auto body_state = std::make_unique<Body>(Body{std::move(body), 0, end});
    nghttp2_data_provider provider{};
    provider.source.ptr = body_state.get();
    provider.read_callback = &ReadBody;
    const std::int32_t id =
        nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &provider, nullptr);
    if (id > 0) bodies_.emplace(id, std::move(body_state));
    return id;
  }

  // HTTP/2's flow control out of the way (windows of 2 GiB): what holds the server's answers
  // back is then only the client's reading of its socket, whose receive buffer is held at 256 KB
  // (the kernel's autotuning may grow one to 32 MB, the size of the floods here). Before the
  // first request.
  void OpenWindows() {
    const int buffer = 256 * 1024;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
    constexpr std::int32_t kWindow = INT32_MAX;
    const nghttp2_settings_entry window{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kWindow};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, &window, 1);
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kWindow);
  }

  void Reset(std::int32_t stream) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, NGHTTP2_CANCEL);
  }

  // Sends what is pending and reads answers until `done()` holds, the connection ends or
  // `timeout` passes; false unless `done()` held.
  template <typename F>
  bool Pump(F done, std::chrono::milliseconds timeout = 5000ms) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (ended_ || std::chrono::steady_clock::now() > until) return false;
      if (!Send()) ended_ = true;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      std::uint8_t buffer[64 * 1024];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0 || nghttp2_session_mem_recv(session_, buffer, static_cast<std::size_t>(n)) < 0) {
        ended_ = true;
      } else {
        received_ += static_cast<std::size_t>(n);
      }
    }
    return true;
  }
  // Sends what is pending; false once the connection is gone.
  bool Send() {
    while (true) {
      const std::uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) return false;
      if (n == 0) return true;
      ssize_t at = 0;
      while (at < n) {
        const ssize_t sent = ::send(fd_, data + at, static_cast<std::size_t>(n - at), MSG_NOSIGNAL);
        if (sent <= 0) return false;
        at += sent;
      }
    }
  }

  const Stream& stream(std::int32_t id) { return streams_[id]; }
  bool goaway() const { return goaway_; }
  std::uint32_t goaway_code() const { return goaway_code_; }
  // The server closed the connection (or it failed).
  bool ended() const { return ended_; }
  // Bytes read from the connection so far.
  std::size_t received() const { return received_; }

 private:
  struct Body {
    std::shared_ptr<const std::string> bytes;
    std::size_t sent;
    bool end;
  };

  static nghttp2_nv Nv(std::string_view name, std::string_view value, bool copy) {
    return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                      value.size(),
                      static_cast<std::uint8_t>(copy ? NGHTTP2_NV_FLAG_NONE
                                                     : NGHTTP2_NV_FLAG_NO_COPY_NAME |
                                                           NGHTTP2_NV_FLAG_NO_COPY_VALUE)};
  }

  static ssize_t ReadBody(nghttp2_session*, std::int32_t, std::uint8_t* buffer, std::size_t length,
                          std::uint32_t* flags, nghttp2_data_source* source, void*) {
    auto& body = *static_cast<Body*>(source->ptr);
    const std::string& bytes = *body.bytes;
    const std::size_t n = std::min(length, bytes.size() - body.sent);
    std::memcpy(buffer, bytes.data() + body.sent, n);
    body.sent += n;
    if (body.sent == bytes.size()) {
      if (body.end) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
      } else if (n == 0) {
        return NGHTTP2_ERR_DEFERRED;  // the request stays open
      }
    }
    return static_cast<ssize_t>(n);
  }

  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                      std::size_t name_length, const std::uint8_t* value, std::size_t value_length,
                      std::uint8_t, void* user) {
    if (std::string_view(reinterpret_cast<const char*>(name), name_length) == "grpc-status") {
      static_cast<H2Client*>(user)->streams_[frame->hd.stream_id].grpc_status.assign(
          reinterpret_cast<const char*>(value), value_length);
    }
    return 0;
  }

  static int OnStreamClose(nghttp2_session*, std::int32_t stream, std::uint32_t code, void* user) {
    auto& s = static_cast<H2Client*>(user)->streams_[stream];
    s.closed = true;
    s.reset_code = code;
    return 0;
  }

  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type == NGHTTP2_GOAWAY) {
      auto* self = static_cast<H2Client*>(user);
      self->goaway_ = true;
      self->goaway_code_ = frame->goaway.error_code;
    }
    return 0;
  }

  int fd_ = -1;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, std::unique_ptr<Body>> bodies_;
  std::map<std::int32_t, Stream> streams_;
  bool goaway_ = false;
  std::uint32_t goaway_code_ = 0;
  bool ended_ = false;
  std::size_t received_ = 0;
};

// A gRPC message's framing: the uncompressed flag and the length, then the bytes.
std::string Framed(const std::string& message, std::size_t claimed_length = 0) {
  const std::uint32_t length =
      static_cast<std::uint32_t>(claimed_length != 0 ? claimed_length : message.size());
  std::string out(5, '\0');
  out[1] = static_cast<char>(length >> 24);
  out[2] = static_cast<char>(length >> 16);
  out[3] = static_cast<char>(length >> 8);
  out[4] = static_cast<char>(length);
  return out + message;
}

// The server under abuse: Register answers at once; `handled` counts the requests it saw. Flood
// answers with kFloodMessages messages of 1 MiB, all written at once, then OK.
struct Served {
  static constexpr int kFloodMessages = 32;
  std::atomic<int> handled{0};
  std::unique_ptr<GrpcServer> server;

  explicit Served(GrpcServerOptions options = {}) {
    GrpcMethod m;
    m.path = kRegister;
    m.on_request = [this](const std::shared_ptr<GrpcCall>& call, std::string_view) {
      handled.fetch_add(1);
      pb::RevisionReply reply;
      reply.set_revision(1);
      call->Reply(reply.SerializeAsString());
    };
    GrpcMethod flood;
    flood.path = kFlood;
    flood.kind = GrpcMethod::Kind::kServerStreaming;
    flood.on_request = [](const std::shared_ptr<GrpcCall>& call, std::string_view) {
      const auto mib = std::make_shared<const std::string>(std::size_t{1} << 20, 'f');
      for (int i = 0; i < kFloodMessages; ++i) call->Write(mib);
      call->Finish(Status());
    };
    options.address = "127.0.0.1:0";
    options.threads = 1;
    auto started = GrpcServer::Start(std::move(options), {std::move(m), std::move(flood)});
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(*started);
  }

  // A well-behaved gRPC C++ client on a connection of its own is served.
  bool ServesAGrpcClient() const {
    auto stub = pb::Registry::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    pb::RegisterRequest req;
    req.set_service("zone");
    req.set_id("well-behaved");
    pb::RevisionReply reply;
    return stub->Register(&ctx, req, &reply).ok() && reply.revision() == 1;
  }
};

// One literal header of 3 KB, then that same header again and again: each repeat is one byte on
// the wire (an index into HPACK's dynamic table), and 3 KB once decoded -- a 60 KB header block
// (four frames) is 180 MB of metadata. The call is refused (RESOURCE_EXHAUSTED) without keeping
// it, and the connection goes on.
TEST(GrpcServerLimitsTest, AHeaderBlockThatDecompressesHugeIsRefusedAndNotKept) {
  Served served;
  const std::int64_t rss_before = ResetPeakRss();
  // libnghttp2 bounds a header block by its size before compression (180 MB here).
  H2Client client(served.server->port(), std::size_t{1} << 30);
  // Its encoder indexes a header only up to 3/4 of the table's 4 KB.
  const std::string big(3'000, 'x');
  const std::vector<H2Client::Header> headers(60'000, {"x-bomb", big});
  const std::int32_t id = client.Request(kRegister, headers, Framed("req"), true);
  ASSERT_GT(id, 0);
  ASSERT_TRUE(client.Pump([&] { return client.stream(id).closed; }))
      << "no answer on the stream; GOAWAY " << client.goaway() << ", connection ended "
      << client.ended();
  EXPECT_EQ(client.stream(id).grpc_status, std::to_string(int(StatusCode::kResourceExhausted)))
      << "stream reset with " << client.stream(id).reset_code;
  EXPECT_EQ(served.handled.load(), 0);
  if (kRssTellsTheServersMemory) {
    EXPECT_LT(PeakRssGrowth(rss_before), 32 << 20)
        << "the decoded headers were not kept (205 MB when they were)";
  }
  // The connection goes on: a normal call on it is answered.
  const std::int32_t next = client.Request(kRegister, {}, Framed(""), true);
  ASSERT_TRUE(client.Pump([&] { return client.stream(next).closed; }));
  EXPECT_EQ(client.stream(next).grpc_status, "0");
  EXPECT_TRUE(served.ServesAGrpcClient());
}

// Metadata a little over the limit (many small headers, nothing compressed away) is refused the
// same way, and metadata just under it is served.
TEST(GrpcServerLimitsTest, MetadataOverTheLimitIsRefusedAndUnderItServed) {
  GrpcServerOptions options;
  options.max_metadata_bytes = 4 * 1024;
  Served served(options);
  H2Client client(served.server->port());
  std::vector<std::string> names;
  for (int i = 0; i < 80; ++i) names.push_back("x-h" + std::to_string(i));
  const std::string value(32, 'v');
  auto headers_of = [&](int count) {
    std::vector<H2Client::Header> h;
    for (int i = 0; i < count; ++i) h.emplace_back(names[static_cast<std::size_t>(i)], value);
    return h;
  };
  // Each counts as name + value + 32 bytes (HTTP/2's measure): ~70 bytes.
  const auto under = headers_of(40);
  const auto over = headers_of(80);
  const std::int32_t small = client.Request(kRegister, under, Framed(""), true);
  const std::int32_t large = client.Request(kRegister, over, Framed(""), true);
  ASSERT_TRUE(
      client.Pump([&] { return client.stream(small).closed && client.stream(large).closed; }));
  EXPECT_EQ(client.stream(small).grpc_status, "0");
  EXPECT_EQ(client.stream(large).grpc_status, std::to_string(int(StatusCode::kResourceExhausted)));
  EXPECT_EQ(served.handled.load(), 1);
}

// Requests that never end, on many streams of one connection: each holds what it sent (up to
// the message limit) until it ends. Past the connection's bound the next stream to send is
// refused, so a client cannot make the server hold 10,000 streams' worth of 4 MiB requests.
TEST(GrpcServerLimitsTest, UnfinishedRequestsOfAConnectionAreBoundedInBytes) {
  GrpcServerOptions options;
  options.max_connection_buffered_bytes = 8 << 20;
  Served served(options);
  const std::int64_t rss_before = ResetPeakRss();
  H2Client client(served.server->port());
  // 1 MiB of a message that claims 4 MiB, on each of 32 streams (the client shares one copy).
  const auto part = std::make_shared<const std::string>(Framed(std::string(1 << 20, 'p'), 4 << 20));
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(client.Request(kRegister, {}, part, false));
  int refused = 0;
  client.Pump(
      [&] {
        refused = 0;
        for (const std::int32_t id : ids) {
          refused +=
              client.stream(id).grpc_status == std::to_string(int(StatusCode::kResourceExhausted));
        }
        return refused >= 24;
      },
      10s);
  EXPECT_GE(refused, 24) << "8 MiB hold 8 of the 32 requests at most";
  EXPECT_LE(refused, 25);
  EXPECT_FALSE(client.ended()) << "the connection itself goes on";
  EXPECT_EQ(served.handled.load(), 0);
  if (kRssTellsTheServersMemory) {
    EXPECT_LT(PeakRssGrowth(rss_before), 32 << 20)
        << "8 MiB held (in buffers of up to twice that); 57 MB without the bound";
  }
  EXPECT_TRUE(served.ServesAGrpcClient());
  // The held requests are let go when their streams end: the connection serves again.
  for (const std::int32_t id : ids) client.Reset(id);
  const std::int32_t next = client.Request(kRegister, {}, Framed(""), true);
  ASSERT_TRUE(client.Pump([&] { return client.stream(next).closed; }));
  EXPECT_EQ(client.stream(next).grpc_status, "0");
}

// "Rapid reset" (CVE-2023-44487): streams opened and reset at once, in a loop, cost the server
// work the client never waits for. libnghttp2 (Debian 12's build carries the fix) cuts such a
// connection off with a GOAWAY once its resets pass a rate; others are served meanwhile.
TEST(GrpcServerLimitsTest, AClientResettingStreamsInALoopIsCutOff) {
  Served served;
  H2Client client(served.server->port());
  int opened = 0;
  for (; opened < 20'000 && !client.ended() && !client.goaway(); ++opened) {
    const std::int32_t id = client.Request(kRegister, {}, Framed(""), false);
    // Sent before the reset: libnghttp2 drops both a request and its reset when the request is
    // still unsent.
    if (id <= 0 || !client.Send()) break;
    client.Reset(id);
    if (opened % 100 == 99) client.Pump([] { return false; }, 1ms);
  }
  client.Pump([&] { return client.goaway() && client.ended(); }, 5s);
  EXPECT_TRUE(client.goaway()) << "after " << opened << " streams opened and reset";
  EXPECT_LT(opened, 20'000);
  EXPECT_EQ(served.handled.load(), 0);
  EXPECT_TRUE(served.ServesAGrpcClient());
}

// A header block continued frame after frame (CVE-2024-28182: each CONTINUATION is decoded
// before the block ends): the connection is cut off after a few, not read to its end.
TEST(GrpcServerLimitsTest, AHeaderBlockContinuedWithoutEndIsCutOff) {
  Served served;
  const std::int64_t rss_before = ResetPeakRss();
  H2Client client(served.server->port(), 8 << 20);
  // 2,000 headers of 1 KB that HPACK cannot shorten: ~2 MB, over a hundred CONTINUATION frames.
  std::vector<std::string> storage;
  for (int i = 0; i < 2'000; ++i) {
    storage.push_back("x-c" + std::to_string(i));
    storage.emplace_back(1'000, static_cast<char>('a' + i % 26));
  }
  std::vector<H2Client::Header> headers;
  for (std::size_t i = 0; i < storage.size(); i += 2)
    headers.emplace_back(storage[i], storage[i + 1]);
  const std::int32_t id = client.Request(kRegister, headers, Framed(""), true);
  ASSERT_GT(id, 0);
  client.Pump([&] { return client.ended(); }, 5s);
  EXPECT_TRUE(client.goaway() || client.ended());
  EXPECT_TRUE(client.ended()) << "the server closed the connection";
  EXPECT_EQ(served.handled.load(), 0);
  if (kRssTellsTheServersMemory) {
    EXPECT_LT(PeakRssGrowth(rss_before), 32 << 20);
  }
  EXPECT_TRUE(served.ServesAGrpcClient());
}

// A client that connects and says nothing (no HTTP/2 preface) is closed once the handshake time
// passes; one that sent its preface keeps its connection past it.
TEST(GrpcServerLimitsTest, AConnectionThatSaysNothingIsClosedAfterTheHandshakeTimeout) {
  GrpcServerOptions options;
  options.handshake_timeout = 300ms;
  Served served(options);
  const auto start = std::chrono::steady_clock::now();
  const int silent = testing::ConnectLoopback(served.server->port());
  ASSERT_GE(silent, 0);
  H2Client talking(served.server->port());
  ASSERT_TRUE(talking.Send());
  // The server's own SETTINGS come at once; then, at the deadline, its end of the connection.
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() - start < 5s) {
    pollfd p{silent, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buffer[256];
    closed = ::recv(silent, buffer, sizeof buffer, 0) <= 0;
  }
  const auto after = std::chrono::steady_clock::now() - start;
  ::close(silent);
  EXPECT_TRUE(closed);
  EXPECT_GE(after, 250ms);
  EXPECT_FALSE(talking.Pump([] { return false; }, 500ms) || talking.ended())
      << "a connection that sent its preface stays";
  const std::int32_t id = talking.Request(kRegister, {}, Framed(""), true);
  ASSERT_TRUE(talking.Pump([&] { return talking.stream(id).closed; }));
  EXPECT_EQ(talking.stream(id).grpc_status, "0");
}

// A server whose write timeout is 500 ms, and a client that asked it for a flood (32 MiB) over
// wide-open HTTP/2 windows, on stream `id`.
struct FloodAsked {
  static GrpcServerOptions WriteTimeout() {
    GrpcServerOptions options;
    options.write_timeout = 500ms;
    return options;
  }
  Served served{WriteTimeout()};
  H2Client client{served.server->port()};
  std::int32_t id = 0;

  FloodAsked() {
    client.OpenWindows();
    id = client.Request(kFlood, {}, Framed(""), true);
  }
  // The server's open connections.
  std::uint64_t Open() const { return served.server->counters().active.load(); }
};

// A client that asks for 32 MiB and then reads nothing: once the socket's buffers are full and
// nothing has gone for the write timeout, the server closes the connection (the call cancelled)
// and goes on serving others.
TEST(GrpcServerLimitsTest, AClientThatStopsReadingIsCutOffAfterTheWriteTimeout) {
  FloodAsked asked;
  ASSERT_GT(asked.id, 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(asked.client.Send());
  ASSERT_TRUE(testing::Eventually([&] { return asked.Open() == 1; }));
  ASSERT_TRUE(testing::Eventually([&] { return asked.Open() == 0; }, 10s))
      << "the connection of a client reading nothing stayed open";
  EXPECT_GE(std::chrono::steady_clock::now() - start, 450ms);
  // What the kernel held is read, then the connection's end: the answer never finished.
  EXPECT_FALSE(asked.client.Pump([&] { return asked.client.stream(asked.id).closed; }, 10s));
  EXPECT_TRUE(asked.client.ended());
  EXPECT_LT(asked.client.received(), std::size_t{Served::kFloodMessages} << 20);
  EXPECT_TRUE(asked.served.ServesAGrpcClient());
}

// A slow reader is not cut off: with pauses shorter than the write timeout between its reads --
// 1.2 s of them in all, past the timeout -- the whole answer arrives and the call ends OK.
TEST(GrpcServerLimitsTest, AClientReadingWithPausesShorterThanTheWriteTimeoutIsServedToTheEnd) {
  FloodAsked asked;
  ASSERT_GT(asked.id, 0);
  ASSERT_TRUE(asked.client.Send());
  for (std::size_t pause = 1; pause <= 8; ++pause) {
    std::this_thread::sleep_for(150ms);  // the server's socket stays full meanwhile
    ASSERT_TRUE(asked.client.Pump([&] {
      return asked.client.received() >= pause * (std::size_t{2} << 20);
    })) << "pause "
        << pause << ": the connection ended";
  }
  ASSERT_TRUE(asked.client.Pump([&] { return asked.client.stream(asked.id).closed; }, 10s));
  EXPECT_EQ(asked.client.stream(asked.id).grpc_status, "0");
  EXPECT_GE(asked.client.received(), std::size_t{Served::kFloodMessages} << 20);
  EXPECT_EQ(asked.Open(), 1u) << "the connection stays";
}

}  // namespace
}  // namespace drover::net
