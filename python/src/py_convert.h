// Conversions between Python objects and FlatCake's public types for the `flatcake._core`
// extension: the options dictionary, keys, pointer lists, statistics.
//
// Thread safety: every function here touches Python objects and REQUIRES the GIL. They are pure
// conversions with no shared state. Invalid input raises a Python exception (ValueError or
// TypeError) naming the offending key or element; nothing here aborts the process.
#pragma once

#include <pybind11/pybind11.h>

#include <string_view>
#include <vector>

#include "flatcake/key.h"
#include "flatcake/options.h"
#include "flatcake/status.h"
#include "flatcake/store.h"

namespace flatcake::py {

namespace pyb = pybind11;

// Builds StoreOptions from a dict whose keys are option-table names (the StoreOptions fields).
// Missing keys keep their defaults; an unknown key (ValueError listing the known ones), a value
// of the wrong type for its kind (TypeError) or outside its row's range (ValueError) raises.
// Sizes must already be integers (the Python layer parses "64GiB").
StoreOptions OptionsFromDict(const pyb::dict& config);
pyb::dict OptionsToDict(const StoreOptions& options);
// Every accepted option name, in declaration order.
std::vector<std::string_view> OptionNames();

// Keys: each element a str or bytes, folded with KeyFromString.
std::vector<Key> KeysFromSequence(const pyb::handle& keys);
// Pointers: a sequence of non-negative ints (addresses). Zero is passed through; the store
// rejects null pointers with InvalidArgument.
std::vector<void*> PointersFromSequence(const pyb::handle& ptrs);

pyb::dict StatsToDict(const StoreStats& stats);
pyb::dict InfoToDict(const StoreInfo& info);

std::string_view MediumName(MediaType medium);
MediaType MediumFromString(std::string_view name);  // "dram" | "ssd"; ValueError otherwise

// Raises the Python exception matching `status` (REQUIRES !status.ok()): InvalidArgument becomes
// ValueError; every other code becomes flatcake.Error with a `code` attribute ("NoSpace", ...).
[[noreturn]] void RaiseStatus(const Status& status);
// Installs flatcake.Error into `m`; RaiseStatus uses it afterwards.
void RegisterErrorType(pyb::module_& m);

}  // namespace flatcake::py
