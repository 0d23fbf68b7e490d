#include "grpc_load.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/host_port.h"
#include "testing/http_client.h"

namespace grpc_load {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "registry_bench: grpc_load: %s\n", what.c_str());
  std::exit(1);
}

// The answers' flow-control windows: wide enough that no server waits on the bench for credit.
constexpr std::int32_t kWindow = 64 * 1024 * 1024;

nghttp2_nv Nv(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
}

// `message` in gRPC's frame: a byte saying it is not compressed, its length (big-endian), itself.
void AppendFramed(std::string& out, std::string_view message) {
  const auto n = static_cast<std::uint32_t>(message.size());
  const char prefix[5] = {0, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(prefix, sizeof prefix);
  out.append(message);
}

thread_local const Loop* current_loop = nullptr;

}  // namespace

// One epoll thread: its connections' sockets, and functions posted to it from other threads.
class Loop {
 public:
  Loop() : epoll_(::epoll_create1(EPOLL_CLOEXEC)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (epoll_ < 0 || wake_ < 0) Fail("cannot make an epoll loop");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the wake-up
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
    thread_ = std::thread([this] { Run(); });
  }
  ~Loop() { Stop(); }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  void Stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    Wake();
    thread_.join();
    ::close(wake_);
    ::close(epoll_);
  }

  bool InThread() const { return current_loop == this; }

  void Post(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      posted_.push_back(std::move(fn));
    }
    Wake();
  }

  void Watch(Connection* c, bool writable) {
    epoll_event ev{};
    ev.events = EPOLLIN | (writable ? EPOLLOUT : 0u);
    ev.data.ptr = c;
    if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, c->fd_, &ev) != 0 &&
        ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd_, &ev) != 0) {
      Fail("cannot watch a connection");
    }
  }
  void Forget(Connection* c) { ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c->fd_, nullptr); }

  // A connection with output to send at the end of this turn.
  void Dirty(Connection* c) {
    if (std::find(dirty_.begin(), dirty_.end(), c) == dirty_.end()) dirty_.push_back(c);
  }

 private:
  void Wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_, &one, sizeof one);
  }

  void Run() {
    current_loop = this;
    pthread_setname_np(pthread_self(), "grpc-load");  // as profiles name it
    std::vector<epoll_event> events(256);
    std::vector<std::function<void()>> run;
    while (!stop_) {
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 100);
      for (int i = 0; i < n; ++i) {
        const epoll_event& e = events[static_cast<std::size_t>(i)];
        auto* c = static_cast<Connection*>(e.data.ptr);
        if (c == nullptr) {
          std::uint64_t count = 0;
          [[maybe_unused]] const ssize_t got = ::read(wake_, &count, sizeof count);
          continue;
        }
        if ((e.events & EPOLLOUT) != 0) c->OnWritable();
        if ((e.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) c->OnReadable();
      }
      {
        std::lock_guard lock(mu_);
        run.swap(posted_);
      }
      for (auto& fn : run) fn();
      run.clear();
      // A turn's output leaves together, a send per connection.
      while (!dirty_.empty()) {
        std::vector<Connection*> flush;
        flush.swap(dirty_);
        for (Connection* c : flush) c->Flush();
      }
    }
  }

  const int epoll_;
  const int wake_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;  // guarded by mu_
  std::vector<Connection*> dirty_;             // the loop's thread only
  std::thread thread_;
};

// A stream's state, from Open until it closes.
struct Connection::Stream {
  Handler* handler = nullptr;
  std::string out;  // framed messages not yet taken by nghttp2
  std::size_t out_at = 0;
  bool out_end = false;   // the client's side ends after `out`
  bool deferred = false;  // nghttp2 asked for data there was none of: resume on the next Send
  std::string in;         // answer bytes not yet a whole message
  int grpc_status = -1;
};

struct Connection::Session {
  nghttp2_session* h2 = nullptr;
  // Every stream from Open until its close. (Not nghttp2's stream user data: a client's stream
  // exists in nghttp2 only once its HEADERS left, and a Send may come before.)
  std::unordered_map<std::int32_t, Stream*> streams;
  ~Session() {
    nghttp2_session_del(h2);
    for (const auto& [id, s] : streams) delete s;  // abandoned: their handlers hear nothing more
  }

  Stream* Find(std::int32_t id) const {
    const auto it = streams.find(id);
    return it == streams.end() ? nullptr : it->second;
  }
  static Stream* StreamOf(void* connection, std::int32_t id) {
    return static_cast<Connection*>(connection)->session_->Find(id);
  }
  // The stream's end: its state goes, then its handler hears it.
  void End(std::int32_t id, bool with_status) {
    const auto it = streams.find(id);
    if (it == streams.end()) return;
    Stream* s = it->second;
    streams.erase(it);
    Handler* handler = s->handler;
    const int status = with_status ? s->grpc_status : -1;
    delete s;
    handler->OnClose(status);
  }

