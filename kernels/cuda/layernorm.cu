// LayerNorm kernels; see layernorm.h. A group of 16 threads owns a row: thread l sums the elements l, l+16,
// l+32, ... and the 16 partial sums combine as acc[l] += acc[l + w] for w = 8, 4, 2, 1, which is exactly
// the CPU's lane_sum (kernels/cpu/internal.h), so the row statistics are summed in the CPU's order. The
// element-wise passes over a row use 16-byte loads and stores where C % 4 == 0 and the pointers are aligned.
//
// Backward: one kernel computes each row's dx (two row sums, then the update); dweight and dbias are column
// sums over the rows, done without atomics in a fixed order: one kernel sums chunks of kRowsPerPartial rows
// per column into a scratch buffer, a second adds the chunks in order.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/layernorm.h"

namespace gpt::cuda {
namespace {

constexpr float kEps = 1e-5f;  // kernels/cpu/layernorm.h's kLayerNormEps, rounded to fp32 as the CPU does
constexpr int kLanes = 16;     // threads per row: the CPU's lane_sum lanes
constexpr int kThreads = 256;  // kThreads / kLanes rows per block
constexpr int kRowsPerPartial = 32;
constexpr unsigned kFullWarp = 0xffffffffu;

// lane_sum's combining tree over the 16 threads of a row, then the total to all of them. Every thread of the
// warp must call it (rows past N included).
__device__ __forceinline__ float combine_lanes(float acc) {
#pragma unroll
  for (int w = kLanes / 2; w > 0; w /= 2) acc += __shfl_down_sync(kFullWarp, acc, w, kLanes);
  return __shfl_sync(kFullWarp, acc, 0, kLanes);
}

// The row of this thread's group and the thread's lane in it.
struct RowLane {
  int row, lane;
};
__device__ __forceinline__ RowLane row_lane() {
  return {static_cast<int>(blockIdx.x) * (kThreads / kLanes) + static_cast<int>(threadIdx.x) / kLanes,
          static_cast<int>(threadIdx.x) % kLanes};
}

template <int kVec>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(float* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             const float* __restrict__ x, const float* __restrict__ weight,
                             const float* __restrict__ bias, int N, int C, float inv_c) {
  const RowLane at = row_lane();
  const bool valid = at.row < N;
  const int cols = valid ? C : 0;  // a group past the last row sums nothing but joins the shuffles
  const float* xr = x + int64_t(valid ? at.row : 0) * C;
  // Two passes over the row (from L1) rather than E[x^2] - E[x]^2, as the CPU.
  float acc = 0.0f;
  for (int c = at.lane; c < cols; c += kLanes) acc += xr[c];
  const float m = combine_lanes(acc) * inv_c;
  acc = 0.0f;
  for (int c = at.lane; c < cols; c += kLanes) acc += (xr[c] - m) * (xr[c] - m);
  const float s = 1.0f / sqrtf(combine_lanes(acc) * inv_c + kEps);
  if (!valid) return;
  float* yr = out + int64_t(at.row) * C;
  for (int c = at.lane * kVec; c < C; c += kLanes * kVec) {
    const Vec<kVec> xv = load_vec<kVec>(xr + c), wv = load_vec<kVec>(weight + c),
                    bv = load_vec<kVec>(bias + c);
    Vec<kVec> y;
#pragma unroll
    for (int k = 0; k < kVec; ++k) y.v[k] = (xv.v[k] - m) * s * wv.v[k] + bv.v[k];
    store_vec(yr + c, y);
  }
  if (at.lane == 0 && mean) mean[at.row] = m;
  if (at.lane == 0 && rstd) rstd[at.row] = s;
}

// LayerNorm in the storage type T, one element at a time, each pass striding the row as the first one does
// (lane l owns the elements l, l + 16, ...). kResidual: the row is residual = a + b rounded to T, written in
// the first pass, and each thread reads back only its own sums (residual may alias a or b); otherwise the row
// is a itself. mean and rstd may be null without kResidual.
template <typename T, bool kResidual>
__global__ void __launch_bounds__(kThreads)
    layernorm_rows_kernel(T* residual, T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                          const T* a, const T* b, const T* __restrict__ weight, const T* __restrict__ bias,
                          int N, int C, float inv_c) {
  const RowLane at = row_lane();
  const bool valid = at.row < N;
  const int cols = valid ? C : 0;  // a group past the last row sums nothing but joins the shuffles
  const int64_t offset = int64_t(valid ? at.row : 0) * C;
  const T* xr = kResidual ? residual + offset : a + offset;
  float acc = 0.0f;
  for (int c = at.lane; c < cols; c += kLanes) {
    if constexpr (kResidual) {
      const T r = from_float<T>(to_float(a[offset + c]) + to_float(b[offset + c]));
      residual[offset + c] = r;
      acc += to_float(r);
    } else {
      acc += to_float(xr[c]);
    }
  }
  const float m = combine_lanes(acc) * inv_c;
  acc = 0.0f;
  for (int c = at.lane; c < cols; c += kLanes) {
    const float d = to_float(xr[c]) - m;
    acc += d * d;
  }
  const float s = 1.0f / sqrtf(combine_lanes(acc) * inv_c + kEps);
  if (!valid) return;
  T* yr = out + offset;
  for (int c = at.lane; c < C; c += kLanes)
    yr[c] = from_float<T>((to_float(xr[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
  if (at.lane == 0 && mean) mean[at.row] = m;
  if (at.lane == 0 && rstd) rstd[at.row] = s;
}

// dx += rstd (g - mean_c(g) - xhat mean_c(g xhat)) with g = dy w, xhat = (x - mean) rstd, per row, in fp32
// from the storage type T (dx rounded back once).
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    layernorm_input_grad_kernel(T* dx, const T* __restrict__ dout, const T* __restrict__ x,
                                const T* __restrict__ weight, const float* __restrict__ mean,
                                const float* __restrict__ rstd, int N, int C, float inv_c) {
  const RowLane at = row_lane();
  const bool valid = at.row < N;
  const int cols = valid ? C : 0;
  const int64_t offset = int64_t(valid ? at.row : 0) * C;
  const T *xr = x + offset, *dy = dout + offset;
  const float m = valid ? mean[at.row] : 0.0f, s = valid ? rstd[at.row] : 0.0f;
  float g_acc = 0.0f, gx_acc = 0.0f;
  for (int c = at.lane; c < cols; c += kLanes) {
    const float dyc = to_float(dy[c]), wc = to_float(weight[c]);
    g_acc += dyc * wc;
    gx_acc += dyc * wc * (to_float(xr[c]) - m) * s;
  }
  const float g_mean = combine_lanes(g_acc) * inv_c, gx_mean = combine_lanes(gx_acc) * inv_c;
  if (!valid) return;
  T* dxr = dx + offset;
  for (int c = at.lane * kVec; c < C; c += kLanes * kVec) {
    const Vec<kVec> dyv = load_floats<kVec>(dy + c), wv = load_floats<kVec>(weight + c),
                    xv = load_floats<kVec>(xr + c);
    Vec<kVec> d = load_floats<kVec>(dxr + c);
#pragma unroll
    for (int k = 0; k < kVec; ++k) d.v[k] += s * (dyv.v[k] * wv.v[k] - g_mean - (xv.v[k] - m) * s * gx_mean);
    store_floats<kVec>(dxr + c, d);
  }
}

// Block row `chunk` (blockIdx.x) sums rows [chunk * kRowsPerPartial, ...) of dy xhat and dy for its columns
// into partial_w/partial_b[chunk, :]. Chunk 0 starts from the current dweight and dbias, so that with one
// chunk the sum runs in the CPU's order.
template <typename T, int kVec>
__global__ void layernorm_param_partials_kernel(float* __restrict__ partial_w, float* __restrict__ partial_b,
                                                const float* __restrict__ dweight,
                                                const float* __restrict__ dbias, const T* __restrict__ dout,
                                                const T* __restrict__ x, const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int N, int C) {
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
  if (c >= C) return;
  const int chunk = blockIdx.x;
  const int begin = chunk * kRowsPerPartial, end = min(N, begin + kRowsPerPartial);
  Vec<kVec> w_acc = {}, b_acc = {};
  if (chunk == 0) w_acc = load_vec<kVec>(dweight + c), b_acc = load_vec<kVec>(dbias + c);
#pragma unroll 4
  for (int r = begin; r < end; ++r) {
    const float m = mean[r], s = rstd[r];
    const Vec<kVec> dy = load_floats<kVec>(dout + int64_t(r) * C + c),
                    xv = load_floats<kVec>(x + int64_t(r) * C + c);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      w_acc.v[k] += dy.v[k] * (xv.v[k] - m) * s;
      b_acc.v[k] += dy.v[k];
    }
  }
  store_vec(partial_w + int64_t(chunk) * C + c, w_acc);
  store_vec(partial_b + int64_t(chunk) * C + c, b_acc);
}

// dweight[c] = partial_w[0, c] + partial_w[1, c] + ... in chunk order (likewise dbias).
__global__ void layernorm_param_sum_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                           const float* __restrict__ partial_w,
                                           const float* __restrict__ partial_b, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float w = partial_w[c], b = partial_b[c];
#pragma unroll 8
  for (int k = 1; k < chunks; ++k) {
    w += partial_w[int64_t(k) * C + c];
    b += partial_b[int64_t(k) * C + c];
  }
  dweight[c] = w;
  dbias[c] = b;
}

unsigned row_blocks(int N) {
  return static_cast<unsigned>((int64_t(N) + kThreads / kLanes - 1) / (kThreads / kLanes));
}

template <typename T, int kVec>
void param_grads(const Context& ctx, float* dweight, float* dbias, const T* dout, const T* x, const float* mean,
                 const float* rstd, int N, int C) {
  const int chunks = (N + kRowsPerPartial - 1) / kRowsPerPartial;
  StreamScratch partials(ctx, 2 * sizeof(float) * size_t(chunks) * C);
  float* partial_w = partials.as<float>();
  float* partial_b = partial_w + int64_t(chunks) * C;
  const int lanes = (C + kVec - 1) / kVec;
  const int threads = std::min(kThreads, (lanes + 31) / 32 * 32);
  const dim3 blocks(chunks, (lanes + threads - 1) / threads);
  layernorm_param_partials_kernel<T, kVec>
      <<<blocks, threads, 0, ctx.stream()>>>(partial_w, partial_b, dweight, dbias, dout, x, mean, rstd, N, C);
  GPT_CUDA_CHECK(cudaGetLastError());
  layernorm_param_sum_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, ctx.stream()>>>(
      dweight, dbias, partial_w, partial_b, chunks, C);
  GPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void layernorm_forward(const Context& ctx, float* out, float* mean, float* rstd, const float* x,
                       const float* weight, const float* bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const float inv_c = 1.0f / static_cast<float>(C);
  if (C % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(weight) && aligned16(bias)) {
    layernorm_forward_kernel<4>
        <<<row_blocks(N), kThreads, 0, ctx.stream()>>>(out, mean, rstd, x, weight, bias, N, C, inv_c);
  } else {
    layernorm_forward_kernel<1>
        <<<row_blocks(N), kThreads, 0, ctx.stream()>>>(out, mean, rstd, x, weight, bias, N, C, inv_c);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void residual_layernorm_forward(const Context& ctx, T* residual, T* out, float* mean, float* rstd, const T* a,
                                const T* b, const T* weight, const T* bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  layernorm_rows_kernel<T, true><<<row_blocks(N), kThreads, 0, ctx.stream()>>>(
      residual, out, mean, rstd, a, b, weight, bias, N, C, 1.0f / static_cast<float>(C));
  GPT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void layernorm_forward_half(const Context& ctx, T* out, float* mean, float* rstd, const T* x, const T* weight,
                            const T* bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  layernorm_rows_kernel<T, false><<<row_blocks(N), kThreads, 0, ctx.stream()>>>(
      nullptr, out, mean, rstd, x, nullptr, weight, bias, N, C, 1.0f / static_cast<float>(C));
  GPT_CUDA_CHECK(cudaGetLastError());
}

template void layernorm_forward_half<__half>(const Context&, __half*, float*, float*, const __half*,
                                             const __half*, const __half*, int, int);
template void layernorm_forward_half<__nv_bfloat16>(const Context&, __nv_bfloat16*, float*, float*,
                                                    const __nv_bfloat16*, const __nv_bfloat16*,
                                                    const __nv_bfloat16*, int, int);

template void residual_layernorm_forward<float>(const Context&, float*, float*, float*, float*, const float*,
                                                const float*, const float*, const float*, int, int);
template void residual_layernorm_forward<__half>(const Context&, __half*, __half*, float*, float*,
                                                 const __half*, const __half*, const __half*, const __half*,
                                                 int, int);
template void residual_layernorm_forward<__nv_bfloat16>(const Context&, __nv_bfloat16*, __nv_bfloat16*,
                                                        float*, float*, const __nv_bfloat16*,
                                                        const __nv_bfloat16*, const __nv_bfloat16*,
                                                        const __nv_bfloat16*, int, int);

template <typename T>
void layernorm_backward(const Context& ctx, T* dx, float* dweight, float* dbias, const T* dout, const T* x,
                        const T* weight, const float* mean, const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const float inv_c = 1.0f / static_cast<float>(C);
  constexpr bool kFloat = std::is_same_v<T, float>;  // 16-byte accesses for fp32 only
  const bool rows4 =
      kFloat && C % 4 == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(weight);
  if constexpr (kFloat) {
    if (rows4) {
      layernorm_input_grad_kernel<T, 4>
          <<<row_blocks(N), kThreads, 0, ctx.stream()>>>(dx, dout, x, weight, mean, rstd, N, C, inv_c);
    }
  }
  if (!rows4) {
    layernorm_input_grad_kernel<T, 1>
        <<<row_blocks(N), kThreads, 0, ctx.stream()>>>(dx, dout, x, weight, mean, rstd, N, C, inv_c);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
  const bool cols4 = kFloat && C % 4 == 0 && aligned16(dout) && aligned16(x) && aligned16(dweight) &&
                     aligned16(dbias);
  if constexpr (kFloat) {
    if (cols4) return param_grads<T, 4>(ctx, dweight, dbias, dout, x, mean, rstd, N, C);
  }
  param_grads<T, 1>(ctx, dweight, dbias, dout, x, mean, rstd, N, C);
}

template void layernorm_backward<float>(const Context&, float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<__half>(const Context&, __half*, float*, float*, const __half*, const __half*,
                                         const __half*, const float*, const float*, int, int);
template void layernorm_backward<__nv_bfloat16>(const Context&, __nv_bfloat16*, float*, float*,
                                                const __nv_bfloat16*, const __nv_bfloat16*,
                                                const __nv_bfloat16*, const float*, const float*, int, int);

}  // namespace gpt::cuda
