// The service manager's readiness protocol (systemd's sd_notify, Type=notify), without
// libsystemd: one datagram of newline-separated assignments ("READY=1", "STOPPING=1",
// "STATUS=...") to the AF_UNIX socket named by $NOTIFY_SOCKET. `flatcake serve` says READY=1
// once its socket listens (so that `systemctl start` returns, and units ordered after it start,
// only when clients can connect: opening a large arena and recovering a pool take seconds) and
// STOPPING=1 when SIGTERM begins its shutdown (packaging/systemd/flatcake.service).
//
// Thread-safe (reads the environment, sends on a socket of its own).
#pragma once

#include <string_view>

#include "flatcake/status.h"

namespace flatcake::serve {

// Sends `state` to $NOTIFY_SOCKET: a path ("/run/systemd/notify") or an abstract name
// ("@name"). Without the variable (not started by a service manager, or by one that expects no
// notification) sends nothing and returns OK. Unsupported for other address forms (systemd 254's
// "vsock:..."), InvalidArgument for a name too long for sun_path, and the send's error.
Status NotifyServiceManager(std::string_view state);

}  // namespace flatcake::serve
