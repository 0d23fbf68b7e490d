#include "sdk/self_registration.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "common/thread_name.h"
#include "drover/mutex.h"

namespace drover::sdk {

struct SelfRegistration::Impl {
  std::string what;
  HostOptions options;
  Mutex mu;
  std::unique_ptr<ServerHost> entry DROVER_GUARDED_BY(mu);  // the current attempt
  bool stopping DROVER_GUARDED_BY(mu) = false;
  CondVar wake;
  std::jthread thread;

  void Run(std::stop_token stop);
};

void SelfRegistration::Impl::Run(std::stop_token stop) {
  using namespace std::chrono_literals;
  Duration backoff = 1s;
  const std::string name = options.service + "/" + options.instance_id;
  while (!stop.stop_requested()) {
    auto entry_or = ServerHost::Create(options);
    if (!entry_or.ok()) {
      spdlog::error("{}: cannot register in discovery as {}: {}", what, name,
                    entry_or.status().ToString());
      return;  // bad options: trying again would not help
    }
    ServerHost* attempt = entry_or->get();
    {
      MutexLock lock(mu);
      if (stopping) return;
      entry = std::move(*entry_or);
    }
    const Status started = attempt->Start();
    if (started.ok()) {
      spdlog::info("{}: registered as {} ({}) with {}", what, name, attempt->address(),
                   options.registry);
      return;
    }
    MutexLock lock(mu);
    if (stopping) return;
    spdlog::warn("{}: could not register as {} with {}: {}; trying again in {} s", what, name,
                 options.registry, started.ToString(),
                 std::chrono::duration_cast<std::chrono::seconds>(backoff).count());
    entry.reset();
    (void)wake.WaitUntil(mu, std::chrono::steady_clock::now() + backoff,
                         [&]() DROVER_REQUIRES(mu) { return stopping; });
    backoff = std::min<Duration>(backoff * 2, 30s);
  }
}

std::unique_ptr<SelfRegistration> SelfRegistration::Start(std::string what, HostOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->what = std::move(what);
  impl->options = std::move(options);
  Impl* raw = impl.get();
  impl->thread = std::jthread([raw](std::stop_token stop) {
    NameThisThread("drover-selfreg");
    raw->Run(stop);
  });
  return std::unique_ptr<SelfRegistration>(new SelfRegistration(std::move(impl)));
}

SelfRegistration::SelfRegistration(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SelfRegistration::~SelfRegistration() { Stop(); }

void SelfRegistration::Stop() {
  {
    MutexLock lock(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
    impl_->wake.NotifyAll();
    // A registration in progress returns CANCELLED once its host shuts down.
    if (impl_->entry) impl_->entry->Shutdown();
  }
  impl_->thread.request_stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  std::unique_ptr<ServerHost> entry;
  {
    MutexLock lock(impl_->mu);
    entry = std::move(impl_->entry);
  }
  entry.reset();  // leaves discovery (DRAINING, deregister, propagation) if registered
}

}  // namespace drover::sdk
