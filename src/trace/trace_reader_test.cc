#include <gtest/gtest.h>

#include "testing/trace_files.h"
#include "trace/json_scan.h"
#include "trace/line_reader.h"
#include "trace/trace.h"
#include "util/temp_dir.h"

namespace flatcake::trace {
namespace {

const char kMooncake[] =
    "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
    "\n"
    "{\"timestamp\": 1500, \"input_length\": 1100, \"output_length\": 7, \"hash_ids\": [0, 1, 2],"
    " \"extra\": {\"nested\": [1, \"x\", null, true]}}\r\n"
    "{\"hash_ids\": [], \"output_length\": 0, \"input_length\": 0, \"timestamp\": 2500.5, "
    "\"session_id\": 4, \"turn\": 2, \"parent\": 1}";  // no trailing newline

std::vector<TraceRequest> ReadAll(const std::string& path, ReaderOptions o = {}) {
  auto r = ReadTrace(path, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<TraceRequest>{};
}

TEST(LineReader, SameLinesFromPlainGzipAndZstd) {
  TempDir dir("flatcake-trace-test");
  ASSERT_TRUE(dir.ok());
  std::string big(3 << 20, 'x');  // longer than one read chunk
  std::string text = "a\r\nbb\n\n" + big + "\nlast";
  testing::WritePlain(dir.File("p"), text);
  testing::WriteGzip(dir.File("g"), text);
  testing::WriteZstd(dir.File("z"), text);
  for (const char* name : {"p", "g", "z"}) {
    auto lr = LineReader::Open(dir.File(name));
    ASSERT_TRUE(lr.ok()) << lr.status().ToString();
    std::vector<std::string> lines;
    std::string_view line;
    for (;;) {
      auto more = (*lr)->ReadLine(&line);
      ASSERT_TRUE(more.ok()) << more.status().ToString();
      if (!*more) break;
      lines.emplace_back(line);
    }
    ASSERT_EQ(lines.size(), 5u) << name;
    EXPECT_EQ(lines[0], "a");
    EXPECT_EQ(lines[1], "bb");
    EXPECT_EQ(lines[2], "");
    EXPECT_EQ(lines[3].size(), big.size());
    EXPECT_EQ(lines[4], "last");
    EXPECT_EQ((*lr)->line_number(), 5u);
  }
  EXPECT_EQ((*LineReader::Open(dir.File("g")))->compression(), Compression::kGzip);
  EXPECT_EQ((*LineReader::Open(dir.File("z")))->compression(), Compression::kZstd);
}

TEST(LineReader, TruncatedCompressedStreamsAreErrors) {
  TempDir dir("flatcake-trace-test");
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i * 7919) + "\n";
  std::string z = testing::ZstdBytes(text);
  testing::WritePlain(dir.File("z"), z.substr(0, z.size() / 2));
  testing::WriteGzip(dir.File("g_full"), text);
  auto lr = LineReader::Open(dir.File("g_full"));
  ASSERT_TRUE(lr.ok());
  {
    // Cut the gzip file in half.
    std::FILE* f = std::fopen(dir.File("g_full").c_str(), "rb");
    std::string bytes(1 << 20, '\0');
    bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
    std::fclose(f);
    testing::WritePlain(dir.File("g"), bytes.substr(0, bytes.size() / 2));
  }
  for (const char* name : {"z", "g"}) {
    auto r = LineReader::Open(dir.File(name));
    ASSERT_TRUE(r.ok());
    Status err;
    std::string_view line;
    for (;;) {
      auto more = (*r)->ReadLine(&line);
      if (!more.ok()) {
        err = more.status();
        break;
      }
      if (!*more) break;
    }
    EXPECT_TRUE(err.IsCorruption()) << name << ": " << err.ToString();
  }
  EXPECT_TRUE(LineReader::Open(dir.File("missing")).status().IsNotFound());
}

TEST(JsonCursor, ParsesAndRejects) {
  std::vector<uint64_t> ids;
  JsonCursor a(" [1, 2 ,3e0, 40.0] ");
  ASSERT_TRUE(a.ParseUintArray(&ids).ok());
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 40}));
  EXPECT_TRUE(a.ExpectEnd().ok());
  std::string s;
  JsonCursor b(R"("a\"b\u00e9\n")");
  ASSERT_TRUE(b.ParseString(&s).ok());
  EXPECT_EQ(s, "a\"b\xc3\xa9\n");
  int64_t v = 0;
  JsonCursor c("-17");
  ASSERT_TRUE(c.ParseInt64(&v).ok());
  EXPECT_EQ(v, -17);
  for (const char* bad : {"[1, -2]", "[1.5]", "[1,]", "[1", "[99999999999999999999]", "[\"1\"]"}) {
    JsonCursor d(bad);
    EXPECT_TRUE(d.ParseUintArray(&ids).IsCorruption()) << bad;
  }
  JsonCursor e("{\"a\": [[[{}]]], \"b\": tru}");
  Status st = e.ParseObject([&](std::string_view) { return e.SkipValue(); });
  EXPECT_TRUE(st.IsCorruption());
  EXPECT_NE(st.message().find("column"), std::string::npos);
}

