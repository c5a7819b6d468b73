#include "cli/store_flags.h"

#include <cstdio>
#include <functional>

#include "core/option_table.h"

namespace flatcake::cli {
namespace {

std::string_view TypeName(const OptionSpec& spec) {
  switch (spec.kind) {
    case OptionKind::kSize: return "SIZE";
    case OptionKind::kCount: return "UINT";
    case OptionKind::kRatio: return "RATIO";
    case OptionKind::kPathList: return "DIR";
    case OptionKind::kPath: return "PATH";
    case OptionKind::kBool:
    case OptionKind::kEnum: return "";
  }
  return "";
}

// Registers the row's flag; `set` stores one parsed value, `current` is the default shown.
CLI::Option* AddFlag(CLI::App* app, const OptionSpec& spec, const std::string& current,
                     std::function<Status(std::string_view)> set) {
  const std::string flag(spec.flag);
  std::string help(spec.help);
  if (spec.kind != OptionKind::kEnum) {
    const std::string range = OptionRangeText(spec);
    if (!range.empty()) help += " Range: " + range + ".";
  }
  CLI::Option* opt = app->add_option_function<std::string>(
      flag,
      [flag, set](const std::string& text) {
        const Status s = set(text);
        if (!s.ok()) throw CLI::ValidationError(flag, std::string(s.message()));
      },
      help);
  if (spec.kind == OptionKind::kSize) opt->transform(CLI::AsSizeValue(false));
  opt->type_name(spec.kind == OptionKind::kEnum ? OptionRangeText(spec)
                                                : std::string(TypeName(spec)));
  opt->default_str(current);
  return opt;
}

void AddRowFlag(CLI::App* app, const OptionSpec& spec, StoreOptions* o) {
  const std::string flag(spec.flag);
  switch (spec.kind) {
    case OptionKind::kBool: {
      bool* target = &(o->*std::get<bool StoreOptions::*>(spec.member));
      const std::string help =
          spec.flag_clears ? "Turns off " + std::string(spec.name) + ": " + std::string(spec.help)
                           : std::string(spec.help);
      app->add_flag((spec.flag_clears ? "!" : "") + flag, *target, help);
      return;
    }
    case OptionKind::kPathList: {
      // Repeatable: each occurrence appends.
      auto* target = &(o->*std::get<std::vector<std::string> StoreOptions::*>(spec.member));
      app->add_option(flag, *target, std::string(spec.help))
          ->type_name(std::string(TypeName(spec)));
      return;
    }
    default:
      AddFlag(app, spec, FormatOption(spec, GetOption(spec, *o)),
              [&spec, o](std::string_view text) { return SetOptionFromText(spec, text, o); });
  }
}

}  // namespace

void AddStoreFlags(CLI::App* app, StoreOptions* o) {
  for (const OptionSpec& spec : StoreOptionTable()) AddRowFlag(app, spec, o);
}

std::vector<std::string> GivenStoreFlags(const CLI::App& app) {
  std::vector<std::string> given;
  for (const OptionSpec& spec : StoreOptionTable()) {
    const CLI::Option* opt = app.get_option_no_throw(std::string(spec.flag));
    if (opt != nullptr && opt->count() > 0) given.emplace_back(spec.name);
  }
  return given;
}

CLI::Option* AddStoreFlag(CLI::App* app, std::string_view name, IoEngineKind* target) {
  const OptionSpec& spec = *FindStoreOption(name);
  const auto member = std::get<IoEngineKind StoreOptions::*>(spec.member);
  StoreOptions current;
  current.*member = *target;
  return AddFlag(app, spec, FormatOption(spec, GetOption(spec, current)),
                 [&spec, member, target](std::string_view text) -> Status {
                   StoreOptions parsed;
                   FC_RETURN_IF_ERROR(SetOptionFromText(spec, text, &parsed));
                   *target = parsed.*member;
                   return Status::OK();
                 });
}

int ReportStatus(std::string_view command, const Status& status) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "flatcake %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.ToString().c_str());
  return 1;
}

int ReportArgError(std::string_view command, const Status& status) {
  return ReportStatus(command, status) == 0 ? 0 : 2;
}

int ReportOpenError(std::string_view command, const Status& status) {
  return status.code() == StatusCode::kInvalidArgument ? ReportArgError(command, status)
                                                       : ReportStatus(command, status);
}

}  // namespace flatcake::cli
