#include "serve/http_get.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "serve/poll_wait.h"
#include "util/unique_fd.h"

namespace flatcake::serve {
namespace {

// Headers past this are not a metrics endpoint's answer.
constexpr size_t kMaxHeaderBytes = 64 << 10;

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// A connected TCP socket to `at`, trying each address the name resolves to.
Result<UniqueFd> ConnectTcp(const HostPort& at, const Deadline& deadline) {
  const std::string where = at.ToString();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(at.host.c_str(), std::to_string(at.port).c_str(), &hints, &found);
  if (rc != 0) {
    return Status::IOError("cannot connect to " + where + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no address";
  Status timed_out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    int err = 0;
    for (;;) {
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
        err = 0;
        break;
      }
      err = errno;
      if (err != EINTR) break;
    }
    // A connect that a signal interrupted goes on in the background, as a non-blocking one does.
    if (err == EINPROGRESS || err == EALREADY) {
      const Status ready =
          WaitReady(fd.get(), POLLOUT, deadline, ("connecting to " + where).c_str());
      if (!ready.ok()) {
        timed_out = ready;
        continue;
      }
      socklen_t len = sizeof(err);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    last_error = std::strerror(err);
  }
  ::freeaddrinfo(found);
  if (!timed_out.ok()) return timed_out;
  return Status::IOError("cannot connect to " + where + ": " + last_error);
}

Status SendAll(int fd, std::string_view bytes, const Deadline& deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      FC_RETURN_IF_ERROR(WaitReady(fd, POLLOUT, deadline, "sending the HTTP request"));
    } else {
      return Status::FromErrno(n < 0 ? errno : EPIPE, "sending the HTTP request");
    }
  }
  return Status::OK();
}

// The status line and headers of a response, from `head` (without the blank line).
struct ResponseHead {
  int status = 0;
  std::string content_type;
  std::optional<size_t> content_length;
  bool chunked = false;
};

Result<ResponseHead> ParseHead(std::string_view head) {
  ResponseHead out;
  size_t eol = head.find('\n');
  const std::string_view status_line = Trim(head.substr(0, eol));
  // "HTTP/1.1 200 OK"
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return Status::Corruption("not an HTTP/1.x response: '" +
                              std::string(status_line.substr(0, 64)) + "'");
  }
  const auto r = std::from_chars(status_line.data() + 9, status_line.data() + 12, out.status);
  if (r.ec != std::errc() || r.ptr != status_line.data() + 12 || out.status < 100) {
    return Status::Corruption("bad HTTP status line '" + std::string(status_line) + "'");
  }
  while (eol != std::string_view::npos) {
    const size_t start = eol + 1;
    eol = head.find('\n', start);
    const std::string_view line = Trim(head.substr(start, eol - start));
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return Status::Corruption("bad HTTP header line '" + std::string(line.substr(0, 64)) + "'");
    }
    const std::string_view name = Trim(line.substr(0, colon));
    const std::string_view value = Trim(line.substr(colon + 1));
    if (EqualsIgnoreCase(name, "Content-Type")) {
      out.content_type = std::string(value);
    } else if (EqualsIgnoreCase(name, "Content-Length")) {
      size_t length = 0;
      const auto lr = std::from_chars(value.data(), value.data() + value.size(), length);
      if (lr.ec != std::errc() || lr.ptr != value.data() + value.size()) {
        return Status::Corruption("bad Content-Length '" + std::string(value) + "'");
      }
      out.content_length = length;
    } else if (EqualsIgnoreCase(name, "Transfer-Encoding")) {
      out.chunked = EqualsIgnoreCase(value, "chunked");
      if (!out.chunked && !EqualsIgnoreCase(value, "identity")) {
        return Status::Unsupported("HTTP Transfer-Encoding '" + std::string(value) + "'");
      }
    }
  }
  return out;
}