TEST(MooncakeReader, ReadsFieldsFromEveryCompression) {
  TempDir dir("flatcake-trace-test");
  testing::WritePlain(dir.File("m.jsonl"), kMooncake);
  testing::WriteGzip(dir.File("m.jsonl.gz"), kMooncake);
  testing::WriteZstd(dir.File("m.zst"), kMooncake);
  for (const char* name : {"m.jsonl", "m.jsonl.gz", "m.zst"}) {
    auto reqs = ReadAll(dir.File(name));
    ASSERT_EQ(reqs.size(), 3u) << name;
    EXPECT_DOUBLE_EQ(reqs[0].time_s, 0.0);
    EXPECT_EQ(reqs[0].input_tokens, 700u);
    EXPECT_EQ(reqs[0].output_tokens, 5u);
    EXPECT_EQ(reqs[0].block_ids, (std::vector<uint64_t>{0, 1}));
    EXPECT_EQ(reqs[0].block_tokens, 512u);
    EXPECT_EQ(reqs[0].session_id, -1);
    EXPECT_DOUBLE_EQ(reqs[1].time_s, 1.5);
    EXPECT_EQ(reqs[1].block_ids, (std::vector<uint64_t>{0, 1, 2}));
    EXPECT_DOUBLE_EQ(reqs[2].time_s, 2.5005);
    EXPECT_TRUE(reqs[2].block_ids.empty());
    EXPECT_EQ(reqs[2].session_id, 4);
    EXPECT_EQ(reqs[2].turn, 2);
    EXPECT_EQ(reqs[2].parent, 1);
  }
  ReaderOptions o;
  o.block_tokens = 64;
  EXPECT_EQ(ReadAll(dir.File("m.jsonl"), o)[0].block_tokens, 64u);
}

TEST(MooncakeReader, BadLineNamesFileAndLineUnlessSkipped) {
  TempDir dir("flatcake-trace-test");
  std::string good = "{\"timestamp\": 1, \"input_length\": 5, \"hash_ids\": [3]}\n";
  const char* bad_lines[] = {
      "{\"timestamp\": 2, \"input_length\": 5}",                        // missing hash_ids
      "{\"timestamp\": 2, \"input_length\": -5, \"hash_ids\": []}",     // negative length
      "{\"timestamp\": 2, \"input_length\": 5, \"hash_ids\": [1,]}",    // bad array
      "{\"timestamp\": 2, \"input_length\": 5, \"hash_ids\": []} xx",   // trailing garbage
      "{\"timestamp\": \"2\", \"input_length\": 5, \"hash_ids\": []}",  // string time
      "not json at all",
  };
  for (const char* bad : bad_lines) {
    std::string path = dir.File("bad.jsonl");
    testing::WritePlain(path, good + good + bad + "\n" + good);
    ReaderOptions o;
    o.format = TraceFormat::kMooncake;
    auto r = ReadTrace(path, o);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    EXPECT_NE(r.status().message().find(path + ":3: "), std::string::npos) << r.status().ToString();
    o.skip_bad = true;
    auto reader = OpenTrace(path, o);
    ASSERT_TRUE(reader.ok());
    TraceRequest req;
    int n = 0;
    for (;;) {
      auto more = (*reader)->Next(&req);
      ASSERT_TRUE(more.ok()) << more.status().ToString();
      if (!*more) break;
      ++n;
    }
    EXPECT_EQ(n, 3) << bad;
    EXPECT_EQ((*reader)->bad_lines(), 1u);
  }
}

