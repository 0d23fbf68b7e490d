// The HTTP gateway's parsing of what clients and upstreams send: the bytes as a request head
// (with the gateway's limit), then the gateway's checks and the head it would send upstream, and
// what follows as a chunked body; the same bytes as a response head, the head it would send back
// to an HTTP/1.1 and an HTTP/1.0 client, and what follows as a chunked body. Malformed input must
// be refused (the proxy answers 400 or 502), never crash it or read past the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/http1.h"
#include "gateway/http_check.h"

namespace {

namespace http1 = drover::gateway::http1;

// Decodes `input` as a chunked body, a few bytes at a time, as a relay would.
void DecodeChunked(std::string_view input) {
  http1::BodyDecoder body;
  body.Start(http1::Framing::kChunked, 0);
  std::size_t payload = 0;
  while (!input.empty() && !body.done() && !body.bad()) {
    const http1::BodyDecoder::Step step = body.Next(input.substr(0, 7));
    if (step.used == 0) break;
    if (!step.data.empty() && (step.data.data() < input.data() ||
                               step.data.data() + step.data.size() > input.data() + step.used)) {
      __builtin_trap();  // a payload view outside what the step took
    }
    payload += step.data.size();
    input.remove_prefix(step.used);
  }
  (void)payload;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  http1::Head head;
  std::string out;
  {
    http1::HeadParser parser(16 * 1024);
    if (parser.Request(input, head) == http1::ParseResult::kDone) {
      (void)drover::gateway::CheckRequestHead(head);
      drover::gateway::WriteRequestHead(head, "127.0.0.1", out);
      DecodeChunked(input.substr(parser.size()));
    }
  }
  {
    http1::HeadParser parser(16 * 1024);
    if (parser.Response(input, false, head) == http1::ParseResult::kDone) {
      for (const unsigned version : {10u, 11u}) {
        const http1::Framing framing = drover::gateway::ClientFraming(head, version);
        drover::gateway::WriteResponseHead(head, version, framing, head.keep_alive, out);
      }
      DecodeChunked(input.substr(parser.size()));
    }
  }
  return 0;
}
