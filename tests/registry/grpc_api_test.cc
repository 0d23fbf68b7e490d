#include "registry/grpc_api.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "drover/registry/v1/registry.grpc.pb.h"
#include "registry/auth.h"
#include "registry/registry.h"
#include "registry/sqlite_store.h"
#include "testing/temp_dir.h"

namespace drover::registry {
namespace {

namespace pb = ::drover::registry::v1;
using namespace std::chrono_literals;

class GrpcApiTest : public ::testing::Test {
 protected:
  void Start(std::shared_ptr<const Authorizer> auth = nullptr) {
    auto store = SqliteStore::Open(dir_.path());
    ASSERT_TRUE(store.ok());
    registry_ = Registry::Open(std::move(*store), clock_).value();
    GrpcOptions options;
    options.auth = std::move(auth);
    auto server = GrpcServer::Start(*registry_, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = pb::Registry::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  static pb::RegisterRequest Register(const std::string& service, const std::string& id,
                                      std::uint64_t generation) {
    pb::RegisterRequest req;
    req.set_service(service);
    req.set_id(id);
    req.mutable_spec()->set_address("127.0.0.1:9001");
    req.mutable_spec()->set_generation(generation);
    req.mutable_spec()->set_state(pb::READY);
    (*req.mutable_spec()->mutable_labels())["shard"] = "4";
    return req;
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& token = {}) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + 10s);
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Registry::Stub> stub_;
};

TEST_F(GrpcApiTest, RegisterListWatch) {
  Start();
  pb::RevisionReply rev;
  ASSERT_TRUE(stub_->Register(Context().get(), Register("zone", "z1", 2), &rev).ok());
  EXPECT_EQ(rev.revision(), 1u);

  pb::ListRequest list_req;
  list_req.set_service("zone");
  pb::ListReply list;
  ASSERT_TRUE(stub_->List(Context().get(), list_req, &list).ok());
  ASSERT_EQ(list.instances_size(), 1);
  EXPECT_EQ(list.instances(0).spec().state(), pb::READY);
  EXPECT_EQ(list.instances(0).spec().labels().at("shard"), "4");
  EXPECT_TRUE(list.instances(0).spec().accepting());

  pb::WatchRequest watch_req;
  watch_req.set_service("zone");
  auto watch_ctx = Context();
  auto reader = stub_->Watch(watch_ctx.get(), watch_req);
  pb::Event event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.type(), pb::Event::RESYNC);
  EXPECT_EQ(event.snapshot_size(), 1);

  pb::SetStateRequest drain;
  drain.set_service("zone");
  drain.set_id("z1");
  drain.set_generation(2);
  drain.set_state(pb::DRAINING);
  ASSERT_TRUE(stub_->SetState(Context().get(), drain, &rev).ok());
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.type(), pb::Event::PUT);
  EXPECT_EQ(event.instance().spec().state(), pb::DRAINING);

  pb::DeregisterRequest dereg;
  dereg.set_service("zone");
  dereg.set_id("z1");
  dereg.set_generation(2);
  ASSERT_TRUE(stub_->Deregister(Context().get(), dereg, &rev).ok());
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.type(), pb::Event::DELETE);
  EXPECT_EQ(event.reason(), "drain");
  EXPECT_EQ(event.revision(), 3u);
  watch_ctx->TryCancel();
}

TEST_F(GrpcApiTest, TypedErrors) {
  Start();
  pb::RevisionReply rev;
  ASSERT_TRUE(stub_->Register(Context().get(), Register("zone", "z1", 5), &rev).ok());
  auto fenced = stub_->Register(Context().get(), Register("zone", "z1", 4), &rev);
  EXPECT_EQ(fenced.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(fenced.error_message().rfind("fenced", 0), 0u);
  pb::HeartbeatRequest hb;
  hb.set_service("zone");
  hb.set_id("nobody");
  hb.set_generation(1);
  EXPECT_EQ(stub_->Heartbeat(Context().get(), hb, &rev).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(stub_->Register(Context().get(), Register("bad name", "z1", 1), &rev).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  pb::WatchRequest future;
  future.set_from_revision(99);
  auto ctx = Context();
  auto reader = stub_->Watch(ctx.get(), future);
  pb::Event event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

TEST_F(GrpcApiTest, AuthDeniesWritingAServiceTheTokenDoesNotOwn) {
  Start(Authorizer::FromYaml(R"(
tokens:
  - name: zone-servers
    token: "zone-token-0123456789"
    write: ["zone"]
)")
            .value());
  pb::RevisionReply rev;
  EXPECT_EQ(stub_->Register(Context().get(), Register("zone", "z1", 1), &rev).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(
      stub_->Register(Context("zone-token-0123456789").get(), Register("zone", "z1", 1), &rev)
          .ok());
  EXPECT_EQ(stub_->Register(Context("zone-token-0123456789").get(), Register("chat", "c1", 1), &rev)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(registry_->revision(), 1u);
}

TEST_F(GrpcApiTest, StopEndsOpenWatches) {
  Start();
  auto ctx = Context();
  auto reader = stub_->Watch(ctx.get(), pb::WatchRequest());
  pb::Event event;
  ASSERT_TRUE(reader->Read(&event));  // the RESYNC
  server_->Stop();
  EXPECT_FALSE(reader->Read(&event));
}

}  // namespace
}  // namespace drover::registry
