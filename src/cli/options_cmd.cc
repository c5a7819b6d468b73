// `flatcake options`: prints the option table (core/option_table.h) as Markdown or JSON, or
// rewrites the generated options table of documents in place (README.md, docs/sglang.md).
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/store_flags.h"
#include "core/option_table.h"

namespace flatcake::cli {
namespace {

struct OptionsArgs {
  bool json = false;
  std::vector<std::string> update_docs;
};

Status UpdateDoc(const std::string& path, const std::string& table) {
  std::ifstream in(path);
  if (!in) return Status::IOError("cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  Result<std::string> updated = ReplaceOptionTable(text.str(), table);
  if (!updated.ok()) return updated.status().WithContext(path);
  if (*updated == text.str()) return Status::OK();
  std::ofstream out(path, std::ios::trunc);
  out << *updated;
  if (!out) return Status::IOError("cannot write '" + path + "'");
  std::fprintf(stderr, "flatcake options: updated %s\n", path.c_str());
  return Status::OK();
}

int RunOptions(const OptionsArgs& a) {
  const std::string table = RenderOptionTableMarkdown();
  if (!a.update_docs.empty()) {
    for (const std::string& path : a.update_docs) {
      if (int rc = ReportStatus("options", UpdateDoc(path, table))) return rc;
    }
    return 0;
  }
  if (a.json) {
    std::printf("%s\n", RenderOptionTableJson().c_str());
  } else {
    std::fputs(table.c_str(), stdout);
  }
  return 0;
}

}  // namespace

void RegisterOptionsCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<OptionsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "options", "Print the store options (flags, Python names, defaults, ranges) as Markdown");
  cmd->add_flag("--json", args->json, "Print one JSON array of the option rows instead");
  cmd->add_option("--update-docs", args->update_docs,
                  "Rewrite the generated options table between the option-table markers of "
                  "these files (README.md docs/sglang.md)");
  cmd->callback([args, exit_code] { *exit_code = RunOptions(*args); });
}

}  // namespace flatcake::cli
