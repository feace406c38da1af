// Linear layer on the GPU: cuBLASLt GEMMs (fp32 accumulation; bias and GELU fused into the GEMM's epilogue)
// plus a deterministic two-pass column sum for the bias gradient.
//
// Row-major to column-major: cuBLASLt sees a row-major [R, K] matrix as a column-major [K, R] one with the
// same pointer and leading dimension K. So out^T[OC,N] = W[OC,C] * inp^T[C,N] is GEMM(op(A) = transpose of
// the column-major [C,OC] view of W, B = inp as is), and likewise for the two backward products below. The
// bias epilogue adds a vector over D's rows, which here are the OC output features: exactly bias[oc]. A tile
// of the layer (memory-centric tiling, *_columns) is the same GEMMs on its columns of out and dout: W rows of
// D with the whole layer's OC as leading dimension.
//
// cuBLASLt picks an algorithm per problem through a heuristic query that costs far more than the GEMM for
// small shapes, so the answer is cached per problem (shape, types, epilogue, pointer alignments, device).
// An empty answer is cached too: the callers then fall back to an unfused path (see try_gemm()).
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/gelu.h"
#include "kernels/cuda/linear.h"

namespace gpt::cuda {
namespace {

// out[n, oc] = bias[oc] for every row (rows ld elements apart), so the GEMM can add its product with beta =
// 1: used only where the bias epilogue is unavailable (bias pointer not 16-byte aligned, or no algorithm with
// the epilogue).
template <typename T>
__global__ void broadcast_rows_kernel(T* out, const T* bias, int64_t rows, int cols, int64_t ld) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[(i / cols) * ld + i % cols] = bias[i % cols];
  }
}

// Bias gradient, pass 1: partial[chunk, oc] = sum of dout[n, oc] over the chunk's rows (rows ld apart). A
// block covers 32 columns of one chunk: threadIdx.x picks the column (coalesced reads along a row),
// threadIdx.y strides over the chunk's rows, then a fixed-order tree sum in shared memory. Chunks spread the
// work over the GPU where OC / 32 blocks alone would leave most SMs idle (768 features: 24 blocks).
constexpr int kBiasColumns = 32;
constexpr int kBiasRowThreads = 16;

template <typename T>
__global__ void bias_gradient_partial_kernel(float* partial, const T* dout, int N, int OC, int64_t ld,
                                             int rows_per_chunk) {
  __shared__ float sums[kBiasRowThreads][kBiasColumns];
  const int column = blockIdx.x * kBiasColumns + threadIdx.x;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = min(N, begin + rows_per_chunk);
  float sum = 0.0f;
  if (column < OC) {
    for (int row = begin + threadIdx.y; row < end; row += kBiasRowThreads) {
      sum += to_float(dout[static_cast<int64_t>(row) * ld + column]);
    }
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kBiasRowThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.y < stride) sums[threadIdx.y][threadIdx.x] += sums[threadIdx.y + stride][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && column < OC)
    partial[static_cast<int64_t>(blockIdx.y) * OC + column] = sums[0][threadIdx.x];
}

// Bias gradient, pass 2: dbias[oc] += the chunks' partial sums, added in chunk order. No atomics anywhere,
// and the chunking depends only on N and OC, so the result repeats bit for bit.
__global__ void bias_gradient_finish_kernel(float* dbias, const float* partial, int chunks, int OC) {
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= OC) return;
  float sum = 0.0f;
  for (int chunk = 0; chunk < chunks; ++chunk) sum += partial[static_cast<int64_t>(chunk) * OC + column];
  dbias[column] += sum;
}

// One column-major GEMM as cuBLASLt sees it: D[m,n] = op(A)[m,k] op(B)[k,n] + beta * D, with an optional
// epilogue; C is D itself (in place, same layout), so beta = 1 accumulates.
struct Gemm {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* d = nullptr;
  int ldd = 0;
  cudaDataType_t input_type = CUDA_R_32F;   // A and B
  cudaDataType_t output_type = CUDA_R_32F;  // C and D (and the bias vector and GELU's aux matrix)
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // the *BIAS epilogues: m values
  void* aux = nullptr;         // GELU_AUX*: the pre-activation, [m, n] with leading dimension ldd
};

