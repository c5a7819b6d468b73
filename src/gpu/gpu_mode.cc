// Choosing the GPU mode (gpu/device.h): what the machine offers, what the caller forced.
#include <sys/stat.h>

#include <array>
#include <cstdlib>

#include "gpu/cuda_api.h"
#include "gpu/cuda_device.h"
#include "gpu/device.h"
#include "gpu/fake_device.h"

namespace flatcake::gpu {
namespace {

constexpr std::array<std::string_view, 6> kGpuModeNames = {"auto",   "gds",  "cufile-compat",
                                                           "bounce", "none", "fake"};

// GPUDirect Storage's kernel driver: without it cuFile can only run in compatibility mode.
bool NvidiaFsLoaded() {
  struct stat st;
  return stat("/proc/driver/nvidia-fs/version", &st) == 0 ||
         stat("/sys/module/nvidia_fs", &st) == 0;
}

Result<GpuMode> RequestedMode(const GpuOptions& options) {
  if (options.mode != GpuMode::kAuto) return options.mode;
  const char* env = std::getenv("FLATCAKE_GPU_MODE");
  if (env == nullptr || *env == '\0') return GpuMode::kAuto;
  auto m = ParseGpuMode(env);
  if (!m.ok()) return m.status().WithContext("FLATCAKE_GPU_MODE");
  return *m;
}

}  // namespace

std::string_view GpuModeName(GpuMode mode) {
  const auto i = static_cast<size_t>(mode);
  return i < kGpuModeNames.size() ? kGpuModeNames[i] : "?";
}

Result<GpuMode> ParseGpuMode(std::string_view text) {
  for (size_t i = 0; i < kGpuModeNames.size(); ++i) {
    if (text == kGpuModeNames[i]) return static_cast<GpuMode>(i);
  }
  return Status::InvalidArgument("unknown GPU mode '" + std::string(text) +
                                 "' (auto, gds, cufile-compat, bounce, none or fake)");
}

Result<OpenedDevice> OpenGpu(const GpuOptions& options) {
  FC_ASSIGN_OR_RETURN(const GpuMode want, RequestedMode(options));
  OpenedDevice out;
  if (want == GpuMode::kNone) {
    out.probe = {GpuMode::kNone, "forced (GPU mode none)", ""};
    return out;
  }
  if (want == GpuMode::kFake) {
    out.device = std::make_shared<FakeDevice>();
    out.probe = {GpuMode::kFake, "forced: the fake device (host memory), not a GPU",
                 out.device->Describe()};
    return out;
  }
  const bool forced = want != GpuMode::kAuto;
  auto none = [&](std::string why) -> Result<OpenedDevice> {
    if (forced) {
      return Status::Unsupported("GPU mode " + std::string(GpuModeName(want)) +
                                 " cannot run: " + why);
    }
    out.probe = {GpuMode::kNone, std::move(why), ""};
    return out;
  };
  auto libs = LoadCudaLibraries();
  if (!libs.ok()) return none(std::string(libs.status().message()));
  // Which way SSD reads reach the device.
  GpuMode mode = want;
  std::string reason;
  if (want == GpuMode::kAuto) {
    if (!(*libs)->have_cufile) {
      mode = GpuMode::kBounce;
      reason = "no cuFile (" + (*libs)->cufile_note + "): O_DIRECT reads into a pinned window";
    } else if (NvidiaFsLoaded()) {
      mode = GpuMode::kGds;
    } else {
      mode = GpuMode::kCuFileCompat;
      reason = "cuFile without the nvidia-fs driver: compatibility mode";
    }
  } else if (want == GpuMode::kGds && !NvidiaFsLoaded()) {
    return none("the nvidia-fs driver (GPUDirect Storage) is not loaded");
  }
  if (mode == GpuMode::kCuFileCompat) setenv("CUFILE_FORCE_COMPAT_MODE", "true", 0);
  const bool use_cufile = mode == GpuMode::kGds || mode == GpuMode::kCuFileCompat;
  auto dev = CudaDevice::Open(**libs, options.device, use_cufile);
  if (!dev.ok() && use_cufile && !forced) {
    // cuFile would not open: the bounce window still works.
    reason = std::string(dev.status().message()) + "; falling back to the bounce window";
    mode = GpuMode::kBounce;
    dev = CudaDevice::Open(**libs, options.device, false);
  }
  if (!dev.ok()) return none(std::string(dev.status().message()));
  out.probe = {mode, std::move(reason), (*dev)->Describe()};
  out.device = std::shared_ptr<Device>(std::move(*dev));
  return out;
}

GpuProbe ProbeGpu(const GpuOptions& options) {
  auto opened = OpenGpu(options);
  if (!opened.ok()) return {GpuMode::kNone, std::string(opened.status().message()), ""};
  return opened->probe;
}

}  // namespace flatcake::gpu
