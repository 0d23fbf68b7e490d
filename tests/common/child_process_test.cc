// Child processes as every part starts them: own process group, the log, nothing inherited, a
// clear line when the program cannot run.
#include "common/child_process.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

#include "testing/temp_dir.h"

namespace drover {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

int Reap(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(ChildProcessTest, RunsInItsOwnGroupWithItsOutputInTheLogAndNothingInherited) {
  testing::TempDir dir;
  const std::string log = dir.path() + "/child.log";
  // A descriptor of ours without close-on-exec: the child must not see it.
  const int null = ::open("/dev/null", O_RDONLY);
  const int leaked = ::fcntl(null, F_DUPFD, 50);  // high: no number the shell would use itself
  ::close(null);
  ASSERT_GE(leaked, 50);
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c",
            "echo out; echo err >&2; set -- $(cat /proc/$$/stat); echo \"pgid=$5 pid=$1\"; "
            "[ -e /proc/self/fd/" +
                std::to_string(leaked) + " ] && echo leaked; echo \"x=$DROVER_TEST_X\"; exit 3"};
  o.env = std::vector<std::string>{"PATH=/usr/bin:/bin", "DROVER_TEST_X=42"};
  o.output = log;
  auto pid = Spawn(o);
  ::close(leaked);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(DescribeWaitStatus(Reap(*pid)), "exited with code 3");
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("out\n"));
  EXPECT_THAT(text, HasSubstr("err\n"));
  EXPECT_THAT(text, HasSubstr("pgid=" + std::to_string(*pid) + " pid=" + std::to_string(*pid)));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("leaked")));
  EXPECT_THAT(text, HasSubstr("x=42"));
}

// The exec's own refusal comes back from Spawn (and is in the log too); no child is left.
TEST(ChildProcessTest, AProgramThatCannotRunIsRefusedWithTheReason) {
  testing::TempDir dir;
  SpawnOptions o;
  o.argv = {"/no/such/program", "--flag"};
  o.output = dir.path() + "/child.log";
  o.what = "instance zone-v1-1";
  auto pid = Spawn(o);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pid.status().message(), "cannot run /no/such/program: No such file or directory");
  EXPECT_THAT(ReadFile(o.output),
              HasSubstr("cannot run instance zone-v1-1 (/no/such/program): No such file"));

  // A file without an execute bit: the exec says so (even to root).
  const std::string text = dir.path() + "/notes.txt";
  WriteFile(text, "not a program\n");
  ::chmod(text.c_str(), 0644);
  o.argv = {text};
  pid = Spawn(o);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().message(), "cannot run " + text + ": Permission denied");
}

TEST(ChildProcessTest, CheckRunnableSaysWhyAProgramCannotRun) {
  testing::TempDir dir;
  EXPECT_TRUE(CheckRunnable("/bin/sh").ok());
  EXPECT_TRUE(CheckRunnable("sh").ok());  // found in PATH
  EXPECT_EQ(CheckRunnable("/no/such/binary").message(),
            "cannot run /no/such/binary: No such file or directory");
  EXPECT_EQ(CheckRunnable("/no/such/binary").code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(CheckRunnable("no-such-program-anywhere").message(),
              HasSubstr("cannot run no-such-program-anywhere: not found in PATH"));
  EXPECT_THAT(CheckRunnable(dir.path()).message(), HasSubstr("Is a directory"));
  const std::string plain = dir.path() + "/data";
  WriteFile(plain, "x");
  ::chmod(plain.c_str(), 0644);
  // No execute bit at all: refused even to root.
  EXPECT_THAT(CheckRunnable(plain).message(), HasSubstr("Permission denied"));
}

TEST(ChildProcessTest, ErrorsAndDeathsAreDescribed) {
  SpawnOptions o;
  o.argv = {"/bin/true"};
  o.output = "/no/such/dir/child.log";
  EXPECT_EQ(Spawn(o).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(Spawn(SpawnOptions{}).status().code(), StatusCode::kInvalidArgument);

  testing::TempDir dir;
  o.argv = {"/bin/sh", "-c", "kill -SEGV $$"};
  o.output = dir.path() + "/child.log";
  auto pid = Spawn(o);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(DescribeWaitStatus(Reap(*pid)), "killed by signal Segmentation fault");
}

}  // namespace
}  // namespace drover
