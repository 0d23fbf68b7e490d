#include "demo/zone_load.h"

// clang-format off
#include "net/sockets.h"  // first: it includes <utility> before Asio
// clang-format on

#include <boost/asio.hpp>
#include <optional>
#include <thread>

#include "drover/mutex.h"

namespace drover::demo {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

std::string_view SessionOutcomeName(SessionOutcome outcome) {
  switch (outcome) {
    case SessionOutcome::kOk:
      return "ok";
    case SessionOutcome::kConnectFailed:
      return "connect_failed";
    case SessionOutcome::kNoWelcome:
      return "no_welcome";
    case SessionOutcome::kBroken:
      return "broken";
  }
  return "?";
}

struct ZoneLoad::Impl : std::enable_shared_from_this<Impl> {
  explicit Impl(ZoneLoadOptions o)
      : options(std::move(o)),
        to(net::ParseEndpoint(options.target, "zone load target").value_or(tcp::endpoint())),
        work(asio::make_work_guard(io)) {}

  asio::awaitable<void> Spawner();
  asio::awaitable<void> Session(std::uint64_t n);

  ZoneLoadOptions options;
  tcp::endpoint to;  // parsed once; an unparseable target fails every connect
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<int> open{0};
  mutable Mutex mu;
  std::vector<SessionRecord> records DROVER_GUARDED_BY(mu);
};

namespace {

// One line with a deadline: nullopt on timeout, error or EOF.
asio::awaitable<std::optional<std::string>> ReadLine(tcp::socket& s, std::string& buffer,
                                                     Duration timeout) {
  asio::steady_timer timer(s.get_executor());
  timer.expires_after(timeout);
  bool expired = false;
  timer.async_wait([&s, &expired](error_code ec) {
    if (!ec) {
      expired = true;
      error_code ignored;
      s.cancel(ignored);
    }
  });
  std::optional<std::string> line;
  while (true) {
    const std::size_t nl = buffer.find('\n');
    if (nl != std::string::npos) {
      line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      break;
    }
    char chunk[512];
    error_code ec;
    const std::size_t n = co_await s.async_read_some(asio::buffer(chunk),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec || expired) break;
    buffer.append(chunk, n);
  }
  timer.cancel();
  // The timer's handler refers to this frame: let it run before returning.
  if (!expired) {
    error_code ec;
    timer.expires_after(Duration::zero());
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return line;
}

asio::awaitable<bool> WriteLine(tcp::socket& s, std::string line) {
  line += "\n";
  error_code ec;
  co_await asio::async_write(s, asio::buffer(line), asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

}  // namespace

asio::awaitable<void> ZoneLoad::Impl::Session(std::uint64_t n) {
  auto self = shared_from_this();
  struct Closed {
    std::atomic<int>& open;
    ~Closed() { open.fetch_sub(1); }
  } closed{open};
  SessionRecord record;
  record.started = MonoClock::now();
  auto finish = [&](SessionOutcome outcome) {
    record.outcome = outcome;
    MutexLock lock(mu);
    records.push_back(record);
  };
  tcp::socket socket(co_await asio::this_coro::executor);
  {
    asio::steady_timer timer(socket.get_executor());
    timer.expires_after(options.timeout);
    timer.async_wait([&socket](error_code ec) {
      if (!ec) {
        error_code ignored;
        socket.close(ignored);
      }
    });
    error_code ec;
    co_await socket.async_connect(to, asio::redirect_error(asio::use_awaitable, ec));
    timer.cancel();
    error_code wait_ec;
    timer.expires_after(Duration::zero());
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, wait_ec));
    if (ec || !socket.is_open()) {
      finish(SessionOutcome::kConnectFailed);
      co_return;
    }
  }
  std::string buffer;
  std::string hello;
  if (!options.key_prefix.empty())
    hello = "DROVER-KEY " + options.key_prefix + std::to_string(n) + "\n";
  hello += "HELLO p" + std::to_string(n);
  std::optional<std::string> welcome;
  if (co_await WriteLine(socket, hello))
    welcome = co_await ReadLine(socket, buffer, options.timeout);
  if (!welcome || !welcome->starts_with("WELCOME ")) {
    finish(SessionOutcome::kNoWelcome);
    co_return;
  }
  record.instance = welcome->substr(8);
  const auto until = MonoClock::now() + options.hold;
  bool ok = true;
  asio::steady_timer pause(socket.get_executor());
  while (ok && MonoClock::now() < until) {
    pause.expires_after(std::min<Duration>(options.ping_every, until - MonoClock::now()));
    error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::optional<std::string> pong;
    if (co_await WriteLine(socket, "PING"))
      pong = co_await ReadLine(socket, buffer, options.timeout);
    ok = pong && *pong == "PONG";
  }
  if (ok) {
    std::optional<std::string> bye;
    if (co_await WriteLine(socket, "QUIT"))
      bye = co_await ReadLine(socket, buffer, options.timeout);
    ok = bye && *bye == "BYE";
  }
  finish(ok ? SessionOutcome::kOk : SessionOutcome::kBroken);
}

asio::awaitable<void> ZoneLoad::Impl::Spawner() {
  auto self = shared_from_this();
  const auto interval = std::chrono::duration_cast<MonoClock::duration>(
      std::chrono::duration<double>(1.0 / options.sessions_per_second));
  asio::steady_timer timer(io);
  auto next = MonoClock::now();
  for (std::uint64_t n = 0; !stopping.load(); ++n) {
    open.fetch_add(1);  // Session's guard takes it back
    asio::co_spawn(io, Session(n), asio::detached);
    next += interval;
    timer.expires_at(next);
    error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

ZoneLoad::ZoneLoad(ZoneLoadOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

ZoneLoad::~ZoneLoad() { Stop(); }

void ZoneLoad::Start() {
  asio::co_spawn(impl_->io, impl_->Spawner(), asio::detached);
  impl_->thread = std::thread([impl = impl_] { impl->io.run(); });
}

void ZoneLoad::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->stopping.store(true);
  // Open sessions end by themselves within hold + a few timeouts.
  const auto deadline = MonoClock::now() + impl_->options.hold + 4 * impl_->options.timeout;
  while (impl_->open.load() > 0 && MonoClock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  impl_->work.reset();
  impl_->io.stop();
  impl_->thread.join();
}

std::vector<SessionRecord> ZoneLoad::records() const {
  MutexLock lock(impl_->mu);
  return impl_->records;
}

}  // namespace drover::demo
