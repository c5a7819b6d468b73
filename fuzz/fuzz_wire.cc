// Fuzz target: the daemon protocol decoder (serve/wire.h) and the conversions that read a decoded
// message (serve/rpc_convert.h). The first byte picks the receiver: a server reading a request
// on a settled connection, a server reading a connection's first frame (any version), or a
// client reading a reply; the rest is the frame. Every input must yield a Status, never a crash,
// a leak or undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <span>

#include "flatcake/layout.h"
#include "serve/rpc_convert.h"
#include "serve/wire.h"

namespace {

using namespace flatcake::serve;
namespace rpc = flatcake::rpc;

// What a server does with a request that decoded: the conversions of the bodies that carry keys,
// a layout or hints.
void ReadRequest(const rpc::Request& req) {
  switch (req.body_case()) {
    case rpc::Request::kLookup: (void)DecodeKeys(req.lookup().keys(), kMaxBatchKeys); break;
    case rpc::Request::kExists: (void)DecodeKeys(req.exists().keys(), kMaxBatchKeys); break;
    case rpc::Request::kReserveWrite: {
      const auto& rw = req.reserve_write();
      (void)DecodeKeys(rw.keys(), kMaxBatchKeys);
      (void)flatcake::ValidateKvLayout(FromRpc(rw.layout()));
      (void)FromRpc(rw.hints());
      break;
    }
    case rpc::Request::kPinRead: (void)DecodeKeys(req.pin_read().keys(), kMaxBatchKeys); break;
    default: break;
  }
}

// What a client does with a reply that decoded.
void ReadResponse(const rpc::Response& resp) {
  switch (resp.body_case()) {
    case rpc::Response::kError: (void)FromRpc(resp.error()); break;
    case rpc::Response::kLookup: (void)FromRpc(resp.lookup()); break;
    case rpc::Response::kStats: (void)FromRpc(resp.stats()); break;
    case rpc::Response::kClusterView: (void)FromRpc(resp.cluster_view()); break;
    default: break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  const std::span<const uint8_t> frame(data + 1, size - 1);
  if (mode == 0 || mode == 1) {
    auto req = DecodeRequestFrame(frame, mode == 0 ? kRequestFrameLimits : kHelloFrameLimits);
    if (req.ok()) ReadRequest(*req);
  } else {
    auto resp = DecodeResponseFrame(frame);
    if (resp.ok()) ReadResponse(*resp);
  }
  return 0;
}
