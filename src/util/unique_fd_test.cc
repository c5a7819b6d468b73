#include "util/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace flatcake {
namespace {

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFdTest, ClosesOnDestruction) {
  int raw = -1;
  {
    UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    raw = fd.get();
    EXPECT_TRUE(IsOpen(raw));
  }
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, MoveTransfersOwnership) {
  UniqueFd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): a moved-from UniqueFd is empty
  EXPECT_EQ(b.get(), raw);
  UniqueFd c;
  c = std::move(b);
  EXPECT_EQ(c.get(), raw);
  EXPECT_TRUE(IsOpen(raw));
  c.reset();
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UniqueFdTest, ReleaseKeepsTheDescriptorOpen) {
  UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = fd.release();
  EXPECT_FALSE(fd.valid());
  EXPECT_TRUE(IsOpen(raw));
  ::close(raw);
}

}  // namespace
}  // namespace flatcake
