// Token + position embedding kernels, whole table or a slice of its rows; see embedding.h. Every kernel gives
// one thread kVec adjacent channels of a row (kVec = 4: 16-byte loads and stores, when C % 4 == 0 and every
// pointer is 16-byte aligned).
//
// The backward adds in the CPU's order (kernels/cpu/embedding.cc: one running sum per element, rows in
// increasing (b,t)), with no atomics. dwpe: a thread walks b = 0, 1, ... for its position. dwte: repeated
// tokens scatter into the same row, so a stable radix sort of (token, row) pairs groups each token's rows in
// increasing order; the thread block at the head of each token's run then walks that run.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/embedding.h"

namespace gpt::cuda {
namespace {

constexpr int kMaxThreads = 256;
// Rows of one token whose loads a thread issues before adding them (in order) into its running sum: long
// runs (frequent tokens) are latency-bound, and this keeps several loads in flight.
constexpr int kRowsInFlight = 8;

template <int kVec>
__device__ __forceinline__ void add_to(Vec<kVec>& acc, const Vec<kVec>& d) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc.v[k] += d.v[k];
}

// The first channel of this thread (blockIdx.y and threadIdx.x split the row's channels).
template <int kVec>
__device__ __forceinline__ int first_channel() {
  return (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
}

// One block row per (b,t); in fp32 from the storage type T, rounded back once.
template <typename T, int kVec>
__global__ void embedding_forward_kernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                                         const T* __restrict__ wte, const T* __restrict__ wpe, int T_,
                                         int C) {
  const int c = first_channel<kVec>();
  if (c >= C) return;
  const int64_t bt = blockIdx.x;
  Vec<kVec> sum = load_floats<kVec>(wte + int64_t(tokens[bt]) * C + c);
  add_to(sum, load_floats<kVec>(wpe + (bt % T_) * C + c));
  store_floats<kVec>(out + bt * C + c, sum);
}

// The vocabulary-parallel forward: wte holds rows [first, first + rows); a token outside them contributes
// 0, and wpe may be null. Each present term is added as the whole-table kernel adds it (x + 0 is x), so the
// slices' outputs sum to its bits. In fp32 from the storage type T, rounded back once.
template <typename T, int kVec>
__global__ void embedding_rows_forward_kernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                                              const T* __restrict__ wte, int64_t first, int64_t rows,
                                              const T* __restrict__ wpe, int T_, int C) {
  const int c = first_channel<kVec>();
  if (c >= C) return;
  const int64_t bt = blockIdx.x;
  const int64_t row = int64_t(tokens[bt]) - first;
  const bool held = row >= 0 && row < rows;
  Vec<kVec> sum;
  if (held) {
    sum = load_floats<kVec>(wte + row * C + c);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum.v[k] = 0.0f;
  }
  if (wpe) {
    const Vec<kVec> p = load_floats<kVec>(wpe + (bt % T_) * C + c);
    if (held) {
      add_to(sum, p);
    } else {
      sum = p;
    }
  }
  store_floats<kVec>(out + bt * C + c, sum);
}

// One block row per position t: dwpe[t,c] += dout[0,t,c], then dout[1,t,c], ... (dout in its storage type D,
// each value widened exactly).
template <typename D, int kVec>
__global__ void position_grad_kernel(float* __restrict__ dwpe, const D* __restrict__ dout, int B, int T,
                                     int C) {
  const int c = first_channel<kVec>();
  if (c >= C) return;
  const int64_t t = blockIdx.x;
  Vec<kVec> acc = load_vec<kVec>(dwpe + t * C + c);
#pragma unroll 8
  for (int b = 0; b < B; ++b) add_to(acc, load_floats<kVec>(dout + (int64_t(b) * T + t) * C + c));
  store_vec(dwpe + t * C + c, acc);
}

__global__ void iota_kernel(int32_t* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = i;
}

// The slice's row of each token: token - first inside [first, first + rows), else `rows` (a run that the
// gradient kernel skips).
__global__ void slice_rows_kernel(int32_t* out, const int32_t* tokens, int n, int64_t first, int64_t rows) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int64_t row = int64_t(tokens[i]) - first;
    out[i] = static_cast<int32_t>(row >= 0 && row < rows ? row : rows);
  }
}