// Incremental decoding of a chunked body: Feed appends bytes, Next takes the next whole chunk.
class ChunkReader {
 public:
  void Feed(std::string_view bytes) { in_.append(bytes); }
  // The next chunk's data (empty with *end set at the last chunk), nullopt until one is whole.
  Result<std::optional<std::string>> Next(bool* end) {
    *end = false;
    const size_t eol = in_.find("\r\n");
    if (eol == std::string::npos) {
      if (in_.size() > 64) return Status::Corruption("bad HTTP chunk header");
      return std::optional<std::string>();
    }
    std::string_view size_text = std::string_view(in_).substr(0, eol);
    size_text = size_text.substr(0, size_text.find(';'));
    size_t size = 0;
    const auto r = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (size_text.empty() || r.ec != std::errc() || r.ptr != size_text.data() + size_text.size()) {
      return Status::Corruption("bad HTTP chunk size '" + std::string(size_text.substr(0, 32)) +
                                "'");
    }
    if (size == 0) {
      *end = true;
      return std::optional<std::string>(std::string());
    }
    if (in_.size() < eol + 2 + size + 2) return std::optional<std::string>();
    if (in_.compare(eol + 2 + size, 2, "\r\n") != 0) {
      return Status::Corruption("HTTP chunk not followed by CRLF");
    }
    std::string data = in_.substr(eol + 2, size);
    in_.erase(0, eol + 2 + size + 2);
    return std::optional<std::string>(std::move(data));
  }

 private:
  std::string in_;
};

// Decodes a whole chunked body: the body, or nullopt when it is cut short.
Result<std::optional<std::string>> DecodeChunked(std::string_view in) {
  ChunkReader reader;
  reader.Feed(in);
  std::string body;
  for (;;) {
    bool end = false;
    FC_ASSIGN_OR_RETURN(std::optional<std::string> chunk, reader.Next(&end));
    if (!chunk) return std::optional<std::string>();
    if (end) return std::optional<std::string>(std::move(body));  // trailers ignored
    body.append(*chunk);
  }
}

}  // namespace

std::string HostPort::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<HostPort> ParseHostPort(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("address '" + std::string(text) + "' must be HOST:PORT (" +
                                   std::string(why) + ")");
  };
  HostPort out;
  std::string_view port;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("an IPv6 address is written [ADDRESS]:PORT");
    }
    out.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    out.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) return bad("an IPv6 address needs brackets");
  }
  if (out.host.empty()) return bad("no host; 0.0.0.0 is every IPv4 address");
  for (const char c : out.host) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '/' || c == '[' || c == ']') {
      return bad("the host holds '" + std::string(1, c) + "'");
    }
  }
  uint32_t value = 0;
  const auto r = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || r.ec != std::errc() || r.ptr != port.data() + port.size() || value > 65535) {
    return bad("the port must be 0 to 65535");
  }
  out.port = static_cast<uint16_t>(value);
  return out;
}

namespace {

std::string RequestText(const HostPort& at, std::string_view method, std::string_view path,
                        std::string_view accept, std::string_view body,
                        std::string_view content_type) {
  std::string request =
      std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: " + at.ToString() +
      "\r\nAccept: " + std::string(accept) + "\r\nUser-Agent: flatcake\r\nConnection: close\r\n";
  if (method != "GET") {
    request += "Content-Type: " + std::string(content_type) +
               "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n";
  request.append(body);
  return request;
}

Result<HttpResponse> Exchange(const HostPort& at, const std::string& request,
                              const Deadline& deadline, size_t max_body_bytes) {
  FC_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(at, deadline));
  FC_RETURN_IF_ERROR(SendAll(fd.get(), request, deadline));

  std::string in;
  std::optional<ResponseHead> head;
  size_t body_start = 0;
  char buf[16 << 10];
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return Status::FromErrno(errno, "reading the HTTP response from " + at.ToString());
      }
      FC_RETURN_IF_ERROR(WaitReady(fd.get(), POLLIN, deadline, "reading the HTTP response"));
      continue;
    }
    const bool eof = n == 0;
    in.append(buf, static_cast<size_t>(n));
    if (!head) {
      const size_t blank = in.find("\r\n\r\n");
      if (blank == std::string::npos) {
        if (in.size() > kMaxHeaderBytes) return Status::Corruption("HTTP headers too long");
        if (eof) return Status::Corruption("connection closed inside the HTTP response's headers");
        continue;
      }
      FC_ASSIGN_OR_RETURN(head, ParseHead(std::string_view(in).substr(0, blank)));
      body_start = blank + 4;
    }
    const std::string_view body = std::string_view(in).substr(body_start);
    if (body.size() > max_body_bytes + kMaxHeaderBytes) {  // room for chunk framing
      return Status::NoSpace("HTTP response body past " + std::to_string(max_body_bytes) +
                             " bytes");
    }
    HttpResponse out{head->status, head->content_type, {}};
    if (head->content_length && !head->chunked) {
      if (*head->content_length > max_body_bytes) {
        return Status::NoSpace("HTTP response body of " + std::to_string(*head->content_length) +
                               " bytes, past " + std::to_string(max_body_bytes));
      }
      if (body.size() >= *head->content_length) {
        out.body = std::string(body.substr(0, *head->content_length));
        return out;
      }
    }
    if (!eof) continue;
    // The server closes the connection after the response (Connection: close).
    if (head->chunked) {
      FC_ASSIGN_OR_RETURN(std::optional<std::string> decoded, DecodeChunked(body));
      if (!decoded) return Status::Corruption("connection closed inside a chunked HTTP body");
      if (decoded->size() > max_body_bytes) {
        return Status::NoSpace("HTTP response body past " + std::to_string(max_body_bytes) +
                               " bytes");
      }
      out.body = std::move(*decoded);
      return out;
    }
    if (head->content_length) {
      return Status::Corruption("connection closed after " + std::to_string(body.size()) + " of " +
                                std::to_string(*head->content_length) +
                                " bytes of the HTTP response's body");
    }
    out.body = std::string(body);
    return out;
  }
}

}  // namespace