  static ssize_t ReadBody(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                          std::uint32_t* flags, nghttp2_data_source* source, void*) {
    auto* s = static_cast<Stream*>(source->ptr);
    const std::size_t n = std::min(length, s->out.size() - s->out_at);
    std::copy_n(s->out.data() + s->out_at, n, buf);
    s->out_at += n;
    if (s->out_at == s->out.size()) {
      s->out.clear();
      s->out_at = 0;
      if (s->out_end) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
      } else if (n == 0) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
      }
    }
    return static_cast<ssize_t>(n);
  }

  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                      std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                      std::uint8_t, void* self) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    if (std::string_view(reinterpret_cast<const char*>(name), namelen) != "grpc-status") return 0;
    Stream* s = StreamOf(self, frame->hd.stream_id);
    if (s == nullptr) return 0;
    int status = -1;
    const char* v = reinterpret_cast<const char*>(value);
    if (std::from_chars(v, v + valuelen, status).ec == std::errc()) s->grpc_status = status;
    return 0;
  }

  static int OnData(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                    std::size_t len, void* self) {
    Stream* s = StreamOf(self, id);
    if (s == nullptr) return 0;
    s->in.append(reinterpret_cast<const char*>(data), len);
    std::size_t at = 0;
    while (s->in.size() - at >= 5) {
      const auto* p = reinterpret_cast<const std::uint8_t*>(s->in.data() + at);
      const std::size_t n = (std::size_t{p[1]} << 24) | (std::size_t{p[2]} << 16) |
                            (std::size_t{p[3]} << 8) | std::size_t{p[4]};
      if (s->in.size() - at - 5 < n) break;
      s->handler->OnMessage(std::string_view(s->in).substr(at + 5, n));
      at += 5 + n;
    }
    s->in.erase(0, at);
    return 0;
  }

  static int OnClose(nghttp2_session*, std::int32_t id, std::uint32_t, void* self) {
    static_cast<Connection*>(self)->session_->End(id, true);
    return 0;
  }
  // A request's HEADERS that never left (its stream reset before it opened): it ends here.
  static int OnNotSent(nghttp2_session*, const nghttp2_frame* frame, int, void* self) {
    if (frame->hd.type == NGHTTP2_HEADERS) {
      static_cast<Connection*>(self)->session_->End(frame->hd.stream_id, false);
    }
    return 0;
  }
};

Connection::Connection(Loop& loop, int fd)
    : loop_(loop), fd_(fd), session_(std::make_unique<Session>()) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &Session::OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Session::OnData);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Session::OnClose);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, &Session::OnNotSent);
  nghttp2_session_client_new(&session_->h2, callbacks, this);
  nghttp2_session_callbacks_del(callbacks);
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kWindow},
                                             {NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
  nghttp2_submit_settings(session_->h2, NGHTTP2_FLAG_NONE, settings, 2);
  nghttp2_session_set_local_window_size(session_->h2, NGHTTP2_FLAG_NONE, 0, kWindow);
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

bool Connection::InLoop() const { return loop_.InThread(); }

void Connection::Run(std::function<void()> fn) {
  if (InLoop()) {
    fn();
  } else {
    loop_.Post(std::move(fn));
  }
}

std::int32_t Connection::Open(std::string_view path, std::string_view message, bool end,
                              Handler* handler) {
  if (!InLoop()) Fail("a stream opened off its connection's loop thread");
  if (lost_) Fail("a call on a connection the server closed");
  auto* s = new Stream;
  s->handler = handler;
  AppendFramed(s->out, message);
  s->out_end = end;
  const nghttp2_nv headers[] = {Nv(":method", "POST"),
                                Nv(":scheme", "http"),
                                Nv(":authority", "bench"),
                                Nv(":path", path),
                                Nv("content-type", "application/grpc"),
                                Nv("te", "trailers")};
  nghttp2_data_provider body{};
  body.source.ptr = s;
  body.read_callback = &Session::ReadBody;
  const std::int32_t id =
      nghttp2_submit_request(session_->h2, nullptr, headers, std::size(headers), &body, nullptr);
  if (id < 0) Fail(std::string("cannot open a stream: ") + nghttp2_strerror(id));
  session_->streams.emplace(id, s);
  loop_.Dirty(this);
  return id;
}

void Connection::Send(std::int32_t stream, std::string_view message, bool end) {
  if (lost_) return;  // its streams have heard OnClose
  Stream* s = session_->Find(stream);
  if (s == nullptr) return;  // closed meanwhile: its OnClose has said so
  AppendFramed(s->out, message);
  s->out_end = s->out_end || end;
  if (s->deferred) {
    s->deferred = false;
    nghttp2_session_resume_data(session_->h2, stream);
  }
  loop_.Dirty(this);
}

void Connection::Cancel(std::int32_t stream) {
  if (lost_ || session_->Find(stream) == nullptr) return;
  nghttp2_submit_rst_stream(session_->h2, NGHTTP2_FLAG_NONE, stream, NGHTTP2_CANCEL);
  loop_.Dirty(this);
}

void Connection::OnReadable() {
  if (lost_) return;
  std::uint8_t buffer[64 * 1024];
  const ssize_t n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0 || nghttp2_session_mem_recv(session_->h2, buffer, static_cast<std::size_t>(n)) < 0) {
    return Lose();
  }
  loop_.Dirty(this);  // WINDOW_UPDATEs, SETTINGS acks, what the handlers sent
}

