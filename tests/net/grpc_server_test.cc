// GrpcServer against gRPC C++'s own client over loopback: unary calls answered at once and from
// other threads, errors with their codes and messages, refusals, server streams, cancellation.
#include "net/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <vector>

#include "drover/registry/v1/registry.grpc.pb.h"
#include "testing/run_command.h"
#include "testing/temp_dir.h"

namespace drover::net {
namespace {

namespace pb = drover::registry::v1;
using namespace std::chrono_literals;

constexpr char kRegister[] = "/drover.registry.v1.Registry/Register";
constexpr char kWatch[] = "/drover.registry.v1.Registry/Watch";
constexpr char kKeepAlive[] = "/drover.registry.v1.Registry/KeepAlive";

std::string Encode(const google::protobuf::Message& m) { return m.SerializeAsString(); }

GrpcMethod Method(
    std::string path, GrpcMethod::Kind kind,
    std::function<void(const std::shared_ptr<GrpcCall>&, std::string_view)> on_request,
    std::function<void(const std::shared_ptr<GrpcCall>&)> on_half_close = nullptr) {
  GrpcMethod m;
  m.path = std::move(path);
  m.kind = kind;
  m.on_request = std::move(on_request);
  m.on_half_close = std::move(on_half_close);
  return m;
}

std::unique_ptr<GrpcServer> StartServer(std::vector<GrpcMethod> methods,
                                        GrpcServerOptions options = {}) {
  options.address = "127.0.0.1:0";
  auto server = GrpcServer::Start(std::move(options), std::move(methods));
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return std::move(*server);
}

std::unique_ptr<pb::Registry::Stub> Stub(const GrpcServer& server, int channel = 0) {
  grpc::ChannelArguments args;
  args.SetInt("drover.test.channel", channel);  // a connection of its own per number
  return pb::Registry::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials(), args));
}

pb::RegisterRequest Registration(const std::string& id) {
  pb::RegisterRequest req;
  req.set_service("zone");
  req.set_id(id);
  req.mutable_spec()->set_address("127.0.0.1:9000");
  req.mutable_spec()->set_generation(3);
  return req;
}

// Waits up to `limit` for `done()`.
template <typename F>
bool WaitFor(F done, std::chrono::milliseconds limit = 5000ms) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// The last call a handler kept, for the test's thread to take once it is there.
class CallCatcher {
 public:
  void Keep(const std::shared_ptr<GrpcCall>& call) {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = call;
  }
  // The call, once a handler kept one (null after 5 s).
  std::shared_ptr<GrpcCall> Wait() {
    std::shared_ptr<GrpcCall> call;
    WaitFor([&] {
      std::lock_guard<std::mutex> lock(mu_);
      call = call_;
      return call != nullptr;
    });
    return call;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<GrpcCall> call_;
};

TEST(GrpcServerTest, AUnaryCallIsAnsweredWithTheRequestAndItsMetadataSeen) {
  std::string seen_id, seen_token;
  auto server = StartServer(
      {Method(kRegister, GrpcMethod::Kind::kUnary,
              [&](const std::shared_ptr<GrpcCall>& call, std::string_view request) {
                pb::RegisterRequest req;
                ASSERT_TRUE(req.ParseFromArray(request.data(), static_cast<int>(request.size())));
                seen_id = req.id();
                seen_token = std::string(call->Metadata("authorization"));
                pb::RevisionReply reply;
                reply.set_revision(7);
                call->Reply(Encode(reply));
              })});
  auto stub = Stub(*server);
  for (int i = 0; i < 3; ++i) {  // one connection, several calls
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer secret-" + std::to_string(i));
    pb::RevisionReply reply;
    const grpc::Status s = stub->Register(&ctx, Registration("z" + std::to_string(i)), &reply);
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    EXPECT_EQ(reply.revision(), 7u);
    EXPECT_EQ(seen_id, "z" + std::to_string(i));
    EXPECT_EQ(seen_token, "Bearer secret-" + std::to_string(i));
  }
}

// A store's writer answers later, from its own thread, many calls at a time.
TEST(GrpcServerTest, CallsAreAnsweredFromAnotherThreadInBatches) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<GrpcCall>> waiting;
  std::atomic<bool> stop{false};
  auto server = StartServer({Method(kRegister, GrpcMethod::Kind::kUnary,
                                    [&](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                                      std::lock_guard<std::mutex> lock(mu);
                                      waiting.push_back(call);
                                      cv.notify_one();
                                    })});
  std::thread writer([&] {
    std::uint64_t revision = 0;
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, 5ms);
      std::vector<std::shared_ptr<GrpcCall>> group;
      group.swap(waiting);
      lock.unlock();
      for (auto& call : group) {
        pb::RevisionReply reply;
        reply.set_revision(++revision);
        call->Reply(Encode(reply));
      }
      lock.lock();
    }
  });
  std::vector<std::unique_ptr<pb::Registry::Stub>> stubs;
  for (int c = 0; c < 4; ++c) stubs.push_back(Stub(*server, c));
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 10s);
        pb::RevisionReply reply;
        const auto s = stubs[t % 4]->Register(&ctx, Registration("i"), &reply);
        (s.ok() && reply.revision() > 0 ? ok : failed)++;
      }
    });
  }
  for (auto& c : clients) c.join();
  stop = true;
  writer.join();
  EXPECT_EQ(ok.load(), 16 * 50);
  EXPECT_EQ(failed.load(), 0);
}