Result<HttpResponse> HttpGet(const HostPort& at, std::string_view path,
                             std::chrono::milliseconds timeout, size_t max_body_bytes) {
  const Deadline deadline(timeout);
  return Exchange(at, RequestText(at, "GET", path, "text/plain", {}, {}), deadline, max_body_bytes);
}

Result<HttpResponse> HttpPost(const HostPort& at, std::string_view path, std::string_view body,
                              std::string_view content_type, std::chrono::milliseconds timeout,
                              size_t max_body_bytes) {
  const Deadline deadline(timeout);
  return Exchange(at, RequestText(at, "POST", path, "*/*", body, content_type), deadline,
                  max_body_bytes);
}

Status HttpPostStream(const HostPort& at, std::string_view path, std::string_view body,
                      std::string_view content_type, std::chrono::milliseconds connect_timeout,
                      const std::atomic<bool>& stop,
                      const std::function<bool(std::string_view)>& on_data) {
  const Deadline connect_deadline(connect_timeout);
  FC_ASSIGN_OR_RETURN(UniqueFd fd, ConnectTcp(at, connect_deadline));
  FC_RETURN_IF_ERROR(SendAll(fd.get(), RequestText(at, "POST", path, "*/*", body, content_type),
                             connect_deadline));
  std::string in;
  std::optional<ResponseHead> head;
  ChunkReader chunks;
  char buf[16 << 10];
  for (;;) {
    if (stop.load(std::memory_order_acquire)) return Status::OK();
    pollfd p{fd.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);  // wakes to look at `stop`
    if (ready < 0 && errno != EINTR) return Status::FromErrno(errno, "waiting on the HTTP stream");
    if (ready <= 0) continue;
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return Status::FromErrno(errno, "reading the HTTP stream from " + at.ToString());
    }
    if (n == 0) {
      if (!head) return Status::Corruption("connection closed inside the HTTP response's headers");
      return head->chunked ? Status::IOError("HTTP stream from " + at.ToString() + " cut short")
                           : Status::OK();
    }
    std::string_view data(buf, static_cast<size_t>(n));
    if (!head) {
      in.append(data);
      const size_t blank = in.find("\r\n\r\n");
      if (blank == std::string::npos) {
        if (in.size() > kMaxHeaderBytes) return Status::Corruption("HTTP headers too long");
        continue;
      }
      FC_ASSIGN_OR_RETURN(head, ParseHead(std::string_view(in).substr(0, blank)));
      if (head->status != 200) {
        return Status::IOError("HTTP " + std::to_string(head->status) + " from " + at.ToString() +
                               std::string(path) + ": " + in.substr(blank + 4, 200));
      }
      in.erase(0, blank + 4);
      data = in;
    }
    if (!head->chunked) {
      if (!data.empty() && !on_data(data)) return Status::OK();
      in.clear();
      continue;
    }
    chunks.Feed(data);
    in.clear();
    for (;;) {
      bool end = false;
      FC_ASSIGN_OR_RETURN(std::optional<std::string> chunk, chunks.Next(&end));
      if (end) return Status::OK();
      if (!chunk) break;
      if (!on_data(*chunk)) return Status::OK();
    }
  }
}

}  // namespace flatcake::serve
