// A reader of the Prometheus text exposition format (version 0.0.4), as the daemon's metrics
// endpoint serves it (docs/serve.md) and `flatcake stats` reads it back.
//
// The format, line by line: blank lines; "# HELP name text" (text escapes \\ and \n);
// "# TYPE name counter|gauge|histogram|summary|untyped"; other "#" lines are comments; and
// samples, `name{label="value",...} value [timestamp_ms]`, with label values escaping \\, \" and
// \n, values as floats or NaN, +Inf, -Inf (any case). A histogram `h` is its samples h_bucket
// (one per upper bound, label le, cumulative), h_sum and h_count.
//
// Parsing checks every line and refuses the text at the first malformed one, naming its number
// and what is wrong: a bad metric or label name, a missing '=' or quote, an unknown escape, a
// label repeated in a sample, a value that is not a number, a second TYPE for a name or a TYPE
// after its samples, an unknown type.
//
// A parsed PromText is immutable: safe to read from any number of threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flatcake/status.h"

namespace flatcake::serve {

struct PromSample {
  std::string name;  // the sample's own name: "flatcake_restore_seconds_bucket"
  std::vector<std::pair<std::string, std::string>> labels;  // in the text's order
  double value = 0;
  std::optional<int64_t> timestamp_ms;

  // The value of label `name`, or nullopt.
  std::optional<std::string_view> Label(std::string_view name) const;
};

struct PromFamily {
  std::string type = "untyped";  // from its TYPE line
  std::string help;              // from its HELP line, unescaped
};

// The samples of one upper bound of a histogram: observations <= le (cumulative).
struct HistogramBucket {
  double le = 0;  // +infinity for the last
  double count = 0;
};

// Label constraints for the queries below, {{"medium", "dram"}}: each pair's label has that
// value.
using LabelMatch = std::initializer_list<std::pair<std::string_view, std::string_view>>;

class PromText {
 public:
  // Corruption "metrics text line N: <what>" for a malformed line.
  static Result<PromText> Parse(std::string_view text);

  const std::vector<PromSample>& samples() const { return samples_; }
  // The TYPE and HELP of family `name` (a histogram's base name), or nullptr when neither was
  // given.
  const PromFamily* family(std::string_view name) const;
  // Every family a TYPE or HELP line named, by name.
  const std::map<std::string, PromFamily, std::less<>>& families() const { return families_; }

  // The samples named `name` whose labels include every pair of `match`.
  std::vector<const PromSample*> Select(std::string_view name, LabelMatch match = {}) const;
  // The sum of their values; 0 when there are none.
  double Sum(std::string_view name, LabelMatch match = {}) const;
  // The distinct values of label `label` among the samples named `name`, sorted.
  std::vector<std::string> LabelValues(std::string_view name, std::string_view label) const;
  // The buckets of histogram `name` (its name_bucket samples matching `match`), by increasing
  // le, counts summed over the samples' other labels.
  std::vector<HistogramBucket> Buckets(std::string_view name, LabelMatch match = {}) const;

 private:
  std::vector<PromSample> samples_;
  std::map<std::string, PromFamily, std::less<>> families_;
};

// The q-quantile (0 <= q <= 1) of the observations a histogram's buckets count, estimated as
// PromQL's histogram_quantile does: linearly within the bucket that holds it (from 0 for the
// first bucket), the largest finite bound when it falls in the +Inf bucket. NaN without
// observations.
double HistogramQuantile(std::span<const HistogramBucket> buckets, double q);

}  // namespace flatcake::serve