TEST(GrpcServerTest, AnErrorCarriesItsCodeAndItsMessageWhole) {
  const std::string text = "no instance \"z1\" in zone-\xc3\xa9 (100% gone)\n";
  auto server = StartServer({Method(kRegister, GrpcMethod::Kind::kUnary,
                                    [&](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                                      call->Finish(Status(StatusCode::kNotFound, text));
                                    })});
  auto stub = Stub(*server);
  grpc::ClientContext ctx;
  pb::RevisionReply reply;
  const grpc::Status s = stub->Register(&ctx, Registration("z1"), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), text);
}

TEST(GrpcServerTest, AnUnknownMethodIsUnimplementedAndTheConnectionGoesOn) {
  auto server = StartServer({Method(kRegister, GrpcMethod::Kind::kUnary,
                                    [](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                                      call->Reply(Encode(pb::RevisionReply()));
                                    })});
  auto stub = Stub(*server);
  {
    grpc::ClientContext ctx;
    pb::ListReply reply;
    const grpc::Status s = stub->List(&ctx, pb::ListRequest(), &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_NE(s.error_message().find("Registry/List"), std::string::npos) << s.error_message();
  }
  grpc::ClientContext ctx;
  pb::RevisionReply reply;
  EXPECT_TRUE(stub->Register(&ctx, Registration("z"), &reply).ok());
}

TEST(GrpcServerTest, ARequestOverTheLimitIsRefusedWithResourceExhausted) {
  std::atomic<int> handled{0};
  GrpcServerOptions options;
  options.max_receive_message_bytes = 1024;
  auto server = StartServer({Method(kRegister, GrpcMethod::Kind::kUnary,
                                    [&](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                                      ++handled;
                                      call->Reply(Encode(pb::RevisionReply()));
                                    })},
                            options);
  auto stub = Stub(*server);
  pb::RegisterRequest big = Registration("big");
  (*big.mutable_spec()->mutable_labels())["blob"] = std::string(100'000, 'x');
  grpc::ClientContext ctx;
  pb::RevisionReply reply;
  const grpc::Status refused = stub->Register(&ctx, big, &reply);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_EQ(handled.load(), 0);
  grpc::ClientContext again;
  EXPECT_TRUE(stub->Register(&again, Registration("small"), &reply).ok());
  EXPECT_EQ(handled.load(), 1);
}

TEST(GrpcServerTest, AStreamGetsItsMessagesInOrderThenItsEnd) {
  CallCatcher caught;
  auto server = StartServer({Method(
      kWatch, GrpcMethod::Kind::kServerStreaming,
      [&](const std::shared_ptr<GrpcCall>& call, std::string_view) { caught.Keep(call); })});
  auto stub = Stub(*server);
  grpc::ClientContext ctx;
  auto reader = stub->Watch(&ctx, pb::WatchRequest());
  const std::shared_ptr<GrpcCall> stream = caught.Wait();
  ASSERT_NE(stream, nullptr);
  std::thread writer([&] {
    for (std::uint64_t r = 1; r <= 50; ++r) {
      pb::Event event;
      event.set_revision(r);
      stream->Write(std::make_shared<const std::string>(Encode(event)));
    }
    stream->Finish(Status());
  });
  pb::Event event;
  std::uint64_t expected = 1;
  while (reader->Read(&event)) EXPECT_EQ(event.revision(), expected++);
  writer.join();
  EXPECT_EQ(expected, 51u);
  EXPECT_TRUE(reader->Finish().ok());
}

TEST(GrpcServerTest, AClientThatCancelsIsSeenAndLaterWritesGoNowhere) {
  CallCatcher caught;
  std::atomic<bool> cancelled{false};
  auto server = StartServer({Method(kWatch, GrpcMethod::Kind::kServerStreaming,
                                    [&](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                                      call->OnCancel([&] { cancelled = true; });
                                      caught.Keep(call);
                                    })});
  auto stub = Stub(*server);
  grpc::ClientContext ctx;
  auto reader = stub->Watch(&ctx, pb::WatchRequest());
  const std::shared_ptr<GrpcCall> stream = caught.Wait();
  ASSERT_NE(stream, nullptr);
  pb::Event event;
  event.set_revision(1);
  stream->Write(std::make_shared<const std::string>(Encode(event)));
  ASSERT_TRUE(reader->Read(&event));
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return cancelled.load(); }));
  stream->Write(std::make_shared<const std::string>(Encode(event)));  // goes nowhere
  EXPECT_EQ(stream->queued(), 0u);
}

