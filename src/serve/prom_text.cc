#include "serve/prom_text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

namespace flatcake::serve {
namespace {

constexpr std::string_view kTypes[] = {"counter", "gauge", "histogram", "summary", "untyped"};
constexpr std::string_view kFamilySuffixes[] = {"_bucket", "_sum", "_count"};

bool IsNameStart(char c, bool colon_ok) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
}
bool IsNameChar(char c, bool colon_ok) {
  return IsNameStart(c, colon_ok) || (c >= '0' && c <= '9');
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// A float as the format writes one; nullopt if `token` is not one.
std::optional<double> ParseValue(std::string_view token) {
  if (EqualsIgnoreCase(token, "nan")) return std::numeric_limits<double>::quiet_NaN();
  if (EqualsIgnoreCase(token, "+inf") || EqualsIgnoreCase(token, "inf")) {
    return std::numeric_limits<double>::infinity();
  }
  if (EqualsIgnoreCase(token, "-inf")) return -std::numeric_limits<double>::infinity();
  if (token.starts_with('+')) token.remove_prefix(1);
  double v = 0;
  const auto r = std::from_chars(token.data(), token.data() + token.size(), v);
  if (token.empty() || r.ec != std::errc() || r.ptr != token.data() + token.size() ||
      !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

// Reads one line; errors are the line's, without its number (the caller adds it).
class LineReader {
 public:
  explicit LineReader(std::string_view line) : rest_(line) {}

  void SkipSpace() {
    while (!rest_.empty() && (rest_.front() == ' ' || rest_.front() == '\t'))
      rest_.remove_prefix(1);
  }
  bool AtEnd() const { return rest_.empty(); }
  bool Take(char c) {
    if (rest_.empty() || rest_.front() != c) return false;
    rest_.remove_prefix(1);
    return true;
  }
  char Peek() const { return rest_.empty() ? '\0' : rest_.front(); }
  // A metric name (colon_ok) or a label name; empty when none starts here.
  std::string_view Name(bool colon_ok) {
    if (rest_.empty() || !IsNameStart(rest_.front(), colon_ok)) return {};
    size_t n = 1;
    while (n < rest_.size() && IsNameChar(rest_[n], colon_ok)) ++n;
    const std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }
  // Characters up to the next space or tab.
  std::string_view Token() {
    size_t n = 0;
    while (n < rest_.size() && rest_[n] != ' ' && rest_[n] != '\t') ++n;
    const std::string_view out = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return out;
  }
  // The rest of the line, unescaping \\ and \n, and \" too when `quoted` (then it ends at the
  // closing quote, which is consumed).
  Result<std::string> Text(bool quoted) {
    std::string out;
    while (!rest_.empty()) {
      const char c = rest_.front();
      rest_.remove_prefix(1);
      if (quoted && c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (rest_.empty()) return Status::Corruption("a backslash ends the line");
      const char e = rest_.front();
      rest_.remove_prefix(1);
      if (e == '\\') {
        out += '\\';
      } else if (e == 'n') {
        out += '\n';
      } else if (e == '"' && quoted) {
        out += '"';
      } else {
        return Status::Corruption(std::string("unknown escape '\\") + e + "'");
      }
    }
    if (quoted) return Status::Corruption("a label value's closing quote is missing");
    return out;
  }

 private:
  std::string_view rest_;
};

class Parser {
 public:
  Status Line(std::string_view line, std::vector<PromSample>* samples,
              std::map<std::string, PromFamily, std::less<>>* families) {
    if (line.ends_with('\r')) line.remove_suffix(1);
    LineReader r(line);
    r.SkipSpace();
    if (r.AtEnd()) return Status::OK();
    if (r.Take('#')) return Comment(r, families);
    FC_ASSIGN_OR_RETURN(PromSample sample, Sample(r, *families));
    sample_names_.insert(sample.name);
    samples->push_back(std::move(sample));
    return Status::OK();
  }

 private:
  Status Comment(LineReader& r, std::map<std::string, PromFamily, std::less<>>* families) {
    r.SkipSpace();
    const std::string_view keyword = r.Token();
    if (keyword != "HELP" && keyword != "TYPE") return Status::OK();  // a comment
    r.SkipSpace();
    const std::string_view name = r.Name(true);
    if (name.empty()) {
      return Status::Corruption(std::string(keyword) + " line without a valid metric name");
    }
    if (!r.AtEnd() && r.Peek() != ' ' && r.Peek() != '\t') {
      return Status::Corruption("bad metric name in " + std::string(keyword) + " line");
    }
    r.SkipSpace();
    PromFamily& family = (*families)[std::string(name)];
    if (keyword == "HELP") {
      if (help_seen_.contains(name)) {
        return Status::Corruption("a second HELP line for " + std::string(name));
      }
      help_seen_.emplace(name);
      FC_ASSIGN_OR_RETURN(family.help, r.Text(false));
      return Status::OK();
    }
    const std::string_view type = r.Token();
    r.SkipSpace();
    if (std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes) || !r.AtEnd()) {
      return Status::Corruption("TYPE of " + std::string(name) + " must be counter, gauge, " +
                                "histogram, summary or untyped, not '" + std::string(type) + "'");
    }
    if (type_seen_.contains(name)) {
      return Status::Corruption("a second TYPE line for " + std::string(name));
    }
    bool sampled = sample_names_.contains(name);
    for (std::string_view suffix : kFamilySuffixes) {
      sampled = sampled || sample_names_.contains(std::string(name) + std::string(suffix));
    }
    if (sampled) {
      return Status::Corruption("TYPE line for " + std::string(name) + " after its samples");
    }
    type_seen_.emplace(name);
    family.type = std::string(type);
    return Status::OK();
  }

  Result<PromSample> Sample(LineReader& r,
                            const std::map<std::string, PromFamily, std::less<>>& families) {
    PromSample s;
    s.name = std::string(r.Name(true));
    if (s.name.empty()) return Status::Corruption("a sample must start with a metric name");
    r.SkipSpace();
    if (r.Take('{')) {
      for (;;) {
        r.SkipSpace();
        if (r.Take('}')) break;
        const std::string label(r.Name(false));
        if (label.empty()) return Status::Corruption("bad label name in " + s.name);
        r.SkipSpace();
        if (!r.Take('=')) {
          return Status::Corruption("expected '=' after label " + label + " of " + s.name);
        }
        r.SkipSpace();
        if (!r.Take('"')) {
          return Status::Corruption("the value of label " + label + " of " + s.name +
                                    " must be quoted");
        }
        FC_ASSIGN_OR_RETURN(std::string value, r.Text(true));
        if (s.Label(label)) {
          return Status::Corruption("label " + label + " repeated in a sample of " + s.name);
        }
        s.labels.emplace_back(label, std::move(value));
        r.SkipSpace();
        if (r.Take('}')) break;
        if (!r.Take(',')) {
          return Status::Corruption("expected ',' or '}' after label " + label + " of " + s.name);
        }
      }
      r.SkipSpace();
    }
    const std::string_view value = r.Token();
    const std::optional<double> v = ParseValue(value);
    if (!v) {
      return Status::Corruption("the value of " + s.name + " must be a number, not '" +
                                std::string(value) + "'");
    }
    s.value = *v;
    r.SkipSpace();
    if (!r.AtEnd()) {
      const std::string_view ts = r.Token();
      int64_t t = 0;
      const auto tr = std::from_chars(ts.data(), ts.data() + ts.size(), t);
      r.SkipSpace();
      if (tr.ec != std::errc() || tr.ptr != ts.data() + ts.size() || !r.AtEnd()) {
        return Status::Corruption("after the value of " + s.name +
                                  " only a timestamp (integer milliseconds) may follow");
      }
      s.timestamp_ms = t;
    }
    if (s.name.ends_with("_bucket")) {
      const auto family = families.find(std::string_view(s.name).substr(0, s.name.size() - 7));
      if (family != families.end() && family->second.type == "histogram") {
        const std::optional<std::string_view> le = s.Label("le");
        if (!le || !ParseValue(*le)) {
          return Status::Corruption("a bucket of histogram " + family->first +
                                    " needs a numeric label le");
        }
      }
    }
    return s;
  }

  std::set<std::string, std::less<>> sample_names_, help_seen_, type_seen_;
};

}  // namespace

std::optional<std::string_view> PromSample::Label(std::string_view name) const {
  for (const auto& [k, v] : labels) {
    if (k == name) return std::string_view(v);
  }
  return std::nullopt;
}

Result<PromText> PromText::Parse(std::string_view text) {
  PromText out;
  Parser parser;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    const Status s = parser.Line(line, &out.samples_, &out.families_);
    if (!s.ok()) {
      return Status::Corruption("metrics text line " + std::to_string(line_no) + ": " +
                                std::string(s.message()));
    }
  }
  return out;
}

const PromFamily* PromText::family(std::string_view name) const {
  const auto it = families_.find(name);
  return it == families_.end() ? nullptr : &it->second;
}

std::vector<const PromSample*> PromText::Select(std::string_view name, LabelMatch match) const {
  std::vector<const PromSample*> out;
  for (const PromSample& s : samples_) {
    if (s.name != name) continue;
    const bool all = std::all_of(match.begin(), match.end(), [&](const auto& m) {
      const std::optional<std::string_view> v = s.Label(m.first);
      return v && *v == m.second;
    });
    if (all) out.push_back(&s);
  }
  return out;
}

double PromText::Sum(std::string_view name, LabelMatch match) const {
  double sum = 0;
  for (const PromSample* s : Select(name, match)) sum += s->value;
  return sum;
}

std::vector<std::string> PromText::LabelValues(std::string_view name,
                                               std::string_view label) const {
  std::set<std::string> values;
  for (const PromSample* s : Select(name)) {
    if (const std::optional<std::string_view> v = s->Label(label)) values.emplace(*v);
  }
  return {values.begin(), values.end()};
}

std::vector<HistogramBucket> PromText::Buckets(std::string_view name, LabelMatch match) const {
  std::map<double, double> by_le;
  for (const PromSample* s : Select(std::string(name) + "_bucket", match)) {
    const std::optional<std::string_view> le = s->Label("le");
    if (!le) continue;
    if (const std::optional<double> bound = ParseValue(*le)) by_le[*bound] += s->value;
  }
  std::vector<HistogramBucket> out;
  for (const auto& [le, count] : by_le) out.push_back({le, count});
  return out;
}

double HistogramQuantile(std::span<const HistogramBucket> buckets, double q) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (buckets.empty() || !(q >= 0 && q <= 1)) return nan;
  const double total = buckets.back().count;
  if (!(total > 0)) return nan;
  const double rank = q * total;
  double lower = 0, below = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const HistogramBucket& b = buckets[i];
    if (b.count >= rank && b.count > below) {
      if (std::isinf(b.le)) return i == 0 ? nan : buckets[i - 1].le;
      if (i == 0 && b.le <= 0) return b.le;
      return lower + (b.le - lower) * (rank - below) / (b.count - below);
    }
    lower = b.le;
    below = b.count;
  }
  return buckets.back().le;
}

}  // namespace flatcake::serve
