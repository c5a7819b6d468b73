// The Prometheus text reader on good input (comments, HELP and TYPE, escapes, special values,
// timestamps, histograms) and on each kind of malformed line, and the quantile estimate.
#include "serve/prom_text.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/param_names.h"

namespace flatcake::serve {
namespace {

constexpr char kGood[] = R"(# A comment line, then a blank one.

# HELP flatcake_used_bytes Bytes in use \\ on a medium,\nper medium.
# TYPE flatcake_used_bytes gauge
flatcake_used_bytes{medium="dram"} 1024
flatcake_used_bytes{medium="ssd",} 2.5e+06
	flatcake_odd{path="C:\\dir",quote="say \"hi\"",nl="a\nb"} -3 1700000000000
# TYPE flatcake_restore_seconds histogram
flatcake_restore_seconds_bucket{medium="ssd",le="0.001"} 1
flatcake_restore_seconds_bucket{medium="ssd",le="0.01"} 3
flatcake_restore_seconds_bucket{medium="ssd",le="+Inf"} 4
flatcake_restore_seconds_sum{medium="ssd"} 0.5
flatcake_restore_seconds_count{medium="ssd"} 4
flatcake_restore_seconds_bucket{medium="dram",le="0.001"} 2
flatcake_restore_seconds_bucket{medium="dram",le="0.01"} 2
flatcake_restore_seconds_bucket{medium="dram",le="+Inf"} 2
exposer_request_latencies{quantile="0.5"} Nan
up +Inf
down -inf
no_labels_spaced   { }   7
windows_line 1
)";

TEST(PromText, ReadsEveryPartOfTheFormat) {
  std::string text = kGood;
  text.insert(text.find("windows_line 1") + 14, "\r");
  const Result<PromText> r = PromText::Parse(text);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const PromText& t = *r;
  ASSERT_NE(t.family("flatcake_used_bytes"), nullptr);
  EXPECT_EQ(t.family("flatcake_used_bytes")->type, "gauge");
  EXPECT_EQ(t.family("flatcake_used_bytes")->help, "Bytes in use \\ on a medium,\nper medium.");
  EXPECT_EQ(t.family("flatcake_restore_seconds")->type, "histogram");
  EXPECT_EQ(t.family("nothing"), nullptr);
  EXPECT_EQ(t.Sum("flatcake_used_bytes", {{"medium", "dram"}}), 1024);
  EXPECT_EQ(t.Sum("flatcake_used_bytes", {{"medium", "ssd"}}), 2.5e6);
  EXPECT_EQ(t.Sum("flatcake_used_bytes"), 1024 + 2.5e6);
  EXPECT_EQ(t.Sum("flatcake_used_bytes", {{"medium", "hbm"}}), 0);
  const std::vector<const PromSample*> odd = t.Select("flatcake_odd");
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_EQ(odd[0]->Label("path"), "C:\\dir");
  EXPECT_EQ(odd[0]->Label("quote"), "say \"hi\"");
  EXPECT_EQ(odd[0]->Label("nl"), "a\nb");
  EXPECT_FALSE(odd[0]->Label("none"));
  EXPECT_EQ(odd[0]->value, -3);
  EXPECT_EQ(odd[0]->timestamp_ms, 1700000000000);
  EXPECT_TRUE(std::isnan(t.Select("exposer_request_latencies")[0]->value));
  EXPECT_EQ(t.Sum("up"), INFINITY);
  EXPECT_EQ(t.Sum("down"), -INFINITY);
  EXPECT_EQ(t.Sum("no_labels_spaced"), 7);
  EXPECT_EQ(t.Sum("windows_line"), 1);
  EXPECT_EQ(t.LabelValues("flatcake_restore_seconds_bucket", "medium"),
            (std::vector<std::string>{"dram", "ssd"}));

  const std::vector<HistogramBucket> ssd =
      t.Buckets("flatcake_restore_seconds", {{"medium", "ssd"}});
  ASSERT_EQ(ssd.size(), 3u);
  EXPECT_EQ(ssd[0].le, 0.001);
  EXPECT_EQ(ssd[1].count, 3);
  EXPECT_TRUE(std::isinf(ssd[2].le));
  // Summed over the other labels.
  const std::vector<HistogramBucket> all = t.Buckets("flatcake_restore_seconds");
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].count, 3);
  EXPECT_EQ(all[2].count, 6);
}

