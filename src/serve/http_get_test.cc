// The metrics endpoint's HTTP client against a one-connection server that answers canned bytes:
// each body framing, cut-short and non-HTTP answers, timeouts, nobody listening; and HOST:PORT.
#include "serve/http_get.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <thread>

#include "testing/param_names.h"
#include "util/unique_fd.h"

namespace flatcake::serve {
namespace {

using namespace std::chrono_literals;

// Listens on a free port of 127.0.0.1; Serve answers one connection with `reply` after reading
// its request, then closes it (unless `hold`: then it keeps it open until destroyed).
class CannedServer {
 public:
  CannedServer() {
    fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_.get(), 4), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~CannedServer() {
    release_ = true;
    if (thread_.joinable()) thread_.join();
  }

  void Serve(std::string reply, bool hold = false) {
    thread_ = std::thread([this, reply = std::move(reply), hold] {
      UniqueFd conn(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      std::string in;
      char buf[4096];
      while (in.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(conn.get(), buf, sizeof(buf), 0);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      request_ = in;
      ::send(conn.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
      while (hold && !release_) std::this_thread::sleep_for(5ms);
    });
  }

  HostPort at() const { return {"127.0.0.1", port_}; }
  const std::string& request() const { return request_; }  // after the GET returned

 private:
  UniqueFd fd_;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> release_{false};
  std::string request_;
};

TEST(HttpGet, ReadsABodyWithContentLength) {
  CannedServer server;
  // Held open after the body: the client stops at Content-Length.
  server.Serve(
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\ncontent-length: 5\r\n\r\n"
      "hello",
      /*hold=*/true);
  const Result<HttpResponse> r = HttpGet(server.at(), "/metrics", 5s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->content_type, "text/plain; version=0.0.4");
  EXPECT_EQ(r->body, "hello");
  EXPECT_TRUE(server.request().starts_with("GET /metrics HTTP/1.1\r\n"));
  EXPECT_NE(server.request().find("Host: 127.0.0.1:"), std::string::npos);
  EXPECT_NE(server.request().find("Connection: close"), std::string::npos);
}

TEST(HttpGet, ReadsAChunkedBody) {
  CannedServer server;
  server.Serve(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4\r\nflat\r\n5;ext=1\r\ncake!\r\n0\r\n\r\n");
  const Result<HttpResponse> r = HttpGet(server.at(), "/metrics", 5s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "flatcake!");
}

TEST(HttpGet, ReadsABodyUpToTheEndOfTheStream) {
  CannedServer server;
  server.Serve("HTTP/1.0 404 Not Found\r\n\r\nno such page");
  const Result<HttpResponse> r = HttpGet(server.at(), "/x", 5s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "no such page");
}

struct BadReply {
  const char* what;
  const char* reply;
  StatusCode code;
  const char* message_has;
};

class HttpGetBadReply : public ::testing::TestWithParam<BadReply> {};

TEST_P(HttpGetBadReply, IsAnError) {
  const BadReply& b = GetParam();
  CannedServer server;
  server.Serve(b.reply);
  const Result<HttpResponse> r = HttpGet(server.at(), "/metrics", 5s, /*max_body_bytes=*/64);
  ASSERT_FALSE(r.ok()) << b.what;
  EXPECT_EQ(r.status().code(), b.code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(b.message_has), std::string_view::npos)
      << r.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HttpGetBadReply,
    ::testing::Values(
        BadReply{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", StatusCode::kCorruption, "not an HTTP"},
        BadReply{"a bad status", "HTTP/1.1 2x0 OK\r\n\r\n", StatusCode::kCorruption,
                 "bad HTTP status line"},
        BadReply{"a bad header", "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", StatusCode::kCorruption,
                 "bad HTTP header"},
        BadReply{"headers cut short", "HTTP/1.1 200 OK\r\nContent-", StatusCode::kCorruption,
                 "inside the HTTP response's headers"},
        BadReply{"a body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
                 StatusCode::kCorruption, "after 3 of 10 bytes"},
        BadReply{"a bad Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
                 StatusCode::kCorruption, "bad Content-Length"},
        BadReply{"a chunked body cut short",
                 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
                 StatusCode::kCorruption, "inside a chunked HTTP body"},
        BadReply{"a bad chunk size",
                 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
                 StatusCode::kCorruption, "bad HTTP chunk size"},
        BadReply{"an unknown transfer encoding",
                 "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", StatusCode::kUnsupported,
                 "gzip"},
        BadReply{"a body past the limit", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
                 StatusCode::kNoSpace, "past 64"}),
    testing::CaseWhatParamName<BadReply>);

TEST(HttpGet, TimesOutOnAServerThatDoesNotAnswer) {
  CannedServer server;
  server.Serve("", /*hold=*/true);
  const Result<HttpResponse> r = HttpGet(server.at(), "/metrics", 200ms);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
}

TEST(HttpGet, NamesTheAddressNobodyListensOn) {
  uint16_t port = 0;
  {
    CannedServer closed;  // a port that was free a moment ago
    port = closed.at().port;
  }
  const Result<HttpResponse> r = HttpGet({"127.0.0.1", port}, "/metrics", 2s);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsIOError()) << r.status().ToString();
  EXPECT_NE(r.status().message().find("cannot connect to 127.0.0.1:" + std::to_string(port)),
            std::string_view::npos)
      << r.status().ToString();
  const Result<HttpResponse> unknown = HttpGet({"no-such-host.invalid", 80}, "/", 2s);
  EXPECT_TRUE(unknown.status().IsIOError()) << unknown.status().ToString();
}

TEST(HostPort, ParsesAndPrints) {
  EXPECT_EQ(ParseHostPort("127.0.0.1:9464")->host, "127.0.0.1");
  EXPECT_EQ(ParseHostPort("127.0.0.1:9464")->port, 9464);
  EXPECT_EQ(ParseHostPort("localhost:0")->port, 0);
  EXPECT_EQ(ParseHostPort("[::1]:80")->host, "::1");
  EXPECT_EQ(ParseHostPort("[::1]:80")->ToString(), "[::1]:80");
  EXPECT_EQ(ParseHostPort("0.0.0.0:65535")->ToString(), "0.0.0.0:65535");
  for (const char* bad : {"", "9464", ":9464", "host:", "host:65536", "host:-1", "host:9x",
                          "::1:80", "[::1]80", "[::1", "a b:1", "a/b:1"}) {
    const Result<HostPort> r = ParseHostPort(bad);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << "'" << bad << "'";
    EXPECT_NE(r.status().message().find("HOST:PORT"), std::string_view::npos);
  }
}

}  // namespace
}  // namespace flatcake::serve
