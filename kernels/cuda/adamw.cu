// AdamW kernels (see adamw.h): one grid-stride pass over param, grad, m and v, with 16-byte loads where all
// four arrays are 16-byte aligned, calling the shared element update; optionally writing the rounded
// fp16/bf16 compute copy of each updated parameter in the same pass.
#include <cstdint>
#include <string>

#include "kernels/common/adamw_element.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/dtype.cuh"
#include "tensor/half.h"

namespace gpt::cuda {
namespace {

constexpr int kThreads = 256;

// Which compute copy a kernel writes, if any.
enum class Copy { kNone, kF16, kBF16 };

template <Copy kCopy>
__device__ __forceinline__ uint16_t rounded(float x) {
  if constexpr (kCopy == Copy::kF16) {
    return gpt::f32_to_f16(x);
  } else {
    return gpt::f32_to_bf16(x);
  }
}

template <bool kDecoupled, Copy kCopy>
__device__ __forceinline__ void update_one(float* param, const float* grad, float* m, float* v,
                                           uint16_t* compute, int64_t i,
                                           const gpt::adamw::Constants<float>& c) {
  float p = param[i], mi = m[i], vi = v[i];
  gpt::adamw::update<kDecoupled>(p, mi, vi, grad[i], c);
  param[i] = p;
  m[i] = mi;
  v[i] = vi;
  if constexpr (kCopy != Copy::kNone) compute[i] = rounded<kCopy>(p);
}

// kVec4: elements [0, 4 * (n / 4)) as float4 groups (every array 16-byte aligned, compute 8-byte aligned),
// the last n % 4 by the grid's first threads; otherwise one element at a time.
template <bool kDecoupled, Copy kCopy, bool kVec4>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, uint16_t* compute,
                             int64_t n, gpt::adamw::Constants<float> c) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec4) {
    const int64_t groups = n / 4;
    for (int64_t q = first; q < groups; q += stride) {
      float4 p = reinterpret_cast<float4*>(param)[q], mi = reinterpret_cast<float4*>(m)[q];
      float4 vi = reinterpret_cast<float4*>(v)[q];
      const float4 g = reinterpret_cast<const float4*>(grad)[q];
      gpt::adamw::update<kDecoupled>(p.x, mi.x, vi.x, g.x, c);
      gpt::adamw::update<kDecoupled>(p.y, mi.y, vi.y, g.y, c);
      gpt::adamw::update<kDecoupled>(p.z, mi.z, vi.z, g.z, c);
      gpt::adamw::update<kDecoupled>(p.w, mi.w, vi.w, g.w, c);
      reinterpret_cast<float4*>(param)[q] = p;
      reinterpret_cast<float4*>(m)[q] = mi;
      reinterpret_cast<float4*>(v)[q] = vi;
      if constexpr (kCopy != Copy::kNone) {
        reinterpret_cast<ushort4*>(compute)[q] =
            make_ushort4(rounded<kCopy>(p.x), rounded<kCopy>(p.y), rounded<kCopy>(p.z), rounded<kCopy>(p.w));
      }
    }
    if (first < n - 4 * groups)
      update_one<kDecoupled, kCopy>(param, grad, m, v, compute, 4 * groups + first, c);
  } else {
    for (int64_t i = first; i < n; i += stride)
      update_one<kDecoupled, kCopy>(param, grad, m, v, compute, i, c);
  }
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <bool kDecoupled, Copy kCopy>
void launch(const Context& ctx, float* param, const float* grad, float* m, float* v, uint16_t* compute,
            int64_t n, const gpt::adamw::Constants<float>& c) {
  const bool vec4 = aligned(param, 16) && aligned(grad, 16) && aligned(m, 16) && aligned(v, 16) &&
                    (kCopy == Copy::kNone || aligned(compute, 8));
  if (vec4) {
    adamw_kernel<kDecoupled, kCopy, true>
        <<<elementwise_blocks(n / 4 > 0 ? n / 4 : 1, kThreads), kThreads, 0, ctx.stream()>>>(
            param, grad, m, v, compute, n, c);
  } else {
    adamw_kernel<kDecoupled, kCopy, false>
        <<<elementwise_blocks(n, kThreads), kThreads, 0, ctx.stream()>>>(param, grad, m, v, compute, n, c);
  }
  GPT_CUDA_CHECK(cudaGetLastError());
}

template <Copy kCopy>
void launch_mode(const Context& ctx, float* param, const float* grad, float* m, float* v, uint16_t* compute,
                 int64_t n, const gpt::adamw::Constants<float>& c, bool decoupled) {
  if (n <= 0) return;
  if (decoupled) {
    launch<true, kCopy>(ctx, param, grad, m, v, compute, n, c);
  } else {
    launch<false, kCopy>(ctx, param, grad, m, v, compute, n, c);
  }
}

}  // namespace

void adamw_f32(const Context& ctx, float* param, const float* grad, float* m, float* v, int64_t n,
               const gpt::adamw::Constants<float>& c, bool decoupled) {
  launch_mode<Copy::kNone>(ctx, param, grad, m, v, nullptr, n, c, decoupled);
}

void adamw_f32_with_copy(const Context& ctx, float* param, const float* grad, float* m, float* v, int64_t n,
                         const gpt::adamw::Constants<float>& c, bool decoupled, uint16_t* compute,
                         DType compute_dtype) {
  if (compute_dtype == DType::kF16) {
    launch_mode<Copy::kF16>(ctx, param, grad, m, v, compute, n, c, decoupled);
  } else if (compute_dtype == DType::kBF16) {
    launch_mode<Copy::kBF16>(ctx, param, grad, m, v, compute, n, c, decoupled);
  } else {
    throw CudaError(std::string("adamw_f32_with_copy: the compute copy must be f16 or bf16, got ") +
                    dtype_name(compute_dtype));
  }
}

}  // namespace gpt::cuda
