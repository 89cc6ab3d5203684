// CPU implementation of hstu_ops::hstu_mha_fwd / hstu_mha_bwd (jagged HSTU attention).
//
// This file is the torch-facing half: argument checks (the reference's messages), conversion of
// the inputs to float32 rows padded to whole vectors, the list of work items and the OpenMP loop
// over them. The arithmetic is in hstu_attention_cpu_kernels.cpp, compiled for several
// instruction sets; the best one the CPU and ATen's capability setting (ATEN_CPU_CAPABILITY)
// allow is picked on first use.
//
// Work items: forward, one per (sequence, head, query block). Backward, one per (sequence, head)
// that computes dq, dk and dv in one pass over the tiles, when there are enough of them to keep
// every thread busy; otherwise (few long sequences) one per (sequence, head, key block) for dk
// and dv plus one per (sequence, head, query block) for dq, which recomputes the scores once
// more but spreads a single sequence over the threads. Items are handed out longest first
// (dynamic schedule). No two items write the same output element, so no atomics are needed, and
// the result does not depend on the schedule.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "hstu_attention_cpu.h"
#include "jagged_common.h"

namespace hstu_ops {
namespace attn_cpu {
namespace {

constexpr const char* kOp = "hstu_mha";

// Below this much work (multiply-adds) one thread is faster than waking the others.
constexpr double kParallelWork = 1 << 20;

// A backward item per (sequence, head) is used when the longest one is at most this fraction
// of a thread's fair share: with the dynamic schedule the last thread then finishes within
// that fraction of the others, which costs less than the split items' extra score pass (about
// 2 of 5 products more).
constexpr double kFusedImbalance = 0.4;

// The kernel tables this build and CPU can run: generic, then avx2 and avx512 where the CPU has
// them (so a table's index is its level).
std::vector<KernelTable> runnable_kernels() {
  std::vector<KernelTable> tables{generic::kernel_table()};
#if defined(HSTU_OPS_CPU_X86_ISAS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    tables.push_back(avx2::kernel_table());
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      tables.push_back(avx512::kernel_table());
    }
  }
#endif
  return tables;
}

const std::vector<KernelTable>& runnable() {
  static const std::vector<KernelTable> tables = runnable_kernels();
  return tables;
}

// The best runnable table that ATen's capability allows (ATEN_CPU_CAPABILITY can lower it).
const KernelTable* default_kernels() {
  const std::string capability = at::get_cpu_capability();
  const std::size_t allowed = capability == "AVX512" ? 2 : capability == "AVX2" ? 1 : 0;
  return &runnable()[std::min(allowed, runnable().size() - 1)];
}

std::atomic<const KernelTable*>& active_kernels() {
  static std::atomic<const KernelTable*> active{default_kernels()};
  return active;
}

const KernelTable& kernels() { return *active_kernels().load(std::memory_order_acquire); }

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// ------------------------------------------------------------------------------------------
// Argument checks: the reference's (hstu_ops/pytorch/pt_hstu_attention.py), same wording.
// ------------------------------------------------------------------------------------------
struct Batch {
  std::vector<std::int64_t> offsets;  // B + 1
  std::vector<std::int64_t> targets;  // B, or empty
  bool has_targets = false;
};

void check_cpu(const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device().is_cpu(), kOp, ": the NATIVE kernel runs on CPU tensors, but ",
                    name, " is on ", t.device());
}

template <typename Index>
std::vector<std::int64_t> to_int64(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const Index* p = c.data_ptr<Index>();
  return std::vector<std::int64_t>(p, p + c.numel());
}