TEST(QwenReader, SessionsFollowParentChains) {
  TempDir dir("flatcake-trace-test");
  std::string text =
      "{\"chat_id\": 10, \"parent_chat_id\": -1, \"timestamp\": 0.25, \"input_length\": 40, "
      "\"output_length\": 3, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [0, 1, 2]}\n"
      "{\"chat_id\": 11, \"parent_chat_id\": -1, \"timestamp\": 0.5, \"input_length\": 16, "
      "\"output_length\": 3, \"type\": \"search\", \"turn\": 1, \"hash_ids\": [5]}\n"
      "{\"chat_id\": 12, \"parent_chat_id\": 10, \"timestamp\": 1.75, \"input_length\": 60, "
      "\"output_length\": 9, \"type\": \"text\", \"turn\": 2, \"hash_ids\": [0, 1, 2, 3]}\n"
      "{\"chat_id\": 13, \"parent_chat_id\": 12, \"timestamp\": 2.0, \"input_length\": 70, "
      "\"output_length\": 9, \"type\": \"text\", \"turn\": 3, \"hash_ids\": [0, 1, 2, 3, 4]}\n";
  testing::WriteGzip(dir.File("q.gz"), text);
  auto reader = OpenTrace(dir.File("q.gz"));
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->format(), TraceFormat::kQwen);
  auto reqs = ReadAll(dir.File("q.gz"));
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_DOUBLE_EQ(reqs[0].time_s, 0.25);
  EXPECT_EQ(reqs[0].block_tokens, 16u);
  EXPECT_EQ(reqs[0].request_id, 10);
  EXPECT_EQ(reqs[0].session_id, 10);
  EXPECT_EQ(reqs[1].session_id, 11);
  EXPECT_EQ(reqs[2].session_id, 10);
  EXPECT_EQ(reqs[2].parent, 10);
  EXPECT_EQ(reqs[3].session_id, 10);
  EXPECT_EQ(reqs[3].turn, 3);
  EXPECT_EQ(reqs[3].output_tokens, 9u);

  testing::WritePlain(dir.File("q_bad"), text + "{\"chat_id\": 14, \"timestamp\": 3}\n");
  auto bad = ReadTrace(dir.File("q_bad"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(":5: missing field \"parent_chat_id\""), std::string::npos)
      << bad.status().ToString();
}