TEST(GrpcServerTest, StoppingEndsOpenStreamsAndTheirClientsSeeIt) {
  std::atomic<int> opened{0};
  std::vector<std::shared_ptr<GrpcCall>> calls;
  std::mutex mu;
  auto server = StartServer({Method(kWatch, GrpcMethod::Kind::kServerStreaming,
                                    [&](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                                      std::lock_guard<std::mutex> lock(mu);
                                      calls.push_back(call);
                                      ++opened;
                                    })});
  auto stub = Stub(*server);
  grpc::ClientContext ctx;
  auto reader = stub->Watch(&ctx, pb::WatchRequest());
  ASSERT_TRUE(WaitFor([&] { return opened.load() == 1; }));
  server->Stop(0ms);
  pb::Event event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

// A watch's shape: the headers (with metadata) at once, then a producer woken from any thread
// that takes what there is on the connection's thread, holding back while the client's flow
// control holds its bytes, and resuming once they drain.
TEST(GrpcServerTest, AProducerWokenFromAnyThreadWritesAtItsClientsPace) {
  struct Source {
    std::mutex mu;
    std::uint64_t produced = 0;  // revisions 1..produced exist
    std::uint64_t taken = 0;     // the stream's own (connection's thread)
    std::shared_ptr<GrpcCall> call;
  };
  auto source = std::make_shared<Source>();
  std::atomic<int> held_back{0};
  const std::string padding(16 * 1024, 'p');
  auto server = StartServer(
      {Method(kWatch, GrpcMethod::Kind::kServerStreaming,
              [&](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                call->SendHeaders({{"drover-watch-accepted", "41"}});
                std::weak_ptr<GrpcCall> weak = call;
                call->OnWake([&, weak] {
                  auto self = weak.lock();
                  if (!self) return;
                  std::uint64_t produced;
                  {
                    std::lock_guard<std::mutex> lock(source->mu);
                    produced = source->produced;
                  }
                  while (source->taken < produced) {
                    if (self->backlog_bytes() > 256 * 1024) {  // the client is behind: wait for it
                      ++held_back;
                      self->WakeWhenDrained();
                      return;
                    }
                    pb::Event event;
                    event.set_revision(++source->taken);
                    event.set_reason(padding);
                    self->Write(std::make_shared<const std::string>(Encode(event)));
                  }
                });
                std::lock_guard<std::mutex> lock(source->mu);
                source->call = call;
              })});
  auto stub = Stub(*server);
  grpc::ClientContext ctx;
  auto reader = stub->Watch(&ctx, pb::WatchRequest());
  reader->WaitForInitialMetadata();
  const auto& metadata = ctx.GetServerInitialMetadata();
  const auto accepted = metadata.find("drover-watch-accepted");
  ASSERT_NE(accepted, metadata.end());
  EXPECT_EQ(std::string(accepted->second.data(), accepted->second.size()), "41");
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(source->mu);
    return source->call != nullptr;
  }));
  // 2,000 events of 16 KiB (32 MiB) from another thread, many wake-ups; the client reads slowly
  // at first, so the stream holds back and resumes.
  std::thread producer([&] {
    for (int i = 0; i < 2000; ++i) {
      {
        std::lock_guard<std::mutex> lock(source->mu);
        ++source->produced;
      }
      source->call->Notify();
    }
  });
  pb::Event event;
  for (std::uint64_t expected = 1; expected <= 2000; ++expected) {
    ASSERT_TRUE(reader->Read(&event)) << "at " << expected;
    ASSERT_EQ(event.revision(), expected);
    if (expected < 20) std::this_thread::sleep_for(10ms);
  }
  producer.join();
  EXPECT_GT(held_back.load(), 0);
  source->call->Finish(Status());
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_TRUE(reader->Finish().ok());
}