TEST(PromText, HistogramQuantileInterpolatesAsPromQlDoes) {
  const std::vector<HistogramBucket> b = {{0.001, 1}, {0.01, 3}, {INFINITY, 4}};
  // Rank 2 of 4 lies halfway through the second bucket (1 below, 2 inside).
  EXPECT_DOUBLE_EQ(HistogramQuantile(b, 0.5), 0.001 + (0.01 - 0.001) * 0.5);
  // Rank 0.4 in the first bucket, which starts at 0.
  EXPECT_DOUBLE_EQ(HistogramQuantile(b, 0.1), 0.001 * 0.4);
  // In the +Inf bucket: the largest finite bound.
  EXPECT_DOUBLE_EQ(HistogramQuantile(b, 0.99), 0.01);
  EXPECT_DOUBLE_EQ(HistogramQuantile(b, 1), 0.01);
  EXPECT_TRUE(std::isnan(HistogramQuantile({}, 0.5)));
  const std::vector<HistogramBucket> empty = {{0.001, 0}, {INFINITY, 0}};
  EXPECT_TRUE(std::isnan(HistogramQuantile(empty, 0.5)));
  EXPECT_TRUE(std::isnan(HistogramQuantile(b, 1.5)));
  // Empty buckets before the rank are skipped.
  const std::vector<HistogramBucket> gap = {{0.001, 0}, {0.01, 0}, {0.1, 10}, {INFINITY, 10}};
  EXPECT_DOUBLE_EQ(HistogramQuantile(gap, 0.5), 0.01 + (0.1 - 0.01) * 0.5);
  // All observations past the last finite bound.
  const std::vector<HistogramBucket> over = {{0.001, 0}, {INFINITY, 5}};
  EXPECT_DOUBLE_EQ(HistogramQuantile(over, 0.5), 0.001);
}

struct Bad {
  const char* what;
  const char* text;
  const char* message_has;
};

class PromTextMalformed : public ::testing::TestWithParam<Bad> {};

TEST_P(PromTextMalformed, IsRefusedNamingTheLine) {
  const Bad& b = GetParam();
  const Result<PromText> r = PromText::Parse(b.text);
  ASSERT_FALSE(r.ok()) << b.what;
  EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  EXPECT_NE(r.status().message().find(b.message_has), std::string_view::npos)
      << b.what << ": " << r.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PromTextMalformed,
    ::testing::Values(
        Bad{"no value", "ok 1\nmetric\n", "line 2: the value of metric must be a number"},
        Bad{"a value that is no number", "m 12abc\n", "line 1: the value of m must be a number"},
        Bad{"a bad metric name", "1metric 3\n", "line 1: a sample must start with a metric name"},
        Bad{"a bad label name", "m{1a=\"x\"} 1\n", "bad label name"},
        Bad{"no '=' after a label", "m{a \"x\"} 1\n", "expected '=' after label a"},
        Bad{"an unquoted label value", "m{a=x} 1\n", "must be quoted"},
        Bad{"an unterminated label value", "m{a=\"x} 1\n", "closing quote is missing"},
        Bad{"an unknown escape", "m{a=\"\\t\"} 1\n", "unknown escape '\\t'"},
        Bad{"labels not closed", "m{a=\"x\" b=\"y\"} 1\n", "expected ',' or '}'"},
        Bad{"a label repeated", "m{a=\"x\",a=\"y\"} 1\n", "label a repeated"},
        Bad{"trailing garbage", "m 1 2 3\n", "only a timestamp"},
        Bad{"a timestamp that is no integer", "m 1 1.5\n", "only a timestamp"},
        Bad{"an unknown type", "# TYPE m countr\nm 1\n", "TYPE of m must be counter"},
        Bad{"a TYPE without a name", "# TYPE\n", "TYPE line without a valid metric name"},
        Bad{"a second TYPE", "# TYPE m gauge\n# TYPE m gauge\n", "a second TYPE line for m"},
        Bad{"a TYPE after its samples", "m 1\n# TYPE m gauge\n", "TYPE line for m after"},
        Bad{"a TYPE after its histogram samples", "h_bucket{le=\"1\"} 1\n# TYPE h histogram\n",
            "TYPE line for h after"},
        Bad{"a second HELP", "# HELP m a\n# HELP m b\n", "a second HELP line for m"},
        Bad{"a bad escape in HELP", "# HELP m a \\q\n", "unknown escape"},
        Bad{"a bucket without le", "# TYPE h histogram\nh_bucket{x=\"1\"} 1\n",
            "needs a numeric label le"},
        Bad{"a bucket with a bad le", "# TYPE h histogram\nh_bucket{le=\"big\"} 1\n",
            "needs a numeric label le"}),
    testing::CaseWhatParamName<Bad>);

TEST(PromText, EmptyTextHasNoSamples) {
  const Result<PromText> r = PromText::Parse("");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->samples().empty());
  EXPECT_EQ(r->Sum("anything"), 0);
}

}  // namespace
}  // namespace flatcake::serve
