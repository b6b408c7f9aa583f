#include "data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/randperm.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace dtrain::data {
namespace {

constexpr absl::string_view kStateTag = "dtrain.DistributedSampler";
constexpr absl::string_view kStateVersion = "v1";

// An epoch of the whole dataset, before padding and striding: a random
// permutation from a CPU generator seeded seed + epoch (exactly what PyTorch's
// sampler does), or 0..N-1.
std::vector<int64_t> EpochOrder(int64_t dataset_size,
                                const DistributedSamplerOptions& options,
                                int64_t epoch) {
  std::vector<int64_t> order(dataset_size);
  if (!options.shuffle) {
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }
  // Python's manual_seed takes seed + epoch modulo 2^64 (a negative int as
  // its two's complement).
  at::Generator generator = at::detail::createCPUGenerator(
      options.seed + static_cast<uint64_t>(epoch));
  const at::Tensor permutation = at::randperm(dataset_size, generator);
  const int64_t* data = permutation.data_ptr<int64_t>();
  std::copy(data, data + dataset_size, order.begin());
  return order;
}

}  // namespace

int64_t DistributedSampler::NumSamples(int64_t dataset_size,
                                       int64_t num_replicas, bool drop_last) {
  if (drop_last && dataset_size % num_replicas != 0) {
    // ceil((N - R) / R) with N % R != 0 is floor(N / R).
    return dataset_size / num_replicas;
  }
  return (dataset_size + num_replicas - 1) / num_replicas;
}

absl::StatusOr<DistributedSampler> DistributedSampler::Create(
    int64_t dataset_size, const DistributedSamplerOptions& options) {
  if (dataset_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler: dataset size must be >= 0, got ", dataset_size));
  }
  if (options.num_replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: num_replicas must be >= 1, got ",
                     options.num_replicas));
  }
  if (options.rank < 0 || options.rank >= options.num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler: invalid rank ", options.rank,
        ", rank should be in the interval [0, ", options.num_replicas - 1,
        "] for num_replicas=", options.num_replicas));
  }
  return DistributedSampler(dataset_size, options);
}

DistributedSampler::DistributedSampler(int64_t dataset_size,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  num_samples_ = RankSamples(0);
  ComputeIndices();
}

int64_t DistributedSampler::RankSamples(int64_t start) const {
  if (options_.pad || options_.drop_last) {
    return PartitionSize(dataset_size_, start, options_.num_replicas,
                         options_.drop_last);
  }
  // Slots start + rank + i * R below N.
  const int64_t left = std::max<int64_t>(0, dataset_size_ - start);
  return left > options_.rank
             ? (left - options_.rank + options_.num_replicas - 1) /
                   options_.num_replicas
             : 0;
}

int64_t DistributedSampler::PartitionSize(int64_t dataset_size, int64_t start,
                                          int64_t num_replicas,
                                          bool drop_last) {
  // With start 0 this is NumSamples: floor with drop_last, else ceil.
  const int64_t left = std::max<int64_t>(0, dataset_size - start);
  return drop_last ? left / num_replicas
                   : (left + num_replicas - 1) / num_replicas;
}

void DistributedSampler::ComputeIndices() {
  const std::vector<int64_t> order =
      EpochOrder(dataset_size_, options_, epoch_);
  // The list partitioned is order[start, N); its k-th padded entry is
  // entry k % |list|: padding repeats the list from its start, as many times
  // as needed; drop_last only ever shortens it. With start 0 that is slot k
  // of PyTorch's padded order.
  const int64_t left = dataset_size_ - start_;
  indices_.resize(num_samples_);
  for (int64_t i = 0; i < num_samples_; ++i) {
    const int64_t k = GlobalSlot(i) - start_;
    indices_[i] = order[start_ + k % left];
  }
}

void DistributedSampler::SetEpoch(int64_t epoch) {
  if (resume_pending_ && epoch == epoch_) {
    resume_pending_ = false;
    return;
  }
  resume_pending_ = false;
  position_ = 0;
  if (epoch != epoch_ || start_ != 0) {
    epoch_ = epoch;
    start_ = 0;
    num_samples_ = RankSamples(0);
    ComputeIndices();
  }
}

absl::Status DistributedSampler::Restore(const SamplerState& state) {
  auto mismatch = [](absl::string_view field, auto saved, auto here) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: cannot restore a state saved with ",
                     field, "=", saved, " into a sampler with ", field, "=",
                     here, ": the partition of the data would differ"));
  };
  if (state.dataset_size != dataset_size_) {
    return mismatch("dataset_size", state.dataset_size, dataset_size_);
  }
  if (state.seed != options_.seed) {
    return mismatch("seed", state.seed, options_.seed);
  }
  if (state.shuffle != options_.shuffle) {
    return mismatch("shuffle", state.shuffle, options_.shuffle);
  }
  if (state.drop_last != options_.drop_last) {
    return mismatch("drop_last", state.drop_last, options_.drop_last);
  }
  if (state.num_replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: saved num_replicas ",
                     state.num_replicas, " is not positive"));
  }
  if (state.start < 0 || state.start > dataset_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedSampler: saved start ", state.start,
                     " is outside [0, ", dataset_size_, "], the dataset"));
  }
  const int64_t saved_samples = PartitionSize(
      dataset_size_, state.start, state.num_replicas, state.drop_last);
  if (state.position < 0 || state.position > saved_samples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedSampler: saved position ", state.position,
        " is outside [0, ", saved_samples, "], the samples per epoch"));
  }
  int64_t start = state.start;
  int64_t position = state.position;
  if (state.num_replicas != options_.num_replicas &&
      (state.start != 0 || state.position != 0)) {
    // Inside an epoch: the saved ranks consumed every slot before
    // start + position * R of the order; what is left is partitioned anew.
    start = std::min(dataset_size_,
                     state.start + state.position * state.num_replicas);
    position = 0;
  }
  epoch_ = state.epoch;
  start_ = start;
  num_samples_ = RankSamples(start_);
  ComputeIndices();
  // Without padding this rank may have fewer than the saved rank had.
  position_ = std::min(position, num_samples_);
  resume_pending_ = true;
  return absl::OkStatus();
}

