#include "net/tls_context.h"

#include <openssl/ssl.h>

namespace drover::net {

namespace ssl = boost::asio::ssl;

Status LoadServerTls(ssl::context& ctx, const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() || key_file.empty()) {
    return InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  // TLS 1.2 and later only.
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                  ssl::context::single_dh_use);
  boost::system::error_code ec;
  ctx.use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return InvalidArgumentError("cannot load TLS certificate " + cert_file + ": " + ec.message());
  }
  ctx.use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) return InvalidArgumentError("cannot load TLS key " + key_file + ": " + ec.message());
  return Status::Ok();
}

void RequireAlpnH2(ssl::context& ctx) {
  SSL_CTX_set_alpn_select_cb(
      ctx.native_handle(),
      [](SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
         unsigned int in_length, void*) -> int {
        static constexpr unsigned char kH2[] = {2, 'h', '2'};
        unsigned char* selected = nullptr;
        if (SSL_select_next_proto(&selected, out_length, kH2, sizeof kH2, in, in_length) !=
            OPENSSL_NPN_NEGOTIATED) {
          return SSL_TLSEXT_ERR_ALERT_FATAL;
        }
        *out = selected;
        return SSL_TLSEXT_ERR_OK;
      },
      nullptr);
}

}  // namespace drover::net
