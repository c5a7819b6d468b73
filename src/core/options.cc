#include "flatcake/options.h"

#include <string>

#include "core/option_table.h"

namespace flatcake {

Status ValidateStoreOptions(const StoreOptions& o) {
  // Each field on its own: range, multiple, enum value (the option table's rows).
  for (const OptionSpec& spec : StoreOptionTable()) {
    FC_RETURN_IF_ERROR(CheckOption(spec, GetOption(spec, o)));
  }
  // Relations between fields.
  if (o.dram_bytes == 0 && o.ssd_dirs.empty()) {
    return Status::InvalidArgument("both media are disabled: set dram_bytes or ssd_dirs");
  }
  if (!o.ssd_dirs.empty() && o.ssd_bytes < o.ssd_file_bytes) {
    return Status::InvalidArgument("ssd_bytes (" + std::to_string(o.ssd_bytes) +
                                   ") is smaller than one pool file (ssd_file_bytes = " +
                                   std::to_string(o.ssd_file_bytes) + ")");
  }
  if (!(o.low_watermark > 0 && o.low_watermark <= o.high_watermark)) {
    return Status::InvalidArgument("watermarks must satisfy 0 < low <= high <= 1");
  }
  return Status::OK();
}

}  // namespace flatcake
