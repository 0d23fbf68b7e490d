// The token file of the registry and the agent: parsing, expiry, write and deploy rights.
#include "common/tokens.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

TEST(AuthorizerTest, RejectsMalformedTokenFiles) {
  for (const char* yaml :
       {"", "tokens: 3", "tokens: []", "[1, 2]", "tokens:\n  - name: a\n",
        "tokens:\n  - name: a\n    token: short\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    colour: red\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n"
        "  - name: a\n    token: bbbbbbbbbbbbbbbbbb\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    read_only: true\n"
        "    write: [x]\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    read_only: true\n"
        "    deploy: [x]\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    deploy: x\n", "tokens: [unclosed",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    expires: tomorrow\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    expires: 2027-02-30T00:00:00Z\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    expires: 1013-02-01T00:00:00Z\n",
        "tokens:\n  - name: a\n    token: aaaaaaaaaaaaaaaaaa\n    expires: "
        "2027-02-01T00:00:00\n"}) {
    EXPECT_EQ(Authorizer::FromYaml(yaml).status().code(), StatusCode::kInvalidArgument) << yaml;
  }
  EXPECT_EQ(Authorizer::LoadFile("/nonexistent/tokens.yaml").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(AuthorizerTest, AnExpiredTokenIsRefusedWithItsNameAndExpiry) {
  auto auth = Authorizer::FromYaml(R"(
tokens:
  - name: zone-2026
    token: "zone-token-0123456789"
    write: ["zone"]
    expires: "2026-12-01T12:00:00Z"
)");
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  const SystemTime expiry = std::chrono::system_clock::from_time_t(1796126400);  // 12:00 UTC
  const std::string bearer = "Bearer zone-token-0123456789";
  EXPECT_TRUE((*auth)->AuthorizeWrite(bearer, "zone", expiry - std::chrono::seconds(1)).ok());
  EXPECT_EQ((*auth)->Authenticate(bearer, expiry - std::chrono::seconds(1)).value(), "zone-2026");
  for (const Status& s :
       {(*auth)->Authenticate(bearer, expiry).status(),
        (*auth)->AuthorizeWrite(bearer, "zone", expiry + std::chrono::hours(1))}) {
    EXPECT_EQ(s.code(), StatusCode::kUnauthenticated);
    EXPECT_EQ(s.message(), "token 'zone-2026' expired at 2026-12-01T12:00:00Z");
  }
  EXPECT_EQ((*auth)->AuthorizeWrite(bearer, "chat", expiry - std::chrono::seconds(1)).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ((*auth)->Authenticate("Basic dXNlcjpwdw==", expiry).status().message(),
            "the Authorization header must be 'Bearer <token>'");
}

TEST(AuthorizerTest, DeployRightsAreTheirOwnListAndWriteDoesNotImplyThem) {
  auto auth = Authorizer::FromYaml(R"(
tokens:
  - name: zone-writer
    token: "writer-token-0123456789"
    write: ["zone"]
  - name: zone-deployer
    token: "deployer-token-0123456789"
    deploy: ["zone"]
  - name: ops
    token: "ops-token-0123456789"
    write: ["*"]
    deploy: ["*"]
  - name: dashboard
    token: "dashboard-token-0123456789"
    read_only: true
)");
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  const Authorizer& a = **auth;
  EXPECT_TRUE(a.AuthorizeDeploy("Bearer deployer-token-0123456789", "zone").ok());
  EXPECT_TRUE(a.AuthorizeDeploy("Bearer ops-token-0123456789", "chat").ok());
  EXPECT_TRUE(a.AuthorizeWrite("Bearer ops-token-0123456789", "chat").ok());

  const Status writer = a.AuthorizeDeploy("Bearer writer-token-0123456789", "zone");
  EXPECT_EQ(writer.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(writer.message(),
            "token 'zone-writer' may not deploy service 'zone' (its 'deploy' list does not name "
            "it)");
  EXPECT_EQ(a.AuthorizeDeploy("Bearer deployer-token-0123456789", "chat").code(),
            StatusCode::kPermissionDenied);
  // Deploy rights do not grant registry writes either.
  EXPECT_EQ(a.AuthorizeWrite("Bearer deployer-token-0123456789", "zone").code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(a.AuthorizeDeploy("Bearer dashboard-token-0123456789", "zone").code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(a.AuthorizeDeploy("", "zone").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(a.AuthorizeDeploy("Bearer nobody-knows-this-token", "zone").code(),
            StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace drover