// The largest power of two (up to 256, cuBLASLt's default assumption) that divides the address.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  if (address == 0) return 256;
  const uintptr_t lowest_bit = address & (~address + 1);
  return static_cast<uint32_t>(lowest_bit < 256 ? lowest_bit : 256);
}

// Owners of cuBLASLt's descriptors, destroyed however the call ends.
struct MatmulDesc {
  cublasLtMatmulDesc_t handle = nullptr;
  MatmulDesc(const Gemm& g, cublasComputeType_t compute);  // transposes, epilogue and its pointers from g
  ~MatmulDesc() {
    if (handle) cublasLtMatmulDescDestroy(handle);
  }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    GPT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(handle, attribute, &value, sizeof value));
  }
};

struct Layout {
  cublasLtMatrixLayout_t handle = nullptr;
  Layout(cudaDataType_t type, int rows, int cols, int ld) {
    GPT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&handle, type, rows, cols, ld));
  }
  ~Layout() {
    if (handle) cublasLtMatrixLayoutDestroy(handle);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t handle = nullptr;
  Preference() { GPT_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&handle)); }
  ~Preference() {
    if (handle) cublasLtMatmulPreferenceDestroy(handle);
  }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename V>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
    GPT_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(handle, attribute, &value, sizeof value));
  }
};

// Everything the heuristic's answer depends on. The bias and aux alignments count because the heuristic
// reads those pointers' values to decide what alignment an algorithm may assume.
using AlgorithmKey = std::array<int64_t, 19>;

// fp32 inputs may go to tensor cores in bf16 or fp16 (Context::fp32_gemm_compute); half inputs always
// multiply as stored.
cublasComputeType_t compute_type(const Context& ctx, const Gemm& g) {
  return g.input_type == CUDA_R_32F ? ctx.fp32_gemm_compute() : CUBLAS_COMPUTE_32F;
}

AlgorithmKey key_of(const Context& ctx, const Gemm& g, cublasComputeType_t compute) {
  return {ctx.info().index,
          compute,
          g.op_a,
          g.op_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          g.input_type,
          g.output_type,
          g.epilogue,
          g.beta != 0.0f,
          alignment_of(g.a),
          alignment_of(g.b),
          alignment_of(g.d),
          alignment_of(g.bias),
          alignment_of(g.aux)};
}

class AlgorithmCache {
 public:
  // The cached algorithm for the key, or the heuristic's best one (nullopt: none fits), cached either way.
  template <typename Query>
  std::optional<cublasLtMatmulAlgo_t> find(const AlgorithmKey& key, Query&& query) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = algorithms_.find(key);
    if (found == algorithms_.end()) found = algorithms_.emplace(key, query()).first;
    return found->second;
  }

 private:
  std::mutex mutex_;
  std::map<AlgorithmKey, std::optional<cublasLtMatmulAlgo_t>> algorithms_;
};

AlgorithmCache& algorithm_cache() {
  static AlgorithmCache cache;
  return cache;
}

MatmulDesc::MatmulDesc(const Gemm& g, cublasComputeType_t compute) {
  // fp32 accumulation and fp32 alpha/beta for every storage type. CUBLAS_COMPUTE_32F (not _FAST_TF32) keeps
  // fp32 inputs out of TF32 tensor cores unless the context asks for bf16 or fp16 ones.
  GPT_CUDA_CHECK(cublasLtMatmulDescCreate(&handle, compute, CUDA_R_32F));
  set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(g.op_a));
  set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(g.op_b));
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(g.epilogue));
  if (g.bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.aux) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(g.ldd));
  }
}