SamplerState DistributedSampler::state() const {
  SamplerState s;
  s.epoch = epoch_;
  s.position = position_;
  s.start = start_;
  s.dataset_size = dataset_size_;
  s.num_replicas = options_.num_replicas;
  s.seed = options_.seed;
  s.shuffle = options_.shuffle;
  s.drop_last = options_.drop_last;
  return s;
}

absl::Span<const int64_t> DistributedSampler::Next(int64_t max_count) {
  const int64_t n = std::clamp<int64_t>(max_count, 0, remaining());
  absl::Span<const int64_t> out(indices_.data() + position_, n);
  position_ += n;
  resume_pending_ = false;
  return out;
}

void DistributedSampler::Advance(int64_t count) {
  position_ += std::clamp<int64_t>(count, 0, remaining());
  resume_pending_ = false;
}

absl::StatusOr<std::vector<int64_t>> DistributedSamplerIndices(
    int64_t dataset_size, const DistributedSamplerOptions& options,
    int64_t epoch) {
  DTRAIN_ASSIGN_OR_RETURN(DistributedSampler sampler,
                          DistributedSampler::Create(dataset_size, options));
  sampler.SetEpoch(epoch);
  return sampler.indices();
}

std::string SamplerState::Serialize() const {
  return absl::StrCat(kStateTag, " ", kStateVersion, " epoch=", epoch,
                      " position=", position, " dataset_size=", dataset_size,
                      " num_replicas=", num_replicas, " seed=", seed,
                      " shuffle=", shuffle ? 1 : 0,
                      " drop_last=", drop_last ? 1 : 0,
                      start != 0 ? absl::StrCat(" start=", start) : "");
}

absl::StatusOr<SamplerState> SamplerState::Parse(absl::string_view text) {
  auto invalid = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a DistributedSampler state (", why, "): '", text, "'"));
  };
  std::vector<absl::string_view> words =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (words.size() < 2 || words[0] != kStateTag) {
    return invalid(absl::StrCat("it must start with '", kStateTag, "'"));
  }
  if (words[1] != kStateVersion) {
    return invalid(absl::StrCat("unknown version '", words[1],
                                "', this build reads ", kStateVersion));
  }
  SamplerState state;
  struct Field {
    absl::string_view name;
    bool optional = false;
    bool seen = false;
  };
  // `start` is written only when not 0, so earlier states read unchanged.
  Field fields[] = {
      {"epoch"}, {"position"}, {"dataset_size"}, {"num_replicas"},
      {"seed"},  {"shuffle"},  {"drop_last"},    {"start", /*optional=*/true}};
  for (size_t i = 2; i < words.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(words[i], absl::MaxSplits('=', 1));
    Field* field = nullptr;
    for (Field& f : fields) {
      if (f.name == kv.first) field = &f;
    }
    if (field == nullptr) {
      return invalid(absl::StrCat("unknown field '", kv.first, "'"));
    }
    if (field->seen) {
      return invalid(absl::StrCat("field '", kv.first, "' appears twice"));
    }
    field->seen = true;
    bool ok = false;
    if (kv.first == "epoch") {
      ok = absl::SimpleAtoi(kv.second, &state.epoch);
    } else if (kv.first == "position") {
      ok = absl::SimpleAtoi(kv.second, &state.position);
    } else if (kv.first == "dataset_size") {
      ok = absl::SimpleAtoi(kv.second, &state.dataset_size);
    } else if (kv.first == "num_replicas") {
      ok = absl::SimpleAtoi(kv.second, &state.num_replicas);
    } else if (kv.first == "seed") {
      ok = absl::SimpleAtoi(kv.second, &state.seed);
    } else if (kv.first == "start") {
      ok = absl::SimpleAtoi(kv.second, &state.start);
    } else if (kv.second == "0" || kv.second == "1") {
      ok = true;
      (kv.first == "shuffle" ? state.shuffle : state.drop_last) =
          kv.second == "1";
    }
    if (!ok) {
      return invalid(
          absl::StrCat("bad value '", kv.second, "' for ", kv.first));
    }
  }
  for (const Field& f : fields) {
    if (!f.seen && !f.optional)
      return invalid(absl::StrCat("field '", f.name, "' missing"));
  }
  return state;
}

bool operator==(const SamplerState& a, const SamplerState& b) {
  return a.epoch == b.epoch && a.position == b.position && a.start == b.start &&
         a.dataset_size == b.dataset_size && a.num_replicas == b.num_replicas &&
         a.seed == b.seed && a.shuffle == b.shuffle &&
         a.drop_last == b.drop_last;
}

}  // namespace dtrain::data
