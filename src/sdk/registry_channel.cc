#include "sdk/registry_channel.h"

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>

namespace drover::sdk {

Result<std::shared_ptr<grpc::Channel>> RegistryChannel(const std::string& registry,
                                                       const std::string& ca_file,
                                                       const grpc::ChannelArguments* args) {
  DROVER_ASSIGN_OR_RETURN(const RegistryTarget target, ParseRegistryTarget(registry, ca_file));
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (!target.tls) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    if (!ca_file.empty()) {
      std::ifstream in(ca_file);
      if (!in) return InvalidArgumentError("cannot read the registry CA file " + ca_file);
      std::stringstream pem;
      pem << in.rdbuf();
      ssl.pem_root_certs = pem.str();
      if (ssl.pem_root_certs.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
        return InvalidArgumentError("the registry CA file " + ca_file +
                                    " holds no PEM certificate");
      }
    }
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(target.address, credentials,
                                   args != nullptr ? *args : grpc::ChannelArguments());
}

}  // namespace drover::sdk
