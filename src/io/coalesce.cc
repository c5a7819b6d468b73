#include "io/coalesce.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "util/align.h"
#include "util/thread_annotations.h"

namespace flatcake {
namespace {

constexpr int kDigitBits = 11;  // 2048 buckets: histograms stay in L1, 4 passes cover 44 bits
constexpr uint32_t kBuckets = 1u << kDigitBits;

std::string SliceText(size_t i) { return "slice " + std::to_string(i); }

}  // namespace

Status ValidateCoalesceOptions(const CoalesceOptions& o) {
  if (o.alignment == 0 || !std::has_single_bit(o.alignment)) {
    return Status::InvalidArgument("coalesce: alignment must be a power of two, got " +
                                   std::to_string(o.alignment));
  }
  if (o.max_io < o.alignment || o.max_io % o.alignment != 0) {
    return Status::InvalidArgument("coalesce: max_io (" + std::to_string(o.max_io) +
                                   ") must be a positive multiple of alignment (" +
                                   std::to_string(o.alignment) + ")");
  }
  return Status::OK();
}

namespace {

// Sort scratch survives between calls: on machines where first-touch page faults are slow,
// zeroing fresh pages would cost more than the sort itself. A few buffers serve concurrent calls.
class ScratchPool {
 public:
  HugeVector<uint64_t> Take() {
    MutexLock lock(mu_);
    if (free_.empty()) return {};
    HugeVector<uint64_t> v = std::move(free_.back());
    free_.pop_back();
    return v;
  }
  void Give(HugeVector<uint64_t> v) {
    MutexLock lock(mu_);
    if (free_.size() < kMaxKept) free_.push_back(std::move(v));
  }

 private:
  static constexpr size_t kMaxKept = 4;
  Mutex mu_;
  std::vector<HugeVector<uint64_t>> free_ GUARDED_BY(mu_);
};

ScratchPool& Scratch() {
  static ScratchPool* pool = new ScratchPool();  // never destroyed: used until exit
  return *pool;
}

// LSD radix sort of `v` on bits [low, low + bits), kDigitBits per pass, stable. `tmp` is scratch
// of the same size. Leaves the result in `v`.
void RadixSort(HugeVector<uint64_t>& v, HugeVector<uint64_t>& tmp, int low, int bits) {
  const size_t n = v.size();
  const int passes = (bits + kDigitBits - 1) / kDigitBits;
  std::vector<uint32_t> hist(static_cast<size_t>(passes) * kBuckets, 0);
  for (uint64_t x : v) {
    for (int p = 0; p < passes; ++p) {
      ++hist[p * kBuckets + ((x >> (low + p * kDigitBits)) & (kBuckets - 1))];
    }
  }
  uint64_t* src = v.data();
  uint64_t* dst = tmp.data();
  for (int p = 0; p < passes; ++p) {
    uint32_t* h = &hist[p * kBuckets];
    const int shift = low + p * kDigitBits;
    // A digit that is the same for every key leaves the order unchanged: skip the pass.
    if (h[(src[0] >> shift) & (kBuckets - 1)] == n) continue;
    uint32_t sum = 0;
    for (uint32_t d = 0; d < kBuckets; ++d) {
      const uint32_t c = h[d];
      h[d] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; ++i) {
      const uint64_t x = src[i];
      dst[h[(x >> shift) & (kBuckets - 1)]++] = x;
    }
    std::swap(src, dst);
  }
  if (src != v.data()) v.swap(tmp);
}

}  // namespace

void SortSliceOrder(std::span<const SliceRead> slices, HugeVector<uint32_t>* order) {
  const size_t n = slices.size();
  order->resize(n);
  if (n == 0) return;
  uint64_t max_offset = 0;
  uint32_t max_file = 0;
  for (const auto& s : slices) {
    max_offset = std::max(max_offset, s.offset);
    max_file = std::max(max_file, s.file);
  }
  const int offset_bits = std::bit_width(max_offset);
  const int file_bits = std::bit_width(max_file);
  const int index_bits = std::max(1, static_cast<int>(std::bit_width(n - 1)));
  if (offset_bits + file_bits + index_bits > 64) {
    // (file, offset, index) does not pack into 64 bits: comparison sort.
    for (uint32_t i = 0; i < n; ++i) (*order)[i] = i;
    std::stable_sort(order->begin(), order->end(), [&](uint32_t a, uint32_t b) {
      const auto& x = slices[a];
      const auto& y = slices[b];
      return x.file != y.file ? x.file < y.file : x.offset < y.offset;
    });
    return;
  }
  // One 64-bit word per slice: file | offset | input index. Sorting on the key bits only keeps
  // equal keys in input order (LSD radix is stable), and the index comes out with the key.
  HugeVector<uint64_t> keys = Scratch().Take();
  HugeVector<uint64_t> tmp = Scratch().Take();
  keys.resize(n);
  tmp.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t file_part = file_bits == 0 ? 0 : uint64_t{slices[i].file} << offset_bits;
    keys[i] = ((file_part | slices[i].offset) << index_bits) | i;
  }
  RadixSort(keys, tmp, index_bits, offset_bits + file_bits);
  const uint64_t index_mask = (uint64_t{1} << index_bits) - 1;
  for (size_t i = 0; i < n; ++i) (*order)[i] = static_cast<uint32_t>(keys[i] & index_mask);
  Scratch().Give(std::move(keys));
  Scratch().Give(std::move(tmp));
}