TEST(AgenticReader, ExpandsSortsAndNamespacesLocalIds) {
  TempDir dir("flatcake-trace-test");
  // Two sessions whose local ids both start at 0: with local scope they must not collide.
  std::string text =
      "{\"id\": \"s1\", \"models\": [\"m\"], \"block_size\": 64, \"hash_id_scope\": \"local\", "
      "\"requests\": [{\"t\": 0.0, \"type\": \"main\", \"model\": \"m\", \"in\": 128, "
      "\"out\": 10, \"hash_ids\": [0, 1], \"api_time\": 1.2, \"think_time\": 0.1, \"ttft\": 0.3},"
      " {\"t\": 5.0, \"type\": \"main\", \"model\": \"m\", \"in\": 192, \"out\": 4, "
      "\"hash_ids\": [0, 1, 2]}]}\n"
      "{\"id\": \"s2\", \"block_size\": 64, \"hash_id_scope\": \"local\", \"requests\": ["
      "{\"t\": 2.0, \"in\": 64, \"out\": 1, \"hash_ids\": [0]}, "
      "{\"t\": 6.0, \"in\": 128, \"out\": 1, \"hash_ids\": [0, 1]}]}\n";
  testing::WriteZstd(dir.File("a.zst"), text);
  auto reqs = ReadAll(dir.File("a.zst"));
  ASSERT_EQ(reqs.size(), 4u);
  std::vector<double> times;
  for (const auto& r : reqs) times.push_back(r.time_s);
  EXPECT_EQ(times, (std::vector<double>{0.0, 2.0, 5.0, 6.0}));
  EXPECT_EQ(reqs[0].session_id, 0);
  EXPECT_EQ(reqs[1].session_id, 1);
  EXPECT_EQ(reqs[2].turn, 2);
  EXPECT_EQ(reqs[0].block_tokens, 64u);
  EXPECT_EQ(reqs[0].block_ids, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(reqs[2].block_ids, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(reqs[1].block_ids, (std::vector<uint64_t>{3}));  // s2's local 0, renamed
  EXPECT_EQ(reqs[3].block_ids, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(reqs[3].input_tokens, 128u);

  // Global scope keeps equal ids equal across sessions.
  std::string global = text;
  for (size_t p; (p = global.find("\"local\"")) != std::string::npos;) {
    global.replace(p, 7, "\"global\"");
  }
  testing::WritePlain(dir.File("g.jsonl"), global);
  auto g = ReadAll(dir.File("g.jsonl"));
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[1].block_ids, (std::vector<uint64_t>{0}));
  EXPECT_EQ(g[3].block_ids, (std::vector<uint64_t>{0, 1}));

  // A bad session line names its line; --skip-bad drops the whole session.
  testing::WritePlain(dir.File("bad"), text + "{\"id\": 3, \"requests\": [{\"t\": 1}]}\n");
  auto bad = ReadTrace(dir.File("bad"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir.File("bad") + ":3: "), std::string::npos)
      << bad.status().ToString();
  ReaderOptions skip;
  skip.skip_bad = true;
  EXPECT_EQ(ReadAll(dir.File("bad"), skip).size(), 4u);
}

TEST(TraceFormat, DetectionAndOverride) {
  EXPECT_EQ(*DetectTraceFormat("{\"timestamp\": 0, \"hash_ids\": []}"), TraceFormat::kMooncake);
  EXPECT_EQ(*DetectTraceFormat("{\"chat_id\": 1, \"hash_ids\": []}"), TraceFormat::kQwen);
  EXPECT_EQ(*DetectTraceFormat("{\"id\": 1, \"requests\": []}"), TraceFormat::kAgentic);
  EXPECT_FALSE(DetectTraceFormat("{\"foo\": 1}").ok());
  EXPECT_FALSE(DetectTraceFormat("[1,2]").ok());
  EXPECT_EQ(*ParseTraceFormat("bailian"), TraceFormat::kQwen);
  EXPECT_TRUE(ParseTraceFormat("csv").status().IsInvalidArgument());

  TempDir dir("flatcake-trace-test");
  testing::WritePlain(dir.File("m"), kMooncake);
  ReaderOptions o;
  o.format = TraceFormat::kQwen;  // explicit override wins: the Mooncake lines lack chat_id
  auto r = ReadTrace(dir.File("m"), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("chat_id"), std::string::npos);
  testing::WritePlain(dir.File("garbage"), "{\"x\": 1}\n");
  auto g = OpenTrace(dir.File("garbage"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(dir.File("garbage") + ":1: "), std::string::npos);
}

TEST(SharedTraces, ReadThroughTheReader) {
  FC_REQUIRE_SHARED_TRACES(dir);
  auto conv = ReadAll(dir + "/mooncake_conversation_trace.jsonl");
  ASSERT_EQ(conv.size(), 12031u);
  EXPECT_EQ(conv.front().input_tokens, 6758u);
  EXPECT_EQ(conv.front().block_ids.size(), 14u);
  EXPECT_DOUBLE_EQ(conv.back().time_s, 3536.999);
  for (const auto& r : conv) {
    ASSERT_EQ(r.block_ids.size(), (r.input_tokens + 511) / 512);
  }
  EXPECT_EQ(ReadAll(dir + "/mooncake_synthetic_trace.jsonl").size(), 3993u);
}

}  // namespace
}  // namespace flatcake::trace
