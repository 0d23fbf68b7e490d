// A real etcd cluster on loopback for tests: `members` etcd processes (1 or 3, typically), each on
// free client and peer ports, all data and logs under one TempDir. Members can be killed with
// SIGKILL and restarted on the same ports and data; the leader, the revision and compaction are
// reached through etcd's HTTP/JSON gateway (/v3/...) on the client port. Every wait is bounded; the
// destructor kills every member (ChildProcess does), then removes the directory.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/child_process.h"
#include "testing/file_tail.h"
#include "testing/free_port.h"
#include "testing/http_client.h"
#include "testing/temp_dir.h"

namespace drover::testing {

namespace etcd_internal {

struct Reply {
  int status = 0;  // 0: no reply (refused, timed out, or not HTTP)
  std::string body;
};

// Decodes a chunked body; etcd's gateway answers errors chunked (with trailers), successes with a
// Content-Length. Stops at the last chunk; returns what was decoded so far on malformed input.
inline std::string Dechunk(const std::string& raw) {
  std::string out;
  DecodeChunks(raw, 0, out);
  return out;
}

// POSTs a JSON body to the etcd gateway at 127.0.0.1:`port`; the whole exchange is bounded by
// `timeout` (per socket operation) so a member without a leader cannot stall a test for long.
inline Reply Post(std::uint16_t port, const std::string& target, const std::string& body,
                  std::chrono::milliseconds timeout) {
  Reply reply;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return reply;
  const timeval tv{static_cast<time_t>(timeout.count() / 1000),
                   static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string data;
  if (SendAll(fd, RequestText("POST", target, body, "Content-Type: application/json\r\n"))) {
    char buf[4096];
    ssize_t n;
    while (std::chrono::steady_clock::now() < deadline &&
           (n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
      data.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  const std::size_t end = data.find("\r\n\r\n");
  if (data.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos || data.size() < 12) {
    return reply;
  }
  try {
    reply.status = std::stoi(data.substr(9, 3));
  } catch (const std::exception&) {
    return reply;
  }
  std::string headers = data.substr(0, end);
  std::transform(headers.begin(), headers.end(), headers.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  reply.body = data.substr(end + 4);
  if (headers.find("transfer-encoding: chunked") != std::string::npos) {
    reply.body = Dechunk(reply.body);
  }
  return reply;
}

// The gateway encodes uint64/int64 fields as JSON strings and omits zero values.
inline std::optional<std::uint64_t> U64(const nlohmann::json& j,
                                        const nlohmann::json::json_pointer& p) {
  if (!j.contains(p)) return std::nullopt;
  const auto& v = j.at(p);
  try {
    if (v.is_string()) return std::stoull(v.get<std::string>());
    if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

inline std::optional<nlohmann::json> ParseOk(const Reply& r) {
  if (r.status != 200) return std::nullopt;
  auto j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// The gateway carries etcd's `bytes` fields (keys, values) as standard base64.
inline std::string Base64(const std::string& in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned n = static_cast<unsigned char>(in[i]) << 16 |
                       static_cast<unsigned char>(in[i + 1]) << 8 |
                       static_cast<unsigned char>(in[i + 2]);
    out += {kAlphabet[n >> 18], kAlphabet[(n >> 12) & 63], kAlphabet[(n >> 6) & 63],
            kAlphabet[n & 63]};
  }
  if (i + 1 == in.size()) {
    const unsigned n = static_cast<unsigned char>(in[i]) << 16;
    out += {kAlphabet[n >> 18], kAlphabet[(n >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const unsigned n =
        static_cast<unsigned char>(in[i]) << 16 | static_cast<unsigned char>(in[i + 1]) << 8;
    out += {kAlphabet[n >> 18], kAlphabet[(n >> 12) & 63], kAlphabet[(n >> 6) & 63], '='};
  }
  return out;
}

}  // namespace etcd_internal

class EtcdCluster {
 public:
  // Starts `members` etcd members on 127.0.0.1 with free ports, all data under one TempDir, and
  // waits (bounded, ~30 s) until every member answers a linearizable read. On failure ok() is
  // false and error() says why, with the end of the failing member's log.
  explicit EtcdCluster(int members = 1, std::string binary = "/usr/bin/etcd")
      : binary_(std::move(binary)) {
    if (members < 1) {
      error_ = "EtcdCluster: members must be >= 1, got " + std::to_string(members);
      return;
    }
    if (dir_.path().empty()) {
      error_ = "EtcdCluster: could not create a temporary directory";
      return;
    }
    if (::access(binary_.c_str(), X_OK) != 0) {
      error_ = "EtcdCluster: " + binary_ + " is not an executable";
      return;
    }
    // The token is unique within the process by the counter, across processes by pid and dir.
    static std::atomic<int> clusters{0};
    token_ = "drover-" + std::to_string(::getpid()) + "-" + std::to_string(++clusters) + "-" +
             std::filesystem::path(dir_.path()).filename().string();
    members_.resize(static_cast<std::size_t>(members));
    // A free port can be taken by another process between being picked and etcd binding it: a
    // start that fails that way is retried on fresh ports.
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (StartAll(attempt)) return;
      if (!bind_failed_) break;
    }
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  int size() const { return static_cast<int>(members_.size()); }

  // "127.0.0.1:port" client (gRPC and HTTP gateway) addresses of every member, killed ones too.
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
    return out;
  }
  std::string endpoint(int i) const {
    return "127.0.0.1:" + std::to_string(members_.at(static_cast<std::size_t>(i)).client_port);
  }
  std::string endpoints_csv() const {
    std::string out;
    for (const auto& e : endpoints()) out += (out.empty() ? "" : ",") + e;
    return out;
  }
  std::uint16_t client_port(int i) const { return M(i).client_port; }
  std::uint16_t peer_port(int i) const { return M(i).peer_port; }
  // etcd's member id of member i (0 if it never answered).
  std::uint64_t member_id(int i) const { return M(i).id; }
  // The member's combined stdout/stderr log, and its data directory.
  std::string log_path(int i) const { return dir_.path() + "/m" + std::to_string(i) + ".log"; }
  std::string data_dir(int i) const { return dir_.path() + "/m" + std::to_string(i); }

  // Running: started and not exited. An exited member stays unreaped (a zombie) until Kill,
  // Restart or the destructor reaps it; waitid(WNOWAIT) sees the exit without reaping.
  bool alive(int i) const {
    const auto& p = M(i).process;
    if (p == nullptr || !p->running()) return false;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(p->pid()), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      return false;
    }
    return info.si_pid != p->pid();
  }

  // SIGKILL and reap member i (no-op when it is not running).
  void Kill(int i) {
    auto& p = M(i).process;
    if (p == nullptr) return;
    if (p->running()) {
      p->Signal(SIGKILL);
      p->Wait();
    }
  }

  // Starts member i again (killing it first if it runs) on the same ports and data directory, and
  // waits (bounded, ~30 s) until it answers a linearizable read. On failure returns false and
  // error() says why.
  bool Restart(int i) {
    if (!ok_) return false;  // never started: no ports or data to restart on; error() says why
    Kill(i);
    Launch(i, "existing");
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    if (WaitReady(i, deadline)) return true;
    error_ = "EtcdCluster: member m" + std::to_string(i) +
             (alive(i) ? " did not answer within " + std::to_string(kStartTimeout.count()) + " s"
                       : " exited before answering") +
             " after restart: " + Describe(i);
    return false;
  }

  // The index of the current leader: every live member that answers must report the same leader,
  // and that leader must be a live member of this cluster. -1 otherwise.
  int LeaderIndex() const {
    std::optional<std::uint64_t> agreed;
    for (int i = 0; i < size(); ++i) {
      if (!alive(i)) continue;
      const auto status = etcd_internal::ParseOk(
          etcd_internal::Post(M(i).client_port, "/v3/maintenance/status", "{}", kStatusTimeout));
      if (!status) continue;
      const auto leader = etcd_internal::U64(*status, nlohmann::json::json_pointer("/leader"));
      if (!leader || *leader == 0) return -1;  // this member knows of no leader
      if (agreed && *agreed != *leader) return -1;
      agreed = leader;
    }
    if (!agreed) return -1;
    for (int i = 0; i < size(); ++i) {
      if (M(i).id == *agreed) return alive(i) ? i : -1;
    }
    return -1;
  }

  // Polls LeaderIndex() until a leader is agreed on; -1 after `timeout`.
  int WaitForLeader(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const int leader = LeaderIndex();
      if (leader >= 0 || std::chrono::steady_clock::now() >= deadline) return leader;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The current revision (header.revision of a linearizable range) via the first live member that
  // answers; -1 if none does.
  std::int64_t Revision() const {
    for (int i = 0; i < size(); ++i) {
      const std::int64_t rev = RevisionAt(i);
      if (rev >= 0) return rev;
    }
    return -1;
  }

  // The same through member i only; -1 if it is dead or does not answer.
  std::int64_t RevisionAt(int i) const {
    if (!alive(i)) return -1;
    const auto r = RangeProbe(i, kRequestTimeout);
    if (!r) return -1;
    const auto rev = etcd_internal::U64(*r, nlohmann::json::json_pointer("/header/revision"));
    return rev ? static_cast<std::int64_t>(*rev) : -1;
  }

  // Writes key = value via the first live member that answers; the new revision, or -1.
  std::int64_t Put(const std::string& key, const std::string& value) const {
    const nlohmann::json body = {{"key", etcd_internal::Base64(key)},
                                 {"value", etcd_internal::Base64(value)}};
    for (int i = 0; i < size(); ++i) {
      if (!alive(i)) continue;
      const auto r = etcd_internal::ParseOk(
          etcd_internal::Post(M(i).client_port, "/v3/kv/put", body.dump(), kRequestTimeout));
      if (!r) continue;
      const auto rev = etcd_internal::U64(*r, nlohmann::json::json_pointer("/header/revision"));
      if (rev) return static_cast<std::int64_t>(*rev);
    }
    return -1;
  }

  // Physical compaction at `revision` via the first live member that answers. False if no member
  // accepts it (etcd refuses a revision already compacted, or one in the future).
  bool Compact(std::int64_t revision) const {
    const nlohmann::json body = {{"revision", std::to_string(revision)}, {"physical", true}};
    for (int i = 0; i < size(); ++i) {
      if (!alive(i)) continue;
      const auto r =
          etcd_internal::Post(M(i).client_port, "/v3/kv/compaction", body.dump(), kRequestTimeout);
      if (r.status == 200) return true;
      if (r.status != 0) return false;  // an answer from etcd, not a dead member: do not retry
    }
    return false;
  }

 private:
  struct Member {
    std::uint16_t client_port = 0;
    std::uint16_t peer_port = 0;
    std::uint64_t id = 0;
    std::unique_ptr<ChildProcess> process;
  };

  static constexpr std::chrono::seconds kStartTimeout{30};
  static constexpr std::chrono::milliseconds kRequestTimeout{3000};
  static constexpr std::chrono::milliseconds kStatusTimeout{1000};

  Member& M(int i) { return members_.at(static_cast<std::size_t>(i)); }
  const Member& M(int i) const { return members_.at(static_cast<std::size_t>(i)); }

  static std::string PeerUrl(std::uint16_t port) {
    return "http://127.0.0.1:" + std::to_string(port);
  }

  bool StartAll(int attempt) {
    bind_failed_ = false;
    for (int i = 0; i < size(); ++i) {
      M(i).process.reset();  // kills a member of a failed attempt
      std::error_code ec;
      std::filesystem::remove_all(data_dir(i), ec);
      std::filesystem::remove(log_path(i), ec);
    }
    std::set<std::uint16_t> used;
    for (int i = 0; i < size(); ++i) {
      for (std::uint16_t* port : {&M(i).client_port, &M(i).peer_port}) {
        std::uint16_t p = 0;
        for (int tries = 0; tries < 100 && (p == 0 || used.count(p) != 0); ++tries) {
          p = FreeLoopbackPort();
        }
        used.insert(p);
        *port = p;
      }
    }
    initial_cluster_.clear();
    for (int i = 0; i < size(); ++i) {
      initial_cluster_ += (i == 0 ? "m" : ",m") + std::to_string(i) + "=" + PeerUrl(M(i).peer_port);
    }
    for (int i = 0; i < size(); ++i) Launch(i, "new");
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    for (int i = 0; i < size(); ++i) {
      if (!WaitReady(i, deadline)) {
        for (int j = 0; j < size(); ++j) {
          bind_failed_ = bind_failed_ ||
                         Tail(log_path(j), 200).find("address already in use") != std::string::npos;
        }
        error_ = "EtcdCluster: member m" + std::to_string(i) + " of " + std::to_string(size()) +
                 (alive(i) ? " not ready within " + std::to_string(kStartTimeout.count()) + " s"
                           : " exited before answering") +
                 " (attempt " + std::to_string(attempt + 1) + "): " + Describe(i);
        return false;
      }
    }
    ok_ = true;
    error_.clear();
    return true;
  }

  void Launch(int i, const std::string& cluster_state) {
    const std::string client_url = "http://127.0.0.1:" + std::to_string(M(i).client_port);
    const std::string peer_url = PeerUrl(M(i).peer_port);
    // The shell only redirects stdout and stderr to the member's log, then becomes etcd (exec):
    // the pid stays etcd's, so Signal and PDEATHSIG reach etcd itself.
    std::vector<std::string> argv = {"/bin/sh",
                                     "-c",
                                     "log=$1; shift; exec \"$@\" >>\"$log\" 2>&1",
                                     "etcd-member",
                                     log_path(i),
                                     binary_,
                                     "--name",
                                     "m" + std::to_string(i),
                                     "--data-dir",
                                     data_dir(i),
                                     "--listen-client-urls",
                                     client_url,
                                     "--advertise-client-urls",
                                     client_url,
                                     "--listen-peer-urls",
                                     peer_url,
                                     "--initial-advertise-peer-urls",
                                     peer_url,
                                     "--initial-cluster",
                                     initial_cluster_,
                                     "--initial-cluster-state",
                                     cluster_state,
                                     "--initial-cluster-token",
                                     token_,
                                     "--heartbeat-interval",
                                     "50",
                                     "--election-timeout",
                                     "500",
                                     "--logger",
                                     "zap",
                                     "--log-level",
                                     "error",
                                     "--enable-v2=false"};
    M(i).process.reset();
    M(i).process = std::make_unique<ChildProcess>(argv);
  }

  std::optional<nlohmann::json> RangeProbe(int i, std::chrono::milliseconds timeout) const {
    // Linearizable by default: it needs a leader and a quorum.
    static const std::string body =
        nlohmann::json{{"key", etcd_internal::Base64("drover-etcd-cluster-probe")}}.dump();
    return etcd_internal::ParseOk(
        etcd_internal::Post(M(i).client_port, "/v3/kv/range", body, timeout));
  }

  // Until `deadline`: member i answers a linearizable read; also records its member id.
  bool WaitReady(int i, std::chrono::steady_clock::time_point deadline) {
    while (std::chrono::steady_clock::now() < deadline) {
      if (!alive(i)) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      const auto timeout = std::clamp(left, std::chrono::milliseconds(1), kRequestTimeout);
      if (const auto r = RangeProbe(i, timeout)) {
        if (const auto id =
                etcd_internal::U64(*r, nlohmann::json::json_pointer("/header/member_id"))) {
          M(i).id = *id;
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Where member i listens, how it ended (reaping it if it exited), and the end of its log.
  std::string Describe(int i) {
    std::string out =
        "client " + endpoint(i) + ", peer 127.0.0.1:" + std::to_string(M(i).peer_port) + ", ";
    if (alive(i)) {
      out += "still running";
    } else if (M(i).process == nullptr) {
      out += "never started";
    } else {
      const int status = M(i).process->Wait();
      out += WIFEXITED(status)     ? "exit status " + std::to_string(WEXITSTATUS(status))
             : WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                   : "wait status " + std::to_string(status);
    }
    const std::string tail = Tail(log_path(i), 20);
    out += tail.empty() ? ", empty log " + log_path(i)
                        : "; last lines of " + log_path(i) + ":\n" + tail;
    return out;
  }

  // Declared first, destroyed last: the members are killed before their directory goes away.
  TempDir dir_;
  std::string binary_;
  std::string token_;
  std::string initial_cluster_;
  std::vector<Member> members_;
  bool ok_ = false;
  bool bind_failed_ = false;
  std::string error_;
};

}  // namespace drover::testing
