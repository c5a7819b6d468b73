#include "py_convert.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/option_table.h"

namespace flatcake::py {

namespace {

// flatcake.Error, created once by RegisterErrorType. Kept as a raw pointer with an extra
// reference: the module owns it for the life of the interpreter.
PyObject* g_error_type = nullptr;

std::string Describe(const pyb::handle& value) {
  return std::string(pyb::str(pyb::type::of(value).attr("__name__")));
}

uint64_t UnsignedFrom(const pyb::handle& value, std::string_view name, uint64_t max) {
  // bool is an int subclass in Python; `ssd_bytes: true` is a mistake, not a size.
  if (PyBool_Check(value.ptr()) || !PyLong_Check(value.ptr())) {
    throw pyb::type_error("option '" + std::string(name) + "' must be an integer, got " +
                          Describe(value));
  }
  const unsigned long long v = PyLong_AsUnsignedLongLong(value.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    throw pyb::value_error("option '" + std::string(name) +
                           "' must be a non-negative integer, got " + std::string(pyb::str(value)));
  }
  if (v > max) {
    throw pyb::value_error("option '" + std::string(name) + "' = " + std::to_string(v) +
                           " exceeds the maximum " + std::to_string(max));
  }
  return v;
}

double DoubleFrom(const pyb::handle& value, std::string_view name) {
  if (PyBool_Check(value.ptr()) || !(PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr()))) {
    throw pyb::type_error("option '" + std::string(name) + "' must be a number, got " +
                          Describe(value));
  }
  return value.cast<double>();
}

bool BoolFrom(const pyb::handle& value, std::string_view name) {
  if (PyBool_Check(value.ptr())) return value.cast<bool>();
  if (PyLong_Check(value.ptr())) {
    const long v = PyLong_AsLong(value.ptr());
    if (v == 0 || v == 1) return v == 1;
  }
  throw pyb::type_error("option '" + std::string(name) + "' must be true or false, got " +
                        std::string(pyb::repr(value)));
}

std::string StringFrom(const pyb::handle& value, std::string_view name) {
  if (!PyUnicode_Check(value.ptr())) {
    throw pyb::type_error("option '" + std::string(name) + "' must be a string, got " +
                          Describe(value));
  }
  return value.cast<std::string>();
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

// A list of directories, or one string with comma-separated directories (convenient on a
// command line). Empty entries are dropped.
std::vector<std::string> DirsFrom(const pyb::handle& value, std::string_view name) {
  if (PyUnicode_Check(value.ptr())) return SplitPathList(value.cast<std::string>());
  if (!PyList_Check(value.ptr()) && !PyTuple_Check(value.ptr())) {
    throw pyb::type_error("option '" + std::string(name) +
                          "' must be a list of directories or a comma-separated string, got " +
                          Describe(value));
  }
  std::vector<std::string> dirs;
  for (const pyb::handle item : value) {
    std::string dir = Trim(StringFrom(item, name));
    if (!dir.empty()) dirs.push_back(std::move(dir));
  }
  return dirs;
}

// A Python value for `spec`, converted by the row's kind; the range is checked by SetOption.
OptionValue ValueFrom(const OptionSpec& spec, const pyb::handle& value) {
  switch (spec.kind) {
    case OptionKind::kSize:
    case OptionKind::kCount:
      return UnsignedFrom(value, spec.name, std::numeric_limits<uint64_t>::max());
    case OptionKind::kRatio: return DoubleFrom(value, spec.name);
    case OptionKind::kBool: return BoolFrom(value, spec.name);
    case OptionKind::kEnum: return StringFrom(value, spec.name);
    case OptionKind::kPathList: return DirsFrom(value, spec.name);
    case OptionKind::kPath: return StringFrom(value, spec.name);
  }
  throw pyb::type_error("option '" + std::string(spec.name) + "' has an unknown kind");
}

pyb::object ValueTo(const OptionValue& value) {
  if (const uint64_t* v = std::get_if<uint64_t>(&value)) return pyb::int_(*v);
  if (const double* v = std::get_if<double>(&value)) return pyb::float_(*v);
  if (const bool* v = std::get_if<bool>(&value)) return pyb::bool_(*v);
  if (const std::string* v = std::get_if<std::string>(&value)) return pyb::str(*v);
  return pyb::cast(std::get<std::vector<std::string>>(value));
}

pyb::dict MediumStatsToDict(const MediumStats& m) {
  pyb::dict d;
  d["capacity_bytes"] = m.capacity_bytes;
  d["used_bytes"] = m.used_bytes;
  d["admitted_bytes"] = m.admitted_bytes;
  d["written_bytes"] = m.written_bytes;
  d["read_bytes"] = m.read_bytes;
  d["delivered_bytes"] = m.delivered_bytes;
  d["reclaimed_bytes"] = m.reclaimed_bytes;
  d["scopes_live"] = m.scopes_live;
  d["scopes_reclaimed"] = m.scopes_reclaimed;
  d["blocks_live"] = m.blocks_live;
  return d;
}

}  // namespace

std::vector<std::string_view> OptionNames() {
  std::vector<std::string_view> names;
  for (const OptionSpec& spec : StoreOptionTable()) names.push_back(spec.name);
  return names;
}

StoreOptions OptionsFromDict(const pyb::dict& config) {
  StoreOptions options;
  for (const auto& [key, value] : config) {
    if (!PyUnicode_Check(key.ptr())) {
      throw pyb::type_error("option names must be strings, got " + Describe(key));
    }
    const std::string name = key.cast<std::string>();
    const OptionSpec* spec = FindStoreOption(name);
    if (spec == nullptr) {
      throw pyb::value_error("unknown store option '" + name +
                             "' (known: " + StoreOptionNameList() + ")");
    }
    const Status set = SetOption(*spec, ValueFrom(*spec, value), &options);
    if (!set.ok()) RaiseStatus(set);
  }
  return options;
}

pyb::dict OptionsToDict(const StoreOptions& options) {
  pyb::dict d;
  for (const OptionSpec& spec : StoreOptionTable()) {
    d[pyb::str(std::string(spec.name))] = ValueTo(GetOption(spec, options));
  }
  return d;
}

std::vector<Key> KeysFromSequence(const pyb::handle& keys) {
  if (PyUnicode_Check(keys.ptr()) || PyBytes_Check(keys.ptr()) || !PySequence_Check(keys.ptr())) {
    throw pyb::type_error("keys must be a list of str or bytes, got " + Describe(keys));
  }
  std::vector<Key> out;
  out.reserve(pyb::len(keys));
  size_t i = 0;
  for (const pyb::handle item : keys) {
    if (PyUnicode_Check(item.ptr())) {
      Py_ssize_t size = 0;
      const char* data = PyUnicode_AsUTF8AndSize(item.ptr(), &size);
      if (data == nullptr) throw pyb::error_already_set();
      out.push_back(KeyFromString(std::string_view(data, static_cast<size_t>(size))));
    } else if (PyBytes_Check(item.ptr())) {
      out.push_back(KeyFromString(
          std::string_view(PyBytes_AS_STRING(item.ptr()), PyBytes_GET_SIZE(item.ptr()))));
    } else {
      throw pyb::type_error("key " + std::to_string(i) + " must be str or bytes, got " +
                            Describe(item));
    }
    ++i;
  }
  return out;
}

std::vector<void*> PointersFromSequence(const pyb::handle& ptrs) {
  if (!PySequence_Check(ptrs.ptr()) || PyUnicode_Check(ptrs.ptr())) {
    throw pyb::type_error("pointers must be a sequence of int addresses, got " + Describe(ptrs));
  }
  std::vector<void*> out;
  out.reserve(pyb::len(ptrs));
  size_t i = 0;
  for (const pyb::handle item : ptrs) {
    if (PyBool_Check(item.ptr()) || !PyLong_Check(item.ptr())) {
      throw pyb::type_error("pointer " + std::to_string(i) + " must be an int address, got " +
                            Describe(item));
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(item.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      throw pyb::value_error("pointer " + std::to_string(i) +
                             " is not a valid address: " + std::string(pyb::str(item)));
    }
    out.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(v)));
    ++i;
  }
  return out;
}