Batch check_args(int64_t max_seq_len, const at::Tensor& q, const at::Tensor& k,
                 const at::Tensor& v, const at::Tensor& seq_offsets,
                 const std::optional<at::Tensor>& num_targets, int64_t max_attn_len,
                 int64_t contextual_seq_len) {
  TORCH_CHECK_VALUE(max_seq_len > 0, kOp, ": max_seq_len must be positive, got ", max_seq_len);
  TORCH_CHECK_VALUE(q.dim() == 3, kOp, ": q must be 3-D [total, heads, attn_dim], got ",
                    shape_str(q));
  TORCH_CHECK_VALUE(k.sizes() == q.sizes(), kOp, ": k must have the shape of q ", shape_str(q),
                    ", got ", shape_str(k));
  TORCH_CHECK_VALUE(v.dim() == 3 && v.size(0) == q.size(0) && v.size(1) == q.size(1), kOp,
                    ": v must be 3-D [total, heads, hidden_dim] with total and heads of q [",
                    q.size(0), ", ", q.size(1), "], got ", shape_str(v));
  TORCH_CHECK_TYPE(
      q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type() &&
          at::isFloatingType(q.scalar_type()),
      kOp, ": q, k, v must share one floating dtype, got ", dtype_name(q.scalar_type()), ", ",
      dtype_name(k.scalar_type()), ", ", dtype_name(v.scalar_type()));
  const auto dtype = q.scalar_type();
  TORCH_CHECK_TYPE(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf, kOp,
                   ": the NATIVE kernel supports float16, bfloat16 and float32, got ",
                   dtype_name(dtype));
  TORCH_CHECK_VALUE(max_attn_len >= 0, kOp, ": max_attn_len must be >= 0, got ", max_attn_len);
  TORCH_CHECK_VALUE(contextual_seq_len >= 0, kOp, ": contextual_seq_len must be >= 0, got ",
                    contextual_seq_len);
  check_cpu("q", q);
  check_cpu("k", k);
  check_cpu("v", v);
  check_cpu("seq_offsets", seq_offsets);

  Batch batch;
  check_offsets_tensor(kOp, "seq_offsets", seq_offsets);
  batch.offsets = seq_offsets.scalar_type() == at::kInt ? to_int64<std::int32_t>(seq_offsets)
                                                         : to_int64<std::int64_t>(seq_offsets);
  const std::int64_t n_offsets = static_cast<std::int64_t>(batch.offsets.size());
  check_offsets_data<std::int64_t>(kOp, "seq_offsets", batch.offsets.data(), n_offsets,
                                   q.size(0), "q");
  const std::int64_t seqs = n_offsets - 1;
  std::int64_t longest = -1;
  for (std::int64_t b = 0; b < seqs; ++b) {
    const std::int64_t len = batch.offsets[b + 1] - batch.offsets[b];
    if (longest < 0 || len > batch.offsets[longest + 1] - batch.offsets[longest]) {
      longest = b;
    }
  }
  if (longest >= 0) {
    const std::int64_t len = batch.offsets[longest + 1] - batch.offsets[longest];
    TORCH_CHECK_VALUE(len <= max_seq_len, kOp, ": sequence ", longest, " has ", len,
                      " tokens, more than max_seq_len = ", max_seq_len);
  }
  if (num_targets.has_value()) {
    const at::Tensor& t = *num_targets;
    check_cpu("num_targets", t);
    TORCH_CHECK_VALUE(t.dim() == 1 && t.numel() == seqs, kOp,
                      ": num_targets must be 1-D with one entry per sequence (", seqs,
                      "), got shape ", shape_str(t));
    TORCH_CHECK_TYPE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, kOp,
                     ": num_targets must have dtype int32 or int64, got ",
                     dtype_name(t.scalar_type()));
    batch.targets = t.scalar_type() == at::kInt ? to_int64<std::int32_t>(t)
                                                : to_int64<std::int64_t>(t);
    batch.has_targets = true;
    for (std::int64_t b = 0; b < seqs; ++b) {
      const std::int64_t len = batch.offsets[b + 1] - batch.offsets[b];
      TORCH_CHECK_VALUE(batch.targets[b] >= 0 && batch.targets[b] <= len, kOp, ": num_targets[",
                        b, "] = ", batch.targets[b], " is outside [0, ", len,
                        "] (the length of sequence ", b, ")");
    }
  }
  return batch;
}

// ------------------------------------------------------------------------------------------
// Operands: float32 rows, padded to whole vectors.
// ------------------------------------------------------------------------------------------