std::optional<cublasLtMatmulAlgo_t> query_algorithm(const Context& ctx, const Gemm& g, const MatmulDesc& desc,
                                                    const Layout& a, const Layout& b, const Layout& d) {
  Preference preference;
  preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ctx.workspace_bytes()));
  // Views into larger buffers need not be 256-byte aligned (cuBLASLt's default assumption): say how aligned
  // these pointers are, so no algorithm that needs more is chosen.
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(g.a));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(g.b));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(g.d));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(g.d));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt(), desc.handle, a.handle, b.handle, d.handle, d.handle,
                                     preference.handle, 1, &result, &count);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || count == 0) return std::nullopt;
  GPT_CUDA_CHECK(status);
  return result.algo;
}

// Enqueues the GEMM with this compute type; false (and nothing enqueued) when cuBLASLt has no algorithm.
bool try_gemm_as(const Context& ctx, const Gemm& g, cublasComputeType_t compute) {
  const MatmulDesc desc(g, compute);
  // Stored shapes before op(): A is [m,k] or, transposed, [k,m]; likewise B is [k,n] or [n,k].
  const bool ta = g.op_a != CUBLAS_OP_N, tb = g.op_b != CUBLAS_OP_N;
  const Layout a(g.input_type, ta ? g.k : g.m, ta ? g.m : g.k, g.lda);
  const Layout b(g.input_type, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb);
  const Layout d(g.output_type, g.m, g.n, g.ldd);
  const std::optional<cublasLtMatmulAlgo_t> algorithm = algorithm_cache().find(
      key_of(ctx, g, compute), [&] { return query_algorithm(ctx, g, desc, a, b, d); });
  if (!algorithm) return false;
  const float alpha = 1.0f;
  GPT_CUDA_CHECK(cublasLtMatmul(ctx.cublaslt(), desc.handle, &alpha, g.a, a.handle, g.b, b.handle, &g.beta,
                                g.d, d.handle, g.d, d.handle, &*algorithm, ctx.workspace(),
                                ctx.workspace_bytes(), ctx.stream()));
  return true;
}

// Enqueues the GEMM in the context's compute type; a shape or epilogue that has no tensor-core algorithm
// for fp32 inputs rounded to fp16/bf16 runs in exact fp32 instead. False when neither has one.
bool try_gemm(const Context& ctx, const Gemm& g) {
  const cublasComputeType_t compute = compute_type(ctx, g);
  if (try_gemm_as(ctx, g, compute)) return true;
  return compute != CUBLAS_COMPUTE_32F && try_gemm_as(ctx, g, CUBLAS_COMPUTE_32F);
}