pyb::dict StatsToDict(const StoreStats& s) {
  pyb::dict d;
  d["dram"] = MediumStatsToDict(s.dram);
  d["ssd"] = MediumStatsToDict(s.ssd);
  d["puts"] = s.puts;
  d["gets"] = s.gets;
  d["exists_calls"] = s.exists_calls;
  d["restores_dram_ready"] = s.restores_dram_ready;
  d["restores_ssd"] = s.restores_ssd;
  d["restores_cancelled"] = s.restores_cancelled;
  d["restore_window_peak_bytes"] = s.restore_window_peak_bytes;
  d["blocks_written"] = s.blocks_written;
  d["blocks_skipped_present"] = s.blocks_skipped_present;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["checksum_mismatches"] = s.checksum_mismatches;
  d["io_errors"] = s.io_errors;
  d["index_capacity"] = s.index_capacity;
  d["index_size"] = s.index_size;
  d["journal_bytes"] = s.journal_bytes;
  d["journal_rewrites"] = s.journal_rewrites;
  d["journal_errors"] = s.journal_errors;
  d["syncs"] = s.syncs;
  d["recovered_blocks"] = s.recovered_blocks;
  d["recovered_segments"] = s.recovered_segments;
  d["skipped_records"] = s.skipped_records;
  return d;
}