void Connection::OnWritable() {
  waiting_writable_ = false;
  loop_.Watch(this, false);
  Flush();
}

void Connection::Flush() {
  if (lost_) return;
  while (!waiting_writable_) {
    if (unsent_.empty()) {
      const std::uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_->h2, &data);
      if (n < 0) return Lose();
      if (n == 0) return;
      // Gather what nghttp2 has ready into one send.
      unsent_.assign(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
      while (unsent_.size() < 256 * 1024) {
        const ssize_t more = nghttp2_session_mem_send(session_->h2, &data);
        if (more < 0) return Lose();
        if (more == 0) break;
        unsent_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(more));
      }
    }
    const ssize_t sent = ::send(fd_, unsent_.data(), unsent_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && (errno == EAGAIN || errno == EINTR)) {
      waiting_writable_ = true;
      loop_.Watch(this, true);
      return;
    }
    if (sent < 0) return Lose();
    unsent_.erase(0, static_cast<std::size_t>(sent));
    if (!unsent_.empty()) {
      waiting_writable_ = true;
      loop_.Watch(this, true);
    }
  }
}

// The server closed the connection (or it failed): every open stream ends without a status. A
// later Open fails the run.
void Connection::Lose() {
  if (lost_) return;
  lost_ = true;
  loop_.Forget(this);
  std::vector<std::int32_t> open;
  for (const auto& [id, s] : session_->streams) open.push_back(id);
  for (const std::int32_t id : open) session_->End(id, false);
}

Client::Client(const std::string& address, int connections) {
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < std::min(cpus, std::max(1, connections)); ++i) {
    loops_.push_back(std::make_unique<Loop>());
  }
  auto hp = drover::ParseHostPort(address, "grpc_load", {.require_ip = true, .ipv4_only = true});
  if (!hp.ok()) Fail("not an ip:port: " + address);
  for (int i = 0; i < connections; ++i) {
    const int fd = drover::testing::ConnectTo(hp->host, hp->port);
    if (fd < 0) Fail("cannot connect to " + address);
    Loop& loop = *loops_[static_cast<std::size_t>(i) % loops_.size()];
    connections_.push_back(std::unique_ptr<Connection>(new Connection(loop, fd)));
    Connection* c = connections_.back().get();
    loop.Post([c, &loop] {
      loop.Watch(c, false);
      loop.Dirty(c);  // the preface and SETTINGS
    });
  }
}

Client::~Client() {
  for (auto& loop : loops_) loop->Stop();
  connections_.clear();
}

namespace {

class UnaryCall final : public Handler {
 public:
  UnaryCall(std::function<void(bool)> done, std::function<bool(std::string_view)> check)
      : done_(std::move(done)), check_(std::move(check)) {}
  void OnMessage(std::string_view message) override { answered_ = !check_ || check_(message); }
  void OnClose(int grpc_status) override {
    auto done = std::move(done_);
    const bool ok = grpc_status == 0 && answered_;
    delete this;
    done(ok);
  }

 private:
  std::function<void(bool)> done_;
  std::function<bool(std::string_view)> check_;
  bool answered_ = false;
};

}  // namespace

Call::~Call() = default;

void Call::Start(std::string_view path, std::string message, bool end) {
  {
    std::lock_guard lock(mu_);
    started_ = true;
  }
  connection_.Run([this, path, message = std::move(message), end] {
    id_ = connection_.Open(path, message, end, this);
  });
}

void Call::Write(std::string message) {
  connection_.Run([this, message = std::move(message)] {
    if (id_ != 0) connection_.Send(id_, message, false);
  });
}

void Call::Close() {
  {
    std::lock_guard lock(mu_);
    if (!started_ || ended_) return;
  }
  connection_.Run([this] {
    if (id_ != 0) connection_.Cancel(id_);
  });
  std::unique_lock lock(mu_);
  ended_cv_.wait(lock, [&] { return ended_; });
}

void Call::OnClose(int) {
  std::lock_guard lock(mu_);
  ended_ = true;
  ended_cv_.notify_all();
}

void Unary(Connection& connection, std::string_view path, std::string message,
           std::function<void(bool)> done, std::function<bool(std::string_view)> check) {
  auto* call = new UnaryCall(std::move(done), std::move(check));
  connection.Run([&connection, path, message = std::move(message), call] {
    connection.Open(path, message, true, call);
  });
}

}  // namespace grpc_load