// x itself when it already is float32 with contiguous, padded rows; otherwise a float32 copy
// [total, heads, width] whose columns beyond x's are zero.
at::Tensor float_rows(const at::Tensor& x, std::int64_t width) {
  if (x.scalar_type() == at::kFloat && x.size(2) == width && (x.stride(2) == 1 || width <= 1)) {
    return x;
  }
  at::Tensor y = at::empty({x.size(0), x.size(1), width}, x.options().dtype(at::kFloat));
  y.narrow(2, 0, x.size(2)).copy_(x);
  if (width > x.size(2)) {
    y.narrow(2, x.size(2), width - x.size(2)).zero_();
  }
  return y;
}

Rows rows_of(const at::Tensor& x) {
  return {x.data_ptr<float>(), x.stride(0), x.stride(1)};
}

MutableRows mutable_rows_of(at::Tensor& x) {
  return {x.data_ptr<float>(), x.stride(0), x.stride(1)};
}

// A float32 result buffer [total, heads, width], every element of which the kernels write: the
// result itself when it is float32 and needs no padding, else a padded buffer that finish()
// narrows and converts.
at::Tensor result_buffer(const at::Tensor& like, std::int64_t width) {
  return at::empty({like.size(0), like.size(1), width}, like.options().dtype(at::kFloat));
}

at::Tensor finish(const at::Tensor& buffer, const at::Tensor& like) {
  return buffer.narrow(2, 0, like.size(2)).to(like.scalar_type()).contiguous();
}

struct Call {
  Problem problem;
  std::int64_t batch;
  std::int64_t heads;
  at::Tensor q;  // keep the float32 operands alive
  at::Tensor k;
  at::Tensor v;
};

Call make_call(int64_t max_seq_len, double alpha, const at::Tensor& q, const at::Tensor& k,
               const at::Tensor& v, const Batch& batch, bool causal, int64_t max_attn_len,
               int64_t contextual_seq_len) {
  Call c;
  const std::int64_t attn_dim = round_up(q.size(2), kDimAlign);
  const std::int64_t hidden_dim = round_up(v.size(2), kDimAlign);
  c.q = float_rows(q, attn_dim);
  c.k = float_rows(k, attn_dim);
  c.v = float_rows(v, hidden_dim);
  c.batch = static_cast<std::int64_t>(batch.offsets.size()) - 1;
  c.heads = q.size(1);
  Problem& p = c.problem;
  p.q = rows_of(c.q);
  p.k = rows_of(c.k);
  p.v = rows_of(c.v);
  p.attn_dim = attn_dim;
  p.hidden_dim = hidden_dim;
  p.seq_offsets = batch.offsets.data();
  p.num_targets = batch.has_targets ? batch.targets.data() : nullptr;
  p.max_attn_len = max_attn_len;
  p.contextual_seq_len = contextual_seq_len;
  p.causal = causal;
  p.alpha = static_cast<float>(alpha);
  p.inv_max_seq_len = 1.0f / static_cast<float>(max_seq_len);
  return c;
}

// ------------------------------------------------------------------------------------------
// Work items and the parallel loop
// ------------------------------------------------------------------------------------------
enum class Kind : std::uint8_t { kQueryBlock, kKeyBlock, kSequence };

struct Item {
  std::int64_t seq;
  std::int64_t head;
  std::int64_t block;
  double cost;  // multiply-adds, roughly: tile rows x columns the mask reaches
  Kind kind;
};

// Estimated cost of each query block (or key block) of sequence `seq`.
std::vector<double> block_costs(const Problem& p, std::int64_t seq, bool query_blocks) {
  const SequenceMask mask(p, seq);
  const std::int64_t block = query_blocks ? kBlockM : kBlockN;
  const std::int64_t other = query_blocks ? kBlockN : kBlockM;
  const double width = static_cast<double>(p.attn_dim + p.hidden_dim);
  std::vector<double> costs;
  for (std::int64_t b0 = 0; b0 < mask.n; b0 += block) {
    const std::int64_t b1 = std::min(b0 + block, mask.n);
    std::int64_t lo;
    std::int64_t hi;
    if (query_blocks) {
      mask.key_range(b0, b1, lo, hi);
    } else {
      mask.query_range(b0, b1, lo, hi);
    }
    const std::int64_t reach = std::max<std::int64_t>(
        0, std::min(round_up(hi, other), mask.n) - lo / other * other);
    costs.push_back(static_cast<double>(b1 - b0) * static_cast<double>(reach) * width);
  }
  return costs;
}