pyb::dict InfoToDict(const StoreInfo& info) {
  pyb::dict d;
  d["dram_page_mode"] = info.dram_page_mode;
  d["io_engine"] = info.io_engine;
  d["io_note"] = info.io_note;
  d["ssd_direct_io"] = info.ssd_direct_io;
  d["ssd_note"] = info.ssd_note;
  d["ssd_files"] = info.ssd_files;
  d["ssd_dirs"] = pyb::cast(info.ssd_dirs);
  d["dram_backing"] = info.dram_backing;
  d["ssd_durable"] = info.ssd_durable;
  d["journal_path"] = info.journal_path;
  d["sync"] = info.sync_mode;
  d["recovered"] = info.recovered;
  d["recovered_scopes"] = info.recovered_scopes;
  d["recovered_segments"] = info.recovered_segments;
  d["recovered_blocks"] = info.recovered_blocks;
  d["recovered_bytes"] = info.recovered_bytes;
  d["skipped_records"] = info.skipped_records;
  d["recovery_read_bytes"] = info.recovery_read_bytes;
  d["recovery_s"] = info.recovery_seconds;
  return d;
}

std::string_view MediumName(MediaType medium) { return medium == MediaType::kSsd ? "ssd" : "dram"; }

MediaType MediumFromString(std::string_view name) {
  if (name == "dram") return MediaType::kDram;
  if (name == "ssd") return MediaType::kSsd;
  throw pyb::value_error("unknown medium '" + std::string(name) + "' (dram, ssd)");
}

void RaiseStatus(const Status& status) {
  const std::string message = std::string(status.message());
  if (status.IsInvalidArgument()) throw pyb::value_error(message);
  if (g_error_type == nullptr) throw std::runtime_error(status.ToString());
  pyb::handle type(g_error_type);
  pyb::object exc = type(status.ToString());
  exc.attr("code") = pyb::str(std::string(StatusCodeName(status.code())));
  PyErr_SetObject(g_error_type, exc.ptr());
  throw pyb::error_already_set();
}

void RegisterErrorType(pyb::module_& m) {
  // A new reference that is never released: the type must outlive every raise, including ones
  // during interpreter shutdown, and a static pybind11 object would be destroyed too late.
  g_error_type = PyErr_NewException("flatcake._core.Error", PyExc_RuntimeError, nullptr);
  if (g_error_type == nullptr) throw pyb::error_already_set();
  Py_INCREF(g_error_type);
  m.add_object("Error", pyb::handle(g_error_type));
}

}  // namespace flatcake::py
