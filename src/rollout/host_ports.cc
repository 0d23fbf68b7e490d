#include "rollout/host_ports.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/text.h"
#include "sdk/socket_util.h"

namespace drover::rollout {
namespace {

constexpr std::uint16_t kFirst = 20000;

bool Names(const LaunchSpec& spec, std::string_view placeholder) {
  const auto has = [&](const std::string& s) { return s.find(placeholder) != std::string::npos; };
  return std::any_of(spec.argv.begin(), spec.argv.end(), has) ||
         std::any_of(spec.env.begin(), spec.env.end(),
                     [&](const auto& kv) { return has(kv.second); });
}

}  // namespace

PortPicker::PortPicker(std::string bind_host)
    : bind_host_(std::move(bind_host)), random_(std::random_device{}()) {
  int first = 0, last = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (!(range >> first >> last)) first = 32768;  // Linux's default
  end_ = static_cast<std::uint16_t>(std::clamp(first, 0, 65535));
}

std::uint16_t PortPicker::Next() {
  if (end_ > kFirst + 1000) {
    std::uniform_int_distribution<int> pick(kFirst, end_ - 1);
    for (int tries = 0; tries < 200; ++tries) {
      const auto port = static_cast<std::uint16_t>(pick(random_));
      if (handed_out_.count(port) == 0 && Bindable(port)) return HandOut(port);
    }
  }
  return KernelPick();
}

bool PortPicker::Bindable(std::uint16_t port) const {
  auto listening = sdk::ListenTcp(bind_host_ + ":" + std::to_string(port), 1, "a free port");
  if (!listening.ok()) return false;
  ::close(listening->fd);
  return true;
}

std::uint16_t PortPicker::KernelPick() {
  for (int tries = 0; tries < 10; ++tries) {
    auto listening = sdk::ListenTcp(bind_host_ + ":0", 1, "a free port");
    if (!listening.ok()) continue;
    ::close(listening->fd);
    if (handed_out_.count(listening->port) == 0) return HandOut(listening->port);
  }
  return HandOut(sdk::FreeLoopbackPort());
}

std::uint16_t PortPicker::HandOut(std::uint16_t port) {
  handed_out_.insert(port);
  return port;
}

LaunchSpec FillHostPlaceholders(LaunchSpec spec, const std::string& host, PortPicker& ports) {
  const std::string port = Names(spec, "{port}") ? std::to_string(ports.Next()) : "";
  const std::string health_port = Names(spec, "{health_port}") ? std::to_string(ports.Next()) : "";
  const auto fill = [&](const std::string& text) {
    return ReplaceAll(ReplaceAll(ReplaceAll(text, "{port}", port), "{health_port}", health_port),
                      "{host}", host);
  };
  for (std::string& a : spec.argv) a = fill(a);
  for (auto& [key, value] : spec.env) value = fill(value);
  return spec;
}

}  // namespace drover::rollout