HugeVector<uint32_t> SortSliceOrder(std::span<const SliceRead> slices) {
  HugeVector<uint32_t> order;
  SortSliceOrder(slices, &order);
  return order;
}

Result<CoalescePlan> PlanReads(std::span<const SliceRead> input, const CoalesceOptions& options) {
  CoalescePlan plan;
  FC_RETURN_IF_ERROR(PlanReads(input, options, &plan));
  return plan;
}

Status PlanReads(std::span<const SliceRead> input, const CoalesceOptions& options,
                 CoalescePlan* out) {
  FC_RETURN_IF_ERROR(ValidateCoalesceOptions(options));
  if (input.size() > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("coalesce: more than 2^32 slices");
  }
  CoalescePlan& plan = *out;
  plan.reads.clear();
  plan.bytes_requested = plan.bytes_read = plan.bytes_gap = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    const SliceRead& s = input[i];
    if (s.len == 0) return Status::InvalidArgument("coalesce: " + SliceText(i) + " has length 0");
    if (s.offset > std::numeric_limits<uint64_t>::max() - s.len - options.alignment) {
      return Status::InvalidArgument("coalesce: " + SliceText(i) + " ends past 2^64");
    }
    plan.bytes_requested += s.len;
  }
  thread_local HugeVector<uint32_t> order;  // reused: see ScratchPool
  SortSliceOrder(input, &order);
  plan.slices.resize(input.size());
  // A random gather: prefetching a few slices ahead keeps several cache misses in flight.
  constexpr size_t kAhead = 16;
  const size_t n_in = order.size();
  for (size_t i = 0; i < n_in; ++i) {
    if (i + kAhead < n_in) __builtin_prefetch(&input[order[i + kAhead]]);
    plan.slices[i] = input[order[i]];
  }
  if (order.capacity() > (size_t{64} << 20)) HugeVector<uint32_t>().swap(order);

  const uint64_t align = options.alignment;
  const uint64_t max_io = options.max_io;
  const HugeVector<SliceRead>& s = plan.slices;
  const size_t n = s.size();
  plan.reads.reserve(n / 4 + 1);
  auto emit = [&](uint32_t file, uint64_t begin, uint64_t end, size_t first, size_t count) {
    plan.reads.push_back(MergedRead{file, begin, end - begin, static_cast<uint32_t>(first),
                                    static_cast<uint32_t>(count)});
    plan.bytes_read += end - begin;
  };

  size_t i = 0;
  while (i < n) {
    const uint32_t file = s[i].file;
    uint64_t begin = AlignDown(s[i].offset, align);
    uint64_t end = s[i].offset + s[i].len;  // unaligned end of the requested bytes so far
    // A slice longer than one read: cut whole max_io pieces off its front. The tail continues as
    // an ordinary read that may absorb following slices, unless one of them starts inside the
    // pieces already cut (overlapping slices): a read lists only slices it covers in full or,
    // for a cut slice, the part inside it.
    bool absorb = true;
    while (AlignUp(end, align) - begin > max_io) {
      emit(file, begin, begin + max_io, i, 1);
      begin += max_io;
      absorb = i + 1 == n || s[i + 1].file != file || s[i + 1].offset >= begin;
    }
    size_t j = i + 1;
    while (absorb && j < n && s[j].file == file) {
      const uint64_t next_end = std::max(end, s[j].offset + s[j].len);
      const uint64_t gap = s[j].offset > end ? s[j].offset - end : 0;
      if (gap > options.max_gap || AlignUp(next_end, align) - begin > max_io) break;
      plan.bytes_gap += gap;
      end = next_end;
      ++j;
    }
    emit(file, begin, AlignUp(end, align), i, j - i);
    i = j;
  }
  return Status::OK();
}

}  // namespace flatcake
