// /proc read without exceptions: this process and its threads are listed, a child's stat is
// parsed whatever its name holds, and a process that has gone reads as gone.
#include "common/procfs.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace drover::procfs {
namespace {

bool Contains(const std::vector<int>& ids, int id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

TEST(ProcfsTest, ListsThisProcessAndItsThreads) {
  EXPECT_TRUE(Contains(Pids(), ::getpid()));
  int other = 0;
  std::thread t([&] { other = ::gettid(); });
  t.join();
  const std::vector<int> tasks = Tasks(::getpid());
  EXPECT_TRUE(Contains(tasks, ::gettid()));
  EXPECT_FALSE(Contains(tasks, other)) << "a joined thread is still listed";
  const auto stat = StatOf(::getpid(), ::gettid());
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->state, 'R');
  EXPECT_EQ(stat->ppid, ::getppid());
  EXPECT_NE(CommandLine(::getpid()).find("common_test"), std::string::npos);
}

TEST(ProcfsTest, ListsAProcesssOpenDescriptors) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const std::vector<int> open = Fds(::getpid());
  EXPECT_TRUE(Contains(open, pipe_fds[0]) && Contains(open, pipe_fds[1]));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_FALSE(Contains(Fds(::getpid()), pipe_fds[1]));
}

TEST(ProcfsTest, ReadsANumberFromAProcesssStatus) {
  const auto rss = StatusField(::getpid(), "VmRSS");
  ASSERT_TRUE(rss.has_value());
  EXPECT_GT(*rss, 100u) << "kB";
  EXPECT_EQ(StatusField(::getpid(), "Threads"), Tasks(::getpid()).size());
  EXPECT_TRUE(StatusField(::getpid(), "nonvoluntary_ctxt_switches", ::gettid()).has_value());
  EXPECT_FALSE(StatusField(::getpid(), "VmRS").has_value()) << "a prefix of a name is not the name";
  EXPECT_FALSE(StatusField(::getpid(), "Name").has_value()) << "not a number";
  EXPECT_FALSE(StatusField(::getpid(), "NoSuchField").has_value());
}

TEST(ProcfsTest, ReadsOneVariableOfAProcesssEnvironment) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char a[] = "DROVER_X=1", b[] = "DROVER_INSTANCE_ID_NOT=2", c[] = "DROVER_INSTANCE_ID=zone-v2-1";
    char* env[] = {a, b, c, nullptr};
    char sleep[] = "sleep", seconds[] = "5";
    char* argv[] = {sleep, seconds, nullptr};
    ::execve("/bin/sleep", argv, env);
    ::_exit(127);
  }
  std::string id;  // (before the exec the child still has this process's environment)
  for (int i = 0; i < 500 && id.empty(); ++i) {
    id = EnvValue(child, "DROVER_INSTANCE_ID");
    if (id.empty()) ::usleep(10'000);
  }
  EXPECT_EQ(id, "zone-v2-1");
  EXPECT_EQ(EnvValue(child, "DROVER_X"), "1");
  EXPECT_EQ(EnvValue(child, "DROVER"), "");
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  EXPECT_EQ(EnvValue(child, "DROVER_X"), "");
}

// Children that exit at once, reaped by another thread while this one reads their files: a
// process reaped between the open and the read of its file makes the read fail (ESRCH), which
// must read as gone ("") -- a stream there threw instead (seen in the supervisor's scan of /proc).
TEST(ProcfsTest, AProcessReapedWhileItsFilesAreReadReadsAsGoneWithoutThrowing) {
  std::atomic<bool> forking{true};
  std::thread reaper([&] {
    while (forking.load() || ::waitpid(-1, nullptr, WNOHANG) > 0) ::waitpid(-1, nullptr, 0);
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int children = 0;
  while (std::chrono::steady_clock::now() < until) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(0);
    ++children;
    for (int i = 0; i < 20; ++i) {
      EXPECT_NO_THROW((void)Read(child, "environ"));
      EXPECT_NO_THROW((void)EnvValue(child, "DROVER_INSTANCE_ID"));
      EXPECT_NO_THROW((void)StatOf(child));
    }
  }
  forking = false;
  reaper.join();
  EXPECT_GT(children, 0);
}

TEST(ProcfsTest, ParsesAStatWhoseNameHoldsSpacesAndParentheses) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "x) S 1 (y", 0, 0, 0);
    ::setpgid(0, 0);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  const auto stat = StatOf(child);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->ppid, ::getpid());
  EXPECT_EQ(stat->pgrp, child);
  EXPECT_NE(Read(child, "comm").find("x) S 1 (y"), std::string::npos);
  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  // Reaped: gone everywhere, and nothing throws.
  EXPECT_FALSE(StatOf(child).has_value());
  EXPECT_TRUE(Tasks(child).empty());
  EXPECT_TRUE(Fds(child).empty());
  EXPECT_EQ(Read(child, "status"), "");
  EXPECT_FALSE(StatusField(child, "VmRSS").has_value());
  EXPECT_EQ(CommandLine(child), "");
  EXPECT_FALSE(Contains(Pids(), child));
}

}  // namespace
}  // namespace drover::procfs
