#include "common/thread_name.h"

#include <pthread.h>

#include <string>

namespace drover {

void NameThisThread(std::string_view name) {
  constexpr std::size_t kMax = 15;  // TASK_COMM_LEN less its terminating zero
  const std::string cut(name.substr(0, kMax));
  ::pthread_setname_np(::pthread_self(), cut.c_str());
}

}  // namespace drover
