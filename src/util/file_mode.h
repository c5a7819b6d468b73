// File modes of what a store creates: pool files, the journal, lock files, a DRAM arena file.
// They hold every tenant's KV (prompts) and keys, so they are the owner's only (0600), or the
// owner's and its group's (0660) when the node daemon admits other users of its group, who open
// the pool files themselves (StoreOptions::group_access).
#pragma once

#include <sys/types.h>

#include <string>

#include "flatcake/status.h"

namespace flatcake {

inline constexpr mode_t kOwnerOnlyFileMode = 0600;
inline constexpr mode_t kGroupFileMode = 0660;

// Makes the file open at `fd` (named `what` in messages) no looser than `allowed`: bits beyond it
// are cleared with fchmod (a pool created before this, or by hand). PermissionDenied when they
// are and cannot be cleared (a file of another owner), naming the mode and the fix.
Status RestrictFileMode(int fd, mode_t allowed, const std::string& what);

}  // namespace flatcake