// Block row i looks at sorted entry i; only the head of a token's run works: it adds the dout rows of the
// run, in increasing row order, into that token's dwte row. Runs never overlap, so no two blocks write one
// element. The run of token `skip` (tokens outside a slice of the table) adds nothing.
template <typename D, int kVec>
__global__ void token_grad_kernel(float* __restrict__ dwte, const D* __restrict__ dout,
                                  const int32_t* __restrict__ sorted_tokens,
                                  const int32_t* __restrict__ sorted_rows, int n, int C, int32_t skip) {
  const int head = blockIdx.x;
  const int32_t token = sorted_tokens[head];
  if (token == skip || (head > 0 && sorted_tokens[head - 1] == token)) return;
  const int c = first_channel<kVec>();
  if (c >= C) return;
  float* w = dwte + int64_t(token) * C + c;
  Vec<kVec> acc = load_vec<kVec>(w);
  for (int j = head;; j += kRowsInFlight) {
    bool in_run[kRowsInFlight];
    Vec<kVec> d[kRowsInFlight];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      in_run[u] = j + u < n && sorted_tokens[j + u] == token;
      if (in_run[u]) d[u] = load_floats<kVec>(dout + int64_t(sorted_rows[j + u]) * C + c);
    }
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u)
      if (in_run[u]) add_to(acc, d[u]);
    if (!in_run[kRowsInFlight - 1]) break;
  }
  store_vec(w, acc);
}

// Threads per block and blocks per row for C channels, kVec per thread.
struct RowSplit {
  dim3 threads, blocks;
};
RowSplit split_rows(int64_t rows, int C, int vec) {
  const int lanes = (C + vec - 1) / vec;
  const int threads = std::min(kMaxThreads, (lanes + 31) / 32 * 32);
  return {dim3(threads), dim3(static_cast<unsigned>(rows), (lanes + threads - 1) / threads)};
}

size_t round_up_256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

template <typename D, int kVec>
void launch_position_grad(const Context& ctx, float* dwpe, const D* dout, int B, int T, int C) {
  const RowSplit s = split_rows(T, C, kVec);
  position_grad_kernel<D, kVec><<<s.blocks, s.threads, 0, ctx.stream()>>>(dwpe, dout, B, T, C);
  GPT_CUDA_CHECK(cudaGetLastError());
}

// Sorts the n (token, row) pairs by token, stably (rows of one token stay in increasing order), then adds
// each token's run but skip's into dwte. Tokens are below vocab.
template <typename D, int kVec>
void token_grads(const Context& ctx, float* dwte, const D* dout, const int32_t* tokens, int n, int C,
                 int vocab, int32_t skip) {
  int bits = 1;
  while (bits < 31 && (int64_t(1) << bits) < vocab) ++bits;
  size_t sort_bytes = 0;
  GPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, tokens, static_cast<int32_t*>(nullptr),
                                                 static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), n, 0, bits, ctx.stream()));
  const size_t array_bytes = round_up_256(sizeof(int32_t) * size_t(n));
  StreamScratch scratch(ctx, 3 * array_bytes + sort_bytes);
  auto* sorted_tokens = reinterpret_cast<int32_t*>(scratch.as<char>());
  auto* rows = reinterpret_cast<int32_t*>(scratch.as<char>() + array_bytes);
  auto* sorted_rows = reinterpret_cast<int32_t*>(scratch.as<char>() + 2 * array_bytes);
  iota_kernel<<<elementwise_blocks(n, kMaxThreads), kMaxThreads, 0, ctx.stream()>>>(rows, n);
  GPT_CUDA_CHECK(cudaGetLastError());
  GPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch.as<char>() + 3 * array_bytes, sort_bytes, tokens,
                                                 sorted_tokens, rows, sorted_rows, n, 0, bits, ctx.stream()));
  const RowSplit s = split_rows(n, C, kVec);
  token_grad_kernel<D, kVec>
      <<<s.blocks, s.threads, 0, ctx.stream()>>>(dwte, dout, sorted_tokens, sorted_rows, n, C, skip);
  GPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

