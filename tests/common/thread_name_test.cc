// A thread's name is what `top -H` and `ps -L` show: /proc/self/task/<tid>/comm.
#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace drover {
namespace {

std::string CommOf(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(ThreadNameTest, NamesTheCallingThreadOnlyAndCutsALongNameTo15Bytes) {
  const std::string mine = CommOf(::gettid());
  std::string short_name, long_name;
  std::thread t([&] {
    NameThisThread("reg-writer");
    short_name = CommOf(::gettid());
    NameThisThread("a-name-longer-than-fifteen");
    long_name = CommOf(::gettid());
  });
  t.join();
  EXPECT_EQ(short_name, "reg-writer");
  EXPECT_EQ(long_name, "a-name-longer-t");
  EXPECT_EQ(CommOf(::gettid()), mine);
}

}  // namespace
}  // namespace drover