void run(const Context& ctx, const Gemm& g) {
  if (!try_gemm(ctx, g)) {
    throw CudaError("cuBLASLt has no algorithm for the GEMM m=" + std::to_string(g.m) +
                    " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) + " (epilogue " +
                    std::to_string(g.epilogue) + ")");
  }
}

void check_shape(const char* op, int N, int C, int OC) {
  if (N < 0 || C <= 0 || OC <= 0) {
    throw CudaError(std::string(op) + ": invalid shape N=" + std::to_string(N) + " C=" + std::to_string(C) +
                    " OC=" + std::to_string(OC) + " (C and OC must be positive, N not negative)");
  }
}

// The heuristic sees the bias pointer, but other cuBLASLt users report epilogue failures on bias vectors that
// are not 16-byte aligned; such a bias (a view at an odd offset) takes the unfused path instead.
bool bias_fusable(const void* bias) {
  return alignment_of(bias) >= 16;
}

// out^T[OC,N] = (W viewed [C,OC])^T * (inp viewed [C,N]), overwriting out, whose rows are ld apart (OC, or
// the whole layer's width for a tile).
template <typename T>
Gemm forward_gemm(T* out, const T* inp, const T* weight, int N, int C, int OC, int64_t ld) {
  Gemm g;
  g.op_a = CUBLAS_OP_T;
  g.m = OC, g.n = N, g.k = C;
  g.a = weight, g.lda = C;
  g.b = inp, g.ldb = C;
  g.d = out, g.ldd = static_cast<int>(ld);
  g.input_type = g.output_type = cuda_data_type<T>();
  return g;
}

template <typename T>
void unfused_forward(const Context& ctx, Gemm g, const T* bias, int N, int OC) {
  g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  g.bias = nullptr;
  g.aux = nullptr;
  if (bias) {
    constexpr int kThreads = 256;
    const int64_t total = static_cast<int64_t>(N) * OC;
    broadcast_rows_kernel<<<elementwise_blocks(total, kThreads), kThreads, 0, ctx.stream()>>>(
        static_cast<T*>(g.d), bias, N, OC, g.ldd);
    GPT_CUDA_CHECK(cudaGetLastError());
    g.beta = 1.0f;
  }
  run(ctx, g);
}

// dbias[OC] += column sums of dout[N,OC] (rows ld apart), in two fixed-order passes through the context's
// workspace.
template <typename T>
void bias_gradient(const Context& ctx, float* dbias, const T* dout, int N, int OC, int64_t ld) {
  constexpr int kRowsPerChunk = 256, kMaxChunks = 64;
  const int64_t fit = static_cast<int64_t>(ctx.workspace_bytes() / (sizeof(float) * static_cast<size_t>(OC)));
  int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  chunks = std::max<int64_t>(1, std::min<int64_t>({chunks, kMaxChunks, fit}));
  const int rows_per_chunk = static_cast<int>((N + chunks - 1) / chunks);
  float* partial = static_cast<float*>(ctx.workspace());
  const dim3 threads(kBiasColumns, kBiasRowThreads);
  const dim3 blocks(static_cast<unsigned>((OC + kBiasColumns - 1) / kBiasColumns),
                    static_cast<unsigned>(chunks));
  bias_gradient_partial_kernel<<<blocks, threads, 0, ctx.stream()>>>(partial, dout, N, OC, ld,
                                                                     rows_per_chunk);
  GPT_CUDA_CHECK(cudaGetLastError());
  constexpr int kFinishThreads = 256;
  bias_gradient_finish_kernel<<<(OC + kFinishThreads - 1) / kFinishThreads, kFinishThreads, 0,
                                ctx.stream()>>>(dbias, partial, static_cast<int>(chunks), OC);
  GPT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// out[:, :OC] = inp * weight^T + bias with out's rows ld apart: the whole layer (ld = OC) or a tile.
template <typename T>
void forward_strided(const Context& ctx, T* out, int64_t ld, const T* inp, const T* weight, const T* bias,
                     int N, int C, int OC) {
  Gemm g = forward_gemm(out, inp, weight, N, C, OC, ld);
  if (bias && bias_fusable(bias)) {
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
    g.bias = bias;
    if (try_gemm(ctx, g)) return;
  }
  unfused_forward(ctx, g, bias, N, OC);
}

// linear_backward over the first OC columns of dout, whose rows are ld apart; dinp accumulated into (a tile's
// part) or overwritten (the whole layer's: beta 0, so the GEMM never reads it).
template <typename T>
void backward_strided(const Context& ctx, T* dinp, bool accumulate_dinp, float* dweight, float* dbias,
                      const T* dout, int64_t ld, const T* inp, const T* weight, int N, int C, int OC) {
  if (dinp) {
    // dinp^T[C,N] (+)= (W viewed [C,OC]) * (dout viewed [OC,N])
    Gemm g;
    g.m = C, g.n = N, g.k = OC;
    g.a = weight, g.lda = C;
    g.b = dout, g.ldb = static_cast<int>(ld);
    g.d = dinp, g.ldd = C;
    g.input_type = g.output_type = cuda_data_type<T>();
    g.beta = accumulate_dinp ? 1.0f : 0.0f;
    run(ctx, g);
  }
  // dweight^T[C,OC] += (inp viewed [C,N]) * (dout viewed [OC,N])^T, accumulated in fp32. The bias gradient
  // is not fused (CUBLASLT_EPILOGUE_BGRADB): that epilogue overwrites its vector, while the seam accumulates
  // into dbias, so it would need a scratch vector and an add kernel anyway; see bias_gradient().
  Gemm g;
  g.op_b = CUBLAS_OP_T;
  g.m = C, g.n = OC, g.k = N;
  g.a = inp, g.lda = C;
  g.b = dout, g.ldb = static_cast<int>(ld);
  g.d = dweight, g.ldd = C;
  g.input_type = cuda_data_type<T>();
  g.output_type = CUDA_R_32F;
  g.beta = 1.0f;
  run(ctx, g);
  if (dbias) bias_gradient(ctx, dbias, dout, N, OC, ld);
}

void check_columns(const char* op, int N, int C, int OC, int first, int W) {
  check_shape(op, N, C, OC);
  if (first < 0 || W <= 0 || static_cast<int64_t>(first) + W > OC) {
    throw CudaError(std::string(op) + ": columns [" + std::to_string(first) + ", " +
                    std::to_string(static_cast<int64_t>(first) + W) + ") outside the layer's " +
                    std::to_string(OC) + " outputs");
  }
}

template <typename T>
void linear_forward(const Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                    int OC) {
  check_shape("linear_forward", N, C, OC);
  if (N == 0) return;
  forward_strided(ctx, out, OC, inp, weight, bias, N, C, OC);
}

template <typename T>
void linear_forward_columns(const Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N,
                            int C, int OC, int first, int W) {
  check_columns("linear_forward_columns", N, C, OC, first, W);
  if (N == 0) return;
  forward_strided(ctx, out + first, OC, inp, weight, bias, N, C, W);
}

template <typename T>
void linear_gelu_forward(const Context& ctx, T* out, T* pre_gelu, const T* inp, const T* weight,
                         const T* bias, int N, int C, int OC) {
  check_shape("linear_gelu_forward", N, C, OC);
  if (N == 0) return;
  Gemm g = forward_gemm(out, inp, weight, N, C, OC, OC);
  g.bias = bias;
  g.aux = pre_gelu;
  g.epilogue = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                        : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
  // cuBLASLt wants the aux matrix's leading dimension (OC) divisible by 8 and the matrix 16-byte aligned.
  const bool fusable =
      (!bias || bias_fusable(bias)) && (!pre_gelu || (OC % 8 == 0 && alignment_of(pre_gelu) >= 16));
  if (fusable && try_gemm(ctx, g)) return;
  // Unfused: the pre-activation where the caller wants it (else in out), then GELU from there into out.
  T* linear_out = pre_gelu ? pre_gelu : out;
  linear_forward(ctx, linear_out, inp, weight, bias, N, C, OC);
  gelu_forward(ctx, out, linear_out, static_cast<int64_t>(N) * OC);
}

template <typename T>
void linear_backward(const Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int C, int OC) {
  check_shape("linear_backward", N, C, OC);
  if (N == 0) return;
  backward_strided(ctx, dinp, false, dweight, dbias, dout, OC, inp, weight, N, C, OC);
}

template <typename T>
void linear_backward_columns(const Context& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                             const T* inp, const T* weight, int N, int C, int OC, int first, int W) {
  check_columns("linear_backward_columns", N, C, OC, first, W);
  if (N == 0) return;
  backward_strided(ctx, dinp, true, dweight, dbias, dout + first, OC, inp, weight, N, C, W);
}

#define GPT_INSTANTIATE_LINEAR(T)                                                                            \
  template void linear_forward<T>(const Context&, T*, const T*, const T*, const T*, int, int, int);          \
  template void linear_gelu_forward<T>(const Context&, T*, T*, const T*, const T*, const T*, int, int, int); \
  template void linear_backward<T>(const Context&, T*, float*, float*, const T*, const T*, const T*, int,    \
                                   int, int);                                                                \
  template void linear_forward_columns<T>(const Context&, T*, const T*, const T*, const T*, int, int, int,   \
                                          int, int);                                                         \
  template void linear_backward_columns<T>(const Context&, T*, float*, float*, const T*, const T*, const T*, \
                                           int, int, int, int, int);
GPT_INSTANTIATE_LINEAR(float)
GPT_INSTANTIATE_LINEAR(__half)
GPT_INSTANTIATE_LINEAR(__nv_bfloat16)
#undef GPT_INSTANTIATE_LINEAR

}  // namespace gpt::cuda
