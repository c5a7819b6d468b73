#include "serve/daemon_events.h"

#include "serve/flatcake_rpc.pb.h"

namespace flatcake::serve {

RequestType RequestTypeOf(const rpc::Request& request) {
  switch (request.body_case()) {
    case rpc::Request::kHello: return RequestType::kHello;
    case rpc::Request::kLookup: return RequestType::kLookup;
    case rpc::Request::kExists: return RequestType::kExists;
    case rpc::Request::kReserveWrite: return RequestType::kReserveWrite;
    case rpc::Request::kPublishWrite: return RequestType::kPublishWrite;
    case rpc::Request::kAbortWrite: return RequestType::kAbortWrite;
    case rpc::Request::kPinRead: return RequestType::kPinRead;
    case rpc::Request::kUnpin: return RequestType::kUnpin;
    case rpc::Request::kStats: return RequestType::kStats;
    case rpc::Request::kClusterView: return RequestType::kClusterView;
    case rpc::Request::BODY_NOT_SET: break;
  }
  return RequestType::kUnknown;
}

}  // namespace flatcake::serve
