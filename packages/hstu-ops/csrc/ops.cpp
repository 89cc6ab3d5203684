// Operator schemas of the `hstu_ops` torch.library namespace (torch.ops.hstu_ops.*).
//
// Backend kernels are registered next to their implementations (jagged_cpu.cpp,
// jagged_gpu.cu). Autograd formulas and fake (meta) kernels are registered from Python, in
// hstu_ops/_native.py, once for every backend.
#include <torch/library.h>

TORCH_LIBRARY(hstu_ops, m) {
  // offsets[0] = 0, offsets[i + 1] = lengths[0] + ... + lengths[i]; same dtype as lengths.
  m.def("complete_cumsum(Tensor lengths) -> Tensor");
  // Row i of the result is row i of a followed by row i of b. Returns (values, offsets).
  m.def(
      "concat_1d_jagged(Tensor values_a, Tensor offsets_a, Tensor values_b, Tensor offsets_b)"
      " -> (Tensor, Tensor)");
  // Inverse of concat_1d_jagged: returns (values_a, values_b, offsets_b), where sequence i of
  // values_a holds the first offsets_a[i + 1] - offsets_a[i] rows of sequence i of values.
  m.def(
      "split_1d_jagged(Tensor values, Tensor offsets, Tensor offsets_a)"
      " -> (Tensor, Tensor, Tensor)");
  // Jagged HSTU attention (hstu_ops.pytorch.pt_hstu_attention states the semantics and the
  // mask): q, k [total, heads, attn_dim], v [total, heads, hidden_dim] -> out like v.
  m.def(
      "hstu_mha_fwd(int max_seq_len, float alpha, Tensor q, Tensor k, Tensor v,"
      " Tensor seq_offsets, bool causal=True, Tensor? num_targets=None, int max_attn_len=0,"
      " int contextual_seq_len=0) -> Tensor");
  // Its backward: (dq, dk, dv) from the output gradient, recomputing the weights from q and k.
  m.def(
      "hstu_mha_bwd(Tensor dout, int max_seq_len, float alpha, Tensor q, Tensor k, Tensor v,"
      " Tensor seq_offsets, bool causal=True, Tensor? num_targets=None, int max_attn_len=0,"
      " int contextual_seq_len=0) -> (Tensor, Tensor, Tensor)");
}