template <typename Run>
void run_items(std::vector<Item>& items, std::int64_t scratch_size, const Run& run) {
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });
  double work = 0;
  for (const Item& it : items) {
    work += it.cost;
  }
  const std::int64_t count = static_cast<std::int64_t>(items.size());
  int threads = static_cast<int>(std::min<std::int64_t>(at::get_num_threads(), count));
  if (work < kParallelWork) {
    threads = 1;
  }
  (void)threads;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<float> scratch(static_cast<size_t>(scratch_size));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < count; ++i) {
      run(items[i], scratch.data());
    }
  }
}

// ------------------------------------------------------------------------------------------
// The operators
// ------------------------------------------------------------------------------------------
at::Tensor hstu_mha_fwd_cpu(int64_t max_seq_len, double alpha, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& seq_offsets, bool causal,
                            const std::optional<at::Tensor>& num_targets, int64_t max_attn_len,
                            int64_t contextual_seq_len) {
  const Batch batch = check_args(max_seq_len, q, k, v, seq_offsets, num_targets, max_attn_len,
                                 contextual_seq_len);
  const std::int64_t total = q.size(0);
  const std::int64_t heads = q.size(1);
  if (total == 0 || heads == 0 || v.size(2) == 0) {
    return at::zeros({total, heads, v.size(2)}, v.options());
  }
  Call call = make_call(max_seq_len, alpha, q, k, v, batch, causal, max_attn_len,
                        contextual_seq_len);
  const Problem& p = call.problem;
  at::Tensor out = result_buffer(v, p.hidden_dim);

  std::vector<Item> items;
  for (std::int64_t s = 0; s < call.batch; ++s) {
    const std::vector<double> costs = block_costs(p, s, /*query_blocks=*/true);
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t b = 0; b < static_cast<std::int64_t>(costs.size()); ++b) {
        items.push_back({s, h, b, costs[b], Kind::kQueryBlock});
      }
    }
  }
  const KernelTable& kt = kernels();
  const MutableRows out_rows = mutable_rows_of(out);
  run_items(items, scratch_floats(p.attn_dim, p.hidden_dim, 0), [&](const Item& it, float* s) {
    kt.forward_query_block(p, out_rows, it.seq, it.head, it.block, s);
  });
  return out.size(2) == v.size(2) && v.scalar_type() == at::kFloat ? out : finish(out, v);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> hstu_mha_bwd_cpu(
    const at::Tensor& dout, int64_t max_seq_len, double alpha, const at::Tensor& q,
    const at::Tensor& k, const at::Tensor& v, const at::Tensor& seq_offsets, bool causal,
    const std::optional<at::Tensor>& num_targets, int64_t max_attn_len,
    int64_t contextual_seq_len) {
  const Batch batch = check_args(max_seq_len, q, k, v, seq_offsets, num_targets, max_attn_len,
                                 contextual_seq_len);
  TORCH_CHECK_VALUE(dout.sizes() == v.sizes(), kOp, ": dout must have the shape of the output ",
                    shape_str(v), ", got ", shape_str(dout));
  TORCH_CHECK_TYPE(at::isFloatingType(dout.scalar_type()), kOp,
                   ": dout must be a floating tensor, got ", dtype_name(dout.scalar_type()));
  check_cpu("dout", dout);
  const std::int64_t total = q.size(0);
  const std::int64_t heads = q.size(1);
  if (total == 0 || heads == 0) {
    return {at::zeros_like(q, at::MemoryFormat::Contiguous),
            at::zeros_like(k, at::MemoryFormat::Contiguous),
            at::zeros_like(v, at::MemoryFormat::Contiguous)};
  }
  Call call = make_call(max_seq_len, alpha, q, k, v, batch, causal, max_attn_len,
                        contextual_seq_len);
  const Problem& p = call.problem;
  const at::Tensor dout32 = float_rows(dout, p.hidden_dim);
  at::Tensor dq = result_buffer(q, p.attn_dim);
  at::Tensor dk = result_buffer(k, p.attn_dim);
  at::Tensor dv = result_buffer(v, p.hidden_dim);
  const BackwardOutputs g{rows_of(dout32), mutable_rows_of(dq), mutable_rows_of(dk),
                          mutable_rows_of(dv)};

  // One item per (sequence, head) when that balances the threads, else per block.
  std::vector<std::vector<double>> query_costs(call.batch);
  double work = 0;
  double largest = 0;
  for (std::int64_t s = 0; s < call.batch; ++s) {
    query_costs[s] = block_costs(p, s, /*query_blocks=*/true);
    double seq_cost = 0;
    for (double c : query_costs[s]) {
      seq_cost += c;
    }
    work += seq_cost * static_cast<double>(heads);
    largest = std::max(largest, seq_cost);
  }
  const int threads = at::get_num_threads();
  const bool per_sequence = threads <= 1 || largest <= kFusedImbalance * work / threads;

  std::vector<Item> items;
  for (std::int64_t s = 0; s < call.batch; ++s) {
    if (per_sequence) {
      double seq_cost = 0;
      for (double c : query_costs[s]) {
        seq_cost += c;
      }
      for (std::int64_t h = 0; h < heads; ++h) {
        items.push_back({s, h, 0, seq_cost, Kind::kSequence});
      }
      continue;
    }
    const std::vector<double> key_costs = block_costs(p, s, /*query_blocks=*/false);
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t b = 0; b < static_cast<std::int64_t>(key_costs.size()); ++b) {
        items.push_back({s, h, b, key_costs[b], Kind::kKeyBlock});
      }
      for (std::int64_t b = 0; b < static_cast<std::int64_t>(query_costs[s].size()); ++b) {
        items.push_back({s, h, b, query_costs[s][b], Kind::kQueryBlock});
      }
    }
  }
  std::int64_t longest = 0;
  for (std::int64_t s = 0; s < call.batch; ++s) {
    longest = std::max(longest, batch.offsets[s + 1] - batch.offsets[s]);
  }
  // Items per (sequence, head) keep the dq of a whole sequence in scratch.
  const std::int64_t scratch =
      scratch_floats(p.attn_dim, p.hidden_dim, per_sequence ? longest : 0);
  const KernelTable& kt = kernels();
  run_items(items, scratch, [&](const Item& it, float* s) {
    switch (it.kind) {
      case Kind::kSequence:
        kt.backward_sequence(p, g, it.seq, it.head, s);
        break;
      case Kind::kKeyBlock:
        kt.backward_key_block(p, g, it.seq, it.head, it.block, s);
        break;
      case Kind::kQueryBlock:
        kt.backward_query_block(p, g, it.seq, it.head, it.block, s);
        break;
    }
  });
  const bool exact = q.scalar_type() == at::kFloat;
  return {exact && dq.size(2) == q.size(2) ? dq : finish(dq, q),
          exact && dk.size(2) == k.size(2) ? dk : finish(dk, k),
          exact && dv.size(2) == v.size(2) ? dv : finish(dv, v)};
}

}  // namespace

const char* selected_isa() { return kernels().isa; }

const char* select_isa(const char* isa) {
  for (const KernelTable& t : runnable()) {
    if (std::string(t.isa) == isa) {
      return active_kernels().exchange(&t)->isa;
    }
  }
  std::string names;
  for (const KernelTable& t : runnable()) {
    names += names.empty() ? t.isa : std::string(", ") + t.isa;
  }
  throw std::invalid_argument(std::string("hstu_mha: no CPU kernels for instruction set '") +
                              isa + "' in this build on this CPU; available: " + names);
}

}  // namespace attn_cpu

TORCH_LIBRARY_IMPL(hstu_ops, CPU, m) {
  m.impl("hstu_mha_fwd", &attn_cpu::hstu_mha_fwd_cpu);
  m.impl("hstu_mha_bwd", &attn_cpu::hstu_mha_bwd_cpu);
}

}  // namespace hstu_ops