template <typename T>
void embedding_forward(const Context& ctx, T* out, const int32_t* tokens, const T* wte, const T* wpe, int B,
                       int T_, int C) {
  const int64_t rows = int64_t(B) * T_;
  if (rows <= 0 || C <= 0) return;
  const bool vec4 = std::is_same_v<T, float> && C % 4 == 0 && aligned16(out) && aligned16(wte) &&
                    aligned16(wpe);  // 16-byte accesses for fp32 only
  if constexpr (std::is_same_v<T, float>) {
    if (vec4) {
      const RowSplit s = split_rows(rows, C, 4);
      embedding_forward_kernel<T, 4><<<s.blocks, s.threads, 0, ctx.stream()>>>(out, tokens, wte, wpe, T_, C);
    }
  }
  if (!vec4) {
    const RowSplit s = split_rows(rows, C, 1);
    embedding_forward_kernel<T, 1><<<s.blocks, s.threads, 0, ctx.stream()>>>(out, tokens, wte, wpe, T_, C);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

template void embedding_forward<float>(const Context&, float*, const int32_t*, const float*, const float*, int,
                                       int, int);
template void embedding_forward<__half>(const Context&, __half*, const int32_t*, const __half*, const __half*,
                                        int, int, int);
template void embedding_forward<__nv_bfloat16>(const Context&, __nv_bfloat16*, const int32_t*,
                                               const __nv_bfloat16*, const __nv_bfloat16*, int, int, int);

template <typename T>
void embedding_forward_rows(const Context& ctx, T* out, const int32_t* tokens, const T* wte, int64_t first,
                            int64_t rows, const T* wpe, int B, int T_, int C) {
  const int64_t bt_rows = int64_t(B) * T_;
  if (bt_rows <= 0 || C <= 0) return;
  const bool vec4 = std::is_same_v<T, float> && C % 4 == 0 && aligned16(out) && aligned16(wte) &&
                    aligned16(wpe);  // 16-byte accesses for fp32 only
  if constexpr (std::is_same_v<T, float>) {
    if (vec4) {
      const RowSplit s = split_rows(bt_rows, C, 4);
      embedding_rows_forward_kernel<T, 4>
          <<<s.blocks, s.threads, 0, ctx.stream()>>>(out, tokens, wte, first, rows, wpe, T_, C);
    }
  }
  if (!vec4) {
    const RowSplit s = split_rows(bt_rows, C, 1);
    embedding_rows_forward_kernel<T, 1>
        <<<s.blocks, s.threads, 0, ctx.stream()>>>(out, tokens, wte, first, rows, wpe, T_, C);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

template void embedding_forward_rows<float>(const Context&, float*, const int32_t*, const float*, int64_t,
                                            int64_t, const float*, int, int, int);
template void embedding_forward_rows<__half>(const Context&, __half*, const int32_t*, const __half*, int64_t,
                                             int64_t, const __half*, int, int, int);
template void embedding_forward_rows<__nv_bfloat16>(const Context&, __nv_bfloat16*, const int32_t*,
                                                    const __nv_bfloat16*, int64_t, int64_t,
                                                    const __nv_bfloat16*, int, int, int);

namespace {

// 16-byte accesses where dout is fp32 and every pointer allows them; fp16/bf16 dout element by element.
template <typename D>
bool vector_gradients(const D* dout, const float* grad, int C) {
  return std::is_same_v<D, float> && C % 4 == 0 && aligned16(dout) && aligned16(grad);
}

template <typename D>
void position_grads(const Context& ctx, float* dwpe, const D* dout, int B, int T, int C) {
  if constexpr (std::is_same_v<D, float>) {
    if (vector_gradients(dout, dwpe, C)) return launch_position_grad<D, 4>(ctx, dwpe, dout, B, T, C);
  }
  launch_position_grad<D, 1>(ctx, dwpe, dout, B, T, C);
}

template <typename D>
void token_grads_any(const Context& ctx, float* dwte, const D* dout, const int32_t* tokens, int n, int C,
                     int vocab, int32_t skip) {
  if constexpr (std::is_same_v<D, float>) {
    if (vector_gradients(dout, dwte, C)) return token_grads<D, 4>(ctx, dwte, dout, tokens, n, C, vocab, skip);
  }
  token_grads<D, 1>(ctx, dwte, dout, tokens, n, C, vocab, skip);
}

}  // namespace

template <typename D>
void embedding_backward(const Context& ctx, float* dwte, float* dwpe, const D* dout, const int32_t* tokens,
                        int B, int T, int C, int vocab) {
  const int n = B * T;
  if (n <= 0 || C <= 0) return;
  if (dwpe) position_grads(ctx, dwpe, dout, B, T, C);
  if (dwte) token_grads_any(ctx, dwte, dout, tokens, n, C, vocab, -1);
}

template <typename D>
void embedding_backward_rows(const Context& ctx, float* dwte, int64_t first, int64_t rows, float* dwpe,
                             const D* dout, const int32_t* tokens, int B, int T, int C) {
  const int n = B * T;
  if (n <= 0 || C <= 0) return;
  if (dwpe) position_grads(ctx, dwpe, dout, B, T, C);
  if (!dwte || rows <= 0) return;
  StreamScratch slice_rows(ctx, sizeof(int32_t) * size_t(n));
  slice_rows_kernel<<<elementwise_blocks(n, kMaxThreads), kMaxThreads, 0, ctx.stream()>>>(
      slice_rows.as<int32_t>(), tokens, n, first, rows);
  GPT_CUDA_CHECK(cudaGetLastError());
  // Row ids up to `rows` (the skipped run) inclusive.
  token_grads_any(ctx, dwte, dout, slice_rows.as<int32_t>(), n, C, static_cast<int>(rows + 1),
                  static_cast<int32_t>(rows));
}

#define GPT_EMBEDDING_BACKWARD(D)                                                                          \
  template void embedding_backward<D>(const Context&, float*, float*, const D*, const int32_t*, int, int, int, \
                                      int);                                                                    \
  template void embedding_backward_rows<D>(const Context&, float*, int64_t, int64_t, float*, const D*,       \
                                           const int32_t*, int, int, int);
GPT_EMBEDDING_BACKWARD(float)
GPT_EMBEDDING_BACKWARD(__half)
GPT_EMBEDDING_BACKWARD(__nv_bfloat16)
#undef GPT_EMBEDDING_BACKWARD

}  // namespace gpt::cuda