// KeepAlive's shape: each client message answered as it comes, the end of the client's side
// seen, then the call finished.
TEST(GrpcServerTest, ABidirectionalStreamAnswersEachMessageAndSeesTheClientsEnd) {
  std::atomic<bool> half_closed{false};
  auto server = StartServer({Method(
      kKeepAlive, GrpcMethod::Kind::kBidiStreaming,
      [](const std::shared_ptr<GrpcCall>& call, std::string_view request) {
        pb::KeepAliveRequest req;
        ASSERT_TRUE(req.ParseFromArray(request.data(), static_cast<int>(request.size())));
        pb::KeepAliveReply reply;
        reply.set_revision(static_cast<std::uint64_t>(req.heartbeats_size()));
        call->Write(std::make_shared<const std::string>(Encode(reply)));
      },
      [&](const std::shared_ptr<GrpcCall>& call) {
        half_closed = true;
        call->Finish(Status());
      })});
  auto stub = Stub(*server);
  grpc::ClientContext ctx;
  auto stream = stub->KeepAlive(&ctx);
  for (int n = 1; n <= 20; ++n) {
    pb::KeepAliveRequest req;
    for (int i = 0; i < n; ++i) req.add_heartbeats()->set_service("zone");
    ASSERT_TRUE(stream->Write(req));
    pb::KeepAliveReply reply;
    ASSERT_TRUE(stream->Read(&reply));
    EXPECT_EQ(reply.revision(), static_cast<std::uint64_t>(n));
  }
  // Several messages in one go, then the end of the client's side.
  for (int n = 1; n <= 5; ++n) {
    pb::KeepAliveRequest req;
    req.add_heartbeats();
    ASSERT_TRUE(stream->Write(req));
  }
  ASSERT_TRUE(stream->WritesDone());
  pb::KeepAliveReply reply;
  int replies = 0;
  while (stream->Read(&reply)) ++replies;
  EXPECT_EQ(replies, 5);
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(half_closed.load());
}

TEST(GrpcServerTest, OverTlsWithAlpnH2AGrpcClientThatTrustsTheCertificateIsServed) {
  testing::TempDir dir;
  const std::string cert = dir.path() + "/cert.pem";
  const std::string key = dir.path() + "/key.pem";
  // A throwaway self-signed certificate for 127.0.0.1, valid for a day.
  const auto made = testing::RunCommand(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
      key + " -out " + cert);
  ASSERT_EQ(made.exit_code, 0) << made.out;
  GrpcServerOptions options;
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  auto server = StartServer({Method(kRegister, GrpcMethod::Kind::kUnary,
                                    [](const std::shared_ptr<GrpcCall>& call, std::string_view) {
                                      pb::RevisionReply reply;
                                      reply.set_revision(11);
                                      call->Reply(Encode(reply));
                                    })},
                            options);
  const std::string target = "127.0.0.1:" + std::to_string(server->port());
  grpc::SslCredentialsOptions ssl;
  std::ifstream in(cert);
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  auto stub = pb::Registry::NewStub(grpc::CreateChannel(target, grpc::SslCredentials(ssl)));
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    pb::RevisionReply reply;
    const grpc::Status s = stub->Register(&ctx, Registration("t"), &reply);
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    EXPECT_EQ(reply.revision(), 11u);
  }
  // A plaintext client gets nothing, and the server goes on.
  auto plain =
      pb::Registry::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 2s);
  pb::RevisionReply reply;
  EXPECT_FALSE(plain->Register(&ctx, Registration("p"), &reply).ok());
  grpc::ClientContext again;
  again.set_deadline(std::chrono::system_clock::now() + 10s);
  const grpc::Status after = stub->Register(&again, Registration("t"), &reply);
  EXPECT_TRUE(after.ok()) << after.error_code() << " " << after.error_message();

  // Files that cannot be used are refused by name.
  GrpcServerOptions bad;
  bad.address = "127.0.0.1:0";
  bad.tls_cert_file = dir.path() + "/missing.pem";
  bad.tls_key_file = key;
  auto refused = GrpcServer::Start(bad, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("missing.pem"), std::string::npos)
      << refused.status().ToString();
}

}  // namespace
}  // namespace drover::net
