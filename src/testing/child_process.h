// The tests' name for util/child_process.h (Child: a child process with its stdout read line by
// line), which `flatcake soak` uses too.
#pragma once

#include "util/child_process.h"

namespace flatcake::testing {
using flatcake::Child;
}  // namespace flatcake::testing
